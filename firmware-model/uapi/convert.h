// Conversions between the device ABI (metaroce_abi.h: what host software
// and a NIC exchange) and the transport engine's verbs-level types. Used by
// every NIC side that speaks the ABI: the soft-NIC daemon and the hardware
// offload backend.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "firmware-model/engine/engine.h"
#include "firmware-model/engine/types.h"
#include "firmware-model/uapi/metaroce_abi.h"

namespace metaroce::uapi {

// enum ibv_mtu (1..5) <-> bytes (256..4096); 0 for anything else.
uint32_t mtu_bytes(uint32_t ibv_mtu);
uint32_t ibv_mtu_for(uint32_t bytes);  // largest enum whose size fits

mroce_qp_cap to_abi(const fw::QpCap& c);
fw::QpCap to_fw(const mroce_qp_cap& c);
// attr_mask is left 0: the caller sets it.
mroce_qp_attr to_abi(const fw::QpAttr& q);
fw::QpAttr to_fw(const mroce_qp_attr& a);

// Work requests and completions: the ring slots of docs/device-abi.md §3.1
// <-> the engine's. The one place these are converted, for the soft NIC
// (which reads WQEs and writes CQEs) and the hardware backend (which writes
// WQEs and reads CQEs). Enumerations keep their verbs values both ways.
//
// A WQE from a ring is the application's and may be anything: converting it
// checks the bounds its layout imposes and names the first it breaks (the
// engine checks the rest: opcode, SGE count against the QP's caps, ...).
enum class WqeDefect { kNone, kBadSgeCount, kBadInlineLen };
WqeDefect to_fw(const mroce_send_wqe& w, fw::SendWr* wr);
WqeDefect to_fw(const mroce_recv_wqe& w, fw::RecvWr* wr);
// From a WR the engine's types already bound (num_sge <= MROCE_MAX_SGE,
// inline data <= MROCE_MAX_INLINE: the caller checks).
mroce_send_wqe to_abi(const fw::SendWr& wr);
mroce_recv_wqe to_abi(const fw::RecvWr& wr);
mroce_cqe to_abi(const fw::Completion& wc);
fw::Completion to_fw(const mroce_cqe& e);

struct NamedCounter {
  std::string name;
  uint64_t value = 0;
};

// The engine's counters (fw::Counters, engine.h, where each is documented)
// by name: one table for QUERY_COUNTERS, metaroce-ctl, the metrics
// endpoint and the hardware backend's QUERY_COUNTERS (the names silicon
// reports). The order is the reply's. A counter added to fw::Counters and
// not here fails the static_assert below.
#define MROCE_ENGINE_COUNTERS(X) \
  X(tx_packets)                  \
  X(tx_bytes)                    \
  X(rx_packets)                  \
  X(rx_bytes)                    \
  X(rx_drop_parse)               \
  X(rx_drop_bad_icrc)            \
  X(rx_drop_unknown_qp)          \
  X(rx_drop_qp_state)            \
  X(rx_drop_duplicate)           \
  X(rx_drop_out_of_window)       \
  X(rx_nak_access)               \
  X(rx_nak_invalid)              \
  X(rx_nak_rnr)                  \
  X(tx_retransmits)              \
  X(fast_retransmits)            \
  X(timeouts)                    \
  X(rnr_retries)                 \
  X(ecn_marks_seen)              \
  X(atomic_replays)              \
  X(cq_overflows)                \
  X(local_errors)                \
  X(rx_drop_unexpected)          \
  X(rx_drop_not_request)         \
  X(tail_loss_probes)            \
  X(rx_drop_unordered)           \
  X(rx_drop_wrong_source)        \
  X(rx_drop_ack_stale)           \
  X(rx_drop_ack_out_of_range)    \
  X(rx_drop_nack_out_of_range)   \
  X(rx_drop_resp_out_of_range)   \
  X(rx_drop_read_queue_full)     \
  X(rx_drop_owner_gone)          \
  X(rx_held_unordered)           \
  X(spurious_timeouts)           \
  /* ud: the datagram service */ \
  X(ud_tx_datagrams)             \
  X(ud_tx_unknown_ah)            \
  X(ud_tx_oversize)              \
  X(ud_rx_delivered)             \
  X(rx_drop_ud_qkey)             \
  X(rx_drop_ud_no_recv)          \
  X(rx_drop_ud_oversize)         \
  X(rx_drop_ud_malformed)        \
  X(rx_drop_ud_wrong_type)       \
  X(rx_drop_ud_recv_too_small)   \
  X(rx_drop_ud_recv_fault)       \
  X(rx_drop_mcast_no_group) \
  /* srq: shared receive queues */ \
  X(srq_limit_events)            \
  X(rx_rnr_srq_empty)            \
  X(rx_rnr_srq_window)           \
  /* srq: unreliable connected service */ \
  X(rx_drop_wrong_service)       \
  X(rx_drop_uc_stale)            \
  X(rx_drop_uc_psn_gap)          \
  X(rx_drop_uc_mid_message)      \
  X(rx_drop_uc_no_recv)          \
  X(rx_drop_uc_access)           \
  X(rx_drop_uc_too_long)         \
  X(rx_drop_uc_malformed)        \
  /* mw: memory windows */        \
  X(mw_binds)                    \
  X(mw_local_invalidations)      \
  X(mw_remote_invalidations)     \
  X(mw_bind_refused)             \
  X(mw_local_inv_refused)        \
  X(mw_remote_inv_refused)       \
  X(mw_refused_no_window)        \
  X(mw_refused_wrong_owner)      \
  X(mw_refused_wrong_pd)         \
  X(mw_refused_wrong_type)       \
  X(mw_refused_busy)             \
  X(mw_refused_wrong_key)        \
  X(mw_refused_no_mr)            \
  X(mw_refused_mr_no_bind)       \
  X(mw_refused_out_of_bounds)    \
  X(mw_refused_bad_access)       \
  X(mw_refused_wrong_qp)         \
  X(rkey_refused_no_key)         \
  X(rkey_refused_wrong_owner)    \
  X(rkey_refused_wrong_pd)       \
  X(rkey_refused_wrong_qp)       \
  X(rkey_refused_out_of_bounds)  \
  X(rkey_refused_no_access)      \
  /* srqud: UD QPs on an SRQ, exact receive-queue bounds */ \
  X(rx_drop_ud_srq_empty) \
  /* readrec: READ recovery */    \
  X(read_repairs_trimmed)        \
  X(read_tail_probes)            \
  X(read_holes_by_order) \
  /* mw2: */                     \
  X(mw_invalidated_qp_destroyed) \
  /* txf: payload straight into tx frames */ \
  X(tx_payload_in_frame)         \
  X(tx_payload_copied)           \
  X(tx_frames_abandoned)

#define MROCE_X(name) +1
inline constexpr size_t kEngineCounters = 0 MROCE_ENGINE_COUNTERS(MROCE_X);
#undef MROCE_X
static_assert(sizeof(fw::Counters) == kEngineCounters * sizeof(uint64_t),
              "fw::Counters and MROCE_ENGINE_COUNTERS disagree: name the new counter here");

// Every engine counter with its name, in the table's order.
std::vector<NamedCounter> named_counters(const fw::Counters& c);

}  // namespace metaroce::uapi
