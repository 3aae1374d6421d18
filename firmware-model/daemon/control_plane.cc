#include "firmware-model/daemon/control_plane.h"

#include "firmware-model/daemon/control_codec.h"
#include "firmware-model/uapi/convert.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace metaroce::daemon {
namespace {

using control::encode;

using uapi::ibv_mtu_for;
using uapi::mtu_bytes;
using uapi::to_abi;
using uapi::to_fw;

// Largest RDMA MTU whose packets fit the link's IP MTU: IPv6 + UDP + MBTH +
// RETH + IMM + ICRC is the worst case.
uint32_t active_ibv_mtu(uint32_t link_mtu) {
  size_t overhead = proto::kIpv6Len + proto::kUdpLen + proto::kMbthLen + proto::kRethLen +
                    proto::kImmLen + proto::kIcrcLen;
  uint32_t room = link_mtu > overhead ? link_mtu - static_cast<uint32_t>(overhead) : 0;
  if (room < 256) return 1;
  return ibv_mtu_for(room);
}

void add_counters(const std::vector<hw::NamedCounter>& named, std::vector<mroce_counter>* out) {
  for (const hw::NamedCounter& n : named) {
    mroce_counter m{};
    std::strncpy(m.name, n.name.c_str(), sizeof(m.name) - 1);
    m.value = n.value;
    out->push_back(m);
  }
}

}  // namespace

ControlPlane::ControlPlane(const DeviceConfig& config, int doorbell_fd,
                           hw::TransportBackend& backend, QueuePump& pump,
                           DaemonCounters& counters, const MonotonicClock& clock)
    : config_(config),
      doorbell_fd_(doorbell_fd),
      backend_(backend),
      pump_(pump),
      counters_(counters),
      clock_(clock),
      port_(config.engine.port) {}

ControlPlane::~ControlPlane() {
  std::vector<fw::OwnerId> ids;
  for (auto& [id, c] : clients_) ids.push_back(id);
  for (auto id : ids) close_client(id);
}

ClientMemory* ControlPlane::memory_of(fw::OwnerId id) const {
  auto it = clients_.find(id);
  return it == clients_.end() ? nullptr : it->second.memory.get();
}

int ControlPlane::async_fd_of(fw::OwnerId id) const {
  auto it = clients_.find(id);
  return it == clients_.end() ? -1 : it->second.async_fd;
}

// ---------------- clients ----------------

ControlPlane::Client* ControlPlane::open_client(pid_t pid, uid_t uid, int async_fd, std::string* why) {
  std::string bind_why;
  auto memory = ClientMemory::bind_pid(pid, &bind_why);
  if (!memory) {
    if (why) *why = bind_why;
    return nullptr;
  }
  return open_client(std::move(memory), uid, async_fd, why);
}

ControlPlane::Client* ControlPlane::open_client(std::unique_ptr<ClientMemory> memory, uid_t uid,
                                    int async_fd, std::string* why) {
  UserUsage& u = users_[uid];
  if (u.connections >= config_.user_limits.max_connections) {
    counters_.clients_refused_user_limit++;
    if (why) {
      *why = "per-user connection limit " + std::to_string(config_.user_limits.max_connections) +
             " reached for uid " + std::to_string(uid) + "; raise --uid-max-connections";
    }
    return nullptr;
  }
  u.connections++;
  fw::OwnerId id = next_client_++;
  Client& c = clients_[id];
  c.id = id;
  c.pid = memory->pid();
  c.memory = std::move(memory);
  c.uid = uid;
  c.async_fd = async_fd;
  counters_.clients_opened++;
  return &c;
}

void ControlPlane::close_client(fw::OwnerId id) {
  auto it = clients_.find(id);
  if (it == clients_.end()) return;
  Client& c = it->second;
  if (cm_) cm_->close_client(id, clock_.now());  // its rdma_cm IDs: REJ/DREQ to their peers
  backend_.destroy_owner(id);  // its QPs vanish; their peers see retry exhaustion
  for (uint32_t qpn : c.qps) pump_.remove_qp(qpn);
  for (uint32_t cqn : c.cqs) pump_.remove_cq(cqn);
  for (uint32_t srqn : c.srqs) pump_.remove_srq(srqn);
  if (c.async_fd >= 0) close(c.async_fd);
  UserUsage& u = usage(c);
  u.qps -= static_cast<uint32_t>(c.qps.size());
  u.cqs -= static_cast<uint32_t>(c.cqs.size());
  u.srqs -= static_cast<uint32_t>(c.srqs.size());
  u.mws -= static_cast<uint32_t>(c.mws.size());
  u.mrs -= static_cast<uint32_t>(c.mrs.size());
  u.pds -= static_cast<uint32_t>(c.pds.size());
  u.ring_bytes -= c.ring_bytes;
  if (--u.connections == 0) users_.erase(c.uid);
  clients_.erase(it);
  counters_.clients_closed++;
}

void ControlPlane::handle(Client& c, const Request& req, Reply* out) {
  counters_.ctrl_requests++;
  backend_.take_error();  // a reason from an earlier request is not this one's
  int err = EOPNOTSUPP;
  if (req.op >= MROCE_OP_UCMA_OPEN && req.op <= MROCE_OP_UCMA_LAST) {  // cm_role.h
    CmRole::Reply r;
    if (cm_) cm_->handle(c.id, c.uid, req.op, req.body, req.fds, clock_.now(), &r);
    else r = {EOPNOTSUPP, "this device serves no connection manager", {}};
    if (r.err) counters_.ctrl_errors++;
    out->err = r.err;
    out->reason = std::move(r.reason);
    out->body = std::move(r.body);
    return;
  }
  bool needs_context = req.op != MROCE_OP_OPEN_CONTEXT && req.op != MROCE_OP_QUERY_DEVICE &&
                       req.op != MROCE_OP_QUERY_PORT && req.op != MROCE_OP_QUERY_COUNTERS &&
                       req.op != MROCE_OP_LIST_QPS && req.op != MROCE_OP_QUERY_QP_TRANSPORT;
  if (needs_context && c.async_fd < 0) {
    counters_.ctrl_errors++;
    out->err = EPROTO;
    out->reason = "open a context (MROCE_OP_OPEN_CONTEXT) before operation " +
                  std::to_string(req.op);
    return;
  }
  switch (req.op) {
    case MROCE_OP_OPEN_CONTEXT: err = op_open(c, req, out); break;
    case MROCE_OP_QUERY_DEVICE: {
      encode(device_attr(), &out->body);
      err = 0;
      break;
    }
    case MROCE_OP_QUERY_PORT: err = op_query_port(c, req, out); break;
    case MROCE_OP_ALLOC_PD: err = op_alloc_pd(c, req, out); break;
    case MROCE_OP_DEALLOC_PD: err = op_dealloc_pd(c, req, out); break;
    case MROCE_OP_REG_MR: err = op_reg_mr(c, req, out); break;
    case MROCE_OP_DEREG_MR: err = op_dereg_mr(c, req, out); break;
    case MROCE_OP_CREATE_CQ: err = op_create_cq(c, req, out); break;
    case MROCE_OP_DESTROY_CQ: err = op_destroy_cq(c, req, out); break;
    case MROCE_OP_CREATE_QP: err = op_create_qp(c, req, out); break;
    case MROCE_OP_MODIFY_QP: err = op_modify_qp(c, req, out); break;
    case MROCE_OP_QUERY_QP: err = op_query_qp(c, req, out); break;
    case MROCE_OP_DESTROY_QP: err = op_destroy_qp(c, req, out); break;
    case MROCE_OP_QUERY_COUNTERS: err = op_query_counters(c, req, out); break;
    case MROCE_OP_LIST_QPS: err = op_list_qps(c, req, out); break;
    case MROCE_OP_QUERY_QP_TRANSPORT: err = op_query_qp_transport(c, req, out); break;
    case MROCE_OP_CREATE_AH: err = op_create_ah(c, req, out); break;
    case MROCE_OP_DESTROY_AH: err = op_destroy_ah(c, req, out); break;
    case MROCE_OP_ATTACH_MCAST: err = op_mcast(c, req, out, true); break;
    case MROCE_OP_DETACH_MCAST: err = op_mcast(c, req, out, false); break;
    case MROCE_OP_CREATE_SRQ: err = op_create_srq(c, req, out); break;
    case MROCE_OP_MODIFY_SRQ: err = op_modify_srq(c, req, out); break;
    case MROCE_OP_QUERY_SRQ: err = op_query_srq(c, req, out); break;
    case MROCE_OP_DESTROY_SRQ: err = op_destroy_srq(c, req, out); break;
    case MROCE_OP_QUERY_DEVICE_EX: err = op_query_device_ex(c, req, out); break;
    case MROCE_OP_ALLOC_MW: err = op_alloc_mw(c, req, out); break;
    case MROCE_OP_DEALLOC_MW: err = op_dealloc_mw(c, req, out); break;
    default:
      out->reason = "unknown control operation " + std::to_string(req.op);
      counters_.ctrl_malformed++;
      break;
  }
  if (err) {
    counters_.ctrl_errors++;
    out->body.clear();
    for (int fd : out->fds) close(fd);
    out->fds.clear();
    if (out->reason.empty()) {  // the backend's reason (hw: the device's syndrome), else strerror
      std::string why = backend_.take_error();
      out->reason = why.empty() ? std::strerror(err) : why;
    }
  }
  out->err = err;
}

mroce_device_attr ControlPlane::device_attr() const {
  const fw::DeviceCaps& caps = backend_.caps();
  mroce_device_attr a{};
  a.max_mr_size = caps.max_mr_size;
  a.node_guid = config_.node_guid;
  a.max_qp = caps.max_qp;
  a.max_qp_wr = caps.max_qp_wr;
  a.max_sge = caps.max_sge;
  a.max_cq = caps.max_cq;
  a.max_cqe = caps.max_cqe;
  a.max_mr = caps.max_mr;
  a.max_pd = caps.max_pd;
  a.max_qp_rd_atom = caps.max_qp_rd_atom;
  a.max_inline = caps.max_inline;
  a.max_msg_size = caps.max_msg_size;
  a.max_ah = caps.max_ah;
  a.vendor_id = 0x4D52;      // "MR": unregistered OUI-less id, see docs/device-abi.md
  a.vendor_part_id = 0x0001;
  a.hw_ver = 1;
  std::strncpy(a.fw_ver, "metaroce-model 1.0", sizeof(a.fw_ver) - 1);
  return a;
}

mroce_port_attr ControlPlane::port_attr() const {
  const fw::PortInfo& p = port_;
  mroce_port_attr a{};
  a.state = p.active ? 4 : 1;  // IBV_PORT_ACTIVE : IBV_PORT_DOWN
  a.max_mtu = 5;
  a.active_mtu = active_ibv_mtu(p.link_mtu);
  a.gid_tbl_len = config_.gid_tbl_len;
  a.ifindex = config_.ifindex;
  a.link_mtu = p.link_mtu;
  a.active_speed = 32;  // IB_SPEED_EDR (25 Gb/s per lane), reported, not enforced
  a.active_width = 1;   // 1X
  a.phys_state = p.active ? 5 : 3;  // LinkUp : Disabled
  return a;
}

// Another context's object answers exactly as a missing one (ENOENT, one
// reason): EPERM would tell a client which handles (e.g. lkeys) exist.
int ControlPlane::not_ours(int err, const char* what, uint32_t handle, Reply* out) {
  if (err != ENOENT && err != EPERM) return err;
  out->reason = std::string("no ") + what + " " + std::to_string(handle) + " in this context";
  return ENOENT;
}

// ---------------- limits ----------------

int ControlPlane::check_limits(const Client& c, const char* what, size_t have, uint32_t client_max,
                         uint32_t UserUsage::*used, uint32_t UserLimits::*user_max, Reply* out) {
  if (have >= client_max) {
    counters_.limit_refused_client++;
    out->reason = std::string("per-client ") + what + " limit reached (" +
                  std::to_string(client_max) + ")";
    return ENOMEM;
  }
  uint32_t max = config_.user_limits.*user_max;
  if (users_[c.uid].*used >= max) {
    counters_.limit_refused_user++;
    std::string option = what;
    for (char& ch : option) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    out->reason = std::string("per-user ") + what + " limit " + std::to_string(max) +
                  " reached for uid " + std::to_string(c.uid) + "; raise --uid-max-" + option;
    return ENOMEM;
  }
  return 0;
}

void ControlPlane::forget_ring_bytes(Client& c, uint64_t bytes) {
  c.ring_bytes -= bytes;
  usage(c).ring_bytes -= bytes;
}

int ControlPlane::check_ring_bytes(const Client& c, uint64_t bytes, Reply* out) {
  uint64_t max = config_.user_limits.max_ring_bytes;
  if (users_[c.uid].ring_bytes + bytes > max) {
    counters_.limit_refused_user++;
    out->reason = "per-user ring memory limit " + std::to_string(max >> 20) +
                  " MiB reached for uid " + std::to_string(c.uid) + "; raise --uid-max-ring-mb";
    return ENOMEM;
  }
  return 0;
}

// A completion-channel fd comes from the client and may be anything: a
// FIFO or FUSE file would block the daemon's only thread, a stream socket
// would split records. Only AF_UNIX datagram/seqpacket sockets are taken
// (what kmod-shim/launcher makes); they are written with MSG_DONTWAIT, which
// holds whatever O_NONBLOCK the client later sets on the shared file.
int ControlPlane::check_channel_fd(int fd, std::string* why) {
  struct stat st{};
  int domain = 0, type = 0;
  socklen_t len = sizeof(int);
  if (fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) {
    *why = "completion channel fd must be an AF_UNIX datagram socket, not a ";
    *why += S_ISFIFO(st.st_mode) ? "pipe/FIFO" : S_ISREG(st.st_mode) ? "regular file" : "non-socket";
    return EINVAL;
  }
  if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) != 0 || domain != AF_UNIX ||
      getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0 ||
      (type != SOCK_DGRAM && type != SOCK_SEQPACKET)) {
    *why = "completion channel fd must be an AF_UNIX SOCK_DGRAM or SOCK_SEQPACKET socket";
    return EINVAL;
  }
  return 0;
}


int ControlPlane::op_open(Client& c, const Request& r, Reply* out) {
  MROCE_DECODE(mroce_open_context_req, req);
  if (req.client_abi != MROCE_ABI_VERSION) {
    out->reason = "client device-ABI " + std::to_string(req.client_abi) + ", daemon speaks " +
                  std::to_string(MROCE_ABI_VERSION) + ": install a matching provider";
    return EPROTO;
  }
  if (c.async_fd >= 0) {
    out->reason = "context already open on this connection";
    return EBUSY;
  }
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) return errno;
  c.async_fd = sv[0];
  fcntl(sv[0], F_SETFL, fcntl(sv[0], F_GETFL) | O_NONBLOCK);
  mroce_open_context_resp resp{};
  resp.ctx_id = c.id;
  resp.device = device_attr();
  resp.port = port_attr();
  encode(resp, &out->body);
  out->fds = {dup(doorbell_fd_), sv[1]};
  return 0;
}

int ControlPlane::op_query_port(Client& c, const Request& r, Reply* out) {
  encode(port_attr(), &out->body);
  return 0;
}

int ControlPlane::op_alloc_pd(Client& c, const Request& r, Reply* out) {
  int err = check_limits(c, "PD", c.pds.size(), config_.limits.max_pd, &UserUsage::pds,
                         &UserLimits::max_pd, out);
  if (err) return err;
  mroce_alloc_pd_resp resp{};
  err = backend_.create_pd(c.id, &resp.pdn);
  if (err) return err;
  c.pds.insert(resp.pdn);
  usage(c).pds++;
  encode(resp, &out->body);
  return 0;
}

int ControlPlane::op_dealloc_pd(Client& c, const Request& r, Reply* out) {
  MROCE_DECODE(mroce_handle_req, req);
  int err = not_ours(backend_.destroy_pd(c.id, req.handle), "PD", req.handle, out);
  if (err == EBUSY) out->reason = "PD still has MRs or QPs";
  if (!err && c.pds.erase(req.handle)) usage(c).pds--;
  return err;
}

int ControlPlane::op_reg_mr(Client& c, const Request& r, Reply* out) {
  MROCE_DECODE(mroce_reg_mr_req, req);
  int err = check_limits(c, "MR", c.mrs.size(), config_.limits.max_mr, &UserUsage::mrs,
                         &UserLimits::max_mr, out);
  if (err) return err;
  // As pinning does in a kernel driver: the range must be mapped in the
  // client with the access asked for, and on memory whose faults cannot
  // block the daemon (ClientMemory::check_range).
  bool write = req.access & (fw::kAccessLocalWrite | fw::kAccessRemoteWrite |
                             fw::kAccessRemoteAtomic);
  if (req.length && c.memory) {
    if (int e = c.memory->check_range(req.addr, req.length, write, &out->reason)) {
      counters_.reg_mr_refused++;
      return e;
    }
  }
  fw::MrKeys keys;
  err = backend_.reg_mr(c.id, req.pdn, req.addr, req.length, req.access, &keys);
  if (err) {
    if (err == EINVAL) out->reason = "invalid MR: bad PD, length or access flags";
    return err;
  }
  c.mrs.insert(keys.lkey);
  usage(c).mrs++;
  encode(mroce_reg_mr_resp{keys.lkey, keys.rkey}, &out->body);
  return 0;
}

int ControlPlane::op_dereg_mr(Client& c, const Request& r, Reply* out) {
  MROCE_DECODE(mroce_handle_req, req);
  int err = not_ours(backend_.dereg_mr(c.id, req.handle), "MR with lkey", req.handle, out);
  if (err == EBUSY) out->reason = "MR has memory windows bound to it: unbind or invalidate them first";
  if (!err && c.mrs.erase(req.handle)) usage(c).mrs--;
  return err;
}

int ControlPlane::op_create_cq(Client& c, const Request& r, Reply* out) {
  MROCE_DECODE(mroce_create_cq_req, req);
  int err = check_limits(c, "CQ", c.cqs.size(), config_.limits.max_cq, &UserUsage::cqs,
                         &UserLimits::max_cq, out);
  if (err) return err;
  if (req.has_channel && r.fds.size() != 1) {
    out->reason = "CREATE_CQ with has_channel needs exactly one fd";
    return EINVAL;
  }
  if (req.has_channel && check_channel_fd(r.fds[0], &out->reason)) {
    counters_.channel_fd_refused++;
    return EINVAL;
  }
  if (req.cqe == 0 || req.cqe > backend_.caps().max_cqe) {
    out->reason = "cqe must be 1.." + std::to_string(backend_.caps().max_cqe);
    return EINVAL;
  }
  // The ring keeps a spare slot, so it may exceed max_cqe; the engine is
  // asked for what the client asked for, which it accepts.
  uint32_t entries = round_up_pow2(req.cqe + 1);
  size_t bytes = ring_bytes(entries, sizeof(mroce_cqe));
  if ((err = check_ring_bytes(c, bytes, out))) return err;
  uint32_t cqn = 0;
  err = backend_.create_cq(c.id, req.cqe, &cqn);
  if (err) {
    out->reason = err == ENOMEM ? "no CQ numbers left" : "engine refused the CQ";
    return err;
  }
  int ring_fd = -1;
  size_t size = 0;
  err = pump_.add_cq(cqn, c.id, req.user_handle, entries, bytes, req.has_channel ? r.fds[0] : -1,
                     &ring_fd, &size);
  if (err) {
    backend_.destroy_cq(c.id, cqn);
    out->reason = "cannot create CQ ring memory";
    return err;
  }
  mroce_create_cq_resp resp{cqn, entries, size};
  out->fds = {ring_fd};
  c.cqs.insert(cqn);
  c.ring_bytes += bytes;
  usage(c).cqs++;
  usage(c).ring_bytes += bytes;
  encode(resp, &out->body);
  return 0;
}

int ControlPlane::op_destroy_cq(Client& c, const Request& r, Reply* out) {
  MROCE_DECODE(mroce_handle_req, req);
  int err = not_ours(backend_.destroy_cq(c.id, req.handle), "CQ", req.handle, out);
  if (err == EBUSY) out->reason = "CQ still used by a QP";
  if (err) return err;
  forget_ring_bytes(c, pump_.remove_cq(req.handle));
  if (c.cqs.erase(req.handle)) usage(c).cqs--;
  return 0;
}

int ControlPlane::op_create_qp(Client& c, const Request& r, Reply* out) {
  MROCE_DECODE(mroce_create_qp_req, req);
  int err = check_limits(c, "QP", c.qps.size(), config_.limits.max_qp, &UserUsage::qps,
                         &UserLimits::max_qp, out);
  if (err) return err;
  if (req.qp_type != 2 /* IBV_QPT_RC */ && req.qp_type != 3 /* IBV_QPT_UC */ &&
      req.qp_type != 4 /* IBV_QPT_UD */) {
    out->reason = "only RC, UC and UD QPs are supported";
    return EOPNOTSUPP;
  }
  if (!c.cqs.count(req.send_cqn) || !c.cqs.count(req.recv_cqn)) {
    out->reason = "send or receive CQ does not belong to this context";
    return EINVAL;
  }
  if ((err = check_qp_srq(c, req.srqn, out))) return err;
  fw::QpInitAttr init;
  init.type = static_cast<fw::QpType>(req.qp_type);
  init.pdn = req.pdn;
  init.send_cqn = req.send_cqn;
  init.recv_cqn = req.recv_cqn;
  init.cap = to_fw(req.cap);
  init.sq_sig_all = req.sq_sig_all != 0;
  init.srqn = req.srqn;
  init.type = static_cast<fw::QpType>(req.qp_type);
  uint32_t qpn = 0;
  fw::QpCap cap;
  err = backend_.create_qp(c.id, init, &qpn, &cap);
  if (err) {
    if (err == EINVAL) out->reason = "QP capabilities exceed the device's, or bad PD/CQ";
    return err;
  }
  uint32_t sq_entries = round_up_pow2(std::max(cap.max_send_wr, 1u));
  uint32_t rq_entries = round_up_pow2(std::max(cap.max_recv_wr, 1u));
  size_t sq_bytes = ring_bytes(sq_entries, sizeof(mroce_send_wqe));
  size_t rq_bytes = ring_bytes(rq_entries, sizeof(mroce_recv_wqe));
  if ((err = check_ring_bytes(c, sq_bytes + rq_bytes, out))) {
    backend_.destroy_qp(c.id, qpn);
    return err;
  }
  int ring_fd = -1;
  size_t size = 0;
  err = pump_.add_qp(qpn, c.id, req.user_handle, req.send_cqn, sq_entries, sq_bytes, rq_entries,
                     rq_bytes, &ring_fd, &size);
  if (err) {
    backend_.destroy_qp(c.id, qpn);
    out->reason = "cannot create QP ring memory";
    return err;
  }
  mroce_create_qp_resp resp{};
  resp.qpn = qpn;
  resp.cap = to_abi(cap);
  resp.sq_entries = sq_entries;
  resp.rq_entries = rq_entries;
  resp.ring_bytes = size;
  resp.rq_offset = sq_bytes;
  out->fds = {ring_fd};
  c.qps.insert(qpn);
  c.ring_bytes += sq_bytes + rq_bytes;
  usage(c).qps++;
  usage(c).ring_bytes += sq_bytes + rq_bytes;
  encode(resp, &out->body);
  return 0;
}

int ControlPlane::op_modify_qp(Client& c, const Request& r, Reply* out) {
  MROCE_DECODE(mroce_modify_qp_req, req);
  if (!c.qps.count(req.qpn)) {
    out->reason = "no such QP in this context";
    return ENOENT;
  }
  // Work posted before a state change must reach the engine first.
  pump_.drain(req.qpn);
  if ((req.attr.attr_mask & fw::kAttrPathMtu) && mtu_bytes(req.attr.path_mtu) == 0) {
    out->reason = "path_mtu must be IBV_MTU_256..IBV_MTU_4096";
    return EINVAL;
  }
  if (int e = check_qkey(c, req.attr, out)) return e;
  int err = backend_.modify_qp(c.id, req.qpn, to_fw(req.attr), req.attr.attr_mask);
  if (err == EINVAL) out->reason = "invalid state transition or attribute for this transition";
  return err;
}

int ControlPlane::op_query_qp(Client& c, const Request& r, Reply* out) {
  MROCE_DECODE(mroce_handle_req, req);
  fw::QpAttr attr;
  fw::QpInitAttr init;
  int err = not_ours(backend_.query_qp(c.id, req.handle, &attr, &init), "QP", req.handle, out);
  if (err) return err;
  mroce_query_qp_resp resp{};
  resp.attr = to_abi(attr);
  resp.sq_sig_all = init.sq_sig_all;
  encode(resp, &out->body);
  return 0;
}

int ControlPlane::op_destroy_qp(Client& c, const Request& r, Reply* out) {
  MROCE_DECODE(mroce_handle_req, req);
  int err = not_ours(backend_.destroy_qp(c.id, req.handle), "QP", req.handle, out);
  if (err) return err;
  forget_ring_bytes(c, pump_.remove_qp(req.handle));
  if (c.qps.erase(req.handle)) usage(c).qps--;
  return 0;
}

int ControlPlane::op_query_counters(Client& c, const Request& r, Reply* out) {
  MROCE_DECODE(mroce_query_counters_req, req);
  std::vector<mroce_counter> list;
  if (req.qpn == hw::kDeviceCounters) {
    std::vector<hw::NamedCounter> named;
    if (int err = backend_.query_counters(hw::kDeviceCounters, &named)) {
      out->reason = "the transport backend reports no device counters";
      return err;
    }
    add_counters(named, &list);
#define MROCE_X(name) named.push_back({#name, counters_.name});
    named.clear();
    MROCE_DAEMON_COUNTERS(MROCE_X)
#undef MROCE_X
    add_counters(named, &list);
    backend_.host_counters(&named);
    add_counters(named, &list);
    if (cm_) {
      named.clear();
      cm_->for_each_counter([&](const std::string& n, uint64_t v) { named.push_back({n, v}); });
      add_counters(named, &list);
    }
  } else {
    std::vector<hw::NamedCounter> qc;
    int err = backend_.query_counters(req.qpn, &qc);
    if (err) {
      out->reason = "no such QP";
      return err;
    }
    add_counters(qc, &list);
    // Ring indices: where the application and the NIC are in each queue.
    qc.clear();
    pump_.ring_counters(req.qpn, &qc);
    add_counters(qc, &list);
  }
  mroce_query_counters_resp resp{static_cast<uint32_t>(list.size()), 0};
  encode(resp, &out->body);
  for (auto& m : list) encode(m, &out->body);
  return 0;
}

int ControlPlane::op_list_qps(Client& c, const Request& r, Reply* out) {
  std::vector<uint32_t> qpns = backend_.qp_numbers();
  uint32_t n = static_cast<uint32_t>(qpns.size());
  encode(n, &out->body);
  for (uint32_t q : qpns) encode(q, &out->body);
  return 0;
}





void ControlPlane::set_port(const fw::PortInfo& port) {
  port_ = port;
  backend_.set_port(port);
}

void ControlPlane::port_event(bool up) {
  for (auto& [id, c] : clients_) {
    pump_.send_async(c.async_fd, 1, up ? fw::EventType::kPortActive : fw::EventType::kPortErr);
  }
}

int ControlPlane::op_query_qp_transport(Client& c, const Request& r, Reply* out) {
  MROCE_DECODE(mroce_handle_req, req);
  fw::QpTransportStats t;
  if (int err = backend_.qp_transport(req.handle, clock_.now(), &t)) {
    out->reason = err == ENOENT ? "no such QP" : "the transport backend reports no transport state";
    return err;
  }
  mroce_qp_transport_resp resp{};
  resp.srtt_ns = t.srtt;
  resp.min_rtt_ns = t.min_rtt;
  resp.rttvar_ns = t.rttvar;
  resp.rto_ns = t.rto;
  resp.cwnd_bytes = t.cwnd_bytes;
  resp.pacing_rate_bps = t.pacing_rate_bps;
  resp.bytes_in_flight = t.bytes_in_flight;
  resp.pkts_in_flight = t.pkts_in_flight;
  resp.lost = t.lost;
  resp.qp_state = static_cast<uint8_t>(t.state);
  resp.error_status = static_cast<uint8_t>(t.error_status);
  resp.num_paths = static_cast<uint32_t>(std::min<size_t>(t.path_weights.size(), MROCE_MAX_PATHS));
  std::strncpy(resp.cc, t.cc.c_str(), sizeof(resp.cc) - 1);
  for (uint32_t i = 0; i < resp.num_paths; i++)
    resp.path_weight_ppm[i] = static_cast<uint32_t>(t.path_weights[i] * 1e6 + 0.5);
  encode(resp, &out->body);
  return 0;
}

}  // namespace metaroce::daemon
