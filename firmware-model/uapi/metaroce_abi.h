/*
 * MetaRoCE device ABI: what host software (the rdma-core provider, tools)
 * and the NIC (the soft-NIC daemon metaroced, or partner silicon) share.
 * Specified in docs/device-abi.md; this header is its machine-readable form.
 *
 * C and C++ compatible, fixed-width fields, explicit padding, little-endian
 * host order (it never crosses a wire). Changing any layout bumps
 * MROCE_ABI_VERSION.
 *
 * Two parts:
 *  1. The control protocol: SOCK_SEQPACKET Unix socket per device,
 *     <run_dir>/<ibdev>.sock (default run_dir /run/metaroce). One request
 *     message, one reply message, matched by seq. File descriptors travel
 *     with SCM_RIGHTS.
 *  2. The data path: shared-memory rings (memfd mapped by both sides).
 *     Send/receive queues are produced by the application and consumed by
 *     the NIC; completion queues the reverse.
 */
#ifndef METAROCE_UAPI_METAROCE_ABI_H
#define METAROCE_UAPI_METAROCE_ABI_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#define MROCE_STATIC_ASSERT(c, m) static_assert(c, m)
#else
#define MROCE_STATIC_ASSERT(c, m) _Static_assert(c, m)
#endif

#define MROCE_ABI_VERSION 1
#define MROCE_DEFAULT_RUN_DIR "/run/metaroce"
#define MROCE_MAX_SGE 16
#define MROCE_MAX_INLINE 256
#define MROCE_REASON_LEN 120

/* ---------------- control protocol ---------------- */

enum mroce_op {
  MROCE_OP_OPEN_CONTEXT = 1, /* reply carries fds: [doorbell eventfd, async event fd] */
  MROCE_OP_QUERY_DEVICE = 2,
  MROCE_OP_QUERY_PORT = 3,    /* request body ignored (one port) */
  MROCE_OP_ALLOC_PD = 4,
  MROCE_OP_DEALLOC_PD = 5,
  MROCE_OP_REG_MR = 6,
  MROCE_OP_DEREG_MR = 7,
  MROCE_OP_CREATE_CQ = 8,     /* request may carry 1 fd: completion channel notify fd;
                                 reply carries 1 fd: CQ ring memfd */
  MROCE_OP_DESTROY_CQ = 9,
  MROCE_OP_CREATE_QP = 10,    /* reply carries 1 fd: SQ+RQ ring memfd */
  MROCE_OP_MODIFY_QP = 11,
  MROCE_OP_QUERY_QP = 12,
  MROCE_OP_DESTROY_QP = 13,
  MROCE_OP_QUERY_COUNTERS = 14, /* device (qpn = 0xffffffff) or one QP */
  MROCE_OP_LIST_QPS = 15,
  MROCE_OP_QUERY_QP_TRANSPORT = 16, /* mroce_handle_req (handle = qpn); no context needed */
  /* ud: address handles and multicast (docs/device-abi.md §2.4) */
  MROCE_OP_CREATE_AH = 20,    /* mroce_create_ah_req -> mroce_create_ah_resp */
  MROCE_OP_DESTROY_AH = 21,   /* mroce_handle_req (handle = ahn) */
  MROCE_OP_ATTACH_MCAST = 22, /* mroce_mcast_req */
  MROCE_OP_DETACH_MCAST = 23, /* mroce_mcast_req */
  MROCE_OP_CREATE_SRQ = 24,   /* reply carries 1 fd: the SRQ's receive ring memfd */
  MROCE_OP_MODIFY_SRQ = 25,
  MROCE_OP_QUERY_SRQ = 26,    /* mroce_handle_req (handle = srqn) */
  MROCE_OP_DESTROY_SRQ = 27,  /* mroce_handle_req (handle = srqn) */
  MROCE_OP_QUERY_DEVICE_EX = 28, /* empty -> mroce_device_attr_ex (SRQ caps, ...) */
  /* mw: memory windows (docs/device-abi.md §2.8); 31 reserved for them */
  MROCE_OP_ALLOC_MW = 29,     /* mroce_alloc_mw_req -> mroce_alloc_mw_resp */
  MROCE_OP_DEALLOC_MW = 30,   /* mroce_handle_req (handle = the window's handle) */
  /* cm: the emulated /dev/infiniband/rdma_cm (docs/connection-manager.md §4, §6).
   * One control connection per emulated file; no context needed. */
  MROCE_OP_UCMA_OPEN = 32, /* request carries 1 fd: the channel's event socket (daemon's end);
                              reply: mroce_ucma_open_resp */
  MROCE_OP_UCMA_CMD = 33,  /* body: struct rdma_ucm_cmd_hdr, the command (hdr.in bytes), then
                              for SET_OPTION the option value (optlen bytes); reply body: the
                              command's response (at most hdr.out bytes) */
  MROCE_OP_UCMA_LAST = 47, /* 34..47: reserved for the ucma family */
};

struct mroce_msg_hdr {
  uint16_t abi_version; /* MROCE_ABI_VERSION */
  uint16_t op;          /* enum mroce_op; replies set the same op */
  uint32_t seq;         /* chosen by the client, echoed in the reply */
  uint32_t length;      /* bytes of the body following this header */
  uint32_t reserved;
};
MROCE_STATIC_ASSERT(sizeof(struct mroce_msg_hdr) == 16, "hdr");

/* Every reply body starts with this; the op's reply body follows it. */
struct mroce_reply_status {
  int32_t err;                    /* 0 or a positive errno */
  uint32_t reserved;
  char reason[MROCE_REASON_LEN];  /* NUL-terminated, human-readable, "" on success */
};
MROCE_STATIC_ASSERT(sizeof(struct mroce_reply_status) == 128, "status");

/* ---- ucma (cm) ---- */
struct mroce_ucma_open_resp {
  uint64_t token; /* names this channel in another channel's MIGRATE_ID */
};
/* One record on a channel's event socket: this header, then the kernel's
 * struct rdma_ucm_event_resp. counted_id is the ID whose events_reported
 * the event counts toward (the listener's for CONNECT_REQUEST). */
struct mroce_ucma_event_hdr {
  uint32_t counted_id;
  uint32_t reserved;
};
MROCE_STATIC_ASSERT(sizeof(struct mroce_ucma_event_hdr) == 8, "ucma event");

struct mroce_open_context_req {
  uint32_t client_abi; /* MROCE_ABI_VERSION */
  uint32_t reserved;
};

struct mroce_device_attr {
  uint64_t max_mr_size;
  uint64_t node_guid;
  uint32_t max_qp, max_qp_wr, max_sge, max_cq, max_cqe, max_mr, max_pd;
  uint32_t max_qp_rd_atom, max_inline, max_msg_size;
  uint32_t vendor_id, vendor_part_id, hw_ver;
  uint32_t max_ah;
  char fw_ver[32];
};
MROCE_STATIC_ASSERT(sizeof(struct mroce_device_attr) == 104, "device_attr");

/* QUERY_DEVICE_EX (28): capabilities beyond mroce_device_attr, so that
 * layout never changes. A daemon without the op answers EOPNOTSUPP: the
 * provider then reports these as 0 (no SRQs). */
struct mroce_device_attr_ex {
  uint32_t max_srq;      /* shared receive queues (docs/device-abi.md §2.7) */
  uint32_t max_srq_wr;
  uint32_t max_srq_sge;
  /* extapi: multicast, and what one context may create (the daemon's
   * per-connection limits, docs/daemon.md §Limits); 0 from an older daemon */
  uint32_t max_mcast_grp;
  uint32_t max_mcast_qp_attach; /* QPs per group */
  uint32_t ctx_max_qp, ctx_max_cq, ctx_max_mr, ctx_max_pd, ctx_max_ah, ctx_max_srq;
  uint32_t reserved[4];
  uint32_t max_mw;       /* mw: memory windows, type 1 and 2 (docs/device-abi.md §2.8); 0 none */
};
MROCE_STATIC_ASSERT(sizeof(struct mroce_device_attr_ex) == 64, "device_attr_ex");

struct mroce_port_attr {
  uint32_t state;        /* enum ibv_port_state: 4 ACTIVE, 1 DOWN */
  uint32_t max_mtu;      /* enum ibv_mtu (1..5) */
  uint32_t active_mtu;   /* enum ibv_mtu, from the interface MTU */
  uint32_t gid_tbl_len;  /* equals the number of gids/I files published */
  uint32_t ifindex;
  uint32_t link_mtu;     /* IP MTU of the interface, bytes */
  uint8_t active_speed, active_width, phys_state, reserved;
  uint32_t reserved2;
};
MROCE_STATIC_ASSERT(sizeof(struct mroce_port_attr) == 32, "port_attr");

struct mroce_open_context_resp {
  uint32_t ctx_id;
  uint32_t doorbell_page_size;  /* not used in v1 (doorbells live in rings) */
  struct mroce_device_attr device;
  struct mroce_port_attr port;
};

struct mroce_handle_req { /* DEALLOC_PD, DEREG_MR (lkey), DESTROY_CQ, DESTROY_QP, QUERY_QP */
  uint32_t handle;
  uint32_t reserved;
};

struct mroce_alloc_pd_resp {
  uint32_t pdn;
  uint32_t reserved;
};

/* ALLOC_MW: a memory window in a PD, unbound. rkey is its initial rkey
 * (key part, the low 8 bits, 0); binds change the key part. */
struct mroce_alloc_mw_req {
  uint32_t pdn;
  uint32_t type; /* enum ibv_mw_type: 1 or 2 */
};
struct mroce_alloc_mw_resp {
  uint32_t handle;
  uint32_t rkey;
};

struct mroce_reg_mr_req {
  uint64_t addr;
  uint64_t length;
  uint32_t pdn;
  uint32_t access; /* ibv_access_flags */
};
struct mroce_reg_mr_resp {
  uint32_t lkey;
  uint32_t rkey;
};

struct mroce_create_cq_req {
  uint64_t user_handle; /* struct ibv_cq *: written to the channel fd on events */
  uint32_t cqe;         /* requested entries */
  uint32_t has_channel; /* 1 if an fd accompanies the request */
};
struct mroce_create_cq_resp {
  uint32_t cqn;
  uint32_t entries;     /* ring entries (power of two >= requested) */
  uint64_t ring_bytes;  /* size of the memfd to map */
};

struct mroce_qp_cap {
  uint32_t max_send_wr, max_recv_wr, max_send_sge, max_recv_sge, max_inline_data;
};

struct mroce_create_qp_req {
  uint64_t user_handle; /* struct ibv_qp *: element of async events */
  uint32_t pdn, send_cqn, recv_cqn;
  uint32_t sq_sig_all;
  struct mroce_qp_cap cap;
  uint32_t qp_type;     /* IBV_QPT_RC (2), IBV_QPT_UC (3) or IBV_QPT_UD (4) */
  uint32_t srqn;        /* 0, or the SRQ its receives come from (cap.max_recv_* ignored) */
};
struct mroce_create_qp_resp {
  uint32_t qpn;
  uint32_t reserved;
  struct mroce_qp_cap cap;       /* actual */
  uint32_t sq_entries, rq_entries; /* ring entries, powers of two */
  uint64_t ring_bytes;           /* memfd size: SQ ring then RQ ring */
  uint64_t rq_offset;            /* byte offset of the RQ ring header */
};

/* Shared receive queues (docs/device-abi.md §2.7). The SRQ's ring holds
 * struct mroce_recv_wqe entries produced by ibv_post_srq_recv; the NIC
 * publishes as its consumer index the number of WQEs *taken by messages*
 * (not merely read), so the application's `producer - consumer <
 * entries` check is exactly the SRQ's max_wr bound. */
struct mroce_srq_attr {
  uint32_t max_wr, max_sge, srq_limit;
  uint32_t reserved;
};
struct mroce_create_srq_req {
  uint64_t user_handle; /* struct ibv_srq *: element of SRQ async events */
  uint32_t pdn;
  uint32_t reserved;
  struct mroce_srq_attr attr;
};
struct mroce_create_srq_resp {
  uint32_t srqn;
  uint32_t entries;     /* ring entries: the actual max_wr, a power of two */
  uint64_t ring_bytes;  /* memfd size: the ring header at offset 0 */
  struct mroce_srq_attr attr; /* actual */
};
struct mroce_modify_srq_req {
  uint32_t srqn;
  uint32_t attr_mask;   /* ibv_srq_attr_mask: IBV_SRQ_LIMIT only (resizing is refused) */
  struct mroce_srq_attr attr;
};
/* QUERY_SRQ replies with struct mroce_srq_attr. */

/* ibv_qp_attr subset, with GIDs as 16 raw bytes. */
struct mroce_qp_attr {
  uint32_t attr_mask;        /* ibv_qp_attr_mask */
  uint32_t qp_state, cur_qp_state;
  uint32_t path_mtu;         /* enum ibv_mtu (1..5) */
  uint32_t qp_access_flags;
  uint32_t rq_psn, sq_psn, dest_qp_num;
  uint8_t dgid[16];
  uint32_t flow_label;
  uint8_t sgid_index, hop_limit, traffic_class, is_global;
  uint8_t timeout, retry_cnt, rnr_retry, min_rnr_timer;
  uint8_t max_rd_atomic, max_dest_rd_atomic, port_num, sq_draining;
  uint16_t pkey_index;
  uint16_t reserved;
  struct mroce_qp_cap cap;
  uint32_t qkey;             /* UD: IBV_QP_QKEY */
};
MROCE_STATIC_ASSERT(sizeof(struct mroce_qp_attr) == 92, "qp_attr");

/* CREATE_AH: a UD destination (ibv_ah_attr with its GRH: on Ethernet every
 * address handle is global). The daemon checks the PD and the GID index and
 * starts resolving the next hop through the kernel's neighbour table. */
struct mroce_ah_attr {
  uint8_t dgid[16];
  uint32_t flow_label;
  uint8_t sgid_index, hop_limit, traffic_class, is_global;
};
MROCE_STATIC_ASSERT(sizeof(struct mroce_ah_attr) == 24, "ah_attr");
struct mroce_create_ah_req {
  uint32_t pdn;
  uint32_t reserved;
  struct mroce_ah_attr ah;
};
struct mroce_create_ah_resp {
  uint32_t ahn;
  uint32_t reserved;
};

/* ATTACH_MCAST / DETACH_MCAST: a UD QP joins or leaves a multicast group
 * (the GID is an IPv4-mapped or IPv6 multicast address). */
struct mroce_mcast_req {
  uint32_t qpn;
  uint16_t lid;  /* ignored on Ethernet */
  uint16_t reserved;
  uint8_t gid[16];
};

struct mroce_modify_qp_req {
  uint32_t qpn;
  uint32_t reserved;
  struct mroce_qp_attr attr;
};

struct mroce_query_qp_resp {
  struct mroce_qp_attr attr;
  uint32_t sq_sig_all;
  uint32_t reserved;
};

/* Named counters: QUERY_COUNTERS replies with n entries. */
struct mroce_counter {
  char name[40];
  uint64_t value;
};
struct mroce_query_counters_req {
  uint32_t qpn; /* 0xffffffff: device counters */
  uint32_t reserved;
};
struct mroce_query_counters_resp {
  uint32_t n;
  uint32_t reserved;
  /* struct mroce_counter counters[n] follows */
};

/* QUERY_QP_TRANSPORT: a QP's transport state for operators (read only;
 * docs/operations.md §QP transport). */
#define MROCE_MAX_PATHS 64
struct mroce_qp_transport_resp {
  uint64_t srtt_ns, min_rtt_ns, rttvar_ns, rto_ns; /* 0 before the first RTT sample */
  uint64_t cwnd_bytes;
  uint64_t pacing_rate_bps;   /* what window and pacing allow; 0 unknown */
  uint64_t bytes_in_flight;
  uint32_t pkts_in_flight;
  uint32_t lost;              /* packets marked lost, not yet repaired */
  uint32_t num_paths;         /* entries of path_weight_ppm in use */
  uint8_t qp_state;           /* enum ibv_qp_state: 0 RESET .. 6 ERR */
  uint8_t error_status;       /* enum ibv_wc_status of the QP's first error completion since
                                 RESET (flushes aside): why it is in ERR; 0 none */
  uint16_t reserved;
  char cc[16];                /* congestion control's name, NUL-terminated */
  uint32_t path_weight_ppm[MROCE_MAX_PATHS]; /* each path's weight * 1e6, in (0, 1e6] */
};
MROCE_STATIC_ASSERT(sizeof(struct mroce_qp_transport_resp) == 344, "qp_transport_resp");

/* ---------------- shared-memory rings ----------------
 *
 * A ring is a header followed by `entries` slots of `entry_size` bytes,
 * entries a power of two. Indices are free-running uint32 counters; slot =
 * index & (entries - 1). The producer owns `producer`, the consumer owns
 * `consumer`; each side only reads the other's.
 *
 * Memory ordering (as libxdp's xsk rings): the producer writes the slot,
 * then store-RELEASEs producer. The consumer load-ACQUIREs producer, reads
 * slots, then store-RELEASEs consumer; the producer load-ACQUIREs consumer
 * before reusing a slot.
 *
 * Doorbells: after publishing producer on a SQ/RQ ring, the application
 * loads (seq_cst) `nic_sleeping`; if non-zero it writes 1 to the context's
 * doorbell eventfd. The NIC sets nic_sleeping (seq_cst) before its final
 * scan and sleep, so a doorbell is never lost and costs no system call
 * while the NIC is polling.
 *
 * Completion notification: the application writes `armed` (seq_cst) to
 * MROCE_CQ_ARM_ANY or MROCE_CQ_ARM_SOLICITED; the NIC, after publishing a
 * CQE that satisfies it, exchanges armed to 0 and writes the 8-byte
 * user_handle record to the CQ's channel fd. v1 NICs treat SOLICITED as ANY
 * (an event for a non-solicited completion; the consumer polls and finds it).
 */
struct mroce_ring_hdr {
  uint32_t producer;   /* written by the producer only */
  uint32_t pad0[15];
  uint32_t consumer;   /* written by the consumer only */
  uint32_t pad1[15];
  uint32_t entries;    /* set by the NIC at creation, read-only after */
  uint32_t entry_size;
  uint32_t nic_sleeping; /* SQ/RQ: NIC is about to sleep (see doorbells) */
  uint32_t armed;        /* CQ: enum mroce_cq_arm */
  uint32_t overflow;     /* CQ: set by the NIC when a CQE could not be written */
  uint32_t pad2[11];
};
MROCE_STATIC_ASSERT(sizeof(struct mroce_ring_hdr) == 192, "ring hdr");

enum mroce_cq_arm { MROCE_CQ_ARM_NONE = 0, MROCE_CQ_ARM_ANY = 1, MROCE_CQ_ARM_SOLICITED = 2 };

struct mroce_sge {
  uint64_t addr;
  uint32_t length;
  uint32_t lkey;
};

/* Send queue entry (posted by ibv_post_send). */
struct mroce_send_wqe {
  uint64_t wr_id;
  uint8_t opcode;       /* enum ibv_wr_opcode */
  uint8_t num_sge;
  uint16_t inline_len;  /* with IBV_SEND_INLINE: bytes in inline_data */
  uint32_t send_flags;  /* ibv_send_flags */
  uint32_t imm;         /* host order */
  uint32_t rkey;
  uint64_t remote_addr;
  uint64_t compare_add;
  uint64_t swap;
  union {
    uint64_t reserved[2];
    struct {             /* UD sends (IBV_QPT_UD) */
      uint32_t ah;       /* MROCE_OP_CREATE_AH's ahn */
      uint32_t remote_qpn;
      uint32_t remote_qkey; /* high bit set: the QP's own Q_Key */
      uint32_t spare;
    } ud;
    struct {             /* IBV_WR_BIND_MW (8): remote_addr = start, compare_add = length,
                            rkey = the window's new rkey (docs/device-abi.md §3.1) */
      uint32_t mw;       /* MROCE_OP_ALLOC_MW's handle */
      uint32_t mr_lkey;  /* the MR bound to */
      uint32_t access;   /* IBV_ACCESS_REMOTE_{READ,WRITE,ATOMIC} */
      uint32_t type;     /* 1: posted by ibv_bind_mw; 2: by IBV_WR_BIND_MW */
    } bind;
  };
  /* IBV_WR_LOCAL_INV (7), IBV_WR_SEND_WITH_INV (9): imm = invalidate_rkey. */
  union {
    struct mroce_sge sg[MROCE_MAX_SGE];
    uint8_t inline_data[MROCE_MAX_INLINE];
  } u;
};
MROCE_STATIC_ASSERT(sizeof(struct mroce_send_wqe) == 320, "send wqe");

/* Receive queue entry (posted by ibv_post_recv). */
struct mroce_recv_wqe {
  uint64_t wr_id;
  uint32_t num_sge;
  uint32_t reserved;
  struct mroce_sge sg[MROCE_MAX_SGE];
};
MROCE_STATIC_ASSERT(sizeof(struct mroce_recv_wqe) == 272, "recv wqe");

/* Completion queue entry: the fields of struct ibv_wc the NIC fills. */
struct mroce_cqe {
  uint64_t wr_id;
  uint32_t status;     /* enum ibv_wc_status */
  uint32_t opcode;     /* enum ibv_wc_opcode */
  uint32_t vendor_err;
  uint32_t byte_len;
  uint32_t imm;        /* host order; the provider converts to network order. With
                          IBV_WC_WITH_INV: the invalidated rkey (host order, as is) */
  uint32_t qp_num;
  uint32_t src_qp;
  uint32_t wc_flags;   /* ibv_wc_flags */
  union {
    uint32_t reserved[6];
    struct {             /* UD receives: reserved[0..1] */
      uint16_t slid;
      uint8_t sl;
      uint8_t dlid_path_bits;
      uint16_t pkey_index;
      uint16_t spare;
    } ud;
  };
};
MROCE_STATIC_ASSERT(sizeof(struct mroce_cqe) == 64, "cqe");

/* Async event record written to the context's async fd (the layout of the
 * kernel's struct ib_uverbs_async_event_desc, which libibverbs reads). */
struct mroce_async_event {
  uint64_t element;    /* user_handle of the QP/CQ, or port number */
  uint32_t event_type; /* enum ibv_event_type */
  uint32_t reserved;
};
MROCE_STATIC_ASSERT(sizeof(struct mroce_async_event) == 16, "async event");

#ifdef __cplusplus
}
#endif
#endif /* METAROCE_UAPI_METAROCE_ABI_H */
