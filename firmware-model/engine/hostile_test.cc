// A hostile network (docs/engine.md §Trust): packets forged from a third
// address, and from the peer's address with a PSN, MSN or QPN that does not
// match what was sent. Each forgery is a counted drop that changes no QP
// state (the QP's describe_qp() line, memory and CQs are unchanged), and the
// real exchange then completes correctly. The responder's READ queue obeys
// max_dest_rd_atomic and its bound.
#include <doctest/doctest.h>

#include <cstring>
#include <string>
#include <vector>

#include "firmware-model/engine/qp.h"
#include "firmware-model/engine/testing/fakes.h"

namespace metaroce::fw::test {

namespace {

const proto::IpAddr kForger = proto::IpAddr::v4(0x0A000063);  // 10.0.0.99: neither node
constexpr uint32_t kPsn = 1000;  // both nodes' initial PSN (Node::connect)

// A frame carrying p to `to`, as if sent from `src`.
std::vector<uint8_t> forge(const proto::IpAddr& src, const Node& to, const proto::Packet& p) {
  proto::FrameHeaders h;
  h.src_ip = src;
  h.dst_ip = to.ip;
  std::vector<uint8_t> f(proto::encap_length(h) + proto::transport_length(p));
  f.resize(proto::build_frame(h, p, f));
  return f;
}

proto::Packet packet(proto::Opcode op, uint32_t qpn, uint32_t psn, uint32_t msn = 0) {
  proto::Packet p;
  p.mbth.opcode = op;
  p.mbth.dest_qpn = qpn;
  p.mbth.psn = psn;
  p.mbth.msn = msn;
  return p;
}

// A forged ACK with throttling fields: credit 1, an echo 900 ms old, CE.
proto::Packet throttling_ack(Bench& t, uint32_t cum, uint64_t sack = 0) {
  proto::Packet p = packet(proto::Opcode::kAck, t.a.qpn, cum);
  p.ack.cum_psn = cum;
  p.ack.sack = sack;
  p.ack.echo_ts = static_cast<uint32_t>(t.clock.t - 900'000'000);
  p.ack.credit = 1;
  p.ack.ce_count = 1000;
  p.ack.ack_flags = proto::kAckFlagCe;
  return p;
}

SendWr remote(Bench& t, WrOpcode op, uint64_t id, uint64_t local, uint64_t far, uint32_t len) {
  SendWr w = t.a.wr(op, id, local, len);
  w.remote_addr = t.b.base() + far;
  w.rkey = t.b.mr.rkey;
  return w;
}

void pattern(Node& n, uint64_t off, uint32_t len, uint8_t seed) {
  for (uint32_t i = 0; i < len; ++i) n.mem[off + i] = static_cast<uint8_t>(seed ^ (i * 29));
}

// Delivers `frame` to `to` and checks it was dropped for reason `why` and
// changed nothing observable: the QP's state line, its memory, its CQs.
void expect_dropped(Node& to, const std::vector<uint8_t>& frame, uint64_t Counters::*why,
                    const char* what) {
  INFO(std::string(what));
  const std::string before = to.engine->describe_qp(to.qpn);
  const std::vector<uint8_t> mem = to.mem;
  const uint64_t n = to.engine->counters().*why;
  to.engine->on_frame(frame);
  CHECK(to.engine->counters().*why == n + 1);
  CHECK(to.engine->describe_qp(to.qpn) == before);
  CHECK(to.mem == mem);
  CHECK(to.send_cq().empty());
  CHECK(to.recv_cq().empty());
}

std::vector<Completion> complete(Bench& t, size_t n) {
  std::vector<Completion> sc;
  t.run([&] {
    for (auto& c : t.a.send_cq()) sc.push_back(c);
    return sc.size() >= n;
  });
  return sc;
}

}  // namespace

TEST_CASE("hostile__forged_read_response_does_not_complete_a_read") {
  Bench t;
  t.connect_pair();
  pattern(t.b, 30000, 4000, 5);
  bool hold = true;  // B's real responses are held back until the forgeries are in
  t.filter = [&](const std::string& what, bool from_a) {
    return from_a || !hold || what.rfind("RDMA_READ_RESP", 0) != 0;
  };
  REQUIRE(t.a.post_send(remote(t, WrOpcode::kRdmaRead, 1, 40000, 30000, 4000)) == 0);
  REQUIRE(!t.run([&] { return false; }, 20'000));  // READ_REQ served, responses held
  REQUIRE(t.dropped > 0);

  std::vector<uint8_t> evil(4000, 0xEE);
  proto::Packet p = packet(proto::Opcode::kReadResp, t.a.qpn, kPsn, 0);
  p.mbth.flags = proto::kFlagLast;
  p.payload = evil;
  expect_dropped(t.a, forge(kForger, t.a, p), &Counters::rx_drop_wrong_source, "third address");
  p.mbth.psn = kPsn + 7;  // the peer's address, a PSN the READ never used
  expect_dropped(t.a, forge(t.b.ip, t.a, p), &Counters::rx_drop_resp_out_of_range, "wrong PSN");
  p.mbth.psn = kPsn - 1;
  expect_dropped(t.a, forge(t.b.ip, t.a, p), &Counters::rx_drop_resp_out_of_range, "older PSN");
  p.mbth.psn = kPsn;
  p.mbth.dest_qpn = t.a.qpn + (1u << 12);  // the same slot's next generation
  expect_dropped(t.a, forge(t.b.ip, t.a, p), &Counters::rx_drop_unknown_qp, "wrong QPN");

  hold = false;
  auto sc = complete(t, 1);
  REQUIRE(sc.size() == 1);
  CHECK(std::string(status_name(sc[0].status)) == "SUCCESS");
  CHECK(std::memcmp(t.a.mem.data() + 40000, t.b.mem.data() + 30000, 4000) == 0);
}

TEST_CASE("hostile__forged_ack_does_not_mark_a_lost_write_delivered") {
  Bench t;
  t.connect_pair();
  pattern(t.a, 0, 3000, 9);
  bool hold = true;  // every copy of the WRITE is lost until the forgeries are in
  t.filter = [&](const std::string& what, bool from_a) {
    return !from_a || !hold || what.rfind("RDMA_WRITE", 0) != 0;
  };
  REQUIRE(t.a.post_send(remote(t, WrOpcode::kRdmaWrite, 1, 0, 20000, 3000)) == 0);
  REQUIRE(!t.run([&] { return false; }, 20'000));
  REQUIRE(t.dropped == 3);  // PSNs 1000..1002 sent, none delivered

  proto::Packet ack = packet(proto::Opcode::kAck, t.a.qpn, kPsn + 3);
  ack.ack.cum_psn = kPsn + 3;
  ack.ack.echo_ts = static_cast<uint32_t>(t.clock.t - 10'000);
  expect_dropped(t.a, forge(kForger, t.a, ack), &Counters::rx_drop_wrong_source, "third address");
  ack.ack.cum_psn = kPsn + 103;  // beyond every PSN sent
  expect_dropped(t.a, forge(t.b.ip, t.a, ack), &Counters::rx_drop_ack_out_of_range,
                 "cum beyond nxt");
  ack.ack.cum_psn = kPsn + 1;
  ack.ack.sack = uint64_t{1} << 5;  // PSN 1007: never sent
  expect_dropped(t.a, forge(t.b.ip, t.a, ack), &Counters::rx_drop_ack_out_of_range,
                 "SACK beyond nxt");
  ack.ack.cum_psn = kPsn - 50;
  ack.ack.sack = ~uint64_t{0};  // below una, SACKing the lost PSNs
  expect_dropped(t.a, forge(t.b.ip, t.a, ack), &Counters::rx_drop_ack_stale, "cum below una");

  hold = false;
  auto sc = complete(t, 1);
  REQUIRE(sc.size() == 1);
  CHECK(std::string(status_name(sc[0].status)) == "SUCCESS");
  CHECK(std::memcmp(t.a.mem.data(), t.b.mem.data() + 20000, 3000) == 0);
}

TEST_CASE("hostile__forged_ack_does_not_throttle_with_credit_rtt_or_ce") {
  Bench t;
  t.connect_pair();
  REQUIRE(t.a.post_send(remote(t, WrOpcode::kRdmaWrite, 1, 0, 0, 2000)) == 0);
  REQUIRE(complete(t, 1).size() == 1);  // una = 1002: something to be stale below
  bool hold = true;
  t.filter = [&](const std::string& what, bool from_a) {
    return !from_a || !hold || what.rfind("RDMA_WRITE", 0) != 0;
  };
  REQUIRE(t.a.post_send(remote(t, WrOpcode::kRdmaWrite, 2, 0, 8000, 2000)) == 0);
  REQUIRE(!t.run([&] { return false; }, 20'000));  // PSNs 1002, 1003 outstanding
  const uint32_t una = kPsn + 2, nxt = kPsn + 4;

  expect_dropped(t.a, forge(kForger, t.a, throttling_ack(t, una)), &Counters::rx_drop_wrong_source,
                 "third address, cum = una");
  expect_dropped(t.a, forge(t.b.ip, t.a, throttling_ack(t, una - 1)), &Counters::rx_drop_ack_stale,
                 "stale cum");
  expect_dropped(t.a, forge(t.b.ip, t.a, throttling_ack(t, nxt + 1)),
                 &Counters::rx_drop_ack_out_of_range, "cum beyond nxt");
  expect_dropped(t.a, forge(t.b.ip, t.a, throttling_ack(t, una, uint64_t{1} << 1)),
                 &Counters::rx_drop_ack_out_of_range, "SACK of PSN nxt");

  hold = false;
  auto sc = complete(t, 1);
  REQUIRE(sc.size() == 1);
  CHECK(std::string(status_name(sc[0].status)) == "SUCCESS");
}

TEST_CASE("hostile__forged_nack_does_not_fail_the_qp") {
  Bench t;
  t.connect_pair();
  bool hold = true;  // the first WRITE is lost, the second delivered (SACKed)
  t.filter = [&](const std::string& what, bool from_a) {
    return !from_a || !hold || what.rfind("RDMA_WRITE psn 1000 ", 0) != 0;
  };
  REQUIRE(t.a.post_send(remote(t, WrOpcode::kRdmaWrite, 1, 0, 0, 100)) == 0);
  REQUIRE(t.a.post_send(remote(t, WrOpcode::kRdmaWrite, 2, 0, 4000, 100)) == 0);
  REQUIRE(!t.run([&] { return false; }, 30'000));  // the SACK of 1001 is in
  Counters qa;
  REQUIRE(t.a.engine->qp_counters(t.a.qpn, &qa) == 0);
  REQUIRE(qa.rx_packets >= 1);
  REQUIRE(t.a.engine->describe_qp(t.a.qpn).find("una 1000 nxt 1002 ") != std::string::npos);

  proto::Packet n = packet(proto::Opcode::kNack, t.a.qpn, kPsn);
  n.nack = {proto::NackReason::kRemoteAccessError, 0, kPsn};
  expect_dropped(t.a, forge(kForger, t.a, n), &Counters::rx_drop_wrong_source, "third address");
  n.nack.psn = kPsn + 1;  // delivered already: the responder accepted it
  expect_dropped(t.a, forge(t.b.ip, t.a, n), &Counters::rx_drop_nack_out_of_range,
                 "delivered PSN");
  n.nack.psn = kPsn + 500;  // never sent
  expect_dropped(t.a, forge(t.b.ip, t.a, n), &Counters::rx_drop_nack_out_of_range, "unsent PSN");
  n.nack = {proto::NackReason::kRnr, 31, kPsn};  // a 491 ms RNR wait
  expect_dropped(t.a, forge(kForger, t.a, n), &Counters::rx_drop_wrong_source, "RNR, third address");

  hold = false;
  auto sc = complete(t, 2);
  REQUIRE(sc.size() == 2);
  CHECK(std::string(status_name(sc[0].status)) == "SUCCESS");
  CHECK(std::string(status_name(sc[1].status)) == "SUCCESS");
}

TEST_CASE("hostile__forged_atomic_response_does_not_complete_an_atomic") {
  Bench t;
  t.connect_pair();
  uint64_t v = 40;
  std::memcpy(t.b.mem.data() + 64, &v, 8);
  bool hold = true;
  t.filter = [&](const std::string& what, bool from_a) {
    return from_a || !hold || what.rfind("ATOMIC_RESP", 0) != 0;
  };
  SendWr fa = remote(t, WrOpcode::kAtomicFetchAdd, 1, 60000, 64, 8);
  fa.compare_add = 2;
  REQUIRE(t.a.post_send(fa) == 0);
  REQUIRE(!t.run([&] { return false; }, 20'000));
  REQUIRE(t.dropped > 0);

  proto::Packet p = packet(proto::Opcode::kAtomicResp, t.a.qpn, kPsn, 0);
  p.mbth.flags = proto::kFlagLast;
  p.atomic_ack.original = 0xDEAD;
  expect_dropped(t.a, forge(kForger, t.a, p), &Counters::rx_drop_wrong_source, "third address");
  p.mbth.psn = kPsn + 1;
  expect_dropped(t.a, forge(t.b.ip, t.a, p), &Counters::rx_drop_resp_out_of_range, "wrong PSN");

  hold = false;
  auto sc = complete(t, 1);
  REQUIRE(sc.size() == 1);
  CHECK(std::string(status_name(sc[0].status)) == "SUCCESS");
  uint64_t got = 0;
  std::memcpy(&got, t.a.mem.data() + 60000, 8);
  CHECK(got == 40);
  std::memcpy(&got, t.b.mem.data() + 64, 8);
  CHECK(got == 42);  // executed exactly once
}

TEST_CASE("hostile__requests_from_a_third_address_place_nothing") {
  Bench t;
  t.connect_pair();
  std::vector<uint8_t> evil(512, 0xEE);
  proto::Packet w = packet(proto::Opcode::kWrite, t.b.qpn, kPsn, 0);
  w.mbth.flags = proto::kFlagLast | proto::kFlagAckReq;
  w.reth = {t.b.base() + 1000, t.b.mr.rkey, 512};
  w.payload = evil;
  expect_dropped(t.b, forge(kForger, t.b, w), &Counters::rx_drop_wrong_source, "WRITE");
  proto::Packet r = packet(proto::Opcode::kReadReq, t.b.qpn, kPsn, 0);
  r.mbth.flags = proto::kFlagLast | proto::kFlagAckReq;
  r.reth = {t.b.base(), t.b.mr.rkey, 4096};
  expect_dropped(t.b, forge(kForger, t.b, r), &Counters::rx_drop_wrong_source, "READ_REQ");
  CHECK(t.b.port.outbox.empty());  // not even an ACK or a READ response went out

  // The real WRITE at the same PSN is new to the responder and placed.
  pattern(t.a, 0, 512, 3);
  REQUIRE(t.a.post_send(remote(t, WrOpcode::kRdmaWrite, 1, 0, 1000, 512)) == 0);
  auto sc = complete(t, 1);
  REQUIRE(sc.size() == 1);
  CHECK(std::string(status_name(sc[0].status)) == "SUCCESS");
  CHECK(std::memcmp(t.a.mem.data(), t.b.mem.data() + 1000, 512) == 0);
  CHECK(t.b.engine->counters().rx_drop_duplicate == 0);
}

// ---- the responder's READ queue (docs/engine.md §Responder) ----
//
// The engine answers READs as fast as pacing allows, usually within the
// entry point that queued them. To see the queue hold jobs, these tests
// drive the responder role directly (responder::on_request without the
// pump that drains the queue), as a responder with a paced or slow port.

namespace {
constexpr uint32_t kAll =
    kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead | kAccessRemoteAtomic;

struct Responder {
  Responder() : core(EngineConfig{}, Hal{clock, port, dma, events, random}) {
    mem.resize(1 << 20);
    core.mrs().reg(qp.owner, qp.init.pdn, reinterpret_cast<uint64_t>(mem.data()), mem.size(), kAll,
                   random, &keys);
    qp.qpn = 0x1002;
    qp.state = QpState::kRts;
    qp.attr.qp_access_flags = kAll;
    qp.attr.max_dest_rd_atomic = 16;
    qp.rw.reset(kPsn);
    qp.cc = make_congestion_control("default", CongestionParams{});
    qp.paths = make_path_selector(1, 1);
  }
  // A READ_REQ from the peer: one that ignores its max_rd_atomic or
  // re-requests at will.
  void read(uint32_t psn, uint32_t msn, uint32_t off, uint32_t len) {
    proto::Frame f;
    f.packet = packet(proto::Opcode::kReadReq, qp.qpn, psn, msn);
    f.packet.mbth.flags = proto::kFlagLast | proto::kFlagAckReq;
    f.packet.mbth.offset = off;
    f.packet.reth = {reinterpret_cast<uint64_t>(mem.data()) + off, keys.rkey, len};
    responder::on_request(core, qp, f);
  }
  // Bytes of READ response sent for psn.
  uint64_t answered(uint32_t psn) const {
    uint64_t n = 0;
    for (const std::string& s : port.log)
      if (s.rfind("tx RDMA_READ_RESP psn " + std::to_string(psn) + " ", 0) == 0) n += 1024;
    return n;
  }
  FakeClock clock;
  FakePort port;
  FakeDma dma;
  FakeEvents events;
  FakeRandom random{1};
  Core core;
  Qp qp;
  std::vector<uint8_t> mem;
  MrKeys keys;
};
}  // namespace

TEST_CASE("hostile__reads_beyond_max_dest_rd_atomic_are_invalid_requests") {
  Responder r;
  for (uint32_t i = 0; i < 16; ++i) r.read(kPsn + i, i, 0, 65536);  // max_dest_rd_atomic
  CHECK(r.qp.reads.size() == 16);
  CHECK(r.qp.state == QpState::kRts);
  r.read(kPsn + 16, 16, 0, 65536);  // a 17th while 16 are still being answered
  CHECK(r.core.counters().rx_nak_invalid == 1);
  CHECK(r.qp.state == QpState::kErr);
  CHECK(r.port.log.back() == "tx NACK INVALID_REQUEST psn 1016");
}

TEST_CASE("hostile__read_msn_out_of_sequence_is_an_invalid_request") {
  Responder r;
  r.read(kPsn, 5, 0, 1024);  // the first READ must carry read MSN 0
  CHECK(r.core.counters().rx_nak_invalid == 1);
  CHECK(r.qp.state == QpState::kErr);
  Responder ahead;
  ahead.read(kPsn, 0, 0, 0);
  ahead.read(kPsn + 1, 2, 0, 1024);  // MSN 1 skipped
  CHECK(ahead.core.counters().rx_nak_invalid == 1);
  CHECK(ahead.qp.state == QpState::kErr);
}

TEST_CASE("hostile__duplicate_read_while_queued_is_not_served_twice") {
  Responder r;
  r.read(kPsn, 0, 0, 65536);
  responder::run(r.core, r.qp, 4);  // the first 4 KiB go out, the job stays queued
  for (int i = 0; i < 5; ++i) r.read(kPsn, 0, 0, 65536);
  CHECK(r.qp.reads.size() == 1);
  CHECK(r.core.counters().rx_drop_duplicate == 5);
  // A re-issue for one missing KiB (new PSN, same MSN) serves that KiB only.
  r.read(kPsn + 1, 0, 1024, 1024);
  CHECK(r.qp.reads.size() == 2);
  // One for a KiB the queued job has still to send is served by that job.
  r.read(kPsn + 2, 0, 8192, 1024);
  CHECK(r.qp.reads.size() == 2);
  CHECK(r.core.counters().read_repairs_trimmed == 1);
  // Responses leave at line rate: let time pass while they drain.
  for (int i = 0; i < 1000 && !r.qp.reads.empty(); ++i) {
    responder::run(r.core, r.qp, 16);
    r.clock.t += 10'000;
  }
  CHECK(r.qp.reads.empty());
  CHECK(r.answered(kPsn) == 65536);
  CHECK(r.answered(kPsn + 1) == 1024);
  CHECK(r.answered(kPsn + 2) == 0);
  // Once answered, a duplicate is served again (its responses may be lost).
  r.read(kPsn, 0, 0, 65536);
  CHECK(r.qp.reads.size() == 1);
}

TEST_CASE("hostile__read_queue_is_bounded") {
  Responder r;
  r.read(kPsn, 0, 0, 65536);
  for (int i = 0; i < 1000 && !r.qp.reads.empty(); ++i) {  // answered: nothing queued sends MSN 0
    responder::run(r.core, r.qp, 16);
    r.clock.t += 10'000;
  }
  REQUIRE(r.qp.reads.empty());
  // Re-issues of MSN 0 at will, each for another range: the queue keeps
  // kReadJobs; the next one is dropped unmarked (a real requester resends
  // it) and counted.
  for (uint32_t i = 1; i <= kReadJobs + 1; ++i) r.read(kPsn + i, 0, i * 512, 512);
  CHECK(r.qp.reads.size() == kReadJobs);
  CHECK(r.core.counters().rx_drop_read_queue_full == 1);
  CHECK(r.qp.rw.cum() == kPsn + kReadJobs + 1);
  CHECK(r.core.counters().read_repairs_trimmed == 0);
  CHECK(r.qp.state == QpState::kRts);
}

}  // namespace metaroce::fw::test
