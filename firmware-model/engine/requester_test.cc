// requester.{h,cc}: WRs to packets, segmentation, headers, local checks,
// retransmission timeout and retry exhaustion.
#include <doctest/doctest.h>

#include <cerrno>
#include <cstring>

#include "firmware-model/engine/testing/fakes.h"

namespace metaroce::fw::test {

namespace {
std::vector<std::string> request_list(const Node& n) {
  std::vector<std::string> v;
  for (auto& s : n.port.log)
    if (s.rfind("tx ACK ", 0) != 0 && s.rfind("tx NACK ", 0) != 0) v.push_back(s);
  return v;
}
// One line per request packet, so doctest prints the difference.
std::string requests(const Node& n) {
  std::string s;
  for (auto& l : request_list(n)) s += l + "\n";
  return s;
}
std::string lines(std::initializer_list<const char*> l) {
  std::string s;
  for (auto* x : l) s += std::string(x) + "\n";
  return s;
}
}  // namespace

TEST_CASE("requester__write_segments_at_mtu_with_reth_in_every_packet") {
  Bench t;
  t.connect_pair();
  SendWr w = t.a.wr(WrOpcode::kRdmaWrite, 1, 0, 2500);
  w.remote_addr = t.b.base() + 100;
  w.rkey = t.b.mr.rkey;
  REQUIRE(t.a.post_send(w) == 0);
  t.a.engine->pump();
  CHECK(requests(t.a) == lines({
                             "tx RDMA_WRITE psn 1000 msn 0 off 0 len 1024",
                             "tx RDMA_WRITE psn 1001 msn 0 off 1024 len 1024",
                             "tx RDMA_WRITE psn 1002 msn 0 off 2048 len 452 LAST ACKREQ",
                         }));
  REQUIRE(t.a.port.raw.size() == 3);
  // The clock's nanosecond, and strictly rising after it within one
  // nanosecond, so that an ACK's echo names one transmission.
  uint32_t stamp = static_cast<uint32_t>(t.clock.t);
  for (auto& o : t.a.port.raw) {
    CHECK(o.packet.mbth.timestamp == stamp++);
    CHECK(o.packet.reth.va == t.b.base() + 100);
    CHECK(o.packet.reth.rkey == t.b.mr.rkey);
    CHECK(o.packet.reth.length == 2500);
    CHECK(o.packet.mbth.dest_qpn == t.b.qpn);
    CHECK((o.src_port & 0xC000) == 0xC000);
    CHECK(o.dst_ip == t.b.ip);
    CHECK(o.src_ip == t.a.ip);
  }
  // Path entropy differs per path.
  CHECK(t.a.port.raw[0].src_port != t.a.port.raw[1].src_port);
}

TEST_CASE("requester__send_imm_carries_seth_and_imm_in_every_packet") {
  Bench t;
  t.connect_pair();
  SendWr w = t.a.wr(WrOpcode::kSendImm, 1, 0, 1500);
  w.imm = 0xABCD;
  REQUIRE(t.a.post_send(w) == 0);
  t.a.engine->pump();
  REQUIRE(t.a.port.raw.size() == 2);
  for (auto& o : t.a.port.raw) {
    CHECK(o.packet.seth.length == 1500);
    CHECK(o.packet.imm == 0xABCD);
    CHECK(o.packet.mbth.msn == 0);
  }
  CHECK(request_list(t.a).at(1) == "tx SEND_IMM psn 1001 msn 0 off 1024 len 476 LAST ACKREQ");
}

TEST_CASE("requester__msn_counts_receive_consuming_and_read_messages_separately") {
  Bench t;
  t.connect_pair();
  SendWr s = t.a.wr(WrOpcode::kSend, 1, 0, 10);
  SendWr w = t.a.wr(WrOpcode::kRdmaWrite, 2, 0, 10);
  w.remote_addr = t.b.base();
  w.rkey = t.b.mr.rkey;
  SendWr r = t.a.wr(WrOpcode::kRdmaRead, 3, 0, 10);
  r.remote_addr = t.b.base();
  r.rkey = t.b.mr.rkey;
  for (auto* x : {&s, &w, &r, &s, &r}) REQUIRE(t.a.post_send(*x) == 0);
  t.a.engine->pump();
  CHECK(requests(t.a) == lines({
                             "tx SEND psn 1000 msn 0 off 0 len 10 LAST ACKREQ",
                             "tx RDMA_WRITE psn 1001 msn 1 off 0 len 10 LAST ACKREQ",
                             "tx RDMA_READ_REQ psn 1002 msn 0 off 0 len 0 LAST ACKREQ",
                             "tx SEND psn 1003 msn 1 off 0 len 10 LAST ACKREQ",
                             "tx RDMA_READ_REQ psn 1004 msn 1 off 0 len 0 LAST ACKREQ",
                         }));
}

TEST_CASE("requester__inline_and_multi_sge_gather") {
  Bench t;
  t.connect_pair();
  REQUIRE(t.b.post_recv(1, 4096, 100) == 0);
  REQUIRE(t.b.post_recv(2, 8192, 100) == 0);
  SendWr in = t.a.wr(WrOpcode::kSend, 1, 0, 0, kSendSignaled | kSendInline);
  in.num_sge = 0;
  in.inline_data = {'h', 'e', 'l', 'l', 'o'};
  REQUIRE(t.a.post_send(in) == 0);
  std::memcpy(t.a.mem.data() + 0, "abc", 3);
  std::memcpy(t.a.mem.data() + 1000, "defg", 4);
  std::memcpy(t.a.mem.data() + 2000, "hi", 2);
  SendWr sg = t.a.wr(WrOpcode::kSend, 2, 0, 3);
  sg.num_sge = 3;
  sg.sg[1] = {t.a.base() + 1000, 4, t.a.mr.lkey};
  sg.sg[2] = {t.a.base() + 2000, 2, t.a.mr.lkey};
  REQUIRE(t.a.post_send(sg) == 0);
  std::vector<Completion> rc;
  CHECK(t.run([&] {
    for (auto& c : t.b.recv_cq()) rc.push_back(c);
    return rc.size() == 2;
  }));
  CHECK(std::memcmp(t.b.mem.data() + 4096, "hello", 5) == 0);
  CHECK(rc[0].byte_len == 5);
  CHECK(std::memcmp(t.b.mem.data() + 8192, "abcdefghi", 9) == 0);
  CHECK(rc[1].byte_len == 9);
}

TEST_CASE("requester__post_send_rejects_bad_requests") {
  Bench t;
  t.connect_pair();
  SendWr w = t.a.wr(WrOpcode::kSend, 1, 0, 10, kSendInline);
  w.inline_data.assign(kMaxInline + 1, 0);
  CHECK(t.a.post_send(w) == EINVAL);
  SendWr at = t.a.wr(WrOpcode::kAtomicFetchAdd, 1, 0, 4);
  CHECK(t.a.post_send(at) == EINVAL);  // atomics need one 8-byte SGE
  SendWr many = t.a.wr(WrOpcode::kSend, 1, 0, 10);
  many.num_sge = kMaxSge + 1;
  CHECK(t.a.post_send(many) == EINVAL);
  SendWr op = t.a.wr(static_cast<WrOpcode>(10), 1, 0, 10);  // past the last opcode
  CHECK(t.a.post_send(op) == EINVAL);
  SendWr ok = t.a.wr(WrOpcode::kSend, 1, 0, 10);
  int accepted = 0;
  while (t.a.post_send(ok) == 0) ++accepted;
  CHECK(accepted == 64);  // max_send_wr, then ENOMEM
  CHECK(t.a.post_send(ok) == ENOMEM);
}

TEST_CASE("requester__bad_lkey_completes_loc_prot_err_without_sending") {
  Bench t;
  t.connect_pair();
  SendWr w = t.a.wr(WrOpcode::kSend, 7, 0, 10);
  w.sg[0].lkey ^= 0x1;
  REQUIRE(t.a.post_send(w) == 0);
  SendWr next = t.a.wr(WrOpcode::kSend, 8, 0, 10);
  REQUIRE(t.a.post_send(next) == 0);
  t.a.engine->pump();
  CHECK(t.a.port.log.empty());
  auto sc = t.a.send_cq();
  REQUIRE(sc.size() == 2);
  CHECK(std::string(status_name(sc[0].status)) == "LOC_PROT_ERR");
  CHECK(std::string(status_name(sc[1].status)) == "WR_FLUSH_ERR");
  CHECK(t.a.engine->counters().local_errors == 1);
}

TEST_CASE("requester__message_above_max_msg_size_is_loc_len_err") {
  EngineConfig cfg;
  cfg.caps.max_msg_size = 1000;
  Bench t(1, cfg);
  t.connect_pair();
  REQUIRE(t.a.post_send(t.a.wr(WrOpcode::kSend, 1, 0, 1001)) == 0);
  t.a.engine->pump();
  CHECK(t.a.port.log.empty());
  auto sc = t.a.send_cq();
  REQUIRE(sc.size() == 1);
  CHECK(std::string(status_name(sc[0].status)) == "LOC_LEN_ERR");
}

TEST_CASE("requester__read_into_buffer_without_local_write_is_loc_prot_err") {
  Bench t;
  constexpr uint32_t kAll =
      kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead | kAccessRemoteAtomic;
  t.a.setup(1 << 16, kAccessRemoteRead);  // no local write
  t.b.setup(1 << 16, kAll);
  t.a.connect(t.b.ip, t.b.qpn, kAll);
  t.b.connect(t.a.ip, t.a.qpn, kAll);
  SendWr r = t.a.wr(WrOpcode::kRdmaRead, 1, 0, 100);
  r.remote_addr = t.b.base();
  r.rkey = t.b.mr.rkey;
  REQUIRE(t.a.post_send(r) == 0);
  t.a.engine->pump();
  auto sc = t.a.send_cq();
  REQUIRE(sc.size() == 1);
  CHECK(std::string(status_name(sc[0].status)) == "LOC_PROT_ERR");
}

TEST_CASE("requester__peer_never_answers_retry_exceeded_after_retry_cnt") {
  Bench t;
  t.connect_pair(1 << 16, /*timeout=*/10, /*retry_cnt=*/3);
  t.filter = [](const std::string&, bool from_a) { return !from_a; };
  SendWr w = t.a.wr(WrOpcode::kRdmaWrite, 1, 0, 3000);
  w.remote_addr = t.b.base();
  w.rkey = t.b.mr.rkey;
  REQUIRE(t.a.post_send(w) == 0);
  REQUIRE(t.a.post_send(t.a.wr(WrOpcode::kSend, 2, 0, 10)) == 0);
  REQUIRE(t.b.post_recv(9, 0, 100) == 0);
  Time start = t.clock.t;
  std::vector<Completion> sc;
  CHECK(t.run([&] {
    for (auto& c : t.a.send_cq()) sc.push_back(c);
    return !sc.empty();
  }));
  REQUIRE(sc.size() == 2);
  CHECK(std::string(status_name(sc[0].status)) == "RETRY_EXC_ERR");
  CHECK(std::string(status_name(sc[1].status)) == "WR_FLUSH_ERR");
  const Counters& c = t.a.engine->counters();
  CHECK(c.timeouts >= 4);  // at least retry_cnt retries, then the one that gives up
  CHECK(c.tx_retransmits >= 3);
  // IB semantics: the error comes once retry_cnt + 1 local ACK timeouts
  // (4.096us << 10 = 4.19 ms each) have passed without progress, however
  // often the faster adaptive RTO (1, 2, 4 ms, capped at 4.19) retransmitted.
  Time took = t.clock.t - start;
  CHECK(took >= 4 * 4'194'304);
  CHECK(took < 4 * 4'194'304 + 4'200'000);
  QpAttr a;
  REQUIRE(t.a.engine->query_qp(Node::kOwner, t.a.qpn, &a, nullptr) == 0);
  CHECK(a.qp_state == QpState::kErr);
}

TEST_CASE("requester__timeout_zero_never_exhausts_retries") {
  Bench t;
  t.connect_pair(1 << 16, /*timeout=*/0, /*retry_cnt=*/1);
  t.filter = [](const std::string&, bool from_a) { return !from_a; };
  REQUIRE(t.a.post_send(t.a.wr(WrOpcode::kSend, 1, 0, 10)) == 0);
  t.run([] { return false; }, 20'000'000'000ull);
  CHECK(t.a.send_cq().empty());
  CHECK(t.a.engine->counters().timeouts >= 10);
  QpAttr a;
  REQUIRE(t.a.engine->query_qp(Node::kOwner, t.a.qpn, &a, nullptr) == 0);
  CHECK(a.qp_state == QpState::kRts);
  // Backoff is capped at 1 s: the retransmissions keep coming.
  CHECK(t.a.engine->next_deadline() <= t.clock.t + 1'000'000'000);
}

TEST_CASE("requester__retries_reset_by_progress") {
  // Drop every data packet's first transmission: each needs one timeout or
  // fast retransmit, but progress in between keeps retry_cnt = 1 enough.
  Bench t;
  t.connect_pair(1 << 16, 10, 1);
  std::set<std::string> seen;
  t.filter = [&](const std::string& what, bool from_a) {
    if (!from_a || what.find("RETX") != std::string::npos) return true;
    return !seen.insert(what).second;
  };
  for (int i = 0; i < 5; ++i) {
    SendWr w = t.a.wr(WrOpcode::kRdmaWrite, i, 0, 100);
    w.remote_addr = t.b.base();
    w.rkey = t.b.mr.rkey;
    REQUIRE(t.a.post_send(w) == 0);
  }
  std::vector<Completion> sc;
  CHECK(t.run([&] {
    for (auto& c : t.a.send_cq()) sc.push_back(c);
    return sc.size() == 5;
  }));
  for (auto& c : sc) CHECK(std::string(status_name(c.status)) == "SUCCESS");
}

TEST_CASE("requester__fence_waits_for_outstanding_read") {
  Bench t;
  t.connect_pair();
  SendWr r = t.a.wr(WrOpcode::kRdmaRead, 1, 0, 100);
  r.remote_addr = t.b.base();
  r.rkey = t.b.mr.rkey;
  REQUIRE(t.a.post_send(r) == 0);
  SendWr w = t.a.wr(WrOpcode::kRdmaWrite, 2, 0, 100, kSendSignaled | kSendFence);
  w.remote_addr = t.b.base() + 1000;
  w.rkey = t.b.mr.rkey;
  REQUIRE(t.a.post_send(w) == 0);
  t.a.engine->pump();
  CHECK(request_list(t.a).size() == 1);  // the WRITE waits behind the fence
  std::vector<Completion> sc;
  CHECK(t.run([&] {
    for (auto& c : t.a.send_cq()) sc.push_back(c);
    return sc.size() == 2;
  }));
  CHECK(request_list(t.a).size() == 2);
}

TEST_CASE("requester__window_of_4096_psns_is_never_exceeded") {
  EngineConfig cfg;
  cfg.base_rtt = 1'000'000;  // huge BDP: the CC window alone would allow more
  Bench t(1, cfg);
  t.connect_pair(1 << 23, 14, 7, 7, 256);
  SendWr w = t.a.wr(WrOpcode::kRdmaWrite, 1, 0, 4u << 20);
  w.remote_addr = t.b.base() + (4u << 20);
  w.rkey = t.b.mr.rkey;
  REQUIRE(t.a.post_send(w) == 0);
  t.a.port.keep_log = false;
  t.a.engine->pump();
  CHECK(t.a.port.outbox.size() <= 4096u);
  std::vector<Completion> sc;
  CHECK(t.run([&] {
    for (auto& c : t.a.send_cq()) sc.push_back(c);
    return sc.size() == 1;
  }));
  CHECK(std::memcmp(t.a.mem.data(), t.b.mem.data() + (4u << 20), 4u << 20) == 0);
  CHECK(t.b.engine->counters().rx_drop_out_of_window == 0);
}

}  // namespace metaroce::fw::test

// ---- memory bounds (docs/engine.md §Memory bounds) ----

namespace metaroce::fw::test {
namespace {
uint64_t used_bytes(Node& n, uint64_t* bound) {
  uint64_t used = 0;
  REQUIRE(n.engine->qp_memory(n.qpn, &used, bound) == 0);
  return used;
}
}  // namespace

// READ tracking was allocated at post time, before the lkey and length were
// checked: 4096 READs of 0xFFFFFFFF bytes held ~8 GiB. Rejected WQEs now
// hold nothing and valid ones allocate only when they start, within the
// per-QP READ budget.
TEST_CASE("requester__huge_reads_stay_within_the_qp_memory_bound") {
  EngineConfig cfg;
  Bench t(1, cfg);
  constexpr uint32_t kAll =
      kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead | kAccessRemoteAtomic;
  t.a.setup(1 << 16, kAll, {128, 16, 4, 4, 64});
  t.b.setup(1 << 16, kAll);
  t.a.connect(t.b.ip, t.b.qpn, kAll);
  t.b.connect(t.a.ip, t.a.qpn, kAll);
  t.filter = [](const std::string&, bool) { return false; };  // the peer never sees them
  MrKeys big;  // 8 GiB of address space: the engine never touches it here
  REQUIRE(t.a.engine->reg_mr(Node::kOwner, t.a.pd, t.a.base(), uint64_t{8} << 30,
                             kAccessLocalWrite, &big) == 0);
  auto read = [&](uint64_t id, uint32_t len, uint32_t lkey) {
    SendWr r = t.a.wr(WrOpcode::kRdmaRead, id, 0, 0);
    r.sg[0] = {t.a.base(), len, lkey};
    r.remote_addr = 0x1000;
    r.rkey = t.b.mr.rkey;
    return r;
  };
  uint64_t bound = 0, idle = used_bytes(t.a, &bound);
  for (int i = 0; i < 32; ++i) REQUIRE(t.a.post_send(read(i, 0xFFFFFFFF, big.lkey)) == 0);  // > max_msg_size
  for (int i = 0; i < 32; ++i) REQUIRE(t.a.post_send(read(i, 1u << 31, big.lkey ^ 1)) == 0);  // bad lkey
  CHECK(used_bytes(t.a, &bound) == idle);  // nothing allocated for rejected WQEs
  QpAttr err;
  err.qp_state = QpState::kReset;
  REQUIRE(t.a.engine->modify_qp(Node::kOwner, t.a.qpn, err, kAttrState) == 0);
  t.a.connect(t.b.ip, t.b.qpn, kAll);
  for (int i = 0; i < 64; ++i) REQUIRE(t.a.post_send(read(i, 1u << 31, big.lkey)) == 0);
  t.run_idle(1'000'000);
  uint64_t used = used_bytes(t.a, &bound);
  CHECK(used <= bound);
  CHECK(used < idle + (2u << 20));  // one 2 GiB READ's bitmap (1 MiB) at a time
  CHECK(bound < (8u << 20));
  err.qp_state = QpState::kErr;
  REQUIRE(t.a.engine->modify_qp(Node::kOwner, t.a.qpn, err, kAttrState) == 0);
  CHECK(used_bytes(t.a, &bound) == idle);  // completed WQEs give large bitmaps back
}
}  // namespace metaroce::fw::test

namespace metaroce::fw::test {
// The requester gathers payload packet by packet: after dereg_mr of the
// send buffer's MR it must not read through the dead lkey.
TEST_CASE("requester__dereg_mr_mid_message_stops_payload_reads") {
  Bench t;
  t.connect_pair(1 << 21);
  SendWr w = t.a.wr(WrOpcode::kRdmaWrite, 1, 0, 1 << 20);
  w.remote_addr = t.b.base();
  w.rkey = t.b.mr.rkey;
  REQUIRE(t.a.post_send(w) == 0);
  REQUIRE(t.run([&] { return t.b.dma.writes >= 1; }));
  REQUIRE(t.b.dma.writes < 1024);
  REQUIRE(t.a.engine->dereg_mr(Node::kOwner, t.a.mr.lkey) == 0);
  t.a.dma.watch = {t.a.base(), t.a.mem.size()};
  std::vector<Completion> sc;
  t.run([&] {
    for (auto& c : t.a.send_cq()) sc.push_back(c);
    return !sc.empty();
  });
  REQUIRE(sc.size() == 1);
  CHECK(std::string(status_name(sc[0].status)) == "LOC_PROT_ERR");
  CHECK(t.a.dma.watch_hits == 0);
}
}  // namespace metaroce::fw::test

namespace metaroce::fw::test {
// hal.h tx_ready: a full host transmit queue holds request packets in the
// engine, unsent and not in flight; pump() after room appears sends them
// stamped with the time they actually leave, so the RTT they measure is
// the fabric's, not the host queue's.
TEST_CASE("requester__full_transmit_queue_holds_requests_until_pump") {
  Bench t;
  t.connect_pair();
  t.a.port.tx_room = 1;
  SendWr w = t.a.wr(WrOpcode::kRdmaWrite, 1, 0, 2500);
  w.remote_addr = t.b.base() + 100;
  w.rkey = t.b.mr.rkey;
  REQUIRE(t.a.post_send(w) == 0);
  t.a.engine->pump();
  CHECK(requests(t.a) == lines({"tx RDMA_WRITE psn 1000 msn 0 off 0 len 1024"}));
  t.clock.t += 50'000;
  t.a.engine->pump();
  CHECK(request_list(t.a).size() == 1);  // still full
  t.a.port.tx_room = -1;
  t.a.engine->pump();
  CHECK(requests(t.a) == lines({
                             "tx RDMA_WRITE psn 1000 msn 0 off 0 len 1024",
                             "tx RDMA_WRITE psn 1001 msn 0 off 1024 len 1024",
                             "tx RDMA_WRITE psn 1002 msn 0 off 2048 len 452 LAST ACKREQ",
                         }));
  REQUIRE(t.a.port.raw.size() == 3);
  CHECK(t.a.port.raw[1].packet.mbth.timestamp == static_cast<uint32_t>(t.clock.t));
}

// ACKs answer what arrived: a responder whose transmit queue is full still
// acknowledges, so the peer's transfer completes.
TEST_CASE("requester__acks_leave_while_transmit_queue_full") {
  Bench t;
  t.connect_pair();
  t.b.port.tx_room = 0;
  SendWr w = t.a.wr(WrOpcode::kRdmaWrite, 1, 0, 4000);
  w.remote_addr = t.b.base();
  w.rkey = t.b.mr.rkey;
  REQUIRE(t.a.post_send(w) == 0);
  std::vector<Completion> sc;
  REQUIRE(t.run([&] {
    for (auto& c : t.a.send_cq()) sc.push_back(c);
    return !sc.empty();
  }));
  CHECK(std::string(status_name(sc[0].status)) == "SUCCESS");
  CHECK(t.a.engine->counters().tx_retransmits == 0);
}
}  // namespace metaroce::fw::test

namespace metaroce::fw::test {
// A packet after which the window holds the next one back asks for an ACK
// (nothing else will trigger one before the delayed-ACK timer); the others
// of the message do not.
TEST_CASE("requester__packet_that_fills_the_window_asks_for_an_ack") {
  EngineConfig cfg;
  cfg.link_bps = 1'000'000'000;
  cfg.base_rtt = 24'000;  // BDP 3,000 bytes: two 1 KiB packets and their headers
  Bench t(1, cfg);
  t.connect_pair();
  SendWr w = t.a.wr(WrOpcode::kRdmaWrite, 1, 0, 4000);
  w.remote_addr = t.b.base();
  w.rkey = t.b.mr.rkey;
  REQUIRE(t.a.post_send(w) == 0);
  t.a.engine->pump();
  CHECK(requests(t.a) == lines({
                             "tx RDMA_WRITE psn 1000 msn 0 off 0 len 1024",
                             "tx RDMA_WRITE psn 1001 msn 0 off 1024 len 1024 ACKREQ",
                         }));
}
}  // namespace metaroce::fw::test
