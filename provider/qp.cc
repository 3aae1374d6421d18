// Queue pairs (RC, UC and UD; each may take its receives from an SRQ): control
// verbs over the socket, post_send and post_recv into the shared SQ/RQ rings.
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "provider/mroce.h"

namespace {

int bind_queues(struct mroce_qp *qp, const struct mroce_create_qp_resp *r) {
  int err = mroce_ring_bind(&qp->sq.ring, qp->map, qp->map_len, 0, r->sq_entries,
                            sizeof(struct mroce_send_wqe));
  if (!err)
    err = mroce_ring_bind(&qp->rq.ring, qp->map, qp->map_len, r->rq_offset, r->rq_entries,
                          sizeof(struct mroce_recv_wqe));
  if (err) return err;
  qp->sq.prod = qp->sq.flushed = __atomic_load_n(&qp->sq.ring.hdr->producer, __ATOMIC_RELAXED);
  qp->rq.prod = qp->rq.flushed = __atomic_load_n(&qp->rq.ring.hdr->producer, __ATOMIC_RELAXED);
  pthread_spin_init(&qp->sq.lock, PTHREAD_PROCESS_PRIVATE);
  pthread_spin_init(&qp->rq.lock, PTHREAD_PROCESS_PRIVATE);
  return 0;
}

int map_qp(struct mroce_qp *qp, int memfd, const struct mroce_create_qp_resp *r) {
  qp->map_len = r->ring_bytes;
  qp->map = mmap(nullptr, qp->map_len, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
  if (qp->map == MAP_FAILED) {
    qp->map = nullptr;
    return errno;
  }
  return bind_queues(qp, r);
}

int check_init_attr(struct mroce_context *ctx, const struct ibv_qp_init_attr *a) {
  if (a->qp_type != IBV_QPT_RC && a->qp_type != IBV_QPT_UC && a->qp_type != IBV_QPT_UD)
    return mroce_refuse(ctx, EOPNOTSUPP, "QP type %d: only RC, UC and UD", a->qp_type);
  if (!a->send_cq || !a->recv_cq) return mroce_refuse(ctx, EINVAL, "a QP needs both CQs");
  const struct ibv_qp_cap &c = a->cap;
  const struct mroce_device_attr &d = ctx->dev_attr;
  if (c.max_send_wr > d.max_qp_wr || c.max_recv_wr > d.max_qp_wr)
    return mroce_refuse(ctx, EINVAL, "max_send_wr %u / max_recv_wr %u: max_qp_wr is %u",
                        c.max_send_wr, c.max_recv_wr, d.max_qp_wr);
  if (c.max_send_sge > d.max_sge || c.max_recv_sge > d.max_sge)
    return mroce_refuse(ctx, EINVAL, "max_send_sge %u / max_recv_sge %u: max_sge is %u",
                        c.max_send_sge, c.max_recv_sge, d.max_sge);
  if (c.max_inline_data > d.max_inline)
    return mroce_refuse(ctx, EINVAL, "max_inline_data %u: the device's maximum is %u",
                        c.max_inline_data, d.max_inline);
  return 0;
}

void link_qp(struct mroce_context *ctx, struct mroce_qp *qp, bool add) {
  pthread_mutex_lock(&ctx->qp_lock);
  if (add) {
    qp->next = ctx->qp_list;
    ctx->qp_list = qp;
  } else {
    for (struct mroce_qp **p = &ctx->qp_list; *p; p = &(*p)->next)
      if (*p == qp) {
        *p = qp->next;
        break;
      }
  }
  pthread_mutex_unlock(&ctx->qp_lock);
}

void cq_ref(struct ibv_cq *cq, int delta) {
  __atomic_add_fetch(&to_mroce_cq(cq)->qp_refs, delta, __ATOMIC_ACQ_REL);
}

void fill_qp(struct mroce_qp *qp, struct ibv_pd *pd, const struct ibv_qp_init_attr *a,
             const struct mroce_create_qp_resp *r) {
  struct ibv_qp *q = &qp->vqp.qp;
  q->context = pd->context;
  q->qp_context = a->qp_context;
  q->pd = pd;
  q->send_cq = a->send_cq;
  q->recv_cq = a->recv_cq;
  q->handle = r->qpn;
  q->qp_num = r->qpn;
  q->state = IBV_QPS_RESET;
  q->qp_type = a->qp_type;
  q->srq = a->srq;
  qp->qpn = r->qpn;
  qp->cap = r->cap;
  qp->max_inline = r->cap.max_inline_data;
  qp->sq.max_sge = r->cap.max_send_sge;
  qp->rq.max_sge = r->cap.max_recv_sge;
  qp->sq_sig_all = a->sq_sig_all;
}

// An enum field's bits. Fields outside attr_mask may hold anything (librdmacm
// leaves them uninitialized); loading them as the enum type would be
// undefined behaviour, so they are copied as integers.
template <class E>
uint32_t enum_bits(const E &e) {
  uint32_t v = 0;
  static_assert(sizeof(E) <= sizeof(v));
  memcpy(&v, &e, sizeof(E));
  return v;
}

void to_mroce_attr(const struct ibv_qp_attr *a, int mask, struct mroce_qp_attr *m) {
  memset(m, 0, sizeof(*m));
  m->attr_mask = static_cast<uint32_t>(mask);
  m->qp_state = enum_bits(a->qp_state);
  m->cur_qp_state = enum_bits(a->cur_qp_state);
  m->path_mtu = enum_bits(a->path_mtu);
  m->qp_access_flags = static_cast<uint32_t>(a->qp_access_flags);
  m->rq_psn = a->rq_psn;
  m->sq_psn = a->sq_psn;
  m->dest_qp_num = a->dest_qp_num;
  memcpy(m->dgid, a->ah_attr.grh.dgid.raw, sizeof(m->dgid));
  m->flow_label = a->ah_attr.grh.flow_label;
  m->sgid_index = a->ah_attr.grh.sgid_index;
  m->hop_limit = a->ah_attr.grh.hop_limit;
  m->traffic_class = a->ah_attr.grh.traffic_class;
  m->is_global = a->ah_attr.is_global;
  m->timeout = a->timeout;
  m->retry_cnt = a->retry_cnt;
  m->rnr_retry = a->rnr_retry;
  m->min_rnr_timer = a->min_rnr_timer;
  m->max_rd_atomic = a->max_rd_atomic;
  m->max_dest_rd_atomic = a->max_dest_rd_atomic;
  m->port_num = (mask & IBV_QP_PORT) ? a->port_num : (mask & IBV_QP_AV) ? a->ah_attr.port_num : 1;
  m->pkey_index = a->pkey_index;
  m->cap = {a->cap.max_send_wr, a->cap.max_recv_wr, a->cap.max_send_sge, a->cap.max_recv_sge,
            a->cap.max_inline_data};
  m->qkey = a->qkey;
}

void from_mroce_attr(const struct mroce_qp_attr *m, struct ibv_qp_attr *a) {
  memset(a, 0, sizeof(*a));
  a->qp_state = static_cast<enum ibv_qp_state>(m->qp_state);
  a->cur_qp_state = static_cast<enum ibv_qp_state>(m->cur_qp_state);
  a->path_mtu = static_cast<enum ibv_mtu>(m->path_mtu);
  a->path_mig_state = IBV_MIG_MIGRATED;
  a->qp_access_flags = static_cast<int>(m->qp_access_flags);
  a->rq_psn = m->rq_psn;
  a->sq_psn = m->sq_psn;
  a->dest_qp_num = m->dest_qp_num;
  memcpy(a->ah_attr.grh.dgid.raw, m->dgid, sizeof(m->dgid));
  a->ah_attr.grh.flow_label = m->flow_label;
  a->ah_attr.grh.sgid_index = m->sgid_index;
  a->ah_attr.grh.hop_limit = m->hop_limit;
  a->ah_attr.grh.traffic_class = m->traffic_class;
  a->ah_attr.is_global = m->is_global;
  a->ah_attr.port_num = m->port_num;
  a->timeout = m->timeout;
  a->retry_cnt = m->retry_cnt;
  a->rnr_retry = m->rnr_retry;
  a->min_rnr_timer = m->min_rnr_timer;
  a->max_rd_atomic = m->max_rd_atomic;
  a->max_dest_rd_atomic = m->max_dest_rd_atomic;
  a->port_num = m->port_num;
  a->sq_draining = m->sq_draining;
  a->pkey_index = m->pkey_index;
  a->qkey = m->qkey;
}

constexpr int kQueryQpMask = (IBV_QP_RATE_LIMIT << 1) - 1;

// query_qp writes only the fields attr_mask names (the caller's other fields
// stay as they were). No alternate path, SQD notification or rate limit
// exists: those read as 0.
void copy_masked(const struct ibv_qp_attr *full, int mask, struct ibv_qp_attr *a) {
#define MROCE_COPY_IF(bit, field) \
  if (mask & (bit)) a->field = full->field
  MROCE_COPY_IF(IBV_QP_STATE, qp_state);
  MROCE_COPY_IF(IBV_QP_STATE, sq_draining);
  MROCE_COPY_IF(IBV_QP_CUR_STATE, cur_qp_state);
  MROCE_COPY_IF(IBV_QP_EN_SQD_ASYNC_NOTIFY, en_sqd_async_notify);
  MROCE_COPY_IF(IBV_QP_ACCESS_FLAGS, qp_access_flags);
  MROCE_COPY_IF(IBV_QP_PKEY_INDEX, pkey_index);
  MROCE_COPY_IF(IBV_QP_PORT, port_num);
  MROCE_COPY_IF(IBV_QP_QKEY, qkey);
  MROCE_COPY_IF(IBV_QP_AV, ah_attr);
  MROCE_COPY_IF(IBV_QP_PATH_MTU, path_mtu);
  MROCE_COPY_IF(IBV_QP_TIMEOUT, timeout);
  MROCE_COPY_IF(IBV_QP_RETRY_CNT, retry_cnt);
  MROCE_COPY_IF(IBV_QP_RNR_RETRY, rnr_retry);
  MROCE_COPY_IF(IBV_QP_RQ_PSN, rq_psn);
  MROCE_COPY_IF(IBV_QP_MAX_QP_RD_ATOMIC, max_rd_atomic);
  MROCE_COPY_IF(IBV_QP_ALT_PATH, alt_ah_attr);
  MROCE_COPY_IF(IBV_QP_ALT_PATH, alt_pkey_index);
  MROCE_COPY_IF(IBV_QP_ALT_PATH, alt_port_num);
  MROCE_COPY_IF(IBV_QP_ALT_PATH, alt_timeout);
  MROCE_COPY_IF(IBV_QP_MIN_RNR_TIMER, min_rnr_timer);
  MROCE_COPY_IF(IBV_QP_SQ_PSN, sq_psn);
  MROCE_COPY_IF(IBV_QP_MAX_DEST_RD_ATOMIC, max_dest_rd_atomic);
  MROCE_COPY_IF(IBV_QP_PATH_MIG_STATE, path_mig_state);
  MROCE_COPY_IF(IBV_QP_CAP, cap);
  MROCE_COPY_IF(IBV_QP_DEST_QPN, dest_qp_num);
  MROCE_COPY_IF(IBV_QP_RATE_LIMIT, rate_limit);
#undef MROCE_COPY_IF
}

// Outstanding READs/atomics beyond max_qp_rd_atom (the responder's table
// size) are refused, as query_device reports.
int check_rd_atomic(struct mroce_context *ctx, const struct ibv_qp_attr *a, int mask) {
  uint32_t max = ctx->dev_attr.max_qp_rd_atom;
  if ((mask & IBV_QP_MAX_QP_RD_ATOMIC) && a->max_rd_atomic > max)
    return mroce_refuse(ctx, EINVAL, "max_rd_atomic %u: max_qp_init_rd_atom is %u",
                        a->max_rd_atomic, max);
  if ((mask & IBV_QP_MAX_DEST_RD_ATOMIC) && a->max_dest_rd_atomic > max)
    return mroce_refuse(ctx, EINVAL, "max_dest_rd_atomic %u: max_qp_rd_atom is %u",
                        a->max_dest_rd_atomic, max);
  return 0;
}

void ring_doorbell(struct mroce_qp *qp, struct mroce_ring *ring) {
  mroce_ring_doorbell(to_mroce_ctx(qp->vqp.qp.context), ring);
}

bool is_atomic(uint8_t op) {
  return op == IBV_WR_ATOMIC_CMP_AND_SWP || op == IBV_WR_ATOMIC_FETCH_AND_ADD;
}

bool is_send(uint8_t op) { return op == IBV_WR_SEND || op == IBV_WR_SEND_WITH_IMM; }

// post_send's gather list, into the WQE (inline or as SGEs).
int set_wr_data(const struct mroce_qp *qp, const struct ibv_send_wr *wr, struct mroce_send_wqe *w) {
  if (wr->num_sge < 0 || static_cast<uint32_t>(wr->num_sge) > qp->sq.max_sge) return EINVAL;
  if (!(wr->send_flags & IBV_SEND_INLINE))
    return mroce_wqe_set_sge_list(qp, w, static_cast<size_t>(wr->num_sge), wr->sg_list);
  for (int i = 0; i < wr->num_sge; i++) {
    const struct ibv_sge &s = wr->sg_list[i];
    if (int err = mroce_wqe_add_inline(qp, w, reinterpret_cast<const void *>(s.addr), s.length))
      return err;
  }
  return 0;
}

// post_send: one ibv_send_wr into one WQE, through the same fill functions
// the ibv_wr_* API calls (qp_ex.cc).
int build_send_wqe(struct mroce_qp *qp, const struct ibv_send_wr *wr, struct mroce_send_wqe *w) {
  uint8_t op = static_cast<uint8_t>(wr->opcode);
  if (wr->opcode > 0xff || mroce_wqe_check_opcode(qp, op)) return EINVAL;
  mroce_wqe_init(w, wr->wr_id, op, wr->send_flags);
  if (op == IBV_WR_BIND_MW) {  // type 2 only: type 1 binds through ibv_bind_mw
    const struct ibv_mw *mw = wr->bind_mw.mw;
    if (!mw || mw->type != IBV_MW_TYPE_2) return EINVAL;
    return mroce_wqe_bind_mw(w, mw, wr->bind_mw.rkey, &wr->bind_mw.bind_info, IBV_MW_TYPE_2);
  }
  if (op == IBV_WR_LOCAL_INV) {
    mroce_wqe_local_inv(w, wr->invalidate_rkey);
    return 0;
  }
  if (op == IBV_WR_SEND_WITH_INV) mroce_wqe_set_invalidate(w, wr->invalidate_rkey);
  if (op == IBV_WR_SEND_WITH_IMM || op == IBV_WR_RDMA_WRITE_WITH_IMM)
    mroce_wqe_set_imm(w, wr->imm_data);
  if (is_atomic(op))
    mroce_wqe_set_atomic(w, wr->wr.atomic.rkey, wr->wr.atomic.remote_addr,
                         wr->wr.atomic.compare_add, wr->wr.atomic.swap);
  else if (!is_send(op) && op != IBV_WR_SEND_WITH_INV)
    mroce_wqe_set_rdma(w, wr->wr.rdma.rkey, wr->wr.rdma.remote_addr);
  if (qp->vqp.qp.qp_type == IBV_QPT_UD) {
    if (int err = mroce_wqe_set_ud(w, wr->wr.ud.ah, wr->wr.ud.remote_qpn, wr->wr.ud.remote_qkey))
      return err;
  }
  return set_wr_data(qp, wr, w);
}

enum ibv_wc_opcode wc_opcode_of(uint8_t wr_opcode) {
  switch (wr_opcode) {
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM:
      return IBV_WC_RDMA_WRITE;
    case IBV_WR_RDMA_READ:
      return IBV_WC_RDMA_READ;
    case IBV_WR_ATOMIC_CMP_AND_SWP:
      return IBV_WC_COMP_SWAP;
    case IBV_WR_ATOMIC_FETCH_AND_ADD:
      return IBV_WC_FETCH_ADD;
    case IBV_WR_BIND_MW:
      return IBV_WC_BIND_MW;
    case IBV_WR_LOCAL_INV:
      return IBV_WC_LOCAL_INV;
    default:
      return IBV_WC_SEND;
  }
}

// Flush completions for slots [max(flushed, NIC consumer), prod) of one queue.
int flush_wq(struct mroce_qp *qp, struct mroce_wq *wq, bool send, int max, struct ibv_wc *wc) {
  pthread_spin_lock(&wq->lock);
  uint32_t from = mroce_ring_load_consumer(&wq->ring);
  if (static_cast<int32_t>(wq->flushed - from) > 0) from = wq->flushed;
  int n = 0;
  for (; n < max && from != wq->prod; n++, from++) {
    memset(&wc[n], 0, sizeof(wc[n]));
    wc[n].status = IBV_WC_WR_FLUSH_ERR;
    wc[n].qp_num = qp->qpn;
    if (send) {
      auto *w = static_cast<const struct mroce_send_wqe *>(mroce_ring_slot(&wq->ring, from));
      wc[n].wr_id = w->wr_id;
      wc[n].opcode = wc_opcode_of(w->opcode);
    } else {
      auto *w = static_cast<const struct mroce_recv_wqe *>(mroce_ring_slot(&wq->ring, from));
      wc[n].wr_id = w->wr_id;
      wc[n].opcode = IBV_WC_RECV;
    }
  }
  wq->flushed = from;
  pthread_spin_unlock(&wq->lock);
  return n;
}

}  // namespace

bool mroce_sq_open(const struct ibv_qp *q) {
  return q->state != IBV_QPS_RESET && q->state != IBV_QPS_INIT && q->state != IBV_QPS_RTR;
}

// ---- the send WQE builder: ibv_post_send and ibv_wr_* fill WQEs only here ----

int mroce_wqe_check_opcode(const struct mroce_qp *qp, uint8_t op) {
  switch (qp->vqp.qp.qp_type) {
    case IBV_QPT_UD:  // datagrams: SEND, with or without immediate
      return is_send(op) ? 0 : EINVAL;
    case IBV_QPT_UC:  // SEND and WRITE, with or without immediate; type 2 window binds and
                      // LOCAL_INV (IB: RC and UC; no SEND_WITH_INV on UC, docs/protocol.md §15)
      return (is_send(op) || op == IBV_WR_RDMA_WRITE || op == IBV_WR_RDMA_WRITE_WITH_IMM ||
              op == IBV_WR_BIND_MW || op == IBV_WR_LOCAL_INV)
                 ? 0
                 : EINVAL;
    default:
      return (is_send(op) || is_atomic(op) || op == IBV_WR_RDMA_WRITE ||
              op == IBV_WR_RDMA_WRITE_WITH_IMM || op == IBV_WR_RDMA_READ ||
              op == IBV_WR_BIND_MW || op == IBV_WR_LOCAL_INV ||  // memory windows
              op == IBV_WR_SEND_WITH_INV)
                 ? 0
                 : EINVAL;
  }
}

void mroce_wqe_init(struct mroce_send_wqe *w, uint64_t wr_id, uint8_t opcode,
                    uint32_t send_flags) {
  memset(w, 0, offsetof(struct mroce_send_wqe, u));
  w->wr_id = wr_id;
  w->opcode = opcode;
  // Whether the data is inline is the data's business (set_sge / add_inline).
  w->send_flags = send_flags & ~static_cast<uint32_t>(IBV_SEND_INLINE);
}

void mroce_wqe_set_imm(struct mroce_send_wqe *w, __be32 imm) { w->imm = ntohl(imm); }

void mroce_wqe_set_invalidate(struct mroce_send_wqe *w, uint32_t rkey) { w->imm = rkey; }

void mroce_wqe_set_rdma(struct mroce_send_wqe *w, uint32_t rkey, uint64_t remote_addr) {
  w->rkey = rkey;
  w->remote_addr = remote_addr;
}

void mroce_wqe_set_atomic(struct mroce_send_wqe *w, uint32_t rkey, uint64_t remote_addr,
                          uint64_t compare_add, uint64_t swap) {
  mroce_wqe_set_rdma(w, rkey, remote_addr);
  w->compare_add = compare_add;
  w->swap = swap;
}

int mroce_wqe_set_ud(struct mroce_send_wqe *w, struct ibv_ah *ah, uint32_t remote_qpn,
                     uint32_t remote_qkey) {
  if (!ah) return EINVAL;
  w->ud.ah = to_mroce_ah(ah)->ahn;
  w->ud.remote_qpn = remote_qpn;
  w->ud.remote_qkey = remote_qkey;
  return 0;
}

int mroce_wqe_set_sge_list(const struct mroce_qp *qp, struct mroce_send_wqe *w, size_t n,
                           const struct ibv_sge *sg) {
  if (n > qp->sq.max_sge) return EINVAL;
  w->send_flags &= ~static_cast<uint32_t>(IBV_SEND_INLINE);
  w->inline_len = 0;
  w->num_sge = static_cast<uint8_t>(n);
  for (size_t i = 0; i < n; i++) w->u.sg[i] = {sg[i].addr, sg[i].length, sg[i].lkey};
  return 0;
}

// Appends to the WQE's inline data (the first call starts it).
int mroce_wqe_add_inline(const struct mroce_qp *qp, struct mroce_send_wqe *w, const void *data,
                         size_t len) {
  if (w->opcode == IBV_WR_RDMA_READ || is_atomic(w->opcode)) return EINVAL;
  if (!(w->send_flags & IBV_SEND_INLINE)) {
    w->send_flags |= IBV_SEND_INLINE;
    w->inline_len = 0;
    w->num_sge = 0;
  }
  if (len > qp->max_inline - w->inline_len) return EINVAL;
  // An empty entry may carry addr 0 (UCX posts one): memcpy must never
  // see a null source, even for 0 bytes.
  if (len == 0) return 0;
  memcpy(w->u.inline_data + w->inline_len, data, len);
  w->inline_len = static_cast<uint16_t>(w->inline_len + len);
  return 0;
}

void mroce_ring_doorbell(struct mroce_context *ctx, struct mroce_ring *ring) {
  if (!mroce_ring_nic_sleeping(ring)) return;
  uint64_t one = 1;
  ssize_t n = write(ctx->doorbell_fd, &one, sizeof(one));
  (void)n;  // an eventfd write only fails on counter overflow: the NIC is awake then
}

struct ibv_qp *mroce_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr) {
  struct mroce_context *ctx = to_mroce_ctx(pd->context);
  int err = check_init_attr(ctx, attr);
  if (err) {
    errno = err;
    return nullptr;
  }
  auto *qp = static_cast<struct mroce_qp *>(calloc(1, sizeof(struct mroce_qp)));
  if (!qp) return nullptr;
  struct mroce_create_qp_req req = {};
  req.user_handle = reinterpret_cast<uintptr_t>(&qp->vqp.qp);
  req.pdn = to_mroce_pd(pd)->pdn;
  req.send_cqn = to_mroce_cq(attr->send_cq)->cqn;
  req.recv_cqn = to_mroce_cq(attr->recv_cq)->cqn;
  req.sq_sig_all = attr->sq_sig_all ? 1 : 0;
  req.cap = {attr->cap.max_send_wr, attr->cap.max_recv_wr, attr->cap.max_send_sge,
             attr->cap.max_recv_sge, attr->cap.max_inline_data};
  req.qp_type = attr->qp_type;
  req.srqn = attr->srq ? to_mroce_srq(attr->srq)->srqn : 0;
  struct mroce_create_qp_resp resp;
  int memfd = -1;
  struct mroce_call call = {MROCE_OP_CREATE_QP, &req, sizeof(req), -1, &resp, sizeof(resp),
                            &memfd, 1};
  err = mroce_ctrl_call(ctx, &call);
  if (!err) {
    err = map_qp(qp, memfd, &resp);
    close(memfd);
    if (err) {
      if (qp->map) munmap(qp->map, qp->map_len);
      mroce_ctrl_handle(ctx, MROCE_OP_DESTROY_QP, resp.qpn);
    }
  }
  if (err) {
    free(qp);
    errno = err;
    return nullptr;
  }
  fill_qp(qp, pd, attr, &resp);
  attr->cap = {resp.cap.max_send_wr, resp.cap.max_recv_wr, resp.cap.max_send_sge,
               resp.cap.max_recv_sge, resp.cap.max_inline_data};
  cq_ref(attr->send_cq, 1);
  cq_ref(attr->recv_cq, 1);
  link_qp(ctx, qp, true);
  return &qp->vqp.qp;
}

int mroce_modify_qp(struct ibv_qp *ibqp, struct ibv_qp_attr *attr, int attr_mask) {
  struct mroce_qp *qp = to_mroce_qp(ibqp);
  if ((attr_mask & IBV_QP_AV) && !attr->ah_attr.is_global) {
    // As a kernel RoCE device does (rdma_check_ah_attr): on Ethernet the
    // destination is the GRH's GID; without one every frame would go to ::.
    struct mroce_context *ctx = to_mroce_ctx(ibqp->context);
    snprintf(ctx->last_reason, sizeof(ctx->last_reason),
             "address vector without a GRH: a RoCE QP needs ah_attr.is_global and a destination GID");
    return EINVAL;
  }
  if (int err = check_rd_atomic(to_mroce_ctx(ibqp->context), attr, attr_mask)) return err;
  struct mroce_modify_qp_req req = {};
  req.qpn = qp->qpn;
  to_mroce_attr(attr, attr_mask, &req.attr);
  struct mroce_call call = {MROCE_OP_MODIFY_QP, &req, sizeof(req), -1, nullptr, 0, nullptr, 0};
  int err = mroce_ctrl_call(to_mroce_ctx(ibqp->context), &call);
  if (err) return err;
  if (attr_mask & IBV_QP_STATE) {
    // post_send and post_recv check the state under their queue's lock.
    pthread_spin_lock(&qp->sq.lock);
    pthread_spin_lock(&qp->rq.lock);
    ibqp->state = attr->qp_state;
    pthread_spin_unlock(&qp->rq.lock);
    pthread_spin_unlock(&qp->sq.lock);
  }
  return 0;
}

int mroce_query_qp(struct ibv_qp *ibqp, struct ibv_qp_attr *attr, int attr_mask,
                   struct ibv_qp_init_attr *init_attr) {
  struct mroce_qp *qp = to_mroce_qp(ibqp);
  struct mroce_context *ctx = to_mroce_ctx(ibqp->context);
  if (attr_mask & ~kQueryQpMask)
    return mroce_refuse(ctx, EINVAL, "query_qp: attr_mask 0x%x has bits beyond IBV_QP_RATE_LIMIT",
                        attr_mask);
  struct mroce_handle_req req = {qp->qpn, 0};
  struct mroce_query_qp_resp resp;
  struct mroce_call call = {MROCE_OP_QUERY_QP, &req, sizeof(req), -1, &resp, sizeof(resp),
                            nullptr, 0};
  int err = mroce_ctrl_call(ctx, &call);
  if (err) return err;
  struct ibv_qp_attr full;
  from_mroce_attr(&resp.attr, &full);
  // Capacities are the QP's own, whatever the daemon echoes.
  full.cap = {qp->cap.max_send_wr, qp->cap.max_recv_wr, qp->cap.max_send_sge,
              qp->cap.max_recv_sge, qp->cap.max_inline_data};
  copy_masked(&full, attr_mask, attr);
  memset(init_attr, 0, sizeof(*init_attr));
  init_attr->qp_context = ibqp->qp_context;
  init_attr->send_cq = ibqp->send_cq;
  init_attr->recv_cq = ibqp->recv_cq;
  init_attr->srq = ibqp->srq;
  init_attr->cap = full.cap;
  init_attr->qp_type = ibqp->qp_type;
  init_attr->sq_sig_all = static_cast<int>(qp->sq_sig_all);
  return 0;
}

int mroce_destroy_qp(struct ibv_qp *ibqp) {
  struct mroce_qp *qp = to_mroce_qp(ibqp);
  struct mroce_context *ctx = to_mroce_ctx(ibqp->context);
  int err = mroce_ctrl_handle(ctx, MROCE_OP_DESTROY_QP, qp->qpn);
  if (err && !mroce_dead(ctx)) return err;
  link_qp(ctx, qp, false);
  cq_ref(ibqp->send_cq, -1);
  cq_ref(ibqp->recv_cq, -1);
  munmap(qp->map, qp->map_len);
  pthread_spin_destroy(&qp->sq.lock);
  pthread_spin_destroy(&qp->rq.lock);
  free(qp);
  return 0;
}

int mroce_post_send(struct ibv_qp *ibqp, struct ibv_send_wr *wr, struct ibv_send_wr **bad_wr) {
  struct mroce_qp *qp = to_mroce_qp(ibqp);
  struct mroce_wq *sq = &qp->sq;
  int err = 0;
  pthread_spin_lock(&sq->lock);
  uint32_t start = sq->prod;
  if (mroce_dead(to_mroce_ctx(ibqp->context)))
    err = EIO;
  else if (!mroce_sq_open(ibqp))
    err = EINVAL;
  for (; wr && !err; wr = wr->next) {
    if (sq->prod - mroce_ring_load_consumer(&sq->ring) >= qp->cap.max_send_wr) {
      err = mroce_refuse(to_mroce_ctx(ibqp->context), ENOMEM,
                         "send queue full: max_send_wr %u WRs outstanding", qp->cap.max_send_wr);
      break;
    }
    auto *w = static_cast<struct mroce_send_wqe *>(mroce_ring_slot(&sq->ring, sq->prod));
    err = build_send_wqe(qp, wr, w);
    if (!err) sq->prod++;
  }
  bool posted = sq->prod != start;
  if (posted) mroce_ring_publish_producer(&sq->ring, sq->prod);
  pthread_spin_unlock(&sq->lock);
  if (posted) ring_doorbell(qp, &sq->ring);
  if (err) *bad_wr = wr;
  return err;
}

int mroce_post_built_wqe(struct mroce_qp *qp, const struct mroce_send_wqe *built) {
  struct ibv_qp *ibqp = &qp->vqp.qp;
  struct mroce_wq *sq = &qp->sq;
  int err = 0;
  pthread_spin_lock(&sq->lock);
  if (mroce_dead(to_mroce_ctx(ibqp->context)))
    err = EIO;
  else if (!mroce_sq_open(ibqp))
    err = EINVAL;
  else if (sq->prod - mroce_ring_load_consumer(&sq->ring) >= qp->cap.max_send_wr)
    err = ENOMEM;
  if (!err) {
    memcpy(mroce_ring_slot(&sq->ring, sq->prod), built, sizeof(*built));
    mroce_ring_publish_producer(&sq->ring, ++sq->prod);
  }
  pthread_spin_unlock(&sq->lock);
  if (!err) ring_doorbell(qp, &sq->ring);
  return err;
}

int mroce_post_recv(struct ibv_qp *ibqp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr) {
  struct mroce_qp *qp = to_mroce_qp(ibqp);
  struct mroce_wq *rq = &qp->rq;
  int err = mroce_dead(to_mroce_ctx(ibqp->context)) ? EIO : 0;
  pthread_spin_lock(&rq->lock);
  // A receive in RESET would never complete: the NIC refuses it. A QP on
  // an SRQ has no receive queue of its own (ibv_post_srq_recv).
  if (!err && (ibqp->state == IBV_QPS_RESET || ibqp->srq)) err = EINVAL;
  uint32_t start = rq->prod;
  for (; wr && !err; wr = wr->next) {
    if (wr->num_sge < 0 || static_cast<uint32_t>(wr->num_sge) > rq->max_sge) {
      err = EINVAL;
      break;
    }
    if (rq->prod - mroce_ring_load_consumer(&rq->ring) >= qp->cap.max_recv_wr) {
      err = mroce_refuse(to_mroce_ctx(ibqp->context), ENOMEM,
                         "receive queue full: max_recv_wr %u receives outstanding",
                         qp->cap.max_recv_wr);
      break;
    }
    auto *w = static_cast<struct mroce_recv_wqe *>(mroce_ring_slot(&rq->ring, rq->prod));
    w->wr_id = wr->wr_id;
    w->num_sge = static_cast<uint32_t>(wr->num_sge);
    w->reserved = 0;
    for (int i = 0; i < wr->num_sge; i++)
      w->sg[i] = {wr->sg_list[i].addr, wr->sg_list[i].length, wr->sg_list[i].lkey};
    rq->prod++;
  }
  bool posted = rq->prod != start;
  if (posted) mroce_ring_publish_producer(&rq->ring, rq->prod);
  pthread_spin_unlock(&rq->lock);
  if (posted) ring_doorbell(qp, &rq->ring);
  if (err) *bad_wr = wr;
  return err;
}

int mroce_flush_cq(struct mroce_context *ctx, struct mroce_cq *cq, int max, struct ibv_wc *wc) {
  int n = 0;
  pthread_mutex_lock(&ctx->qp_lock);
  for (struct mroce_qp *qp = ctx->qp_list; qp && n < max; qp = qp->next) {
    if (to_mroce_cq(qp->vqp.qp.send_cq) == cq) n += flush_wq(qp, &qp->sq, true, max - n, wc + n);
    if (to_mroce_cq(qp->vqp.qp.recv_cq) == cq) n += flush_wq(qp, &qp->rq, false, max - n, wc + n);
  }
  pthread_mutex_unlock(&ctx->qp_lock);
  return n;
}
