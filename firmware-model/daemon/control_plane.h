// The control plane: client contexts and the device-ABI control operations
// (docs/device-abi.md §2) answered through the transport backend. It owns
// the clients (one per connection), their objects and the per-connection
// and per-user limits, and asks the queue pump for each CQ's and QP's rings.
// Every refusal is an errno with a reason, and counted (docs/security.md).
// Single-threaded: every method runs on the daemon's loop thread.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "firmware-model/daemon/client_memory.h"
#include "firmware-model/daemon/cm_role.h"
#include "firmware-model/daemon/clock.h"
#include "firmware-model/daemon/daemon_counters.h"
#include "firmware-model/daemon/queue_pump.h"
#include "firmware-model/engine/engine.h"
#include "firmware-model/hw/transport_backend.h"
#include "firmware-model/uapi/metaroce_abi.h"

namespace metaroce::daemon {

struct ClientLimits {
  uint32_t max_pd = 1024, max_mr = 16384, max_cq = 1024, max_qp = 1024;
  uint32_t max_ah = 16384;  // UD address handles (the device has fw::DeviceCaps::max_ah)
  uint32_t max_srq = 1024;
  uint32_t max_mw = 16384;  // memory windows (the device has fw::DeviceCaps::max_mw)
};

// Limits per user (uid), summed over all of that user's connections: the
// engine's tables are device-wide, so per-connection limits alone let one
// user with a few connections take every QP (docs/daemon.md §Limits).
struct UserLimits {
  uint32_t max_pd = 2048, max_mr = 32768, max_cq = 2048, max_qp = 2048;
  uint32_t max_srq = 2048;
  uint32_t max_mw = 32768;  // mw2: memory windows (each is engine table memory)
  uint32_t max_connections = 256;
  uint64_t max_ring_bytes = uint64_t{1} << 30;  // CQ and QP ring memory
};

struct DeviceConfig {
  std::string ibdev = "metaroce0";
  uint64_t node_guid = 0;
  fw::EngineConfig engine;
  ClientLimits limits;
  UserLimits user_limits;
  uint32_t ifindex = 0;
  uint32_t gid_tbl_len = 16;  // gids/I files the sysfs tree publishes
  uint64_t link_bps = 25'000'000'000;
  CmLimits cm_limits;
  LinkInterface* link = nullptr;  // next hops for rdma_cm address resolution
};

class ControlPlane {
 public:
  ControlPlane(const DeviceConfig& config, int doorbell_fd, hw::TransportBackend& backend,
               QueuePump& pump, DaemonCounters& counters, const MonotonicClock& clock);
  ~ControlPlane();  // closes every client

  struct Client {
    fw::OwnerId id = 0;
    pid_t pid = -1;
    std::unique_ptr<ClientMemory> memory;  // its address space, bound at connect
    uid_t uid = 0;
    int async_fd = -1;  // our end of the async event socketpair
    std::set<uint32_t> pds, mrs, cqs, qps, ahs, srqs, mws;
    uint64_t ring_bytes = 0;  // memory of its CQ and QP rings
  };
  // memory: bound to the connecting process (ClientMemory::bind_peer).
  // Both return nullptr with *why set when the uid is at its connection limit
  // (or, by pid, the process cannot be bound).
  Client* open_client(std::unique_ptr<ClientMemory> memory, uid_t uid, int async_fd,
                      std::string* why = nullptr);
  // The process pid as it is now (in-process clients: the daemon's tests).
  Client* open_client(pid_t pid, uid_t uid, int async_fd, std::string* why = nullptr);
  void close_client(fw::OwnerId id);  // tears down everything it owned

  struct Request {
    uint16_t op = 0;
    std::span<const uint8_t> body;
    std::vector<int> fds;  // received with the request (owned by the caller)
  };
  struct Reply {
    int err = 0;
    std::string reason;
    std::vector<uint8_t> body;
    std::vector<int> fds;  // sent with the reply, then closed by the caller
  };
  void handle(Client& c, const Request& req, Reply* reply);
  // Device-wide queries from inside the daemon (no client context).
  void handle_internal(const Request& req, Reply* reply) {
    Client none;
    handle(none, req, reply);
  }

  // A client's address space (the soft NIC's DMA) and async socket (the
  // queue pump's events); nullptr / -1 when it is gone.
  ClientMemory* memory_of(fw::OwnerId id) const;
  int async_fd_of(fw::OwnerId id) const;

  // ---- port ----
  void set_port(const fw::PortInfo& port);  // to the backend, and QUERY_PORT's answer
  void port_event(bool up);  // async IBV_EVENT_PORT_ACTIVE / PORT_ERR to every client

  // The connection manager that serves MROCE_OP_UCMA_* (nullptr: refused).
  void set_cm(CmRole* cm) { cm_ = cm; }

 private:
  // What one uid holds over all its connections (checked against UserLimits).
  struct UserUsage {
    uint32_t pds = 0, mrs = 0, cqs = 0, qps = 0, srqs = 0, mws = 0, connections = 0;
    uint64_t ring_bytes = 0;
  };

  int check_channel_fd(int fd, std::string* why);
  // 0, or ENOMEM with the reason naming the limit and the option to raise.
  int check_limits(const Client& c, const char* what, size_t have, uint32_t client_max,
                   uint32_t UserUsage::*used, uint32_t UserLimits::*user_max, Reply* out);
  int check_ring_bytes(const Client& c, uint64_t bytes, Reply* out);
  int not_ours(int err, const char* what, uint32_t handle, Reply* out);
  void forget_ring_bytes(Client& c, uint64_t bytes);
  UserUsage& usage(const Client& c) { return users_[c.uid]; }

  // control ops
  int op_open(Client& c, const Request& r, Reply* out);
  int op_query_port(Client& c, const Request& r, Reply* out);
  int op_alloc_pd(Client& c, const Request& r, Reply* out);
  int op_dealloc_pd(Client& c, const Request& r, Reply* out);
  int op_reg_mr(Client& c, const Request& r, Reply* out);
  int op_dereg_mr(Client& c, const Request& r, Reply* out);
  int op_create_cq(Client& c, const Request& r, Reply* out);
  int op_destroy_cq(Client& c, const Request& r, Reply* out);
  int op_create_qp(Client& c, const Request& r, Reply* out);
  int op_modify_qp(Client& c, const Request& r, Reply* out);
  int op_query_qp(Client& c, const Request& r, Reply* out);
  int op_destroy_qp(Client& c, const Request& r, Reply* out);
  int op_query_counters(Client& c, const Request& r, Reply* out);
  int op_list_qps(Client& c, const Request& r, Reply* out);
  int op_query_qp_transport(Client& c, const Request& r, Reply* out);
  // ud: address handles (control_plane_ud.cc)
  int op_create_ah(Client& c, const Request& r, Reply* out);
  int op_destroy_ah(Client& c, const Request& r, Reply* out);
  int op_mcast(Client& c, const Request& r, Reply* out, bool attach);
  // A controlled Q_Key (high bit set) only for root, as the kernel's
  // CAP_NET_RAW rule; EPERM with the reason otherwise.
  int check_qkey(const Client& c, const mroce_qp_attr& a, Reply* out);
  // Shared receive queues (control_plane_srq.cc)
  int op_create_srq(Client& c, const Request& r, Reply* out);
  int op_alloc_mw(Client& c, const Request& r, Reply* out);    // control_plane_mw.cc
  int op_dealloc_mw(Client& c, const Request& r, Reply* out);
  int op_modify_srq(Client& c, const Request& r, Reply* out);
  int op_query_srq(Client& c, const Request& r, Reply* out);
  int op_destroy_srq(Client& c, const Request& r, Reply* out);
  int check_qp_srq(const Client& c, uint32_t srqn, Reply* out);
  int op_query_device_ex(Client& c, const Request& r, Reply* out);
  mroce_device_attr device_attr() const;
  mroce_port_attr port_attr() const;

  DeviceConfig config_;
  int doorbell_fd_;
  hw::TransportBackend& backend_;
  QueuePump& pump_;
  DaemonCounters& counters_;
  const MonotonicClock& clock_;
  fw::PortInfo port_;  // as last set
  std::map<fw::OwnerId, Client> clients_;
  fw::OwnerId next_client_ = 1;
  std::map<uid_t, UserUsage> users_;
  CmRole* cm_ = nullptr;
};

}  // namespace metaroce::daemon
