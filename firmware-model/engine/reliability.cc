#include "firmware-model/engine/reliability.h"

#include <algorithm>
#include <cassert>

namespace metaroce::fw {

// ---------------- RecvWindow ----------------

void RecvWindow::reset(uint32_t cum) {
  bits_.fill(0);
  cum_ = cum;
}

RecvWindow::Verdict RecvWindow::classify(uint32_t psn) const {
  uint32_t d = psn - cum_;
  if (static_cast<int32_t>(d) < 0) return Verdict::kDuplicate;
  if (d >= kRecvWindow) return Verdict::kOutOfWindow;
  return test(psn) ? Verdict::kDuplicate : Verdict::kNew;
}

void RecvWindow::mark(uint32_t psn) {
  uint32_t i = psn & (kRecvWindow - 1);
  bits_[i >> 6] |= uint64_t{1} << (i & 63);
  while (test(cum_)) {  // advance, clearing so the slot serves cum + kRecvWindow later
    uint32_t j = cum_ & (kRecvWindow - 1);
    bits_[j >> 6] &= ~(uint64_t{1} << (j & 63));
    ++cum_;
  }
}

uint64_t RecvWindow::sack() const {
  uint32_t p = (cum_ + 1) & (kRecvWindow - 1);
  uint32_t w = p >> 6, sh = p & 63;
  uint64_t v = bits_[w] >> sh;
  if (sh) v |= bits_[(w + 1) % bits_.size()] << (64 - sh);
  return v;
}

// ---------------- timers ----------------

Time ib_timeout_ns(uint8_t timeout) {
  if (timeout == 0) return kNever;
  return (Time{4096} << std::min<uint8_t>(timeout, 31)) ;
}

Time rnr_timer_ns(uint8_t code) {
  // IB spec table 45, in units of 10 ns.
  static constexpr uint32_t k10ns[32] = {
      65536000, 1000,    2000,    3000,    4000,    6000,    8000,    12000,
      16000,    24000,   32000,   48000,   64000,   96000,   128000,  192000,
      256000,   384000,  512000,  768000,  1024000, 1536000, 2048000, 3072000,
      4096000,  6144000, 8192000, 12288000, 16384000, 24576000, 32768000, 49152000};
  return Time{k10ns[code & 31]} * 10;
}

// ---------------- RttEstimator ----------------

void RttEstimator::sample(Time rtt, uint8_t path) {
  if (rtt == 0) rtt = 1;
  ++samples_;
  Time& ps = path_srtt_[path % kPaths];
  Time& pv = path_rttvar_[path % kPaths];
  if (ps == 0) {
    ps = rtt;
    pv = rtt / 2;
  } else {
    Time d = rtt > ps ? rtt - ps : ps - rtt;
    pv = (3 * pv + d) / 4;
    ps = (7 * ps + rtt) / 8;
  }
  if (srtt_ == 0) {
    srtt_ = rtt;
    rttvar_ = rtt / 2;
    min_rtt_ = max_rtt_ = rtt;
    return;
  }
  Time diff = rtt > srtt_ ? rtt - srtt_ : srtt_ - rtt;
  rttvar_ = (3 * rttvar_ + diff) / 4;
  srtt_ = (7 * srtt_ + rtt) / 8;
  // min drifts up slowly so a path change is eventually forgotten; max
  // decays towards recent samples: max - min is the delay spread of paths.
  min_rtt_ = rtt < min_rtt_ ? rtt : min_rtt_ + (rtt - min_rtt_) / 1024;
  max_rtt_ = rtt > max_rtt_ ? rtt : max_rtt_ - (max_rtt_ - rtt) / 64;
}

Time RttEstimator::rto() const {
  if (srtt_ == 0) return kInitialRto;
  // rttvar decays with every sample, so on a steady path srtt + 4 rttvar
  // shrinks to about srtt and a frame held back (reordering, a late ACK,
  // a descheduled hop) fires a spurious RTO. Floored at the tail loss
  // probe plus a round trip: the probe is answered before the RTO fires.
  return std::max({kMinRto, srtt_ + 4 * rttvar_, pto() + srtt_});
}

Time RttEstimator::pto() const {
  if (srtt_ == 0) return kInitialRto / 2;
  // Two round trips, or the slowest path plus a margin, plus the
  // responder's delayed ACK.
  return std::max(2 * srtt_, max_rtt_ + srtt_ / 4) + kDelayedAck;
}

Time RttEstimator::reorder_window() const {
  // RACK's default srtt/4; spurious retransmissions widen it (reo_mult).
  return kMinReorderWindow + srtt_ / 4 * reo_mult_;
}

Time RttEstimator::expected_ack(uint8_t path) const {
  if (srtt_ == 0) return kMinRto;  // no RTT yet: be patient rather than spurious
  Time ps = path_srtt_[path % kPaths];
  if (ps == 0) return max_rtt_ + srtt_;  // path not measured yet
  // Out on this path, back on whichever path the ACK takes (at worst the
  // slowest one).
  return (ps + max_rtt_) / 2 + path_rttvar_[path % kPaths];
}

// ---------------- SendScoreboard ----------------

// Small at first: 4 entries (320 B) instead of 64 (4.3 KB), as two million
// QPs of a 1,024-host all-to-all each send a packet or two; both rings
// double as needed (grow, push_lost).
SendScoreboard::SendScoreboard() : ring_(4), mask_(3), lost_(4) {}

void SendScoreboard::reset(uint32_t psn) {
  for (auto& e : ring_) e = TxEntry{};
  una_ = nxt_ = psn;
  report_end_ = psn + 65;
  bytes_in_flight_ = 0;
  beyond_bytes_ = 0;
  beyond_pkts_ = 0;
  pkts_in_flight_ = 0;
  lost_count_ = 0;
  head_ = tail_ = 0;
  rack_seq_ = 0;
  rack_time_ = 0;
  rack_rtt_ = 0;
  lost_head_ = lost_tail_ = 0;
  rnr_.clear();
}

TxEntry* SendScoreboard::find(uint32_t psn) {
  if (static_cast<int32_t>(psn - una_) < 0 || !proto::seq_lt(psn, nxt_)) return nullptr;
  TxEntry& e = slot(psn);
  return e.state != TxState::kFree && e.psn == psn ? &e : nullptr;
}

void SendScoreboard::grow() {
  std::vector<TxEntry> bigger(ring_.size() * 2);
  uint32_t m = static_cast<uint32_t>(bigger.size() - 1);
  for (uint32_t p = una_; p != nxt_; ++p) bigger[p & m] = ring_[p & mask_];
  ring_.swap(bigger);
  mask_ = m;
}

void SendScoreboard::list_append(TxEntry& e) {
  e.send_seq = ++send_seq_;
  e.prev = tail_;
  e.next = 0;
  if (tail_) slot(static_cast<uint32_t>(tail_ - 1)).next = uint64_t{e.psn} + 1;
  else head_ = uint64_t{e.psn} + 1;
  tail_ = uint64_t{e.psn} + 1;
}

void SendScoreboard::list_remove(TxEntry& e) {
  if (e.prev) slot(static_cast<uint32_t>(e.prev - 1)).next = e.next;
  else head_ = e.next;
  if (e.next) slot(static_cast<uint32_t>(e.next - 1)).prev = e.prev;
  else tail_ = e.prev;
  e.prev = e.next = 0;
}

void SendScoreboard::leave_flight(TxEntry& e) {
  list_remove(e);
  bytes_in_flight_ -= e.wire;
  --pkts_in_flight_;
}

TxEntry& SendScoreboard::add_new(uint32_t wqe_seq, uint32_t offset, uint32_t len, uint32_t wire,
                                 uint8_t path, Time now, uint32_t stamp) {
  if (nxt_ - una_ >= ring_.size()) grow();
  TxEntry& e = slot(nxt_);
  e = TxEntry{};
  e.psn = nxt_++;
  e.wqe_seq = wqe_seq;
  e.offset = offset;
  e.len = len;
  e.wire = wire;
  e.path = path;
  e.sent = now;
  e.stamp = stamp;
  e.xmits = 1;
  e.state = TxState::kInFlight;
  list_append(e);
  bytes_in_flight_ += wire;
  ++pkts_in_flight_;
  return e;
}

void SendScoreboard::on_retransmit(TxEntry& e, uint8_t path, Time now, uint32_t stamp) {
  assert(e.state == TxState::kLost);
  --lost_count_;
  e.state = TxState::kInFlight;
  e.sent = now;
  e.stamp = stamp;
  e.path = path;
  ++e.xmits;
  e.lost_by_rack = false;
  list_append(e);
  bytes_in_flight_ += e.wire;
  ++pkts_in_flight_;
}

void SendScoreboard::deliver(TxEntry& e, Time now, const RttEstimator& rtt, AckOutcome* out) {
  if (e.state == TxState::kDelivered || e.state == TxState::kFree) return;
  if (e.state == TxState::kInFlight) leave_flight(e);
  if (e.state == TxState::kLost) --lost_count_;
  if (e.state == TxState::kRnrWait) {
    std::erase_if(rnr_, [&](const RnrWait& w) { return w.psn == e.psn; });
  }
  // RACK: remember the most recently sent delivered packet. A retransmitted
  // packet acknowledged faster than min RTT was the original copy: skip.
  bool ambiguous = e.xmits > 1 && now - e.sent < rtt.min_rtt();
  if (!ambiguous && e.send_seq > rack_seq_) {
    rack_seq_ = e.send_seq;
    rack_rtt_ = now - e.sent;
    rack_time_ = std::max(rack_time_, e.sent);
  }
  e.state = TxState::kDelivered;
  out->newly_acked_bytes += e.wire;
  ++out->newly_acked_pkts;
  out->progress = true;
}

AckOutcome SendScoreboard::on_ack(uint32_t cum, uint64_t sack, Time now,
                                  const RttEstimator& rtt) {
  AckOutcome out;
  if (proto::seq_lt(nxt_, cum)) return out;  // acknowledges PSNs never sent: ignore
  if (proto::seq_lt(report_end_, cum + 65)) {
    report_end_ = cum + 65;
    beyond_bytes_ = 0;  // what lay beyond is within the bitmap now, or unknown
    beyond_pkts_ = 0;
  }
  for (uint32_t p = una_; proto::seq_lt(p, cum); ++p) deliver(slot(p), now, rtt, &out);
  for (uint32_t i = 0; sack && i < 64; ++i, sack >>= 1) {
    if (!(sack & 1)) continue;
    uint32_t p = cum + 1 + i;
    if (TxEntry* e = find(p)) deliver(*e, now, rtt, &out);
  }
  advance_una();
  return out;
}

void SendScoreboard::advance_una() {
  while (una_ != nxt_ && slot(una_).state == TxState::kDelivered) {
    slot(una_).state = TxState::kFree;
    ++una_;
  }
}

void SendScoreboard::on_echo(Time sent, Time rtt) {
  if (sent > rack_time_) {
    rack_time_ = sent;
    rack_rtt_ = rtt;
  }
}

void SendScoreboard::on_unseen_delivery() {
  // Assume PSN order beyond the bitmap: the next in-flight packet there.
  uint32_t p = report_end_ + beyond_pkts_;
  if (!proto::seq_lt(p, nxt_)) return;
  TxEntry& e = slot(p);
  if (e.psn != p || e.state != TxState::kInFlight) return;
  beyond_bytes_ += e.wire;
  ++beyond_pkts_;
}

bool SendScoreboard::echo_delivery(uint32_t echo_ts, uint8_t path, Time now,
                                   const RttEstimator& rtt, AckOutcome* out) {
  // The send-order list holds the in-flight transmissions oldest first, and
  // their stamps rise strictly along it (take_stamp): the echoed one is
  // found before the first younger stamp. It is normally near the head:
  // only packets lost (not yet judged) or overtaken sit before it.
  uint32_t n = 0;
  for (uint64_t i = head_; i && n < kEchoScan; ++n) {
    TxEntry& e = slot(static_cast<uint32_t>(i - 1));
    const int32_t d = static_cast<int32_t>(e.stamp - echo_ts);
    if (d > 0) return false;
    if (d == 0) {
      if (e.path != path) return false;
      // Inside the bitmap an ACK names it by its bit; only beyond is news.
      if (proto::seq_lt(e.psn, report_end_)) return false;
      if (proto::seq_lt(e.psn, report_end_ + beyond_pkts_)) {
        beyond_bytes_ -= std::min<uint64_t>(beyond_bytes_, e.wire);  // counted already
      }
      deliver(e, now, rtt, out);
      return true;
    }
    i = e.next;
  }
  return false;
}

AckOutcome SendScoreboard::on_delivered(uint32_t psn, Time now, const RttEstimator& rtt) {
  AckOutcome out;
  if (TxEntry* e = find(psn)) deliver(*e, now, rtt, &out);
  advance_una();
  return out;
}

void SendScoreboard::push_lost(uint32_t psn) {
  if (lost_tail_ - lost_head_ == lost_.size() && lost_.size() >= 2 * kRecvWindow) {
    // Full of entries resent or delivered since: keep only the lost ones.
    uint32_t n = lost_head_;
    for (uint32_t i = lost_head_; i != lost_tail_; ++i) {
      uint32_t p = lost_[i & (lost_.size() - 1)];
      TxEntry* e = find(p);
      if (e && e->state == TxState::kLost) lost_[n++ & (lost_.size() - 1)] = p;
    }
    lost_tail_ = n;
  }
  if (lost_tail_ - lost_head_ == lost_.size()) {
    std::vector<uint32_t> bigger(lost_.size() * 2);
    uint32_t n = 0;
    for (uint32_t i = lost_head_; i != lost_tail_; ++i) bigger[n++] = lost_[i & (lost_.size() - 1)];
    lost_.swap(bigger);
    lost_head_ = 0;
    lost_tail_ = n;
  }
  lost_[lost_tail_++ & (lost_.size() - 1)] = psn;
}

void SendScoreboard::to_lost(TxEntry& e, bool rack) {
  leave_flight(e);
  e.state = TxState::kLost;
  ++lost_count_;
  e.lost_by_rack = rack;
  push_lost(e.psn);
}

uint64_t SendScoreboard::detect_losses(Time now, const RttEstimator& rtt, Time* recheck,
                                       std::vector<uint8_t>* lost_paths) {
  uint64_t lost = 0;
  *recheck = kNever;
  const Time reo_wnd = rtt.reorder_window();
  // An in-flight packet sent before one known delivered: lost once its
  // acknowledgement is overdue, else looked at again then.
  auto judge = [&](TxEntry& e) {
    const Time deadline = e.sent + std::max(rack_rtt_, rtt.expected_ack(e.path)) + reo_wnd;
    if (deadline > now) {
      *recheck = std::min(*recheck, deadline);
      return;
    }
    lost += e.wire;
    if (lost_paths) lost_paths->push_back(e.path);
    to_lost(e, true);
  };
  // The PSNs the responder's bitmap reports (its cumulative point + 64
  // SACK bits), in PSN order: at most 65 entries.
  uint32_t end = proto::seq_lt(report_end_, nxt_) ? report_end_ : nxt_;
  for (uint32_t p = una_; proto::seq_lt(p, end); ++p) {
    TxEntry& e = slot(p);
    if (e.state != TxState::kInFlight) continue;
    if (e.send_seq >= rack_seq_ && e.sent >= rack_time_) continue;
    judge(e);
  }
  // Beyond the bitmap an ACK names a packet by its echo (echo_delivery):
  // while a hole holds cum the responder acknowledges every packet at once
  // (docs/protocol.md §6.6), so a packet there sent before one delivered
  // and overdue was lost, or its ACK was (then the resend is a duplicate,
  // which widens the reorder window). Send order, oldest first, up to the
  // first sent after the newest delivered; at most kEchoScan looked at.
  // Only a delivery known by PSN counts here (rack_seq_), not on_echo's
  // time: an echo nothing matched may be a resent packet's first copy.
  uint32_t n = 0;
  for (uint64_t i = head_; i && n < kEchoScan; ++n) {
    TxEntry& e = slot(static_cast<uint32_t>(i - 1));
    i = e.next;
    if (e.send_seq >= rack_seq_) break;
    if (!proto::seq_lt(e.psn, end)) judge(e);  // below end: judged above
  }
  return lost;
}

uint64_t SendScoreboard::mark_all_lost() {
  // PSN order, so the oldest hole (which holds the responder's cumulative
  // point and everyone's window) is retransmitted first.
  uint64_t lost = 0;
  for (uint32_t p = una_; pkts_in_flight_ && p != nxt_; ++p) {
    TxEntry& e = slot(p);
    if (e.state != TxState::kInFlight) continue;
    lost += e.wire;
    to_lost(e, false);
  }
  // Nothing is in flight now, so nothing is known to have left beyond the
  // bitmap: the estimate would otherwise hide retransmissions from pipe.
  beyond_bytes_ = 0;
  beyond_pkts_ = 0;
  return lost;
}

void SendScoreboard::mark_lost(uint32_t psn) {
  TxEntry* e = find(psn);
  if (e && e->state == TxState::kInFlight) to_lost(*e, true);
}

bool SendScoreboard::probe_tail() {
  if (!tail_) return false;
  to_lost(slot(static_cast<uint32_t>(tail_ - 1)), true);
  return true;
}

void SendScoreboard::rnr_wait(uint32_t psn, Time until) {
  TxEntry* e = find(psn);
  if (!e || e->state == TxState::kDelivered || e->state == TxState::kRnrWait) return;
  if (e->state == TxState::kInFlight) leave_flight(*e);
  if (e->state == TxState::kLost) --lost_count_;
  // kLost: it stays queued in lost_ but next_lost() skips non-kLost entries.
  e->state = TxState::kRnrWait;
  ++e->rnr_tries;
  rnr_.push_back({psn, until});
}

Time SendScoreboard::next_rnr_release() const {
  Time t = kNever;
  for (const auto& w : rnr_) t = std::min(t, w.until);
  return t;
}

void SendScoreboard::release_rnr(Time now) {
  for (size_t i = 0; i < rnr_.size();) {
    if (rnr_[i].until <= now) {
      TxEntry* e = find(rnr_[i].psn);
      if (e && e->state == TxState::kRnrWait) {
        e->state = TxState::kLost;
        ++lost_count_;
        e->lost_by_rack = false;
        push_lost(e->psn);
      }
      rnr_[i] = rnr_.back();
      rnr_.pop_back();
    } else {
      ++i;
    }
  }
}

TxEntry* SendScoreboard::next_lost() {
  // The oldest hole first: it holds the responder's cumulative point.
  TxEntry& u = slot(una_);
  if (una_ != nxt_ && u.state == TxState::kLost && u.psn == una_) return &u;
  while (lost_head_ != lost_tail_) {
    uint32_t psn = lost_[lost_head_ & (lost_.size() - 1)];
    TxEntry* e = find(psn);
    if (e && e->state == TxState::kLost) return e;
    ++lost_head_;
  }
  return nullptr;
}


}  // namespace metaroce::fw
