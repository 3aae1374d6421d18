#include "tools/impair/forwarder.h"

#include <signal.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>

namespace metaroce::impair {

namespace {
constexpr uint64_t kNever = std::numeric_limits<uint64_t>::max();
constexpr uint64_t kSignalCheckNs = 1'000'000;  // while busy, look at signals every 1 ms
constexpr int kBusyRetries = 64;                 // untouched frames: egress-full retries
}  // namespace

uint64_t monotonic_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

Forwarder::Forwarder(const Config& cfg) : cfg_(cfg) {}

Forwarder::~Forwarder() {
  for (int fd : {epfd_, timerfd_, sigfd_})
    if (fd >= 0) close(fd);
}

std::unique_ptr<Forwarder> Forwarder::open(const Config& cfg, std::string* why) {
  std::unique_ptr<Forwarder> f(new Forwarder(cfg));
  if (!(f->a_ = Leg::open(cfg.leg_a, why)) || !(f->b_ = Leg::open(cfg.leg_b, why))) return nullptr;
  // Each direction draws from its own stream: changing one side's options
  // never changes the other side's decisions.
  f->ab_ = std::make_unique<Direction>(cfg.dir[0], cfg.all_traffic, cfg.udp_port, Leg::kPrefix, cfg.seed * 2 + 1);
  f->ba_ = std::make_unique<Direction>(cfg.dir[1], cfg.all_traffic, cfg.udp_port, Leg::kPrefix, cfg.seed * 2 + 2);
  sigset_t set;
  sigemptyset(&set);
  for (int s : {SIGUSR1, SIGTERM, SIGINT}) sigaddset(&set, s);
  sigprocmask(SIG_BLOCK, &set, nullptr);
  f->sigfd_ = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
  f->timerfd_ = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  f->epfd_ = epoll_create1(EPOLL_CLOEXEC);
  if (f->sigfd_ < 0 || f->timerfd_ < 0 || f->epfd_ < 0) {
    *why = std::string("signalfd/timerfd/epoll: ") + strerror(errno);
    return nullptr;
  }
  for (int fd : {f->a_->fd(), f->b_->fd(), f->sigfd_, f->timerfd_}) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    epoll_ctl(f->epfd_, EPOLL_CTL_ADD, fd, &ev);
  }
  prctl(PR_SET_TIMERSLACK, 1UL);  // departures to the microsecond, not the default 50 us
  return f;
}

// Sends untouched frames; the egress socket being full is retried briefly
// (the frames live in the receive buffers, which the next rx() reuses).
void Forwarder::send_now(const Path& p, std::span<iovec> frames) {
  size_t i = 0;
  int busy = 0;
  while (i < frames.size()) {
    int r = p.out->tx(frames.subspan(i));
    if (r > 0) {
      for (int k = 0; k < r; ++k) p.dir->count_sent(frames[i + k].iov_len - Leg::kPrefix);
      i += static_cast<size_t>(r);
      busy = 0;
    } else if ((r == -EAGAIN || r == -ENOBUFS) && ++busy < kBusyRetries) {
      continue;
    } else {
      auto& c = p.dir->counters();
      ++(r == -EAGAIN || r == -ENOBUFS ? c.dropped_tx_busy : c.dropped_tx_error);
      ++i;
      busy = 0;
    }
  }
}

bool Forwarder::pump(const Path& p, uint64_t now, int* err) {
  std::vector<std::span<const uint8_t>> frames;
  int n = p.in->rx(&frames, &p.dir->counters().dropped_rx_truncated);
  if (n < 0) {
    *err = -n;
    return false;
  }
  iovec pass[Leg::kBatch];
  size_t np = 0;
  for (auto f : frames) {
    if (p.dir->on_frame(now, f) == Direction::Verdict::kForward)
      pass[np++] = {const_cast<uint8_t*>(f.data()), f.size()};
  }
  if (np) send_now(p, {pass, np});
  return n > 0;
}

// Sends held frames that are due; what the egress cannot take now stays held.
bool Forwarder::drain(const Path& p, uint64_t now) {
  bool any = false;
  Held h[Leg::kBatch];
  iovec iov[Leg::kBatch];
  for (;;) {
    size_t n = 0;
    while (n < Leg::kBatch && p.dir->pop_due(now, &h[n])) {
      iov[n] = {h[n].bytes.data(), h[n].bytes.size()};
      ++n;
    }
    if (n == 0) return any;
    any = true;
    size_t i = 0;
    while (i < n) {
      int r = p.out->tx({iov + i, n - i});
      if (r == -EAGAIN || r == -ENOBUFS) break;
      size_t done = r > 0 ? static_cast<size_t>(r) : 1;
      for (size_t k = i; k < i + done; ++k) {
        if (r > 0) p.dir->count_sent(h[k].bytes.size() - Leg::kPrefix);
        else ++p.dir->counters().dropped_tx_error;
        p.dir->recycle(std::move(h[k].bytes));
      }
      i += done;
    }
    for (size_t k = n; k-- > i;) p.dir->unpop(std::move(h[k]));
    if (i < n) return any;
  }
}

uint64_t Forwarder::next_deadline() const {
  uint64_t d = std::min(ab_->next_due_ns(), ba_->next_due_ns());
  if (cfg_.stats_interval_ns) d = std::min(d, next_stats_ns_);
  return d;
}

void Forwarder::sleep_until(uint64_t deadline) {
  itimerspec its{};
  if (deadline != kNever) {
    its.it_value.tv_sec = static_cast<time_t>(deadline / 1'000'000'000ull);
    its.it_value.tv_nsec = static_cast<long>(deadline % 1'000'000'000ull);
  }
  timerfd_settime(timerfd_, TFD_TIMER_ABSTIME, &its, nullptr);  // zero: disarmed
  epoll_event ev[4];
  epoll_wait(epfd_, ev, 4, -1);
  uint64_t expirations;
  while (read(timerfd_, &expirations, sizeof expirations) > 0) {
  }
}

bool Forwarder::handle_signals() {
  signalfd_siginfo si;
  while (read(sigfd_, &si, sizeof si) == sizeof si) {
    if (si.ssi_signo == SIGUSR1) write_stats();
    else stop_ = true;
  }
  return !stop_;
}

int Forwarder::run() {
  const Path ab{a_.get(), b_.get(), ab_.get()}, ba{b_.get(), a_.get(), ba_.get()};
  uint64_t now = monotonic_ns(), last_busy = now, last_sig = now;
  next_stats_ns_ = now + cfg_.stats_interval_ns;
  int err = 0;
  while (!stop_) {
    bool busy = pump(ab, now, &err) | pump(ba, now, &err);
    if (err) {
      fprintf(stderr, "mroce-impair: receive failed: %s\n", strerror(err));
      return 1;
    }
    now = monotonic_ns();
    busy |= drain(ab, now) | drain(ba, now);
    if (cfg_.stats_interval_ns && now >= next_stats_ns_) {
      write_stats();
      next_stats_ns_ = now + cfg_.stats_interval_ns;
    }
    if (now - last_sig >= kSignalCheckNs) {
      last_sig = now;
      if (!handle_signals()) break;
    }
    if (busy) last_busy = now;
    uint64_t deadline = next_deadline();
    if (busy || now - last_busy < cfg_.spin_ns || deadline <= now + cfg_.spin_ns) continue;
    sleep_until(deadline);
    now = monotonic_ns();
    if (!handle_signals()) break;
  }
  return 0;
}

namespace {
// Interface names may hold any byte but '/', ':' and whitespace.
std::string json_string(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) >= 0x20) out += c;
  }
  return out;
}
}  // namespace

std::string Forwarder::stats_json() {
  ab_->counters().dropped_rx_kernel += a_->kernel_drops();
  ba_->counters().dropped_rx_kernel += b_->kernel_drops();
  char head[320];
  snprintf(head, sizeof head, "{\"seq\": %llu, \"time_ns\": %llu, \"seed\": %llu, \"leg_a\": \"%s\", \"leg_b\": \"%s\", ",
           static_cast<unsigned long long>(++stats_seq_), static_cast<unsigned long long>(monotonic_ns()),
           static_cast<unsigned long long>(cfg_.seed), json_string(cfg_.leg_a).c_str(),
           json_string(cfg_.leg_b).c_str());
  return std::string(head) + "\"a_to_b\": " + to_json(ab_->counters()) + ", \"b_to_a\": " +
         to_json(ba_->counters()) + "}\n";
}

void Forwarder::write_stats() {
  std::string s = stats_json();
  if (cfg_.stats_path.empty()) {
    fputs(s.c_str(), stdout);
    fflush(stdout);
    return;
  }
  std::string tmp = cfg_.stats_path + ".tmp";
  FILE* f = fopen(tmp.c_str(), "w");
  if (!f || fputs(s.c_str(), f) < 0 || fclose(f) != 0 || rename(tmp.c_str(), cfg_.stats_path.c_str()) != 0)
    fprintf(stderr, "mroce-impair: cannot write %s: %s\n", cfg_.stats_path.c_str(), strerror(errno));
}

}  // namespace metaroce::impair
