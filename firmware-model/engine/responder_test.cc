// responder.{h,cc}: PSN window, placement in any order, receive binding by
// MSN, RNR, key checks answered with NACKs, atomics exactly once, ACKs.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>

#include "firmware-model/engine/testing/fakes.h"

namespace metaroce::fw::test {

namespace {
constexpr uint32_t kAll =
    kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead | kAccessRemoteAtomic;

void pattern(Node& n, uint64_t off, uint32_t len, uint8_t seed) {
  for (uint32_t i = 0; i < len; ++i) n.mem[off + i] = static_cast<uint8_t>(seed ^ (i * 13));
}
SendWr write_to(Bench& t, uint64_t id, uint64_t src, uint64_t dst, uint32_t len) {
  SendWr w = t.a.wr(WrOpcode::kRdmaWrite, id, src, len);
  w.remote_addr = t.b.base() + dst;
  w.rkey = t.b.mr.rkey;
  return w;
}
std::vector<Completion> run_until_send_cq(Bench& t, size_t n) {
  std::vector<Completion> sc;
  t.run([&] {
    for (auto& c : t.a.send_cq()) sc.push_back(c);
    return sc.size() >= n;
  });
  return sc;
}
std::string st(const Completion& c) { return status_name(c.status); }
}  // namespace

TEST_CASE("responder__places_reordered_packets_directly") {
  Bench t;
  t.path_delay = {40'000, 30'000, 20'000, 10'000};  // later packets overtake
  t.connect_pair();
  pattern(t.a, 0, 8000, 3);
  REQUIRE(t.a.post_send(write_to(t, 1, 0, 10000, 8000)) == 0);
  auto sc = run_until_send_cq(t, 1);
  REQUIRE(sc.size() == 1);
  CHECK(st(sc[0]) == "SUCCESS");
  CHECK(std::memcmp(t.a.mem.data(), t.b.mem.data() + 10000, 8000) == 0);
  CHECK(t.b.dma.writes == 8);  // each packet placed once
  CHECK(t.b.engine->counters().rx_drop_duplicate == 0);
  CHECK(t.a.engine->counters().tx_retransmits == 0);  // reordering is not loss
}

TEST_CASE("responder__send_binds_to_receive_by_msn_out_of_order") {
  Bench t;
  t.connect_pair();
  REQUIRE(t.b.post_recv(100, 20000, 3000) == 0);
  REQUIRE(t.b.post_recv(200, 30000, 3000) == 0);
  pattern(t.a, 0, 3000, 1);
  pattern(t.a, 5000, 2000, 2);
  // Hold back everything of the first message until the second arrived.
  bool second_done = false;
  t.filter = [&](const std::string& what, bool from_a) {
    if (from_a && what.find("SEND") == 0 && what.find("msn 0") != std::string::npos &&
        what.find("RETX") == std::string::npos)
      return false;
    return true;
  };
  REQUIRE(t.a.post_send(t.a.wr(WrOpcode::kSend, 1, 0, 3000)) == 0);
  REQUIRE(t.a.post_send(t.a.wr(WrOpcode::kSend, 2, 5000, 2000)) == 0);
  std::vector<Completion> rc;
  CHECK(t.run([&] {
    for (auto& c : t.b.recv_cq()) rc.push_back(c);
    second_done = second_done || std::memcmp(t.a.mem.data() + 5000, t.b.mem.data() + 30000, 2000) == 0;
    return rc.size() == 2;
  }));
  CHECK(second_done);
  REQUIRE(rc.size() == 2);
  CHECK(rc[0].wr_id == 100);  // completions in receive order
  CHECK(rc[0].byte_len == 3000);
  CHECK(rc[1].wr_id == 200);
  CHECK(rc[1].byte_len == 2000);
  CHECK(std::memcmp(t.a.mem.data(), t.b.mem.data() + 20000, 3000) == 0);
  CHECK(std::memcmp(t.a.mem.data() + 5000, t.b.mem.data() + 30000, 2000) == 0);
}

TEST_CASE("responder__duplicates_are_reacked_never_replaced") {
  Bench t;
  t.dup = 1.0;  // every frame twice
  t.connect_pair();
  pattern(t.a, 0, 4000, 5);
  REQUIRE(t.a.post_send(write_to(t, 1, 0, 0, 4000)) == 0);
  auto sc = run_until_send_cq(t, 1);
  REQUIRE(sc.size() == 1);
  CHECK(st(sc[0]) == "SUCCESS");
  CHECK(t.b.dma.writes == 4);
  CHECK(t.b.engine->counters().rx_drop_duplicate >= 4);
}

TEST_CASE("responder__rnr_nack_then_success_once_receive_posted") {
  Bench t;
  t.connect_pair(1 << 16, 14, 7, /*rnr_retry=*/7);
  REQUIRE(t.a.post_send(t.a.wr(WrOpcode::kSend, 1, 0, 100)) == 0);
  t.run([&] { return t.b.engine->counters().rx_nak_rnr >= 2; });
  CHECK(t.a.engine->counters().rnr_retries >= 1);
  CHECK(t.a.send_cq().empty());
  REQUIRE(t.b.post_recv(5, 0, 100) == 0);
  auto sc = run_until_send_cq(t, 1);
  REQUIRE(sc.size() == 1);
  CHECK(st(sc[0]) == "SUCCESS");
  auto rc = t.b.recv_cq();
  REQUIRE(rc.size() == 1);
  CHECK(rc[0].wr_id == 5);
}

TEST_CASE("responder__rnr_retry_exhausted") {
  Bench t;
  t.connect_pair(1 << 16, 14, 7, /*rnr_retry=*/2);
  REQUIRE(t.a.post_send(t.a.wr(WrOpcode::kSend, 1, 0, 100)) == 0);
  REQUIRE(t.a.post_send(t.a.wr(WrOpcode::kSend, 2, 0, 100)) == 0);
  auto sc = run_until_send_cq(t, 2);
  REQUIRE(sc.size() == 2);
  CHECK(st(sc[0]) == "RNR_RETRY_EXC_ERR");
  CHECK(st(sc[1]) == "WR_FLUSH_ERR");
  // rnr_retry counts per packet: each of the two SENDs waited twice.
  CHECK(t.a.engine->counters().rnr_retries == 4);
}

TEST_CASE("responder__write_imm_consumes_receive_with_imm") {
  Bench t;
  t.connect_pair();
  REQUIRE(t.b.post_recv(42, 0, 0) == 0);
  SendWr w = write_to(t, 1, 0, 5000, 3000);
  w.opcode = WrOpcode::kRdmaWriteImm;
  w.imm = 0x12345678;
  REQUIRE(t.a.post_send(w) == 0);
  run_until_send_cq(t, 1);
  auto rc = t.b.recv_cq();
  REQUIRE(rc.size() == 1);
  CHECK(rc[0].wr_id == 42);
  CHECK(rc[0].opcode == WcOpcode::kRecvRdmaWithImm);
  CHECK(rc[0].imm == 0x12345678);
  CHECK(rc[0].wc_flags == kWcWithImm);
  CHECK(rc[0].byte_len == 3000);
}

struct AccessCase {
  const char* name;
  std::function<void(Bench&, SendWr&)> spoil;
};

TEST_CASE("responder__remote_access_errors_nack_and_fail_both_qps") {
  std::vector<AccessCase> cases = {
      {"wrong rkey", [](Bench&, SendWr& w) { w.rkey ^= 0x80; }},
      {"out of bounds", [](Bench& t, SendWr& w) { w.remote_addr = t.b.base() + t.b.mem.size() - 10; }},
      {"below the MR", [](Bench& t, SendWr& w) { w.remote_addr = t.b.base() - 1; }},
  };
  for (auto& c : cases) {
    INFO(c.name);
    Bench t;
    t.connect_pair();
    SendWr w = write_to(t, 1, 0, 0, 100);
    c.spoil(t, w);
    REQUIRE(t.a.post_send(w) == 0);
    auto sc = run_until_send_cq(t, 1);
    REQUIRE(sc.size() == 1);
    CHECK(st(sc[0]) == "REM_ACCESS_ERR");
    CHECK(t.b.engine->counters().rx_nak_access == 1);
    CHECK(t.b.events.has_event(EventType::kQpAccessErr, t.b.qpn));
    QpAttr a;
    t.b.engine->query_qp(Node::kOwner, t.b.qpn, &a, nullptr);
    CHECK(a.qp_state == QpState::kErr);
    CHECK(t.b.dma.writes == 0);
  }
}

TEST_CASE("responder__missing_mr_access_flag_and_qp_access_flag") {
  {
    Bench t;  // MR allows only remote read
    t.a.setup(1 << 16, kAll);
    t.b.setup(1 << 16, kAccessLocalWrite | kAccessRemoteRead);
    t.a.connect(t.b.ip, t.b.qpn, kAll);
    t.b.connect(t.a.ip, t.a.qpn, kAll);
    REQUIRE(t.a.post_send(write_to(t, 1, 0, 0, 100)) == 0);
    auto sc = run_until_send_cq(t, 1);
    REQUIRE(sc.size() == 1);
    CHECK(st(sc[0]) == "REM_ACCESS_ERR");
  }
  {
    Bench t;  // QP does not allow remote atomics
    t.a.setup(1 << 16, kAll);
    t.b.setup(1 << 16, kAll);
    t.a.connect(t.b.ip, t.b.qpn, kAll);
    t.b.connect(t.a.ip, t.a.qpn, kAccessRemoteWrite | kAccessRemoteRead);
    SendWr fa = t.a.wr(WrOpcode::kAtomicFetchAdd, 1, 0, 8);
    fa.remote_addr = t.b.base();
    fa.rkey = t.b.mr.rkey;
    REQUIRE(t.a.post_send(fa) == 0);
    auto sc = run_until_send_cq(t, 1);
    REQUIRE(sc.size() == 1);
    CHECK(st(sc[0]) == "REM_ACCESS_ERR");
  }
}

TEST_CASE("responder__rkey_of_another_pd_is_rejected") {
  Bench t;
  t.connect_pair();
  uint32_t pd2 = 0;
  REQUIRE(t.b.engine->create_pd(Node::kOwner, &pd2) == 0);
  MrKeys other;
  REQUIRE(t.b.engine->reg_mr(Node::kOwner, pd2, t.b.base(), 1000, kAll, &other) == 0);
  SendWr w = write_to(t, 1, 0, 0, 100);
  w.rkey = other.rkey;
  REQUIRE(t.a.post_send(w) == 0);
  auto sc = run_until_send_cq(t, 1);
  REQUIRE(sc.size() == 1);
  CHECK(st(sc[0]) == "REM_ACCESS_ERR");
}

TEST_CASE("responder__zero_length_write_needs_no_valid_rkey") {
  Bench t;
  t.connect_pair();
  SendWr w = write_to(t, 1, 0, 0, 0);
  w.num_sge = 0;
  w.rkey = 0xBAD;
  w.remote_addr = 1;
  REQUIRE(t.a.post_send(w) == 0);
  auto sc = run_until_send_cq(t, 1);
  REQUIRE(sc.size() == 1);
  CHECK(st(sc[0]) == "SUCCESS");
  CHECK(t.b.dma.writes == 0);
}

TEST_CASE("responder__misaligned_atomic_is_invalid_request") {
  Bench t;
  t.connect_pair();
  SendWr fa = t.a.wr(WrOpcode::kAtomicFetchAdd, 1, 0, 8);
  fa.remote_addr = t.b.base() + 4;
  fa.rkey = t.b.mr.rkey;
  REQUIRE(t.a.post_send(fa) == 0);
  auto sc = run_until_send_cq(t, 1);
  REQUIRE(sc.size() == 1);
  CHECK(st(sc[0]) == "REM_INV_REQ_ERR");
  CHECK(t.b.events.has_event(EventType::kQpReqErr, t.b.qpn));
}

TEST_CASE("responder__receive_too_small_is_loc_len_err_and_invalid_request") {
  Bench t;
  t.connect_pair();
  REQUIRE(t.b.post_recv(7, 0, 50) == 0);
  REQUIRE(t.b.post_recv(8, 100, 50) == 0);
  REQUIRE(t.a.post_send(t.a.wr(WrOpcode::kSend, 1, 0, 100)) == 0);
  auto sc = run_until_send_cq(t, 1);
  REQUIRE(sc.size() == 1);
  CHECK(st(sc[0]) == "REM_INV_REQ_ERR");
  auto rc = t.b.recv_cq();
  REQUIRE(rc.size() == 2);
  CHECK(st(rc[0]) == "LOC_LEN_ERR");
  CHECK(rc[0].wr_id == 7);
  CHECK(st(rc[1]) == "WR_FLUSH_ERR");
}

TEST_CASE("responder__atomic_executed_once_when_response_lost") {
  Bench t;
  t.connect_pair();
  int resp = 0;
  t.filter = [&](const std::string& what, bool from_a) {
    if (!from_a && what.rfind("ATOMIC_RESP", 0) == 0) return ++resp > 1;  // lose the first
    if (!from_a && what.rfind("ACK", 0) == 0 && resp == 1) return true;
    return true;
  };
  uint64_t v = 10;
  std::memcpy(t.b.mem.data() + 64, &v, 8);
  SendWr fa = t.a.wr(WrOpcode::kAtomicFetchAdd, 1, 200, 8);
  fa.remote_addr = t.b.base() + 64;
  fa.rkey = t.b.mr.rkey;
  fa.compare_add = 5;
  REQUIRE(t.a.post_send(fa) == 0);
  auto sc = run_until_send_cq(t, 1);
  REQUIRE(sc.size() == 1);
  CHECK(st(sc[0]) == "SUCCESS");
  std::memcpy(&v, t.b.mem.data() + 64, 8);
  CHECK(v == 15);  // added once
  std::memcpy(&v, t.a.mem.data() + 200, 8);
  CHECK(v == 10);
  CHECK(t.b.engine->counters().atomic_replays == 1);

}

TEST_CASE("responder__acks_carry_cum_sack_and_echo") {
  Bench t;
  t.connect_pair();
  bool dropped = false;
  t.filter = [&](const std::string& what, bool from_a) {
    if (from_a && !dropped && what.find("psn 1001 ") != std::string::npos) {
      dropped = true;
      return false;
    }
    return true;
  };
  REQUIRE(t.a.post_send(write_to(t, 1, 0, 0, 4096)) == 0);
  run_until_send_cq(t, 1);
  bool saw_sack = false;
  for (auto& s : t.b.port.log)
    if (s.find("ACK cum 1001 sack") != std::string::npos && s.find("sack 0") == std::string::npos)
      saw_sack = true;
  CHECK(saw_sack);
  CHECK(t.a.engine->counters().fast_retransmits + t.a.engine->counters().timeouts >= 1);
}

TEST_CASE("responder__ce_marks_are_counted_and_reported_in_acks") {
  Bench t;
  t.connect_pair();
  t.a.port.ecn = 0b11;  // every request arrives CE-marked
  REQUIRE(t.a.post_send(write_to(t, 1, 0, 0, 3000)) == 0);
  run_until_send_cq(t, 1);
  CHECK(t.b.engine->counters().ecn_marks_seen == 3);
  uint32_t ce_total = 0;
  bool flagged = false;
  for (auto& o : t.b.port.raw) {
    if (o.packet.mbth.opcode != proto::Opcode::kAck) continue;
    ce_total += o.packet.ack.ce_count;
    flagged = flagged || (o.packet.ack.ack_flags & 1);
  }
  CHECK(ce_total == 3);
  CHECK(flagged);
}

TEST_CASE("responder__probe_is_answered_to_the_prober_on_the_same_path") {
  Bench t;
  t.connect_pair();
  proto::Packet p;
  p.mbth.opcode = proto::Opcode::kProbe;
  p.mbth.dest_qpn = t.b.qpn;
  p.mbth.path_id = 3;
  p.mbth.timestamp = 777;
  p.probe.nonce = 0xBEEF;
  proto::FrameHeaders h;
  h.src_ip = t.a.ip;
  h.dst_ip = t.b.ip;
  std::vector<uint8_t> frame(200);
  frame.resize(proto::build_frame(h, p, frame));
  t.b.engine->on_frame(frame);
  REQUIRE(t.b.port.raw.size() == 1);
  const OutPacket& r = t.b.port.raw[0];
  CHECK(r.packet.mbth.opcode == proto::Opcode::kProbeReply);
  CHECK(r.packet.mbth.dest_qpn == t.a.qpn);
  CHECK(r.packet.mbth.path_id == 3);
  CHECK(r.packet.probe.nonce == 0xBEEF);
  CHECK(r.packet.probe.echo_ts == 777);
  CHECK(r.dst_ip == t.a.ip);
}

TEST_CASE("responder__garbage_and_unknown_qp_are_counted") {
  Bench t;
  t.connect_pair();
  std::vector<uint8_t> junk(80, 0x55);
  t.b.engine->on_frame(junk);
  CHECK(t.b.engine->counters().rx_drop_parse == 1);
  REQUIRE(t.a.post_send(write_to(t, 1, 0, 0, 10)) == 0);
  t.a.engine->pump();
  REQUIRE(!t.a.port.outbox.empty());
  auto frame = t.a.port.outbox[0].bytes;
  auto bad = frame;
  bad[bad.size() - 1] ^= 1;  // ICRC
  t.b.engine->on_frame(bad);
  CHECK(t.b.engine->counters().rx_drop_bad_icrc == 1);
  CHECK(t.b.engine->counters().rx_drop_parse == 2);
  QpAttr reset;
  reset.qp_state = QpState::kReset;
  t.b.engine->destroy_qp(Node::kOwner, t.b.qpn);
  t.b.engine->on_frame(frame);
  CHECK(t.b.engine->counters().rx_drop_unknown_qp == 1);
}


// ---- placement (hal.h §Placement): nothing is acknowledged that did not land ----

namespace metaroce::fw::test {
namespace {
// The ACKs b sent, as (cum, sack).
std::vector<std::pair<uint32_t, uint64_t>> acks_of(const Node& n) {
  std::vector<std::pair<uint32_t, uint64_t>> v;
  for (auto& s : n.port.log) {
    unsigned cum = 0;
    unsigned long long sack = 0;
    if (std::sscanf(s.c_str(), "tx ACK cum %u sack %llx", &cum, &sack) == 2) v.push_back({cum, sack});
  }
  return v;
}
bool sent(const Node& n, const std::string& what) {
  for (auto& s : n.port.log)
    if (s.find(what) != std::string::npos) return true;
  return false;
}
}  // namespace

// WRITE 1 lands and is acknowledged; WRITE 2's second packet hits memory
// the host cannot write (at once, or only when the queued write is
// committed). The responder must not ACK WRITE 2: it NACKs REMOTE_ACCESS_ERROR
// and goes to ERR; the requester sees 1 SUCCESS, 2 REM_ACCESS_ERR, 3 flushed.
TEST_CASE("responder__failed_placement_is_nacked_never_acked") {
  for (bool at_commit : {false, true}) {
    INFO("fail at commit: " << at_commit);
    Bench t;
    t.connect_pair();
    t.b.dma.fail_on_commit = at_commit;
    t.b.dma.bad_writes.push_back({t.b.base() + 4096 + 1024 + 100, 10});
    pattern(t.a, 0, 3000, 5);
    REQUIRE(t.a.post_send(write_to(t, 1, 0, 0, 100)) == 0);       // psn 1000
    REQUIRE(t.a.post_send(write_to(t, 2, 0, 4096, 3000)) == 0);    // psn 1001..1003
    REQUIRE(t.a.post_send(write_to(t, 3, 0, 16384, 100)) == 0);    // psn 1004
    auto sc = run_until_send_cq(t, 3);
    REQUIRE(sc.size() == 3);
    CHECK(st(sc[0]) == "SUCCESS");
    CHECK(st(sc[1]) == "REM_ACCESS_ERR");
    CHECK(st(sc[2]) == "WR_FLUSH_ERR");
    CHECK(t.b.dma.failed_writes >= 1);
    if (at_commit) CHECK(t.b.dma.failed_commits >= 1);
    for (auto [cum, sack] : acks_of(t.b)) {
      CHECK(cum <= 1001);  // nothing of WRITE 2 was ever acknowledged
      CHECK(sack == 0);
    }
    CHECK(sent(t.b, "NACK REMOTE_ACCESS_ERROR"));
    CHECK(t.b.engine->counters().rx_nak_access == 1);
    CHECK(t.b.events.has_event(EventType::kQpAccessErr, t.b.qpn));
    QpAttr a;
    t.b.engine->query_qp(Node::kOwner, t.b.qpn, &a, nullptr);
    CHECK(a.qp_state == QpState::kErr);
  }
}

// A SEND whose bytes did not land completes its receive with an error, the
// receive before it (really placed) with success.
TEST_CASE("responder__receive_whose_placement_failed_completes_in_error") {
  for (bool at_commit : {false, true}) {
    INFO("fail at commit: " << at_commit);
    Bench t;
    t.connect_pair();
    t.b.dma.fail_on_commit = at_commit;
    t.b.dma.bad_writes.push_back({t.b.base() + 8192, 4096});
    REQUIRE(t.b.post_recv(10, 0, 100) == 0);
    REQUIRE(t.b.post_recv(11, 8192, 100) == 0);
    REQUIRE(t.a.post_send(t.a.wr(WrOpcode::kSend, 1, 0, 100)) == 0);
    REQUIRE(t.a.post_send(t.a.wr(WrOpcode::kSend, 2, 0, 100)) == 0);
    auto sc = run_until_send_cq(t, 2);
    REQUIRE(sc.size() == 2);
    CHECK(st(sc[0]) == "SUCCESS");
    CHECK(st(sc[1]) == "REM_ACCESS_ERR");
    auto rc = t.b.recv_cq();
    REQUIRE(rc.size() == 2);
    CHECK(rc[0].wr_id == 10);
    CHECK(st(rc[0]) == "SUCCESS");
    CHECK(rc[1].wr_id == 11);
    CHECK(st(rc[1]) == "LOC_ACCESS_ERR");
  }
}

// An atomic's result is answered only after its write landed.
TEST_CASE("responder__atomic_whose_write_failed_is_not_answered") {
  for (bool at_commit : {false, true}) {
    INFO("fail at commit: " << at_commit);
    Bench t;
    t.connect_pair();
    t.b.dma.fail_on_commit = at_commit;
    t.b.dma.bad_writes.push_back({t.b.base() + 64, 8});
    SendWr fa = t.a.wr(WrOpcode::kAtomicFetchAdd, 1, 0, 8);
    fa.remote_addr = t.b.base() + 64;
    fa.rkey = t.b.mr.rkey;
    fa.compare_add = 5;
    REQUIRE(t.a.post_send(fa) == 0);
    auto sc = run_until_send_cq(t, 1);
    REQUIRE(sc.size() == 1);
    CHECK(st(sc[0]) == "REM_ACCESS_ERR");
    CHECK_FALSE(sent(t.b, "ATOMIC_RESP"));
    CHECK(t.b.events.has_event(EventType::kQpAccessErr, t.b.qpn));
  }
}
}  // namespace metaroce::fw::test

// ---- dereg_mr: the NIC never touches memory through a dead key ----

namespace metaroce::fw::test {
namespace {
size_t count_sent(const Node& n, const std::string& what) {
  size_t k = 0;
  for (auto& s : n.port.log) k += s.find(what) != std::string::npos;
  return k;
}
// CE marks on 400 of b's own WRITEs shrink b's congestion window to its
// minimum; then a 1 MiB READ of b's memory from a, ready to post.
SendWr collapse_b_window_then_read(Bench& t) {
  t.b.port.ecn = 0b11;
  for (int i = 0; i < 400; ++i) {
    SendWr w = t.b.wr(WrOpcode::kRdmaWrite, 100 + i, 0, 1024, 0);
    w.remote_addr = t.a.base();
    w.rkey = t.a.mr.rkey;
    REQUIRE(t.b.post_send(w) == 0);
    t.run([&] { return t.b.engine->describe_qp(t.b.qpn).find("sq 0/0/0") != std::string::npos; });
  }
  t.b.port.ecn = 0b10;
  SendWr r = t.a.wr(WrOpcode::kRdmaRead, 1, 0, 1 << 20);
  r.remote_addr = t.b.base();
  r.rkey = t.b.mr.rkey;
  return r;
}
}  // namespace

TEST_CASE("responder__dereg_mr_stops_a_queued_read") {
  Bench t;
  t.connect_pair(1 << 21);
  // b paces its READ responses at line rate, so the READ job is still
  // queued after its first response, when the host deregisters the MR.
  // (CE marks on b's own requests shrink its window too, which must not
  // matter: responder__read_responses_are_not_held_by_the_responders_own_window.)
  SendWr r = collapse_b_window_then_read(t);
  REQUIRE(t.a.post_send(r) == 0);
  REQUIRE(t.run([&] { return count_sent(t.b, "RDMA_READ_RESP") >= 1; }));
  size_t before = count_sent(t.b, "RDMA_READ_RESP");
  REQUIRE(before < 1024);  // the READ is still being answered
  REQUIRE(t.b.engine->dereg_mr(Node::kOwner, t.b.mr.lkey) == 0);
  t.b.dma.watch = {t.b.base(), t.b.mem.size()};
  auto sc = run_until_send_cq(t, 1);
  REQUIRE(sc.size() == 1);
  CHECK(st(sc[0]) == "REM_ACCESS_ERR");
  CHECK(t.b.dma.watch_hits == 0);  // no DMA through the dead rkey
  CHECK(count_sent(t.b, "RDMA_READ_RESP") == before);
  CHECK(t.b.events.has_event(EventType::kQpAccessErr, t.b.qpn));
}

// The responder's own congestion window (its requester role's) gets no
// feedback from READ responses. After it collapsed (CE on b's own WRITEs),
// READ responses used to crawl at one packet per RTT until the READ ran out
// of retries on a live daemon; they leave at line rate now, and the data a
// peer can pull is bounded on its side (max_rd_atomic).
TEST_CASE("responder__read_responses_are_not_held_by_the_responders_own_window") {
  Bench t;
  t.connect_pair(1 << 21);
  SendWr r = collapse_b_window_then_read(t);
  REQUIRE(t.b.engine->describe_qp(t.b.qpn).find("cwnd 1024") != std::string::npos);  // collapsed
  Time start = t.clock.t;
  REQUIRE(t.a.post_send(r) == 0);
  auto sc = run_until_send_cq(t, 1);
  REQUIRE(sc.size() == 1);
  CHECK(st(sc[0]) == "SUCCESS");
  // 1 MiB at 25 Gbit/s is 0.34 ms on the wire; one packet per 10 us RTT
  // would take over 10 ms.
  CHECK(t.clock.t - start < 2'000'000);
}

TEST_CASE("responder__dereg_mr_stops_a_receive_mid_message") {
  Bench t;
  t.connect_pair(1 << 21);
  REQUIRE(t.b.post_recv(10, 0, 1 << 20) == 0);
  REQUIRE(t.a.post_send(t.a.wr(WrOpcode::kSend, 1, 0, 1 << 20)) == 0);
  REQUIRE(t.run([&] { return t.b.dma.writes >= 1; }));
  REQUIRE(t.b.dma.writes < 1024);  // mid-message
  REQUIRE(t.b.engine->dereg_mr(Node::kOwner, t.b.mr.lkey) == 0);
  t.b.dma.watch = {t.b.base(), t.b.mem.size()};
  auto sc = run_until_send_cq(t, 1);
  REQUIRE(sc.size() == 1);
  CHECK(st(sc[0]) == "REM_OP_ERR");
  CHECK(t.b.dma.watch_hits == 0);  // nothing more written into the dead MR
  auto rc = t.b.recv_cq();
  REQUIRE(rc.size() == 1);
  CHECK(st(rc[0]) == "LOC_PROT_ERR");
}
}  // namespace metaroce::fw::test

namespace metaroce::fw::test {
// The daemon's DMA flushes queued writes before every read and drops their
// outcome. The responder's first packet is placed (queued, doomed) and its
// ACK delayed; then the same process posts work and the requester reads its
// payload. The engine must commit before that read, or the failure is lost
// and the delayed ACK acknowledges data that never landed.
TEST_CASE("responder__failure_is_not_lost_to_a_read_that_flushes") {
  Bench t;
  t.connect_pair();
  t.b.dma.fail_on_commit = true;
  t.b.dma.reads_flush = true;
  t.b.dma.bad_writes.push_back({t.b.base() + 4096 + 100, 10});
  t.filter = [](const std::string& what, bool from_a) {  // first copies of packets 2, 3
    bool later = what.find("psn 1001 ") != std::string::npos ||
                 what.find("psn 1002 ") != std::string::npos;
    return !(from_a && later && what.find("RETX") == std::string::npos);
  };
  REQUIRE(t.a.post_send(write_to(t, 1, 0, 4096, 3000)) == 0);
  REQUIRE(t.run([&] { return t.b.dma.failed_writes >= 1; }));
  SendWr w = t.b.wr(WrOpcode::kRdmaWrite, 9, 0, 100);
  w.remote_addr = t.a.base();
  w.rkey = t.a.mr.rkey;
  REQUIRE(t.b.post_send(w) == 0);
  t.b.engine->pump();  // gathers w's payload: a read
  auto sc = run_until_send_cq(t, 1);
  REQUIRE(sc.size() == 1);
  CHECK(st(sc[0]) == "REM_ACCESS_ERR");
  CHECK(acks_of(t.b).empty());  // the doomed packet was never acknowledged
  CHECK(t.b.dma.failed_commits == 1);
}
}  // namespace metaroce::fw::test

namespace metaroce::fw::test {

// docs/engine.md §Ordering: a READ that overtakes a lost WRITE before it is
// received (SACKed, so the WRITE is found lost at once) but held, and served
// once the WRITE's retransmission fills the hole: it returns the written
// data, and the READ_REQ itself is never resent.
TEST_CASE("responder__read_ahead_of_a_hole_is_held_then_served_in_order") {
  Bench t;
  t.connect_pair();
  pattern(t.a, 0, 1000, 5);
  bool dropped = false;
  t.filter = [&](const std::string& what, bool from_a) {
    if (from_a && !dropped && what.find("RDMA_WRITE") == 0) return !(dropped = true);
    return true;
  };
  REQUIRE(t.a.post_send(write_to(t, 1, 0, 20000, 1000)) == 0);
  SendWr r = t.a.wr(WrOpcode::kRdmaRead, 2, 30000, 1000);
  r.remote_addr = t.b.base() + 20000;
  r.rkey = t.b.mr.rkey;
  REQUIRE(t.a.post_send(r) == 0);
  auto sc = run_until_send_cq(t, 2);
  REQUIRE(sc.size() == 2);
  CHECK(st(sc[0]) == "SUCCESS");
  CHECK(st(sc[1]) == "SUCCESS");
  CHECK(std::memcmp(t.a.mem.data(), t.a.mem.data() + 30000, 1000) == 0);  // the written bytes
  CHECK(t.b.engine->counters().rx_held_unordered == 1);
  CHECK(t.b.engine->counters().rx_drop_unordered == 0);
  for (const std::string& l : t.a.port.log) {
    INFO(l);
    CHECK(!(l.find("RDMA_READ_REQ") != std::string::npos && l.find("RETX") != std::string::npos));
  }
}

}  // namespace metaroce::fw::test

// EngineConfig::violate (the conformance suite's broken device): each bit
// breaks its one rule, and an engine without bits keeps it.
TEST_CASE("responder__violations_break_only_the_named_rule") {
  uint32_t bits = 0;
  std::string err;
  CHECK(parse_violations("ack-without-sack,no-probe-reply", &bits, &err));
  CHECK(bits == (kViolateAckWithoutSack | kViolateNoProbeReply));
  CHECK(violation_names(bits) == "ack-without-sack,no-probe-reply");
  CHECK_FALSE(parse_violations("ack-without-sack,bogus", &bits, &err));
  CHECK(err == "unknown rule 'bogus' (known: ack-without-sack,wrong-nack-code,no-probe-reply)");
  CHECK_FALSE(parse_violations("", &bits, &err));

  for (uint32_t violate : {0u, uint32_t{kViolateAckWithoutSack}}) {
    INFO("violate " << violate);
    EngineConfig cfg;
    cfg.violate = violate;
    Bench t(1, cfg);
    t.connect_pair();
    bool dropped = false;
    t.filter = [&](const std::string& what, bool from_a) {
      if (from_a && !dropped && what.find("psn 1001 ") != std::string::npos) return dropped = true, false;
      return true;
    };
    REQUIRE(t.a.post_send(write_to(t, 1, 0, 0, 4096)) == 0);
    run_until_send_cq(t, 1);
    bool saw_sack = false;
    for (auto& s : t.b.port.log)
      if (s.find("ACK cum 1001 sack") != std::string::npos && s.find("sack 0") == std::string::npos)
        saw_sack = true;
    CHECK(saw_sack == (violate == 0));
  }
  for (uint32_t violate : {0u, uint32_t{kViolateWrongNackCode}}) {
    INFO("violate " << violate);
    EngineConfig cfg;
    cfg.violate = violate;
    Bench t(1, cfg);
    t.connect_pair();
    SendWr w = write_to(t, 1, 0, 0, 100);
    w.rkey ^= 0x80;
    REQUIRE(t.a.post_send(w) == 0);
    auto sc = run_until_send_cq(t, 1);
    REQUIRE(sc.size() == 1);
    CHECK(st(sc[0]) == (violate ? "REM_INV_REQ_ERR" : "REM_ACCESS_ERR"));
  }
  for (uint32_t violate : {0u, uint32_t{kViolateNoProbeReply}}) {
    INFO("violate " << violate);
    EngineConfig cfg;
    cfg.violate = violate;
    Bench t(1, cfg);
    t.connect_pair();
    proto::Packet p;
    p.mbth.opcode = proto::Opcode::kProbe;
    p.mbth.dest_qpn = t.b.qpn;
    proto::FrameHeaders h;
    h.src_ip = t.a.ip;
    h.dst_ip = t.b.ip;
    std::vector<uint8_t> frame(200);
    frame.resize(proto::build_frame(h, p, frame));
    t.b.engine->on_frame(frame);
    CHECK(t.b.port.raw.size() == (violate ? 0u : 1u));
  }
}

}  // namespace metaroce::fw::test

namespace metaroce::fw::test {
// docs/protocol.md §3.8: a request a switch cut to its headers (trim DSCP,
// lengths still claiming the payload) is answered with NACK TRIMMED, and
// the requester resends that PSN at once: no RACK wait, no timeout.
namespace {
constexpr uint8_t kTrimDscp = 46;
std::vector<uint8_t> trimmed_copy(const Node& from, const Node& to, const OutPacket& sent,
                                  uint32_t payload_len) {
  proto::FrameHeaders h;
  h.src_ip = from.ip;
  h.dst_ip = to.ip;
  h.src_port = sent.src_port;
  h.dscp = kTrimDscp;
  proto::Packet p = sent.packet;
  std::vector<uint8_t> zeros(payload_len);
  p.payload = zeros;
  std::vector<uint8_t> f(proto::encap_length(h) + proto::transport_length(p));
  REQUIRE(proto::build_frame(h, p, f) == f.size());
  f.resize(proto::encap_length(h) + proto::kMbthLen);
  return f;
}
EngineConfig trimming() {
  EngineConfig cfg;
  cfg.trimmed_dscp = kTrimDscp;
  return cfg;
}
}  // namespace

TEST_CASE("responder__trimmed_request_is_nacked_and_resent_at_once") {
  Bench t(1, trimming());
  t.connect_pair();
  SendWr w = t.a.wr(WrOpcode::kRdmaWrite, 1, 0, 3000);
  w.remote_addr = t.b.base();
  w.rkey = t.b.mr.rkey;
  REQUIRE(t.a.post_send(w) == 0);
  t.a.engine->pump();
  REQUIRE(t.a.port.outbox.size() == 3);
  auto cut = trimmed_copy(t.a, t.b, t.a.port.raw[1], 1024);
  t.b.engine->on_frame(t.a.port.outbox[0].bytes);
  t.b.engine->on_frame(cut);
  REQUIRE(!t.b.port.outbox.empty());
  REQUIRE(t.b.port.log.back() == "tx NACK TRIMMED psn 1001");
  CHECK(t.b.engine->counters().rx_drop_parse == 0);
  const Time sent_at = t.clock.t;
  t.a.port.outbox.clear();
  t.a.engine->on_frame(t.b.port.outbox.back().bytes);  // the NACK, nothing else yet
  REQUIRE(!t.a.port.log.empty());
  CHECK(t.a.port.log.back() == "tx RDMA_WRITE psn 1001 msn 0 off 1024 len 1024 ACKREQ RETX");
  CHECK(t.clock.t == sent_at);  // at once
  CHECK(t.a.engine->counters().fast_retransmits == 1);
  // A trimmed copy of a PSN already received is not NACKed.
  const size_t nacks = t.b.port.log.size();
  t.b.engine->on_frame(trimmed_copy(t.a, t.b, t.a.port.raw[0], 1024));
  CHECK(t.b.port.log.size() == nacks);
  CHECK(t.b.engine->counters().rx_drop_duplicate == 1);
}

TEST_CASE("responder__trimmed_request_without_the_trim_dscp_configured_is_a_parse_drop") {
  Bench t;
  t.connect_pair();
  SendWr w = t.a.wr(WrOpcode::kRdmaWrite, 1, 0, 1024);
  w.remote_addr = t.b.base();
  w.rkey = t.b.mr.rkey;
  REQUIRE(t.a.post_send(w) == 0);
  t.a.engine->pump();
  const size_t before = t.b.port.log.size();
  t.b.engine->on_frame(trimmed_copy(t.a, t.b, t.a.port.raw[0], 1024));
  CHECK(t.b.engine->counters().rx_drop_parse == 1);
  CHECK(t.b.port.log.size() == before);
}
}  // namespace metaroce::fw::test

namespace metaroce::fw::test {
// A trimmed frame carries no ICRC, so it is trusted for nothing but naming
// a PSN of the sender's QP: one from a third address is a counted drop,
// answered with nothing (docs/engine.md §Trust).
TEST_CASE("responder__trimmed_request_from_another_address_is_dropped") {
  Bench t(1, trimming());
  t.connect_pair();
  SendWr w = t.a.wr(WrOpcode::kRdmaWrite, 1, 0, 1024);
  w.remote_addr = t.b.base();
  w.rkey = t.b.mr.rkey;
  REQUIRE(t.a.post_send(w) == 0);
  t.a.engine->pump();
  Node forger(t.clock, 0x0A0000FE, 9);
  const size_t before = t.b.port.log.size();
  t.b.engine->on_frame(trimmed_copy(forger, t.b, t.a.port.raw[0], 1024));
  CHECK(t.b.engine->counters().rx_drop_wrong_source == 1);
  CHECK(t.b.port.log.size() == before);
}

// hal.h tx_ready: READ responses are held in the engine like requests while
// the host's transmit queue is full (the daemon would otherwise drop them at
// its ring and wait for the requester's recovery), and go out, all of them,
// once the host pumps with room.
TEST_CASE("responder__full_transmit_queue_holds_read_responses_until_pump") {
  Bench t;
  t.connect_pair();
  auto responses = [&] {
    return std::count_if(t.b.port.log.begin(), t.b.port.log.end(),
                         [](const std::string& l) { return l.find("RDMA_READ_RESP") != std::string::npos; });
  };
  SendWr r = t.a.wr(WrOpcode::kRdmaRead, 1, 0, 8 * 1024);
  r.remote_addr = t.b.base();
  r.rkey = t.b.mr.rkey;
  for (size_t i = 0; i < 8 * 1024; ++i) t.b.mem[i] = static_cast<uint8_t>(i * 7 + 1);
  t.b.port.tx_room = 1;
  REQUIRE(t.a.post_send(r) == 0);
  REQUIRE(t.run([&] { return responses() >= 1; }));
  t.b.engine->pump();
  t.b.engine->pump();
  CHECK(responses() == 1);  // the rest waits, unsent
  t.b.port.tx_room = -1;
  auto sc = run_until_send_cq(t, 1);
  REQUIRE(sc.size() == 1);
  CHECK(st(sc[0]) == "SUCCESS");
  CHECK(std::memcmp(t.a.mem.data(), t.b.mem.data(), 8 * 1024) == 0);
}
}  // namespace metaroce::fw::test

namespace metaroce::fw::test {

namespace {
// A READ_REQ from a's address straight into b's engine: `len` bytes at
// offset `off` of the READ message whose first byte is b's byte `va_off`.
void inject_read(Bench& t, uint32_t psn, uint32_t msn, uint64_t va_off, uint32_t off, uint32_t len) {
  proto::Packet p;
  p.mbth.opcode = proto::Opcode::kReadReq;
  p.mbth.dest_qpn = t.b.qpn;
  p.mbth.psn = psn;
  p.mbth.msn = msn;
  p.mbth.offset = off;
  p.mbth.flags = proto::kFlagLast | proto::kFlagAckReq;
  p.reth = {t.b.base() + va_off + off, t.b.mr.rkey, len};
  proto::FrameHeaders h;
  h.src_ip = t.a.ip;
  h.dst_ip = t.b.ip;
  std::vector<uint8_t> frame(256);
  frame.resize(proto::build_frame(h, p, frame));
  t.b.engine->on_frame(frame);
}
// b sends at most n more READ responses (n < 0: all it has), time passing;
// then none until the next call (the port stays full: requests injected
// meanwhile only queue).
void serve_reads(Bench& t, int64_t n) {
  t.b.port.tx_room = n < 0 ? -1 : n;
  for (int i = 0; i < 100 && t.b.port.tx_room != 0; ++i) {
    t.clock.t += 100'000;
    t.b.engine->pump();
  }
  t.b.port.tx_room = 0;
}
std::string lines(std::initializer_list<const char*> l) {
  std::string s;
  for (auto* x : l) s += std::string(x) + "\n";
  return s;
}
// b's READ responses so far, "psn P msn M off O len L[ LAST]".
std::string responses(const Node& n) {
  std::string s;
  for (auto& l : n.port.log)
    if (l.rfind("tx RDMA_READ_RESP ", 0) == 0) s += l.substr(18) + "\n";
  return s;
}
}  // namespace

// A repair of a READ goes ahead of the READs after it, the one being
// answered too: the requester holds that READ's data (and completions)
// until it comes. In arrival order it waited for every READ queued.
TEST_CASE("responder__read_repair_goes_ahead_of_later_reads") {
  Bench t;
  t.connect_pair();
  t.b.port.tx_room = 0;
  inject_read(t, 1000, 0, 0, 0, 2048);
  inject_read(t, 1001, 1, 4096, 0, 2048);
  inject_read(t, 1002, 2, 8192, 0, 2048);
  serve_reads(t, 3);  // READ 0 and the first response of READ 1
  inject_read(t, 1003, 0, 0, 1024, 1024);  // READ 0's second response was lost
  serve_reads(t, -1);
  CHECK(responses(t.b) == lines({"psn 1000 msn 0 off 0 len 1024",
                                 "psn 1000 msn 0 off 1024 len 1024 LAST",
                                 "psn 1001 msn 1 off 0 len 1024",
                                 "psn 1003 msn 0 off 1024 len 1024 LAST",
                                 "psn 1001 msn 1 off 1024 len 1024 LAST",
                                 "psn 1002 msn 2 off 0 len 1024",
                                 "psn 1002 msn 2 off 1024 len 1024 LAST"}));
  CHECK(t.b.engine->counters().rx_nak_invalid == 0);
}

// A re-issue repairs a READ that already ran in PSN order: it is served at
// once, not held behind a hole of later requests (a lost WRITE, a new READ
// still travelling), as a first issue ahead of a hole must be.
TEST_CASE("responder__read_repair_is_not_held_behind_a_hole") {
  Bench t;
  t.connect_pair();
  t.b.port.tx_room = 0;
  inject_read(t, 1000, 0, 0, 0, 2048);
  serve_reads(t, -1);
  inject_read(t, 1002, 0, 0, 1024, 1024);  // PSN 1001 is missing
  serve_reads(t, -1);
  CHECK(responses(t.b) == lines({"psn 1000 msn 0 off 0 len 1024",
                                 "psn 1000 msn 0 off 1024 len 1024 LAST",
                                 "psn 1002 msn 0 off 1024 len 1024 LAST"}));
  CHECK(t.b.engine->counters().rx_held_unordered == 0);
  // A first issue ahead of the hole still waits for it.
  inject_read(t, 1003, 1, 4096, 0, 1024);
  CHECK(t.b.engine->counters().rx_held_unordered == 1);
}

// A repair asks for what the requester misses; what of it the READ's job
// still queued has not sent yet comes anyway, so only the rest is served
// (a READ the requester asked again while its responder was still sending
// it, after a stall, was otherwise served twice).
TEST_CASE("responder__read_repair_serves_only_what_no_queued_job_sends") {
  Bench t;
  t.connect_pair();
  t.b.port.tx_room = 0;
  inject_read(t, 1000, 0, 0, 0, 8192);
  serve_reads(t, 2);  // [0, 2048) sent, [2048, 8192) still to come
  inject_read(t, 1001, 0, 0, 0, 4096);     // its tail is the job's: [0, 2048) left
  inject_read(t, 1002, 0, 0, 6144, 2048);  // all of it is the job's: nothing left
  serve_reads(t, -1);
  CHECK(responses(t.b) == lines({"psn 1000 msn 0 off 0 len 1024",
                                 "psn 1000 msn 0 off 1024 len 1024",
                                 "psn 1000 msn 0 off 2048 len 1024",
                                 "psn 1000 msn 0 off 3072 len 1024",
                                 "psn 1000 msn 0 off 4096 len 1024",
                                 "psn 1000 msn 0 off 5120 len 1024",
                                 "psn 1000 msn 0 off 6144 len 1024",
                                 "psn 1000 msn 0 off 7168 len 1024 LAST",
                                 "psn 1001 msn 0 off 0 len 1024",
                                 "psn 1001 msn 0 off 1024 len 1024 LAST"}));
  CHECK(t.b.engine->counters().read_repairs_trimmed == 2);
  // Once the job is done, a repair is served whole.
  inject_read(t, 1003, 0, 0, 6144, 2048);
  serve_reads(t, -1);
  CHECK(responses(t.b).find("psn 1003 msn 0 off 6144 len 1024\npsn 1003 msn 0 off 7168 len 1024 LAST") !=
        std::string::npos);
}

}  // namespace metaroce::fw::test
