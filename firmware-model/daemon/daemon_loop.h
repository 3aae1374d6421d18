// metaroced's event loop (docs/daemon.md §Loop): one thread that polls
// packets, rings, timers and the control plane while there is work, spins
// a little when idle (waking an idle vCPU costs ~35 us here), then sleeps
// in Asio until a packet, a doorbell, a control message or the engine's
// next deadline.
#pragma once

#include <utility>

#include <boost/asio.hpp>
#include <functional>

#include "firmware-model/daemon/device.h"

namespace metaroce::daemon {

struct LoopOptions {
  uint64_t spin_ns = 100'000;
  uint64_t max_sleep_ns = 100'000'000;
  uint64_t busy_horizon_ns = 2'000'000;  // stay awake while a deadline is this close
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
