/*
 * MetaRoCE offload silicon: the host <-> device interface a NIC vendor
 * implements (docs/hardware-offload.md is the normative text; this header
 * is its machine-readable form). C and C++ compatible, little-endian.
 *
 * Three parts:
 *  1. BAR0 register map: device control/status, version handshake, admin
 *     queue and event queue registers, and one 4 KiB doorbell page per QP
 *     and per CQ (so a page can be mapped into the process that owns it).
 *  2. Admin command queue: 64-byte commands in host memory, 16-byte
 *     completions with a phase bit; op inputs/outputs in mailboxes whose
 *     layouts are the device ABI's (firmware-model/uapi/metaroce_abi.h).
 *  3. Event queue: 16-byte entries with a phase bit; async events and
 *     completion notifications for armed CQs.
 * Work and completion rings are NOT redefined here: silicon DMAs exactly
 * the mroce_ring_hdr / mroce_send_wqe / mroce_recv_wqe / mroce_cqe of
 * metaroce_abi.h (docs/device-abi.md §Rings).
 */
#ifndef METAROCE_HW_HW_ABI_H
#define METAROCE_HW_HW_ABI_H

#include <stdint.h>

#include "firmware-model/uapi/metaroce_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

/* PCI identity. Placeholders (the device ABI's vendor_id) until a partner's
 * IDs are assigned; probe() matches on them. */
#define MROCE_HW_PCI_VENDOR 0x4d52
#define MROCE_HW_PCI_DEVICE 0x0001

/* Version handshake: the firmware's interface major must equal the
 * driver's; minors are backward compatible. */
#define MROCE_HW_IF_MAJOR 1
#define MROCE_HW_IF_MINOR 1 /* 1.1: QUERY_QP_TRANSPORT, completion syndromes */

/* ---------------- BAR0 register map (byte offsets) ---------------- */
enum mroce_hw_reg {
  MROCE_REG_DEV_ID = 0x0000,       /* RO: vendor [15:0], device [31:16]; all-ones: no device */
  MROCE_REG_FW_VERSION = 0x0004,   /* RO: interface major [31:16], minor [15:0] */
  MROCE_REG_DRV_VERSION = 0x0008,  /* WO: the driver's major [31:16], minor [15:0] */
  MROCE_REG_DEV_CTRL = 0x0010,     /* RW: enum mroce_hw_dev_ctrl */
  MROCE_REG_DEV_STATUS = 0x0014,   /* RO: enum mroce_hw_dev_status */
  MROCE_REG_FATAL_CODE = 0x0018,   /* RO: vendor code, valid while STATUS.FATAL */
  MROCE_REG_AQ_BASE = 0x0100,      /* RW 64: IOVA of the admin submission ring (4 KiB aligned) */
  MROCE_REG_AQ_DEPTH = 0x0108,     /* RW: entries, a power of two */
  MROCE_REG_AQ_TAIL = 0x010c,      /* WO doorbell: driver's producer index (free-running) */
  MROCE_REG_ACQ_BASE = 0x0110,     /* RW 64: IOVA of the admin completion ring */
  MROCE_REG_ACQ_DEPTH = 0x0118,    /* RW: entries, a power of two, >= AQ_DEPTH */
  MROCE_REG_ACQ_HEAD = 0x011c,     /* WO doorbell: driver's consumer index */
  MROCE_REG_EQ_BASE = 0x0200,      /* RW 64: IOVA of the event ring */
  MROCE_REG_EQ_DEPTH = 0x0208,     /* RW: entries, a power of two */
  MROCE_REG_EQ_HEAD = 0x020c,      /* WO doorbell: consumer index [30:0], ARM bit 31 */
  MROCE_REG_INTR_MASK = 0x0210,    /* RW: bit 0 masks the event-queue interrupt (MSI-X 0) */
  MROCE_REG_QP_DB_BASE = 0x00010000, /* doorbell page of QP n: + n * MROCE_HW_DB_STRIDE */
  MROCE_REG_CQ_DB_BASE = 0x01010000, /* doorbell page of CQ n: + n * MROCE_HW_DB_STRIDE */
};
#define MROCE_HW_DB_STRIDE 0x1000
#define MROCE_HW_BAR0_SIZE 0x02010000 /* covers 4096 QP and 4096 CQ doorbell pages */
/* The doorbell page of QP n is page (n & MROCE_HW_DB_INDEX_MASK): a QPN's low
 * 12 bits are its slot in the device's QP table (the bits above are a
 * generation), unique among live QPs. CQ numbers are below 4096 (QUERY_CAPS
 * reports max_cq <= 4095) and index their page directly. */
#define MROCE_HW_DB_INDEX_MASK 0xfffu
#define MROCE_HW_DB_PAGES 4096u

/* Inside a QP doorbell page. Each write is the new free-running producer
 * index of that ring, written after the WQEs and the ring header's
 * producer are in memory. */
#define MROCE_DB_SQ_PI 0x0
#define MROCE_DB_RQ_PI 0x4
/* Inside a CQ doorbell page. */
#define MROCE_DB_CQ_CI 0x0  /* consumer index: CQEs before it may be overwritten */
#define MROCE_DB_CQ_ARM 0x4 /* enum mroce_cq_arm: one EQ notification for the next CQE */

enum mroce_hw_dev_ctrl {
  MROCE_CTRL_RESET = 1u << 0,       /* self-clearing: reset everything, then STATUS.READY */
  MROCE_CTRL_ENABLE = 1u << 1,      /* start the admin queue (AQ/ACQ registers set) */
  MROCE_CTRL_EQ_ENABLE = 1u << 2,   /* start the event queue (EQ registers set) */
};
enum mroce_hw_dev_status {
  MROCE_STATUS_READY = 1u << 0,     /* reset done; registers may be programmed */
  MROCE_STATUS_ENABLED = 1u << 1,   /* admin queue running */
  MROCE_STATUS_FATAL = 1u << 31,    /* firmware stopped; FATAL_CODE says why; reset to recover */
};

/* ---------------- admin command queue ---------------- */
enum mroce_hw_admin_op {
  MROCE_ADMIN_QUERY_CAPS = 1,     /* out: struct mroce_device_attr */
  MROCE_ADMIN_SET_PORT = 2,       /* in: struct mroce_hw_port */
  MROCE_ADMIN_CREATE_PD = 3,      /* result: pdn */
  MROCE_ADMIN_DESTROY_PD = 4,     /* handle: pdn */
  MROCE_ADMIN_REG_MR = 5,         /* in: struct mroce_reg_mr_req; result: lkey, result2: rkey */
  MROCE_ADMIN_DEREG_MR = 6,       /* handle: lkey */
  MROCE_ADMIN_CREATE_CQ = 7,      /* in: struct mroce_hw_create_cq; result: cqn */
  MROCE_ADMIN_DESTROY_CQ = 8,     /* handle: cqn */
  MROCE_ADMIN_CREATE_QP = 9,      /* in: struct mroce_hw_create_qp; out: struct mroce_qp_cap; result: qpn */
  MROCE_ADMIN_MODIFY_QP = 10,     /* handle: qpn; in: struct mroce_qp_attr */
  MROCE_ADMIN_QUERY_QP = 11,      /* handle: qpn; out: struct mroce_query_qp_resp */
  MROCE_ADMIN_DESTROY_QP = 12,    /* handle: qpn */
  MROCE_ADMIN_DESTROY_OWNER = 13, /* everything `owner` created */
  MROCE_ADMIN_QUERY_COUNTERS = 14,/* handle: qpn or 0xffffffff; out: mroce_query_counters_resp + counters */
  MROCE_ADMIN_QUERY_QP_TRANSPORT = 15, /* handle: qpn; out: struct mroce_qp_transport_resp (1.1) */
};

/* Why the device failed a command (mroce_hw_admin_cpl.syndrome), beside the
 * errno in `status`: the driver turns it into the reason it reports. */
#define MROCE_HW_SYNDROMES(X)                                                        \
  X(NONE, "")                                                                       \
  X(BAD_OPCODE, "unknown admin opcode")                                             \
  X(NO_INPUT, "input mailbox missing or shorter than the command's input")           \
  X(NO_OUTPUT, "output mailbox missing or shorter than the command's output")        \
  X(MAILBOX_UNMAPPED, "a mailbox IOVA is not mapped for device DMA")                 \
  X(PASID_UNBOUND, "the owner PASID is not bound to an address space")               \
  X(ENGINE, "the transport refused the request")                                    \
  X(RING_GEOMETRY, "ring entries are not a power of two within the device's limit")  \
  X(RING_UNMAPPED, "a ring IOVA is not mapped for device DMA")                       \
  X(NO_DOORBELL, "the object number has no doorbell page")                          \
  X(BAD_PORT, "more GIDs than the port table holds")                                \
  X(NO_SUCH_OBJECT, "no such object")
enum mroce_hw_syndrome {
#define MROCE_HW_SYNDROME_ENUM(name, text) MROCE_SYN_##name,
  MROCE_HW_SYNDROMES(MROCE_HW_SYNDROME_ENUM)
#undef MROCE_HW_SYNDROME_ENUM
};

/* Why the device stopped (FATAL_CODE while DEV_STATUS.FATAL). */
enum mroce_hw_fatal_code {
  MROCE_FATAL_NONE = 0,
  MROCE_FATAL_AQ_UNMAPPED = 1,  /* AQ/ACQ base + depth not mapped for DMA, or depth not 2^n */
  MROCE_FATAL_AQ_TAIL = 2,      /* AQ_TAIL more than AQ_DEPTH ahead of the device */
  MROCE_FATAL_EQ_UNMAPPED = 3,  /* EQ base + depth not mapped for DMA, or depth not 2^n */
};

/* Flags of a command. */
#define MROCE_ADMIN_F_IN 1u  /* in_iova/in_len valid */
#define MROCE_ADMIN_F_OUT 2u /* out_iova/out_len valid */

struct mroce_hw_admin_cmd {
  uint16_t opcode;     /* enum mroce_hw_admin_op */
  uint16_t flags;      /* MROCE_ADMIN_F_* */
  uint32_t cmd_id;     /* chosen by the driver, echoed in the completion */
  uint32_t owner;      /* the host process: PCIe PASID its MRs are addressed in */
  uint32_t handle;     /* the object the command targets (pdn, lkey, cqn, qpn) */
  uint64_t in_iova;    /* input mailbox */
  uint32_t in_len;
  uint32_t out_len;
  uint64_t out_iova;   /* output mailbox, written before the completion */
  uint32_t reserved[6];
};
MROCE_STATIC_ASSERT(sizeof(struct mroce_hw_admin_cmd) == 64, "admin cmd");

struct mroce_hw_admin_cpl {
  uint32_t cmd_id;
  uint16_t status;     /* 0, or a Linux errno value (EINVAL, ENOMEM, EBUSY, ENOENT, ...) */
  uint8_t phase;       /* 1 on the first pass over the ring, 0 on the second, ... */
  uint8_t syndrome;    /* enum mroce_hw_syndrome: why status is not 0 */
  uint32_t result;     /* the created handle */
  uint32_t result2;    /* REG_MR: rkey */
};
MROCE_STATIC_ASSERT(sizeof(struct mroce_hw_admin_cpl) == 16, "admin cpl");

struct mroce_hw_port {
  uint32_t link_mtu;   /* IP MTU, bytes */
  uint32_t active;
  uint32_t num_gids;   /* <= 16 */
  uint32_t reserved;
  uint8_t gids[16][16];/* GID i: IPv6 or IPv4-mapped address */
};

struct mroce_hw_create_cq {
  uint64_t ring_iova;  /* mroce_ring_hdr + entries * mroce_cqe */
  uint32_t entries;    /* power of two */
  uint32_t reserved;
};

struct mroce_hw_create_qp {
  uint32_t pdn, send_cqn, recv_cqn, sq_sig_all;
  struct mroce_qp_cap cap;
  uint32_t sq_entries, rq_entries; /* powers of two */
  uint32_t reserved;
  uint64_t sq_ring_iova;           /* mroce_ring_hdr + sq_entries * mroce_send_wqe */
  uint64_t rq_ring_iova;           /* mroce_ring_hdr + rq_entries * mroce_recv_wqe */
};

/* Send WQE opcode the driver writes for a work request the host refused
 * (docs/hardware-offload.md §5): the device executes nothing, completes it
 * in posting order with status `imm` (an ibv_wc_status) and moves the QP to
 * ERR, flushing the WQEs after it. */
#define MROCE_HW_WQE_OP_ERROR 0xff

/* ---------------- event queue ---------------- */
#define MROCE_EQE_COMPLETION 0x100 /* element: cqn of an armed CQ that got a CQE */

struct mroce_hw_eqe {
  uint32_t type;       /* enum ibv_event_type, or MROCE_EQE_COMPLETION */
  uint32_t element;    /* qpn, cqn, or port number */
  uint8_t phase;       /* as in mroce_hw_admin_cpl */
  uint8_t reserved[7];
};
MROCE_STATIC_ASSERT(sizeof(struct mroce_hw_eqe) == 16, "eqe");

#ifdef __cplusplus
}
#endif
#endif /* METAROCE_HW_HW_ABI_H */
