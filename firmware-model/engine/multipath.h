// Default multipath policy: per-packet spraying over num_paths entropies by
// smooth weighted round robin; paths that show loss, CE marks or inflated
// RTT lose weight, and the penalty decays back over time. No path's weight
// falls below kMinWeight, so a penalized path keeps carrying a trickle and
// can prove it recovered. docs/congestion.md §3.
#pragma once

#include <cstdint>
#include <vector>

#include "firmware-model/engine/congestion.h"

namespace metaroce::fw {

struct MultipathTuning {
  double min_weight = 0.05;        // floor of a path's weight (weights are in (0, 1])
  double loss_penalty = 0.5;       // weight *= (1 - loss_penalty) per loss
  double ce_penalty = 0.2;         // weight *= (1 - ce_penalty) per CE-marked ACK
  double rtt_penalty = 0.1;        // weight *= (1 - rtt_penalty) per inflated-RTT ACK
  double rtt_inflation = 1.5;      // sample > inflation * best path's srtt ...
  Time rtt_margin_ns = 2'000;      // ... and > best + margin: "inflated"
  Time recovery_half_life_ns = 100'000;  // penalty halves every this many ns
  double srtt_g = 1.0 / 8;         // per-path RTT EWMA gain
  // Packets sent on a path per choice (1: per-packet spraying). A host that
  // batches frames of one path (UDP GSO super-frames) asks for trains; a
  // loss or CE mark on the train's path ends the train.
  uint32_t train = 1;
};

class WeightedSprayPathSelector final : public PathSelectorInterface {
 public:
  WeightedSprayPathSelector(uint32_t num_paths, uint64_t seed, const MultipathTuning& t = {});
  uint8_t next_path(Time now) override;
  void on_ack(uint8_t path, Time rtt, bool ce, Time now) override;
  void on_loss(uint8_t path, Time now) override;
  uint32_t num_paths() const override { return static_cast<uint32_t>(paths_.size()); }

  // Current weight of a path after decay to `now` (tests, counters).
  double weight(uint8_t path, Time now);
  double path_weight(uint8_t path, Time now) const override;

 private:
  struct Path {
    double penalty = 0;   // weight = 1 - penalty, penalty in [0, 1 - min_weight]
    Time updated = 0;     // time the penalty was last decayed
    double current = 0;   // smooth-WRR running credit
    double srtt = 0;      // ns, 0 = no sample yet
  };
  void decay(Path& p, Time now) const;
  void penalize(uint8_t path, double fraction, Time now);
  double min_srtt() const;

  MultipathTuning t_;
  std::vector<Path> paths_;
  uint8_t train_path_ = 0;   // the path of the current train
  uint32_t train_left_ = 0;  // packets it still carries before the next choice
};

}  // namespace metaroce::fw
