#include "firmware-model/engine/timer_index.h"

#include <algorithm>

namespace metaroce::fw {

TimerIndex::Slot& TimerIndex::slot(uint32_t qpn) {
  uint32_t i = qpn & mask_;
  if (i >= slots_.size()) slots_.resize(i + 1);
  return slots_[i];
}

void TimerIndex::mark(uint32_t qpn) {
  Slot& s = slot(qpn);
  if (s.marked && s.qpn == qpn) return;
  if (s.qpn != qpn) {  // a new QP in this slot: the old one's entries are stale
    if (s.at != kNever) --live_;
    s.at = kNever;
    s.qpn = qpn;
  }
  s.marked = true;
  marked_.push_back(qpn);
}

void TimerIndex::forget(uint32_t qpn) {
  Slot& s = slot(qpn);
  if (s.qpn != qpn) return;
  if (s.at != kNever) --live_;
  s.at = kNever;
  s.marked = false;  // a stale QPN left in marked_ is skipped by refresh()
}

void TimerIndex::refresh(const DeadlineFn& deadline) {
  for (uint32_t qpn : marked_) {
    Slot& s = slot(qpn);
    if (s.qpn != qpn || !s.marked) continue;
    s.marked = false;
    Time t = deadline(qpn);
    if (t == s.at) continue;
    if (s.at == kNever) ++live_;
    if (t == kNever) --live_;
    s.at = t;
    if (t != kNever) {
      heap_.push_back({t, qpn});
      std::push_heap(heap_.begin(), heap_.end(), std::greater<>());
    }
  }
  marked_.clear();
  if (heap_.size() > 4 * live_ + 64) rebuild();
}

bool TimerIndex::live(const Entry& e) const {
  uint32_t i = e.qpn & mask_;
  return i < slots_.size() && slots_[i].qpn == e.qpn && slots_[i].at == e.at;
}

void TimerIndex::drop_stale_top() {
  while (!heap_.empty() && !live(heap_.front())) {
    std::pop_heap(heap_.begin(), heap_.end(), std::greater<>());
    heap_.pop_back();
  }
}

void TimerIndex::rebuild() {
  heap_.clear();
  for (const Slot& s : slots_)
    if (s.at != kNever) heap_.push_back({s.at, s.qpn});
  std::make_heap(heap_.begin(), heap_.end(), std::greater<>());
}

Time TimerIndex::next(const DeadlineFn& deadline) {
  refresh(deadline);
  drop_stale_top();
  return heap_.empty() ? kNever : heap_.front().at;
}

void TimerIndex::take_due(Time now, const DeadlineFn& deadline, std::vector<uint32_t>* due) {
  refresh(deadline);
  due->clear();
  for (drop_stale_top(); !heap_.empty() && heap_.front().at <= now; drop_stale_top()) {
    uint32_t qpn = heap_.front().qpn;
    std::pop_heap(heap_.begin(), heap_.end(), std::greater<>());
    heap_.pop_back();
    Slot& s = slot(qpn);
    s.at = kNever;  // out of the heap; its timers run, then the mark puts it back
    --live_;
    due->push_back(qpn);
    mark(qpn);
  }
}

}  // namespace metaroce::fw
