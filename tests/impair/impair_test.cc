// mroce-impair's decisions, without I/O: option parsing with its reasons,
// and each impairment of one Direction on real MetaRoCE frames.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "proto/packet.h"
#include "tools/impair/config.h"
#include "tools/impair/direction.h"
#include "tools/impair/frame.h"

namespace proto = metaroce::proto;
using namespace metaroce::impair;

namespace {

constexpr size_t kPrefix = 10;

// prefix (zeros) + a MetaRoCE SEND frame with PSN psn and `payload` bytes.
std::vector<uint8_t> frame(uint32_t psn, size_t payload = 256, uint8_t ecn = 2, bool v6 = false) {
  proto::FrameHeaders h;
  h.src_ip = v6 ? proto::IpAddr{{0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}} : proto::IpAddr::v4(0x0a4d0001);
  h.dst_ip = v6 ? proto::IpAddr{{0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2}} : proto::IpAddr::v4(0x0a4d0002);
  h.ecn = ecn;
  std::vector<uint8_t> body(payload, 0x5a);
  proto::Packet p;
  p.mbth.opcode = proto::Opcode::kSend;
  p.mbth.flags = proto::kFlagLast;
  p.mbth.psn = psn;
  p.seth.length = static_cast<uint32_t>(payload);
  p.payload = body;
  std::vector<uint8_t> out(kPrefix + 2048);
  size_t n = proto::build_frame(h, p, std::span<uint8_t>(out).subspan(kPrefix));
  REQUIRE(n > 0);
  out.resize(kPrefix + n);
  return out;
}

std::span<const uint8_t> eth(const std::vector<uint8_t>& b) { return std::span<const uint8_t>(b).subspan(kPrefix); }

uint32_t psn_of(const std::vector<uint8_t>& b) {
  auto r = proto::parse_frame(eth(b));
  REQUIRE(r);
  return r.value().packet.mbth.psn;
}

DirConfig parsed(std::vector<std::string> args) {
  args.insert(args.end(), {"--leg-a", "x", "--leg-b", "y"});
  Config c;
  std::string why;
  REQUIRE_MESSAGE(parse_args(args, &c, &why), why);
  return c.dir[0];
}

std::vector<Held> drain_all(Direction& d) {
  std::vector<Held> out;
  Held h;
  while (d.pop_due(UINT64_MAX - 1, &h)) out.push_back(std::move(h));
  return out;
}

// |x - n p| within 5 standard deviations of a binomial(n, p).
void check_binomial(uint64_t x, double n, double p) {
  double sd = std::sqrt(n * p * (1 - p));
  CHECK_MESSAGE(std::fabs(static_cast<double>(x) - n * p) <= 5 * sd, x << " vs " << n * p << " +- " << 5 * sd);
}

}  // namespace

TEST_CASE("parse_values__accepts_units_and_says_what_is_wrong") {
  std::string why;
  double p;
  uint64_t v;
  CHECK((parse_probability("1%", &p, &why) && p == doctest::Approx(0.01)));
  CHECK((parse_probability("0.25", &p, &why) && p == 0.25));
  CHECK_FALSE(parse_probability("150%", &p, &why));
  CHECK(why.find("at most 100%") != std::string::npos);
  CHECK_FALSE(parse_probability("x", &p, &why));
  CHECK((parse_duration("1ms", &v, &why) && v == 1'000'000));
  CHECK((parse_duration("200us", &v, &why) && v == 200'000));
  CHECK_FALSE(parse_duration("5 parsecs", &v, &why));
  CHECK(why.find("bad duration '5 parsecs'") != std::string::npos);
  CHECK((parse_rate("5gbit", &v, &why) && v == 5'000'000'000ull));
  CHECK((parse_rate("1gbps", &v, &why) && v == 8'000'000'000ull));
  CHECK_FALSE(parse_rate("0mbit", &v, &why));
  CHECK(why.find("zero") != std::string::npos);
  CHECK((parse_bytes("64KB", &v, &why) && v == 65536));
  CHECK((parse_bytes("1MiB", &v, &why) && v == 1 << 20));
  CHECK_FALSE(parse_bytes("-3", &v, &why));
}

TEST_CASE("parse_args__direction_scopes_and_consistency_checks") {
  Config c;
  std::string why;
  REQUIRE(parse_args({"--leg-a", "a", "--leg-b", "b", "--loss", "1%", "--b-to-a", "--delay", "1ms", "--both",
                      "--dup", "2%", "--seed", "7"},
                     &c, &why));
  CHECK(c.dir[0].loss == doctest::Approx(0.01));
  CHECK(c.dir[1].loss == doctest::Approx(0.01));
  CHECK(c.dir[0].delay_ns == 0);
  CHECK(c.dir[1].delay_ns == 1'000'000);
  CHECK(c.dir[0].duplicate == doctest::Approx(0.02));
  CHECK(c.seed == 7);
  CHECK_FALSE(parse_args({"--leg-a", "a"}, &c, &why));
  CHECK(why == "--leg-a and --leg-b are required");
  CHECK_FALSE(parse_args({"--leg-a", "a", "--leg-b", "b", "--delay", "1ms", "--jitter", "2ms"}, &c, &why));
  CHECK(why == "--jitter must not exceed --delay");
  CHECK_FALSE(parse_args({"--leg-a", "a", "--leg-b", "b", "--ecn-threshold", "1KB"}, &c, &why));
  CHECK(why.find("need --rate") != std::string::npos);
  CHECK_FALSE(parse_args({"--leg-a", "a", "--leg-b", "b", "--rate", "1gbit", "--ecn-threshold", "2MB"}, &c, &why));
  CHECK(why.find("below --queue") != std::string::npos);
  CHECK_FALSE(parse_args({"--leg-a", "a", "--leg-b", "b", "--burst", "1%"}, &c, &why));
  CHECK(why.find("P:L") != std::string::npos);
  CHECK_FALSE(parse_args({"--leg-a", "a", "--leg-b", "b", "--frobnicate", "1"}, &c, &why));
  CHECK(why.find("unknown option --frobnicate") != std::string::npos);
}

TEST_CASE("on_frame__other_traffic_passes_untouched_even_at_total_loss") {
  Direction d(parsed({"--loss", "100%"}), false, 4796, kPrefix, 1);
  std::vector<uint8_t> arp(kPrefix + 42, 0);
  arp[kPrefix + 12] = 0x08;
  arp[kPrefix + 13] = 0x06;
  CHECK(d.on_frame(0, arp) == Direction::Verdict::kForward);
  CHECK(d.on_frame(0, frame(1)) == Direction::Verdict::kConsumed);
  CHECK(d.counters().passed == 1);
  CHECK(d.counters().dropped_loss == 1);
}

TEST_CASE("on_frame__bernoulli_loss_is_seeded_and_within_bounds") {
  auto f = frame(0);
  auto run = [&](uint64_t seed) {
    Direction d(parsed({"--loss", "10%"}), false, 4796, kPrefix, seed);
    for (int i = 0; i < 20000; ++i) d.on_frame(i, f);
    CHECK(d.counters().dropped_loss + d.held_frames() == 20000);
    return d.counters().dropped_loss;
  };
  uint64_t a = run(1);
  check_binomial(a, 20000, 0.1);
  CHECK(run(1) == a);
  CHECK(run(2) != a);
}

TEST_CASE("on_frame__gilbert_elliott_bursts_have_the_mean_length") {
  Direction d(parsed({"--burst", "1%:5"}), false, 4796, kPrefix, 3);
  auto f = frame(0);
  long runs = 0, cur = 0;
  for (int i = 0; i < 50000; ++i) {
    bool lost = d.on_frame(i, f) == Direction::Verdict::kConsumed && d.held_frames() == 0;
    drain_all(d);
    if (lost && cur++ == 0) ++runs;
    if (!lost) cur = 0;
  }
  double mean = static_cast<double>(d.counters().dropped_burst) / runs;
  CHECK(mean == doctest::Approx(5).epsilon(0.2));
  CHECK(d.counters().dropped_loss == 0);
}

TEST_CASE("on_frame__delay_and_jitter_stay_in_range_and_keep_order") {
  Direction d(parsed({"--delay", "1ms", "--jitter", "300us"}), false, 4796, kPrefix, 5);
  for (uint32_t i = 0; i < 2000; ++i) d.on_frame(i * 1000ull, frame(i));
  CHECK(d.counters().delayed == 2000);
  CHECK(d.next_due_ns() >= 700'000);
  Held h;
  CHECK_FALSE(d.pop_due(699'999, &h));
  auto out = drain_all(d);
  REQUIRE(out.size() == 2000);
  for (uint32_t i = 0; i < 2000; ++i) {
    CHECK(psn_of(out[i].bytes) == i);
    CHECK(out[i].due_ns <= i * 1000ull + 1'300'000);
  }
}

TEST_CASE("on_frame__reordered_frames_are_overtaken") {
  Direction d(parsed({"--reorder", "10%:50us"}), false, 4796, kPrefix, 7);
  for (uint32_t i = 0; i < 5000; ++i) d.on_frame(i * 1000ull, frame(i));
  check_binomial(d.counters().reordered, 5000, 0.1);
  Held h;
  long inversions = 0;
  uint32_t highest = 0;
  std::vector<uint32_t> psns;
  for (uint64_t t = 0; t < 6'000'000; t += 1000)
    while (d.pop_due(t, &h)) psns.push_back(psn_of(h.bytes));
  REQUIRE(psns.size() == 5000);
  for (uint32_t p : psns) {
    if (p < highest) ++inversions;
    highest = std::max(highest, p);
  }
  CHECK(inversions == static_cast<long>(d.counters().reordered));
}

TEST_CASE("on_frame__duplicates_and_corruption_are_counted_and_real") {
  Direction d(parsed({"--dup", "5%", "--corrupt", "5%"}), false, 4796, kPrefix, 9);
  for (uint32_t i = 0; i < 4000; ++i) d.on_frame(i, frame(i, 64, 2, i % 2));
  auto out = drain_all(d);
  CHECK(out.size() == 4000 + d.counters().duplicated);
  check_binomial(d.counters().duplicated, 4000, 0.05);
  long bad = 0;
  for (auto& h : out) bad += !proto::parse_frame(eth(h.bytes));
  // A corrupted frame that was also duplicated is bad twice.
  CHECK(bad >= static_cast<long>(d.counters().corrupted));
  CHECK(bad <= static_cast<long>(2 * d.counters().corrupted));
  check_binomial(d.counters().corrupted, 4000, 0.05);
}

TEST_CASE("on_frame__rate_limit_spaces_frames_marks_ecn_and_tail_drops") {
  // 8 Mbit/s: a 1000-B frame takes 1 ms. Queue 10 KB, mark above 4 KB.
  Direction d(parsed({"--rate", "8mbit", "--queue", "10000", "--ecn-threshold", "4000"}), false, 4796, kPrefix, 11);
  std::vector<uint8_t> f = frame(0, 1000 - 14 - 20 - 8 - 24 - 4 - 4);
  REQUIRE(f.size() - kPrefix == 1000);
  for (int i = 0; i < 20; ++i) d.on_frame(0, f);  // a burst at t = 0
  CHECK(d.counters().dropped_queue_full == 10);
  CHECK(d.counters().queue_max_bytes == 10000);
  CHECK(d.counters().ecn_marked == 6);  // backlog + frame above 4000: frames 5..10
  auto out = drain_all(d);
  REQUIRE(out.size() == 10);
  for (size_t i = 0; i < out.size(); ++i) {
    CHECK(out[i].due_ns == (i + 1) * 1'000'000);
    auto r = proto::parse_frame(eth(out[i].bytes));
    REQUIRE(r);
    CHECK(r.value().headers.ecn == (i >= 4 ? 3 : 2));
    auto fi = parse_udp(eth(out[i].bytes));
    CHECK(ipv4_checksum(eth(out[i].bytes), fi->ip_offset, fi->ip_header_len) == 0);
  }
}

TEST_CASE("on_frame__not_ect_frames_are_not_marked") {
  Direction d(parsed({"--rate", "8mbit", "--queue", "10000", "--ecn-threshold", "1000"}), false, 4796, kPrefix, 1);
  for (int i = 0; i < 4; ++i) d.on_frame(0, frame(i, 400, 0));  // ~474 B each: frames 3 and 4 are above
  CHECK(d.counters().ecn_marked == 0);
  CHECK(d.counters().ecn_not_ect == 2);
  for (auto& h : drain_all(d)) CHECK(proto::parse_frame(eth(h.bytes)).value().headers.ecn == 0);
}

TEST_CASE("on_frame__hold_limit_bounds_memory") {
  Direction d(parsed({"--delay", "1s", "--hold-limit", "3000"}), false, 4796, kPrefix, 1);
  auto f = frame(0, 900);
  for (int i = 0; i < 5; ++i) d.on_frame(0, f);
  CHECK(d.held_frames() == 3);
  CHECK(d.counters().dropped_hold_limit == 2);
  CHECK(d.counters().held_max_bytes == 3 * f.size());
}

TEST_CASE("to_json__names_every_counter") {
  Counters c;
  c.ecn_marked = 42;
  std::string j = to_json(c);
  CHECK(j.find("\"ecn_marked\": 42") != std::string::npos);
  CHECK(j.find("\"dropped_burst\": 0") != std::string::npos);
  CHECK(j.front() == '{');
  CHECK(j.back() == '}');
}

TEST_CASE("parse_udp__every_prefix_is_refused_or_stays_inside_it") {
  for (bool v6 : {false, true}) {
    auto f = frame(3, 32, 2, v6);
    auto whole = eth(f);
    auto fi = parse_udp(whole);
    REQUIRE(fi);
    CHECK(fi->udp_dst_port == 4796);
    CHECK(fi->payload_offset + fi->payload_len == whole.size());
    for (size_t n = 0; n < whole.size(); ++n) {
      auto p = parse_udp(whole.first(n));
      if (n < fi->payload_offset) {
        CHECK_MESSAGE(!p, "prefix " << n);
      } else {
        REQUIRE(p);
        CHECK(p->payload_offset + p->payload_len <= n);
      }
    }
  }
}

TEST_CASE("on_frame__truncated_frames_are_counted_never_read_past") {
  // Every impairment that parses or writes the frame, on every cut of it.
  Direction d(parsed({"--corrupt", "100%", "--dup", "50%", "--rate", "100gbit", "--ecn-threshold", "1",
                      "--queue", "1MB"}),
              true, 4796, kPrefix, 13);
  auto f = frame(1, 64);
  for (size_t n = 0; n <= f.size(); ++n) d.on_frame(n, std::span<const uint8_t>(f).first(n));
  auto& c = d.counters();
  CHECK(c.rx_frames == f.size() + 1);
  CHECK(c.dropped_rx_truncated == kPrefix);  // cuts inside the prefix
  CHECK(c.matched == f.size() + 1 - kPrefix);
  CHECK(c.corrupted + c.corrupt_skipped == c.matched);
  CHECK(c.ecn_marked + c.ecn_not_ect <= c.matched);
  CHECK(c.corrupt_skipped > 0);
  drain_all(d);
}
