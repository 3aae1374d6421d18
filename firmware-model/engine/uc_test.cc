// The unreliable connected service (uc.h, docs/engine.md §Unreliable
// connected): SEND/WRITE/IMM end to end without acknowledgements, and each
// drop rule with its counter.
#include <doctest/doctest.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "firmware-model/engine/testing/fakes.h"

namespace metaroce::fw::test {

namespace {

constexpr uint32_t kAll =
    kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead | kAccessRemoteAtomic;

// Replaces n's QP by a UC one (on srqn if given).
void make_uc(Node& n, uint32_t srqn = 0) {
  REQUIRE(n.engine->destroy_qp(Node::kOwner, n.qpn) == 0);
  QpInitAttr init;
  init.pdn = n.pd;
  init.send_cqn = n.scq;
  init.recv_cqn = n.rcq;
  init.cap = {64, 64, 4, 4, 64};
  init.type = QpType::kUc;
  init.srqn = srqn;
  REQUIRE(n.engine->create_qp(Node::kOwner, init, &n.qpn, nullptr) == 0);
}

// RESET -> INIT -> RTR -> RTS with UC's attributes only (ibv_uc_pingpong's).
void uc_connect(Node& n, const proto::IpAddr& peer, uint32_t peer_qpn) {
  QpAttr a;
  a.qp_state = QpState::kInit;
  a.qp_access_flags = kAll;
  REQUIRE(n.engine->modify_qp(Node::kOwner, n.qpn, a,
                              kAttrState | kAttrPkeyIndex | kAttrPort | kAttrAccessFlags) == 0);
  a.qp_state = QpState::kRtr;
  a.av.dgid = peer;
  a.path_mtu = 1024;
  a.dest_qp_num = peer_qpn;
  a.rq_psn = 500;
  REQUIRE(n.engine->modify_qp(Node::kOwner, n.qpn, a,
                              kAttrState | kAttrAv | kAttrPathMtu | kAttrDestQpn | kAttrRqPsn) == 0);
  a.qp_state = QpState::kRts;
  a.sq_psn = 500;
  REQUIRE(n.engine->modify_qp(Node::kOwner, n.qpn, a, kAttrState | kAttrSqPsn) == 0);
}

struct UcBench {
  explicit UcBench(bool b_uc = true) {
    t.a.setup(1 << 16, kAll);
    t.b.setup(1 << 16, kAll);
    make_uc(t.a);
    if (b_uc) make_uc(t.b);
    uc_connect(t.a, t.b.ip, t.b.qpn);
    if (b_uc) uc_connect(t.b, t.a.ip, t.a.qpn);
    else t.b.connect(t.a.ip, t.a.qpn, kAll);
  }
  Bench t;
  Counters rx() const { return t.b.engine->counters(); }
  std::vector<Completion> recv_until(size_t n) {
    std::vector<Completion> rc;
    t.run([&] {
      for (auto& c : t.b.recv_cq()) rc.push_back(c);
      return rc.size() >= n;
    });
    return rc;
  }
  bool b_sent_anything() const {
    for (const std::string& s : t.b.port.log)
      if (!s.empty()) return true;
    return false;
  }
};

void fill(Node& n, uint64_t off, uint32_t len, uint8_t seed) {
  for (uint32_t i = 0; i < len; ++i) n.mem[off + i] = static_cast<uint8_t>(seed + i * 13);
}

}  // namespace

TEST_CASE("uc__send_write_and_imm_end_to_end_without_acks") {
  UcBench u;
  Node& a = u.t.a;
  Node& b = u.t.b;
  fill(a, 0, 5000, 3);
  REQUIRE(b.post_recv(1, 8192, 8000) == 0);
  REQUIRE(b.post_recv(2, 20000, 64) == 0);
  REQUIRE(a.post_send(a.wr(WrOpcode::kSend, 10, 0, 5000)) == 0);
  SendWr w = a.wr(WrOpcode::kRdmaWriteImm, 11, 0, 3000);
  w.remote_addr = b.base() + 30000;
  w.rkey = b.mr.rkey;
  w.imm = 0x1234;
  REQUIRE(a.post_send(w) == 0);
  auto rc = u.recv_until(2);
  REQUIRE(rc.size() == 2);
  CHECK(rc[0].wr_id == 1);
  CHECK(rc[0].byte_len == 5000);
  CHECK(rc[0].opcode == WcOpcode::kRecv);
  CHECK(rc[1].wr_id == 2);
  CHECK(rc[1].opcode == WcOpcode::kRecvRdmaWithImm);
  CHECK(rc[1].imm == 0x1234);
  CHECK(rc[1].wc_flags == kWcWithImm);
  CHECK(std::memcmp(a.mem.data(), b.mem.data() + 8192, 5000) == 0);
  CHECK(std::memcmp(a.mem.data(), b.mem.data() + 30000, 3000) == 0);
  auto sc = a.send_cq();
  REQUIRE(sc.size() == 2);
  CHECK(sc[0].status == WcStatus::kSuccess);
  CHECK(sc[1].opcode == WcOpcode::kRdmaWrite);
  CHECK_FALSE(u.b_sent_anything());  // no ACK, ever
  bool uc_opcodes = true;
  for (const std::string& s : a.port.log) uc_opcodes = uc_opcodes && s.find("UC_") != std::string::npos;
  CHECK(uc_opcodes);
}

TEST_CASE("uc__psn_gap_drops_the_message_and_counts_it_then_the_next_one_lands") {
  UcBench u;
  Node& a = u.t.a;
  Node& b = u.t.b;
  int seen = 0;
  u.t.filter = [&](const std::string& what, bool from_a) {
    return !(from_a && what.find("UC_SEND") != std::string::npos && ++seen == 2);
  };
  REQUIRE(b.post_recv(1, 8192, 8000) == 0);
  fill(a, 0, 3000, 9);
  REQUIRE(a.post_send(a.wr(WrOpcode::kSend, 10, 0, 3000)) == 0);  // 3 packets, the 2nd lost
  REQUIRE(a.post_send(a.wr(WrOpcode::kSend, 11, 100, 700)) == 0);
  auto rc = u.recv_until(1);
  REQUIRE(rc.size() == 1);
  CHECK(rc[0].wr_id == 1);  // the receive was kept for the message that arrived whole
  CHECK(rc[0].byte_len == 700);
  CHECK(std::memcmp(a.mem.data() + 100, b.mem.data() + 8192, 700) == 0);
  CHECK(u.rx().rx_drop_uc_psn_gap == 1);
  CHECK(u.rx().rx_drop_uc_mid_message == 1);  // the 3rd packet, after the gap
  CHECK(u.t.dropped == 1);
  // Both WRs completed at the sender: UC does not know.
  CHECK(a.send_cq().size() == 2);
}

TEST_CASE("uc__packets_after_a_lost_start_are_dropped_as_mid_message") {
  UcBench u;
  int seen = 0;
  u.t.filter = [&](const std::string& what, bool from_a) {
    return !(from_a && what.find("UC_SEND") != std::string::npos && ++seen == 1);
  };
  REQUIRE(u.t.b.post_recv(1, 8192, 8000) == 0);
  REQUIRE(u.t.a.post_send(u.t.a.wr(WrOpcode::kSend, 10, 0, 3000)) == 0);
  u.t.run_idle(100'000'000);
  CHECK(u.t.b.recv_cq().empty());
  CHECK(u.rx().rx_drop_uc_psn_gap == 1);
  CHECK(u.rx().rx_drop_uc_mid_message == 2);  // the 2nd (after the gap) and the 3rd
}

TEST_CASE("uc__no_receive_drops_the_message_without_rnr") {
  UcBench u;
  REQUIRE(u.t.a.post_send(u.t.a.wr(WrOpcode::kSend, 10, 0, 100)) == 0);
  u.t.run_idle(100'000'000);
  CHECK(u.rx().rx_drop_uc_no_recv == 1);
  CHECK(u.rx().rx_nak_rnr == 0);
  CHECK_FALSE(u.b_sent_anything());
  auto sc = u.t.a.send_cq();
  REQUIRE(sc.size() == 1);
  CHECK(sc[0].status == WcStatus::kSuccess);
}

TEST_CASE("uc__send_longer_than_its_receive_completes_loc_len_err_and_the_qp_stays") {
  UcBench u;
  REQUIRE(u.t.b.post_recv(1, 8192, 50) == 0);
  REQUIRE(u.t.b.post_recv(2, 9000, 500) == 0);
  REQUIRE(u.t.a.post_send(u.t.a.wr(WrOpcode::kSend, 10, 0, 100)) == 0);
  REQUIRE(u.t.a.post_send(u.t.a.wr(WrOpcode::kSend, 11, 0, 100)) == 0);
  auto rc = u.recv_until(2);
  REQUIRE(rc.size() == 2);
  CHECK(rc[0].status == WcStatus::kLocLenErr);
  CHECK(rc[1].status == WcStatus::kSuccess);
  CHECK(rc[1].wr_id == 2);
  CHECK(u.rx().rx_drop_uc_too_long == 1);
}

TEST_CASE("uc__write_with_a_bad_rkey_is_dropped_and_counted_the_qp_stays") {
  UcBench u;
  SendWr w = u.t.a.wr(WrOpcode::kRdmaWrite, 10, 0, 100);
  w.remote_addr = u.t.b.base();
  w.rkey = u.t.b.mr.rkey ^ 0x5a5a;
  REQUIRE(u.t.a.post_send(w) == 0);
  SendWr w2 = u.t.a.wr(WrOpcode::kRdmaWrite, 11, 0, 100);
  w2.remote_addr = u.t.b.base() + (1 << 16) - 50;  // runs past the MR
  w2.rkey = u.t.b.mr.rkey;
  REQUIRE(u.t.a.post_send(w2) == 0);
  REQUIRE(u.t.b.post_recv(1, 8192, 500) == 0);
  REQUIRE(u.t.a.post_send(u.t.a.wr(WrOpcode::kSend, 12, 0, 100)) == 0);
  auto rc = u.recv_until(1);
  REQUIRE(rc.size() == 1);
  CHECK(rc[0].status == WcStatus::kSuccess);
  CHECK(u.rx().rx_drop_uc_access == 2);
  QpAttr attr;
  REQUIRE(u.t.b.engine->query_qp(Node::kOwner, u.t.b.qpn, &attr, nullptr) == 0);
  CHECK(attr.qp_state == QpState::kRts);
}

TEST_CASE("uc__read_and_atomics_are_einval_at_post") {
  UcBench u;
  CHECK(u.t.a.post_send(u.t.a.wr(WrOpcode::kRdmaRead, 1, 0, 8)) == EINVAL);
  CHECK(u.t.a.post_send(u.t.a.wr(WrOpcode::kAtomicFetchAdd, 2, 0, 8)) == EINVAL);
  CHECK(u.t.a.post_send(u.t.a.wr(WrOpcode::kAtomicCmpSwap, 3, 0, 8)) == EINVAL);
}

TEST_CASE("uc__modify_refuses_the_attributes_of_reliability") {
  Bench t;
  t.a.setup(4096, kAll);
  make_uc(t.a);
  QpAttr a;
  a.qp_state = QpState::kInit;
  REQUIRE(t.a.engine->modify_qp(Node::kOwner, t.a.qpn, a,
                                kAttrState | kAttrPkeyIndex | kAttrPort | kAttrAccessFlags) == 0);
  a.qp_state = QpState::kRtr;
  a.av.dgid = t.b.ip;
  uint32_t uc_rtr = kAttrState | kAttrAv | kAttrPathMtu | kAttrDestQpn | kAttrRqPsn;
  CHECK(t.a.engine->modify_qp(Node::kOwner, t.a.qpn, a, uc_rtr | kAttrMinRnrTimer) == EINVAL);
  CHECK(t.a.engine->modify_qp(Node::kOwner, t.a.qpn, a, uc_rtr | kAttrMaxDestRdAtomic) == EINVAL);
  REQUIRE(t.a.engine->modify_qp(Node::kOwner, t.a.qpn, a, uc_rtr) == 0);
  a.qp_state = QpState::kRts;
  CHECK(t.a.engine->modify_qp(Node::kOwner, t.a.qpn, a, kAttrState | kAttrSqPsn | kAttrTimeout) ==
        EINVAL);
  CHECK(t.a.engine->modify_qp(Node::kOwner, t.a.qpn, a, kAttrState | kAttrSqPsn) == 0);
}

TEST_CASE("uc__rc_packets_to_a_uc_qp_and_uc_packets_to_an_rc_qp_are_dropped") {
  UcBench u(false);  // a is UC, b is RC, connected to each other
  REQUIRE(u.t.b.post_recv(1, 8192, 500) == 0);
  REQUIRE(u.t.a.post_send(u.t.a.wr(WrOpcode::kSend, 10, 0, 100)) == 0);
  REQUIRE(u.t.b.post_send(u.t.b.wr(WrOpcode::kSend, 20, 0, 100)) == 0);
  u.t.run([&] {
    return u.t.a.engine->counters().rx_drop_wrong_service > 0 &&
           u.rx().rx_drop_wrong_service > 0;
  }, 100'000'000);
  CHECK(u.rx().rx_drop_wrong_service >= 1);                     // UC_SEND at the RC QP
  CHECK(u.t.a.engine->counters().rx_drop_wrong_service >= 1);   // SEND at the UC QP
  CHECK(u.t.b.recv_cq().empty());
}

TEST_CASE("uc__duplicated_packets_are_dropped_as_stale_and_placed_once") {
  UcBench u;
  u.t.dup = 1.0;
  REQUIRE(u.t.b.post_recv(1, 8192, 8000) == 0);
  REQUIRE(u.t.b.post_recv(2, 16384, 8000) == 0);
  REQUIRE(u.t.a.post_send(u.t.a.wr(WrOpcode::kSend, 10, 0, 2048)) == 0);
  auto rc = u.recv_until(1);
  u.t.run_idle(100'000'000);
  rc = u.t.b.recv_cq();  // nothing more: the copies completed no second receive
  CHECK(rc.empty());
  CHECK(u.t.duplicated >= 2);
  CHECK(u.rx().rx_drop_uc_stale == u.t.duplicated);
}

TEST_CASE("uc__a_uc_qp_takes_its_receives_from_an_srq") {
  Bench t;
  t.a.setup(1 << 16, kAll);
  t.b.setup(1 << 16, kAll);
  uint32_t srqn = 0;
  REQUIRE(t.b.engine->create_srq(Node::kOwner, t.b.pd, SrqAttr{4, 1, 0}, &srqn, nullptr) == 0);
  make_uc(t.a);
  make_uc(t.b, srqn);
  uc_connect(t.a, t.b.ip, t.b.qpn);
  uc_connect(t.b, t.a.ip, t.a.qpn);
  RecvWr r;
  r.wr_id = 77;
  r.num_sge = 1;
  r.sg[0] = {t.b.base() + 4096, 1024, t.b.mr.lkey};
  REQUIRE(t.b.engine->post_srq_recv(Node::kOwner, srqn, r) == 0);
  REQUIRE(t.a.post_send(t.a.wr(WrOpcode::kSend, 1, 0, 300)) == 0);
  REQUIRE(t.a.post_send(t.a.wr(WrOpcode::kSend, 2, 0, 300)) == 0);  // the SRQ is empty then
  std::vector<Completion> rc;
  t.run([&] {
    for (auto& c : t.b.recv_cq()) rc.push_back(c);
    return t.b.engine->counters().rx_drop_uc_no_recv > 0;
  }, 100'000'000);
  REQUIRE(rc.size() == 1);
  CHECK(rc[0].wr_id == 77);
  CHECK(t.b.engine->counters().rx_drop_uc_no_recv == 1);
}

}  // namespace metaroce::fw::test

namespace metaroce::fw::test {

// mw2: a type 2 window bound by BIND_MW on a UC QP (IB, as rxe and mlx5:
// BIND_MW and LOCAL_INV are RC and UC work requests); a UC WRITE to its
// rkey is checked against the window, and LOCAL_INV ends it.
TEST_CASE("uc__type2_window_bound_on_a_uc_qp_checks_uc_writes") {
  UcBench u;
  Node& a = u.t.a;
  Node& b = u.t.b;
  MrKeys wmr;
  REQUIRE(b.engine->reg_mr(Node::kOwner, b.pd, b.base() + 4096, 16384,
                           kAccessLocalWrite | kAccessMwBind, &wmr) == 0);
  uint32_t h = 0, rkey0 = 0;
  REQUIRE(b.engine->alloc_mw(Node::kOwner, b.pd, MwType::kType2, &h, &rkey0) == 0);
  const uint32_t rkey = rkey0 + 1;
  auto b_local = [&](SendWr w) {
    w.send_flags = kSendSignaled;
    REQUIRE(b.post_send(w) == 0);
    std::vector<Completion> got;
    u.t.run([&] {
      for (auto& c : b.send_cq()) got.push_back(c);
      return !got.empty();
    });
    REQUIRE(got.size() == 1);
    return got[0];
  };
  SendWr bind;
  bind.wr_id = 900;
  bind.opcode = WrOpcode::kBindMw;
  bind.rkey = rkey;
  bind.bind = {h, wmr.lkey, kAccessRemoteWrite, b.base() + 8192, 4096, MwType::kType2};
  Completion c = b_local(bind);
  CHECK(c.status == WcStatus::kSuccess);
  CHECK(c.opcode == WcOpcode::kBindMw);
  CHECK(c.wr_id == 900);
  CHECK(u.rx().mw_binds == 1);
  int syncs = 0;
  auto write_then_sync = [&](uint64_t off, uint32_t len) {
    SendWr w = a.wr(WrOpcode::kRdmaWrite, 10, 0, len);
    w.remote_addr = b.base() + off;
    w.rkey = rkey;
    REQUIRE(a.post_send(w) == 0);
    REQUIRE(b.post_recv(1, 40000, 500) == 0);  // a SEND after it: the WRITE was handled
    REQUIRE(a.post_send(a.wr(WrOpcode::kSend, 12, 0, 100)) == 0);
    REQUIRE(u.recv_until(1).size() == 1);
    ++syncs;
  };
  fill(a, 0, 2000, 9);
  write_then_sync(8192 + 100, 2000);  // inside the window: lands
  CHECK(std::memcmp(a.mem.data(), b.mem.data() + 8192 + 100, 2000) == 0);
  CHECK(u.rx().rx_drop_uc_access == 0);
  write_then_sync(8192 + 4000, 200);  // inside the MR, past the window: dropped, counted
  CHECK(u.rx().rx_drop_uc_access == 1);
  CHECK(u.rx().rkey_refused_out_of_bounds == 1);
  SendWr inv;
  inv.wr_id = 901;
  inv.opcode = WrOpcode::kLocalInv;
  inv.imm = rkey;
  c = b_local(inv);
  CHECK(c.status == WcStatus::kSuccess);
  CHECK(c.opcode == WcOpcode::kLocalInv);
  CHECK(u.rx().mw_local_invalidations == 1);
  write_then_sync(8192, 64);  // the window is gone
  CHECK(u.rx().rx_drop_uc_access == 2);
  CHECK(u.rx().rkey_refused_no_key == 1);
  // UC has no SEND with invalidate (docs/protocol.md §15).
  SendWr si = a.wr(WrOpcode::kSendWithInv, 13, 0, 10);
  si.imm = rkey;
  CHECK(a.post_send(si) == EINVAL);
  CHECK(syncs == 3);
}

}  // namespace metaroce::fw::test
