// Memory windows (docs/device-abi.md §2.8, docs/engine.md §Memory windows):
// ALLOC_MW/DEALLOC_MW over the control socket; binds and invalidations are
// send WQEs, built here for post_send, ibv_bind_mw and the extended API.
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "provider/mroce.h"

struct ibv_mw *mroce_alloc_mw(struct ibv_pd *ibpd, enum ibv_mw_type type) {
  if (type != IBV_MW_TYPE_1 && type != IBV_MW_TYPE_2) {
    errno = EINVAL;
    return nullptr;
  }
  auto *mw = static_cast<struct ibv_mw *>(calloc(1, sizeof(struct ibv_mw)));
  if (!mw) return nullptr;
  struct mroce_context *ctx = to_mroce_ctx(ibpd->context);
  struct mroce_alloc_mw_req req = {to_mroce_pd(ibpd)->pdn, static_cast<uint32_t>(type)};
  struct mroce_alloc_mw_resp resp;
  struct mroce_call call = {MROCE_OP_ALLOC_MW, &req, sizeof(req), -1, &resp, sizeof(resp),
                            nullptr, 0};
  int err = mroce_ctrl_call(ctx, &call);
  if (err) {
    free(mw);
    errno = err;
    return nullptr;
  }
  mw->context = ibpd->context;
  mw->pd = ibpd;
  mw->handle = resp.handle;
  mw->rkey = resp.rkey;
  mw->type = type;
  return mw;
}

int mroce_dealloc_mw(struct ibv_mw *mw) {
  struct mroce_context *ctx = to_mroce_ctx(mw->context);
  int err = mroce_ctrl_handle(ctx, MROCE_OP_DEALLOC_MW, mw->handle);
  if (err && !mroce_dead(ctx)) return err;
  free(mw);
  return 0;
}

int mroce_wqe_bind_mw(struct mroce_send_wqe *w, const struct ibv_mw *mw, uint32_t rkey,
                      const struct ibv_mw_bind_info *info, enum ibv_mw_type via) {
  if (!info->mr && info->length) return EINVAL;  // only an unbind names no MR
  w->opcode = IBV_WR_BIND_MW;
  w->send_flags &= ~static_cast<uint32_t>(IBV_SEND_INLINE);  // carries no data
  w->num_sge = 0;
  w->inline_len = 0;
  w->rkey = rkey;
  w->remote_addr = info->addr;
  w->compare_add = info->length;
  w->bind.mw = mw->handle;
  w->bind.mr_lkey = info->mr ? info->mr->lkey : 0;
  w->bind.access = info->mw_access_flags;
  w->bind.type = static_cast<uint32_t>(via);
  return 0;
}

void mroce_wqe_local_inv(struct mroce_send_wqe *w, uint32_t rkey) {
  w->opcode = IBV_WR_LOCAL_INV;
  w->send_flags &= ~static_cast<uint32_t>(IBV_SEND_INLINE);
  w->num_sge = 0;
  w->inline_len = 0;
  w->imm = rkey;
}

// Type 1: a BIND_MW work request with the next rkey (ibv_inc_rkey), as
// rdma-core's providers do; mw->rkey takes it once posted. The completion
// (IBV_WC_BIND_MW, or IBV_WC_MW_BIND_ERR) comes on the send CQ.
int mroce_bind_mw(struct ibv_qp *ibqp, struct ibv_mw *mw, struct ibv_mw_bind *mw_bind) {
  if (mw->type != IBV_MW_TYPE_1) return EINVAL;
  if (ibqp->qp_type != IBV_QPT_RC && ibqp->qp_type != IBV_QPT_UC) return EINVAL;  // as post_send
  struct mroce_send_wqe w;
  memset(&w, 0, offsetof(struct mroce_send_wqe, u));
  w.wr_id = mw_bind->wr_id;
  w.send_flags = mw_bind->send_flags;
  uint32_t rkey = ibv_inc_rkey(mw->rkey);
  if (int err = mroce_wqe_bind_mw(&w, mw, rkey, &mw_bind->bind_info, IBV_MW_TYPE_1)) return err;
  if (int err = mroce_post_built_wqe(to_mroce_qp(ibqp), &w)) return err;
  mw->rkey = rkey;
  return 0;
}
