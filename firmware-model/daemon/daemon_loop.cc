#include "firmware-model/daemon/daemon_loop.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>

namespace metaroce::daemon {

namespace asio = boost::asio;

DaemonLoop::DaemonLoop(asio::io_context& io, Device& device, int doorbell_fd, int extra_fd,
                       std::function<void()> on_extra, const LoopOptions& options)
    : io_(io),
      device_(device),
      doorbell_(io, dup(doorbell_fd)),
      packets_(io),
      extra_(io),
      on_extra_(std::move(on_extra)),
      options_(options) {
  if (device.wait_fd() >= 0) packets_.assign(dup(device.wait_fd()));
  if (extra_fd >= 0) extra_.assign(dup(extra_fd));
  options_.control_every = std::max(1u, options_.control_every);
}

// The waits are armed right before a sleep, not kept queued while busy:
// Asio arms a wait with EPOLL_CTL_MOD, which reports a descriptor that is
// readable at that moment (level), so a frame or doorbell that came after
// the last pass wakes the sleep at once; a wait kept queued would fire on
// every poll while frames sit in the rx ring. Netlink is watched while
// busy too (its handler drains it).
void DaemonLoop::arm_waits() {
  if (!doorbell_armed_) {
    doorbell_armed_ = true;
    doorbell_.async_wait(asio::posix::descriptor::wait_read,
                         [this](const boost::system::error_code&) {
                           doorbell_armed_ = false;
                           uint64_t v;
                           while (::read(doorbell_.native_handle(), &v, sizeof(v)) == sizeof(v)) {
                           }
                         });
  }
  if (packets_.is_open() && !packets_armed_) {
    packets_armed_ = true;
    packets_.async_wait(asio::posix::descriptor::wait_read,
                        [this](const boost::system::error_code&) { packets_armed_ = false; });
  }
  if (extra_.is_open() && !extra_armed_) {
    extra_armed_ = true;
    extra_.async_wait(asio::posix::descriptor::wait_read,
                      [this](const boost::system::error_code& ec) {
                        extra_armed_ = false;
                        if (ec) return;
                        if (on_extra_) on_extra_();
                        arm_waits();
                      });
  }
}

void DaemonLoop::run() {
  arm_waits();
  fw::Time idle_since = device_.read_clock();
  uint32_t pass = 0;
  while (!stop_) {
    int work = device_.poll_once();
    if (work == 0 && options_.after_idle_pass) options_.after_idle_pass();
    // The control plane, netlink and the waits' handlers: every
    // control_every passes, busy or idle (each poll is a system call).
    if (++pass % options_.control_every == 0) {
      work += static_cast<int>(io_.poll());
      if (stop_) break;
    }
    fw::Time now = device_.read_clock();
    if (work) {
      idle_since = now;
      continue;
    }
    if (may_sleep(now, idle_since)) {
      sleep(now);
      idle_since = device_.read_clock();
    }
  }
}

bool DaemonLoop::may_sleep(fw::Time now, fw::Time idle_since) const {
  if (options_.dedicated || now - idle_since < options_.spin_ns) return false;
  // While traffic is in flight (a retransmission or ACK deadline is near)
  // the NIC stays awake: a sleeping NIC adds a wake-up (~35 us here) to
  // every round trip, and delay-based congestion control read that as
  // queueing: at a small window every packet paid it, the RTT grew as the
  // rate fell, and the window collapsed to one packet.
  fw::Time deadline = device_.next_deadline();
  return deadline == fw::kNever || deadline > now + options_.busy_horizon_ns;
}

// Announce the sleep on every ring and look at them once more (the
// doorbell protocol, metaroce_abi.h), then wait for whichever comes first:
// a frame, a doorbell, a control message, netlink or the next deadline.
void DaemonLoop::sleep(fw::Time now) {
  if (!device_.prepare_sleep()) return;
  arm_waits();
  uint64_t wait_ns = options_.max_sleep_ns;
  fw::Time deadline = device_.next_deadline();
  if (deadline != fw::kNever) wait_ns = deadline > now ? std::min(wait_ns, deadline - now) : 0;
  if (wait_ns > 0) {
    sleeps_++;
    io_.run_one_for(std::chrono::nanoseconds(wait_ns));
  }
  device_.end_sleep();
}

}  // namespace metaroce::daemon
