// The engine's index of QP deadlines (docs/engine.md §Timers): a lazy
// min-heap of (deadline, QPN), so next_deadline() and on_timer() cost
// O(log n) per change instead of a scan over every QP.
//
// Whatever may change a QP's deadlines marks it (mark(): the engine marks
// the QP an entry point names, every QP the pump runs, activates, moves to
// ERR or whose timers fire). Marks are read lazily: refresh() asks the
// engine for each marked QP's deadline before any question is answered.
// A heap entry whose QP or deadline changed since it was pushed is stale
// and skipped when it reaches the top; the heap is rebuilt when stale
// entries outnumber live ones.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "firmware-model/engine/types.h"

namespace metaroce::fw {

class TimerIndex {
 public:
  // deadline(qpn): the QP's earliest deadline, kNever when it has none or
  // no longer exists.
  using DeadlineFn = std::function<Time(uint32_t qpn)>;
  explicit TimerIndex(uint32_t index_mask) : mask_(index_mask) {}

  void mark(uint32_t qpn);
  void forget(uint32_t qpn);  // the QP is destroyed
  // Applies the marks, then the earliest live deadline (kNever: none).
  Time next(const DeadlineFn& deadline);
  // Applies the marks, then takes every QP due at `now` (each once) out of
  // the index and marks it again: its timers run and change its deadline.
  void take_due(Time now, const DeadlineFn& deadline, std::vector<uint32_t>* due);
  size_t heap_size() const { return heap_.size(); }  // live and stale entries

 private:
  struct Entry {
    Time at;
    uint32_t qpn;
    bool operator>(const Entry& o) const { return at > o.at; }
  };
  struct Slot {
    uint32_t qpn = 0;
    Time at = kNever;     // the deadline in the heap for this slot (kNever: none)
    bool marked = false;
  };
  void refresh(const DeadlineFn& deadline);
  Slot& slot(uint32_t qpn);
  bool live(const Entry& e) const;
  void drop_stale_top();
  void rebuild();

  uint32_t mask_;
  std::vector<Slot> slots_;      // by QPN index
  std::vector<uint32_t> marked_;
  std::vector<Entry> heap_;      // std::push_heap with greater<>: earliest on top
  size_t live_ = 0;              // slots with a deadline in the heap
};

}  // namespace metaroce::fw
