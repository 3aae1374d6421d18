// docs/congestion.md §4: receiver credit.
#include "firmware-model/engine/receiver_credit.h"

#include <algorithm>
#include <cmath>

namespace metaroce::fw {

ReceiverCredit::ReceiverCredit(const CongestionParams& p, const ReceiverCreditTuning& t) : t_(t) {
  mtu_ = p.mtu_bytes ? p.mtu_bytes : 1024;
  const double link = p.link_bps ? static_cast<double>(p.link_bps) : 25e9;
  const Time base_rtt = p.base_rtt ? p.base_rtt : 10'000;
  bdp_ = std::max(mtu_, link * static_cast<double>(base_rtt) / 8e9);
  max_pool_ = t_.pool_bdp * bdp_;
  min_pool_ = t_.min_pool_bdp * bdp_;
  pool_ = max_pool_;
  active_ns_ = t_.active_ns ? t_.active_ns : 4 * base_rtt;
}

uint32_t ReceiverCredit::active_senders(Time now) {
  // Sweep at most once per active window: O(QPs) amortized over many packets.
  if (now >= last_sweep_ + active_ns_ / 4 || active_ == 0) {
    uint32_t n = 0;
    for (auto it = last_seen_.begin(); it != last_seen_.end();) {
      if (now > it->second + active_ns_) {
        it = last_seen_.erase(it);
      } else {
        ++n;
        ++it;
      }
    }
    active_ = n;
    last_sweep_ = now;
  }
  return std::max<uint32_t>(active_, 1);
}

uint32_t ReceiverCredit::grant(uint32_t qpn, Time now, bool ce) {
  auto [it, inserted] = last_seen_.try_emplace(qpn, now);
  it->second = now;
  if (inserted) ++active_;
  if (ce) {
    pool_ = std::max(min_pool_, pool_ * (1.0 - t_.ce_shrink));
  } else {
    pool_ = std::min(max_pool_, pool_ + t_.grow_per_pkt * mtu_);
  }
  const double share = pool_ / mtu_ / active_senders(now);
  return std::max<uint32_t>(t_.min_grant, static_cast<uint32_t>(std::ceil(share)));
}

}  // namespace metaroce::fw
