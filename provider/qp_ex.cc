// The extended QP API: ibv_create_qp_ex with IBV_QP_INIT_ATTR_SEND_OPS_FLAGS
// and the ibv_wr_* ops of struct ibv_qp_ex (rdma-core 44's layout, checked
// below). Each op fills the same SQ slot ibv_post_send fills, through the
// one send WQE builder (qp.cc, mroce_wqe_*). A batch runs under the SQ lock
// from ibv_wr_start to ibv_wr_complete, which publishes every WQE at once,
// or none: the first error of a batch (with its reason) is what
// ibv_wr_complete returns, and ibv_wr_abort discards the batch.
#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "provider/mroce.h"

// struct ibv_qp_ex as rdma-core 44 lays it out (struct verbs_qp embeds it;
// libibverbs' ibv_qp_to_qp_ex hands out &verbs_qp.qp_ex): the installed
// header must agree, or a program built against it would call the wrong op.
#define MROCE_QPX_AT(member, off) \
  static_assert(offsetof(struct ibv_qp_ex, member) == (off), "ibv_qp_ex." #member)
MROCE_QPX_AT(qp_base, 0);
MROCE_QPX_AT(comp_mask, 160);
MROCE_QPX_AT(wr_id, 168);
MROCE_QPX_AT(wr_flags, 176);
MROCE_QPX_AT(wr_atomic_cmp_swp, 184);
MROCE_QPX_AT(wr_atomic_fetch_add, 192);
MROCE_QPX_AT(wr_bind_mw, 200);
MROCE_QPX_AT(wr_local_inv, 208);
MROCE_QPX_AT(wr_rdma_read, 216);
MROCE_QPX_AT(wr_rdma_write, 224);
MROCE_QPX_AT(wr_rdma_write_imm, 232);
MROCE_QPX_AT(wr_send, 240);
MROCE_QPX_AT(wr_send_imm, 248);
MROCE_QPX_AT(wr_send_inv, 256);
MROCE_QPX_AT(wr_send_tso, 264);
MROCE_QPX_AT(wr_set_ud_addr, 272);
MROCE_QPX_AT(wr_set_xrc_srqn, 280);
MROCE_QPX_AT(wr_set_inline_data, 288);
MROCE_QPX_AT(wr_set_inline_data_list, 296);
MROCE_QPX_AT(wr_set_sge, 304);
MROCE_QPX_AT(wr_set_sge_list, 312);
MROCE_QPX_AT(wr_start, 320);
MROCE_QPX_AT(wr_complete, 328);
MROCE_QPX_AT(wr_abort, 336);
MROCE_QPX_AT(wr_atomic_write, 344);
static_assert(sizeof(struct ibv_qp_ex) == 352, "sizeof(ibv_qp_ex)");
static_assert(offsetof(struct mroce_qp, vqp.qp_ex) == 0, "ibv_qp_ex * is the mroce_qp *");
#undef MROCE_QPX_AT

namespace {

constexpr uint64_t kUdOps = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM;
constexpr uint64_t kUcOps = kUdOps | IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM |
                            IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_LOCAL_INV;
constexpr uint64_t kRcOps = kUcOps | IBV_QP_EX_WITH_RDMA_READ |
                            IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |
                            IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD | IBV_QP_EX_WITH_SEND_WITH_INV;
constexpr uint32_t kQpExMasks = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS |
                                IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;

uint64_t ops_for(enum ibv_qp_type t) {
  return t == IBV_QPT_RC ? kRcOps : t == IBV_QPT_UC ? kUcOps : t == IBV_QPT_UD ? kUdOps : 0;
}

struct mroce_qp *qp_of(struct ibv_qp_ex *q) { return reinterpret_cast<struct mroce_qp *>(q); }

// Records the batch's first error; later ones would only repeat it.
__attribute__((format(printf, 3, 4))) void fail(struct mroce_qp *qp, int err, const char *fmt,
                                                ...) {
  if (qp->wr.err) return;
  qp->wr.err = err;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(qp->wr.why, sizeof(qp->wr.why), fmt, ap);
  va_end(ap);
}

// Ends the current WQE: a UD send needs its destination.
void close_wqe(struct mroce_qp *qp) {
  if (qp->wr.cur && qp->vqp.qp.qp_type == IBV_QPT_UD && !qp->wr.cur_has_addr)
    fail(qp, EINVAL, "WR %u of the batch has no destination: call ibv_wr_set_ud_addr",
         qp->wr.count - 1);
  qp->wr.cur = nullptr;
}

// Starts the batch's next WQE for `op`; nullptr once the batch has failed
// (or outside wr_start..wr_complete, where nothing is posted).
struct mroce_send_wqe *open_wqe(struct mroce_qp *qp, uint8_t op, uint64_t op_flag,
                                const char *name) {
  struct mroce_wr_batch *b = &qp->wr;
  if (!b->open) return nullptr;
  close_wqe(qp);
  if (b->err) return nullptr;
  if (!(qp->send_ops_flags & op_flag)) {
    fail(qp, EINVAL, "ibv_wr_%s: not in the QP's send_ops_flags", name);
    return nullptr;
  }
  struct mroce_wq *sq = &qp->sq;
  if (sq->prod + b->count - mroce_ring_load_consumer(&sq->ring) >= qp->cap.max_send_wr) {
    fail(qp, ENOMEM, "send queue full at WR %u of the batch (max_send_wr %u)", b->count,
         qp->cap.max_send_wr);
    return nullptr;
  }
  auto *w = static_cast<struct mroce_send_wqe *>(mroce_ring_slot(&sq->ring, sq->prod + b->count));
  mroce_wqe_init(w, qp->vqp.qp_ex.wr_id, op, qp->vqp.qp_ex.wr_flags);
  b->count++;
  b->cur = w;
  b->cur_has_addr = false;
  return w;
}

// The WQE a wr_set_* call fills, or nullptr (recorded) if there is none.
struct mroce_send_wqe *cur_wqe(struct mroce_qp *qp, const char *name) {
  if (!qp->wr.open || qp->wr.err) return nullptr;
  if (!qp->wr.cur) fail(qp, EINVAL, "ibv_wr_%s before any opcode of the batch", name);
  return qp->wr.cur;
}

// ---- opcodes ----

void wr_send(struct ibv_qp_ex *q) {
  open_wqe(qp_of(q), IBV_WR_SEND, IBV_QP_EX_WITH_SEND, "send");
}

void wr_send_imm(struct ibv_qp_ex *q, __be32 imm) {
  auto *w = open_wqe(qp_of(q), IBV_WR_SEND_WITH_IMM, IBV_QP_EX_WITH_SEND_WITH_IMM, "send_imm");
  if (w) mroce_wqe_set_imm(w, imm);
}

// mw: memory windows (type 2 only through IBV_WR_BIND_MW, as post_send).
void wr_bind_mw(struct ibv_qp_ex *q, struct ibv_mw *mw, uint32_t rkey,
                const struct ibv_mw_bind_info *info) {
  struct mroce_qp *qp = qp_of(q);
  auto *w = open_wqe(qp, IBV_WR_BIND_MW, IBV_QP_EX_WITH_BIND_MW, "bind_mw");
  if (!w) return;
  if (!mw || mw->type != IBV_MW_TYPE_2)
    fail(qp, EINVAL, "ibv_wr_bind_mw: type 2 windows only (type 1: ibv_bind_mw)");
  else if (mroce_wqe_bind_mw(w, mw, rkey, info, IBV_MW_TYPE_2))
    fail(qp, EINVAL, "ibv_wr_bind_mw: a bind of non-zero length needs an MR");
}

void wr_local_inv(struct ibv_qp_ex *q, uint32_t invalidate_rkey) {
  auto *w = open_wqe(qp_of(q), IBV_WR_LOCAL_INV, IBV_QP_EX_WITH_LOCAL_INV, "local_inv");
  if (w) mroce_wqe_local_inv(w, invalidate_rkey);
}

void wr_send_inv(struct ibv_qp_ex *q, uint32_t invalidate_rkey) {
  auto *w = open_wqe(qp_of(q), IBV_WR_SEND_WITH_INV, IBV_QP_EX_WITH_SEND_WITH_INV, "send_inv");
  if (w) mroce_wqe_set_invalidate(w, invalidate_rkey);
}

void wr_rdma_write(struct ibv_qp_ex *q, uint32_t rkey, uint64_t remote_addr) {
  auto *w = open_wqe(qp_of(q), IBV_WR_RDMA_WRITE, IBV_QP_EX_WITH_RDMA_WRITE, "rdma_write");
  if (w) mroce_wqe_set_rdma(w, rkey, remote_addr);
}

void wr_rdma_write_imm(struct ibv_qp_ex *q, uint32_t rkey, uint64_t remote_addr, __be32 imm) {
  auto *w = open_wqe(qp_of(q), IBV_WR_RDMA_WRITE_WITH_IMM, IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM,
                     "rdma_write_imm");
  if (!w) return;
  mroce_wqe_set_rdma(w, rkey, remote_addr);
  mroce_wqe_set_imm(w, imm);
}

void wr_rdma_read(struct ibv_qp_ex *q, uint32_t rkey, uint64_t remote_addr) {
  auto *w = open_wqe(qp_of(q), IBV_WR_RDMA_READ, IBV_QP_EX_WITH_RDMA_READ, "rdma_read");
  if (w) mroce_wqe_set_rdma(w, rkey, remote_addr);
}

void wr_atomic_cmp_swp(struct ibv_qp_ex *q, uint32_t rkey, uint64_t remote_addr,
                       uint64_t compare, uint64_t swap) {
  auto *w = open_wqe(qp_of(q), IBV_WR_ATOMIC_CMP_AND_SWP, IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP,
                     "atomic_cmp_swp");
  if (w) mroce_wqe_set_atomic(w, rkey, remote_addr, compare, swap);
}

void wr_atomic_fetch_add(struct ibv_qp_ex *q, uint32_t rkey, uint64_t remote_addr,
                         uint64_t add) {
  auto *w = open_wqe(qp_of(q), IBV_WR_ATOMIC_FETCH_AND_ADD, IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD,
                     "atomic_fetch_add");
  if (w) mroce_wqe_set_atomic(w, rkey, remote_addr, add, 0);
}

// Ops the device does not have (yet): refused at create, and a call anyway
// fails the batch rather than jump through a NULL pointer.
void refuse_op(struct ibv_qp_ex *q, const char *name) {
  struct mroce_qp *qp = qp_of(q);
  if (qp->wr.open) fail(qp, EOPNOTSUPP, "ibv_wr_%s: not supported by metaroce", name);
}
void wr_send_tso(struct ibv_qp_ex *q, void *, uint16_t, uint16_t) { refuse_op(q, "send_tso"); }
void wr_set_xrc_srqn(struct ibv_qp_ex *q, uint32_t) { refuse_op(q, "set_xrc_srqn"); }
void wr_atomic_write(struct ibv_qp_ex *q, uint32_t, uint64_t, const void *) {
  refuse_op(q, "atomic_write");
}

// ---- the WQE's destination and data ----

void wr_set_ud_addr(struct ibv_qp_ex *q, struct ibv_ah *ah, uint32_t remote_qpn,
                    uint32_t remote_qkey) {
  struct mroce_qp *qp = qp_of(q);
  struct mroce_send_wqe *w = cur_wqe(qp, "set_ud_addr");
  if (!w) return;
  if (qp->vqp.qp.qp_type != IBV_QPT_UD)
    fail(qp, EINVAL, "ibv_wr_set_ud_addr on a QP that is not UD");
  else if (mroce_wqe_set_ud(w, ah, remote_qpn, remote_qkey))
    fail(qp, EINVAL, "ibv_wr_set_ud_addr without an address handle");
  else
    qp->wr.cur_has_addr = true;
}

void set_sges(struct mroce_qp *qp, size_t n, const struct ibv_sge *sg, const char *name) {
  struct mroce_send_wqe *w = cur_wqe(qp, name);
  if (w && mroce_wqe_set_sge_list(qp, w, n, sg))
    fail(qp, EINVAL, "ibv_wr_%s: %zu SGEs, the QP's max_send_sge is %u", name, n,
         qp->sq.max_sge);
}

void wr_set_sge(struct ibv_qp_ex *q, uint32_t lkey, uint64_t addr, uint32_t length) {
  struct ibv_sge sg = {addr, length, lkey};
  set_sges(qp_of(q), 1, &sg, "set_sge");
}

void wr_set_sge_list(struct ibv_qp_ex *q, size_t n, const struct ibv_sge *sg) {
  set_sges(qp_of(q), n, sg, "set_sge_list");
}

void set_inline(struct mroce_qp *qp, size_t n, const struct ibv_data_buf *bufs, const char *name) {
  struct mroce_send_wqe *w = cur_wqe(qp, name);
  if (!w) return;
  mroce_wqe_set_sge_list(qp, w, 0, nullptr);  // replaces any data set before
  size_t total = 0;
  for (size_t i = 0; i < n; i++) {
    total += bufs[i].length;
    if (!mroce_wqe_add_inline(qp, w, bufs[i].addr, bufs[i].length)) continue;
    if (w->opcode == IBV_WR_RDMA_READ || w->opcode == IBV_WR_ATOMIC_CMP_AND_SWP ||
        w->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD)
      fail(qp, EINVAL, "ibv_wr_%s: a READ or an atomic has no inline data", name);
    else
      fail(qp, EINVAL, "ibv_wr_%s: %zu or more bytes, the QP's max_inline_data is %u", name,
           total, qp->max_inline);
    return;
  }
}

void wr_set_inline_data(struct ibv_qp_ex *q, void *addr, size_t length) {
  struct ibv_data_buf b = {addr, length};
  set_inline(qp_of(q), 1, &b, "set_inline_data");
}

void wr_set_inline_data_list(struct ibv_qp_ex *q, size_t n, const struct ibv_data_buf *bufs) {
  set_inline(qp_of(q), n, bufs, "set_inline_data_list");
}

// ---- the batch ----

void wr_start(struct ibv_qp_ex *q) {
  struct mroce_qp *qp = qp_of(q);
  pthread_spin_lock(&qp->sq.lock);  // held until wr_complete or wr_abort
  qp->wr.open = true;
  qp->wr.err = 0;
  qp->wr.count = 0;
  qp->wr.cur = nullptr;
  qp->wr.why[0] = 0;
  if (mroce_dead(to_mroce_ctx(q->qp_base.context)))
    fail(qp, EIO, "the device is gone (its daemon exited)");
  else if (!mroce_sq_open(&q->qp_base))
    fail(qp, EINVAL, "QP %u is in state %d: sends need RTS", qp->qpn, q->qp_base.state);
}

int wr_complete(struct ibv_qp_ex *q) {
  struct mroce_qp *qp = qp_of(q);
  struct mroce_context *ctx = to_mroce_ctx(q->qp_base.context);
  if (!qp->wr.open) return mroce_refuse(ctx, EINVAL, "ibv_wr_complete without ibv_wr_start");
  close_wqe(qp);
  int err = qp->wr.err;
  uint32_t n = err ? 0 : qp->wr.count;
  qp->wr.open = false;
  if (n) {
    qp->sq.prod += n;
    mroce_ring_publish_producer(&qp->sq.ring, qp->sq.prod);
  }
  pthread_spin_unlock(&qp->sq.lock);
  if (n) mroce_ring_doorbell(ctx, &qp->sq.ring);
  if (err) mroce_refuse(ctx, err, "ibv_wr_complete, nothing posted: %s", qp->wr.why);
  return err;
}

void wr_abort(struct ibv_qp_ex *q) {
  struct mroce_qp *qp = qp_of(q);
  if (!qp->wr.open) return;
  qp->wr.open = false;  // the slots written stay unpublished: the NIC never sees them
  pthread_spin_unlock(&qp->sq.lock);
}

void install_wr_ops(struct mroce_qp *qp, uint64_t send_ops_flags) {
  struct ibv_qp_ex *x = &qp->vqp.qp_ex;
  qp->send_ops_flags = send_ops_flags;
  x->wr_atomic_cmp_swp = wr_atomic_cmp_swp;
  x->wr_atomic_fetch_add = wr_atomic_fetch_add;
  x->wr_bind_mw = wr_bind_mw;
  x->wr_local_inv = wr_local_inv;
  x->wr_rdma_read = wr_rdma_read;
  x->wr_rdma_write = wr_rdma_write;
  x->wr_rdma_write_imm = wr_rdma_write_imm;
  x->wr_send = wr_send;
  x->wr_send_imm = wr_send_imm;
  x->wr_send_inv = wr_send_inv;
  x->wr_send_tso = wr_send_tso;
  x->wr_set_ud_addr = wr_set_ud_addr;
  x->wr_set_xrc_srqn = wr_set_xrc_srqn;
  x->wr_set_inline_data = wr_set_inline_data;
  x->wr_set_inline_data_list = wr_set_inline_data_list;
  x->wr_set_sge = wr_set_sge;
  x->wr_set_sge_list = wr_set_sge_list;
  x->wr_start = wr_start;
  x->wr_complete = wr_complete;
  x->wr_abort = wr_abort;
  x->wr_atomic_write = wr_atomic_write;
  qp->vqp.comp_mask |= VERBS_QP_EX;  // what ibv_qp_to_qp_ex looks at
}

int check_ex_attr(struct mroce_context *ctx, const struct ibv_qp_init_attr_ex *a) {
  if (!(a->comp_mask & IBV_QP_INIT_ATTR_PD) || !a->pd)
    return mroce_refuse(ctx, EINVAL, "ibv_create_qp_ex needs IBV_QP_INIT_ATTR_PD and a PD");
  if (a->pd->context != &ctx->ibv_ctx.context)
    return mroce_refuse(ctx, EINVAL, "the PD belongs to another context");
  if (a->comp_mask & ~kQpExMasks)
    return mroce_refuse(ctx, EOPNOTSUPP,
                        "comp_mask 0x%x: only PD, CREATE_FLAGS and SEND_OPS_FLAGS are supported "
                        "(no XRC, TSO, RSS or WQ indirection)",
                        a->comp_mask);
  if ((a->comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) && a->create_flags)
    return mroce_refuse(ctx, EOPNOTSUPP, "create_flags 0x%x: none are supported",
                        a->create_flags);
  if (!(a->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS)) return 0;
  uint64_t extra = a->send_ops_flags & ~ops_for(a->qp_type);
  if (extra)
    return mroce_refuse(ctx, EOPNOTSUPP,
                        "send_ops_flags 0x%llx not supported on this QP type (RC: WRITE, "
                        "WRITE_IMM, SEND, SEND_IMM, READ, CMP_SWP, FETCH_ADD; UC: no READ or "
                        "atomics; UD: SEND, SEND_IMM)",
                        static_cast<unsigned long long>(extra));
  return 0;
}

}  // namespace

struct ibv_qp *mroce_create_qp_ex(struct ibv_context *context, struct ibv_qp_init_attr_ex *attr) {
  struct mroce_context *ctx = to_mroce_ctx(context);
  if (int err = check_ex_attr(ctx, attr)) {
    errno = err;
    return nullptr;
  }
  // ibv_qp_init_attr is the head of ibv_qp_init_attr_ex (libibverbs casts too).
  struct ibv_qp_init_attr base;
  memcpy(&base, attr, sizeof(base));
  struct ibv_qp *q = mroce_create_qp(attr->pd, &base);
  if (!q) return nullptr;
  attr->cap = base.cap;
  if (attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS)
    install_wr_ops(to_mroce_qp(q), attr->send_ops_flags);
  return q;
}
