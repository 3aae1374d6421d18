// docs/congestion.md §3: weighted per-packet spraying with decaying penalties.
#include "firmware-model/engine/multipath.h"

#include <algorithm>
#include <cmath>

namespace metaroce::fw {

WeightedSprayPathSelector::WeightedSprayPathSelector(uint32_t num_paths, uint64_t seed,
                                                     const MultipathTuning& t)
    : t_(t), paths_(std::clamp<uint32_t>(num_paths, 1, 256)) {
  // Stagger the round-robin start per QP so QPs do not march in lockstep.
  const size_t n = paths_.size();
  const uint64_t start = (seed * 0x9E3779B97F4A7C15ull) >> 32;
  for (size_t i = 0; i < n; ++i) {
    paths_[(start + i) % n].current = static_cast<double>(i) / static_cast<double>(n);
  }
}

void WeightedSprayPathSelector::decay(Path& p, Time now) const {
  if (now <= p.updated) return;
  if (p.penalty > 0) {
    const double halves = static_cast<double>(now - p.updated) /
                          static_cast<double>(std::max<Time>(1, t_.recovery_half_life_ns));
    p.penalty *= std::exp2(-halves);
    if (p.penalty < 1e-4) p.penalty = 0;
  }
  p.updated = now;
}

double WeightedSprayPathSelector::weight(uint8_t path, Time now) {
  Path& p = paths_[path % paths_.size()];
  decay(p, now);
  return 1.0 - p.penalty;
}

double WeightedSprayPathSelector::path_weight(uint8_t path, Time now) const {
  Path p = paths_[path % paths_.size()];  // decayed on a copy: observing changes nothing
  decay(p, now);
  return 1.0 - p.penalty;
}

uint8_t WeightedSprayPathSelector::next_path(Time now) {
  if (train_left_ > 0) {
    train_left_--;
    return train_path_;
  }
  // Smooth weighted round robin (as in nginx): every path gains its weight,
  // the richest is chosen and pays the total. Deterministic and exact over
  // any window of sum(weights) picks.
  double total = 0;
  size_t best = 0;
  for (size_t i = 0; i < paths_.size(); ++i) {
    Path& p = paths_[i];
    decay(p, now);
    const double w = 1.0 - p.penalty;
    p.current += w;
    total += w;
    if (p.current > paths_[best].current) best = i;
  }
  paths_[best].current -= total;
  train_path_ = static_cast<uint8_t>(best);
  train_left_ = std::max<uint32_t>(t_.train, 1) - 1;
  return train_path_;
}

void WeightedSprayPathSelector::penalize(uint8_t path, double fraction, Time now) {
  Path& p = paths_[path % paths_.size()];
  if (path % paths_.size() == train_path_) train_left_ = 0;  // choose again, by weight
  decay(p, now);
  const double w = (1.0 - p.penalty) * (1.0 - fraction);
  p.penalty = 1.0 - std::max(w, t_.min_weight);
}

double WeightedSprayPathSelector::min_srtt() const {
  double best = 0;
  for (const Path& p : paths_) {
    if (p.srtt > 0 && (best == 0 || p.srtt < best)) best = p.srtt;
  }
  return best;
}

void WeightedSprayPathSelector::on_ack(uint8_t path, Time rtt, bool ce, Time now) {
  if (path >= paths_.size()) return;
  Path& p = paths_[path];
  if (rtt > 0) {
    const double r = static_cast<double>(rtt);
    p.srtt = p.srtt == 0 ? r : (1 - t_.srtt_g) * p.srtt + t_.srtt_g * r;
    const double best = min_srtt();
    if (best > 0 && p.srtt > t_.rtt_inflation * best &&
        p.srtt > best + static_cast<double>(t_.rtt_margin_ns)) {
      penalize(path, t_.rtt_penalty, now);
    }
  }
  if (ce) penalize(path, t_.ce_penalty, now);
}

void WeightedSprayPathSelector::on_loss(uint8_t path, Time now) {
  if (path >= paths_.size()) return;
  penalize(path, t_.loss_penalty, now);
}

}  // namespace metaroce::fw
