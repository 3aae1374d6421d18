#include "tests/simnet/scheduler.h"

namespace metaroce::simnet {

void Scheduler::at(Time t, std::function<void()> fn) {
  q_.push(Event{t < now_ ? now_ : t, seq_++, std::move(fn)});
}

bool Scheduler::step() {
  if (q_.empty()) return false;
  Event e = std::move(const_cast<Event&>(q_.top()));
  q_.pop();
  now_ = e.t;
  ++events_run_;
  e.fn();
  return true;
}

bool Scheduler::run_until(Time limit, const std::function<bool()>& done) {
  if (done && done()) return true;
  while (!q_.empty() && q_.top().t <= limit) {
    step();
    if (done && done()) return true;
  }
  if (now_ < limit) now_ = limit;
  return false;
}

}  // namespace metaroce::simnet
