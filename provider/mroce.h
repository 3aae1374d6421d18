// The MetaRoCE rdma-core provider: objects and internal interfaces.
//
// Each ibv_context is one connection to the soft-NIC daemon's control socket
// (SOCK_SEQPACKET, firmware-model/uapi/metaroce_abi.h). Control verbs are a
// request/reply on that socket; the data path (post_send, post_recv,
// poll_cq) only touches shared-memory rings and makes no system call unless
// the NIC said it is going to sleep.
#pragma once

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "firmware-model/uapi/metaroce_abi.h"
#include "firmware-model/uapi/ring.h"
#include "provider/rdma_private.h"

#define MROCE_DRIVER_NAME "metaroce"
#define MROCE_SOCKET_FILE "metaroce_socket"  // in the published ibdev directory
#define MROCE_CTRL_TIMEOUT_MS 20000
#define MROCE_PEER_SYMBOL "metaroce_comp_channel_peer"

struct mroce_device {
  struct verbs_device ibv_dev;
  char socket_path[108];  // sun_path
};

struct mroce_qp;

struct mroce_context {
  struct verbs_context ibv_ctx;
  int ctrl_fd;            // control socket
  uint32_t seq;           // under ctrl_lock
  pthread_mutex_t ctrl_lock;
  int doorbell_fd;        // eventfd from OPEN_CONTEXT
  int daemon_async_fd;    // async records from the daemon
  int async_wr_fd;        // our pipe; its read end is ibv_ctx.context.async_fd
  int stop_fd;            // eventfd that ends the watcher
  pthread_t watcher;
  bool watcher_started;
  int dead;               // atomic: the daemon went away (DEVICE_FATAL sent)
  uint32_t ctx_id;
  struct mroce_device_attr dev_attr;
  struct mroce_device_attr_ex dev_attr_ex;  // zeros from a daemon without QUERY_DEVICE_EX
  struct mroce_port_attr port_attr;
  pthread_mutex_t qp_lock;  // guards qp_list and cq_list
  struct mroce_qp *qp_list;
  struct mroce_cq *cq_list;
  char last_reason[MROCE_REASON_LEN];
};

struct mroce_pd {
  struct ibv_pd ibv_pd;
  uint32_t pdn;
};

struct mroce_mr {
  struct verbs_mr vmr;
};

struct mroce_ah {
  struct ibv_ah ibv_ah;
  uint32_t ahn;  // the daemon's handle: what a UD send WQE names
};

struct mroce_cq {
  struct verbs_cq vcq;
  uint32_t cqn;
  pthread_spinlock_t lock;
  void *map;
  size_t map_len;
  struct mroce_ring ring;
  uint32_t cons;      // our consumer index (published to ring.hdr->consumer)
  int qp_refs;        // atomic: QPs using this CQ
  uint64_t events;    // completion events seen (cq_event)
  int channel_peer;   // the daemon-side channel fd (the interposer owns it), or -1
  struct mroce_cq *next;  // in the context's cq_list
};

struct mroce_wq {
  pthread_spinlock_t lock;
  struct mroce_ring ring;
  uint32_t prod;      // our producer index
  uint32_t flushed;   // after the device died: slots already flushed
  uint32_t max_sge;
};

struct mroce_qp {
  struct verbs_qp vqp;
  uint32_t qpn;
  void *map;
  size_t map_len;
  struct mroce_wq sq, rq;
  uint32_t max_inline;
  uint32_t sq_sig_all;
  struct mroce_qp_cap cap;
  struct mroce_qp *next;  // in the context's qp_list
};

struct mroce_srq {
  struct verbs_srq vsrq;
  uint32_t srqn;
  void *map;
  size_t map_len;
  struct mroce_wq wq;  // the receive ring; the NIC consumes what messages take
  uint32_t max_wr;
};

static inline struct mroce_device *to_mroce_dev(struct ibv_device *d) {
  return reinterpret_cast<struct mroce_device *>(d);
}
static inline struct mroce_context *to_mroce_ctx(struct ibv_context *c) {
  return reinterpret_cast<struct mroce_context *>(reinterpret_cast<uint8_t *>(c) -
                                                  offsetof(struct mroce_context, ibv_ctx.context));
}
static inline struct mroce_pd *to_mroce_pd(struct ibv_pd *p) {
  return reinterpret_cast<struct mroce_pd *>(p);
}
static inline struct mroce_mr *to_mroce_mr(struct verbs_mr *m) {
  return reinterpret_cast<struct mroce_mr *>(m);
}
static inline struct mroce_ah *to_mroce_ah(struct ibv_ah *a) {
  return reinterpret_cast<struct mroce_ah *>(a);
}
static inline struct mroce_cq *to_mroce_cq(struct ibv_cq *c) {
  return reinterpret_cast<struct mroce_cq *>(c);
}
static inline struct mroce_qp *to_mroce_qp(struct ibv_qp *q) {
  return reinterpret_cast<struct mroce_qp *>(q);
}
static inline struct mroce_srq *to_mroce_srq(struct ibv_srq *s) {
  return reinterpret_cast<struct mroce_srq *>(s);
}

static inline bool mroce_dead(const struct mroce_context *ctx) {
  return __atomic_load_n(&ctx->dead, __ATOMIC_ACQUIRE) != 0;
}

// ---- control channel (ctrl.cc) ----
struct mroce_call {
  uint16_t op;
  const void *req;
  size_t req_len;
  int send_fd;        // -1: none
  void *resp;         // reply body after mroce_reply_status
  size_t resp_len;    // exact size expected
  int *fds;           // received fds (caller closes), or nullptr
  int nfds;           // exact number expected
};
// One request/reply. Returns 0 or a positive errno: the daemon's, EIO once
// the daemon is gone, ETIMEDOUT, EPROTO for a malformed reply.
int mroce_ctrl_call(struct mroce_context *ctx, const struct mroce_call *call);
// Convenience for requests whose body is one handle and whose reply is empty.
int mroce_ctrl_handle(struct mroce_context *ctx, uint16_t op, uint32_t handle);
void mroce_mark_dead(struct mroce_context *ctx);
// After the device died: wake ibv_get_cq_event waiters of every CQ with a
// completion channel, so they poll and see the flush/EIO.
void mroce_wake_channels(struct mroce_context *ctx);

// ---- context (context.cc) ----
extern const struct verbs_device_ops mroce_dev_ops;
extern const struct verbs_match_ent mroce_match_table[];
// Connects to the daemon over an already connected control socket (takes
// ownership of ctrl_fd) and starts the async watcher. Positive errno.
int mroce_context_open(struct mroce_context *ctx, int ctrl_fd);
void mroce_context_close(struct mroce_context *ctx);
int mroce_resolve_socket(const char *ibdev_path, const char *ibdev_name, char *out, size_t len);
int mroce_query_device_ex(struct ibv_context *context,
                          const struct ibv_query_device_ex_input *input,
                          struct ibv_device_attr_ex *attr, size_t attr_size);
int mroce_query_port(struct ibv_context *context, uint8_t port, struct ibv_port_attr *attr);
void mroce_set_ops(struct mroce_context *ctx);

// ---- PD and MR (pd_mr.cc) ----
struct ibv_pd *mroce_alloc_pd(struct ibv_context *context);
// Memory windows (mw.cc; docs/device-abi.md §2.8).
struct ibv_mw *mroce_alloc_mw(struct ibv_pd *pd, enum ibv_mw_type type);
int mroce_dealloc_mw(struct ibv_mw *mw);
int mroce_bind_mw(struct ibv_qp *qp, struct ibv_mw *mw, struct ibv_mw_bind *mw_bind);
// The send-WQE builders every posting path shares (post_send, ibv_bind_mw,
// the extended API's wr_*): each fills one struct mroce_send_wqe.
int mroce_build_send_wqe(struct mroce_qp *qp, const struct ibv_send_wr *wr,
                         struct mroce_send_wqe *w);
// BIND_MW of mw with its new rkey; `via` is IBV_MW_TYPE_1 for ibv_bind_mw,
// IBV_MW_TYPE_2 for IBV_WR_BIND_MW. Leaves wr_id and send_flags to the caller.
int mroce_wqe_bind_mw(struct mroce_send_wqe *w, const struct ibv_mw *mw, uint32_t rkey,
                      const struct ibv_mw_bind_info *info, enum ibv_mw_type via);
void mroce_wqe_local_inv(struct mroce_send_wqe *w, uint32_t rkey);
// Posts one built WQE on the send queue (0, EIO, EINVAL state, ENOMEM full).
int mroce_post_built_wqe(struct mroce_qp *qp, const struct mroce_send_wqe *w);
int mroce_dealloc_pd(struct ibv_pd *pd);
struct ibv_mr *mroce_reg_mr(struct ibv_pd *pd, void *addr, size_t length, uint64_t hca_va,
                            int access);
int mroce_dereg_mr(struct verbs_mr *vmr);

// ---- address handles (ah.cc) ----
struct ibv_ah *mroce_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *attr);
int mroce_destroy_ah(struct ibv_ah *ah);
int mroce_attach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid);
int mroce_detach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid);

// ---- CQ (cq.cc) ----
struct ibv_cq *mroce_create_cq(struct ibv_context *context, int cqe,
                               struct ibv_comp_channel *channel, int comp_vector);
int mroce_poll_cq(struct ibv_cq *cq, int num_entries, struct ibv_wc *wc);
int mroce_req_notify_cq(struct ibv_cq *cq, int solicited_only);
void mroce_cq_event(struct ibv_cq *cq);
int mroce_destroy_cq(struct ibv_cq *cq);
// Test seam: how create_cq finds a completion channel's daemon-side fd.
extern int (*mroce_channel_peer_hook)(int channel_fd);

// ---- QP (qp.cc) ----
struct ibv_qp *mroce_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr);
int mroce_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask);
int mroce_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask,
                   struct ibv_qp_init_attr *init_attr);
int mroce_destroy_qp(struct ibv_qp *qp);
int mroce_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad_wr);
int mroce_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr);
// After publishing a SQ/RQ/SRQ producer: the doorbell, if the NIC sleeps.
void mroce_ring_doorbell(struct mroce_context *ctx, struct mroce_ring *ring);

// ---- SRQ (srq.cc) ----
struct ibv_srq *mroce_create_srq(struct ibv_pd *pd, struct ibv_srq_init_attr *attr);
int mroce_modify_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr, int attr_mask);
int mroce_query_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr);
int mroce_destroy_srq(struct ibv_srq *srq);
int mroce_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr);

// After the device died: up to `max` flush completions for WQEs of QPs on
// `cq` that the NIC never took. Called with the CQ lock held.
int mroce_flush_cq(struct mroce_context *ctx, struct mroce_cq *cq, int max, struct ibv_wc *wc);
