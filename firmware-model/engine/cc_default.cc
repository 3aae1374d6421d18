// Default congestion control: Swift-style delay target with DCTCP/DCQCN-style
// ECN fraction, fast start to one BDP, pacing, receiver-credit cap.
// docs/congestion.md §2.
#include "firmware-model/engine/cc_default.h"

#include <algorithm>
#include <cmath>

namespace metaroce::fw {

DefaultCongestionControl::DefaultCongestionControl(const CongestionParams& p,
                                                   const DefaultCcTuning& t)
    : p_(p), t_(t) {
  if (p_.mtu_bytes == 0) p_.mtu_bytes = 1024;
  if (p_.link_bps == 0) p_.link_bps = 25'000'000'000;
  if (p_.base_rtt == 0) p_.base_rtt = 10'000;
  min_cwnd_ = t_.min_window_mtu * p_.mtu_bytes;
  set_base(p_.base_rtt);
  cwnd_ = std::clamp(t_.init_window_bdp * bdp_, min_cwnd_, max_cwnd_);
  srtt_ = static_cast<double>(p_.base_rtt);
}

void DefaultCongestionControl::set_base(Time base) {
  base_ = base;
  bdp_ = static_cast<double>(p_.link_bps) * static_cast<double>(base) / 8e9;
  bdp_ = std::max(bdp_, static_cast<double>(p_.mtu_bytes));
  max_cwnd_ = std::max(t_.max_window_bdp * bdp_, 2.0 * p_.mtu_bytes);
  target_ = static_cast<Time>(t_.target_delay_factor * static_cast<double>(base) +
                              t_.target_delay_extra_ns);
  fs_range_ = t_.flow_scale_range_rtt * static_cast<double>(p_.base_rtt);
  const double span = 1 / std::sqrt(t_.flow_scale_min_mtu) - 1 / std::sqrt(t_.flow_scale_max_mtu);
  fs_alpha_ = span > 0 ? fs_range_ / span : 0;
  fs_beta_ = -fs_alpha_ / std::sqrt(t_.flow_scale_max_mtu);
}

// Swift's flow-based scaling (Kumar et al., SIGCOMM 2020, §3.5): a flow with
// a small window gets a larger target: alpha / sqrt(cwnd in MTUs) + beta ns
// more, clamped to [0, range]. N flows sharing a bottleneck hold
// windows of BDP / N; with one fixed target every one of them reads the
// others' queue as its own and cuts, and at sub-packet windows the link
// idles between their paced packets. Random-loss judgement (below) keeps
// the unscaled target: a queue that small windows tolerate is still a queue.
Time DefaultCongestionControl::target_delay() const {
  if (fs_alpha_ <= 0) return target_;
  const double pkts = std::max(cwnd_ / p_.mtu_bytes, t_.flow_scale_min_mtu);
  const double fs = std::clamp(fs_alpha_ / std::sqrt(pkts) + fs_beta_, 0.0, fs_range_);
  return target_ + static_cast<Time>(fs);
}

void DefaultCongestionControl::observe_base(Time rtt, Time now) {
  if (min_rtt_ == 0 || rtt <= min_rtt_ || now - min_rtt_at_ > kMinRttWindow) {
    if (now - min_rtt_at_ > kMinRttWindow) min_rtt_samples_ = 0;
    min_rtt_ = rtt;
    min_rtt_at_ = now;
  }
  // The minimum of a handful of samples may still include a standing queue:
  // adapt only on a well-populated window, and at most kMaxBaseScale times
  // the configured base.
  if (++min_rtt_samples_ < kMinRttSamples) return;
  Time base = std::clamp(min_rtt_, p_.base_rtt, p_.base_rtt * kMaxBaseScale);
  if (base != base_) set_base(base);
}

bool DefaultCongestionControl::can_decrease(Time now) const {
  // At most one multiplicative decrease per smoothed RTT (Swift §3.1).
  return !decreased_once_ || now >= last_decrease_ + static_cast<Time>(srtt_);
}

void DefaultCongestionControl::decrease(Time now, double factor) {
  cwnd_ *= std::clamp(factor, 1.0 - t_.max_mdf, 1.0);
  last_decrease_ = now;
  decreased_once_ = true;
  clamp();
}

void DefaultCongestionControl::clamp() { cwnd_ = std::clamp(cwnd_, min_cwnd_, max_cwnd_); }

void DefaultCongestionControl::on_ack(const AckSample& s) {
  credit_ = s.credit;
  if (s.newly_acked_bytes) before_timeout_ = 0;  // progress: the timeout is not undone
  const double mtu = p_.mtu_bytes;
  const double acked = static_cast<double>(s.newly_acked_bytes);
  const double pkts = std::max(1.0, std::ceil(acked / mtu));
  // CE fraction over packets, EWMA (DCTCP alpha; DCQCN's rate-based cousin).
  const double ce = std::min(pkts, static_cast<double>(std::max<uint16_t>(s.ce_count, s.ce ? 1 : 0)));
  alpha_ = (1 - t_.ecn_g) * alpha_ + t_.ecn_g * (ce / pkts);
  // rec: one random loss earned per sparse_loss_gap_mtu MTUs acknowledged,
  // banked up to one flight's worth (random_loss).
  const double gap = t_.sparse_loss_gap_mtu * mtu;
  loss_budget_ = std::min(loss_budget_ + acked / gap, std::max(1.0, cwnd_ / gap));
  last_ce_ = ce > 0;
  if (s.rtt > 0) {
    last_rtt_ = s.rtt;
    srtt_ = (1 - t_.srtt_g) * srtt_ + t_.srtt_g * static_cast<double>(s.rtt);
    observe_base(s.rtt, s.now);
  }

  const Time target = target_delay();
  const bool over_delay = s.rtt > target;
  if (ce > 0 || over_delay) {
    if (!can_decrease(s.now)) return;
    double f = 1.0;
    if (over_delay) {
      const double d = static_cast<double>(s.rtt);
      f = 1.0 - t_.delay_beta * (d - static_cast<double>(target)) / d;
    }
    if (ce > 0) f = std::min(f, 1.0 - alpha_ / 2);
    decrease(s.now, f);
    return;
  }
  // Additive increase: ai MTUs per window's worth of acknowledged bytes; below
  // one MTU, ai MTUs per acknowledged packet (Swift's fractional regime,
  // cwnd += ai * num_acked). It was ai * cwnd per packet, a growth of
  // cwnd^2 / MTU per RTT: a window cut to a tenth of a packet regained a
  // hundredth of one per RTT, so a flow that lost its first window in an
  // incast stayed far below its share and finished alone, 640 us after the
  // rest (docs/evaluation.md §8).
  if (cwnd_ >= mtu) {
    cwnd_ += t_.ai_mtu_per_rtt * mtu * acked / cwnd_;
  } else {
    cwnd_ += t_.ai_mtu_per_rtt * mtu * std::min(1.0, acked / mtu);
  }
  clamp();
}

// Sparse random loss (a lossy link, not a queue) leaves the window alone:
// no queue stands behind it (RTT under target, no CE) and it is not part of
// a burst. Each SACK-detected loss used to cut 25%, so 1% random loss held
// the window far below the BDP (issue 15).
//
// Sparse means at most one loss per sparse_loss_gap_mtu MTUs acknowledged
// on average, not since the previous loss detection (rec, issue 15): the
// losses of one flight are detected together, a reorder window after its
// ACKs, with no ACK in between when the flight is shorter than that window
// (a window-limited flow on a long RTT: 2 ms, 50-packet flights). Judged by
// the gap between detections, two random losses in one flight were a
// burst, every 7th loss at 1% cut 25% and the window settled at 200 KB on a
// 1 MB BDP. The budget is banked up to one window's worth (one loss per gap
// of the current window), so a real burst still spends it at once.
bool DefaultCongestionControl::random_loss(uint64_t lost_bytes) const {
  const bool no_queue = last_rtt_ > 0 && last_rtt_ <= target_ && !last_ce_;
  const double pkts = lost_packets(lost_bytes);
  const bool sparse = loss_budget_ >= pkts && pkts <= 2;  // more at once: a burst
  return no_queue && sparse;
}

// lost_bytes counts wire bytes (headers too): two full 4 KiB packets are
// 8280 bytes, more than 2 MTUs, and used to count as a burst of three.
double DefaultCongestionControl::lost_packets(uint64_t lost_bytes) const {
  return std::max(1.0, std::round(static_cast<double>(lost_bytes) / p_.mtu_bytes));
}

void DefaultCongestionControl::on_loss(Time now, uint64_t lost_bytes) {
  if (lost_bytes == 0) return;
  const bool random = random_loss(lost_bytes);
  loss_budget_ = std::max(0.0, loss_budget_ - lost_packets(lost_bytes));
  if (random) {
    ++losses_ignored_;
    return;
  }
  if (!can_decrease(now)) return;
  decrease(now, 1.0 - t_.loss_md);
}

void DefaultCongestionControl::on_timeout(Time now) {
  if (before_timeout_ == 0) before_timeout_ = cwnd_;  // the window before the first of a run
  decrease(now, 1.0 - t_.timeout_md);
}

void DefaultCongestionControl::on_spurious_timeout(Time now) {
  cwnd_ = std::max(cwnd_, before_timeout_);
  before_timeout_ = 0;
  clamp();
  // The ACKs held with the one that proved the timeout spurious carry the
  // stall in their RTT, not a queue: no delay decrease for one more RTT.
  last_decrease_ = now;
  decreased_once_ = true;
}

uint64_t DefaultCongestionControl::window_bytes() const {
  // Never below one MTU: below that, pacing spaces the packets out.
  double w = std::max(cwnd_, static_cast<double>(p_.mtu_bytes));
  if (credit_ != 0) w = std::min(w, static_cast<double>(credit_) * p_.mtu_bytes);
  return static_cast<uint64_t>(w);
}

Time DefaultCongestionControl::next_send_time(Time now, uint32_t bytes) {
  // The gap after the previous departure follows the window as it is now,
  // not as it was when that packet left: a window at the floor (0.05 MTU)
  // spaces packets ~400 us apart at a 4 KB MTU, and an ACK that lifts it
  // to a packet or more used to leave the next departure at the old
  // deadline. In a 64->1 incast the last flow still running sat out that
  // gap alone with the link idle, ~470 us (docs/evaluation.md §8).
  if (sent_ && now < last_send_ + pacing_gap(last_bytes_)) {
    return last_send_ + pacing_gap(last_bytes_);
  }
  // This call commits the departure: the caller sends now.
  sent_ = true;
  last_send_ = now;
  last_bytes_ = bytes;
  return now;
}

Time DefaultCongestionControl::pacing_gap(uint32_t bytes) const {
  double gap = 0;
  if (t_.pacing_line_rate > 0) {
    gap = static_cast<double>(bytes) * 8e9 /
          (static_cast<double>(p_.link_bps) * t_.pacing_line_rate);
  }
  if (cwnd_ < p_.mtu_bytes) {  // sub-packet window: one packet per srtt*mtu/cwnd
    gap = std::max(gap, static_cast<double>(bytes) * srtt_ / cwnd_);
  }
  return static_cast<Time>(gap);
}

// cwnd per smoothed RTT, or the line-rate pacing when that is lower.
uint64_t DefaultCongestionControl::pacing_rate_bps() const {
  if (srtt_ <= 0) return 0;
  double rate = cwnd_ * 8e9 / srtt_;
  if (t_.pacing_line_rate > 0)
    rate = std::min(rate, static_cast<double>(p_.link_bps) * t_.pacing_line_rate);
  return static_cast<uint64_t>(rate);
}

}  // namespace metaroce::fw
