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
  struct verbs_cq vcq;  // vcq.cq_ex: start_poll/next_poll/read_* when made by create_cq_ex
  uint32_t cqn;
  pthread_spinlock_t lock;
  void *map;
  size_t map_len;
  struct mroce_ring ring;
  uint32_t cons;      // our consumer index (published to ring.hdr->consumer)
  int qp_refs;        // atomic: QPs using this CQ
  uint64_t events;    // completion events seen (cq_event)
  int channel_peer;   // the daemon-side channel fd (the interposer owns it), or -1
  uint64_t wc_flags;  // create_cq_ex's IBV_WC_EX_WITH_* (0 for create_cq)
  struct ibv_wc cur;  // cq_ex: the completion start_poll/next_poll made current
  struct mroce_cq *next;  // in the context's cq_list
};

struct mroce_wq {
  pthread_spinlock_t lock;
  struct mroce_ring ring;
  uint32_t prod;      // our producer index
  uint32_t flushed;   // after the device died: slots already flushed
  uint32_t max_sge;
};

// An ibv_wr_start .. ibv_wr_complete batch (qp_ex.cc), under the SQ lock.
struct mroce_wr_batch {
  bool open;               // between wr_start and wr_complete/wr_abort
  int err;                 // the first error: wr_complete returns it, nothing is posted
  uint32_t count;          // WQEs built at sq.prod, sq.prod + 1, ...
  struct mroce_send_wqe *cur;  // the WQE the wr_set_* calls fill, or nullptr
  bool cur_has_addr;       // UD: wr_set_ud_addr was called for cur
  char why[MROCE_REASON_LEN];  // the first error's reason
};

struct mroce_qp {
  struct verbs_qp vqp;     // vqp.qp_ex: the ibv_wr_* ops when created with send_ops_flags
  uint32_t qpn;
  void *map;
  size_t map_len;
  struct mroce_wq sq, rq;
  uint32_t max_inline;
  uint32_t sq_sig_all;
  struct mroce_qp_cap cap;
  uint64_t send_ops_flags;  // ibv_qp_ex: the IBV_QP_EX_WITH_* ops allowed
  struct mroce_wr_batch wr;
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
// Memory-window fills of the send WQE builder below (post_send,
// ibv_bind_mw and the ibv_wr_* ops share them).
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
bool mroce_sq_open(const struct ibv_qp *qp);  // RTS, SQD or SQE: sends may be posted

// The send WQE builder: ibv_post_send and the ibv_wr_* ops fill a SQ slot
// only through these (one mechanism; a new opcode is a new fill function).
// Each returns 0 or EINVAL (not on this QP type, too many SGEs, over
// max_inline, inline data on a READ or atomic, no AH).
int mroce_wqe_check_opcode(const struct mroce_qp *qp, uint8_t opcode);
void mroce_wqe_init(struct mroce_send_wqe *w, uint64_t wr_id, uint8_t opcode,
                    uint32_t send_flags);
void mroce_wqe_set_imm(struct mroce_send_wqe *w, __be32 imm);
void mroce_wqe_set_invalidate(struct mroce_send_wqe *w, uint32_t rkey);  // SEND_WITH_INV
void mroce_wqe_set_rdma(struct mroce_send_wqe *w, uint32_t rkey, uint64_t remote_addr);
void mroce_wqe_set_atomic(struct mroce_send_wqe *w, uint32_t rkey, uint64_t remote_addr,
                          uint64_t compare_add, uint64_t swap);
int mroce_wqe_set_ud(struct mroce_send_wqe *w, struct ibv_ah *ah, uint32_t remote_qpn,
                     uint32_t remote_qkey);
int mroce_wqe_set_sge_list(const struct mroce_qp *qp, struct mroce_send_wqe *w, size_t n,
                           const struct ibv_sge *sg);
int mroce_wqe_add_inline(const struct mroce_qp *qp, struct mroce_send_wqe *w, const void *data,
                         size_t len);

// ---- extended QP (qp_ex.cc) ----
struct ibv_qp *mroce_create_qp_ex(struct ibv_context *context, struct ibv_qp_init_attr_ex *attr);

// ---- extended CQ (cq_ex.cc) ----
struct ibv_cq_ex *mroce_create_cq_ex(struct ibv_context *context,
                                     struct ibv_cq_init_attr_ex *attr);
// Converts one CQE (the one conversion poll_cq and the cq_ex accessors use).
void mroce_cqe_to_wc(const struct mroce_cqe *e, struct ibv_wc *wc);

// A refusal the provider makes itself: the reason goes where the daemon's
// go (ctx->last_reason, printed with METAROCE_DEBUG=1). Returns err.
int mroce_refuse(struct mroce_context *ctx, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

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
