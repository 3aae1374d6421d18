// metaroced's event loop (docs/daemon.md §The loop): one thread that polls
// packets, rings, timers and the control plane while there is work, keeps
// polling for a bounded spin budget when idle (no system call per idle
// pass: the control plane is polled every `control_every` passes), then
// sleeps in Asio until a frame, a doorbell, a control message or the
// engine's next deadline. With `dedicated` (--spin) it never sleeps: a core
// of its own, and no doorbell system call for the applications either.
#pragma once

#include <utility>

#include <boost/asio.hpp>
#include <functional>

#include "firmware-model/daemon/device.h"

namespace metaroce::daemon {

struct LoopOptions {
  uint64_t spin_ns = 100'000;            // keep polling this long after the last work
  uint64_t max_sleep_ns = 100'000'000;   // longest sleep without a deadline
  uint64_t busy_horizon_ns = 2'000'000;  // stay awake while a deadline is this close
  bool dedicated = false;                // --spin: never sleep
  uint32_t control_every = 64;           // passes between polls of the control plane
  // Tests only: runs on the loop thread right after a pass that found no
  // work, i.e. in the window between the last look at the rings and the
  // frames and the sleep (tests/ the no-lost-wake-up property).
  std::function<void()> after_idle_pass;
};

class DaemonLoop {
 public:
  DaemonLoop(boost::asio::io_context& io, Device& device, int doorbell_fd, int extra_fd,
             std::function<void()> on_extra, const LoopOptions& options);
  // Runs until stop() (from a handler, e.g. a signal).
  void run();
  void stop() { stop_ = true; }
  uint64_t sleeps() const { return sleeps_; }

 private:
  void arm_waits();
  bool may_sleep(fw::Time now, fw::Time idle_since) const;
  void sleep(fw::Time now);

  boost::asio::io_context& io_;
  Device& device_;
  boost::asio::posix::stream_descriptor doorbell_;
  boost::asio::posix::stream_descriptor packets_;
  boost::asio::posix::stream_descriptor extra_;
  std::function<void()> on_extra_;
  LoopOptions options_;
  bool stop_ = false;
  bool doorbell_armed_ = false, packets_armed_ = false, extra_armed_ = false;
  uint64_t sleeps_ = 0;
};

}  // namespace metaroce::daemon
