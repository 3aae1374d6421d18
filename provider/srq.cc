// Shared receive queues: control verbs over the socket, ibv_post_srq_recv
// into the SRQ's shared ring (docs/device-abi.md §2.7). The NIC's consumer
// index counts WQEs taken by messages, so a full ring is exactly max_wr
// outstanding receives: posting beyond it is ENOMEM, with the reason.
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "provider/mroce.h"

namespace {

int map_srq(struct mroce_srq *srq, int memfd, const struct mroce_create_srq_resp *r) {
  srq->map_len = r->ring_bytes;
  srq->map = mmap(nullptr, srq->map_len, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
  if (srq->map == MAP_FAILED) {
    srq->map = nullptr;
    return errno;
  }
  int err = mroce_ring_bind(&srq->wq.ring, srq->map, srq->map_len, 0, r->entries,
                            sizeof(struct mroce_recv_wqe));
  if (err) return err;
  srq->wq.prod = srq->wq.flushed = __atomic_load_n(&srq->wq.ring.hdr->producer, __ATOMIC_RELAXED);
  srq->wq.max_sge = r->attr.max_sge;
  srq->max_wr = r->attr.max_wr;
  pthread_spin_init(&srq->wq.lock, PTHREAD_PROCESS_PRIVATE);
  return 0;
}

void set_reason(struct ibv_srq *ibsrq, const char *why) {
  struct mroce_context *ctx = to_mroce_ctx(ibsrq->context);
  snprintf(ctx->last_reason, sizeof(ctx->last_reason), "%s", why);
}

}  // namespace

struct ibv_srq *mroce_create_srq(struct ibv_pd *pd, struct ibv_srq_init_attr *attr) {
  struct mroce_context *ctx = to_mroce_ctx(pd->context);
  auto *srq = static_cast<struct mroce_srq *>(calloc(1, sizeof(struct mroce_srq)));
  if (!srq) return nullptr;
  struct mroce_create_srq_req req = {};
  req.user_handle = reinterpret_cast<uintptr_t>(&srq->vsrq.srq);
  req.pdn = to_mroce_pd(pd)->pdn;
  req.attr = {attr->attr.max_wr, attr->attr.max_sge, 0, 0};
  struct mroce_create_srq_resp resp;
  int memfd = -1;
  struct mroce_call call = {MROCE_OP_CREATE_SRQ, &req, sizeof(req), -1, &resp, sizeof(resp),
                            &memfd, 1};
  int err = mroce_ctrl_call(ctx, &call);
  if (!err) {
    err = map_srq(srq, memfd, &resp);
    close(memfd);
    if (err) {
      if (srq->map) munmap(srq->map, srq->map_len);
      mroce_ctrl_handle(ctx, MROCE_OP_DESTROY_SRQ, resp.srqn);
    }
  }
  if (err) {
    free(srq);
    errno = err;
    return nullptr;
  }
  srq->srqn = resp.srqn;
  srq->vsrq.srq.context = pd->context;
  srq->vsrq.srq.pd = pd;
  srq->vsrq.srq.handle = resp.srqn;
  srq->vsrq.srq_num = resp.srqn;
  attr->attr.max_wr = resp.attr.max_wr;
  attr->attr.max_sge = resp.attr.max_sge;
  return &srq->vsrq.srq;
}

int mroce_modify_srq(struct ibv_srq *ibsrq, struct ibv_srq_attr *attr, int mask) {
  struct mroce_modify_srq_req req = {};
  req.srqn = to_mroce_srq(ibsrq)->srqn;
  req.attr_mask = static_cast<uint32_t>(mask);
  req.attr = {attr->max_wr, attr->max_sge, attr->srq_limit, 0};
  struct mroce_call call = {MROCE_OP_MODIFY_SRQ, &req, sizeof(req), -1, nullptr, 0, nullptr, 0};
  return mroce_ctrl_call(to_mroce_ctx(ibsrq->context), &call);
}

int mroce_query_srq(struct ibv_srq *ibsrq, struct ibv_srq_attr *attr) {
  struct mroce_handle_req req = {to_mroce_srq(ibsrq)->srqn, 0};
  struct mroce_srq_attr a;
  struct mroce_call call = {MROCE_OP_QUERY_SRQ, &req, sizeof(req), -1, &a, sizeof(a), nullptr, 0};
  int err = mroce_ctrl_call(to_mroce_ctx(ibsrq->context), &call);
  if (err) return err;
  attr->max_wr = a.max_wr;
  attr->max_sge = a.max_sge;
  attr->srq_limit = a.srq_limit;
  return 0;
}

int mroce_destroy_srq(struct ibv_srq *ibsrq) {
  struct mroce_srq *srq = to_mroce_srq(ibsrq);
  struct mroce_context *ctx = to_mroce_ctx(ibsrq->context);
  int err = mroce_ctrl_handle(ctx, MROCE_OP_DESTROY_SRQ, srq->srqn);
  if (err && !mroce_dead(ctx)) return err;  // EBUSY: QPs still attached (the reason says so)
  munmap(srq->map, srq->map_len);
  pthread_spin_destroy(&srq->wq.lock);
  free(srq);
  return 0;
}

int mroce_post_srq_recv(struct ibv_srq *ibsrq, struct ibv_recv_wr *wr,
                        struct ibv_recv_wr **bad_wr) {
  struct mroce_srq *srq = to_mroce_srq(ibsrq);
  struct mroce_wq *wq = &srq->wq;
  int err = mroce_dead(to_mroce_ctx(ibsrq->context)) ? EIO : 0;
  pthread_spin_lock(&wq->lock);
  uint32_t start = wq->prod;
  for (; wr && !err; wr = wr->next) {
    if (wr->num_sge < 0 || static_cast<uint32_t>(wr->num_sge) > wq->max_sge) {
      err = EINVAL;
      break;
    }
    if (wq->prod - mroce_ring_load_consumer(&wq->ring) >= wq->ring.entries) {
      err = ENOMEM;
      break;
    }
    auto *w = static_cast<struct mroce_recv_wqe *>(mroce_ring_slot(&wq->ring, wq->prod));
    w->wr_id = wr->wr_id;
    w->num_sge = static_cast<uint32_t>(wr->num_sge);
    w->reserved = 0;
    for (int i = 0; i < wr->num_sge; i++)
      w->sg[i] = {wr->sg_list[i].addr, wr->sg_list[i].length, wr->sg_list[i].lkey};
    wq->prod++;
  }
  bool posted = wq->prod != start;
  if (posted) mroce_ring_publish_producer(&wq->ring, wq->prod);
  pthread_spin_unlock(&wq->lock);
  if (posted) mroce_ring_doorbell(to_mroce_ctx(ibsrq->context), &wq->ring);
  if (err == ENOMEM) set_reason(ibsrq, "SRQ full: max_wr receives posted and not yet consumed");
  if (err == EINVAL) set_reason(ibsrq, "num_sge above the SRQ's max_sge");
  if (err) *bad_wr = wr;
  return err;
}
