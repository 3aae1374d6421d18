// The daemon's connection-manager role (docs/connection-manager.md §6): the
// device's cm::ConnectionManager, fed CM frames from the rx path before the
// engine, sending through the packet port, and the ucma commands of the
// emulated /dev/infiniband/rdma_cm (control ops MROCE_OP_UCMA_*) per client.
//
// One client (control connection) is one emulated rdma_cm file: it hands us
// its event socket at MROCE_OP_UCMA_OPEN, and every ID it creates is its
// own. IDs are named by handles unique in the device (so MIGRATE_ID keeps
// them), bounded per client and per user. Events go to the channel socket
// with MSG_DONTWAIT; what does not fit waits in a bounded queue.
// Every command is validated here again (the interposer is the client's),
// and every refusal and drop is counted by reason.
// Single-threaded: every method runs on the daemon's loop thread.
#pragma once

#include <sys/socket.h>
#include <sys/types.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "firmware-model/cm/connection_manager.h"
#include "firmware-model/engine/hal.h"
#include "firmware-model/engine/types.h"

struct ib_uverbs_qp_attr;
struct rdma_ucm_ud_param;

namespace metaroce::daemon {

class LinkInterface;

struct CmLimits {
  uint32_t max_ids_per_client = 1024;
  uint32_t max_ids_per_user = 4096;
  uint32_t max_queued_events = 1024;  // per channel, beyond the socket's own buffer
  uint32_t max_groups_per_id = 64;     // multicast joins of one ID
  uint32_t max_groups_per_user = 1024; // multicast joins of one user's IDs
};

#define MROCE_CM_ROLE_COUNTERS(X)                                                   \
  X(cm_rx_frames)            /* CM frames taken from the rx path */                \
  X(cm_rx_drop_parse)        /* a CM opcode, but the frame does not parse */       \
  X(cm_rx_drop_not_ours)     /* addressed to no address of this device */          \
  X(cm_tx_frames)                                                                  \
  X(cm_tx_no_port)           /* no packet port (not the soft NIC) */               \
  X(cm_rej_rate_limited)     /* REJ to a stray REQ over the per-second budget */    \
  X(cm_cmd)                  /* ucma commands served */                            \
  X(cm_cmd_malformed)        /* sizes or fields the ABI does not allow */          \
  X(cm_cmd_refused)          /* valid, but refused (state, limits, no such ID) */  \
  X(cm_ids_client_limit) X(cm_ids_user_limit)                                      \
  X(cm_events)               /* event records written to channel sockets */        \
  X(cm_events_queued)        /* the socket was full: queued */                     \
  X(cm_events_dropped_full)  /* the queue was full too: dropped */                 \
  X(cm_events_dropped_gone)  /* the channel socket is closed */                    \
  X(cm_addr_resolved) X(cm_addr_errors)                                          \
  X(cm_mcast_joins) X(cm_mcast_leaves)                                           \
  X(cm_mcast_id_limit) X(cm_mcast_user_limit) /* joins refused: over the bound */

struct CmRoleCounters {
#define MROCE_CM_ROLE_FIELD(n) uint64_t n = 0;
  MROCE_CM_ROLE_COUNTERS(MROCE_CM_ROLE_FIELD)
#undef MROCE_CM_ROLE_FIELD
};

class CmRole {
 public:
  struct Env {
    std::function<void(const fw::OutPacket&)> send;  // the packet port; empty: none
    LinkInterface* link = nullptr;                   // next hops (nullptr: loopback only)
    uint64_t node_guid = 0;                          // host order, as DeviceConfig
    uint32_t (*random)(void*) = nullptr;             // comm IDs, PSNs
    void* random_ctx = nullptr;
    // Whether an interface of the host has the address (bind's ENODEV vs
    // EADDRNOTAVAIL); empty: getifaddrs.
    std::function<bool(const proto::IpAddr&)> host_has_address;
  };
  CmRole(const cm::Config& config, const CmLimits& limits, Env env);
  ~CmRole();

  void set_port(const fw::PortInfo& port);
  void set_env(Env env) { env_ = std::move(env); }

  // The rx path, before the engine: true when the frame carries a CM
  // opcode (then it is ours, consumed or counted as a drop).
  bool on_frame(std::span<const uint8_t> frame, fw::Time now);

  struct Reply {
    int err = 0;
    std::string reason;
    std::vector<uint8_t> body;
  };
  // MROCE_OP_UCMA_*: fds were received with the request (the caller closes
  // them after; the one we keep is dup'd).
  void handle(fw::OwnerId client, uid_t uid, uint16_t op, std::span<const uint8_t> body,
              const std::vector<int>& fds, fw::Time now, Reply* out);
  void close_client(fw::OwnerId client, fw::Time now);

  // Timers (CM resends, address resolution), queued events. Work done.
  int poll(fw::Time now);
  fw::Time next_deadline() const;

  const CmRoleCounters& counters() const { return counters_; }
  const cm::ConnectionManager& manager() const { return cm_; }
  template <class F>
  void for_each_counter(F&& f) const;
  size_t id_count() const { return ids_.size(); }

 private:
  struct Id;
  struct Channel;
  struct Record;
  using Handle = uint32_t;
  struct Cmd;
  struct Group;

  // commands (cm_role.cc)
  int create_id(Channel& ch, const Cmd& c, Reply* out);
  int destroy_id(Channel& ch, const Cmd& c, fw::Time now, Reply* out);
  int bind(Channel& ch, const Cmd& c, Reply* out);
  int resolve_addr(Channel& ch, const Cmd& c, fw::Time now, Reply* out);
  int resolve_route(Channel& ch, const Cmd& c, Reply* out);
  int query_route(Channel& ch, const Cmd& c, Reply* out);
  int query(Channel& ch, const Cmd& c, Reply* out);
  int listen(Channel& ch, const Cmd& c, Reply* out);
  int connect(Channel& ch, const Cmd& c, fw::Time now, Reply* out);
  int accept(Channel& ch, const Cmd& c, fw::Time now, Reply* out);
  int reject(Channel& ch, const Cmd& c, fw::Time now, Reply* out);
  int disconnect(Channel& ch, const Cmd& c, fw::Time now, Reply* out);
  int init_qp_attr(Channel& ch, const Cmd& c, Reply* out);
  int ud_qp_attr(Id& id, const Cmd& c, ib_uverbs_qp_attr* a, Reply* out);
  int set_option(Channel& ch, const Cmd& c, Reply* out);
  int notify(Channel& ch, const Cmd& c, fw::Time now, Reply* out);
  int migrate_id(Channel& ch, const Cmd& c, Reply* out);
  int join(Channel& ch, const Cmd& c, Reply* out);
  int join_to(Channel& ch, const Cmd& c, Handle h, uint64_t uid, const sockaddr_storage& a, Reply* out);
  int leave(Channel& ch, const Cmd& c, Reply* out);
  int command(Channel& ch, const Cmd& c, fw::Time now, Reply* out);
  int open_channel(fw::OwnerId client, uid_t uid, const std::vector<int>& fds, Reply* out);

  // helpers
  Id* find(Channel& ch, Handle h, Reply* out);
  int bind_to(Id& id, const sockaddr* a, size_t len, Reply* out);
  bool port_taken(const Id& self, uint16_t ps, const sockaddr_storage& a) const;
  bool local_address(const proto::IpAddr& ip) const;
  bool pick_source(const proto::IpAddr& dst, proto::IpAddr* src) const;
  int admit_id(Channel& ch, Reply* out);
  int set_qkey(Id& id, uint32_t want, Reply* out);
  void to_ud_param(const Id& id, const cm::ConnParam& p, rdma_ucm_ud_param* u) const;
  uint8_t gid_index(const proto::IpAddr& ip) const;
  Handle add_id(Channel& ch, Id id);
  void forget_id(Handle h, fw::Time now);
  void try_resolve(Handle h, Id& id, fw::Time now);
  void flush(cm::Output& out);
  void deliver(const cm::Event& e, fw::Time now);
  void raise_join(Handle h, const Id& id, Handle group);
  void drop_groups_of(Handle id);
  void raise(Handle counted, const Id& id, Handle named, uint32_t event, int status,
             const cm::ConnParam* param);
  void push(Channel& ch, Record r);
  int drain(Channel& ch);
  uint8_t link_mtu_enum() const;
  uint32_t random32();

  cm::ConnectionManager cm_;
  CmLimits limits_;
  Env env_;
  fw::PortInfo port_;
  CmRoleCounters counters_;
  std::map<Handle, Id> ids_;
  std::map<fw::OwnerId, Channel> channels_;
  std::map<cm::ConnId, Handle> by_conn_;
  std::map<cm::ListenId, Handle> by_listener_;
  std::map<uid_t, uint32_t> ids_per_user_;
  std::map<Handle, Group> groups_;  // multicast memberships, by their handle
  std::map<uid_t, uint32_t> groups_per_user_;
  Handle next_group_ = 1;  // never reused: the interposer drops a left group's events by it
  Handle next_handle_ = 1;
  fw::Time rej_window_ = 0;  // REJ-to-stray-REQ budget (per second)
  uint32_t rej_in_window_ = 0;
};

template <class F>
void CmRole::for_each_counter(F&& f) const {
#define MROCE_CM_ROLE_VISIT(n) f(std::string(#n), counters_.n);
  MROCE_CM_ROLE_COUNTERS(MROCE_CM_ROLE_VISIT)
#undef MROCE_CM_ROLE_VISIT
  f("cm_ids_live", ids_.size());  // a gauge: IDs of every client now
  f("cm_listeners_live", by_listener_.size());  // a gauge: IDs listening now
  cm_.for_each_counter([&](const std::string& name, uint64_t v) { f("cm_" + name, v); });
}

}  // namespace metaroce::daemon
