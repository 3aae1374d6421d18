// Factories for congestion control, multipath and receiver credit
// (firmware-model/engine/congestion.h, docs/congestion.md).
#include "firmware-model/engine/congestion.h"

#include "firmware-model/engine/cc_default.h"
#include "firmware-model/engine/multipath.h"
#include "firmware-model/engine/receiver_credit.h"

namespace metaroce::fw {

std::unique_ptr<CongestionControlInterface> make_congestion_control(const std::string& name,
                                                                    const CongestionParams& p) {
  if (name == "default" || name == "swift") return std::make_unique<DefaultCongestionControl>(p);
  return nullptr;
}

std::unique_ptr<PathSelectorInterface> make_path_selector(uint32_t num_paths, uint64_t seed,
                                                          uint32_t train) {
  MultipathTuning t;
  t.train = train;
  return std::make_unique<WeightedSprayPathSelector>(num_paths, seed, t);
}

std::unique_ptr<ReceiverCreditInterface> make_receiver_credit(const CongestionParams& p) {
  return std::make_unique<ReceiverCredit>(p);
}

}  // namespace metaroce::fw
