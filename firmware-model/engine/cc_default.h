// The default congestion control ("default"): delay- and ECN-driven window
// control for collective traffic (docs/congestion.md §2). Private to the
// engine; reached through make_congestion_control().
#pragma once

#include <cstdint>

#include "firmware-model/engine/congestion.h"

namespace metaroce::fw {

// Tuning of the default algorithm. Units in the names; defaults and the
// reasoning for each are in docs/congestion.md §2.3.
struct DefaultCcTuning {
  double init_window_bdp = 1.0;     // fast start: initial window in BDPs
  double max_window_bdp = 4.0;      // cap, in BDPs
  double min_window_mtu = 0.05;     // floor, in MTUs (< 1: paced below 1 packet/RTT)
  double ai_mtu_per_rtt = 1.0;      // additive increase per RTT, in MTUs
  double target_delay_factor = 1.5; // target delay = factor * base_rtt
  double target_delay_extra_ns = 2'000;  // + fixed headroom, ns
  double delay_beta = 0.8;          // MD gain on (delay - target) / delay
  double max_mdf = 0.5;             // largest single decrease (fraction)
  double ecn_g = 1.0 / 16;          // EWMA gain of the CE fraction (DCTCP g)
  double loss_md = 0.25;            // decrease on SACK-detected loss, once per RTT
  // A loss is random, not congestion, when the latest RTT sample was under
  // target without CE and losses stay at most one per this many MTUs
  // acknowledged (a budget banked up to one window): it costs no decrease
  // (docs/congestion.md §2.2).
  double sparse_loss_gap_mtu = 16;
  double timeout_md = 0.5;          // decrease on retransmission timeout
  double srtt_g = 1.0 / 8;          // EWMA gain of the smoothed RTT
  // Flow-based target scaling (Swift): the target grows by up to
  // flow_scale_range_rtt configured base RTTs as the window shrinks from
  // flow_scale_max_mtu to flow_scale_min_mtu MTUs (docs/congestion.md §2.1).
  double flow_scale_range_rtt = 8;
  double flow_scale_min_mtu = 0.1;
  double flow_scale_max_mtu = 100;
  double pacing_line_rate = 0;      // >0: also pace at this fraction of link_bps
};

class DefaultCongestionControl final : public CongestionControlInterface {
 public:
  DefaultCongestionControl(const CongestionParams& p, const DefaultCcTuning& t = {});
  void on_ack(const AckSample& s) override;
  void on_loss(Time now, uint64_t lost_bytes) override;
  void on_timeout(Time now) override;
  uint64_t window_bytes() const override;
  Time next_send_time(Time now, uint32_t bytes) override;
  const char* name() const override { return "default"; }
  uint64_t pacing_rate_bps() const override;

  // Observability for tests and counters.
  double cwnd_bytes() const { return cwnd_; }
  double srtt_ns() const { return srtt_; }
  uint64_t losses_ignored() const { return losses_ignored_; }
  double ce_alpha() const { return alpha_; }
  // The delay target for the current window (flow scaling included).
  Time target_delay() const;
  void on_spurious_timeout(Time now) override;

 private:
  bool can_decrease(Time now) const;
  bool random_loss(uint64_t lost_bytes) const;
  double lost_packets(uint64_t lost_bytes) const;
  // Base RTT = max(configured, windowed minimum observed): a soft NIC's host
  // delay is part of every RTT it measures and no target below it can hold.
  void observe_base(Time rtt, Time now);
  void set_base(Time base);
  void decrease(Time now, double factor);
  void clamp();
  // Pacing gap after a departure of `bytes`, at the current window and srtt.
  Time pacing_gap(uint32_t bytes) const;

  CongestionParams p_;
  DefaultCcTuning t_;
  double bdp_ = 0;      // bytes
  double cwnd_ = 0;     // bytes; may be below one MTU (then paced)
  double min_cwnd_ = 0, max_cwnd_ = 0;
  double srtt_ = 0;     // ns
  double alpha_ = 0;    // EWMA of the CE-marked fraction of packets
  Time target_ = 0;     // ns, before flow scaling
  double fs_alpha_ = 0, fs_beta_ = 0, fs_range_ = 0;  // flow scaling, ns
  Time last_decrease_ = 0;
  bool decreased_once_ = false;
  uint32_t credit_ = 0;  // latest receiver grant in packets; 0 = no limit
  // Pacing: the previous departure; the next may leave pacing_gap() after it.
  bool sent_ = false;
  Time last_send_ = 0;
  uint32_t last_bytes_ = 0;
  Time min_rtt_ = 0, min_rtt_at_ = 0;  // windowed minimum RTT (kMinRttWindow)
  Time base_ = 0;        // base RTT in use
  double before_timeout_ = 0;  // cwnd before the last on_timeout (0: none to undo)
  Time last_rtt_ = 0;          // the latest RTT sample (0: none yet)
  bool last_ce_ = false;       // the latest ACK reported CE
  double loss_budget_ = 0;  // random losses allowed now (rec: random_loss)
  uint64_t losses_ignored_ = 0;  // losses judged random (no decrease)
  uint32_t min_rtt_samples_ = 0;
  static constexpr Time kMinRttWindow = 10'000'000'000;  // 10 s, as BBR's min_rtt filter
  static constexpr uint32_t kMinRttSamples = 64;
  static constexpr Time kMaxBaseScale = 8;
};

}  // namespace metaroce::fw
