#include "firmware-model/daemon/clock.h"

#include <time.h>

namespace metaroce::daemon {

fw::Time MonotonicClock::read() const {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  now_ = static_cast<fw::Time>(ts.tv_sec) * 1'000'000'000 + static_cast<fw::Time>(ts.tv_nsec);
  now_reads_ = 0;
  return now_;
}

// clock_gettime was 5-7% of the daemon's CPU in perf. Within one loop pass
// a reading is reused for up to kNowReuse calls (a few microseconds at
// most); every pass starts with a fresh one.
fw::Time MonotonicClock::now() const {
  if (++now_reads_ >= kNowReuse || now_ == 0) return read();
  return now_;
}

}  // namespace metaroce::daemon
