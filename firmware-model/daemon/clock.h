// The daemon's clock: CLOCK_MONOTONIC in ns, read once per loop pass and
// reused for a few calls within it (the engine asks several times per
// packet). One clock for the loop, the queue pump and the soft-NIC host.
#pragma once

#include <cstdint>

#include "firmware-model/engine/hal.h"

namespace metaroce::daemon {

class MonotonicClock final : public fw::ClockInterface {
 public:
  fw::Time now() const override;
  fw::Time read() const;  // a fresh reading (also refreshes now())

 private:
  static constexpr uint32_t kNowReuse = 16;
  mutable fw::Time now_ = 0;
  mutable uint32_t now_reads_ = 0;
};

}  // namespace metaroce::daemon
