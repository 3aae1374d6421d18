// Reliability for a lossy, multipath fabric (docs/engine.md §Reliability):
//
//  - RecvWindow: the responder's view of one QP's request PSN space: a
//    cumulative point (first PSN not yet received) and a 4096-PSN bitmap
//    above it. Packets are placed on arrival in any order; the bitmap makes
//    duplicates detectable so nothing is placed twice.
//  - RttEstimator: srtt/rttvar (RFC 6298), min RTT and the spread between
//    paths, from the timestamps the responder echoes.
//  - SendScoreboard: the requester's in-flight packets, indexed by PSN in a
//    ring, with a send-order list for RACK-style loss detection (RFC 8985):
//    a packet is lost once a packet sent after it has been delivered and a
//    reordering window has passed. Only lost PSNs are retransmitted; there
//    is no go-back-N. Every operation is O(1) amortised per packet.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include "firmware-model/engine/types.h"
#include "proto/packet.h"

namespace metaroce::fw {

inline constexpr uint32_t kRecvWindow = 4096;  // PSNs the responder tracks above cum

class RecvWindow {
 public:
  enum class Verdict : uint8_t { kNew, kDuplicate, kOutOfWindow };
  void reset(uint32_t cum);
  Verdict classify(uint32_t psn) const;
  // Records psn (classify() said kNew); advances cum over received PSNs.
  void mark(uint32_t psn);
  uint32_t cum() const { return cum_; }
  // Bit i set: PSN cum + 1 + i received (the ACK's SACK field).
  uint64_t sack() const;

 private:
  bool test(uint32_t psn) const {
    uint32_t i = psn & (kRecvWindow - 1);
    return (bits_[i >> 6] >> (i & 63)) & 1;
  }
  std::array<uint64_t, kRecvWindow / 64> bits_{};
  uint32_t cum_ = 0;
};

// Timer constants. RTO floor and initial value suit both a soft NIC on a
// real fabric (tens of microseconds RTT) and virtual-time tests.
inline constexpr Time kMinRto = 250'000;        // ns
inline constexpr Time kInitialRto = 1'000'000;  // ns, before any RTT sample
inline constexpr Time kInfiniteTimeoutCap = 1'000'000'000;  // timeout = 0: RTO cap, no retry limit
inline constexpr Time kMinReorderWindow = 2'000;           // ns
inline constexpr Time kDelayedAck = 8'000;                 // ns

// IB local ACK timeout: 4.096 us * 2^timeout; 0 means infinite (kNever).
Time ib_timeout_ns(uint8_t timeout);
// IB RNR NAK timer encoding (IB spec table 45) in ns.
Time rnr_timer_ns(uint8_t code);

class RttEstimator {
 public:
  // rtt measured for a packet that travelled on `path`.
  void sample(Time rtt, uint8_t path = 0);
  bool has_sample() const { return srtt_ != 0; }
  Time srtt() const { return srtt_; }
  Time rttvar() const { return rttvar_; }
  Time min_rtt() const { return min_rtt_; }
  Time spread() const { return max_rtt_ - min_rtt_; }  // delay spread between paths
  // How late a READ response arrives behind one sent after it (reordering
  // between paths or in the fabric), measured on the responses themselves:
  // the READ hole check waits that long past the reorder window. The RTT
  // samples' spread does not say it: a READ request's sample carries the
  // time it queued behind the READs the responder is serving, which all
  // its responses see alike (with 1 ms of delay each way that was ~2 ms, and
  // every lost response waited for it before its re-issue).
  void on_late_response(Time late) {
    late_ = late > late_ ? late : late_ - (late_ - late) / 16;
  }
  Time response_lateness() const { return late_; }
  // The retransmission timeout before backoff.
  Time rto() const;
  // RACK reordering window on top of the expected delivery time.
  Time reorder_window() const;
  // When a packet sent on `path` should have been acknowledged, measured
  // from its send time: its own path's RTT plus the slowest way back.
  Time expected_ack(uint8_t path) const;
  // Tail loss probe timeout: about two round trips.
  Time pto() const;
  // A duplicate reached the responder: our retransmission was probably
  // spurious (or the fabric duplicated). Widen at most once per 16 samples.
  void on_spurious() {
    if (reo_mult_ < 4 && samples_ - last_widen_ >= 16) {
      ++reo_mult_;
      last_widen_ = samples_;
    }
  }
  void on_recovery() { if (++recoveries_ % 64 == 0 && reo_mult_ > 1) --reo_mult_; }

 private:
  static constexpr uint32_t kPaths = 16;  // per-path estimates, by path % kPaths
  Time srtt_ = 0, rttvar_ = 0, min_rtt_ = 0, max_rtt_ = 0, late_ = 0;
  std::array<Time, kPaths> path_srtt_{}, path_rttvar_{};
  uint32_t reo_mult_ = 1;
  uint64_t samples_ = 0, last_widen_ = 0;
  uint32_t recoveries_ = 0;
};

enum class TxState : uint8_t {
  kFree,       // slot unused
  kInFlight,   // sent, outcome unknown (on the send-order list)
  kDelivered,  // acknowledged cumulatively or selectively
  kLost,       // declared lost, queued for retransmission
  kRnrWait,    // RNR-NACKed, waiting for the RNR timer
};

struct TxEntry {
  uint32_t psn = 0;
  uint32_t wqe_seq = 0;  // send queue sequence number of the WQE
  uint32_t offset = 0;   // message byte offset (READ_REQ: start of the range)
  uint32_t len = 0;      // payload bytes (READ_REQ: range length)
  uint32_t wire = 0;     // bytes charged to the congestion window
  Time sent = 0;
  uint32_t stamp = 0;     // MBTH.timestamp of the latest transmission (take_stamp)
  uint64_t send_seq = 0;  // order of the latest (re)transmission
  uint64_t prev = 0, next = 0;  // send-order list, by send_seq owner psn+1 (0 = none)
  uint16_t xmits = 0;
  uint8_t rnr_tries = 0;
  uint8_t path = 0;
  TxState state = TxState::kFree;
  bool lost_by_rack = false;  // the pending retransmission is a fast one
};

struct AckOutcome {
  uint64_t newly_acked_bytes = 0;
  uint32_t newly_acked_pkts = 0;
  bool progress = false;  // cumulative point moved or new SACK information
};

class SendScoreboard {
 public:
  SendScoreboard();
  void reset(uint32_t psn);

  uint32_t una() const { return una_; }  // oldest PSN not yet delivered
  uint32_t nxt() const { return nxt_; }  // next new PSN
  uint32_t outstanding() const { return nxt_ - una_; }
  uint64_t bytes_in_flight() const { return bytes_in_flight_; }
  // What the window is charged: bytes in flight less those an ACK showed
  // to have arrived beyond the SACK bitmap (on_unseen_delivery).
  uint64_t pipe_bytes() const { return bytes_in_flight_ - std::min(beyond_bytes_, bytes_in_flight_); }
  uint32_t pkts_in_flight() const { return pkts_in_flight_; }
  bool any_unacked() const { return pkts_in_flight_ > 0 || lost_count_ > 0; }
  uint32_t lost_count() const { return lost_count_; }
  bool any_rnr() const { return !rnr_.empty(); }

  TxEntry* find(uint32_t psn);
  // True when psn is known to have reached the responder.
  bool delivered(uint32_t psn) {
    if (proto::seq_lt(psn, una_)) return true;
    TxEntry* e = find(psn);
    return e && e->state == TxState::kDelivered;
  }
  // Records a first transmission at nxt(); returns the entry (psn filled).
  // `stamp`: its MBTH.timestamp (take_stamp).
  TxEntry& add_new(uint32_t wqe_seq, uint32_t offset, uint32_t len, uint32_t wire, uint8_t path,
                   Time now, uint32_t stamp = 0);
  // Records a retransmission of a kLost entry.
  void on_retransmit(TxEntry& e, uint8_t path, Time now, uint32_t stamp = 0);

  AckOutcome on_ack(uint32_t cum, uint64_t sack, Time now, const RttEstimator& rtt);
  // An ACK echoed the timestamp of a packet sent at `sent`: some packet
  // sent then was delivered, even if its PSN is beyond the SACK bitmap.
  void on_echo(Time sent, Time rtt);
  // An ACK that is not a duplicate's told nothing new: the packet that
  // triggered it lies beyond cum + 64, where the SACK bitmap cannot name it
  // (a hole holds cum). It left the network, so it stops counting against
  // the window (pipe_bytes) until cum moves; which PSN it was is unknown,
  // so nothing is marked delivered (RFC 6675's pipe, for a 64-bit SACK).
  void on_unseen_delivery();
  // One PSN is known delivered (a READ or atomic response names it).
  AckOutcome on_delivered(uint32_t psn, Time now, const RttEstimator& rtt);
  // The MBTH.timestamp of a transmission about to leave: the clock, truncated,
  // but strictly above the previous transmission's, so that an ACK's
  // echo_ts names exactly one transmission of this QP (echo_delivery).
  uint32_t take_stamp(Time now) {
    const uint32_t t = static_cast<uint32_t>(now);
    last_stamp_ = stamped_ && static_cast<int32_t>(t - last_stamp_) <= 0 ? last_stamp_ + 1 : t;
    stamped_ = true;
    return last_stamp_;
  }
  // An ACK echoed `echo_ts` and `path`: the transmission that carried them
  // arrived. When it is in flight beyond the SACK bitmap, it is delivered
  // (RACK then judges the packets sent before it, bitmap or not); returns
  // false when no in-flight transmission matches (a retransmitted packet's
  // first copy, an old echo), for the caller's fallback. Looks at most
  // kEchoScan of the oldest transmissions in flight.
  bool echo_delivery(uint32_t echo_ts, uint8_t path, Time now, const RttEstimator& rtt,
                     AckOutcome* out);
  static constexpr uint32_t kEchoScan = 256;

  // RACK, multipath-aware: moves to the lost queue the in-flight packets
  // within the responder's reportable range (cum .. cum+64) that were sent
  // before a packet known delivered and whose acknowledgement is overdue:
  // now > sent + max(rack_rtt, expected_ack(path)) + reo_wnd. Returns lost
  // bytes; *recheck is when the oldest survivor would be declared lost.
  // lost_paths receives the path of each lost packet (for the selector).
  uint64_t detect_losses(Time now, const RttEstimator& rtt, Time* recheck,
                         std::vector<uint8_t>* lost_paths);
  // Retransmission timeout: every in-flight packet is declared lost.
  uint64_t mark_all_lost();
  // A single packet is known lost (trimmed payload NACK).
  void mark_lost(uint32_t psn);
  // Tail loss probe: the most recently sent in-flight packet is queued for
  // retransmission so that its ACK reveals losses before it (RACK-TLP).
  bool probe_tail();
  // RNR NACK for psn: wait until `until`, then retransmit.
  void rnr_wait(uint32_t psn, Time until);
  Time next_rnr_release() const;
  void release_rnr(Time now);

  // Next PSN to retransmit: the one at una() if lost, else the oldest
  // queued (entries delivered or resent meanwhile are skipped lazily).
  TxEntry* next_lost();

  // Heap bytes held. The requester keeps fewer than kRecvWindow PSNs
  // outstanding, so the ring stays at or below kRecvWindow entries and the
  // lost queue below 2 * kRecvWindow (stale entries are dropped before it
  // grows past that): at most kMaxBytes (docs/engine.md §Memory bounds).
  uint64_t memory_bytes() const {
    return ring_.capacity() * sizeof(TxEntry) + lost_.capacity() * sizeof(uint32_t) +
           rnr_.capacity() * sizeof(RnrWait);
  }
  static constexpr uint64_t kRnrWaitBytes = 16;
  static constexpr uint64_t kMaxBytes =
      uint64_t{kRecvWindow} * (sizeof(TxEntry) + 2 * sizeof(uint32_t) + kRnrWaitBytes);

 private:
  bool lost_empty() const { return lost_head_ == lost_tail_; }
  TxEntry& slot(uint32_t psn) { return ring_[psn & mask_]; }
  void grow();
  void list_append(TxEntry& e);
  void list_remove(TxEntry& e);
  void to_lost(TxEntry& e, bool rack);
  void leave_flight(TxEntry& e);
  void deliver(TxEntry& e, Time now, const RttEstimator& rtt, AckOutcome* out);
  void push_lost(uint32_t psn);
  void advance_una();

  std::vector<TxEntry> ring_;
  uint32_t mask_ = 0;
  uint32_t una_ = 0, nxt_ = 0;
  uint32_t report_end_ = 65;  // first PSN beyond what the latest ACK could report
  uint64_t bytes_in_flight_ = 0;
  uint64_t beyond_bytes_ = 0;   // on_unseen_delivery, since cum last moved
  uint32_t beyond_pkts_ = 0;
  uint32_t pkts_in_flight_ = 0;
  uint32_t lost_count_ = 0;  // entries in state kLost
  uint64_t send_seq_ = 0;
  // send-order list of kInFlight entries, linked by psn + 1 (0 = none)
  uint64_t head_ = 0, tail_ = 0;
  // RACK state: the most recently sent packet known delivered
  uint64_t rack_seq_ = 0;
  uint32_t last_stamp_ = 0;  // stamp of the latest transmission
  bool stamped_ = false;
  Time rack_time_ = 0;  // send time of the newest delivered packet (SACK or echo)
  Time rack_rtt_ = 0;
  // FIFO of lost PSNs (ring buffer, grows)
  std::vector<uint32_t> lost_;
  uint32_t lost_head_ = 0, lost_tail_ = 0;
  struct RnrWait { uint32_t psn; Time until; };
  static_assert(sizeof(RnrWait) == kRnrWaitBytes);
  std::vector<RnrWait> rnr_;  // at most one per outstanding PSN
};

}  // namespace metaroce::fw
