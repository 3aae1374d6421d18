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

// Limits per user (uid), summed over all of that user's connections: the
// engine's tables are device-wide, so per-connection limits alone let one
// user with a few connections take every QP (docs/daemon.md §Limits).
struct UserLimits {
  uint32_t max_pd = 2048, max_mr = 32768, max_cq = 2048, max_qp = 2048;
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
};

// Daemon counters, one per reason, from one table: the struct, the
// QUERY_COUNTERS names and the SIGUSR1 dump cannot disagree.
#define MROCE_DAEMON_COUNTERS(X)                                                      \
  X(ctrl_requests)                                                                    \
  X(ctrl_errors)                                                                      \
  X(ctrl_malformed)                                                                   \
  X(clients_opened)                                                                   \
  X(clients_closed)                                                                   \
  X(clients_refused_user_limit)  /* connections over --uid-max-connections */         \
  X(limit_refused_client)        /* objects refused by a per-connection limit */      \
  X(limit_refused_user)          /* objects refused by a per-uid limit */             \
  X(channel_fd_refused)          /* CREATE_CQ channel fds of a kind that can block */ \
  X(tx_drop_no_neighbor)                                                              \
  X(tx_drop_ring_full)                                                                \
  X(tx_drop_too_big)                                                                  \
  X(reg_mr_refused)              /* range not mapped with that access, or unsafe */   \
  X(ring_bad_producer)           /* SQ/RQ producer index beyond the ring: QP fatal */ \
  X(wqe_bad_sge_count)           /* num_sge above MROCE_MAX_SGE */                    \
  X(wqe_bad_inline_len)          /* inline_len above MROCE_MAX_INLINE */              \
  X(wqe_rejected)                /* ring entries refused (SQ: error CQE; RQ: none) */ \
  X(wqe_recv_in_reset)           /* receive ring entries of a QP in RESET */          \
  X(wqe_recv_refused_other)      /* receive entries refused for any other reason */   \
  X(cq_events)                                                                        \
  X(cq_event_write_failed)       /* channel full or closed: never waited for */       \
  X(async_events)                                                                     \
  X(async_event_write_failed)                                                         \
  X(doorbell_wakeups)

struct DaemonCounters {
#define MROCE_X(name) uint64_t name = 0;
  MROCE_DAEMON_COUNTERS(MROCE_X)
#undef MROCE_X
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
    // Our consumer indices. The shared header's copies are only published:
    // the client can write them too, so they are never read back.
    uint32_t sq_cons = 0, rq_cons = 0;
    bool ring_broken = false;  // a corrupted index: QP fatal, rings no longer read
  };
  // What one uid holds over all its connections (checked against UserLimits).
  struct UserUsage {
    uint32_t pds = 0, mrs = 0, cqs = 0, qps = 0, connections = 0;
    uint64_t ring_bytes = 0;
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
  bool ring_index_ok(uint32_t qpn, QpState& qp, uint32_t cons, uint32_t prod, uint32_t entries);
  int to_send_wr(const mroce_send_wqe& w, fw::SendWr* wr, uint64_t** defect);
  int reject_send(uint32_t qpn, QpState& qp, uint64_t wr_id);
  void count_recv_refusal(uint32_t qpn, const QpState& qp, uint32_t num_sge);
  bool qp_has_work(const QpState& qp) const;
  int check_channel_fd(int fd, std::string* why);
  bool send_record(int fd, const void* rec, size_t len);
  // 0, or ENOMEM with the reason naming the limit and the option to raise.
  int check_limits(const Client& c, const char* what, size_t have, uint32_t client_max,
                   uint32_t UserUsage::*used, uint32_t UserLimits::*user_max, Reply* out);
  int check_ring_bytes(const Client& c, uint64_t bytes, Reply* out);
  int not_ours(int err, const char* what, uint32_t handle, Reply* out);
  void forget_ring_bytes(Client& c, uint64_t bytes);
  UserUsage& usage(const Client& c) { return users_[c.uid]; }
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
  std::map<uid_t, UserUsage> users_;
  DaemonCounters counters_;
  std::vector<io::RxFrame> rx_batch_;
  std::vector<uint32_t> dirty_cqs_;
  std::deque<std::vector<uint8_t>> loopback_;  // frames to our own GIDs
  static constexpr uint32_t kNowReuse = 16;
  mutable fw::Time now_ = 0;
  mutable uint32_t now_reads_ = 0;
};

}  // namespace metaroce::daemon
