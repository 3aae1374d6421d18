// The MetaRoCE transport engine: one RDMA NIC (one port) as a sans-IO state
// machine. See docs/engine.md for the roles (requester, responder,
// completer), reliability, multipath and congestion control, and
// firmware-model/engine/hal.h for the boundary.
//
// Conventions: functions that can fail return 0 or a positive errno
// (EINVAL, ENOMEM, EBUSY, ENOENT, EPERM, ...) as a verbs user expects.
// Nothing here blocks; nothing here throws on the data path.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "firmware-model/engine/hal.h"
#include "firmware-model/engine/types.h"

namespace metaroce::fw {

// Deliberate violations of docs/protocol.md, for the conformance suite's
// broken device (docs/conformance.md; metaroced --violate). Test only: a
// bit set makes the engine non-conformant in exactly the named rule.
enum Violation : uint32_t {
  kViolateAckWithoutSack = 1u << 0,  // every ACK's SACK bitmap is 0 (§3.7)
  kViolateWrongNackCode = 1u << 1,   // access errors NACKed INVALID_REQUEST (§3.8)
  kViolateNoProbeReply = 1u << 2,    // PROBEs go unanswered (§8)
};
// "ack-without-sack,wrong-nack-code" -> bits. False, with the unknown name
// and the known ones in *error, for anything else (an empty list too).
bool parse_violations(const std::string& list, uint32_t* out, std::string* error);
// The names of the bits set, comma separated ("" for none).
std::string violation_names(uint32_t bits);

struct EngineConfig {
  DeviceCaps caps;
  PortInfo port;
  uint32_t num_paths = 4;            // path entropies sprayed over per QP
  uint32_t path_train = 1;           // packets per path choice (MultipathTuning::train)
  std::string congestion = "default";  // congestion-control algorithm name
  // Handed to the congestion control (CongestionParams): the fabric's base
  // RTT and the port's line rate.
  Time base_rtt = 10'000;  // ns
  uint64_t link_bps = 25'000'000'000;
  uint32_t violate = 0;  // Violation bits; 0 in every real deployment
  // docs/protocol.md §3.8: the IP DSCP trimming switches put on a request
  // they cut to its headers. Such a request is answered with NACK TRIMMED
  // (the sender resends it at once); 0 = not recognised (a parse drop).
  uint8_t trimmed_dscp = 0;
};

// Counters by reason; every drop, reject and retry increments exactly one.
struct Counters {
  uint64_t tx_packets = 0, tx_bytes = 0, rx_packets = 0, rx_bytes = 0;
  uint64_t rx_drop_parse = 0;          // frame/transport parse failure (incl. bad ICRC)
  uint64_t rx_drop_bad_icrc = 0;
  uint64_t rx_drop_unknown_qp = 0;
  uint64_t rx_drop_qp_state = 0;       // QP not in a state that accepts this packet
  uint64_t rx_drop_duplicate = 0;      // already-received PSN (re-acked, not re-placed)
  uint64_t rx_drop_out_of_window = 0;  // PSN beyond the receive window
  uint64_t rx_nak_access = 0;          // key/bounds/PD/access failure answered with NACK
  uint64_t rx_nak_invalid = 0;
  uint64_t rx_nak_rnr = 0;
  uint64_t tx_retransmits = 0;         // packets retransmitted (fast + timeout)
  uint64_t fast_retransmits = 0;
  uint64_t timeouts = 0;               // retransmission timer expiries
  uint64_t rnr_retries = 0;
  uint64_t ecn_marks_seen = 0;
  uint64_t atomic_replays = 0;         // duplicate atomics answered from the cache
  uint64_t cq_overflows = 0;
  uint64_t local_errors = 0;           // WRs completed with a local error
  // Additions after the first contract:
  uint64_t rx_drop_unexpected = 0;     // ACK/NACK/response matching nothing outstanding
  uint64_t rx_drop_not_request = 0;    // PROBE_REPLY or other opcode with no consumer
  uint64_t tail_loss_probes = 0;       // TLP: tail packet resent before the RTO
  uint64_t rx_drop_unordered = 0;     // READ/atomic ahead of a hole, not held (held set full; resent later)
  uint64_t rx_drop_owner_gone = 0;    // the QP's owner process is gone (hal.h owner_alive)
  // Trust (docs/engine.md §Trust): packets that do not match the QP's peer
  // or anything it sent. Each is dropped before it changes any state.
  uint64_t rx_drop_wrong_source = 0;       // source IP is not the QP's peer (its AV's dgid)
  uint64_t rx_drop_ack_stale = 0;          // ACK whose cum_psn is below una (old, or forged)
  uint64_t rx_drop_ack_out_of_range = 0;   // ACK cum_psn beyond the next PSN, or a SACK bit never sent
  uint64_t rx_drop_nack_out_of_range = 0;  // NACK naming a PSN not outstanding or already delivered
  uint64_t rx_drop_resp_out_of_range = 0;  // READ/atomic response PSN/offset not of its request
  uint64_t rx_drop_read_queue_full = 0;    // READ_REQ while the responder's READ queue is full
  uint64_t rx_held_unordered = 0;  // READ/atomic ahead of a hole, held and run in PSN order
  uint64_t spurious_timeouts = 0;  // RTOs whose first ACK echoed a packet sent before them (undone)
  // ud: the datagram service (docs/protocol.md §13, datagram.cc), by reason.
  uint64_t ud_tx_datagrams = 0;         // UD messages sent
  uint64_t ud_tx_unknown_ah = 0;        // send naming no AH of the QP's owner and PD (kLocQpOpErr)
  uint64_t ud_tx_oversize = 0;          // send longer than the UD MTU (kLocLenErr)
  uint64_t ud_rx_delivered = 0;         // datagrams placed into a receive
  uint64_t rx_drop_ud_qkey = 0;         // DETH Q_Key is not the QP's
  uint64_t rx_drop_ud_no_recv = 0;      // no receive posted (UD drops, silently for the peer)
  uint64_t rx_drop_ud_oversize = 0;     // payload longer than the QP's UD MTU
  uint64_t rx_drop_ud_malformed = 0;    // not one whole message in one packet (offset, LAST)
  uint64_t rx_drop_ud_wrong_type = 0;   // datagram opcode to an RC QP, or RC opcode to a UD QP
  uint64_t rx_drop_ud_recv_too_small = 0;  // GRH + payload over the receive (completes kLocLenErr)
  uint64_t rx_drop_ud_recv_fault = 0;   // receive lkey/bounds/DMA failed (completes in error)
  uint64_t rx_drop_mcast_no_group = 0;  // multicast datagram for a group no QP here joined
  // srq: shared receive queues (docs/engine.md §Shared receive queues)
  uint64_t srq_limit_events = 0;   // SRQ fell below its armed limit (IBV_EVENT_SRQ_LIMIT_REACHED)
  uint64_t rx_rnr_srq_empty = 0;   // RNR: the QP's SRQ had no receive for the message
  uint64_t rx_rnr_srq_window = 0;  // RNR: MSN beyond the QP's window of SRQ receives
  // srq: unreliable connected service (docs/engine.md §Unreliable connected)
  uint64_t rx_drop_wrong_service = 0;   // an RC opcode on a UC QP, a UC one on an RC QP, or a response on UC
  uint64_t rx_drop_uc_stale = 0;        // UC packet older than the PSN expected (reordered, duplicated)
  uint64_t rx_drop_uc_psn_gap = 0;      // UC PSN gap: packets lost, the message in progress dropped
  uint64_t rx_drop_uc_mid_message = 0;  // UC packet of a message whose start was lost or refused
  uint64_t rx_drop_uc_no_recv = 0;      // UC SEND/WRITE_IMM with no receive posted (no RNR in UC)
  uint64_t rx_drop_uc_access = 0;       // UC WRITE whose rkey, range or access fails
  uint64_t rx_drop_uc_too_long = 0;     // UC SEND longer than its receive (it completes kLocLenErr)
  uint64_t rx_drop_uc_malformed = 0;    // UC packet not continuing its message (opcode, length, offset)
  // mw: memory windows (docs/engine.md §Memory windows)
  uint64_t mw_binds = 0;                 // BIND_MW work requests that bound or unbound a window
  uint64_t mw_local_invalidations = 0;   // LOCAL_INV that freed a type 2 window
  uint64_t mw_remote_invalidations = 0;  // SEND_WITH_INV that freed a type 2 window
  uint64_t mw_bind_refused = 0;          // BIND_MW completed IBV_WC_MW_BIND_ERR (reason below)
  uint64_t mw_local_inv_refused = 0;     // LOCAL_INV completed IBV_WC_LOC_PROT_ERR (reason below)
  uint64_t mw_remote_inv_refused = 0;    // SEND_WITH_INV NAKed INVALID_REQUEST (reason below)
  uint64_t mw_refused_no_window = 0;     // ...no window by that handle or rkey
  uint64_t mw_refused_wrong_owner = 0;   // ...window or MR of another process
  uint64_t mw_refused_wrong_pd = 0;      // ...window, MR and QP not in one PD
  uint64_t mw_refused_wrong_type = 0;    // ...type 1 where type 2 is needed or the reverse
  uint64_t mw_refused_busy = 0;          // ...type 2 bind of a bound window
  uint64_t mw_refused_wrong_key = 0;     // ...rkey not the window's (prefix, or not bound with it)
  uint64_t mw_refused_no_mr = 0;         // ...bind names no MR
  uint64_t mw_refused_mr_no_bind = 0;    // ...MR without IBV_ACCESS_MW_BIND
  uint64_t mw_refused_out_of_bounds = 0; // ...window range beyond its MR
  uint64_t mw_refused_bad_access = 0;    // ...rights not allowed on the window or its MR
  uint64_t mw_refused_wrong_qp = 0;      // ...type 2 window bound to another QP
  uint64_t rkey_refused_no_key = 0;      // remote access NAKed: rkey names no MR or bound window
  uint64_t rkey_refused_wrong_owner = 0; // ...rkey of another process
  uint64_t rkey_refused_wrong_pd = 0;    // ...rkey of another PD than the QP's
  uint64_t rkey_refused_wrong_qp = 0;    // ...type 2 window bound to another QP
  uint64_t rkey_refused_out_of_bounds = 0;  // ...range outside the MR or window
  uint64_t rkey_refused_no_access = 0;   // ...right missing (MR, window or QP access flags)
  // srqud: UD QPs on an SRQ (docs/engine.md §Shared receive queues)
  uint64_t rx_drop_ud_srq_empty = 0;     // datagram for a UD QP whose SRQ had no receive (no RNR in UD)
  // readrec: READ recovery (docs/engine.md §READ recovery)
  uint64_t read_repairs_trimmed = 0;  // READ repair cut (or dropped) to what no queued job sends
  uint64_t read_tail_probes = 0;      // READ data asked again after the responses stopped
  uint64_t read_holes_by_order = 0;   // READ hole check armed by a later READ's response
  // mw2: type 2 windows unbound because their QP was destroyed
  uint64_t mw_invalidated_qp_destroyed = 0;
  // txf: payload straight into tx frames (hal.h §tx_buffer)
  uint64_t tx_payload_in_frame = 0;  // payloads the DMA read straight into a port's frame
  uint64_t tx_payload_copied = 0;    // payloads gathered into the scratch (the port had no frame)
  uint64_t tx_frames_abandoned = 0;  // port frames given back unsent (the DMA read failed)
};

// What `Engine::qp_transport` reports (docs/operations.md §QP transport).
struct QpTransportStats {
  Time srtt = 0, min_rtt = 0, rttvar = 0, rto = 0;  // ns; 0 before the first sample
  uint64_t cwnd_bytes = 0;       // congestion window
  uint64_t pacing_rate_bps = 0;  // what window and pacing allow; 0 unknown
  uint64_t bytes_in_flight = 0;
  uint32_t pkts_in_flight = 0;
  uint32_t lost = 0;             // packets marked lost, not yet retransmitted and acked
  std::vector<double> path_weights;  // one per path entropy
  std::string cc;                // congestion control's name
  QpState state = QpState::kReset;
  // The status of the QP's first error completion since RESET (flushes
  // aside): why it is in ERR, when a work request failed. kSuccess: none.
  WcStatus error_status = WcStatus::kSuccess;
};

class Engine {
 public:
  Engine(const EngineConfig& config, Hal hal);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // ---- port ----
  void set_port(const PortInfo& port);  // addresses/MTU/link changed
  const PortInfo& port() const;
  const DeviceCaps& caps() const;

  // ---- objects ----
  int create_pd(OwnerId owner, uint32_t* pdn);
  int destroy_pd(OwnerId owner, uint32_t pdn);
  int reg_mr(OwnerId owner, uint32_t pdn, uint64_t addr, uint64_t length, uint32_t access,
             MrKeys* keys);
  // EBUSY while memory windows are bound to it.
  int dereg_mr(OwnerId owner, uint32_t lkey);
  // Memory windows (docs/engine.md §Memory windows): type 1 or 2 in a PD.
  // *rkey is the window's initial rkey (key part 0). Bound by a kBindMw
  // work request; freed (and unbound) by dealloc_mw.
  int alloc_mw(OwnerId owner, uint32_t pdn, MwType type, uint32_t* handle, uint32_t* rkey);
  int dealloc_mw(OwnerId owner, uint32_t handle);
  int create_cq(OwnerId owner, uint32_t cqe, uint32_t* cqn);
  int destroy_cq(OwnerId owner, uint32_t cqn);
  int create_qp(OwnerId owner, const QpInitAttr& init, uint32_t* qpn, QpCap* actual_cap);
  int modify_qp(OwnerId owner, uint32_t qpn, const QpAttr& attr, uint32_t attr_mask);
  int query_qp(OwnerId owner, uint32_t qpn, QpAttr* attr, QpInitAttr* init) const;
  // The work requests qp holds and has not completed: send WQEs, and
  // receives of its own RQ (0 with an SRQ). The host's ring consumer index
  // is what it posted minus these, so a ring is full at exactly
  // max_send_wr / max_recv_wr outstanding (docs/device-abi.md §2.3).
  int queue_depths(OwnerId owner, uint32_t qpn, uint32_t* sq, uint32_t* rq) const;
  int destroy_qp(OwnerId owner, uint32_t qpn);
  // Address handles for UD sends (docs/protocol.md §13.3): a destination
  // GID with its hop limit and traffic class, in a PD. ENOENT/EPERM for
  // the PD, EINVAL for a bad sgid_index, ENOMEM when max_ah are in use.
  int create_ah(OwnerId owner, uint32_t pdn, const AddressVector& av, uint32_t* ahn);
  int destroy_ah(OwnerId owner, uint32_t ahn);
  // UD multicast (docs/protocol.md §13.8): a datagram to QPN 0xFFFFFF and a
  // group address reaches every QP attached to that group here. EINVAL: not
  // a UD QP or not a multicast address, or (detach) not attached; ENOMEM:
  // max_mcast_grp groups or max_mcast_qp_attach QPs in the group.
  int attach_mcast(OwnerId owner, uint32_t qpn, const proto::IpAddr& group);
  int detach_mcast(OwnerId owner, uint32_t qpn, const proto::IpAddr& group);
  // Tear down everything `owner` created (its process exited). Its QPs'
  // peers see errors through the normal retry path.
  void destroy_owner(OwnerId owner);

  // ---- shared receive queues (docs/engine.md §Shared receive queues) ----
  // Errors are errnos; *why (if given) names the broken rule for EINVAL
  // and EBUSY. An SRQ is attached with QpInitAttr::srqn at create_qp.
  int create_srq(OwnerId owner, uint32_t pdn, const SrqAttr& want, uint32_t* srqn,
                 SrqAttr* actual, const char** why = nullptr);
  int modify_srq(OwnerId owner, uint32_t srqn, const SrqAttr& attr, uint32_t mask,
                 const char** why = nullptr);
  // taken: WQEs consumed by messages so far (free-running), the NIC's
  // consumer index of the SRQ's ring.
  int query_srq(OwnerId owner, uint32_t srqn, SrqAttr* attr, uint32_t* taken = nullptr) const;
  // EBUSY while QPs are attached.
  int destroy_srq(OwnerId owner, uint32_t srqn, const char** why = nullptr);
  // 0, EINVAL (num_sge above max_sge), ENOMEM (max_wr receives posted and
  // not yet taken by a message).
  int post_srq_recv(OwnerId owner, uint32_t srqn, const RecvWr& wr);

  // ---- doorbells (data path) ----
  int post_send(OwnerId owner, uint32_t qpn, const SendWr& wr);
  int post_recv(OwnerId owner, uint32_t qpn, const RecvWr& wr);
  // A host that takes work requests from a ring cannot return post_send's
  // EINVAL to the application: it queues the rejected WR with this instead.
  // It completes with `status` (not kSuccess) in posting order, after the
  // WRs before it, and moves the QP to ERR, flushing the WRs after it.
  // 0, EINVAL (state as post_send, or kSuccess), ENOMEM (SQ full).
  int post_send_error(OwnerId owner, uint32_t qpn, uint64_t wr_id, WcStatus status);

  // ---- inputs ----
  // A received Ethernet frame. ip_ecn is carried inside the frame; malformed
  // frames are counted and dropped.
  void on_frame(std::span<const uint8_t> frame);
  // Run timers that are due; call when clock.now() >= next_deadline().
  void on_timer();
  Time next_deadline() const;
  // Tests: the timer index (timer_index.h) agrees with a scan of every QP.
  bool check_timer_index() const;
  // Let requesters transmit what the congestion window allows. The host
  // calls this after doorbells and received ACKs (cheap when idle).
  void pump();

  // ---- observability ----
  const Counters& counters() const;
  int qp_counters(uint32_t qpn, Counters* out) const;
  // Bytes a QP's state holds now, and the bound it never exceeds
  // (docs/engine.md §Memory bounds). ENOENT if no such QP.
  int qp_memory(uint32_t qpn, uint64_t* used, uint64_t* bound) const;
  std::vector<uint32_t> qp_numbers() const;
  // One line of a QP's transport state for logs and tests ("" if no such QP).
  std::string describe_qp(uint32_t qpn) const;
  // A QP's transport state for operators (metaroce-ctl stat --qp N). Read
  // only. ENOENT when there is no such QP.
  int qp_transport(uint32_t qpn, Time now, QpTransportStats* out) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace metaroce::fw
