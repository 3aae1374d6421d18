// Two engines over the test bench: every operation end to end, then the
// same under loss, duplication, corruption and 4-path reordering.
#include <doctest/doctest.h>

#include <cstring>
#include <algorithm>
#include <numeric>

#include "firmware-model/engine/testing/fakes.h"

namespace metaroce::fw::test {

namespace {

void fill(Node& n, uint64_t off, uint32_t len, uint8_t seed) {
  for (uint32_t i = 0; i < len; ++i) n.mem[off + i] = static_cast<uint8_t>(seed + i * 7 + (i >> 8));
}
bool same(Node& x, uint64_t xo, Node& y, uint64_t yo, uint32_t len) {
  return std::memcmp(x.mem.data() + xo, y.mem.data() + yo, len) == 0;
}

}  // namespace

TEST_CASE("engine__send_write_read_atomics_end_to_end") {
  Bench t;
  t.connect_pair(1 << 16);
  fill(t.a, 0, 5000, 1);
  REQUIRE(t.b.post_recv(11, 8192, 8000) == 0);
  REQUIRE(t.a.post_send(t.a.wr(WrOpcode::kSend, 1, 0, 5000)) == 0);
  SendWr w = t.a.wr(WrOpcode::kRdmaWrite, 2, 0, 3000);
  w.remote_addr = t.b.base() + 20000;
  w.rkey = t.b.mr.rkey;
  REQUIRE(t.a.post_send(w) == 0);
  fill(t.b, 30000, 4000, 9);
  SendWr r = t.a.wr(WrOpcode::kRdmaRead, 3, 40000, 4000);
  r.remote_addr = t.b.base() + 30000;
  r.rkey = t.b.mr.rkey;
  REQUIRE(t.a.post_send(r) == 0);
  uint64_t v = 40;
  std::memcpy(t.b.mem.data() + 64, &v, 8);
  SendWr fa = t.a.wr(WrOpcode::kAtomicFetchAdd, 4, 60000, 8);
  fa.remote_addr = t.b.base() + 64;
  fa.rkey = t.b.mr.rkey;
  fa.compare_add = 2;
  REQUIRE(t.a.post_send(fa) == 0);
  SendWr cs = t.a.wr(WrOpcode::kAtomicCmpSwap, 5, 60008, 8);
  cs.remote_addr = t.b.base() + 64;
  cs.rkey = t.b.mr.rkey;
  cs.compare_add = 42;
  cs.swap = 1000;
  REQUIRE(t.a.post_send(cs) == 0);

  std::vector<Completion> sc, rc;
  CHECK(t.run([&] {
    for (auto& c : t.a.send_cq()) sc.push_back(c);
    for (auto& c : t.b.recv_cq()) rc.push_back(c);
    return sc.size() == 5 && rc.size() == 1;
  }));
  REQUIRE(sc.size() == 5);
  for (uint64_t i = 0; i < 5; ++i) {
    CHECK(sc[i].wr_id == i + 1);
    CHECK(std::string(status_name(sc[i].status)) == "SUCCESS");
  }
  CHECK(sc[0].opcode == WcOpcode::kSend);
  CHECK(sc[2].opcode == WcOpcode::kRdmaRead);
  CHECK(sc[3].opcode == WcOpcode::kFetchAdd);
  REQUIRE(rc.size() == 1);
  CHECK(rc[0].wr_id == 11);
  CHECK(rc[0].byte_len == 5000);
  CHECK(rc[0].opcode == WcOpcode::kRecv);
  CHECK(rc[0].src_qp == t.a.qpn);
  CHECK(same(t.a, 0, t.b, 8192, 5000));
  CHECK(same(t.a, 0, t.b, 20000, 3000));
  CHECK(same(t.a, 40000, t.b, 30000, 4000));
  uint64_t got = 0;
  std::memcpy(&got, t.a.mem.data() + 60000, 8);
  CHECK(got == 40);
  std::memcpy(&got, t.a.mem.data() + 60008, 8);
  CHECK(got == 42);
  std::memcpy(&got, t.b.mem.data() + 64, 8);
  CHECK(got == 1000);
  CHECK(t.a.engine->counters().tx_retransmits == 0);
  CHECK(t.b.engine->counters().rx_drop_duplicate == 0);
}

// What a lossy case's runs went through, summed over its seeds.
struct Impaired {
  uint64_t lost = 0, duplicated = 0, corrupted = 0, reordered = 0, retransmits = 0;
};

// Each impairment the bench applies must have happened in the case (else
// it proved nothing about recovery from it).
void check_impaired(const Impaired& m) {
  CHECK(m.lost > 0);
  CHECK(m.retransmits > 0);
  CHECK(m.reordered > 0);
  CHECK(m.duplicated > 0);
  CHECK(m.corrupted > 0);
}

// Many messages of mixed kinds under 5% loss, 1% duplication, 0.1%
// corruption and four paths of different delay; everything must arrive
// intact and complete in order, for several seeds.
void lossy_run(uint64_t seed, uint32_t max_len, Impaired* imp, int kinds = 3, int msgs = 40,
               double corrupt = 0.001) {
  EngineConfig cfg;
  cfg.base_rtt = 40'000;  // the bench's slowest path round trip
  Bench t(seed, cfg);
  t.loss = 0.05;
  t.dup = 0.01;
  t.corrupt = corrupt;
  t.path_delay = {4'000, 9'000, 15'000, 22'000};
  t.jitter = 3'000;
  const size_t kMem = std::max<size_t>(1 << 22, size_t{max_len} * 4);
  t.connect_pair(kMem);
  const int kMsgs = msgs;
  uint64_t off = 0;
  struct Exp { WrOpcode op; uint64_t src, dst; uint32_t len; };
  std::vector<Exp> exp;
  for (int i = 0; i < kMsgs; ++i) {
    uint32_t len = 1 + static_cast<uint32_t>(t.rng.next() % max_len);
    if (off + len > kMem / 2) off = 0;
    int k = kinds == 3 ? i % 3 : kinds;
    WrOpcode op = k == 0 ? WrOpcode::kSend : k == 1 ? WrOpcode::kRdmaWrite : WrOpcode::kRdmaRead;
    fill(op == WrOpcode::kRdmaRead ? t.b : t.a, off, len, static_cast<uint8_t>(i));
    SendWr w = t.a.wr(op, i, off, len);
    if (op == WrOpcode::kSend) {
      REQUIRE(t.b.post_recv(i, kMem / 2 + off, len) == 0);
    } else if (op == WrOpcode::kRdmaWrite) {
      w.remote_addr = t.b.base() + kMem / 2 + off;
      w.rkey = t.b.mr.rkey;
    } else {
      w.sg[0].addr = t.a.base() + kMem / 2 + off;
      w.remote_addr = t.b.base() + off;
      w.rkey = t.b.mr.rkey;
    }
    exp.push_back({op, off, kMem / 2 + off, len});
    REQUIRE(t.a.post_send(w) == 0);
    off += (len + 63) & ~63u;
  }
  std::vector<Completion> sc;
  std::vector<Completion> rc;
  bool ok = t.run([&] {
    for (auto& c : t.a.send_cq()) sc.push_back(c);
    for (auto& c : t.b.recv_cq()) rc.push_back(c);
    return sc.size() == static_cast<size_t>(kMsgs);
  }, 60'000'000'000ull);
  INFO("seed " << seed << " delivered " << t.delivered << " dropped " << t.dropped);
  if (!ok) {
    const Counters& ca = t.a.engine->counters();
    const Counters& cb = t.b.engine->counters();
    MESSAGE("completions " << sc.size() << " t " << t.clock.t << " retx " << ca.tx_retransmits
            << " rto " << ca.timeouts << " b.oow " << cb.rx_drop_out_of_window << " b.dup "
            << cb.rx_drop_duplicate << " a.unexp " << ca.rx_drop_unexpected << " b.state " << cb.rx_drop_qp_state
            << " nak " << cb.rx_nak_invalid << "/" << cb.rx_nak_access << " a.dl " << t.a.engine->next_deadline());
    MESSAGE("A " << t.a.engine->describe_qp(t.a.qpn));
    MESSAGE("B " << t.b.engine->describe_qp(t.b.qpn));
    for (size_t i = t.a.port.log.size() > 30 ? t.a.port.log.size() - 30 : 0; i < t.a.port.log.size(); ++i)
      MESSAGE("A " << t.a.port.log[i]);
    for (size_t i = t.b.port.log.size() > 10 ? t.b.port.log.size() - 10 : 0; i < t.b.port.log.size(); ++i)
      MESSAGE("B " << t.b.port.log[i]);
    for (auto& c : sc) MESSAGE("wc " << c.wr_id << " " << status_name(c.status));
  }
  REQUIRE(ok);
  for (int i = 0; i < kMsgs; ++i) {
    CHECK(sc[i].wr_id == uint64_t(i));
    CHECK(std::string(status_name(sc[i].status)) == "SUCCESS");
    const Exp& e = exp[i];
    if (e.op == WrOpcode::kRdmaRead) CHECK(same(t.a, e.dst, t.b, e.src, e.len));
    else CHECK(same(t.a, e.src, t.b, e.dst, e.len));
  }
  t.run_idle(1'000'000'000);
  for (auto& c : t.b.recv_cq()) rc.push_back(c);
  if (kinds == 3) CHECK(rc.size() == (kMsgs + 2) / 3);
  for (size_t i = 1; i < rc.size(); ++i) CHECK(rc[i - 1].wr_id < rc[i].wr_id);
  const Counters& ca = t.a.engine->counters();
  const Counters& cb = t.b.engine->counters();
  // Per seed: loss, reordering (4 paths of 4-22 us) and recovery happened,
  // and every corrupted copy (all delivered) was dropped by the parser.
  CHECK(t.dropped > 0);
  CHECK(t.reordered > 0);
  CHECK(ca.tx_retransmits > 0);
  CHECK(ca.rx_drop_parse + cb.rx_drop_parse == t.corrupted);
  imp->lost += t.dropped;
  imp->duplicated += t.duplicated;
  imp->corrupted += t.corrupted;
  imp->reordered += t.reordered;
  imp->retransmits += ca.tx_retransmits + cb.tx_retransmits;
  if (seed < 100) MESSAGE("seed " << seed << ": tx " << ca.tx_packets << " retx " << ca.tx_retransmits << " fast "
                  << ca.fast_retransmits << " rto " << ca.timeouts << " tlp " << ca.tail_loss_probes << " dup-rx "
                  << t.b.engine->counters().rx_drop_duplicate << " badcrc "
                  << t.b.engine->counters().rx_drop_bad_icrc + ca.rx_drop_bad_icrc);
}

// What operators see of a failed QP (metaroce-ctl monitor): its state, and
// the status of the work request that failed it; RESET forgets the status.
TEST_CASE("engine__qp_transport_state_and_first_error_status") {
  Bench t;
  t.connect_pair();
  QpTransportStats s;
  REQUIRE(t.a.engine->qp_transport(t.a.qpn, t.clock.t, &s) == 0);
  CHECK(s.state == QpState::kRts);
  CHECK(s.error_status == WcStatus::kSuccess);
  SendWr w = t.a.wr(WrOpcode::kRdmaWrite, 1, 0, 100);
  w.remote_addr = t.b.base();
  w.rkey = t.b.mr.rkey ^ 0x80;  // a wrong rkey: REM_ACCESS_ERR, both QPs to ERR
  REQUIRE(t.a.post_send(w) == 0);
  REQUIRE(t.a.post_send(t.a.wr(WrOpcode::kSend, 2, 0, 10)) == 0);  // flushed after it
  std::vector<Completion> sc;
  CHECK(t.run([&] {
    for (auto& c : t.a.send_cq()) sc.push_back(c);
    return sc.size() == 2;
  }));
  REQUIRE(t.a.engine->qp_transport(t.a.qpn, t.clock.t, &s) == 0);
  CHECK(s.state == QpState::kErr);
  CHECK(s.error_status == WcStatus::kRemAccessErr);  // not the later flush
  REQUIRE(t.b.engine->qp_transport(t.b.qpn, t.clock.t, &s) == 0);
  CHECK(s.state == QpState::kErr);
  CHECK(s.error_status == WcStatus::kSuccess);  // the responder had no failed WR
  QpAttr reset;
  reset.qp_state = QpState::kReset;
  REQUIRE(t.a.engine->modify_qp(Node::kOwner, t.a.qpn, reset, kAttrState) == 0);
  REQUIRE(t.a.engine->qp_transport(t.a.qpn, t.clock.t, &s) == 0);
  CHECK(s.state == QpState::kReset);
  CHECK(s.error_status == WcStatus::kSuccess);
}

TEST_CASE("engine__lossy_multipath_small_messages") {
  Impaired m;
  // 1% corruption: at 0.1% these ~2,000 frames would likely see none.
  for (uint64_t seed = 1; seed <= 5; ++seed) lossy_run(seed, 6000, &m, 3, 40, 0.01);
  check_impaired(m);
}

TEST_CASE("engine__lossy_multipath_many_seeds") {
  Impaired m;
  for (uint64_t seed = 100; seed < 160; ++seed) lossy_run(seed, 20'000, &m);
  check_impaired(m);
}

TEST_CASE("engine__lossy_multipath_4mib_messages") {
  Impaired m;
  lossy_run(41, 4u << 20, &m, 3, 6);
  check_impaired(m);
}

TEST_CASE("engine__lossy_multipath_writes_only") {
  Impaired m;
  lossy_run(21, 200'000, &m, 1);
  check_impaired(m);
}

TEST_CASE("engine__lossy_multipath_reads_only") {
  Impaired m;
  lossy_run(31, 200'000, &m, 2);
  check_impaired(m);
}

TEST_CASE("engine__lossy_multipath_large_messages") {
  Impaired m;
  for (uint64_t seed = 11; seed <= 12; ++seed) lossy_run(seed, 200'000, &m);
  check_impaired(m);
}

}  // namespace metaroce::fw::test
