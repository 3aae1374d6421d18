// One MetaRoCE device (metaroceN) inside the soft-NIC daemon: hosts a
// transport engine and gives it the outside world (docs/daemon.md):
//   - packets through a PacketIo backend (AF_XDP / AF_PACKET),
//   - DMA through ProcessDma,
//   - doorbells and completions through shared-memory rings,
//   - control-plane requests from clients (ControlServer calls handle()).
// Single-threaded: every method runs on the daemon's loop thread.
#pragma once

#include <sys/types.h>

#include <array>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "firmware-model/daemon/client_memory.h"
#include "firmware-model/daemon/dma.h"
#include "firmware-model/daemon/io/packet_io.h"
#include "firmware-model/daemon/shm_ring.h"
#include "firmware-model/engine/engine.h"
#include "firmware-model/uapi/metaroce_abi.h"

namespace metaroce::daemon {

// Next-hop resolution and local link facts (netlink in the daemon).
class LinkInterface {
 public:
  virtual ~LinkInterface() = default;
  // The MAC to send to for destination ip; false when not (yet) known
  // (resolution has been triggered; the engine's retransmission retries).
  virtual bool resolve(const proto::IpAddr& ip, proto::MacAddr* mac) = 0;
  virtual proto::MacAddr local_mac() const = 0;
};

struct ClientLimits {
  uint32_t max_pd = 1024, max_mr = 16384, max_cq = 1024, max_qp = 1024;
};

struct DeviceConfig {
  std::string ibdev = "metaroce0";
  uint64_t node_guid = 0;
  fw::EngineConfig engine;
  ClientLimits limits;
  uint32_t ifindex = 0;
  uint32_t gid_tbl_len = 16;  // gids/I files the sysfs tree publishes
  uint64_t link_bps = 25'000'000'000;
};

struct DaemonCounters {
  uint64_t ctrl_requests = 0, ctrl_errors = 0, ctrl_malformed = 0;
  uint64_t clients_opened = 0, clients_closed = 0;
  uint64_t tx_drop_no_neighbor = 0, tx_drop_ring_full = 0, tx_drop_too_big = 0;
  uint64_t reg_mr_refused = 0;  // range not mapped with that access, or unsafe memory
  uint64_t wqe_rejected = 0;     // ring entries the engine refused (error CQE written)
  uint64_t cq_events = 0, cq_event_write_failed = 0;
  uint64_t async_events = 0, async_event_write_failed = 0;
  uint64_t doorbell_wakeups = 0;
};

class Device : fw::ClockInterface,
               fw::PacketPortInterface,
               fw::EventSinkInterface,
               fw::RandomInterface {
 public:
  Device(const DeviceConfig& config, io::PacketIo* io, LinkInterface* link, int doorbell_fd);
  ~Device() override;

  // ---- clients (control plane) ----
  struct Client {
    fw::OwnerId id = 0;
    pid_t pid = -1;
    std::unique_ptr<ClientMemory> memory;  // its address space, bound at connect
    uid_t uid = 0;
    int async_fd = -1;  // our end of the async event socketpair
    std::set<uint32_t> pds, mrs, cqs, qps;
  };
  // memory: bound to the connecting process (ClientMemory::bind_peer).
  Client* open_client(std::unique_ptr<ClientMemory> memory, uid_t uid, int async_fd);
  // The process pid as it is now (in-process clients: the daemon's tests).
  Client* open_client(pid_t pid, uid_t uid, int async_fd);
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

  // ---- data path ----
  // One pass of the loop: rx, rings, timers, tx. Returns work done (0: idle).
  int poll_once();
  // Announce sleep on every ring (nic_sleeping), then re-check: returns
  // false if work arrived meanwhile (do not sleep).
  bool prepare_sleep();
  void end_sleep();
  fw::Time next_deadline() const { return engine_->next_deadline(); }

  // ---- port ----
  void set_port(const fw::PortInfo& port);
  void port_event(bool up);  // async IBV_EVENT_PORT_ACTIVE / PORT_ERR to every client

  const fw::Engine& engine() const { return *engine_; }
  const DaemonCounters& counters() const { return counters_; }
  const DmaStats& dma_stats() const { return dma_.stats(); }
  io::PacketIo* packet_io() const { return io_; }
  fw::Time now() const override;
  fw::Time read_clock() const;  // a fresh reading (also refreshes now())

 private:
  struct CqState {
    fw::OwnerId owner = 0;
    uint64_t user_handle = 0;
    int channel_fd = -1;
    ShmRegion shm;
    RingView ring;
    uint32_t producer = 0;   // local copy; published in flush_completions()
    bool dirty = false;
  };
  struct QpState {
    fw::OwnerId owner = 0;
    uint64_t user_handle = 0;
    uint32_t send_cqn = 0;
    ShmRegion shm;
    RingView sq, rq;
  };

  // HAL
  void send(const fw::OutPacket& p) override;
  bool complete(uint32_t cqn, const fw::Completion& wc) override;
  void async_event(fw::EventType type, uint32_t element) override;
  // Keys and path seeds: getrandom(2), read in batches (MR keys must not
  // be guessable from earlier ones, docs/engine.md §Objects).
  uint64_t next() override;

  int poll_rx();
  int poll_rings();
  int drain_sq(uint32_t qpn, QpState& qp);
  int drain_rq(uint32_t qpn, QpState& qp);
  void flush_completions();
  void send_async(Client& c, uint64_t element, fw::EventType type);

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
  mroce_device_attr device_attr() const;
  mroce_port_attr port_attr() const;

  DeviceConfig config_;
  io::PacketIo* io_;
  LinkInterface* link_;
  int doorbell_fd_;
  std::array<uint64_t, 64> random_{};
  size_t random_left_ = 0;
  ProcessDma dma_;
  std::unique_ptr<fw::Engine> engine_;
  std::map<fw::OwnerId, Client> clients_;
  fw::OwnerId next_client_ = 1;
  std::map<uint32_t, CqState> cqs_;
  std::map<uint32_t, QpState> qps_;
  DaemonCounters counters_;
  std::vector<io::RxFrame> rx_batch_;
  std::vector<uint32_t> dirty_cqs_;
  std::deque<std::vector<uint8_t>> loopback_;  // frames to our own GIDs
  static constexpr uint32_t kNowReuse = 16;
  mutable fw::Time now_ = 0;
  mutable uint32_t now_reads_ = 0;
};

}  // namespace metaroce::daemon
