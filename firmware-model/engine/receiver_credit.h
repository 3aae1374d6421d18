// Receiver-driven credit for incast (EQDS/NDP-like): the receiver divides
// its bandwidth-delay product among the QPs currently sending to it, and
// shrinks the pool while its own downlink marks CE. docs/congestion.md §4.
#pragma once

#include <cstdint>
#include <unordered_map>

#include "firmware-model/engine/congestion.h"

namespace metaroce::fw {

struct ReceiverCreditTuning {
  double pool_bdp = 2.0;        // credit pool when uncongested, in BDPs
  double min_pool_bdp = 0.5;    // floor of the pool, in BDPs
  double ce_shrink = 0.05;      // pool *= (1 - ce_shrink) per CE-marked arrival
  double grow_per_pkt = 0.01;   // pool += grow_per_pkt * MTU per clean arrival
  Time active_ns = 0;           // a QP is active if seen within this; 0 = 4 * base_rtt
  uint32_t min_grant = 1;       // packets; every active sender keeps at least this
};

class ReceiverCredit final : public ReceiverCreditInterface {
 public:
  explicit ReceiverCredit(const CongestionParams& p, const ReceiverCreditTuning& t = {});
  uint32_t grant(uint32_t qpn, Time now, bool ce) override;
  void forget(uint32_t qpn) override { last_seen_.erase(qpn); }

  uint32_t active_senders(Time now);
  double pool_packets() const { return pool_ / mtu_; }

 private:
  ReceiverCreditTuning t_;
  double mtu_ = 1024;
  double bdp_ = 0, pool_ = 0, min_pool_ = 0, max_pool_ = 0;  // bytes
  Time active_ns_ = 0;
  Time last_sweep_ = 0;
  uint32_t active_ = 0;
  std::unordered_map<uint32_t, Time> last_seen_;
};

}  // namespace metaroce::fw
