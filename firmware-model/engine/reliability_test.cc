// reliability.{h,cc}: receive window, timers, RTT estimator, scoreboard.
#include <doctest/doctest.h>

#include "firmware-model/engine/reliability.h"

namespace metaroce::fw {

TEST_CASE("recv_window__in_order_advances_cum") {
  RecvWindow w;
  w.reset(100);
  for (uint32_t p = 100; p < 110; ++p) {
    CHECK(w.classify(p) == RecvWindow::Verdict::kNew);
    w.mark(p);
  }
  CHECK(w.cum() == 110);
  CHECK(w.sack() == 0);
  CHECK(w.classify(105) == RecvWindow::Verdict::kDuplicate);
}

TEST_CASE("recv_window__out_of_order_sack_bits_then_fill") {
  RecvWindow w;
  w.reset(100);
  w.mark(102);
  w.mark(105);
  CHECK(w.cum() == 100);
  CHECK(w.sack() == ((1u << 1) | (1u << 4)));  // bit i = cum + 1 + i
  CHECK(w.classify(102) == RecvWindow::Verdict::kDuplicate);
  w.mark(100);
  CHECK(w.cum() == 101);
  CHECK(w.sack() == ((1u << 0) | (1u << 3)));
  w.mark(101);
  CHECK(w.cum() == 103);
  CHECK(w.sack() == (1u << 1));
}

TEST_CASE("recv_window__out_of_window_and_wraparound") {
  RecvWindow w;
  w.reset(0xFFFFFFF0u);
  CHECK(w.classify(0xFFFFFFF0u + kRecvWindow) == RecvWindow::Verdict::kOutOfWindow);
  CHECK(w.classify(0xFFFFFFEFu) == RecvWindow::Verdict::kDuplicate);
  for (uint32_t i = 0; i < 40; ++i) w.mark(0xFFFFFFF0u + i);
  CHECK(w.cum() == 0xFFFFFFF0u + 40);
  CHECK(w.cum() == 24);
  // A long run in and out of order across the ring wraps cleanly.
  for (uint32_t i = 0; i < 3 * kRecvWindow; i += 2) w.mark(24 + i + 1), w.mark(24 + i);
  CHECK(w.cum() == 24 + 3 * kRecvWindow);
  CHECK(w.sack() == 0);
}

TEST_CASE("recv_window__sack_spans_word_boundary") {
  RecvWindow w;
  w.reset(60);
  w.mark(130);  // cum + 70: beyond the bitmap
  w.mark(124);  // bit 63
  w.mark(62);   // bit 1
  CHECK(w.sack() == ((uint64_t{1} << 63) | 2));
}

TEST_CASE("timers__ib_encodings") {
  CHECK(ib_timeout_ns(0) == kNever);
  CHECK(ib_timeout_ns(1) == 8192);
  CHECK(ib_timeout_ns(14) == 4096ull << 14);
  CHECK(rnr_timer_ns(1) == 10'000);
  CHECK(rnr_timer_ns(12) == 640'000);
  CHECK(rnr_timer_ns(0) == 655'360'000);
  CHECK(rnr_timer_ns(31) == 491'520'000);
}

TEST_CASE("rtt_estimator__rto_floor_and_path_expectation") {
  RttEstimator r;
  CHECK(r.rto() == kInitialRto);
  for (int i = 0; i < 50; ++i) r.sample(10'000, 0);
  CHECK(r.srtt() == 10'000);
  CHECK(r.rto() == kMinRto);
  for (int i = 0; i < 50; ++i) {
    r.sample(10'000, 0);
    r.sample(40'000, 1);
  }
  CHECK(r.expected_ack(1) > r.expected_ack(0));
  CHECK(r.expected_ack(1) >= 40'000);
}

// READ responses' lateness: the largest measured at once, forgotten by
// 1/16 of the difference with each smaller one; 0 until one is measured
// (then the READ hole check waits the reorder window alone).
TEST_CASE("rtt_estimator__response_lateness_rises_at_once_and_decays") {
  RttEstimator r;
  for (int i = 0; i < 50; ++i) r.sample(2'000'000 + (i % 2) * 2'000'000, 0);
  CHECK(r.response_lateness() == 0);  // queueing in RTT samples is not lateness
  r.on_late_response(100'000);
  CHECK(r.response_lateness() == 100'000);
  r.on_late_response(0);
  CHECK(r.response_lateness() == 100'000 - 100'000 / 16);
  for (int i = 0; i < 200; ++i) r.on_late_response(10'000);
  CHECK(r.response_lateness() < 11'000);
  r.on_late_response(50'000);
  CHECK(r.response_lateness() == 50'000);
}

namespace {
struct Board {
  SendScoreboard sb;
  RttEstimator rtt;
  Time now = 1'000'000;
  Board() {
    sb.reset(1000);
    for (int i = 0; i < 50; ++i) rtt.sample(10'000, 0);
  }
  void send(int n, uint8_t path = 0) {
    for (int i = 0; i < n; ++i) sb.add_new(0, 0, 1000, 1000, path, now, sb.take_stamp(now));
  }
};
}  // namespace

TEST_CASE("scoreboard__cumulative_and_selective_ack") {
  Board b;
  b.send(10);
  CHECK(b.sb.pkts_in_flight() == 10);
  CHECK(b.sb.bytes_in_flight() == 10'000);
  b.now += 10'000;
  AckOutcome o = b.sb.on_ack(1003, 0b101, b.now, b.rtt);  // 1000-1002, 1004, 1006
  CHECK(o.newly_acked_pkts == 5);
  CHECK(o.progress);
  CHECK(b.sb.una() == 1003);
  CHECK(b.sb.pkts_in_flight() == 5);
  CHECK(b.sb.delivered(1004));
  CHECK_FALSE(b.sb.delivered(1005));
  o = b.sb.on_ack(1003, 0b101, b.now, b.rtt);  // same again: nothing new
  CHECK_FALSE(o.progress);
  o = b.sb.on_ack(2000, 0, b.now, b.rtt);  // beyond nxt: ignored
  CHECK_FALSE(o.progress);
}

TEST_CASE("scoreboard__rack_waits_for_the_reorder_window") {
  Board b;
  b.send(1);  // 1000
  b.now += 1'000;
  b.send(1);  // 1001, sent later
  b.now += 10'000;
  b.sb.on_ack(1000, 0b1, b.now, b.rtt);  // 1001 SACKed, 1000 not
  Time recheck = 0;
  CHECK(b.sb.detect_losses(b.now, b.rtt, &recheck, nullptr) == 0);  // still in window
  CHECK(recheck != kNever);
  CHECK(b.sb.lost_count() == 0);
  b.now = recheck;
  CHECK(b.sb.detect_losses(b.now, b.rtt, &recheck, nullptr) == 1000);
  TxEntry* e = b.sb.next_lost();
  REQUIRE(e);
  CHECK(e->psn == 1000);
}

TEST_CASE("scoreboard__rack_never_judges_packets_sent_after_the_delivered_one") {
  Board b;
  b.send(1);  // 1000
  b.now += 1'000;
  b.send(1);  // 1001
  b.now += 100'000;
  b.sb.on_ack(1001, 0, b.now, b.rtt);  // 1000 delivered; 1001 sent after it
  Time recheck = 0;
  CHECK(b.sb.detect_losses(b.now, b.rtt, &recheck, nullptr) == 0);
  CHECK(b.sb.lost_count() == 0);
}

TEST_CASE("scoreboard__rack_ignores_psns_beyond_the_sack_bitmap") {
  Board b;
  b.send(100);
  b.now += 500'000;
  b.sb.on_echo(b.now - 10'000, 10'000);  // something sent recently was delivered
  b.sb.on_ack(1000, 0, b.now, b.rtt);    // ...but nothing reportable
  Time recheck = 0;
  b.sb.detect_losses(b.now, b.rtt, &recheck, nullptr);
  CHECK(b.sb.lost_count() == 65);  // cum .. cum+64 only
}

// rec (issue 15): a hole holds cum; the ACKs of packets beyond cum + 64
// carry no SACK bit for them. Each such ACK (not a duplicate's) frees the
// window of one packet (pipe_bytes) without marking any PSN delivered, and
// the estimate is dropped once cum moves. Without it a window over 64
// packets stalled for a round trip behind every loss (1 ms each way, 1 %).
TEST_CASE("scoreboard__acks_beyond_the_sack_bitmap_free_the_window_not_the_psns") {
  Board b;
  b.send(200);  // 1000 .. 1199; 1000 lost
  b.now += 10'000;
  AckOutcome o = b.sb.on_ack(1000, ~uint64_t{0}, b.now, b.rtt);  // 1001 .. 1064 SACKed
  CHECK(o.newly_acked_pkts == 64);
  CHECK(b.sb.pipe_bytes() == 136'000);
  for (int i = 0; i < 10; ++i) {  // 1065 .. 1074 arrive: the same ACK each time
    CHECK_FALSE(b.sb.on_ack(1000, ~uint64_t{0}, b.now, b.rtt).progress);
    b.sb.on_unseen_delivery();
  }
  CHECK(b.sb.bytes_in_flight() == 136'000);  // nothing marked delivered
  CHECK(b.sb.pipe_bytes() == 126'000);
  CHECK_FALSE(b.sb.delivered(1065));
  for (int i = 0; i < 200; ++i) b.sb.on_unseen_delivery();  // bounded by what is in flight
  CHECK(b.sb.pipe_bytes() == 136'000 - 135'000);
  b.sb.on_ack(1065, 0, b.now, b.rtt);  // the hole is repaired: cum moves
  CHECK(b.sb.pipe_bytes() == b.sb.bytes_in_flight());
  CHECK(b.sb.bytes_in_flight() == 135'000);
}

// A hole holds cum, and no SACK bit can name a packet more than 64 PSNs
// past it; the ACK it triggered still echoes its timestamp, unique per QP
// (take_stamp), so it is delivered, and RACK judges the packets beyond the
// bitmap sent before it. Without it a window over 64 packets recovered one
// hole per round trip: recovery_net_test's write at 1 % loss + 1 ms was at
// 0.41 of the clean path (0.90 with it).
TEST_CASE("scoreboard__an_echo_names_a_packet_beyond_the_sack_bitmap") {
  Board b;
  b.send(200);  // 1000 .. 1199, all in one nanosecond
  for (uint32_t p = 1001; p < 1200; ++p) {
    CHECK(static_cast<int32_t>(b.sb.find(p)->stamp - b.sb.find(p - 1)->stamp) == 1);
  }
  const uint32_t s1100 = b.sb.find(1100)->stamp, s1101 = b.sb.find(1101)->stamp;
  const uint32_t s1030 = b.sb.find(1030)->stamp;
  b.now += 10'000;
  b.sb.on_ack(1000, ~uint64_t{0}, b.now, b.rtt);  // 1000 lost; 1001 .. 1064 SACKed
  AckOutcome o;
  CHECK_FALSE(b.sb.echo_delivery(s1101, 1, b.now, b.rtt, &o));  // not its path
  CHECK_FALSE(b.sb.echo_delivery(s1030, 0, b.now, b.rtt, &o));  // the bitmap named it
  CHECK_FALSE(b.sb.echo_delivery(s1100 + 1000, 0, b.now, b.rtt, &o));  // never sent
  CHECK(o.newly_acked_pkts == 0);
  REQUIRE(b.sb.echo_delivery(s1100, 0, b.now, b.rtt, &o));
  CHECK(o.newly_acked_pkts == 1);
  CHECK(b.sb.delivered(1100));
  CHECK_FALSE(b.sb.delivered(1099));
  b.now += 100'000;
  Time recheck = 0;
  b.sb.detect_losses(b.now, b.rtt, &recheck, nullptr);
  CHECK(b.sb.lost_count() == 1 + 35);  // 1000 and 1065 .. 1099, sent before 1100
  CHECK(b.sb.find(1101)->state == TxState::kInFlight);
}

TEST_CASE("scoreboard__stamps_rise_across_the_32_bit_wrap") {
  SendScoreboard sb;
  const Time t = (Time{1} << 32) - 2;
  CHECK(sb.take_stamp(t) == 0xFFFFFFFEu);
  CHECK(sb.take_stamp(t) == 0xFFFFFFFFu);
  CHECK(sb.take_stamp(t) == 0u);
  CHECK(sb.take_stamp(t + 1) == 1u);  // the clock is behind the stamps: +1
  CHECK(sb.take_stamp(t + 10) == static_cast<uint32_t>(t + 10));
}

// After a timeout nothing is in flight, so the beyond-bitmap estimate must
// go too: kept, it would hide the retransmissions from pipe_bytes and let
// the sender put up to the whole estimate on top of its window.
TEST_CASE("scoreboard__rto_drops_the_beyond_bitmap_estimate") {
  Board b;
  b.send(200);
  b.now += 10'000;
  b.sb.on_ack(1000, ~uint64_t{0}, b.now, b.rtt);
  for (int i = 0; i < 10; ++i) b.sb.on_unseen_delivery();
  REQUIRE(b.sb.pipe_bytes() < b.sb.bytes_in_flight());
  b.sb.mark_all_lost();
  CHECK(b.sb.bytes_in_flight() == 0);
  for (int i = 0; i < 3; ++i) b.sb.on_retransmit(*b.sb.next_lost(), 0, b.now);
  CHECK(b.sb.bytes_in_flight() > 0);
  CHECK(b.sb.pipe_bytes() == b.sb.bytes_in_flight());
}

TEST_CASE("scoreboard__rto_marks_in_psn_order_and_una_goes_first") {
  Board b;
  b.send(3);
  b.sb.mark_lost(1002);
  b.sb.mark_all_lost();
  CHECK(b.sb.lost_count() == 3);
  CHECK(b.sb.next_lost()->psn == 1000);  // una, although 1002 was queued first
  TxEntry* e = b.sb.next_lost();
  b.sb.on_retransmit(*e, 1, b.now);
  CHECK(b.sb.next_lost()->psn == 1002);
  CHECK(b.sb.pkts_in_flight() == 1);
}

TEST_CASE("scoreboard__rnr_wait_then_release") {
  Board b;
  b.send(2);
  b.sb.rnr_wait(1000, b.now + 5'000);
  CHECK(b.sb.pkts_in_flight() == 1);
  CHECK(b.sb.any_rnr());
  CHECK(b.sb.next_rnr_release() == b.now + 5'000);
  b.sb.release_rnr(b.now + 4'999);
  CHECK(b.sb.next_lost() == nullptr);
  b.sb.release_rnr(b.now + 5'000);
  REQUIRE(b.sb.next_lost());
  CHECK(b.sb.next_lost()->psn == 1000);
  CHECK(b.sb.next_lost()->rnr_tries == 1);
}

TEST_CASE("scoreboard__grows_beyond_initial_ring") {
  Board b;
  b.send(5000);
  CHECK(b.sb.outstanding() == 5000);
  b.sb.on_ack(1000 + 4990, 0, b.now + 1, b.rtt);
  CHECK(b.sb.una() == 5990);
  CHECK(b.sb.pkts_in_flight() == 10);
  CHECK(b.sb.find(5995) != nullptr);
}

TEST_CASE("scoreboard__tail_probe_requeues_newest") {
  Board b;
  b.send(3);
  CHECK(b.sb.probe_tail());
  REQUIRE(b.sb.next_lost());
  CHECK(b.sb.next_lost()->psn == 1002);
}

}  // namespace metaroce::fw
