// timer_index.{h,cc}: the engine's lazy min-heap of QP deadlines.
#include <doctest/doctest.h>

#include <map>

#include "firmware-model/engine/timer_index.h"

namespace metaroce::fw {

namespace {
struct Qps {
  std::map<uint32_t, Time> at;  // live QPs and their deadlines
  TimerIndex::DeadlineFn fn() {
    return [this](uint32_t qpn) {
      auto it = at.find(qpn);
      return it == at.end() ? kNever : it->second;
    };
  }
};
}  // namespace

TEST_CASE("timer_index__marks_are_read_when_asked") {
  Qps q;
  TimerIndex t(0xFFF);
  CHECK(t.next(q.fn()) == kNever);
  q.at = {{0x1002, 500}, {0x1003, 300}};
  CHECK(t.next(q.fn()) == kNever);  // not marked: not known
  t.mark(0x1002);
  t.mark(0x1003);
  CHECK(t.next(q.fn()) == 300);
}

TEST_CASE("timer_index__a_moved_deadline_leaves_only_a_stale_entry") {
  Qps q;
  TimerIndex t(0xFFF);
  q.at = {{0x1002, 500}, {0x1003, 300}};
  t.mark(0x1002);
  t.mark(0x1003);
  REQUIRE(t.next(q.fn()) == 300);
  q.at[0x1003] = 900;  // later: the entry at 300 is stale
  t.mark(0x1003);
  CHECK(t.next(q.fn()) == 500);
  q.at[0x1002] = kNever;  // no timer any more
  t.mark(0x1002);
  CHECK(t.next(q.fn()) == 900);
}

TEST_CASE("timer_index__take_due_hands_each_due_qp_once_and_marks_it_again") {
  Qps q;
  TimerIndex t(0xFFF);
  q.at = {{0x1002, 100}, {0x1003, 100}, {0x1004, 700}};
  for (auto& [qpn, _] : q.at) t.mark(qpn);
  q.at[0x1002] = 100;
  t.mark(0x1002);  // marked twice, one entry
  std::vector<uint32_t> due;
  t.take_due(200, q.fn(), &due);
  CHECK(due == std::vector<uint32_t>{0x1002, 0x1003});
  // Their timers did not move the deadline: still due, so back in the index.
  CHECK(t.next(q.fn()) == 100);
  q.at[0x1002] = q.at[0x1003] = 800;  // now they ran
  t.take_due(200, q.fn(), &due);
  CHECK(t.next(q.fn()) == 700);
}

TEST_CASE("timer_index__destroyed_and_reused_slots_are_not_confused") {
  Qps q;
  TimerIndex t(0xFFF);
  q.at = {{0x1002, 100}};
  t.mark(0x1002);
  REQUIRE(t.next(q.fn()) == 100);
  q.at.erase(0x1002);
  t.forget(0x1002);
  CHECK(t.next(q.fn()) == kNever);
  q.at = {{0x2002, 400}};  // same slot (index 2), next generation
  t.mark(0x2002);
  CHECK(t.next(q.fn()) == 400);
  std::vector<uint32_t> due;
  t.take_due(500, q.fn(), &due);
  CHECK(due == std::vector<uint32_t>{0x2002});
}

TEST_CASE("timer_index__stale_entries_are_bounded") {
  Qps q;
  TimerIndex t(0xFFF);
  q.at = {{0x1002, 1}};
  for (Time i = 1; i < 100'000; ++i) {  // an RTO re-armed on every ACK
    q.at[0x1002] = 1'000'000 + i;
    t.mark(0x1002);
    REQUIRE(t.next(q.fn()) == 1'000'000 + i);
  }
  CHECK(t.heap_size() <= 4 + 64);
}

}  // namespace metaroce::fw
