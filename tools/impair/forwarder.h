// The hop's event loop: frames from leg A go through Direction 0 to leg B,
// frames from leg B through Direction 1 to leg A. One thread; it polls while
// traffic flows (and --spin after it), then sleeps in epoll until a frame, a
// held frame's departure time (timerfd, CLOCK_MONOTONIC, absolute), a stats
// deadline or a signal (signalfd: SIGUSR1 writes stats, SIGTERM/SIGINT end).
#pragma once

#include <memory>
#include <string>

#include "tools/impair/config.h"
#include "tools/impair/direction.h"
#include "tools/impair/leg.h"

namespace metaroce::impair {

class Forwarder {
 public:
  // Opens both legs, the timer and the signal fd. nullptr with *why.
  static std::unique_ptr<Forwarder> open(const Config& cfg, std::string* why);
  ~Forwarder();

  // Runs until SIGTERM/SIGINT. Returns 0, or 1 after a fatal socket error.
  int run();
  // Counters of both directions as one JSON object.
  std::string stats_json();
  // Writes stats_json() to --stats (temp file + rename) or, without it, stdout.
  void write_stats();

 private:
  struct Path {
    Leg* in;
    Leg* out;
    Direction* dir;
  };
  explicit Forwarder(const Config& cfg);
  bool pump(const Path& p, uint64_t now, int* err);
  bool drain(const Path& p, uint64_t now);
  void send_now(const Path& p, std::span<iovec> frames);
  void sleep_until(uint64_t deadline_ns);
  bool handle_signals();  // false: stop
  uint64_t next_deadline() const;

  Config cfg_;
  std::unique_ptr<Leg> a_, b_;
  std::unique_ptr<Direction> ab_, ba_;
  int epfd_ = -1, timerfd_ = -1, sigfd_ = -1;
  uint64_t stats_seq_ = 0;
  uint64_t next_stats_ns_ = 0;
  bool stop_ = false;
};

uint64_t monotonic_ns();

}  // namespace metaroce::impair
