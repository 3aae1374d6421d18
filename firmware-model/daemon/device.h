// One MetaRoCE device (metaroceN) inside the daemon, assembled from its
// roles (docs/daemon.md §Roles):
//   - ControlPlane (control_plane.h): client contexts, limits and the
//     device-ABI control operations, answered through the backend;
//   - QueuePump (queue_pump.h): the shared SQ/RQ/CQ rings <-> the backend,
//     and the backend's EventSink;
//   - the transport backend (hw::TransportBackend): the soft NIC (SoftNic,
//     soft_nic.h: engine, packets, DMA) or silicon, built by the one
//     BackendFactory this device is given.
// ControlServer calls handle(); DaemonLoop calls poll_once().
// Single-threaded: every method runs on the daemon's loop thread.
#pragma once

#include <algorithm>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "firmware-model/daemon/clock.h"
#include "firmware-model/daemon/cm_role.h"
#include "firmware-model/daemon/control_plane.h"
#include "firmware-model/daemon/daemon_counters.h"
#include "firmware-model/daemon/queue_pump.h"
#include "firmware-model/daemon/soft_nic.h"
#include "firmware-model/hw/transport_backend.h"

namespace metaroce::daemon {

// Builds the transport backend the device runs on: the one place where the
// software engine and a hardware backend are interchangeable.
using BackendFactory = std::function<std::unique_ptr<hw::TransportBackend>(
    const fw::EngineConfig& config, const BackendEnv& env)>;
// The soft NIC on this packet I/O (nullptr: loopback only).
BackendFactory soft_nic_backend(io::PacketIo* io, LinkInterface* link);

class Device {
 public:
  using Client = ControlPlane::Client;
  using Request = ControlPlane::Request;
  using Reply = ControlPlane::Reply;

  Device(const DeviceConfig& config, const BackendFactory& make_backend, int doorbell_fd);
  // On the soft NIC.
  Device(const DeviceConfig& config, io::PacketIo* io, LinkInterface* link, int doorbell_fd);

  // ---- clients (control plane) ----
  Client* open_client(std::unique_ptr<ClientMemory> memory, uid_t uid, int async_fd,
                      std::string* why = nullptr) {
    return control_.open_client(std::move(memory), uid, async_fd, why);
  }
  Client* open_client(pid_t pid, uid_t uid, int async_fd, std::string* why = nullptr) {
    return control_.open_client(pid, uid, async_fd, why);
  }
  void close_client(fw::OwnerId id) { control_.close_client(id); }
  void handle(Client& c, const Request& req, Reply* reply) { control_.handle(c, req, reply); }
  void handle_internal(const Request& req, Reply* reply) { control_.handle_internal(req, reply); }

  // ---- data path ----
  // One pass of the loop: rings into the backend, then the backend's own
  // work (soft NIC: rx, timers, tx, DMA, completions). Work done (0: idle).
  int poll_once();
  // Announce sleep on every ring (nic_sleeping), then re-check: returns
  // false if work arrived meanwhile or the backend has work due now.
  bool prepare_sleep();
  void end_sleep() { pump_.end_sleep(); }
  fw::Time next_deadline() const {
    return std::min(backend_->next_deadline(), cm_.next_deadline());
  }
  int wait_fd() const { return backend_->wait_fd(); }

  // ---- port ----
  void set_port(const fw::PortInfo& port) {
    control_.set_port(port);
    cm_.set_port(port);
  }
  void port_event(bool up) { control_.port_event(up); }

  std::vector<uint32_t> qp_numbers() { return backend_->qp_numbers(); }
  std::string describe_qp(uint32_t qpn) { return backend_->describe_qp(qpn); }
  const DaemonCounters& counters() const { return counters_; }
  SoftNic* soft_nic() const;  // nullptr on another backend
  const CmRole& cm() const { return cm_; }
  fw::Time now() const { return clock_.now(); }
  fw::Time read_clock() const { return clock_.read(); }  // a fresh reading

 private:
  BackendEnv backend_env();

  MonotonicClock clock_;
  DaemonCounters counters_;
  QueuePump pump_;
  CmRole cm_;  // the backend holds a pointer: built before it
  std::unique_ptr<hw::TransportBackend> backend_;
  ControlPlane control_;  // destroyed first: closing its clients uses the others
};

}  // namespace metaroce::daemon
