#include "tools/conformance/dut.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "tools/conformance/link.h"

namespace metaroce::conform {

namespace {

constexpr unsigned kAllAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                                IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;

proto::IpAddr from_gid(const ibv_gid& g) {
  proto::IpAddr a;
  std::memcpy(a.bytes.data(), g.raw, 16);
  return a;
}

bool is_zero(const ibv_gid& g) {
  for (uint8_t b : g.raw)
    if (b) return false;
  return true;
}

}  // namespace

DutQp::~DutQp() {
  ibv_destroy_qp(qp_);
  if (ah) ibv_destroy_ah(ah);
  ibv_destroy_cq(scq_);
  ibv_destroy_cq(rcq_);
}

int DutQp::post_send(ibv_wr_opcode op, uint64_t wr_id, uint64_t off, uint32_t len,
                     uint64_t remote_va, uint32_t rkey, uint32_t imm_be, uint64_t compare_add,
                     uint64_t swap, unsigned flags) {
  ibv_sge sge{reinterpret_cast<uint64_t>(mem + off), len, lkey};
  ibv_send_wr wr{}, *bad = nullptr;
  wr.wr_id = wr_id;
  wr.sg_list = len ? &sge : nullptr;
  wr.num_sge = len ? 1 : 0;
  wr.opcode = op;
  wr.send_flags = flags;
  wr.imm_data = imm_be;
  if (op == IBV_WR_ATOMIC_CMP_AND_SWP || op == IBV_WR_ATOMIC_FETCH_AND_ADD) {
    wr.wr.atomic = {remote_va, compare_add, swap, rkey};
  } else if (ah) {
    wr.wr.ud = {ah, ud_qpn, ud_qkey};
  } else {
    wr.wr.rdma = {remote_va, rkey};
  }
  return ibv_post_send(qp_, &wr, &bad);
}

int DutQp::attach_mcast(const proto::IpAddr& group) {
  ibv_gid gid{};
  std::memcpy(gid.raw, group.bytes.data(), 16);
  return ibv_attach_mcast(qp_, &gid, 0);
}

int DutQp::post_recv(uint64_t wr_id, uint64_t off, uint32_t len) {
  ibv_sge sge{reinterpret_cast<uint64_t>(mem + off), len, lkey};
  ibv_recv_wr wr{}, *bad = nullptr;
  wr.wr_id = wr_id;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  return ibv_post_recv(qp_, &wr, &bad);
}

std::optional<ibv_wc> DutQp::poll(ibv_cq* cq, double seconds) {
  double end = now_s() + seconds;
  ibv_wc wc{};
  for (;;) {
    int n = ibv_poll_cq(cq, 1, &wc);
    if (n == 1) return wc;
    if (n < 0 || now_s() > end) return std::nullopt;
    usleep(200);
  }
}

ibv_qp_state DutQp::state() {
  ibv_qp_attr a{};
  ibv_qp_init_attr init{};
  if (ibv_query_qp(qp_, &a, IBV_QP_STATE, &init)) return IBV_QPS_UNKNOWN;
  return a.qp_state;
}

std::unique_ptr<Dut> Dut::open(const std::string& device, size_t mem_bytes, std::string* error) {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  std::unique_ptr<Dut> d(new Dut);
  for (int i = 0; list && i < n && !d->ctx_; ++i)
    if (device.empty() || device == ibv_get_device_name(list[i])) d->ctx_ = ibv_open_device(list[i]);
  if (list) ibv_free_device_list(list);
  if (!d->ctx_) {
    *error = "no RDMA device " + (device.empty() ? std::string("at all") : "'" + device + "'") +
             " (" + std::to_string(n) + " listed; for the soft NIC run under metaroce-run)";
    return nullptr;
  }
  d->pd_ = ibv_alloc_pd(d->ctx_);
  d->mem_.assign(mem_bytes, 0);
  d->mr_ = d->pd_ ? ibv_reg_mr(d->pd_, d->mem_.data(), mem_bytes, kAllAccess) : nullptr;
  if (!d->mr_) return *error = std::string("PD or MR: ") + std::strerror(errno), nullptr;
  return d;
}

bool Dut::select_gid(const proto::IpAddr& ip) {
  ibv_port_attr port{};
  if (ibv_query_port(ctx_, 1, &port)) return false;
  for (int i = 0; i < port.gid_tbl_len; ++i) {
    ibv_gid g{};
    if (ibv_query_gid(ctx_, 1, i, &g) == 0 && from_gid(g) == ip) return gid_index_ = i, true;
  }
  return false;
}

Dut::~Dut() {
  if (mr_) ibv_dereg_mr(mr_);
  if (pd_) ibv_dealloc_pd(pd_);
  if (ctx_) ibv_close_device(ctx_);
}

std::string Dut::name() const { return ibv_get_device_name(ctx_->device); }

std::vector<proto::IpAddr> Dut::gid_addresses() {
  std::vector<proto::IpAddr> v;
  ibv_port_attr port{};
  if (ibv_query_port(ctx_, 1, &port)) return v;
  for (int i = 0; i < port.gid_tbl_len; ++i) {
    ibv_gid g{};
    if (ibv_query_gid(ctx_, 1, i, &g) == 0 && !is_zero(g)) v.push_back(from_gid(g));
  }
  return v;
}

ibv_ah* Dut::create_ah(const proto::IpAddr& dest) {
  ibv_ah_attr ah{};
  ah.is_global = 1;
  ah.port_num = 1;
  std::memcpy(ah.grh.dgid.raw, dest.bytes.data(), 16);
  ah.grh.sgid_index = static_cast<uint8_t>(gid_index_);
  ah.grh.hop_limit = 64;
  return ibv_create_ah(pd_, &ah);
}

uint32_t Dut::active_mtu_bytes() {
  ibv_port_attr port{};
  if (ibv_query_port(ctx_, 1, &port)) return 0;
  return 128u << port.active_mtu;  // IBV_MTU_256 = 1
}

// A UD QP through INIT (Q_Key), RTR and RTS, with an address handle to
// the peer for its sends.
std::unique_ptr<DutQp> Dut::ud_ready(std::unique_ptr<DutQp> q, const proto::IpAddr& peer,
                                     const QpOptions& o, std::string* error) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qkey = o.qkey;
  int err = q->modify(&a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY);
  a = {};
  a.qp_state = IBV_QPS_RTR;
  if (!err) err = q->modify(&a, IBV_QP_STATE);
  a = {};
  a.qp_state = IBV_QPS_RTS;
  a.sq_psn = o.sq_psn;
  if (!err && !o.stop_at_rtr) err = q->modify(&a, IBV_QP_STATE | IBV_QP_SQ_PSN);
  if (err) return *error = std::string("modify UD QP: ") + std::strerror(err), nullptr;
  q->ah = create_ah(peer);
  if (!q->ah) return *error = std::string("create AH: ") + std::strerror(errno), nullptr;
  q->ud_qpn = o.peer_qpn;
  q->ud_qkey = o.remote_qkey;
  return q;
}

std::unique_ptr<DutQp> Dut::connect(const proto::IpAddr& peer, ibv_mtu mtu, const QpOptions& o,
                                    std::string* error) {
  ibv_cq* scq = ibv_create_cq(ctx_, 256, nullptr, nullptr, 0);
  ibv_cq* rcq = ibv_create_cq(ctx_, 256, nullptr, nullptr, 0);
  ibv_qp_init_attr init{};
  init.send_cq = scq;
  init.recv_cq = rcq;
  init.qp_type = o.type;
  init.cap = {o.max_send_wr, o.max_recv_wr, 1, 1, 0};
  ibv_qp* qp = scq && rcq ? ibv_create_qp(pd_, &init) : nullptr;
  if (!qp) {
    *error = std::string("create CQ/QP: ") + std::strerror(errno);
    if (scq) ibv_destroy_cq(scq);
    if (rcq) ibv_destroy_cq(rcq);
    return nullptr;
  }
  auto q = std::make_unique<DutQp>(qp, scq, rcq);
  q->mem = mem_.data();
  q->lkey = mr_->lkey;
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qp_access_flags = kAllAccess & ~IBV_ACCESS_LOCAL_WRITE;
  if (o.type == IBV_QPT_UD) return ud_ready(std::move(q), peer, o, error);
  int err = q->modify(&a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
  const bool rc = o.type == IBV_QPT_RC;
  a = {};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = mtu;
  a.dest_qp_num = o.peer_qpn;
  a.rq_psn = o.rq_psn;
  a.max_dest_rd_atomic = o.max_dest_rd_atomic;
  a.min_rnr_timer = o.min_rnr_timer;
  a.ah_attr.is_global = 1;
  a.ah_attr.port_num = 1;
  std::memcpy(a.ah_attr.grh.dgid.raw, peer.bytes.data(), 16);
  a.ah_attr.grh.sgid_index = static_cast<uint8_t>(gid_index_);
  a.ah_attr.grh.hop_limit = 64;
  if (!err)
    err = q->modify(&a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                            (rc ? IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER : 0));
  if (!err && !o.stop_at_rtr) {
    a = {};
    a.qp_state = IBV_QPS_RTS;
    a.timeout = o.timeout;
    a.retry_cnt = o.retry_cnt;
    a.rnr_retry = o.rnr_retry;
    a.sq_psn = o.sq_psn;
    a.max_rd_atomic = o.max_rd_atomic;
    err = q->modify(&a, rc ? IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                 IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC
                           : IBV_QP_STATE | IBV_QP_SQ_PSN);
  }
  if (err) return *error = std::string("modify QP: ") + std::strerror(err), nullptr;
  return q;
}

}  // namespace metaroce::conform
