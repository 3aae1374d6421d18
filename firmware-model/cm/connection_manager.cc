// The CM state machine (connection_manager.h; docs/protocol.md §12).
//
// Inbound: on_packet checks the fields (proto::check_cm), finds the
// connection the message names (match), and hands it to one on_<message>
// step; anything that fails a check changes nothing and is counted.
// Outbound: every message goes through send(), which remembers it in
// Conn::last so a timeout or a duplicate resends exactly the same bytes.
#include "firmware-model/cm/connection_manager.h"

#include "proto/opcode.h"

#include <algorithm>
#include <cerrno>

namespace metaroce::cm {

using proto::Opcode;
using proto::Packet;
using proto::RejReason;
using State = ConnectionManager::State;
using Conn = ConnectionManager::Conn;

namespace {

// Private data limits come from the opcode table, the one place they live.
size_t max_private(Opcode op) { return proto::find_opcode(op)->max_payload; }

ConnParam param_of(const Packet& p) {
  const proto::Cmh& c = p.cm;
  ConnParam r;
  r.qpn = c.qpn;
  r.start_psn = c.start_psn;
  r.qkey = c.qkey;
  r.responder_resources = c.responder_resources;
  r.initiator_depth = c.initiator_depth;
  r.path_mtu = c.path_mtu;
  r.retry_count = c.retry_count;
  r.rnr_retry = c.rnr_retry;
  r.srq = c.srq;
  r.private_data.assign(p.payload.begin(), p.payload.end());
  return r;
}

void put_param(proto::Cmh& c, const ConnParam& m) {
  c.qpn = m.qpn;
  c.start_psn = m.start_psn;
  c.qkey = m.qkey;
  c.responder_resources = m.responder_resources;
  c.initiator_depth = m.initiator_depth;
  c.path_mtu = m.path_mtu;
  c.retry_count = m.retry_count;
  c.rnr_retry = m.rnr_retry;
  c.srq = m.srq;
}

bool space_carries(proto::PortSpace s, uint8_t qp_type) {
  switch (s) {
    case proto::PortSpace::kTcp: return qp_type == proto::kCmQpRc;
    case proto::PortSpace::kUdp:
    case proto::PortSpace::kIpoib: return qp_type == proto::kCmQpUd;
    case proto::PortSpace::kIb: return qp_type == proto::kCmQpRc || qp_type == proto::kCmQpUd;
  }
  return false;
}

bool is_any(const proto::IpAddr& a) { return a == proto::IpAddr{}; }

uint8_t min_mtu(uint8_t a, uint8_t b) { return a == 0 ? b : (b == 0 ? a : std::min(a, b)); }

// Validates what the application offers; the reason says what to change.
Status check_param(const ConnParam& m, uint8_t qp_type, Opcode op) {
  if (m.private_data.size() > max_private(op))
    return {EINVAL, "private data longer than the CM message carries (docs/protocol.md §12.4)"};
  if (m.qpn == 0 || m.qpn > 0xFFFFFF) return {EINVAL, "no QP: qpn must be 1..2^24-1"};
  if (qp_type == proto::kCmQpRc && (m.path_mtu < 1 || m.path_mtu > 5))
    return {EINVAL, "path_mtu must be an ibv_mtu value 1..5"};
  if (m.retry_count > 7 || m.rnr_retry > 7) return {EINVAL, "retry_count and rnr_retry are 0..7"};
  return {};
}

}  // namespace

const char* ConnectionManager::to_string(State s) {
  switch (s) {
    case State::kReqSent: return "REQ_SENT";
    case State::kMraRcvd: return "MRA_RCVD";
    case State::kReqRcvd: return "REQ_RCVD";
    case State::kRepSent: return "REP_SENT";
    case State::kRepRcvd: return "REP_RCVD";
    case State::kEstablished: return "ESTABLISHED";
    case State::kDreqSent: return "DREQ_SENT";
    case State::kTimewait: return "TIMEWAIT";
    case State::kUdAnswered: return "UD_ANSWERED";
  }
  return "?";
}

const char* to_string(EventType t) {
  switch (t) {
    case EventType::kConnectRequest: return "CONNECT_REQUEST";
    case EventType::kConnectResponse: return "CONNECT_RESPONSE";
    case EventType::kEstablished: return "ESTABLISHED";
    case EventType::kRejected: return "REJECTED";
    case EventType::kUnreachable: return "UNREACHABLE";
    case EventType::kDisconnected: return "DISCONNECTED";
    case EventType::kTimewaitExit: return "TIMEWAIT_EXIT";
  }
  return "?";
}

proto::Packet Outgoing::packet() const {
  proto::Packet p = header;
  p.payload = private_data;
  return p;
}

ConnectionManager::ConnectionManager(Config config, Random random, void* random_ctx)
    : config_(config), random_(random), random_ctx_(random_ctx) {
  if (config_.timewait == 0)
    config_.timewait = proto::cm_timeout_ns(config_.response_timeout) * (config_.max_retries + 1u);
}

// ---------------------------------------------------------------- commands

Status ConnectionManager::listen(proto::PortSpace space, const Endpoint& local, int backlog,
                                 ListenId* out) {
  if (listeners_.size() >= config_.max_listeners)
    return {ENOMEM, "listener table full (Config::max_listeners)"};
  for (const auto& [id, l] : listeners_)
    if (l.space == space && l.local.port == local.port &&
        (is_any(l.local.ip) || is_any(local.ip) || l.local.ip == local.ip))
      return {EADDRINUSE, "another listener has this port space, port and address"};
  if (backlog <= 0 || backlog > config_.max_backlog) backlog = config_.max_backlog;
  *out = next_listener_++;
  listeners_[*out] = Listener{space, local, backlog};
  return {};
}

Status ConnectionManager::unlisten(ListenId id) {
  if (listeners_.erase(id) == 0) return {ENOENT, "no such listener"};
  // Requests already given to the app are its own connections now.
  for (auto& [cid, c] : conns_)
    if (c.listener == id) c.listener = 0;
  return {};
}

Status ConnectionManager::connect(proto::PortSpace space, uint8_t qp_type, const Endpoint& local,
                                  const Endpoint& remote, const ConnParam& mine, Time now,
                                  Output& out, ConnId* id) {
  if (!space_carries(space, qp_type)) return {EINVAL, "this port space does not carry that QP type"};
  if (Status s = check_param(mine, qp_type, Opcode::kCmReq); !s.ok()) return s;
  if (conns_.size() >= config_.max_connections)
    return {ENOMEM, "connection table full (Config::max_connections)"};
  const uint32_t cid = new_comm_id();
  if (cid == 0) return {ENOMEM, "no free communication ID"};
  Conn& c = conns_[cid];
  c.id = cid;
  c.active = true;
  c.qp_type = qp_type;
  c.service_id = proto::service_id(space, remote.port);
  c.local = local;
  c.peer = remote;
  c.mine = mine;
  c.max_retries = config_.max_retries;
  c.state = State::kReqSent;
  send(c, Opcode::kCmReq, mine.private_data, out);
  arm(c, now, proto::cm_timeout_ns(config_.response_timeout));
  *id = cid;
  return {};
}

Status ConnectionManager::accept(ConnId id, const ConnParam& mine, Time now, Output& out) {
  Conn* c = find(id);
  if (!c) return {ENOENT, "no such connection"};
  if (c->state != State::kReqRcvd) return {EINVAL, "accept: no connect request is waiting"};
  if (Status s = check_param(mine, c->qp_type, Opcode::kCmRep); !s.ok()) return s;
  c->mine = mine;
  c->path_mtu = min_mtu(c->theirs.path_mtu, mine.path_mtu);
  c->mine.path_mtu = c->path_mtu;
  c->listener = 0;
  send(*c, Opcode::kCmRep, mine.private_data, out);
  if (c->qp_type == proto::kCmQpUd) {
    c->state = State::kUdAnswered;
    arm(*c, now, config_.timewait);
  } else {
    c->state = State::kRepSent;
    c->retries = 0;
    arm(*c, now, proto::cm_timeout_ns(config_.response_timeout));
  }
  return {};
}

Status ConnectionManager::reject(ConnId id, const std::vector<uint8_t>& data, Time now,
                                 Output& out) {
  Conn* c = find(id);
  if (!c) return {ENOENT, "no such connection"};
  if (data.size() > max_private(Opcode::kCmRej))
    return {EINVAL, "private data longer than REJ carries (148 bytes)"};
  uint8_t msg = proto::kCmMsgReq;
  if (c->state == State::kRepRcvd) {
    msg = proto::kCmMsgRep;
  } else if (c->state != State::kReqRcvd) {
    return {EINVAL, "reject: no connect request or response is waiting"};
  }
  send_rej(c->peer.ip, c->local.ip, c->id, c->remote_id, RejReason::kConsumerDefined, msg, data,
           out);
  release(*c);
  return {};
}

Status ConnectionManager::establish(ConnId id, Time now, Output& out) {
  Conn* c = find(id);
  if (!c) return {ENOENT, "no such connection"};
  if (c->state == State::kRepRcvd) {
    send(*c, Opcode::kCmRtu, {}, out);
    c->state = State::kEstablished;
    set_deadline(*c, kNever);
    ++counters_.established;
    return {};
  }
  if (c->state == State::kRepSent) {  // the peer's data came before its RTU
    c->state = State::kEstablished;
    set_deadline(*c, kNever);
    ++counters_.established;
    emit(*c, EventType::kEstablished, 0, out, nullptr);
    return {};
  }
  return {EINVAL, "establish: the connection is not waiting for it"};
}

Status ConnectionManager::disconnect(ConnId id, const std::vector<uint8_t>& data, Time now,
                                     Output& out) {
  Conn* c = find(id);
  if (!c) return {ENOENT, "no such connection"};
  if (data.size() > max_private(Opcode::kCmDreq))
    return {EINVAL, "private data longer than DREQ carries (220 bytes)"};
  if (c->state != State::kEstablished) return {EINVAL, "disconnect: not connected"};
  send(*c, Opcode::kCmDreq, data, out);
  c->state = State::kDreqSent;
  c->retries = 0;
  arm(*c, now, proto::cm_timeout_ns(config_.response_timeout));
  return {};
}

Status ConnectionManager::destroy(ConnId id, Time now, Output& out) {
  Conn* c = find(id);
  if (!c) return {ENOENT, "no such connection"};
  switch (c->state) {
    case State::kReqSent:
    case State::kMraRcvd:
      send_rej(c->peer.ip, c->local.ip, c->id, c->remote_id, RejReason::kTimeout,
               proto::kCmMsgOther, {}, out);
      release(*c);
      return {};
    case State::kReqRcvd:
    case State::kRepRcvd:
    case State::kRepSent:
      send_rej(c->peer.ip, c->local.ip, c->id, c->remote_id, RejReason::kConsumerDefined,
               c->state == State::kReqRcvd ? proto::kCmMsgReq : proto::kCmMsgOther, {}, out);
      release(*c);
      return {};
    case State::kEstablished:
      c->orphan = true;
      return disconnect(id, {}, now, out);
    case State::kDreqSent:
    case State::kTimewait:
    case State::kUdAnswered:
      c->orphan = true;  // finishes on its own, silently
      return {};
  }
  return {};
}

// ----------------------------------------------------------------- inbound

void ConnectionManager::on_packet(const proto::IpAddr& from, const proto::IpAddr& to,
                                  const Packet& p, Time now, Output& out) {
  ++counters_.rx_messages;
  if (const proto::CmCheck why = proto::check_cm(p); why != proto::CmCheck::kOk) {
    ++counters_.rx_invalid;
    ++counters_.rx_invalid_by_reason[static_cast<size_t>(why)];
    return;
  }
  if (p.mbth.opcode == Opcode::kCmReq) return on_req(from, to, p, now, out);
  Conn* c = match(from, p);
  if (!c) return;
  switch (p.mbth.opcode) {
    case Opcode::kCmMra: return on_mra(*c, p, now, out);
    case Opcode::kCmRej: return on_rej(*c, p, out);
    case Opcode::kCmRep: return on_rep(*c, p, now, out);
    case Opcode::kCmRtu: return on_rtu(*c, p, out);
    case Opcode::kCmDreq: return on_dreq(*c, p, now, out);
    case Opcode::kCmDrep: return on_drep(*c, p, now, out);
    default: ++counters_.rx_drop_bad_state; return;
  }
}

// Whether a new REQ may become a connection: 0, or the reason of the REJ
// that answers it at once (counted here).
RejReason ConnectionManager::admit(const Packet& p, const proto::IpAddr& to, ListenId* lid) {
  *lid = find_listener(p.cm.service_id, to);
  if (*lid == 0) {
    ++counters_.rej_no_listener;
    return RejReason::kInvalidServiceId;
  }
  // The QP type fits the space: the listener's space is the REQ's, and
  // check_cm refused a QP type the space does not carry.
  const Listener& l = listeners_.at(*lid);
  if (conns_.size() >= config_.max_connections) {
    ++counters_.rej_table_full;
    return RejReason::kNoResources;
  }
  if (pending(*lid) >= l.backlog) {
    ++counters_.rej_backlog_full;
    return RejReason::kNoResources;
  }
  return RejReason{};
}

// The connection a non-REQ message names: by our comm ID (its remote), or,
// for a REJ from an initiator that never learnt ours, by its own. The
// source address and, once known, the peer's comm ID must match too: a
// blind forger has to guess 32 random bits and the address.
Conn* ConnectionManager::match(const proto::IpAddr& from, const Packet& p) {
  Conn* c = nullptr;
  if (p.cm.remote_comm_id != 0) {
    c = find(p.cm.remote_comm_id);
  } else if (auto it = by_peer_.find(PeerKey{from.bytes, p.cm.local_comm_id}); it != by_peer_.end()) {
    c = find(it->second);
  }
  if (!c) {
    ++counters_.rx_drop_unknown_conn;
    return nullptr;
  }
  const bool id_ok = c->remote_id == 0 || p.cm.local_comm_id == c->remote_id ||
                     (p.mbth.opcode == Opcode::kCmRej && p.cm.local_comm_id == 0);
  if (!(c->peer.ip == from) || !id_ok) {
    ++counters_.rx_drop_wrong_peer;
    return nullptr;
  }
  return c;
}

void ConnectionManager::on_req(const proto::IpAddr& from, const proto::IpAddr& to,
                               const Packet& p, Time now, Output& out) {
  if (auto it = by_peer_.find(PeerKey{from.bytes, p.cm.local_comm_id}); it != by_peer_.end())
    return on_duplicate_req(conns_.at(it->second), out);
  ListenId lid = 0;
  const RejReason reason = admit(p, to, &lid);
  const uint32_t cid = reason == RejReason{} ? new_comm_id() : 0;
  if (cid == 0) {
    if (reason == RejReason{}) ++counters_.rej_table_full;
    send_rej(from, to, 0, p.cm.local_comm_id, reason == RejReason{} ? RejReason::kNoResources : reason,
             proto::kCmMsgReq, {}, out);
    return;
  }
  Conn& c = conns_[cid];
  c.id = cid;
  c.remote_id = p.cm.local_comm_id;
  c.state = State::kReqRcvd;
  c.listener = lid;
  c.qp_type = p.cm.qp_type;
  c.service_id = p.cm.service_id;
  c.local = Endpoint{to, proto::service_port(p.cm.service_id)};
  c.peer = Endpoint{from, p.cm.src_port};
  c.theirs = param_of(p);
  c.max_retries = p.cm.max_cm_retries;
  by_peer_[PeerKey{from.bytes, c.remote_id}] = cid;
  emit(c, EventType::kConnectRequest, 0, out, &p);
  out.events.back().listener = lid;
}

// A REQ we already have: its initiator did not hear from us in time.
void ConnectionManager::on_duplicate_req(Conn& c, Output& out) {
  ++counters_.rx_duplicate;
  if (c.state == State::kReqRcvd) {  // our app is still deciding: ask for time
    Outgoing mra{c.peer.ip, c.local.ip, {}, {}};
    mra.header.mbth.opcode = Opcode::kCmMra;
    mra.header.cm.local_comm_id = c.id;
    mra.header.cm.remote_comm_id = c.remote_id;
    mra.header.cm.cm_timeout = config_.mra_timeout;
    mra.header.cm.message = proto::kCmMsgReq;
    out.messages.push_back(std::move(mra));
    ++counters_.tx_messages;
    ++counters_.mra_sent;
  } else if (c.state == State::kRepSent || c.state == State::kUdAnswered) {
    resend(c, out);  // our REP was lost
  }
}

void ConnectionManager::on_mra(Conn& c, const Packet& p, Time now, Output& out) {
  const Time wait = proto::cm_timeout_ns(p.cm.cm_timeout) +
                    proto::cm_timeout_ns(config_.response_timeout);
  if ((c.state == State::kReqSent || c.state == State::kMraRcvd) &&
      p.cm.message == proto::kCmMsgReq) {
    c.remote_id = p.cm.local_comm_id;
    c.state = State::kMraRcvd;
  } else if (!(c.state == State::kRepSent && p.cm.message == proto::kCmMsgRep)) {
    ++counters_.rx_drop_bad_state;
    return;
  }
  ++counters_.mra_received;
  arm(c, now, wait);
}

void ConnectionManager::on_rej(Conn& c, const Packet& p, Output& out) {
  switch (c.state) {
    case State::kReqSent:
    case State::kMraRcvd:
    case State::kRepRcvd:
    case State::kReqRcvd:
    case State::kRepSent:
      ++counters_.rejects_received;
      emit(c, EventType::kRejected, p.cm.reason, out, &p);
      release(c);
      return;
    default: ++counters_.rx_drop_bad_state; return;
  }
}

void ConnectionManager::on_rep(Conn& c, const Packet& p, Time now, Output& out) {
  if (c.state == State::kEstablished && c.active) {  // our RTU was lost
    ++counters_.rx_duplicate;
    resend(c, out);
    return;
  }
  if (c.state == State::kRepRcvd) {
    ++counters_.rx_duplicate;
    return;
  }
  if ((c.state != State::kReqSent && c.state != State::kMraRcvd) || p.cm.qp_type != c.qp_type) {
    ++counters_.rx_drop_bad_state;
    return;
  }
  c.remote_id = p.cm.local_comm_id;
  c.theirs = param_of(p);
  c.path_mtu = min_mtu(c.mine.path_mtu, p.cm.path_mtu);
  if (c.qp_type == proto::kCmQpUd) {
    ++counters_.established;
    emit(c, EventType::kEstablished, 0, out, &p);
    release(c);
    return;
  }
  c.state = State::kRepRcvd;
  set_deadline(c, kNever);
  emit(c, EventType::kConnectResponse, 0, out, &p);
}

void ConnectionManager::on_rtu(Conn& c, const Packet& p, Output& out) {
  if (c.state == State::kEstablished || c.state == State::kDreqSent ||
      c.state == State::kTimewait) {
    ++counters_.rx_stale;
    return;
  }
  if (c.state != State::kRepSent) {
    ++counters_.rx_drop_bad_state;
    return;
  }
  c.state = State::kEstablished;
  set_deadline(c, kNever);
  ++counters_.established;
  emit(c, EventType::kEstablished, 0, out, &p);
}

void ConnectionManager::on_dreq(Conn& c, const Packet& p, Time now, Output& out) {
  switch (c.state) {
    case State::kTimewait:
      ++counters_.rx_duplicate;  // our DREP was lost
      send(c, Opcode::kCmDrep, {}, out);
      return;
    case State::kEstablished:
    case State::kDreqSent:  // both sides disconnected at once
    case State::kRepSent:   // RTU lost, then the peer disconnected
      send(c, Opcode::kCmDrep, {}, out);
      c.theirs.private_data.assign(p.payload.begin(), p.payload.end());
      enter_timewait(c, now, out);
      return;
    default: ++counters_.rx_drop_bad_state; return;
  }
}

void ConnectionManager::on_drep(Conn& c, const Packet& p, Time now, Output& out) {
  if (c.state == State::kTimewait) {
    ++counters_.rx_stale;
    return;
  }
  if (c.state != State::kDreqSent) {
    ++counters_.rx_drop_bad_state;
    return;
  }
  c.theirs.private_data.assign(p.payload.begin(), p.payload.end());
  enter_timewait(c, now, out);
}

// ------------------------------------------------------------------ timers

// Deadlines are kept ordered (timers_), so the host's loop can ask for the
// next one every pass at no cost per connection.
void ConnectionManager::on_timer(Time now, Output& out) {
  std::vector<ConnId> due;
  for (auto it = timers_.begin(); it != timers_.end() && it->first <= now; ++it)
    due.push_back(it->second);
  for (ConnId id : due)
    if (Conn* c = find(id); c && c->deadline <= now) on_timeout(*c, now, out);
}

Time ConnectionManager::next_deadline() const {
  return timers_.empty() ? kNever : timers_.begin()->first;
}

void ConnectionManager::set_deadline(Conn& c, Time t) {
  if (c.deadline != kNever) timers_.erase({c.deadline, c.id});
  c.deadline = t;
  if (t != kNever) timers_.insert({t, c.id});
}

void ConnectionManager::on_timeout(Conn& c, Time now, Output& out) {
  const bool resending = c.state == State::kReqSent || c.state == State::kMraRcvd ||
                         c.state == State::kRepSent || c.state == State::kDreqSent;
  if (resending && c.retries < c.max_retries) {
    ++c.retries;
    if (c.state == State::kRepSent) ++counters_.rep_resent;
    else if (c.state == State::kDreqSent) ++counters_.dreq_resent;
    else ++counters_.req_resent;
    if (c.state == State::kMraRcvd) c.state = State::kReqSent;
    resend(c, out);
    arm(c, now, proto::cm_timeout_ns(config_.response_timeout));
    return;
  }
  switch (c.state) {
    case State::kReqSent:
    case State::kMraRcvd:
    case State::kRepSent:
      ++(c.active ? counters_.connect_timeouts : counters_.accept_timeouts);
      send_rej(c.peer.ip, c.local.ip, c.id, c.remote_id, RejReason::kTimeout, proto::kCmMsgOther,
               {}, out);
      emit(c, EventType::kUnreachable, ETIMEDOUT, out, nullptr);
      release(c);
      return;
    case State::kDreqSent:
      ++counters_.disconnect_timeouts;
      c.theirs.private_data.clear();
      enter_timewait(c, now, out);
      return;
    case State::kTimewait:
      emit(c, EventType::kTimewaitExit, 0, out, nullptr);
      release(c);
      return;
    case State::kUdAnswered: release(c); return;
    default: set_deadline(c, kNever); return;
  }
}

// --------------------------------------------------------------- outbound

void ConnectionManager::send(Conn& c, Opcode op, const std::vector<uint8_t>& data, Output& out) {
  Outgoing m{c.peer.ip, c.local.ip, {}, data};
  m.header.mbth.opcode = op;
  proto::Cmh& h = m.header.cm;
  h.local_comm_id = c.id;
  h.remote_comm_id = c.remote_id;
  if (op == Opcode::kCmReq || op == Opcode::kCmRep) {
    put_param(h, c.mine);
    h.qp_type = c.qp_type;
  }
  if (op == Opcode::kCmReq) {
    h.service_id = c.service_id;
    h.src_port = c.local.port;
    h.cm_timeout = config_.response_timeout;
    h.max_cm_retries = c.max_retries;
  }
  c.last = m;
  out.messages.push_back(std::move(m));
  ++counters_.tx_messages;
}

void ConnectionManager::resend(Conn& c, Output& out) {
  out.messages.push_back(c.last);
  ++counters_.tx_messages;
}

void ConnectionManager::send_rej(const proto::IpAddr& to, const proto::IpAddr& from,
                                 uint32_t local, uint32_t remote, RejReason reason,
                                 uint8_t message, const std::vector<uint8_t>& data, Output& out) {
  Outgoing m{to, from, {}, data};
  m.header.mbth.opcode = Opcode::kCmRej;
  m.header.cm.local_comm_id = local;
  m.header.cm.remote_comm_id = remote;
  m.header.cm.reason = static_cast<uint16_t>(reason);
  m.header.cm.message = message;
  out.messages.push_back(std::move(m));
  ++counters_.tx_messages;
}

void ConnectionManager::arm(Conn& c, Time now, Time interval) {
  c.interval = interval;
  set_deadline(c, now + interval);
}

void ConnectionManager::enter_timewait(Conn& c, Time now, Output& out) {
  c.state = State::kTimewait;
  emit(c, EventType::kDisconnected, 0, out, nullptr);
  arm(c, now, config_.timewait);
}

void ConnectionManager::emit(Conn& c, EventType type, int status, Output& out,
                             const Packet* from_peer) {
  if (c.orphan) return;
  Event e;
  e.type = type;
  e.conn = c.id;
  e.status = status;
  e.remote = from_peer ? param_of(*from_peer) : c.theirs;
  out.events.push_back(std::move(e));
}

void ConnectionManager::release(Conn& c) {
  set_deadline(c, kNever);
  if (!c.active && c.remote_id != 0) by_peer_.erase(PeerKey{c.peer.ip.bytes, c.remote_id});
  conns_.erase(c.id);
}

// ----------------------------------------------------------------- lookups

// The listener for a service ID on our address `to`: one bound to that
// address, else one bound to any address; 0 if none.
ListenId ConnectionManager::find_listener(uint64_t sid, const proto::IpAddr& to) const {
  ListenId any = 0;
  for (const auto& [id, l] : listeners_) {
    if (proto::service_id(l.space, l.local.port) != sid) continue;
    if (l.local.ip == to) return id;
    if (is_any(l.local.ip)) any = id;
  }
  return any;
}

Conn* ConnectionManager::find(ConnId id) {
  auto it = conns_.find(id);
  return it == conns_.end() ? nullptr : &it->second;
}

std::optional<ConnInfo> ConnectionManager::info(ConnId id) const {
  auto it = conns_.find(id);
  if (it == conns_.end()) return std::nullopt;
  const Conn& c = it->second;
  return ConnInfo{c.active, c.qp_type, c.local, c.peer, c.mine, c.theirs, c.path_mtu};
}

uint32_t ConnectionManager::new_comm_id() {
  for (int tries = 0; tries < 64; ++tries) {
    const uint32_t id = random_(random_ctx_);
    if (id != 0 && !conns_.contains(id)) return id;
  }
  return 0;
}

int ConnectionManager::pending(ListenId l) const {
  if (l == 0) return 0;
  int n = 0;
  for (const auto& [id, c] : conns_) n += c.state == State::kReqRcvd && c.listener == l;
  return n;
}

}  // namespace metaroce::cm
