// Discrete-event scheduler in virtual time (ns). Events at the same time run
// in the order they were scheduled, so runs are deterministic.
#pragma once

#include <cstdint>
#include <functional>
#include <queue>
#include <vector>

namespace metaroce::simnet {

using Time = uint64_t;  // ns, same unit as fw::Time

class Scheduler {
 public:
  void at(Time t, std::function<void()> fn);
  void after(Time delay, std::function<void()> fn) { at(now_ + delay, std::move(fn)); }
  Time now() const { return now_; }
  // Runs the next event; false when none is left.
  bool step();
  // Runs events until none are left, virtual time would pass `limit`, or
  // `done()` returns true (checked after each event). Returns true if
  // done() became true.
  bool run_until(Time limit, const std::function<bool()>& done = nullptr);
  bool empty() const { return q_.empty(); }
  uint64_t events_run() const { return events_run_; }

 private:
  struct Event {
    Time t;
    uint64_t seq;
    std::function<void()> fn;
  };
  struct Later {
    bool operator()(const Event& a, const Event& b) const {
      return a.t != b.t ? a.t > b.t : a.seq > b.seq;
    }
  };
  std::priority_queue<Event, std::vector<Event>, Later> q_;
  Time now_ = 0;
  uint64_t seq_ = 0;
  uint64_t events_run_ = 0;
};

}  // namespace metaroce::simnet
