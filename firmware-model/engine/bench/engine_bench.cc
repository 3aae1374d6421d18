// Throughput of two engines back to back in one process: frames are built,
// parsed (ICRC included) and placed, ACKs flow back, nothing is lost. Prints
// figures; it is not a test (docs/engine.md §Performance notes).
//
//   bazel run //firmware-model/engine:engine_bench -- [message_bytes] [total_MiB] [mtu]
#include <chrono>
#include <ctime>
#include <cstdio>
#include <cstdlib>

#include "firmware-model/engine/testing/fakes.h"

using namespace metaroce::fw;

int main(int argc, char** argv) {
  uint32_t msg = argc > 1 ? static_cast<uint32_t>(std::atoi(argv[1])) : 1u << 20;
  uint64_t total = (argc > 2 ? std::atoll(argv[2]) : 1024) << 20;
  uint32_t mtu = argc > 3 ? static_cast<uint32_t>(std::atoi(argv[3])) : 4096;
  EngineConfig cfg;
  cfg.base_rtt = 10'000;
  cfg.link_bps = 100'000'000'000;
  test::Bench t(1, cfg);
  t.path_delay = {2'000, 2'000, 2'000, 2'000};
  t.connect_pair(size_t{msg} * 2 + 4096, 14, 7, 7, mtu);
  t.a.port.keep_log = t.b.port.keep_log = false;
  t.a.port.describe_packets = t.b.port.describe_packets = false;
  uint64_t posted = 0, done = 0, id = 0;
  auto start = std::chrono::steady_clock::now();
  std::clock_t cpu0 = std::clock();
  while (done < total) {
    while (posted < total && posted - done < 16ull * msg) {
      SendWr w = t.a.wr(WrOpcode::kRdmaWrite, id++, 0, msg);
      w.remote_addr = t.b.base() + msg;
      w.rkey = t.b.mr.rkey;
      if (t.a.post_send(w) != 0) break;
      posted += msg;
    }
    uint64_t before = done;
    t.run([&] {
      for (auto& c : t.a.send_cq()) {
        if (c.status != WcStatus::kSuccess) std::abort();
        done += c.byte_len;
      }
      return done > before;
    });
    if (done == before) {
      std::fprintf(stderr, "engine_bench: stalled\n");
      return 1;
    }
  }
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  double cpu = static_cast<double>(std::clock() - cpu0) / CLOCKS_PER_SEC;
  const Counters& c = t.a.engine->counters();
  const Counters& r = t.b.engine->counters();
  std::printf("engine_bench: %llu MiB in %u-byte WRITEs, mtu %u\n",
              static_cast<unsigned long long>(total >> 20), msg, mtu);
  uint64_t pkts = c.tx_packets + r.tx_packets;
  std::printf("  wall %.3f s, cpu %.3f s (one core runs both engines and the wire)\n", s, cpu);
  std::printf("  per cpu second: goodput %.2f Gbit/s, %.2f Mpps (data+ack), %.0f ns/packet\n",
              total * 8 / cpu / 1e9, pkts / cpu / 1e6, cpu * 1e9 / pkts);
  std::printf("  tx %llu data packets, %llu ACKs; retransmits %llu\n",
              static_cast<unsigned long long>(c.tx_packets),
              static_cast<unsigned long long>(r.tx_packets),
              static_cast<unsigned long long>(c.tx_retransmits));
  return 0;
}
