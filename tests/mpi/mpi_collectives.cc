// MPI collectives with data verification and nccl-tests figures (issue 11).
//
// For each size from --min-bytes to --max-bytes (times --factor), runs
// MPI_Allreduce (float sum) and MPI_Alltoall (int32), first once with its
// result checked element by element on every rank, then timed. Prints one
// row per (collective, size), as nccl-tests does:
//   algbw = size / time;  busbw = algbw * 2(n-1)/n (allreduce), (n-1)/n (alltoall)
// where size is the bytes of one rank's buffer and time the slowest rank's
// mean per call. A wrong element, or a rank that fails, makes every rank
// (through mpirun) exit non-zero. --fail-rank R: rank R exits(3) after the
// first collective, so a test can check that a rank's failure fails the job;
// --stall-rank R: rank R stops there forever (a hang the test's wall-clock
// deadline must end).
//
// The last line states the bytes that must have crossed between two hosts
// holding half the ranks each (a lower bound the e2e test compares with the
// daemons' counters): per allreduce call the size (each host's result
// depends on every element of the other's input), per alltoall call
// n/2 * size (each rank sends size/n to each of the n/2 ranks on the other
// host).
#define OMPI_SKIP_MPICXX 1
#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <unistd.h>
#include <vector>

namespace {

struct Options {
  std::size_t min_bytes = 8;
  std::size_t max_bytes = 64u << 20;
  std::size_t factor = 8;
  std::size_t budget_bytes = 128u << 20;  // per (collective, size): iters = budget / size
  int max_iters = 50;
  int warmup = 1;
  int fail_rank = -1;
  int stall_rank = -1;
  bool allreduce = true;
  bool alltoall = true;
};

struct Job {
  int rank = 0;
  int size = 1;
  Options opt;
  std::uint64_t cross_host_bytes = 0;
  int fail_countdown = 1;  // collectives until --fail-rank or --stall-rank acts
};

[[noreturn]] void die(const Job& job, const char* what) {
  std::fprintf(stderr, "rank %d: %s\n", job.rank, what);
  MPI_Abort(MPI_COMM_WORLD, 2);
  std::exit(2);
}

bool parse_size(const char* s, std::size_t* out) {
  char* end = nullptr;
  unsigned long long v = std::strtoull(s, &end, 10);
  if (end == s) return false;
  switch (*end) {
    case 'K': v <<= 10; ++end; break;
    case 'M': v <<= 20; ++end; break;
    case 'G': v <<= 30; ++end; break;
    default: break;
  }
  if (*end != '\0' || v == 0) return false;
  *out = static_cast<std::size_t>(v);
  return true;
}

bool parse_options(int argc, char** argv, Options* o) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : nullptr;
    bool ok = v != nullptr;
    if (a == "--min-bytes" && ok) ok = parse_size(v, &o->min_bytes);
    else if (a == "--max-bytes" && ok) ok = parse_size(v, &o->max_bytes);
    else if (a == "--factor" && ok) ok = parse_size(v, &o->factor) && o->factor >= 2;
    else if (a == "--budget-bytes" && ok) ok = parse_size(v, &o->budget_bytes);
    else if (a == "--max-iters" && ok) o->max_iters = std::max(1, std::atoi(v));
    else if (a == "--warmup" && ok) o->warmup = std::max(0, std::atoi(v));
    else if (a == "--fail-rank" && ok) o->fail_rank = std::atoi(v);
    else if (a == "--stall-rank" && ok) o->stall_rank = std::atoi(v);
    else if (a == "--only" && ok) { o->allreduce = std::strcmp(v, "allreduce") == 0;
                                    o->alltoall = std::strcmp(v, "alltoall") == 0;
                                    ok = o->allreduce || o->alltoall; }
    else ok = false;
    if (!ok) {
      std::fprintf(stderr, "mpi_collectives: bad or unknown option '%s'\n"
                   "usage: mpi_collectives [--min-bytes N[K|M|G]] [--max-bytes N] [--factor F]\n"
                   "  [--budget-bytes N] [--max-iters N] [--warmup N] [--only allreduce|alltoall]\n"
                   "  [--fail-rank R] [--stall-rank R]\n", argv[i]);
      return false;
    }
    ++i;
  }
  return o->min_bytes <= o->max_bytes;
}

// After the first collective: the failure or hang a test asked for.
void maybe_fail(Job& job) {
  if (--job.fail_countdown != 0) return;
  if (job.rank == job.opt.fail_rank) {
    std::fprintf(stderr, "rank %d: failing on purpose (--fail-rank)\n", job.rank);
    std::fflush(stderr);
    _exit(3);
  }
  if (job.rank == job.opt.stall_rank) {
    std::fprintf(stderr, "rank %d: stalling on purpose (--stall-rank)\n", job.rank);
    std::fflush(stderr);
    for (;;) pause();
  }
}

// ---- allreduce: float sum; every input a small integer, so sums are exact.
float allreduce_input(int rank, std::size_t i) { return static_cast<float>(rank + 1 + i % 13); }

float allreduce_expected(int nranks, std::size_t i) {
  return static_cast<float>(nranks * (nranks + 1) / 2 + nranks * static_cast<int>(i % 13));
}

void allreduce_once(const std::vector<float>& in, std::vector<float>& out) {
  MPI_Allreduce(in.data(), out.data(), static_cast<int>(in.size()), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
}

std::size_t allreduce_check(const Job& job, std::vector<float>& in, std::vector<float>& out) {
  for (std::size_t i = 0; i < in.size(); ++i) in[i] = allreduce_input(job.rank, i);
  std::fill(out.begin(), out.end(), -1.0f);
  allreduce_once(in, out);
  std::size_t bad = 0;
  for (std::size_t i = 0; i < out.size(); ++i) bad += out[i] != allreduce_expected(job.size, i);
  return bad;
}

// ---- alltoall: int32; element j of the block from rank s to rank d names both.
std::int32_t alltoall_value(int src, int dst, std::size_t j) {
  return static_cast<std::int32_t>((static_cast<std::uint32_t>(src) * 2654435761u) ^
                                   (static_cast<std::uint32_t>(dst) * 40503u) ^ static_cast<std::uint32_t>(j));
}

void alltoall_once(const std::vector<std::int32_t>& in, std::vector<std::int32_t>& out, int block) {
  MPI_Alltoall(in.data(), block, MPI_INT32_T, out.data(), block, MPI_INT32_T, MPI_COMM_WORLD);
}

std::size_t alltoall_check(const Job& job, std::vector<std::int32_t>& in, std::vector<std::int32_t>& out,
                           std::size_t block) {
  for (int d = 0; d < job.size; ++d)
    for (std::size_t j = 0; j < block; ++j) in[d * block + j] = alltoall_value(job.rank, d, j);
  std::fill(out.begin(), out.end(), -1);
  alltoall_once(in, out, static_cast<int>(block));
  std::size_t bad = 0;
  for (int s = 0; s < job.size; ++s)
    for (std::size_t j = 0; j < block; ++j) bad += out[s * block + j] != alltoall_value(s, job.rank, j);
  return bad;
}

// ---- timing and reporting

int iterations(const Options& o, std::size_t bytes) {
  std::size_t n = o.budget_bytes / bytes;
  return static_cast<int>(std::clamp<std::size_t>(n, 1, static_cast<std::size_t>(o.max_iters)));
}

template <typename Call>
double slowest_mean_seconds(const Job& job, int iters, Call call) {
  for (int i = 0; i < job.opt.warmup; ++i) call();
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  for (int i = 0; i < iters; ++i) call();
  double mine = (MPI_Wtime() - t0) / iters, slowest = 0;
  MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return slowest;
}

// Every rank learns whether any rank saw a wrong element.
void require_all_correct(const Job& job, const char* op, std::size_t bytes, std::size_t bad) {
  unsigned long long mine = bad, total = 0;
  MPI_Allreduce(&mine, &total, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
  if (total == 0) return;
  char msg[160];
  std::snprintf(msg, sizeof msg, "%s of %zu bytes: %llu wrong elements here, %llu on all ranks",
                op, bytes, mine, total);
  die(job, msg);
}

void report(const Job& job, const char* op, std::size_t bytes, int iters, double secs, double bus_factor) {
  if (job.rank != 0) return;
  double algbw = static_cast<double>(bytes) / secs / 1e9;
  std::printf("%-10s %12zu %6d %12.2f %10.4f %10.4f  ok\n", op, bytes, iters, secs * 1e6, algbw,
              algbw * bus_factor);
  std::fflush(stdout);
}

void run_allreduce(Job& job, std::size_t bytes) {
  std::size_t count = std::max<std::size_t>(1, bytes / sizeof(float));
  bytes = count * sizeof(float);
  std::vector<float> in(count), out(count);
  require_all_correct(job, "allreduce", bytes, allreduce_check(job, in, out));
  maybe_fail(job);
  int iters = iterations(job.opt, bytes);
  double secs = slowest_mean_seconds(job, iters, [&] { allreduce_once(in, out); });
  job.cross_host_bytes += static_cast<std::uint64_t>(bytes) * (1 + job.opt.warmup + iters);
  report(job, "allreduce", bytes, iters, secs, 2.0 * (job.size - 1) / job.size);
}

void run_alltoall(Job& job, std::size_t bytes) {
  std::size_t block = std::max<std::size_t>(1, bytes / sizeof(std::int32_t) / job.size);
  bytes = block * job.size * sizeof(std::int32_t);
  std::vector<std::int32_t> in(block * job.size), out(block * job.size);
  require_all_correct(job, "alltoall", bytes, alltoall_check(job, in, out, block));
  maybe_fail(job);
  int iters = iterations(job.opt, bytes);
  double secs = slowest_mean_seconds(job, iters, [&] { alltoall_once(in, out, static_cast<int>(block)); });
  job.cross_host_bytes += static_cast<std::uint64_t>(bytes) * job.size / 2 * (1 + job.opt.warmup + iters);
  report(job, "alltoall", bytes, iters, secs, static_cast<double>(job.size - 1) / job.size);
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  Job job;
  MPI_Comm_rank(MPI_COMM_WORLD, &job.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &job.size);
  if (!parse_options(argc, argv, &job.opt)) die(job, "bad options");
  if (job.rank == 0) {
    std::printf("# mpi_collectives: %d ranks; algbw, busbw in GB/s (nccl-tests definitions)\n", job.size);
    std::printf("%-10s %12s %6s %12s %10s %10s  %s\n", "# op", "size(B)", "iters", "time(us)", "algbw",
                "busbw", "check");
  }
  for (std::size_t bytes = job.opt.min_bytes;; bytes *= job.opt.factor) {
    bytes = std::min(bytes, job.opt.max_bytes);
    if (job.opt.allreduce) run_allreduce(job, bytes);
    if (job.opt.alltoall) run_alltoall(job, bytes);
    if (bytes == job.opt.max_bytes) break;
  }
  if (job.rank == 0)
    std::printf("# cross-host payload (lower bound, 2 hosts): %llu bytes\n",
                static_cast<unsigned long long>(job.cross_host_bytes));
  MPI_Finalize();
  return 0;
}
