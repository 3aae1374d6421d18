// The MetaRoCE connection manager: a sans-IO state machine for the CM
// protocol of docs/protocol.md §12 (REQ, MRA, REJ, REP, RTU, DREQ, DREP).
//
// One ConnectionManager per device. It owns listeners and connections and
// nothing else: no sockets, no clock, no timers, no threads. Every input is a
// method call that carries the current time and appends what must happen to
// an Output (messages to send, events for applications); the host sends the
// messages, delivers the events and calls on_timer() at next_deadline().
// Because every input returns its consequences instead of calling back, the
// host may call any method while it handles an Output (no reentrancy).
//
// Design: docs/connection-manager.md. States follow IBA ch. 12's CM state
// diagram, reduced to what MetaRoCE carries (no LAP/APR, no alternate path).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <utility>
#include <string>
#include <vector>

#include "proto/cm.h"
#include "proto/packet.h"

namespace metaroce::cm {

using Time = uint64_t;  // nanoseconds of the host's monotonic clock
inline constexpr Time kNever = std::numeric_limits<Time>::max();

// A connection is named by its local communication ID (random, nonzero,
// unique among live and timewait connections); a listener by a small number.
using ConnId = uint32_t;
using ListenId = uint32_t;

struct Config {
  uint8_t response_timeout = 18;    // IB encoding: 1.07 s before REQ/REP/DREQ is resent
  uint8_t max_retries = 4;          // resends before the peer is declared unreachable
  uint8_t mra_timeout = 22;         // service time asked for by MRA while our app decides (17 s)
  Time timewait = 0;                // ns a closed connection's IDs stay reserved; 0: (max_retries
                                    // + 1) response timeouts, so a peer's last resend finds us
  size_t max_connections = 4096;    // every state, timewait included
  size_t max_listeners = 1024;
  int max_backlog = 1024;           // listen(backlog <= 0 or above) gets this
};

struct Endpoint {
  proto::IpAddr ip;
  uint16_t port = 0;
  bool operator==(const Endpoint&) const = default;
};

// What one side offers (REQ) or answers (REP): its QP and its wishes.
struct ConnParam {
  uint32_t qpn = 0;
  uint32_t start_psn = 0;
  uint32_t qkey = 0;                // UD
  uint8_t responder_resources = 0;
  uint8_t initiator_depth = 0;
  uint8_t path_mtu = 0;             // RC: ibv_mtu 1..5; the connection uses the smaller
  uint8_t retry_count = 0;
  uint8_t rnr_retry = 0;
  bool srq = false;
  std::vector<uint8_t> private_data;
};

enum class EventType : uint8_t {
  kConnectRequest,   // passive: a REQ for a listener; answer accept() or reject()
  kConnectResponse,  // active RC: REP arrived; move the QP to RTS, then establish()
  kEstablished,      // RC: RTU (passive) / after establish() is not reported; UD: REP (active)
  kRejected,         // REJ arrived; status = its reason (proto::RejReason)
  kUnreachable,      // the peer never answered; status = ETIMEDOUT
  kDisconnected,     // DREQ arrived, DREP arrived, or the DREQ was never answered
  kTimewaitExit,     // the connection's IDs are free again; it is gone
};
const char* to_string(EventType t);

struct Event {
  EventType type = EventType::kEstablished;
  ConnId conn = 0;
  ListenId listener = 0;  // kConnectRequest: which listener the REQ was for
  int status = 0;
  ConnParam remote;       // the peer's REQ/REP fields; private data of any message
};

// A message to send. The packet's payload is empty; private_data is sent as
// it (packet() joins the two, borrowing from this object).
struct Outgoing {
  proto::IpAddr to;
  proto::IpAddr from;
  proto::Packet header;
  std::vector<uint8_t> private_data;
  proto::Packet packet() const;
};

struct Output {
  std::vector<Outgoing> messages;
  std::vector<Event> events;
};

// A command's result: 0 or an errno, with a reason a user can act on.
struct Status {
  int err = 0;
  const char* reason = "";
  bool ok() const { return err == 0; }
};

// What a connection has agreed, for the QP attributes librdmacm asks for
// (INIT_QP_ATTR): the peer's QP and PSN, the negotiated MTU and resources.
struct ConnInfo {
  bool active = false;
  uint8_t qp_type = 0;
  Endpoint local, peer;
  ConnParam mine, theirs;
  uint8_t path_mtu = 0;  // min of both sides' offers (RC)
};

// Counters, one per reason (docs/connection-manager.md §Counters). Invalid
// messages are counted per proto::CmCheck as rx_invalid_<reason> as well.
#define MROCE_CM_COUNTERS(X)                                                     \
  X(tx_messages)          /* CM messages handed to the host */                  \
  X(rx_messages)          /* CM messages given to on_packet */                  \
  X(rx_invalid)           /* check_cm refused a field (per reason below) */     \
  X(rx_drop_unknown_conn) /* names no connection of ours */                     \
  X(rx_drop_wrong_peer)   /* names one, but from another address or peer id */  \
  X(rx_drop_bad_state)    /* not valid in the connection's state */             \
  X(rx_duplicate)         /* a resent REQ/REP/DREQ, answered again or ignored */ \
  X(rx_stale)             /* a late copy of a finished exchange, ignored */     \
  X(rej_no_listener)      /* REQ for a port nobody listens on */                \
  X(rej_backlog_full)     /* REQ beyond the listener's backlog */               \
  X(rej_table_full)       /* REQ beyond max_connections */                      \
  X(req_resent) X(rep_resent) X(dreq_resent)                                    \
  X(connect_timeouts)     /* REQ never answered: kUnreachable */                \
  X(accept_timeouts)      /* REP never answered: kUnreachable */                \
  X(disconnect_timeouts)  /* DREQ never answered: disconnected anyway */        \
  X(mra_sent) X(mra_received) X(rejects_received) X(established)

struct Counters {
#define MROCE_CM_COUNTER_FIELD(name) uint64_t name = 0;
  MROCE_CM_COUNTERS(MROCE_CM_COUNTER_FIELD)
#undef MROCE_CM_COUNTER_FIELD
  std::array<uint64_t, proto::kCmCheckCount> rx_invalid_by_reason{};
};

class ConnectionManager {
 public:
  // `random` gives the 32-bit values comm IDs are drawn from (the host's
  // CSPRNG in the daemon, a seeded generator in tests).
  using Random = uint32_t (*)(void* ctx);
  ConnectionManager(Config config, Random random, void* random_ctx);

  // ---- application commands ----
  // Accept REQs for (space, local.port) on local.ip (all zero: any address).
  Status listen(proto::PortSpace space, const Endpoint& local, int backlog, ListenId* out);
  Status unlisten(ListenId id);
  // Sends a REQ. qp_type is proto::kCmQpRc or kCmQpUd.
  Status connect(proto::PortSpace space, uint8_t qp_type, const Endpoint& local,
                 const Endpoint& remote, const ConnParam& mine, Time now, Output& out,
                 ConnId* id);
  // Passive, after kConnectRequest: REP.
  Status accept(ConnId id, const ConnParam& mine, Time now, Output& out);
  // Passive after kConnectRequest, or active after kConnectResponse: REJ.
  Status reject(ConnId id, const std::vector<uint8_t>& private_data, Time now, Output& out);
  // Active after kConnectResponse: RTU. Passive in REP-sent: the QP saw the
  // peer's first packet, so the RTU was lost (IB's COMM_EST): established.
  Status establish(ConnId id, Time now, Output& out);
  Status disconnect(ConnId id, const std::vector<uint8_t>& private_data, Time now, Output& out);
  // The application is gone: whatever the state, the peer is told (REJ or
  // DREQ) and no further event names this connection.
  Status destroy(ConnId id, Time now, Output& out);

  // ---- network and time ----
  // A parsed CM packet (proto::is_cm) from `from` to our address `to`.
  void on_packet(const proto::IpAddr& from, const proto::IpAddr& to, const proto::Packet& p,
                 Time now, Output& out);
  void on_timer(Time now, Output& out);
  Time next_deadline() const;

  std::optional<ConnInfo> info(ConnId id) const;
  const Counters& counters() const { return counters_; }
  size_t connection_count() const { return conns_.size(); }
  // Every counter by name ("rej_no_listener", "rx_invalid_qpn", ...).
  template <class F>
  void for_each_counter(F&& f) const;

  // Connection states (IBA ch. 12 names; docs/connection-manager.md §States).
  enum class State : uint8_t {
    kReqSent,      // active: REQ out, waiting REP/REJ/MRA
    kMraRcvd,      // active: the peer asked for more time
    kReqRcvd,      // passive: REQ given to the app (kConnectRequest), waiting accept/reject
    kRepSent,      // passive RC: REP out, waiting RTU
    kRepRcvd,      // active RC: REP given to the app (kConnectResponse), waiting establish
    kEstablished,
    kDreqSent,     // DREQ out, waiting DREP
    kTimewait,     // closed; IDs reserved until the timer
    kUdAnswered,   // passive UD: REP sent; kept to answer a resent REQ, then dropped
  };
  static const char* to_string(State s);

  struct Conn {
    ConnId id = 0;
    uint32_t remote_id = 0;  // the peer's comm ID, once known
    State state = State::kReqSent;
    bool active = false;
    bool orphan = false;      // destroyed by the app: no more events
    ListenId listener = 0;    // passive in kReqRcvd: whose backlog it takes
    uint8_t qp_type = 0;
    uint64_t service_id = 0;
    Endpoint local, peer;
    ConnParam mine, theirs;
    uint8_t path_mtu = 0;
    uint8_t max_retries = 0;  // the initiator's (REQ max_cm_retries)
    Outgoing last;            // the message a timeout or duplicate resends
    Time deadline = kNever;
    Time interval = 0;
    int retries = 0;
  };

  struct Listener {
    proto::PortSpace space = proto::PortSpace::kTcp;
    Endpoint local;
    int backlog = 0;
  };

 private:
  struct PeerKey {
    std::array<uint8_t, 16> ip;
    uint32_t comm_id;
    auto operator<=>(const PeerKey&) const = default;
  };

  // Inbound, one per message (connection_manager.cc).
  void on_req(const proto::IpAddr& from, const proto::IpAddr& to, const proto::Packet& p, Time now,
              Output& out);
  void on_duplicate_req(Conn& c, Output& out);
  void on_mra(Conn& c, const proto::Packet& p, Time now, Output& out);
  void on_rej(Conn& c, const proto::Packet& p, Output& out);
  void on_rep(Conn& c, const proto::Packet& p, Time now, Output& out);
  void on_rtu(Conn& c, const proto::Packet& p, Output& out);
  void on_dreq(Conn& c, const proto::Packet& p, Time now, Output& out);
  void on_drep(Conn& c, const proto::Packet& p, Time now, Output& out);
  Conn* match(const proto::IpAddr& from, const proto::Packet& p);
  void on_timeout(Conn& c, Time now, Output& out);

  // Outbound and bookkeeping.
  void send(Conn& c, proto::Opcode op, const std::vector<uint8_t>& data, Output& out);
  void resend(Conn& c, Output& out);
  void send_rej(const proto::IpAddr& to, const proto::IpAddr& from, uint32_t local,
                uint32_t remote, proto::RejReason reason, uint8_t message,
                const std::vector<uint8_t>& data, Output& out);
  void arm(Conn& c, Time now, Time interval);
  void set_deadline(Conn& c, Time t);
  void enter_timewait(Conn& c, Time now, Output& out);
  void emit(Conn& c, EventType type, int status, Output& out, const proto::Packet* from_peer);
  void release(Conn& c);
  proto::RejReason admit(const proto::Packet& p, const proto::IpAddr& to, ListenId* lid);
  ListenId find_listener(uint64_t service_id, const proto::IpAddr& to) const;
  Conn* find(ConnId id);
  uint32_t new_comm_id();
  int pending(ListenId l) const;

  Config config_;
  Random random_;
  void* random_ctx_;
  std::map<ConnId, Conn> conns_;
  std::map<PeerKey, ConnId> by_peer_;  // passive: (initiator address, its comm ID)
  std::map<ListenId, Listener> listeners_;
  std::set<std::pair<Time, ConnId>> timers_;  // every connection with a deadline
  ListenId next_listener_ = 1;
  Counters counters_;
};

template <class F>
void ConnectionManager::for_each_counter(F&& f) const {
#define MROCE_CM_COUNTER_VISIT(name) f(std::string(#name), counters_.name);
  MROCE_CM_COUNTERS(MROCE_CM_COUNTER_VISIT)
#undef MROCE_CM_COUNTER_VISIT
  for (size_t i = 1; i < proto::kCmCheckCount; ++i)
    f(std::string("rx_invalid_") + proto::to_string(static_cast<proto::CmCheck>(i)),
      counters_.rx_invalid_by_reason[i]);
}

}  // namespace metaroce::cm
