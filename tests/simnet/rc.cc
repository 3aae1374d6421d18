#include "tests/simnet/rc.h"

#include <utility>

namespace metaroce::simnet {

int make_endpoint(Host& h, const EndpointOptions& o, Endpoint* out) {
  Endpoint e;
  e.host = &h;
  e.owner = o.owner;
  fw::Engine& eng = h.engine();
  if (int rc = eng.create_pd(o.owner, &e.pdn)) return rc;
  if (int rc = eng.create_cq(o.owner, o.cqe, &e.scq)) return rc;
  if (int rc = eng.create_cq(o.owner, o.cqe, &e.rcq)) return rc;
  e.len = o.buf_bytes;
  e.buf = h.alloc(o.owner, o.buf_bytes);
  if (int rc = eng.reg_mr(o.owner, e.pdn, e.buf, e.len, o.access, &e.mr)) return rc;
  fw::QpInitAttr init;
  init.pdn = e.pdn;
  init.send_cqn = e.scq;
  init.recv_cqn = e.rcq;
  init.cap = o.cap;
  fw::QpCap actual;
  if (int rc = eng.create_qp(o.owner, init, &e.qpn, &actual)) return rc;
  *out = e;
  return 0;
}

int connect_one(Endpoint& a, const proto::IpAddr& peer_ip, uint32_t peer_qpn,
                const ConnectOptions& o) {
  fw::Engine& eng = a.host->engine();
  fw::QpAttr attr;
  attr.qp_state = fw::QpState::kInit;
  attr.pkey_index = 0;
  attr.port_num = 1;
  attr.qp_access_flags = fw::kAccessLocalWrite | fw::kAccessRemoteWrite | fw::kAccessRemoteRead |
                         fw::kAccessRemoteAtomic;
  if (int rc = eng.modify_qp(a.owner, a.qpn, attr,
                             fw::kAttrState | fw::kAttrPkeyIndex | fw::kAttrPort |
                                 fw::kAttrAccessFlags)) {
    return rc;
  }
  attr.qp_state = fw::QpState::kRtr;
  attr.av.dgid = peer_ip;
  attr.av.sgid_index = 0;
  attr.path_mtu = o.path_mtu;
  attr.dest_qp_num = peer_qpn;
  attr.rq_psn = o.psn_b;
  attr.max_dest_rd_atomic = 16;
  attr.min_rnr_timer = o.min_rnr_timer;
  if (int rc = eng.modify_qp(a.owner, a.qpn, attr,
                             fw::kAttrState | fw::kAttrAv | fw::kAttrPathMtu | fw::kAttrDestQpn |
                                 fw::kAttrRqPsn | fw::kAttrMaxDestRdAtomic |
                                 fw::kAttrMinRnrTimer)) {
    return rc;
  }
  attr.qp_state = fw::QpState::kRts;
  attr.timeout = o.timeout;
  attr.retry_cnt = o.retry_cnt;
  attr.rnr_retry = o.rnr_retry;
  attr.sq_psn = o.psn_a;
  attr.max_rd_atomic = 16;
  return eng.modify_qp(a.owner, a.qpn, attr,
                       fw::kAttrState | fw::kAttrTimeout | fw::kAttrRetryCnt | fw::kAttrRnrRetry |
                           fw::kAttrSqPsn | fw::kAttrMaxQpRdAtomic);
}

int connect(Endpoint& a, Endpoint& b, const ConnectOptions& o) {
  if (int rc = connect_one(a, b.host->ip(), b.qpn, o)) return rc;
  ConnectOptions ob = o;
  std::swap(ob.psn_a, ob.psn_b);
  return connect_one(b, a.host->ip(), a.qpn, ob);
}

}  // namespace metaroce::simnet
