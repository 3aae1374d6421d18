// Completion queues: the NIC produces CQEs into a shared ring; poll_cq
// consumes them without a system call.
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "provider/mroce.h"

namespace {

// The completion-channel interposer (kmod-shim/launcher) exports this; it
// maps a channel's fd to the end the NIC writes to.
int lookup_channel_peer(int channel_fd) {
  using PeerFn = int (*)(int);
  auto fn = reinterpret_cast<PeerFn>(dlsym(RTLD_DEFAULT, MROCE_PEER_SYMBOL));
  return fn ? fn(channel_fd) : -1;
}

}  // namespace

void mroce_cqe_to_wc(const struct mroce_cqe *e, struct ibv_wc *wc) {
  memset(wc, 0, sizeof(*wc));
  wc->wr_id = e->wr_id;
  wc->status = static_cast<enum ibv_wc_status>(e->status);
  wc->opcode = static_cast<enum ibv_wc_opcode>(e->opcode);
  wc->vendor_err = e->vendor_err;
  wc->byte_len = e->byte_len;
  if (e->wc_flags & IBV_WC_WITH_INV)
    wc->invalidated_rkey = e->imm;  // an rkey: host order, as ibv_wc documents
  else
    wc->imm_data = htonl(e->imm);
  wc->qp_num = e->qp_num;
  wc->src_qp = e->src_qp;
  wc->wc_flags = e->wc_flags;
  wc->slid = e->ud.slid;  // UD receives (IBV_WC_GRH): RoCE has no LIDs or SLs
  wc->sl = e->ud.sl;
  wc->dlid_path_bits = e->ud.dlid_path_bits;
  wc->pkey_index = e->ud.pkey_index;
}

namespace {

int map_cq(struct mroce_cq *cq, int memfd, const struct mroce_create_cq_resp *resp) {
  cq->map_len = resp->ring_bytes;
  cq->map = mmap(nullptr, cq->map_len, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
  if (cq->map == MAP_FAILED) {
    cq->map = nullptr;
    return errno;
  }
  int err = mroce_ring_bind(&cq->ring, cq->map, cq->map_len, 0, resp->entries,
                            sizeof(struct mroce_cqe));
  if (err) return err;
  cq->cons = __atomic_load_n(&cq->ring.hdr->consumer, __ATOMIC_RELAXED);
  return 0;
}

int create_cq_request(struct mroce_context *ctx, struct mroce_cq *cq, int cqe, int peer_fd,
                      int *memfd, struct mroce_create_cq_resp *resp) {
  struct mroce_create_cq_req req = {};
  req.user_handle = reinterpret_cast<uintptr_t>(&cq->vcq.cq);
  req.cqe = static_cast<uint32_t>(cqe);
  req.has_channel = peer_fd >= 0;
  struct mroce_call call = {MROCE_OP_CREATE_CQ, &req, sizeof(req), peer_fd, resp, sizeof(*resp),
                            memfd, 1};
  return mroce_ctrl_call(ctx, &call);
}

}  // namespace

int (*mroce_channel_peer_hook)(int channel_fd) = lookup_channel_peer;

struct ibv_cq *mroce_create_cq(struct ibv_context *context, int cqe,
                               struct ibv_comp_channel *channel, int comp_vector) {
  struct mroce_context *ctx = to_mroce_ctx(context);
  if (cqe <= 0 || static_cast<uint32_t>(cqe) > ctx->dev_attr.max_cqe || comp_vector < 0 ||
      comp_vector >= context->num_comp_vectors) {
    errno = EINVAL;
    return nullptr;
  }
  int peer_fd = -1;
  if (channel) {
    // Only channels made by the interposer have an end the NIC can write.
    peer_fd = mroce_channel_peer_hook(channel->fd);
    if (peer_fd < 0) {
      errno = EINVAL;
      return nullptr;
    }
  }
  auto *cq = static_cast<struct mroce_cq *>(calloc(1, sizeof(struct mroce_cq)));
  if (!cq) return nullptr;
  struct mroce_create_cq_resp resp;
  int memfd = -1;
  int err = create_cq_request(ctx, cq, cqe, peer_fd, &memfd, &resp);
  if (!err) {
    err = map_cq(cq, memfd, &resp);
    close(memfd);
    if (err) {
      if (cq->map) munmap(cq->map, cq->map_len);
      mroce_ctrl_handle(ctx, MROCE_OP_DESTROY_CQ, resp.cqn);
    }
  }
  if (err) {
    free(cq);
    errno = err;
    return nullptr;
  }
  cq->cqn = resp.cqn;
  cq->channel_peer = peer_fd;
  pthread_mutex_lock(&ctx->qp_lock);
  cq->next = ctx->cq_list;
  ctx->cq_list = cq;
  pthread_mutex_unlock(&ctx->qp_lock);
  pthread_spin_init(&cq->lock, PTHREAD_PROCESS_PRIVATE);
  cq->vcq.cq.context = context;
  cq->vcq.cq.channel = channel;
  cq->vcq.cq.handle = resp.cqn;
  cq->vcq.cq.cqe = static_cast<int>(resp.entries);
  return &cq->vcq.cq;
}

int mroce_poll_cq(struct ibv_cq *ibcq, int num_entries, struct ibv_wc *wc) {
  struct mroce_cq *cq = to_mroce_cq(ibcq);
  struct mroce_context *ctx = to_mroce_ctx(ibcq->context);
  pthread_spin_lock(&cq->lock);
  uint32_t avail = mroce_ring_load_producer(&cq->ring) - cq->cons;
  int n = 0;
  for (; n < num_entries && static_cast<uint32_t>(n) < avail; n++)
    mroce_cqe_to_wc(static_cast<const struct mroce_cqe *>(mroce_ring_slot(&cq->ring, cq->cons + n)),
              &wc[n]);
  if (n) {
    cq->cons += n;
    mroce_ring_publish_consumer(&cq->ring, cq->cons);
  } else if (num_entries > 0 && mroce_dead(ctx)) {
    // The NIC is gone: flush what it never took, then report the error
    // rather than let a polling loop spin forever.
    n = mroce_flush_cq(ctx, cq, num_entries, wc);
    if (n == 0) n = -EIO;
  }
  pthread_spin_unlock(&cq->lock);
  return n;
}

int mroce_req_notify_cq(struct ibv_cq *ibcq, int solicited_only) {
  struct mroce_cq *cq = to_mroce_cq(ibcq);
  if (mroce_dead(to_mroce_ctx(ibcq->context))) return EIO;
  mroce_ring_arm(&cq->ring, solicited_only ? MROCE_CQ_ARM_SOLICITED : MROCE_CQ_ARM_ANY);
  return 0;
}

void mroce_cq_event(struct ibv_cq *ibcq) {
  __atomic_add_fetch(&to_mroce_cq(ibcq)->events, 1, __ATOMIC_RELAXED);
}

int mroce_destroy_cq(struct ibv_cq *ibcq) {
  struct mroce_cq *cq = to_mroce_cq(ibcq);
  struct mroce_context *ctx = to_mroce_ctx(ibcq->context);
  if (__atomic_load_n(&cq->qp_refs, __ATOMIC_ACQUIRE) > 0) return EBUSY;
  int err = mroce_ctrl_handle(ctx, MROCE_OP_DESTROY_CQ, cq->cqn);
  if (err && !mroce_dead(ctx)) return err;
  pthread_mutex_lock(&ctx->qp_lock);
  for (struct mroce_cq **p = &ctx->cq_list; *p; p = &(*p)->next)
    if (*p == cq) {
      *p = cq->next;
      break;
    }
  pthread_mutex_unlock(&ctx->qp_lock);
  munmap(cq->map, cq->map_len);
  pthread_spin_destroy(&cq->lock);
  free(cq);
  return 0;
}

void mroce_wake_channels(struct mroce_context *ctx) {
  pthread_mutex_lock(&ctx->qp_lock);
  for (struct mroce_cq *cq = ctx->cq_list; cq; cq = cq->next) {
    if (cq->channel_peer < 0) continue;
    uint64_t handle = reinterpret_cast<uintptr_t>(&cq->vcq.cq);
    ssize_t n = write(cq->channel_peer, &handle, sizeof(handle));
    (void)n;  // non-blocking: a full channel already has a wake-up pending
  }
  pthread_mutex_unlock(&ctx->qp_lock);
}
