// CmRole (cm_role.h). The ucma structs and numbers come from the system's
// <rdma/rdma_user_cm.h>, as in the interposer; the event numbers are the
// ABI's (enum rdma_cm_event_type of <rdma/rdma_cma.h>, which cannot be
// included beside the kernel header).
// clang-format off
#include <netinet/in.h>  // before the kernel header: glibc owns in6_addr
#include <rdma/rdma_user_cm.h>
// clang-format on
#include "firmware-model/daemon/cm_role.h"

#include <arpa/inet.h>
#include <endian.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <infiniband/verbs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "firmware-model/daemon/soft_nic.h"
#include "firmware-model/uapi/metaroce_abi.h"
#include "proto/cm.h"

namespace metaroce::daemon {

namespace {

enum : uint32_t {  // enum rdma_cm_event_type, fixed by the ABI
  RDMA_CM_EVENT_ADDR_RESOLVED = 0,
  RDMA_CM_EVENT_ADDR_ERROR = 1,
  RDMA_CM_EVENT_ROUTE_RESOLVED = 2,
  RDMA_CM_EVENT_CONNECT_REQUEST = 4,
  RDMA_CM_EVENT_CONNECT_RESPONSE = 5,
  RDMA_CM_EVENT_UNREACHABLE = 7,
  RDMA_CM_EVENT_REJECTED = 8,
  RDMA_CM_EVENT_ESTABLISHED = 9,
  RDMA_CM_EVENT_DISCONNECTED = 10,
  RDMA_CM_EVENT_TIMEWAIT_EXIT = 15,
  RDMA_CM_EVENT_MULTICAST_JOIN = 17,
};

constexpr fw::Time kMs = 1'000'000;
constexpr fw::Time kResolveRetry = 5 * kMs;     // neighbour lookups while resolving
constexpr fw::Time kDrainRetry = 5 * kMs;       // a full channel socket is retried
constexpr uint32_t kMaxResolveMs = 60'000;
constexpr uint32_t kStrayRejPerSecond = 256;    // REJs to REQs that made no connection
constexpr uint32_t kRdmaUdpQkey = 0x01234567;    // RDMA_UDP_QKEY of <rdma/rdma_cma.h>

// The IpAddr (a GID) of a socket address; IPv4 is IPv4-mapped.
bool ip_of(const sockaddr_storage& a, proto::IpAddr* ip) {
  ip->bytes = {};
  if (a.ss_family == AF_INET) {
    ip->bytes[10] = ip->bytes[11] = 0xFF;
    std::memcpy(&ip->bytes[12], &reinterpret_cast<const sockaddr_in&>(a).sin_addr, 4);
    return true;
  }
  if (a.ss_family == AF_INET6) {
    std::memcpy(ip->bytes.data(), &reinterpret_cast<const sockaddr_in6&>(a).sin6_addr, 16);
    return true;
  }
  return false;
}

bool is_loopback(const proto::IpAddr& ip) {
  static const uint8_t v6lo[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  return (ip.is_v4() && ip.bytes[12] == 127) || std::memcmp(ip.bytes.data(), v6lo, 16) == 0;
}

// The kernel's cma_any_addr: the zero address or a loopback one. An ID
// bound to either is bound to no device (librdmacm leaves its verbs NULL;
// libfabric's verbs provider relies on it for "localhost").
bool is_any(const proto::IpAddr& ip) {
  static const uint8_t v4any[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 0, 0, 0, 0};
  return ip == proto::IpAddr{} || std::memcmp(ip.bytes.data(), v4any, 16) == 0 || is_loopback(ip);
}

// An IP multicast group: IPv4-mapped 224.0.0.0/4 or IPv6 ff00::/8.
bool is_multicast(const proto::IpAddr& ip) {
  return ip.is_v4() ? (ip.bytes[12] & 0xF0) == 0xE0 : ip.bytes[0] == 0xFF;
}

// Whether any interface of this network namespace has the address
// (getifaddrs; only on bind's failure path).
bool host_has_address(const proto::IpAddr& ip) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return false;
  bool found = false;
  for (const ifaddrs* i = list; i && !found; i = i->ifa_next) {
    if (!i->ifa_addr || (i->ifa_addr->sa_family != AF_INET && i->ifa_addr->sa_family != AF_INET6)) continue;
    sockaddr_storage a{};
    std::memcpy(&a, i->ifa_addr, i->ifa_addr->sa_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6));
    proto::IpAddr x;
    found = ip_of(a, &x) && x == ip;
  }
  freeifaddrs(list);
  return found;
}

uint16_t port_of(const sockaddr_storage& a) {
  return a.ss_family == AF_INET ? ntohs(reinterpret_cast<const sockaddr_in&>(a).sin_port)
                                : ntohs(reinterpret_cast<const sockaddr_in6&>(a).sin6_port);
}

void set_sin_port(sockaddr_storage& a, uint16_t p) {
  if (a.ss_family == AF_INET) reinterpret_cast<sockaddr_in&>(a).sin_port = htons(p);
  else reinterpret_cast<sockaddr_in6&>(a).sin6_port = htons(p);
}

size_t len_of(const sockaddr_storage& a) {
  return a.ss_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
}

// A socket address of the family `like` has, for a GID.
sockaddr_storage sockaddr_of(const proto::IpAddr& ip, uint16_t port, int family) {
  sockaddr_storage a{};
  if (family == AF_INET && ip.is_v4()) {
    auto& s = reinterpret_cast<sockaddr_in&>(a);
    s.sin_family = AF_INET;
    std::memcpy(&s.sin_addr, &ip.bytes[12], 4);
    s.sin_port = htons(port);
  } else {
    auto& s = reinterpret_cast<sockaddr_in6&>(a);
    s.sin6_family = AF_INET6;
    std::memcpy(&s.sin6_addr, ip.bytes.data(), 16);
    s.sin6_port = htons(port);
  }
  return a;
}

cm::Endpoint endpoint_of(const sockaddr_storage& a) {
  cm::Endpoint e;
  ip_of(a, &e.ip);
  if (is_any(e.ip)) e.ip = {};
  e.port = port_of(a);
  return e;
}

// Where a connection goes: the destination, or for a loopback one our own
// source address (the kernel's cma_resolve_loopback: the device talks to
// itself; the ID still reports the loopback address it was given).
proto::IpAddr peer_ip(const sockaddr_storage& src, const sockaddr_storage& dst) {
  proto::IpAddr ip;
  ip_of(dst, &ip);
  if (is_loopback(ip)) ip_of(src, &ip);
  return ip;
}

cm::Endpoint peer_endpoint(const sockaddr_storage& src, const sockaddr_storage& dst) {
  cm::Endpoint e;
  e.ip = peer_ip(src, dst);
  e.port = port_of(dst);
  return e;
}

bool valid_ps(uint16_t ps) {
  return ps == RDMA_PS_TCP || ps == RDMA_PS_UDP || ps == RDMA_PS_IB || ps == RDMA_PS_IPOIB;
}

// The CM's QP type for an ID: UD for the datagram spaces, else the ID's own.
uint8_t cm_qp_type(uint16_t ps, uint8_t qp_type) {
  if (ps == RDMA_PS_UDP || ps == RDMA_PS_IPOIB) return proto::kCmQpUd;
  return qp_type == IBV_QPT_UD ? proto::kCmQpUd : proto::kCmQpRc;
}

// The smallest struct each command must carry (hdr.in) and the response it
// writes (hdr.out), as the kernel's ucma_write and handlers check them.
struct CmdSize {
  size_t in;
  size_t out;
};
CmdSize cmd_size(uint32_t cmd) {
  switch (cmd) {
    case RDMA_USER_CM_CMD_CREATE_ID: return {sizeof(rdma_ucm_create_id), sizeof(rdma_ucm_create_id_resp)};
    case RDMA_USER_CM_CMD_DESTROY_ID: return {sizeof(rdma_ucm_destroy_id), sizeof(rdma_ucm_destroy_id_resp)};
    case RDMA_USER_CM_CMD_BIND_IP: return {sizeof(rdma_ucm_bind_ip), 0};
    case RDMA_USER_CM_CMD_BIND: return {sizeof(rdma_ucm_bind), 0};
    case RDMA_USER_CM_CMD_RESOLVE_IP: return {sizeof(rdma_ucm_resolve_ip), 0};
    case RDMA_USER_CM_CMD_RESOLVE_ADDR: return {sizeof(rdma_ucm_resolve_addr), 0};
    case RDMA_USER_CM_CMD_RESOLVE_ROUTE: return {sizeof(rdma_ucm_resolve_route), 0};
    case RDMA_USER_CM_CMD_QUERY_ROUTE:
      return {sizeof(rdma_ucm_query), offsetof(rdma_ucm_query_route_resp, ibdev_index)};
    case RDMA_USER_CM_CMD_QUERY:
      return {sizeof(rdma_ucm_query), sizeof(rdma_ucm_query_path_resp)};
    case RDMA_USER_CM_CMD_CONNECT: return {offsetof(rdma_ucm_connect, reserved), 0};
    case RDMA_USER_CM_CMD_LISTEN: return {sizeof(rdma_ucm_listen), 0};
    case RDMA_USER_CM_CMD_ACCEPT: return {offsetof(rdma_ucm_accept, reserved), 0};
    case RDMA_USER_CM_CMD_REJECT: return {sizeof(rdma_ucm_reject), 0};
    case RDMA_USER_CM_CMD_DISCONNECT: return {sizeof(rdma_ucm_disconnect), 0};
    case RDMA_USER_CM_CMD_INIT_QP_ATTR: return {sizeof(rdma_ucm_init_qp_attr), sizeof(ib_uverbs_qp_attr)};
    case RDMA_USER_CM_CMD_SET_OPTION: return {sizeof(rdma_ucm_set_option), 0};
    case RDMA_USER_CM_CMD_NOTIFY: return {sizeof(rdma_ucm_notify), 0};
    case RDMA_USER_CM_CMD_MIGRATE_ID: return {sizeof(rdma_ucm_migrate_id), sizeof(rdma_ucm_migrate_resp)};
    case RDMA_USER_CM_CMD_JOIN_IP_MCAST: return {sizeof(rdma_ucm_join_ip_mcast), sizeof(rdma_ucm_create_id_resp)};
    case RDMA_USER_CM_CMD_JOIN_MCAST: return {sizeof(rdma_ucm_join_mcast), sizeof(rdma_ucm_create_id_resp)};
    case RDMA_USER_CM_CMD_LEAVE_MCAST: return {sizeof(rdma_ucm_destroy_id), sizeof(rdma_ucm_destroy_id_resp)};
    default: return {0, 0};
  }
}

template <class T>
T load(std::span<const uint8_t> in) {
  T v{};
  std::memcpy(&v, in.data(), std::min(in.size(), sizeof v));
  return v;
}

template <class T>
void answer(const T& v, size_t out_len, CmRole::Reply* out) {
  const auto* p = reinterpret_cast<const uint8_t*>(&v);
  out->body.assign(p, p + std::min(out_len, sizeof v));
}

int fail(CmRole::Reply* out, int err, const char* why) {
  out->err = err;
  out->reason = why;
  return err;
}

void to_conn_param(const cm::ConnParam& p, rdma_ucm_conn_param* c) {
  c->qp_num = p.qpn;
  c->qkey = p.qkey;
  const size_t n = std::min(p.private_data.size(), sizeof c->private_data);
  if (n) std::memcpy(c->private_data, p.private_data.data(), n);
  c->private_data_len = static_cast<uint8_t>(n);
  c->srq = p.srq;
  c->responder_resources = p.responder_resources;
  c->initiator_depth = p.initiator_depth;
  c->flow_control = 1;
  c->retry_count = p.retry_count;
  c->rnr_retry_count = p.rnr_retry;
}

// The application's rdma_conn_param (CONNECT, ACCEPT) as the CM's. The
// private data is bounded by the kernel struct; the CM bounds it per
// message (REQ 92, REP 196).
cm::ConnParam from_conn_param(const rdma_ucm_conn_param& c, uint32_t psn, uint8_t mtu) {
  cm::ConnParam p;
  p.qpn = c.qp_num & 0xFFFFFF;
  p.qkey = c.qkey;
  p.start_psn = psn;
  p.responder_resources = c.responder_resources;
  p.initiator_depth = c.initiator_depth;
  p.retry_count = std::min<uint8_t>(c.retry_count, 7);
  p.rnr_retry = std::min<uint8_t>(c.rnr_retry_count, 7);
  p.srq = c.srq != 0;
  p.path_mtu = mtu;
  const size_t n = std::min<size_t>(c.private_data_len, sizeof c.private_data);
  p.private_data.assign(c.private_data, c.private_data + n);
  return p;
}

}  // namespace

// One rdma_cm ID: the application's (CREATE_ID) or a passive connection's
// (a CONNECT_REQUEST).
struct CmRole::Id {
  fw::OwnerId client = 0;
  uid_t user = 0;
  uint64_t uid = 0;  // the application's cookie (librdmacm: its cma_id_private)
  uint16_t ps = 0;
  uint8_t qp_type = 0;
  sockaddr_storage src{}, dst{};
  bool bound = false, has_dst = false;
  enum class Addr : uint8_t { kNone, kResolving, kResolved } addr = Addr::kNone;
  bool route = false;
  fw::Time resolve_deadline = 0, resolve_retry = 0;
  cm::ListenId listener = 0;
  cm::ConnId conn = 0;
  bool passive = false;
  bool disconnected = false;  // DREQ sent or received: a second DISCONNECT is a no-op
  uint32_t start_psn = 0;
  uint8_t tos = 0, ack_timeout = 0;
  bool reuseaddr = false, afonly = false;
  uint32_t groups = 0;  // multicast memberships (groups_)
  uint32_t qkey = 0;  // UD: fixed by the first INIT_QP_ATTR or ACCEPT (the kernel's cma_set_qkey)
  bool ud() const { return cm_qp_type(ps, qp_type) == proto::kCmQpUd; }
};

// The ID's Q_Key: the one it has, else `want`, else the port space's
// (RDMA_UDP_QKEY), as the kernel's cma_set_qkey. A different `want` once
// one is fixed is refused.
int CmRole::set_qkey(Id& id, uint32_t want, Reply* out) {
  if (id.qkey && want && want != id.qkey)
    return fail(out, EINVAL, "Q_Key differs from the one this rdma_cm ID already uses");
  if (!id.qkey) id.qkey = want ? want : kRdmaUdpQkey;
  return 0;
}

struct CmRole::Record {
  mroce_ucma_event_hdr hdr{};
  rdma_ucm_event_resp resp{};
};

struct CmRole::Channel {
  fw::OwnerId client = 0;
  uid_t user = 0;
  int fd = -1;
  uint64_t token = 0;
  std::deque<Record> pending;
  std::vector<Handle> ids;
};

// One multicast membership of an ID (JOIN_*MCAST), named by its own handle.
struct CmRole::Group {
  Handle id = 0;
  uint64_t uid = 0;  // the application's cookie for it (librdmacm: its cma_multicast)
  proto::IpAddr ip;
};

struct CmRole::Cmd {
  uint32_t cmd = 0;
  uint16_t out_len = 0;
  std::span<const uint8_t> in;     // hdr.in bytes
  std::span<const uint8_t> extra;  // SET_OPTION's value
};

CmRole::CmRole(const cm::Config& config, const CmLimits& limits, Env env)
    : cm_(config, [](void* self) { return static_cast<CmRole*>(self)->random32(); }, this),
      limits_(limits),
      env_(std::move(env)) {}

CmRole::~CmRole() {
  for (auto& [id, ch] : channels_)
    if (ch.fd >= 0) ::close(ch.fd);
}

void CmRole::set_port(const fw::PortInfo& port) { port_ = port; }

uint32_t CmRole::random32() { return env_.random ? env_.random(env_.random_ctx) : 0x12345u; }

// ---------------- rx, tx, timers ----------------

bool CmRole::on_frame(std::span<const uint8_t> f, fw::Time now) {
  // The opcode, read without parsing (data frames must not pay for it).
  if (f.size() < proto::kEthLen + 1) return false;
  const uint8_t ver = f[proto::kEthLen] >> 4;
  const size_t ip = ver == 4 ? size_t{f[proto::kEthLen] & 0xFu} * 4 : ver == 6 ? proto::kIpv6Len : 0;
  const size_t at = proto::kEthLen + ip + proto::kUdpLen + 1;
  if (ip == 0 || f.size() <= at || !proto::is_cm(static_cast<proto::Opcode>(f[at]))) return false;
  counters_.cm_rx_frames++;
  auto parsed = proto::parse_frame(f);
  if (!parsed) {
    counters_.cm_rx_drop_parse++;
    return true;
  }
  const proto::Frame& fr = parsed.value();
  if (!local_address(fr.headers.dst_ip)) {
    counters_.cm_rx_drop_not_ours++;
    return true;
  }
  cm::Output out;
  cm_.on_packet(fr.headers.src_ip, fr.headers.dst_ip, fr.packet, now, out);
  flush(out);
  for (const cm::Event& e : out.events) deliver(e, now);
  return true;
}

// Messages to the packet port; a REJ answering a REQ that made no
// connection (nobody listens, backlog full) is rate limited: anyone can
// send REQs from any source address.
void CmRole::flush(cm::Output& out) {
  for (const cm::Outgoing& m : out.messages) {
    if (m.header.mbth.opcode == proto::Opcode::kCmRej && m.header.cm.local_comm_id == 0) {
      if (rej_in_window_ >= kStrayRejPerSecond) {
        counters_.cm_rej_rate_limited++;
        continue;
      }
      rej_in_window_++;
    }
    if (!env_.send) {
      counters_.cm_tx_no_port++;
      continue;
    }
    fw::OutPacket p;
    p.src_ip = m.from;
    p.dst_ip = m.to;
    p.src_port = static_cast<uint16_t>(0xC000 | (m.header.cm.local_comm_id & 0x3FFF));
    p.packet = m.packet();
    p.packet.mbth.timestamp = 0;
    env_.send(p);
    counters_.cm_tx_frames++;
  }
  out.messages.clear();
}

int CmRole::poll(fw::Time now) {
  int work = 0;
  if (now >= rej_window_ + 1'000 * kMs) {
    rej_window_ = now;
    rej_in_window_ = 0;
  }
  if (cm_.next_deadline() <= now) {
    cm::Output out;
    cm_.on_timer(now, out);
    flush(out);
    for (const cm::Event& e : out.events) deliver(e, now);
    work++;
  }
  for (auto& [h, id] : ids_) {
    if (id.addr == Id::Addr::kResolving && id.resolve_retry <= now) {
      try_resolve(h, id, now);
      work++;
    }
  }
  for (auto& [c, ch] : channels_)
    if (!ch.pending.empty()) work += drain(ch);
  return work;
}

fw::Time CmRole::next_deadline() const {
  fw::Time t = cm_.next_deadline();
  for (const auto& [h, id] : ids_)
    if (id.addr == Id::Addr::kResolving) t = std::min(t, id.resolve_retry);
  bool pending = false;
  for (const auto& [c, ch] : channels_) pending |= !ch.pending.empty();
  if (pending) t = 0;  // poll() retries them; next_deadline is read after a pass
  return t;
}

// ---------------- events ----------------

void CmRole::deliver(const cm::Event& e, fw::Time now) {
  if (e.type == cm::EventType::kConnectRequest) {
    auto l = by_listener_.find(e.listener);
    std::optional<cm::ConnInfo> info = cm_.info(e.conn);
    cm::Output out;
    if (l == by_listener_.end() || !info) {  // the listener just went away
      cm_.destroy(e.conn, now, out);
      flush(out);
      return;
    }
    Id& lid = ids_.at(l->second);
    Channel& ch = channels_.at(lid.client);
    Reply scratch;
    if (admit_id(ch, &scratch) != 0) {  // over the client's or user's ID limit
      cm_.destroy(e.conn, now, out);
      flush(out);
      return;
    }
    Id child;
    child.ps = lid.ps;
    child.qp_type = lid.qp_type;
    child.src = sockaddr_of(info->local.ip, info->local.port, lid.src.ss_family);
    child.dst = sockaddr_of(info->peer.ip, info->peer.port, lid.src.ss_family);
    child.bound = child.has_dst = true;
    child.addr = Id::Addr::kResolved;
    child.route = true;
    child.conn = e.conn;
    child.passive = true;
    const Handle h = add_id(ch, child);
    by_conn_[e.conn] = h;
    raise(l->second, lid, h, RDMA_CM_EVENT_CONNECT_REQUEST, 0, &e.remote);
    return;
  }
  auto it = by_conn_.find(e.conn);
  if (it == by_conn_.end()) return;  // destroyed by its application
  const Handle h = it->second;
  Id& id = ids_.at(h);
  switch (e.type) {
    case cm::EventType::kConnectResponse:
      raise(h, id, h, RDMA_CM_EVENT_CONNECT_RESPONSE, 0, &e.remote);
      break;
    case cm::EventType::kEstablished: raise(h, id, h, RDMA_CM_EVENT_ESTABLISHED, 0, &e.remote); break;
    case cm::EventType::kRejected: raise(h, id, h, RDMA_CM_EVENT_REJECTED, e.status, &e.remote); break;
    case cm::EventType::kUnreachable:
      raise(h, id, h, RDMA_CM_EVENT_UNREACHABLE, -ETIMEDOUT, nullptr);
      break;
    case cm::EventType::kDisconnected:
      id.disconnected = true;
      raise(h, id, h, RDMA_CM_EVENT_DISCONNECTED, 0, nullptr);
      break;
    case cm::EventType::kTimewaitExit:
      raise(h, id, h, RDMA_CM_EVENT_TIMEWAIT_EXIT, 0, nullptr);
      break;
    case cm::EventType::kConnectRequest: break;
  }
  if (e.type == cm::EventType::kRejected || e.type == cm::EventType::kUnreachable ||
      e.type == cm::EventType::kTimewaitExit || (e.type == cm::EventType::kEstablished && id.ud())) {
    by_conn_.erase(it);  // the CM forgot it (or will say nothing more of it)
    id.conn = 0;
  }
}

void CmRole::raise(Handle counted, const Id& id, Handle named, uint32_t event, int status,
                   const cm::ConnParam* param) {
  auto ch = channels_.find(id.client);
  if (ch == channels_.end()) return;
  Record r;
  r.hdr.counted_id = counted;
  r.resp.uid = id.uid;
  r.resp.id = named;
  r.resp.event = event;
  r.resp.status = static_cast<uint32_t>(status);
  auto about = ids_.find(named);  // a CONNECT_REQUEST's new ID holds its addresses
  if (param && id.ud()) to_ud_param(about == ids_.end() ? id : about->second, *param, &r.resp.param.ud);
  else if (param) to_conn_param(*param, &r.resp.param.conn);
  push(ch->second, r);
}

// The peer's QP, Q_Key and the address handle to reach it (ESTABLISHED of
// an active UD ID), or a UD CONNECT_REQUEST's private data.
void CmRole::to_ud_param(const Id& id, const cm::ConnParam& p, rdma_ucm_ud_param* u) const {
  u->qp_num = p.qpn;
  u->qkey = p.qkey;
  const size_t n = std::min(p.private_data.size(), sizeof u->private_data);
  if (n) std::memcpy(u->private_data, p.private_data.data(), n);
  u->private_data_len = static_cast<uint8_t>(n);
  proto::IpAddr sip, dip;
  if (!id.has_dst || !ip_of(id.dst, &dip) || !ip_of(id.src, &sip)) return;
  std::memcpy(u->ah_attr.grh.dgid, dip.bytes.data(), 16);
  u->ah_attr.grh.sgid_index = gid_index(sip);
  u->ah_attr.grh.hop_limit = 64;
  u->ah_attr.grh.traffic_class = id.tos;
  u->ah_attr.is_global = 1;
  u->ah_attr.port_num = 1;
}

uint8_t CmRole::gid_index(const proto::IpAddr& ip) const {
  auto g = std::find(port_.gids.begin(), port_.gids.end(), ip);
  return static_cast<uint8_t>(g == port_.gids.end() ? 0 : g - port_.gids.begin());
}

void CmRole::push(Channel& ch, Record r) {
  if (ch.fd < 0) {
    counters_.cm_events_dropped_gone++;
    return;
  }
  if (ch.pending.size() >= limits_.max_queued_events) {
    counters_.cm_events_dropped_full++;
    return;
  }
  ch.pending.push_back(r);
  drain(ch);
}

// Writes queued records while the socket has room; never blocks.
int CmRole::drain(Channel& ch) {
  int n = 0;
  while (!ch.pending.empty()) {
    const Record& r = ch.pending.front();
    const ssize_t w = ::send(ch.fd, &r, sizeof r, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      counters_.cm_events_queued++;
      break;
    }
    if (w < 0) {
      counters_.cm_events_dropped_gone += ch.pending.size();
      ch.pending.clear();
      break;
    }
    counters_.cm_events++;
    ch.pending.pop_front();
    n++;
  }
  return n;
}

// ---------------- clients ----------------

void CmRole::handle(fw::OwnerId client, uid_t uid, uint16_t op, std::span<const uint8_t> body,
                    const std::vector<int>& fds, fw::Time now, Reply* out) {
  if (op == MROCE_OP_UCMA_OPEN) {
    open_channel(client, uid, fds, out);
    return;
  }
  auto it = channels_.find(client);
  if (op != MROCE_OP_UCMA_CMD) {
    counters_.cm_cmd_malformed++;
    fail(out, EOPNOTSUPP, "unknown ucma operation");
    return;
  }
  if (it == channels_.end()) {
    counters_.cm_cmd_refused++;
    fail(out, EPROTO, "open the rdma_cm channel (MROCE_OP_UCMA_OPEN) first");
    return;
  }
  rdma_ucm_cmd_hdr hdr{};
  if (body.size() < sizeof hdr) {
    counters_.cm_cmd_malformed++;
    fail(out, EINVAL, "shorter than struct rdma_ucm_cmd_hdr");
    return;
  }
  std::memcpy(&hdr, body.data(), sizeof hdr);
  Cmd c;
  c.cmd = hdr.cmd;
  c.out_len = hdr.out;
  const size_t rest = body.size() - sizeof hdr;
  const CmdSize need = cmd_size(hdr.cmd);
  if (hdr.in > rest || need.in == 0 || hdr.in < need.in || hdr.out < need.out) {
    counters_.cm_cmd_malformed++;
    fail(out, need.in == 0 ? EINVAL : hdr.out < need.out && hdr.in >= need.in ? ENOSPC : EINVAL,
         need.in == 0           ? "unknown or unserved rdma_cm command"
         : hdr.in > rest        ? "hdr.in runs past the message"
         : hdr.in < need.in     ? "command shorter than its struct"
                                : "hdr.out smaller than the response");
    return;
  }
  c.in = body.subspan(sizeof hdr, hdr.in);
  c.extra = body.subspan(sizeof hdr + hdr.in);
  counters_.cm_cmd++;
  if (command(it->second, c, now, out) != 0) counters_.cm_cmd_refused++;
}

int CmRole::open_channel(fw::OwnerId client, uid_t uid, const std::vector<int>& fds, Reply* out) {
  if (channels_.count(client)) return fail(out, EEXIST, "this connection already has a channel");
  if (fds.size() != 1) return fail(out, EINVAL, "UCMA_OPEN carries exactly one fd (the event socket)");
  int type = 0;
  socklen_t len = sizeof type;
  if (getsockopt(fds[0], SOL_SOCKET, SO_TYPE, &type, &len) != 0 || type != SOCK_SEQPACKET)
    return fail(out, EINVAL, "the event fd is not a SOCK_SEQPACKET socket");
  const int fd = fcntl(fds[0], F_DUPFD_CLOEXEC, 0);
  if (fd < 0) return fail(out, errno, "cannot keep the event socket");
  Channel& ch = channels_[client];
  ch.client = client;
  ch.user = uid;
  ch.fd = fd;
  ch.token = (uint64_t{random32()} << 32) | random32();
  mroce_ucma_open_resp r{ch.token};
  answer(r, sizeof r, out);
  return 0;
}

void CmRole::close_client(fw::OwnerId client, fw::Time now) {
  auto it = channels_.find(client);
  if (it == channels_.end()) return;
  std::vector<Handle> ids = it->second.ids;
  for (Handle h : ids) forget_id(h, now);
  if (it->second.fd >= 0) ::close(it->second.fd);
  channels_.erase(it);
}

int CmRole::admit_id(Channel& ch, Reply* out) {
  if (ch.ids.size() >= limits_.max_ids_per_client) {
    counters_.cm_ids_client_limit++;
    return fail(out, ENOMEM, "too many rdma_cm IDs on this channel (max_ids_per_client: raise --max-cm-ids-per-client)");
  }
  if (ids_per_user_[ch.user] >= limits_.max_ids_per_user) {
    counters_.cm_ids_user_limit++;
    return fail(out, ENOMEM, "too many rdma_cm IDs for this user (max_ids_per_user: raise --uid-max-cm-ids)");
  }
  return 0;
}

CmRole::Handle CmRole::add_id(Channel& ch, Id id) {
  while (next_handle_ == 0 || ids_.count(next_handle_)) next_handle_++;
  const Handle h = next_handle_++;
  id.client = ch.client;
  id.user = ch.user;
  id.start_psn = random32();
  ids_[h] = id;
  ch.ids.push_back(h);
  ids_per_user_[ch.user]++;
  return h;
}

// The ID goes; its connection's peer is told (REJ or DREQ) and its
// listener stops. No further event names it.
void CmRole::forget_id(Handle h, fw::Time now) {
  auto it = ids_.find(h);
  if (it == ids_.end()) return;
  Id& id = it->second;
  cm::Output out;
  if (id.conn) {
    cm_.destroy(id.conn, now, out);
    by_conn_.erase(id.conn);
  }
  if (id.listener) {
    cm_.unlisten(id.listener);
    by_listener_.erase(id.listener);
  }
  flush(out);
  for (const cm::Event& e : out.events) deliver(e, now);
  drop_groups_of(h);
  auto ch = channels_.find(id.client);
  if (ch != channels_.end()) std::erase(ch->second.ids, h);
  if (--ids_per_user_[id.user] == 0) ids_per_user_.erase(id.user);
  ids_.erase(it);
}

CmRole::Id* CmRole::find(Channel& ch, Handle h, Reply* out) {
  auto it = ids_.find(h);
  if (it == ids_.end() || it->second.client != ch.client) {
    fail(out, ENOENT, "no such rdma_cm ID on this channel");
    return nullptr;
  }
  return &it->second;
}

// ---------------- commands ----------------

int CmRole::command(Channel& ch, const Cmd& c, fw::Time now, Reply* out) {
  switch (c.cmd) {
    case RDMA_USER_CM_CMD_CREATE_ID: return create_id(ch, c, out);
    case RDMA_USER_CM_CMD_DESTROY_ID: return destroy_id(ch, c, now, out);
    case RDMA_USER_CM_CMD_BIND_IP:
    case RDMA_USER_CM_CMD_BIND: return bind(ch, c, out);
    case RDMA_USER_CM_CMD_RESOLVE_IP:
    case RDMA_USER_CM_CMD_RESOLVE_ADDR: return resolve_addr(ch, c, now, out);
    case RDMA_USER_CM_CMD_RESOLVE_ROUTE: return resolve_route(ch, c, out);
    case RDMA_USER_CM_CMD_QUERY_ROUTE: return query_route(ch, c, out);
    case RDMA_USER_CM_CMD_QUERY: return query(ch, c, out);
    case RDMA_USER_CM_CMD_LISTEN: return listen(ch, c, out);
    case RDMA_USER_CM_CMD_CONNECT: return connect(ch, c, now, out);
    case RDMA_USER_CM_CMD_ACCEPT: return accept(ch, c, now, out);
    case RDMA_USER_CM_CMD_REJECT: return reject(ch, c, now, out);
    case RDMA_USER_CM_CMD_DISCONNECT: return disconnect(ch, c, now, out);
    case RDMA_USER_CM_CMD_INIT_QP_ATTR: return init_qp_attr(ch, c, out);
    case RDMA_USER_CM_CMD_SET_OPTION: return set_option(ch, c, out);
    case RDMA_USER_CM_CMD_NOTIFY: return notify(ch, c, now, out);
    case RDMA_USER_CM_CMD_MIGRATE_ID: return migrate_id(ch, c, out);
    case RDMA_USER_CM_CMD_JOIN_IP_MCAST:
    case RDMA_USER_CM_CMD_JOIN_MCAST: return join(ch, c, out);
    case RDMA_USER_CM_CMD_LEAVE_MCAST: return leave(ch, c, out);
  }
  return fail(out, ENOSYS, "rdma_cm command not served");
}

int CmRole::create_id(Channel& ch, const Cmd& c, Reply* out) {
  const auto cmd = load<rdma_ucm_create_id>(c.in);
  if (!valid_ps(cmd.ps)) return fail(out, EINVAL, "unknown port space");
  if (cmd.qp_type != IBV_QPT_RC && cmd.qp_type != IBV_QPT_UD)
    return fail(out, EINVAL, "QP type must be RC or UD");
  if (int err = admit_id(ch, out)) return err;
  Id id;
  id.uid = cmd.uid;
  id.ps = cmd.ps;
  id.qp_type = cmd.qp_type;
  rdma_ucm_create_id_resp r{};
  r.id = add_id(ch, id);
  answer(r, c.out_len, out);
  return 0;
}

int CmRole::destroy_id(Channel& ch, const Cmd& c, fw::Time now, Reply* out) {
  const auto cmd = load<rdma_ucm_destroy_id>(c.in);
  if (!find(ch, cmd.id, out)) return out->err;
  forget_id(cmd.id, now);
  // The events read are the interposer's count (it drops the unread ones).
  rdma_ucm_destroy_id_resp r{};
  answer(r, c.out_len, out);
  return 0;
}

int CmRole::bind(Channel& ch, const Cmd& c, Reply* out) {
  uint32_t h;
  sockaddr_storage a{};
  size_t len;
  if (c.cmd == RDMA_USER_CM_CMD_BIND_IP) {
    const auto cmd = load<rdma_ucm_bind_ip>(c.in);
    h = cmd.id;
    std::memcpy(&a, &cmd.addr, sizeof cmd.addr);
    len = sizeof cmd.addr;
  } else {
    const auto cmd = load<rdma_ucm_bind>(c.in);
    if (cmd.addr_size > sizeof cmd.addr) return fail(out, EINVAL, "BIND addr_size larger than the address");
    h = cmd.id;
    std::memcpy(&a, &cmd.addr, cmd.addr_size);
    len = cmd.addr_size;
  }
  Id* id = find(ch, h, out);
  if (!id) return out->err;
  return bind_to(*id, reinterpret_cast<const sockaddr*>(&a), len, out);
}

int CmRole::bind_to(Id& id, const sockaddr* addr, size_t len, Reply* out) {
  if (addr->sa_family != AF_INET && addr->sa_family != AF_INET6)
    return fail(out, EAFNOSUPPORT, "only AF_INET and AF_INET6 (no AF_IB on MetaRoCE)");
  sockaddr_storage b{};
  const size_t need = addr->sa_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
  if (len < need) return fail(out, EINVAL, "address shorter than its family");
  if (id.bound) return fail(out, EINVAL, "rdma_cm ID already bound");
  std::memcpy(&b, addr, need);
  proto::IpAddr ip;
  ip_of(b, &ip);
  if (!is_any(ip) && !local_address(ip)) {
    // The kernel's errnos: an address of another interface is ENODEV (no
    // RDMA device has it), one of no interface EADDRNOTAVAIL.
    const bool on_host = env_.host_has_address ? env_.host_has_address(ip) : host_has_address(ip);
    if (on_host) return fail(out, ENODEV, "address is on an interface without a MetaRoCE device");
    return fail(out, EADDRNOTAVAIL, "no interface has this address");
  }
  if (port_of(b) == 0) {  // an ephemeral port, as the kernel picks one
    for (uint32_t p = 32768 + random32() % 28000, n = 0; n < 32768; ++n, p = p >= 65535 ? 32768 : p + 1) {
      set_sin_port(b, static_cast<uint16_t>(p));
      if (!port_taken(id, id.ps, b)) break;
    }
  }
  if (port_taken(id, id.ps, b)) return fail(out, EADDRINUSE, "port in use in this port space");
  id.src = b;
  id.bound = true;
  return 0;
}

bool CmRole::port_taken(const Id& self, uint16_t ps, const sockaddr_storage& a) const {
  proto::IpAddr ip;
  ip_of(a, &ip);
  for (const auto& [h, x] : ids_) {
    if (&x == &self || !x.bound || x.passive || x.ps != ps || port_of(x.src) != port_of(a)) continue;
    proto::IpAddr xip;
    ip_of(x.src, &xip);
    if (is_any(xip) || is_any(ip) || xip == ip) return true;
  }
  return false;
}

bool CmRole::local_address(const proto::IpAddr& ip) const {
  return std::find(port_.gids.begin(), port_.gids.end(), ip) != port_.gids.end();
}

// The source for a destination: the destination itself when it is ours
// (loopback), else the first address of the same family that is not
// link-local. The kernel's route decides whether it is reachable through
// this interface (LinkInterface::resolve).
bool CmRole::pick_source(const proto::IpAddr& dst, proto::IpAddr* src) const {
  if (local_address(dst)) return *src = dst, true;
  for (const proto::IpAddr& g : port_.gids) {
    if (g.is_v4() != dst.is_v4()) continue;
    if (!g.is_v4() && g.bytes[0] == 0xFE && (g.bytes[1] & 0xC0) == 0x80) continue;
    *src = g;
    return true;
  }
  return false;
}

int CmRole::resolve_addr(Channel& ch, const Cmd& c, fw::Time now, Reply* out) {
  sockaddr_storage src{}, dst{};
  uint32_t h, timeout_ms;
  if (c.cmd == RDMA_USER_CM_CMD_RESOLVE_IP) {
    const auto cmd = load<rdma_ucm_resolve_ip>(c.in);
    std::memcpy(&src, &cmd.src_addr, sizeof cmd.src_addr);
    std::memcpy(&dst, &cmd.dst_addr, sizeof cmd.dst_addr);
    h = cmd.id;
    timeout_ms = cmd.timeout_ms;
  } else {
    const auto cmd = load<rdma_ucm_resolve_addr>(c.in);
    if (cmd.src_size > sizeof cmd.src_addr || cmd.dst_size > sizeof cmd.dst_addr)
      return fail(out, EINVAL, "address size larger than the address");
    std::memcpy(&src, &cmd.src_addr, cmd.src_size);
    std::memcpy(&dst, &cmd.dst_addr, cmd.dst_size);
    h = cmd.id;
    timeout_ms = cmd.timeout_ms;
  }
  Id* id = find(ch, h, out);
  if (!id) return out->err;
  if (dst.ss_family != AF_INET && dst.ss_family != AF_INET6)
    return fail(out, EAFNOSUPPORT, "destination must be AF_INET or AF_INET6");
  if (id->addr == Id::Addr::kResolving) return fail(out, EINVAL, "address resolution already running");
  if (id->conn || id->listener) return fail(out, EINVAL, "rdma_cm ID is connected or listening");
  proto::IpAddr dip, sip;
  ip_of(dst, &dip);
  if (!id->bound) {
    proto::IpAddr given;
    const bool has_src = ip_of(src, &given) && !is_any(given);
    if (!has_src && !pick_source(dip, &given))
      return fail(out, EADDRNOTAVAIL, "this device has no address of the destination's family");
    sockaddr_storage b = sockaddr_of(given, has_src ? port_of(src) : 0, dst.ss_family);
    if (int err = bind_to(*id, reinterpret_cast<const sockaddr*>(&b), len_of(b), out)) return err;
  }
  id->dst = dst;
  id->has_dst = true;
  id->addr = Id::Addr::kResolving;
  id->route = false;
  id->resolve_deadline = now + fw::Time{std::clamp<uint32_t>(timeout_ms, 1, kMaxResolveMs)} * kMs;
  try_resolve(h, *id, now);
  return 0;
}

// The next hop's MAC known (or the destination is ours): ADDR_RESOLVED;
// past the timeout: ADDR_ERROR. Asking again triggers the kernel's
// neighbour discovery (rate limited there).
void CmRole::try_resolve(Handle h, Id& id, fw::Time now) {
  proto::IpAddr dip;
  ip_of(id.dst, &dip);
  proto::MacAddr mac;
  const bool ok = is_loopback(dip) || local_address(dip) || is_multicast(dip) || (env_.link && env_.link->resolve(dip, &mac));
  if (ok) {
    id.addr = Id::Addr::kResolved;
    counters_.cm_addr_resolved++;
    raise(h, id, h, RDMA_CM_EVENT_ADDR_RESOLVED, 0, nullptr);
    return;
  }
  if (now >= id.resolve_deadline) {
    id.addr = Id::Addr::kNone;
    counters_.cm_addr_errors++;
    raise(h, id, h, RDMA_CM_EVENT_ADDR_ERROR, -EHOSTUNREACH, nullptr);
    return;
  }
  id.resolve_retry = now + kResolveRetry;
}

int CmRole::resolve_route(Channel& ch, const Cmd& c, Reply* out) {
  const auto cmd = load<rdma_ucm_resolve_route>(c.in);
  Id* id = find(ch, cmd.id, out);
  if (!id) return out->err;
  if (id->addr != Id::Addr::kResolved) return fail(out, EINVAL, "resolve the address first");
  id->route = true;  // one path: the addresses are the IP header's
  raise(cmd.id, *id, cmd.id, RDMA_CM_EVENT_ROUTE_RESOLVED, 0, nullptr);
  return 0;
}

uint8_t CmRole::link_mtu_enum() const {
  // The largest ibv_mtu whose frames fit the interface's IP MTU
  // (MetaRoCE adds ~100 bytes of headers; the engine splits at its own MTU).
  const uint32_t mtu = port_.link_mtu;
  if (mtu >= 4096 + 128) return IBV_MTU_4096;
  if (mtu >= 2048 + 128) return IBV_MTU_2048;
  if (mtu >= 1024 + 128) return IBV_MTU_1024;
  if (mtu >= 512 + 128) return IBV_MTU_512;
  return IBV_MTU_256;
}

int CmRole::query_route(Channel& ch, const Cmd& c, Reply* out) {
  const auto cmd = load<rdma_ucm_query>(c.in);
  Id* id = find(ch, cmd.id, out);
  if (!id) return out->err;
  rdma_ucm_query_route_resp r{};
  proto::IpAddr sip, dip;
  const bool dev = id->bound && ip_of(id->src, &sip) && !is_any(sip);
  r.node_guid = dev ? htobe64(env_.node_guid) : 0;
  r.port_num = dev ? 1 : 0;
  if (id->bound) std::memcpy(&r.src_addr, &id->src, std::min(len_of(id->src), sizeof r.src_addr));
  if (id->has_dst) std::memcpy(&r.dst_addr, &id->dst, std::min(len_of(id->dst), sizeof r.dst_addr));
  if (dev) std::memcpy(r.ib_route[0].sgid, sip.bytes.data(), 16);
  if (id->has_dst) {
    dip = peer_ip(id->src, id->dst);  // loopback: the device's own GID, as the kernel's
    std::memcpy(r.ib_route[0].dgid, dip.bytes.data(), 16);
  }
  if (id->route) {
    r.num_paths = 1;
    r.ib_route[0].pkey = htons(0xFFFF);
    r.ib_route[0].mtu = link_mtu_enum();
    r.ib_route[0].hop_limit = 64;
    r.ib_route[0].reversible = 1;
    r.ib_route[0].numb_path = 1;
  }
  answer(r, c.out_len, out);
  return 0;
}

int CmRole::query(Channel& ch, const Cmd& c, Reply* out) {
  const auto cmd = load<rdma_ucm_query>(c.in);
  Id* id = find(ch, cmd.id, out);
  if (!id) return out->err;
  if (cmd.option == RDMA_USER_CM_QUERY_PATH) {
    rdma_ucm_query_path_resp r{};  // no IB path records over MetaRoCE
    answer(r, c.out_len, out);
    return 0;
  }
  if (cmd.option != RDMA_USER_CM_QUERY_ADDR)
    return fail(out, ENOSYS, "QUERY GID: AF_IB is not served (librdmacm uses QUERY_ROUTE)");
  if (c.out_len < offsetof(rdma_ucm_query_addr_resp, ibdev_index))
    return fail(out, ENOSPC, "QUERY response too small");
  rdma_ucm_query_addr_resp r{};
  proto::IpAddr sip;
  const bool dev = id->bound && ip_of(id->src, &sip) && !is_any(sip);
  r.node_guid = dev ? htobe64(env_.node_guid) : 0;
  r.port_num = dev ? 1 : 0;
  r.pkey = 0xFFFF;
  if (id->bound) {
    r.src_size = static_cast<uint16_t>(len_of(id->src));
    std::memcpy(&r.src_addr, &id->src, r.src_size);
  }
  if (id->has_dst) {
    r.dst_size = static_cast<uint16_t>(len_of(id->dst));
    std::memcpy(&r.dst_addr, &id->dst, r.dst_size);
  }
  answer(r, c.out_len, out);
  return 0;
}

int CmRole::listen(Channel& ch, const Cmd& c, Reply* out) {
  const auto cmd = load<rdma_ucm_listen>(c.in);
  Id* id = find(ch, cmd.id, out);
  if (!id) return out->err;
  if (!id->bound) return fail(out, EINVAL, "listen on an unbound rdma_cm ID (bind it first)");
  if (id->listener || id->conn) return fail(out, EINVAL, "rdma_cm ID is already listening or connected");
  const int backlog = static_cast<int>(std::min<uint32_t>(cmd.backlog, 1u << 20));
  cm::Status s = cm_.listen(static_cast<proto::PortSpace>(id->ps), endpoint_of(id->src), backlog,
                            &id->listener);
  if (!s.ok()) return fail(out, s.err, s.reason);
  by_listener_[id->listener] = cmd.id;
  return 0;
}

int CmRole::connect(Channel& ch, const Cmd& c, fw::Time now, Reply* out) {
  const auto cmd = load<rdma_ucm_connect>(c.in);
  Id* id = find(ch, cmd.id, out);
  if (!id) return out->err;
  if (!id->route) return fail(out, EINVAL, "resolve the route first (rdma_resolve_route)");
  if (id->conn || id->listener) return fail(out, EISCONN, "rdma_cm ID is connected or listening");
  const cm::ConnParam mine = from_conn_param(cmd.conn_param, id->start_psn, link_mtu_enum());
  cm::Output o;
  cm::ConnId conn = 0;
  cm::Status s = cm_.connect(static_cast<proto::PortSpace>(id->ps), cm_qp_type(id->ps, id->qp_type),
                             endpoint_of(id->src), peer_endpoint(id->src, id->dst), mine, now, o, &conn);
  if (!s.ok()) return fail(out, s.err, s.reason);
  id->conn = conn;
  by_conn_[conn] = cmd.id;
  flush(o);
  return 0;
}

// Passive: the REP. Active, after CONNECT_RESPONSE (librdmacm moved the QP
// to RTS and sends ACCEPT): the RTU.
int CmRole::accept(Channel& ch, const Cmd& c, fw::Time now, Reply* out) {
  const auto cmd = load<rdma_ucm_accept>(c.in);
  Id* id = find(ch, cmd.id, out);
  if (!id) return out->err;
  if (!id->conn) return fail(out, EINVAL, "accept: no connection on this rdma_cm ID");
  cm::Output o;
  cm::Status s;
  if (id->passive) {
    if (id->ud() && set_qkey(*id, cmd.conn_param.qkey, out)) return out->err;
    if (cmd.uid) id->uid = cmd.uid;
    cm::ConnParam mine = from_conn_param(cmd.conn_param, id->start_psn, link_mtu_enum());
    mine.qkey = id->qkey;
    s = cm_.accept(id->conn, mine, now, o);
    if (s.ok() && id->ud()) {  // answered: the CM resends the REP alone, no event follows
      by_conn_.erase(id->conn);
      id->conn = 0;
    }
  } else {
    s = cm_.establish(id->conn, now, o);
  }
  if (!s.ok()) return fail(out, s.err, s.reason);
  flush(o);
  for (const cm::Event& e : o.events) deliver(e, now);
  return 0;
}

int CmRole::reject(Channel& ch, const Cmd& c, fw::Time now, Reply* out) {
  const auto cmd = load<rdma_ucm_reject>(c.in);
  Id* id = find(ch, cmd.id, out);
  if (!id) return out->err;
  if (!id->conn) return fail(out, EINVAL, "reject: no connection on this rdma_cm ID");
  const size_t n = std::min<size_t>(cmd.private_data_len, sizeof cmd.private_data);
  cm::Output o;
  cm::Status s = cm_.reject(id->conn, std::vector<uint8_t>(cmd.private_data, cmd.private_data + n), now, o);
  if (!s.ok()) return fail(out, s.err, s.reason);
  by_conn_.erase(id->conn);
  id->conn = 0;
  flush(o);
  return 0;
}

int CmRole::disconnect(Channel& ch, const Cmd& c, fw::Time now, Reply* out) {
  const auto cmd = load<rdma_ucm_disconnect>(c.in);
  Id* id = find(ch, cmd.id, out);
  if (!id) return out->err;
  if (!id->conn) return fail(out, ENOTCONN, "disconnect: rdma_cm ID is not connected");
  if (id->disconnected) return 0;  // as the kernel: the peer's DREQ already ended it
  cm::Output o;
  cm::Status s = cm_.disconnect(id->conn, {}, now, o);
  if (!s.ok()) return fail(out, s.err, s.reason);
  id->disconnected = true;
  flush(o);
  for (const cm::Event& e : o.events) deliver(e, now);
  return 0;
}

// The QP attributes librdmacm moves its QP with (ibv_modify_qp): INIT from
// the ID alone, RTR and RTS from what the connection agreed.
int CmRole::init_qp_attr(Channel& ch, const Cmd& c, Reply* out) {
  const auto cmd = load<rdma_ucm_init_qp_attr>(c.in);
  Id* id = find(ch, cmd.id, out);
  if (!id) return out->err;
  ib_uverbs_qp_attr a{};
  a.qp_state = cmd.qp_state;
  a.port_num = 1;
  if (id->ud()) return ud_qp_attr(*id, c, &a, out);
  if (cmd.qp_state == IBV_QPS_INIT) {
    a.qp_attr_mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
    a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
    answer(a, c.out_len, out);
    return 0;
  }
  std::optional<cm::ConnInfo> info = id->conn ? cm_.info(id->conn) : std::nullopt;
  if (!info) return fail(out, EINVAL, "no connection yet: RTR and RTS need the peer's QP");
  if (cmd.qp_state == IBV_QPS_RTR) {
    a.qp_attr_mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                     IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
    a.path_mtu = info->path_mtu ? info->path_mtu : std::min(info->theirs.path_mtu, link_mtu_enum());
    a.dest_qp_num = info->theirs.qpn;
    a.rq_psn = info->theirs.start_psn;
    a.max_dest_rd_atomic = info->active ? info->mine.responder_resources : info->theirs.initiator_depth;
    a.min_rnr_timer = 12;
    std::memcpy(a.ah_attr.grh.dgid, info->peer.ip.bytes.data(), 16);
    a.ah_attr.grh.sgid_index = gid_index(info->local.ip);
    a.ah_attr.grh.hop_limit = 64;
    a.ah_attr.grh.traffic_class = id->tos;
    a.ah_attr.is_global = 1;
    a.ah_attr.port_num = 1;
  } else if (cmd.qp_state == IBV_QPS_RTS) {
    a.qp_attr_mask = IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                     IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
    a.sq_psn = id->start_psn;
    a.timeout = id->ack_timeout ? id->ack_timeout : 14;
    a.retry_cnt = info->active ? info->mine.retry_count : info->theirs.retry_count;
    a.rnr_retry = info->active ? info->mine.rnr_retry : info->theirs.rnr_retry;
    a.max_rd_atomic = info->active ? info->mine.initiator_depth : info->theirs.responder_resources;
  } else {
    return fail(out, EINVAL, "INIT_QP_ATTR answers INIT, RTR and RTS");
  }
  answer(a, c.out_len, out);
  return 0;
}

// A UD QP needs no peer: INIT takes the ID's Q_Key (librdmacm's
// ucma_init_ud_qp asks for INIT only, then moves the QP to RTR and RTS).
int CmRole::ud_qp_attr(Id& id, const Cmd& c, ib_uverbs_qp_attr* a, Reply* out) {
  switch (a->qp_state) {
    case IBV_QPS_INIT:
      set_qkey(id, 0, out);
      a->qp_attr_mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY;
      a->qkey = id.qkey;
      break;
    case IBV_QPS_RTR: a->qp_attr_mask = IBV_QP_STATE; break;
    case IBV_QPS_RTS:
      a->qp_attr_mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
      a->sq_psn = id.start_psn;
      break;
    default: return fail(out, EINVAL, "INIT_QP_ATTR answers INIT, RTR and RTS");
  }
  answer(*a, c.out_len, out);
  return 0;
}

int CmRole::set_option(Channel& ch, const Cmd& c, Reply* out) {
  const auto cmd = load<rdma_ucm_set_option>(c.in);
  Id* id = find(ch, cmd.id, out);
  if (!id) return out->err;
  if (cmd.optlen != c.extra.size()) return fail(out, EINVAL, "option value not carried (optlen)");
  if (cmd.level != RDMA_OPTION_ID) return fail(out, ENOSYS, "only RDMA_OPTION_ID options are served");
  const size_t want = cmd.optname == RDMA_OPTION_ID_TOS ? sizeof(uint8_t) : sizeof(int);
  if (cmd.optname > RDMA_OPTION_ID_ACK_TIMEOUT) return fail(out, ENOSYS, "unknown RDMA_OPTION_ID option");
  if (c.extra.size() != want) return fail(out, EINVAL, "option value of the wrong size");
  int v = 0;
  if (want == 1) v = c.extra[0];
  else std::memcpy(&v, c.extra.data(), sizeof v);
  switch (cmd.optname) {
    case RDMA_OPTION_ID_TOS: id->tos = static_cast<uint8_t>(v); break;
    case RDMA_OPTION_ID_REUSEADDR: id->reuseaddr = v != 0; break;
    case RDMA_OPTION_ID_AFONLY: id->afonly = v != 0; break;
    case RDMA_OPTION_ID_ACK_TIMEOUT: id->ack_timeout = static_cast<uint8_t>(std::min(v, 31)); break;
  }
  return 0;
}

// IBV_EVENT_COMM_EST on the passive QP: the peer's first packet came before
// the RTU, so the connection is up (cm::ConnectionManager::establish).
int CmRole::notify(Channel& ch, const Cmd& c, fw::Time now, Reply* out) {
  const auto cmd = load<rdma_ucm_notify>(c.in);
  Id* id = find(ch, cmd.id, out);
  if (!id) return out->err;
  if (cmd.event != IBV_EVENT_COMM_EST) return 0;  // as the kernel: other events are ignored
  if (!id->conn || !id->passive) return fail(out, EINVAL, "notify: no passive connection");
  cm::Output o;
  cm::Status s = cm_.establish(id->conn, now, o);
  if (!s.ok()) return fail(out, s.err, s.reason);
  flush(o);
  for (const cm::Event& e : o.events) deliver(e, now);
  return 0;
}

// Written to the new channel; `fd` names the old one, the interposer
// replaced it by the old channel's token (its fd means nothing here).
int CmRole::migrate_id(Channel& ch, const Cmd& c, Reply* out) {
  const auto cmd = load<rdma_ucm_migrate_id>(c.in);
  if (c.extra.size() != sizeof(uint64_t)) return fail(out, EINVAL, "MIGRATE_ID carries the old channel's token");
  uint64_t token;
  std::memcpy(&token, c.extra.data(), sizeof token);
  auto from = std::find_if(channels_.begin(), channels_.end(),
                           [&](const auto& kv) { return kv.second.token == token; });
  if (from == channels_.end() || from->second.user != ch.user)
    return fail(out, EBADF, "MIGRATE_ID: no such channel of this user");
  Id* id = find(from->second, cmd.id, out);
  if (!id) return out->err;
  if (&from->second != &ch) {
    Reply scratch;
    if (admit_id(ch, out)) return out->err;
    std::erase(from->second.ids, cmd.id);
    ch.ids.push_back(cmd.id);
    id->client = ch.client;
    // Events still queued for it follow it.
    std::deque<Record> keep;
    for (Record& r : from->second.pending)
      (r.resp.id == cmd.id || r.hdr.counted_id == cmd.id ? ch.pending : keep).push_back(r);
    from->second.pending.swap(keep);
    drain(ch);
  }
  rdma_ucm_migrate_resp r{};  // events read: the interposer's count
  answer(r, c.out_len, out);
  return 0;
}

}  // namespace metaroce::daemon

namespace metaroce::daemon {

// ---------------- multicast (rdma_join_multicast, rdma_leave_multicast) ----------------

// JOIN_IP_MCAST (librdmacm without AF_IB) or JOIN_MCAST: the address, its
// size and the flags checked as the kernel's ucma_join_multicast does.
int CmRole::join(Channel& ch, const Cmd& c, Reply* out) {
  sockaddr_storage a{};
  if (c.cmd == RDMA_USER_CM_CMD_JOIN_IP_MCAST) {
    const auto cmd = load<rdma_ucm_join_ip_mcast>(c.in);
    std::memcpy(&a, &cmd.addr, sizeof cmd.addr);
    return join_to(ch, c, cmd.id, cmd.uid, a, out);
  }
  const auto cmd = load<rdma_ucm_join_mcast>(c.in);
  if (cmd.join_flags != RDMA_MC_JOIN_FLAG_FULLMEMBER && cmd.join_flags != RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER)
    return fail(out, EINVAL, "unknown multicast join flags");
  if (cmd.addr_size > sizeof cmd.addr) return fail(out, EINVAL, "JOIN_MCAST addr_size larger than the address");
  std::memcpy(&a, &cmd.addr, cmd.addr_size);
  const bool sized = (a.ss_family == AF_INET && cmd.addr_size == sizeof(sockaddr_in)) ||
                     (a.ss_family == AF_INET6 && cmd.addr_size == sizeof(sockaddr_in6));
  if ((a.ss_family == AF_INET || a.ss_family == AF_INET6) && !sized)
    return fail(out, EINVAL, "JOIN_MCAST addr_size is not its family's");
  return join_to(ch, c, cmd.id, cmd.uid, a, out);
}

// The ID must be UD, bound to a MetaRoCE address and not past address
// resolution (the kernel's ADDR_BOUND or ADDR_RESOLVED); the group is
// bounded per ID and per user. MULTICAST_JOIN follows at once: no SM on
// Ethernet, the application attaches its QP (librdmacm does, in
// rdma_get_cm_event) and the engine delivers (docs/protocol.md §13.7).
int CmRole::join_to(Channel& ch, const Cmd& c, Handle h, uint64_t uid, const sockaddr_storage& a, Reply* out) {
  if (a.ss_family != AF_INET && a.ss_family != AF_INET6)
    return fail(out, EINVAL, "multicast address must be AF_INET or AF_INET6");
  Id* id = find(ch, h, out);
  if (!id) return out->err;
  proto::IpAddr sip, gip;
  if (!id->bound || !ip_of(id->src, &sip) || is_any(sip))
    return fail(out, EINVAL, "rdma_cm ID is not bound to a MetaRoCE address: bind or resolve it first");
  if (id->addr == Id::Addr::kResolving || id->route || id->conn || id->listener)
    return fail(out, EINVAL, "rdma_cm ID must be bound or address-resolved, not resolving, routed, connected or listening");
  if (!id->ud()) return fail(out, EINVAL, "multicast needs a UD rdma_cm ID (RDMA_PS_UDP)");
  ip_of(a, &gip);
  if (!is_multicast(gip)) return fail(out, EINVAL, "not a multicast address (224.0.0.0/4 or ff00::/8)");
  if (gip.is_v4() != sip.is_v4()) return fail(out, EINVAL, "multicast group of another family than the ID's address");
  if (id->groups >= limits_.max_groups_per_id) {
    counters_.cm_mcast_id_limit++;
    return fail(out, ENOMEM, "too many multicast joins on this rdma_cm ID (max_groups_per_id)");
  }
  if (groups_per_user_[ch.user] >= limits_.max_groups_per_user) {
    counters_.cm_mcast_user_limit++;
    return fail(out, ENOMEM, "too many multicast joins for this user (max_groups_per_user)");
  }
  if (int err = set_qkey(*id, 0, out)) return err;
  while (next_group_ == 0 || groups_.count(next_group_)) next_group_++;
  const Handle g = next_group_++;
  groups_[g] = Group{h, uid, gip};
  id->groups++;
  groups_per_user_[ch.user]++;
  counters_.cm_mcast_joins++;
  rdma_ucm_create_id_resp r{};
  r.id = g;
  answer(r, c.out_len, out);
  raise_join(h, *id, g);
  return 0;
}

// MULTICAST_JOIN as the kernel's cma_make_mc_event: the group as the
// address handle's dgid, QPN 0xFFFFFF, the ID's Q_Key; named by the group.
void CmRole::raise_join(Handle h, const Id& id, Handle group) {
  auto ch = channels_.find(id.client);
  if (ch == channels_.end()) return;
  const Group& g = groups_.at(group);
  Id to = id;
  to.dst = sockaddr_of(g.ip, 0, id.src.ss_family);
  to.has_dst = true;
  cm::ConnParam p;
  p.qpn = 0xFFFFFF;
  p.qkey = id.qkey;
  Record r;
  r.hdr.counted_id = h;
  r.resp.uid = g.uid;
  r.resp.id = group;
  r.resp.event = RDMA_CM_EVENT_MULTICAST_JOIN;
  to_ud_param(to, p, &r.resp.param.ud);
  push(ch->second, r);
}

// LEAVE_MCAST names the group (struct rdma_ucm_destroy_id); the events it
// handed out are the interposer's count, as for DESTROY_ID.
int CmRole::leave(Channel& ch, const Cmd& c, Reply* out) {
  const auto cmd = load<rdma_ucm_destroy_id>(c.in);
  auto g = groups_.find(cmd.id);
  if (g == groups_.end()) return fail(out, ENOENT, "no such multicast membership");
  auto id = ids_.find(g->second.id);
  if (id == ids_.end() || id->second.client != ch.client)
    return fail(out, EINVAL, "multicast membership of another channel");
  id->second.groups--;
  if (--groups_per_user_[id->second.user] == 0) groups_per_user_.erase(id->second.user);
  groups_.erase(g);
  counters_.cm_mcast_leaves++;
  rdma_ucm_destroy_id_resp r{};
  answer(r, c.out_len, out);
  return 0;
}

// An ID that goes leaves its groups (the kernel's ucma_cleanup_multicast).
void CmRole::drop_groups_of(Handle h) {
  for (auto g = groups_.begin(); g != groups_.end();) {
    if (g->second.id != h) {
      ++g;
      continue;
    }
    const uid_t user = ids_.at(h).user;
    if (--groups_per_user_[user] == 0) groups_per_user_.erase(user);
    g = groups_.erase(g);
    counters_.cm_mcast_leaves++;
  }
  ids_.at(h).groups = 0;
}

}  // namespace metaroce::daemon
