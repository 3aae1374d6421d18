// Verbs-level object model of a MetaRoCE NIC, as the firmware sees it.
//
// The engine does not include <infiniband/verbs.h>: it is NIC firmware, not
// host software. Enumerations that cross to the host keep the numeric values
// of the verbs ABI (ibv_wc_status, ibv_wc_opcode, ibv_wr_opcode, ibv_qp_state,
// ibv_access_flags, ibv_qp_attr_mask, ibv_event_type) so that the provider
// passes them through unchanged; provider/ static_asserts each one.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "proto/packet.h"

namespace metaroce::fw {

using Time = uint64_t;  // nanoseconds; virtual in tests, CLOCK_MONOTONIC in the daemon
inline constexpr Time kNever = ~Time{0};

// Identity of the host process (address space) that owns objects and whose
// memory MRs describe. The daemon uses one per client connection.
using OwnerId = uint32_t;

inline constexpr uint32_t kMaxSge = 16;
inline constexpr uint32_t kMaxInline = 256;

enum class QpType : uint8_t { kRc = 2, kUc = 3, kUd = 4 };  // ibv_qp_type

enum class QpState : uint8_t { kReset = 0, kInit = 1, kRtr = 2, kRts = 3, kSqd = 4, kSqe = 5, kErr = 6 };

enum AccessFlag : uint32_t {  // ibv_access_flags
  kAccessLocalWrite = 1,
  kAccessRemoteWrite = 2,
  kAccessRemoteRead = 4,
  kAccessRemoteAtomic = 8,
  kAccessMwBind = 16,    // memory windows may be bound to the MR (docs/engine.md §Memory windows)
  kAccessZeroBased = 32, // not supported: refused
};

enum QpAttrMask : uint32_t {  // ibv_qp_attr_mask
  kAttrState = 1 << 0,
  kAttrCurState = 1 << 1,
  kAttrAccessFlags = 1 << 3,
  kAttrPkeyIndex = 1 << 4,
  kAttrPort = 1 << 5,
  kAttrQkey = 1 << 6,
  kAttrAv = 1 << 7,
  kAttrPathMtu = 1 << 8,
  kAttrTimeout = 1 << 9,
  kAttrRetryCnt = 1 << 10,
  kAttrRnrRetry = 1 << 11,
  kAttrRqPsn = 1 << 12,
  kAttrMaxQpRdAtomic = 1 << 13,
  kAttrMinRnrTimer = 1 << 15,
  kAttrSqPsn = 1 << 16,
  kAttrMaxDestRdAtomic = 1 << 17,
  kAttrCap = 1 << 19,
  kAttrDestQpn = 1 << 20,
};

enum class WrOpcode : uint8_t {  // ibv_wr_opcode
  kRdmaWrite = 0,
  kRdmaWriteImm = 1,
  kSend = 2,
  kSendImm = 3,
  kRdmaRead = 4,
  kAtomicCmpSwap = 5,
  kAtomicFetchAdd = 6,
  kLocalInv = 7,    // invalidate a type 2 window (SendWr::invalidate_rkey)
  kBindMw = 8,      // bind a memory window (SendWr::bind)
  kSendWithInv = 9, // SEND that invalidates the peer's window invalidate_rkey
};

enum SendFlag : uint32_t {  // ibv_send_flags
  kSendFence = 1,
  kSendSignaled = 2,
  kSendSolicited = 4,
  kSendInline = 8,
};

enum class WcStatus : uint8_t {  // ibv_wc_status
  kSuccess = 0,
  kLocLenErr = 1,
  kLocQpOpErr = 2,
  kLocEecOpErr = 3,
  kLocProtErr = 4,
  kWrFlushErr = 5,
  kMwBindErr = 6,
  kBadRespErr = 7,
  kLocAccessErr = 8,
  kRemInvReqErr = 9,
  kRemAccessErr = 10,
  kRemOpErr = 11,
  kRetryExcErr = 12,
  kRnrRetryExcErr = 13,
  kGeneralErr = 21,
};

enum class WcOpcode : uint8_t {  // ibv_wc_opcode
  kSend = 0,
  kRdmaWrite = 1,
  kRdmaRead = 2,
  kCompSwap = 3,
  kFetchAdd = 4,
  kBindMw = 5,
  kLocalInv = 6,
  kRecv = 128,
  kRecvRdmaWithImm = 129,
};

enum WcFlag : uint32_t { kWcGrh = 1, kWcWithImm = 2, kWcWithInv = 8 };  // ibv_wc_flags

enum class EventType : uint8_t {  // ibv_event_type
  kCqErr = 0,
  kQpFatal = 1,
  kQpReqErr = 2,
  kQpAccessErr = 3,
  kCommEst = 4,
  kSqDrained = 5,
  kPortActive = 9,
  kPortErr = 10,
  kDeviceFatal = 8,
  kSrqErr = 14,
  kSrqLimitReached = 15,     // element: the SRQ number
  kQpLastWqeReached = 16,
};

enum class MwType : uint8_t { kType1 = 1, kType2 = 2 };  // enum ibv_mw_type

struct Sge {
  uint64_t addr = 0;
  uint32_t length = 0;
  uint32_t lkey = 0;
};

struct SendWr {
  uint64_t wr_id = 0;
  WrOpcode opcode = WrOpcode::kSend;
  uint32_t send_flags = 0;
  uint32_t imm = 0;           // host order
  uint64_t remote_addr = 0;   // RDMA and atomics
  uint32_t rkey = 0;
  uint64_t compare_add = 0;   // atomics: compare (CMP_SWAP) or addend (FETCH_ADD)
  uint64_t swap = 0;          // CMP_SWAP
  uint32_t num_sge = 0;
  std::array<Sge, kMaxSge> sg{};
  std::vector<uint8_t> inline_data;  // with kSendInline: the data itself
  // UD (docs/protocol.md §13): where the datagram goes.
  uint32_t ah = 0;           // address handle (Engine::create_ah)
  uint32_t remote_qpn = 0;   // 24 bits
  uint32_t remote_qkey = 0;  // high bit set: use the QP's own Q_Key (§13.4)
  // kLocalInv / kSendWithInv: the rkey to invalidate (ibv_send_wr's
  // invalidate_rkey, which shares imm_data's place; carried in `imm`).
  // kBindMw (docs/engine.md §Memory windows): the window, its new rkey in
  // `rkey`, and the MR range and rights it grants.
  struct Bind {
    uint32_t mw = 0;      // Engine::alloc_mw's handle
    uint32_t lkey = 0;    // the MR
    uint32_t access = 0;  // remote read/write/atomic
    uint64_t addr = 0;
    uint64_t length = 0;
    MwType type = MwType::kType1;  // kType1: ibv_bind_mw; kType2: IBV_WR_BIND_MW
  } bind;
};

struct RecvWr {
  uint64_t wr_id = 0;
  uint32_t num_sge = 0;
  std::array<Sge, kMaxSge> sg{};
};

struct Completion {  // mirrors struct ibv_wc's fields the engine fills
  uint64_t wr_id = 0;
  WcStatus status = WcStatus::kSuccess;
  WcOpcode opcode = WcOpcode::kSend;
  uint32_t vendor_err = 0;
  uint32_t byte_len = 0;
  uint32_t imm = 0;       // host order; with kWcWithInv the invalidated rkey
  uint32_t qp_num = 0;
  uint32_t src_qp = 0;
  uint32_t wc_flags = 0;  // kWcWithImm, kWcGrh
  // UD receives: RoCE has no LIDs or service levels; `sl` carries the
  // RoCE packet type instead (datagram.cc, docs/protocol.md §13.5).
  uint16_t slid = 0;
  uint8_t sl = 0;
  uint8_t dlid_path_bits = 0;
  uint16_t pkey_index = 0;
};

struct QpCap {
  uint32_t max_send_wr = 0;
  uint32_t max_recv_wr = 0;
  uint32_t max_send_sge = 0;
  uint32_t max_recv_sge = 0;
  uint32_t max_inline_data = 0;
};

struct QpInitAttr {
  QpType type = QpType::kRc;
  uint32_t pdn = 0;
  uint32_t send_cqn = 0;
  uint32_t recv_cqn = 0;
  QpCap cap;
  bool sq_sig_all = false;
  // A shared receive queue (docs/engine.md §Shared receive queues): 0 none.
  // With one, cap.max_recv_wr/max_recv_sge are ignored (reported 0).
  uint32_t srqn = 0;
};

// ibv_srq_attr and ibv_srq_attr_mask.
struct SrqAttr {
  uint32_t max_wr = 0;
  uint32_t max_sge = 0;
  uint32_t srq_limit = 0;  // armed while non-zero: kSrqLimitReached below it
};
enum SrqAttrMask : uint32_t { kSrqMaxWr = 1, kSrqLimit = 2 };

// Address vector: where the peer is. GIDs are RoCE v2 style (IPv4-mapped or
// IPv6), so a GID is an IP address.
struct AddressVector {
  proto::IpAddr dgid;
  uint8_t sgid_index = 0;
  uint8_t hop_limit = 64;
  uint8_t traffic_class = 0;  // DSCP << 2 | ECN bits ignored
  uint32_t flow_label = 0;
};

struct QpAttr {
  QpState qp_state = QpState::kReset;
  QpState cur_qp_state = QpState::kReset;
  uint32_t qp_access_flags = 0;
  uint16_t pkey_index = 0;
  uint8_t port_num = 1;
  AddressVector av;
  uint32_t path_mtu = 1024;  // bytes: 256, 512, 1024, 2048 or 4096
  uint8_t timeout = 14;      // IB encoding: 4.096 us * 2^timeout, 0 = infinite
  uint8_t retry_cnt = 7;
  uint8_t rnr_retry = 7;     // 7 = infinite
  uint8_t min_rnr_timer = 12;
  uint32_t rq_psn = 0;
  uint32_t sq_psn = 0;
  uint8_t max_rd_atomic = 16;
  uint8_t max_dest_rd_atomic = 16;
  uint32_t dest_qp_num = 0;
  uint32_t qkey = 0;  // UD
  QpCap cap;
};

struct MrKeys {
  uint32_t lkey = 0;
  uint32_t rkey = 0;
};

struct DeviceCaps {
  uint32_t max_qp = 4096;
  uint32_t max_qp_wr = 4096;
  uint32_t max_sge = kMaxSge;
  uint32_t max_cq = 4096;
  // 2^20 - 1: the ring (one spare slot, a power of two) is then 64 MiB,
  // inside the per-user ring limit; ofi_rxm asks for 262144 by default.
  uint32_t max_cqe = (1u << 20) - 1;
  uint32_t max_mr = 65536;
  uint64_t max_mr_size = uint64_t{1} << 40;
  uint32_t max_pd = 4096;
  uint32_t max_qp_rd_atom = 16;
  uint32_t max_inline = kMaxInline;
  uint32_t max_msg_size = 1u << 31;
  uint32_t max_srq = 1024;  // SRQs hold max_qp_wr WQEs of max_sge SGEs at most
  uint32_t max_ah = 65536;
  uint32_t max_mcast_grp = 1024;
  uint32_t max_mcast_qp_attach = 64;  // QPs per group
  uint32_t max_mw = 65536;  // memory windows, type 1 and 2 (docs/engine.md §Memory windows)
};

}  // namespace metaroce::fw
