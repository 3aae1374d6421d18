// The control plane's shared-receive-queue operations (docs/device-abi.md
// §2.7): CREATE/MODIFY/QUERY/DESTROY_SRQ through the transport backend, the
// SRQ's ring from the queue pump, limits per client and per user.
#include <algorithm>
#include <cerrno>
#include <string>

#include "firmware-model/daemon/control_codec.h"
#include "firmware-model/daemon/control_plane.h"

namespace metaroce::daemon {

using control::encode;

namespace {
mroce_srq_attr to_abi(const fw::SrqAttr& a) { return {a.max_wr, a.max_sge, a.srq_limit, 0}; }

// The backend's refusal with its reason, or one for the errnos it gives none.
int backend_refusal(int err, const char* why, const char* op, std::string* reason) {
  if (why) *reason = why;
  else if (err == EOPNOTSUPP) *reason = "this transport backend has no shared receive queues";
  else if (err == ENOMEM) *reason = std::string("no SRQ numbers left (") + op + ")";
  return err;
}
}  // namespace

// Capabilities beyond mroce_device_attr (its layout stays fixed): the SRQ
// caps (0 when the backend has no SRQs), multicast, and the per-context
// limits, so that ibv_query_device_ex reports what a context can create.
int ControlPlane::op_query_device_ex(Client& c, const Request& r, Reply* out) {
  mroce_device_attr_ex x{};
  const fw::DeviceCaps& caps = backend_.caps();
  if (backend_.query_srq(0, 0, nullptr, nullptr) != EOPNOTSUPP) {
    x.max_srq = caps.max_srq;
    x.max_srq_wr = caps.max_qp_wr;
    x.max_srq_sge = caps.max_sge;
  }
  x.max_mcast_grp = caps.max_mcast_grp;
  x.max_mcast_qp_attach = caps.max_mcast_qp_attach;
  const ClientLimits& l = config_.limits;
  x.ctx_max_qp = l.max_qp;
  x.ctx_max_cq = l.max_cq;
  x.ctx_max_mr = l.max_mr;
  x.ctx_max_pd = l.max_pd;
  x.ctx_max_ah = l.max_ah;
  x.ctx_max_srq = l.max_srq;
  // mw: does the backend have memory windows? (handle 0 is never one: no side effect)
  // mw2: no more than one context can have (the device, per-client and per-user bounds).
  if (backend_.dealloc_mw(0, 0) != EOPNOTSUPP)
    x.max_mw = std::min({caps.max_mw, l.max_mw, config_.user_limits.max_mw});
  encode(x, &out->body);
  return 0;
}

int ControlPlane::check_qp_srq(const Client& c, uint32_t srqn, Reply* out) {
  if (srqn == 0 || c.srqs.count(srqn)) return 0;
  out->reason = "SRQ " + std::to_string(srqn) + " does not belong to this context";
  return EINVAL;
}

int ControlPlane::op_create_srq(Client& c, const Request& r, Reply* out) {
  MROCE_DECODE(mroce_create_srq_req, req);
  int err = check_limits(c, "SRQ", c.srqs.size(), config_.limits.max_srq, &UserUsage::srqs,
                         &UserLimits::max_srq, out);
  if (err) return err;
  if (!c.pds.count(req.pdn)) return not_ours(ENOENT, "PD", req.pdn, out);
  fw::SrqAttr want{req.attr.max_wr, req.attr.max_sge, 0}, got;
  uint32_t srqn = 0;
  const char* why = nullptr;
  err = backend_.create_srq(c.id, req.pdn, want, &srqn, &got, &why);
  if (err) return backend_refusal(not_ours(err, "PD", req.pdn, out), why, "create", &out->reason);
  size_t bytes = ring_bytes(got.max_wr, sizeof(mroce_recv_wqe));
  int ring_fd = -1;
  size_t size = 0;
  if (!(err = check_ring_bytes(c, bytes, out)) &&
      (err = pump_.add_srq(srqn, c.id, req.user_handle, got.max_wr, bytes, &ring_fd, &size)))
    out->reason = "cannot create SRQ ring memory";
  if (err) {
    backend_.destroy_srq(c.id, srqn, nullptr);
    return err;
  }
  mroce_create_srq_resp resp{srqn, got.max_wr, size, to_abi(got)};
  out->fds = {ring_fd};
  c.srqs.insert(srqn);
  c.ring_bytes += bytes;
  usage(c).srqs++;
  usage(c).ring_bytes += bytes;
  encode(resp, &out->body);
  return 0;
}

int ControlPlane::op_modify_srq(Client& c, const Request& r, Reply* out) {
  MROCE_DECODE(mroce_modify_srq_req, req);
  if (!c.srqs.count(req.srqn)) return not_ours(ENOENT, "SRQ", req.srqn, out);
  pump_.drain_srq(req.srqn);  // the limit is judged against every WQE posted before
  fw::SrqAttr a{req.attr.max_wr, req.attr.max_sge, req.attr.srq_limit};
  const char* why = nullptr;
  int err = backend_.modify_srq(c.id, req.srqn, a, req.attr_mask, &why);
  return err ? backend_refusal(err, why, "modify", &out->reason) : 0;
}

int ControlPlane::op_query_srq(Client& c, const Request& r, Reply* out) {
  MROCE_DECODE(mroce_handle_req, req);
  if (!c.srqs.count(req.handle)) return not_ours(ENOENT, "SRQ", req.handle, out);
  pump_.drain_srq(req.handle);
  fw::SrqAttr a;
  int err = backend_.query_srq(c.id, req.handle, &a, nullptr);
  if (err) return backend_refusal(err, nullptr, "query", &out->reason);
  encode(to_abi(a), &out->body);
  return 0;
}

int ControlPlane::op_destroy_srq(Client& c, const Request& r, Reply* out) {
  MROCE_DECODE(mroce_handle_req, req);
  if (!c.srqs.count(req.handle)) return not_ours(ENOENT, "SRQ", req.handle, out);
  const char* why = nullptr;
  int err = backend_.destroy_srq(c.id, req.handle, &why);
  if (err) return backend_refusal(err, why, "destroy", &out->reason);
  forget_ring_bytes(c, pump_.remove_srq(req.handle));
  c.srqs.erase(req.handle);
  usage(c).srqs--;
  return 0;
}

}  // namespace metaroce::daemon
