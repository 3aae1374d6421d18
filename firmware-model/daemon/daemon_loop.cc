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
}

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
                        arm_waits();  // netlink is watched while busy, too
                      });
  }
}

void DaemonLoop::run() {
  arm_waits();
  fw::Time idle_since = device_.read_clock();
  uint32_t iter = 0;
  while (!stop_) {
    int work = device_.poll_once();
    // The control plane and netlink are slow paths: poll them every 64
    // iterations while busy (each poll is a syscall).
    if ((++iter & 63) == 0 || work == 0) {
      work += static_cast<int>(io_.poll());
      if (stop_) break;
    }
    fw::Time now = device_.read_clock();
    if (work) {
      idle_since = now;
      continue;
    }
    if (now - idle_since < options_.spin_ns) continue;
    // While traffic is in flight (a retransmission or ACK deadline is near)
    // the NIC stays awake: a sleeping NIC adds a wake-up (~35 us here) to
    // every round trip, and delay-based congestion control read that as
    // queueing: at a small window every packet paid it, the RTT grew as the
    // rate fell, and the window collapsed to one packet.
    fw::Time deadline = device_.next_deadline();
    if (deadline != fw::kNever && deadline <= now + options_.busy_horizon_ns) continue;
    if (!device_.prepare_sleep()) continue;
    arm_waits();
    uint64_t wait_ns = options_.max_sleep_ns;
    if (deadline != fw::kNever) wait_ns = deadline > now ? std::min(wait_ns, deadline - now) : 0;
    if (wait_ns > 0) {
      sleeps_++;
      io_.run_one_for(std::chrono::nanoseconds(wait_ns));
    }
    device_.end_sleep();
    idle_since = device_.read_clock();
  }
}

}  // namespace metaroce::daemon
