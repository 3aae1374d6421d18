// Unit tests of the default multipath policy (multipath.cc).
#include <doctest/doctest.h>

#include <array>

#include "firmware-model/engine/multipath.h"

namespace metaroce::fw {
namespace {

std::array<int, 4> spray(WeightedSprayPathSelector& s, int n, Time now) {
  std::array<int, 4> c{};
  for (int i = 0; i < n; ++i) c.at(s.next_path(now))++;
  return c;
}

TEST_CASE("multipath__equal_weights_round_robin_exactly") {
  WeightedSprayPathSelector s(4, 7);
  auto c = spray(s, 400, 0);
  for (int x : c) CHECK(x == 100);
}

TEST_CASE("multipath__consecutive_picks_cover_all_paths") {
  WeightedSprayPathSelector s(4, 3);
  std::array<int, 4> c{};
  for (int i = 0; i < 4; ++i) c.at(s.next_path(0))++;
  for (int x : c) CHECK(x == 1);
}

// Trains (a host that batches one path's frames into UDP GSO super-frames):
// `train` packets per choice, the same shares as per-packet spraying, and a
// loss on the train's path ends the train at once.
TEST_CASE("multipath__trains_keep_a_path_for_train_packets_with_equal_shares") {
  MultipathTuning t;
  t.train = 8;
  WeightedSprayPathSelector s(4, 3, t);
  std::array<int, 4> c{};
  uint8_t train = 0;
  for (int i = 0; i < 320; ++i) {  // 40 trains: 10 per path
    uint8_t p = s.next_path(0);
    if (i % 8 == 0) {
      if (i) CHECK(p != train);
      train = p;
    }
    CHECK(p == train);
    c.at(p)++;
  }
  for (int x : c) CHECK(x == 80);
}

TEST_CASE("multipath__a_loss_on_the_trains_path_ends_the_train") {
  MultipathTuning t;
  t.train = 16;
  WeightedSprayPathSelector s(4, 5, t);
  uint8_t p = s.next_path(0);
  CHECK(s.next_path(0) == p);
  s.on_loss(static_cast<uint8_t>((p + 1) % 4), 0);  // another path: the train goes on
  CHECK(s.next_path(0) == p);
  s.on_loss(p, 0);
  CHECK(s.next_path(0) != p);  // chosen again, by weight: the penalized path is not next
}

TEST_CASE("multipath__loss_moves_traffic_away") {
  WeightedSprayPathSelector s(4, 1);
  s.on_loss(2, 0);
  s.on_loss(2, 0);
  CHECK(s.weight(2, 0) == doctest::Approx(0.25));
  auto c = spray(s, 3250, 0);
  CHECK(c[2] < c[0] / 3);
  CHECK(c[2] > 0);
}

TEST_CASE("multipath__never_starves_a_path") {
  WeightedSprayPathSelector s(4, 1);
  for (int i = 0; i < 100; ++i) s.on_loss(1, 0);
  CHECK(s.weight(1, 0) == doctest::Approx(0.05));
  auto c = spray(s, 3050, 0);
  CHECK(c[1] >= 45);
}

TEST_CASE("multipath__penalty_decays_back") {
  WeightedSprayPathSelector s(4, 1);
  s.on_loss(0, 0);
  CHECK(s.weight(0, 0) == doctest::Approx(0.5));
  CHECK(s.weight(0, 100'000) == doctest::Approx(0.75));  // one half-life
  CHECK(s.weight(0, 10'000'000) == doctest::Approx(1.0));
}

TEST_CASE("multipath__ce_mark_penalizes") {
  WeightedSprayPathSelector s(4, 1);
  s.on_ack(3, 10'000, true, 0);
  CHECK(s.weight(3, 0) == doctest::Approx(0.8));
  s.on_ack(2, 10'000, false, 0);
  CHECK(s.weight(2, 0) == doctest::Approx(1.0));
}

TEST_CASE("multipath__inflated_rtt_penalizes") {
  WeightedSprayPathSelector s(4, 1);
  for (int i = 0; i < 20; ++i) {
    s.on_ack(0, 10'000, false, 0);
    s.on_ack(1, 10'000, false, 0);
  }
  s.on_ack(1, 100'000, false, 0);  // srtt jumps to ~21 us: > 1.5x and > +2 us
  CHECK(s.weight(1, 0) < 1.0);
  CHECK(s.weight(0, 0) == doctest::Approx(1.0));
}

TEST_CASE("multipath__out_of_range_path_ignored") {
  WeightedSprayPathSelector s(2, 1);
  s.on_loss(9, 0);
  s.on_ack(9, 1, true, 0);
  CHECK(s.weight(0, 0) == doctest::Approx(1.0));
  CHECK(s.weight(1, 0) == doctest::Approx(1.0));
}

TEST_CASE("multipath__single_path") {
  WeightedSprayPathSelector s(1, 1);
  for (int i = 0; i < 10; ++i) CHECK(s.next_path(i) == 0);
}

}  // namespace
}  // namespace metaroce::fw
