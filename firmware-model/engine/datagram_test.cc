// datagram.cc: UD QPs (docs/protocol.md §13). Delivery with the GRH, the
// send-side rules (address handle, privileged Q_Key, size, SQE), and every
// receive-side drop by its reason, on two engines over the fake wire.
#include <doctest/doctest.h>

#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "firmware-model/engine/qp.h"
#include "firmware-model/engine/qp_state.h"
#include "firmware-model/engine/testing/fakes.h"

namespace metaroce::fw::test {
namespace {

constexpr uint32_t kQkey = 0x11111111;
constexpr uint32_t kRecvBytes = 40 + 4096;  // the fake link (4200) gives a 4096-byte UD MTU

// A UD QP of n's PD and CQs at RTS, Q_Key `qkey`, its receives from
// srqn (0: its own RQ).
uint32_t ud_qp(Node& n, uint32_t srqn, uint32_t qkey = kQkey) {
  Engine& e = *n.engine;
  QpInitAttr init;
  init.type = QpType::kUd;
  init.pdn = n.pd;
  init.send_cqn = n.scq;
  init.recv_cqn = n.rcq;
  init.cap = {64, 64, 4, 4, 64};
  init.srqn = srqn;
  uint32_t qpn = 0;
  REQUIRE(e.create_qp(Node::kOwner, init, &qpn, nullptr) == 0);
  QpAttr a;
  a.qp_state = QpState::kInit;
  a.qkey = qkey;
  REQUIRE(e.modify_qp(Node::kOwner, qpn, a, kAttrState | kAttrPkeyIndex | kAttrPort | kAttrQkey) == 0);
  a.qp_state = QpState::kRtr;
  REQUIRE(e.modify_qp(Node::kOwner, qpn, a, kAttrState) == 0);
  a.qp_state = QpState::kRts;
  a.sq_psn = 500;
  REQUIRE(e.modify_qp(Node::kOwner, qpn, a, kAttrState | kAttrSqPsn) == 0);
  return qpn;
}

// Node with a UD QP (as Node::setup does for RC) at RTS, Q_Key `qkey`.
void ud_setup(Node& n, uint32_t qkey = kQkey) {
  n.mem.assign(1 << 16, 0);
  Engine& e = *n.engine;
  e.create_pd(Node::kOwner, &n.pd);
  e.create_cq(Node::kOwner, 4096, &n.scq);
  e.create_cq(Node::kOwner, 4096, &n.rcq);
  e.reg_mr(Node::kOwner, n.pd, n.base(), n.mem.size(), kAccessLocalWrite, &n.mr);
  n.qpn = ud_qp(n, 0, qkey);
}

uint32_t make_ah(Node& from, const Node& to) {
  AddressVector av;
  av.dgid = to.ip;
  uint32_t ah = 0;
  REQUIRE(from.engine->create_ah(Node::kOwner, from.pd, av, &ah) == 0);
  return ah;
}

SendWr ud_wr(Node& n, uint32_t ah, uint32_t remote_qpn, uint64_t id, uint32_t len,
             uint32_t qkey = kQkey) {
  SendWr w = n.wr(WrOpcode::kSend, id, 0, len);
  w.ah = ah;
  w.remote_qpn = remote_qpn;
  w.remote_qkey = qkey;
  return w;
}

struct UdPair {
  Bench t;
  uint32_t ah = 0;
  UdPair() {
    ud_setup(t.a);
    ud_setup(t.b);
    ah = make_ah(t.a, t.b);
    for (uint32_t i = 0; i < 1024; ++i) t.a.mem[i] = static_cast<uint8_t>(i * 7 + 1);
  }
  QpState state(Node& n) {
    QpAttr a;
    n.engine->query_qp(Node::kOwner, n.qpn, &a, nullptr);
    return a.qp_state;
  }
  uint64_t count(Node& n, uint64_t Counters::*c) { return n.engine->counters().*c; }
};

// A UD frame to `to` from a third address, as the wire would bring it.
std::vector<uint8_t> forge(const Node& to, const proto::Packet& p) {
  proto::FrameHeaders h;
  h.src_ip = proto::IpAddr::v4(0x0A000063);
  h.dst_ip = to.ip;
  std::vector<uint8_t> f(proto::encap_length(h) + proto::transport_length(p));
  f.resize(proto::build_frame(h, p, f));
  return f;
}

proto::Packet datagram(uint32_t qpn, uint32_t qkey, std::span<const uint8_t> payload) {
  proto::Packet p;
  p.mbth.opcode = proto::Opcode::kUdSend;
  p.mbth.flags = proto::kFlagLast;
  p.mbth.dest_qpn = qpn;
  p.deth = {qkey, 0x123};
  p.payload = payload;
  return p;
}

}  // namespace

TEST_CASE("datagram__send_delivers_grh_then_payload_with_src_qp_and_imm") {
  UdPair u;
  REQUIRE(u.t.b.post_recv(11, 4096, kRecvBytes) == 0);
  SendWr w = ud_wr(u.t.a, u.ah, u.t.b.qpn, 1, 100);
  w.opcode = WrOpcode::kSendImm;
  w.imm = 0xCAFE;
  REQUIRE(u.t.a.post_send(w) == 0);
  REQUIRE(u.t.run([&] { return !u.t.b.events.cqs[u.t.b.rcq].empty(); }));
  auto rc = u.t.b.recv_cq();
  REQUIRE(rc.size() == 1);
  CHECK(rc[0].status == WcStatus::kSuccess);
  CHECK(rc[0].wr_id == 11);
  CHECK(rc[0].byte_len == 140);
  CHECK(rc[0].src_qp == u.t.a.qpn);
  CHECK(rc[0].imm == 0xCAFE);
  CHECK(rc[0].wc_flags == (kWcGrh | kWcWithImm));
  CHECK(rc[0].sl == 0xA);  // RoCE packet type: UDP (bit 3) over IPv4 (2)
  // GRH: IPv4 as RoCE v2 puts it, 20 zero bytes then the IP header.
  const uint8_t* g = u.t.b.mem.data() + 4096;
  CHECK(std::vector<uint8_t>(g, g + 20) == std::vector<uint8_t>(20, 0));
  CHECK(g[20] == 0x45);
  CHECK(g[29] == 17);                                  // UDP
  CHECK(std::memcmp(g + 32, u.t.a.ip.bytes.data() + 12, 4) == 0);  // source
  CHECK(std::memcmp(g + 40, u.t.a.mem.data(), 100) == 0);
  auto sc = u.t.a.send_cq();
  REQUIRE(sc.size() == 1);
  CHECK(sc[0].status == WcStatus::kSuccess);
  CHECK(u.count(u.t.b, &Counters::ud_rx_delivered) == 1);
  CHECK(u.count(u.t.a, &Counters::ud_tx_datagrams) == 1);
}

TEST_CASE("datagram__each_packet_picks_its_path_entropy") {
  UdPair u;
  for (uint64_t i = 0; i < 32; ++i) REQUIRE(u.t.a.post_send(ud_wr(u.t.a, u.ah, u.t.b.qpn, i, 8)) == 0);
  u.t.run_idle(1'000'000);
  std::set<uint16_t> ports;
  for (const OutPacket& o : u.t.a.port.raw) ports.insert(o.src_port);
  CHECK(u.t.a.port.raw.size() == 32);
  CHECK(ports.size() > 1);
  for (uint16_t p : ports) CHECK((p & 0xC000) == 0xC000);
}

TEST_CASE("datagram__unknown_ah_fails_the_wr_and_moves_the_sq_to_sqe") {
  UdPair u;
  REQUIRE(u.t.b.post_recv(1, 4096, kRecvBytes) == 0);
  REQUIRE(u.t.a.post_send(ud_wr(u.t.a, 999, u.t.b.qpn, 1, 8)) == 0);
  REQUIRE(u.t.a.post_send(ud_wr(u.t.a, u.ah, u.t.b.qpn, 2, 8)) == 0);
  u.t.run_idle(1'000'000);
  auto sc = u.t.a.send_cq();
  REQUIRE(sc.size() == 2);
  CHECK(sc[0].status == WcStatus::kLocQpOpErr);
  CHECK(sc[1].status == WcStatus::kWrFlushErr);
  CHECK(u.count(u.t.a, &Counters::ud_tx_unknown_ah) == 1);
  CHECK(u.state(u.t.a) == QpState::kSqe);
  CHECK(u.t.b.recv_cq().empty());  // nothing left
  // SQE flushes new sends, keeps receiving, and SQE -> RTS resumes.
  REQUIRE(u.t.a.post_send(ud_wr(u.t.a, u.ah, u.t.b.qpn, 3, 8)) == 0);
  CHECK(u.t.a.send_cq().at(0).status == WcStatus::kWrFlushErr);
  QpAttr rts;
  rts.qp_state = QpState::kRts;
  REQUIRE(u.t.a.engine->modify_qp(Node::kOwner, u.t.a.qpn, rts, kAttrState) == 0);
  REQUIRE(u.t.a.post_send(ud_wr(u.t.a, u.ah, u.t.b.qpn, 4, 8)) == 0);
  REQUIRE(u.t.run([&] { return !u.t.b.events.cqs[u.t.b.rcq].empty(); }));
  CHECK(u.t.b.recv_cq().at(0).status == WcStatus::kSuccess);
}

TEST_CASE("datagram__destroyed_ah_and_other_pds_ah_are_unknown") {
  UdPair u;
  REQUIRE(u.t.a.post_send(ud_wr(u.t.a, u.ah, u.t.b.qpn, 1, 8)) == 0);
  REQUIRE(u.t.a.engine->destroy_ah(Node::kOwner, u.ah) == 0);  // before it started
  u.t.run_idle(1'000'000);
  CHECK(u.t.a.send_cq().at(0).status == WcStatus::kLocQpOpErr);
  CHECK(u.count(u.t.a, &Counters::ud_tx_unknown_ah) == 1);
  CHECK(u.t.a.engine->destroy_ah(Node::kOwner, u.ah) == ENOENT);
  CHECK(u.t.a.engine->destroy_ah(Node::kOwner + 1, make_ah(u.t.a, u.t.b)) == EPERM);
  uint32_t other_pd = 0, ah = 0;
  REQUIRE(u.t.a.engine->create_pd(Node::kOwner, &other_pd) == 0);
  AddressVector av;
  av.dgid = u.t.b.ip;
  REQUIRE(u.t.a.engine->create_ah(Node::kOwner, other_pd, av, &ah) == 0);
  CHECK(u.t.a.engine->destroy_pd(Node::kOwner, other_pd) == EBUSY);  // the AH holds it
  av.sgid_index = 9;
  uint32_t bad = 0;
  CHECK(u.t.a.engine->create_ah(Node::kOwner, u.t.a.pd, av, &bad) == EINVAL);
  QpAttr rts;
  rts.qp_state = QpState::kRts;
  REQUIRE(u.t.a.engine->modify_qp(Node::kOwner, u.t.a.qpn, rts, kAttrState) == 0);
  REQUIRE(u.t.a.post_send(ud_wr(u.t.a, ah, u.t.b.qpn, 2, 8)) == 0);
  u.t.run_idle(1'000'000);
  CHECK(u.t.a.send_cq().at(0).status == WcStatus::kLocQpOpErr);
  CHECK(u.count(u.t.a, &Counters::ud_tx_unknown_ah) == 2);
}

TEST_CASE("datagram__oversize_send_completes_loc_len_err") {
  UdPair u;
  REQUIRE(u.t.a.post_send(ud_wr(u.t.a, u.ah, u.t.b.qpn, 1, 4097)) == 0);
  u.t.run_idle(1'000'000);
  CHECK(u.t.a.send_cq().at(0).status == WcStatus::kLocLenErr);
  CHECK(u.count(u.t.a, &Counters::ud_tx_oversize) == 1);
  CHECK(u.t.a.port.raw.empty());
}

TEST_CASE("datagram__rdma_and_atomics_are_refused_at_post") {
  UdPair u;
  for (WrOpcode op : {WrOpcode::kRdmaWrite, WrOpcode::kRdmaWriteImm, WrOpcode::kRdmaRead}) {
    SendWr w = ud_wr(u.t.a, u.ah, u.t.b.qpn, 1, 8);
    w.opcode = op;
    CHECK(u.t.a.post_send(w) == EINVAL);
  }
}

TEST_CASE("datagram__privileged_qkey_in_the_wr_sends_the_qps_own") {
  UdPair u;
  REQUIRE(u.t.b.post_recv(1, 4096, kRecvBytes) == 0);
  REQUIRE(u.t.a.post_send(ud_wr(u.t.a, u.ah, u.t.b.qpn, 1, 8, 0x80000000u)) == 0);
  REQUIRE(u.t.run([&] { return !u.t.b.events.cqs[u.t.b.rcq].empty(); }));
  CHECK(u.t.b.recv_cq().at(0).status == WcStatus::kSuccess);  // kQkey, the QP's, on the wire
  CHECK(u.t.a.port.log.at(0).find("qkey 0x11111111") != std::string::npos);
}

TEST_CASE("datagram__wrong_qkey_is_dropped_and_counted") {
  UdPair u;
  REQUIRE(u.t.b.post_recv(1, 4096, kRecvBytes) == 0);
  REQUIRE(u.t.a.post_send(ud_wr(u.t.a, u.ah, u.t.b.qpn, 1, 8, 0x22222222)) == 0);
  u.t.run_idle(1'000'000);
  CHECK(u.count(u.t.b, &Counters::rx_drop_ud_qkey) == 1);
  CHECK(u.t.b.recv_cq().empty());
  CHECK(u.t.a.send_cq().at(0).status == WcStatus::kSuccess);  // UD: the sender never knows
}

TEST_CASE("datagram__receive_side_drops_by_reason") {
  UdPair u;
  Node& b = u.t.b;
  std::vector<uint8_t> small(8, 1), big(4097, 2);
  auto expect = [&](const proto::Packet& p, uint64_t Counters::*why, const char* what) {
    INFO(std::string(what));
    const uint64_t n = u.count(b, why);
    const auto mem = b.mem;
    b.engine->on_frame(forge(b, p));
    CHECK(u.count(b, why) == n + 1);
    CHECK(b.recv_cq().empty());
    CHECK(b.mem == mem);
  };
  expect(datagram(b.qpn, kQkey, small), &Counters::rx_drop_ud_no_recv, "no receive posted");
  REQUIRE(b.post_recv(1, 4096, kRecvBytes) == 0);
  expect(datagram(b.qpn, kQkey ^ 1, small), &Counters::rx_drop_ud_qkey, "wrong Q_Key");
  expect(datagram(b.qpn, kQkey, big), &Counters::rx_drop_ud_oversize, "over the UD MTU");
  proto::Packet off = datagram(b.qpn, kQkey, small);
  off.mbth.offset = 1024;
  expect(off, &Counters::rx_drop_ud_malformed, "offset is not 0");
  proto::Packet first = datagram(b.qpn, kQkey, small);
  first.mbth.flags = 0;
  expect(first, &Counters::rx_drop_ud_malformed, "not the last packet");
  proto::Packet rc = datagram(b.qpn, kQkey, small);
  rc.mbth.opcode = proto::Opcode::kSend;
  expect(rc, &Counters::rx_drop_ud_wrong_type, "RC SEND to a UD QP");
  // The receive survived all of them.
  b.engine->on_frame(forge(b, datagram(b.qpn, kQkey, small)));
  auto wc = b.recv_cq();
  REQUIRE(wc.size() == 1);
  CHECK(wc[0].status == WcStatus::kSuccess);
  CHECK(wc[0].src_qp == 0x123);
  CHECK(wc[0].byte_len == 48);
}

TEST_CASE("datagram__datagram_to_an_rc_qp_is_dropped") {
  Bench t;
  t.connect_pair();
  std::vector<uint8_t> small(8, 1);
  const uint64_t n = t.b.engine->counters().rx_drop_ud_wrong_type;
  proto::FrameHeaders h;
  h.src_ip = t.a.ip;  // even from its peer
  h.dst_ip = t.b.ip;
  proto::Packet p = datagram(t.b.qpn, 0, small);
  std::vector<uint8_t> f(proto::encap_length(h) + proto::transport_length(p));
  f.resize(proto::build_frame(h, p, f));
  t.b.engine->on_frame(f);
  CHECK(t.b.engine->counters().rx_drop_ud_wrong_type == n + 1);
  CHECK(t.b.recv_cq().empty());
}

TEST_CASE("datagram__receive_too_small_or_bad_lkey_completes_in_error_and_the_qp_goes_on") {
  UdPair u;
  Node& b = u.t.b;
  std::vector<uint8_t> pay(100, 3);
  REQUIRE(b.post_recv(1, 4096, 40 + 99) == 0);  // one byte short
  RecvWr bad;
  bad.wr_id = 2;
  bad.num_sge = 1;
  bad.sg[0] = {b.base() + 16384, kRecvBytes, b.mr.lkey ^ 0x5A5A};
  REQUIRE(b.engine->post_recv(Node::kOwner, b.qpn, bad) == 0);
  REQUIRE(b.post_recv(3, 4096, kRecvBytes) == 0);
  for (int i = 0; i < 3; ++i) b.engine->on_frame(forge(b, datagram(b.qpn, kQkey, pay)));
  auto wc = b.recv_cq();
  REQUIRE(wc.size() == 3);
  CHECK(wc[0].status == WcStatus::kLocLenErr);
  CHECK(wc[1].status == WcStatus::kLocProtErr);
  CHECK(wc[2].status == WcStatus::kSuccess);
  CHECK(u.count(b, &Counters::rx_drop_ud_recv_too_small) == 1);
  CHECK(u.count(b, &Counters::rx_drop_ud_recv_fault) == 1);
  CHECK(u.state(b) == QpState::kRts);
}

TEST_CASE("datagram__ud_state_table_wants_qkey_and_refuses_rc_attributes") {
  FakeClock clock;
  Node n(clock, 0x0A000001, 1);
  n.mem.assign(4096, 0);
  n.engine->create_pd(Node::kOwner, &n.pd);
  n.engine->create_cq(Node::kOwner, 16, &n.scq);
  QpInitAttr init;
  init.type = QpType::kUd;
  init.pdn = n.pd;
  init.send_cqn = init.recv_cqn = n.scq;
  init.cap = {4, 4, 1, 1, 0};
  REQUIRE(n.engine->create_qp(Node::kOwner, init, &n.qpn, nullptr) == 0);
  QpAttr a;
  a.qp_state = QpState::kInit;
  CHECK(n.engine->modify_qp(Node::kOwner, n.qpn, a, kAttrState | kAttrPkeyIndex | kAttrPort) ==
        EINVAL);  // no Q_Key
  CHECK(n.engine->modify_qp(Node::kOwner, n.qpn, a,
                            kAttrState | kAttrPkeyIndex | kAttrPort | kAttrAccessFlags) == EINVAL);
  REQUIRE(n.engine->modify_qp(Node::kOwner, n.qpn, a,
                              kAttrState | kAttrPkeyIndex | kAttrPort | kAttrQkey) == 0);
  a.qp_state = QpState::kRtr;
  CHECK(n.engine->modify_qp(Node::kOwner, n.qpn, a, kAttrState | kAttrAv) == EINVAL);
  CHECK(n.engine->modify_qp(Node::kOwner, n.qpn, a, kAttrState | kAttrDestQpn) == EINVAL);
  REQUIRE(n.engine->modify_qp(Node::kOwner, n.qpn, a, kAttrState) == 0);
  a.qp_state = QpState::kRts;
  CHECK(n.engine->modify_qp(Node::kOwner, n.qpn, a, kAttrState) == EINVAL);  // no SQ PSN
  REQUIRE(n.engine->modify_qp(Node::kOwner, n.qpn, a, kAttrState | kAttrSqPsn | kAttrQkey) == 0);
  init.type = static_cast<QpType>(8);  // RAW_PACKET: not this engine's
  uint32_t q = 0;
  CHECK(n.engine->create_qp(Node::kOwner, init, &q, nullptr) == EINVAL);
}

TEST_CASE("datagram__destroy_owner_frees_its_ahs") {
  UdPair u;
  u.t.a.engine->destroy_owner(Node::kOwner);
  CHECK(u.t.a.engine->destroy_ah(Node::kOwner, u.ah) == ENOENT);
}

}  // namespace metaroce::fw::test

namespace metaroce::fw::test {

TEST_CASE("datagram__multicast_reaches_every_attached_qp_and_only_those") {
  UdPair u;
  Node& b = u.t.b;
  const proto::IpAddr group = proto::IpAddr::v4(0xEF010101);  // 239.1.1.1
  uint32_t second = 0;
  QpInitAttr init;
  init.type = QpType::kUd;
  init.pdn = b.pd;
  init.send_cqn = init.recv_cqn = b.rcq;
  init.cap = {4, 4, 1, 1, 0};
  REQUIRE(b.engine->create_qp(Node::kOwner, init, &second, nullptr) == 0);
  QpAttr a;
  a.qp_state = QpState::kInit;
  a.qkey = kQkey;
  REQUIRE(b.engine->modify_qp(Node::kOwner, second, a, kAttrState | kAttrPkeyIndex | kAttrPort | kAttrQkey) == 0);
  a.qp_state = QpState::kRtr;
  REQUIRE(b.engine->modify_qp(Node::kOwner, second, a, kAttrState) == 0);
  CHECK(b.engine->attach_mcast(Node::kOwner, b.qpn, proto::IpAddr::v4(0x0A000001)) == EINVAL);
  REQUIRE(b.engine->attach_mcast(Node::kOwner, b.qpn, group) == 0);
  REQUIRE(b.engine->attach_mcast(Node::kOwner, second, group) == 0);
  CHECK(b.engine->attach_mcast(Node::kOwner, second, group) == 0);  // idempotent
  REQUIRE(b.post_recv(1, 4096, kRecvBytes) == 0);
  RecvWr r;
  r.wr_id = 2;
  r.num_sge = 1;
  r.sg[0] = {b.base() + 16384, kRecvBytes, b.mr.lkey};
  REQUIRE(b.engine->post_recv(Node::kOwner, second, r) == 0);
  std::vector<uint8_t> pay(32, 9);
  proto::Packet p = datagram(datagram::kMulticastQpn, kQkey, pay);
  proto::FrameHeaders h;
  h.src_ip = u.t.a.ip;
  h.dst_ip = group;
  std::vector<uint8_t> f(proto::encap_length(h) + proto::transport_length(p));
  f.resize(proto::build_frame(h, p, f));
  b.engine->on_frame(f);
  auto wc = b.recv_cq();
  REQUIRE(wc.size() == 2);
  CHECK(wc[0].status == WcStatus::kSuccess);
  CHECK(wc[1].status == WcStatus::kSuccess);
  CHECK(wc[0].byte_len == 72);
  // Detached, destroyed: nobody left, the datagram is counted.
  REQUIRE(b.engine->detach_mcast(Node::kOwner, b.qpn, group) == 0);
  CHECK(b.engine->detach_mcast(Node::kOwner, b.qpn, group) == EINVAL);
  REQUIRE(b.engine->destroy_qp(Node::kOwner, second) == 0);
  const uint64_t n = b.engine->counters().rx_drop_mcast_no_group;
  b.engine->on_frame(f);
  CHECK(b.engine->counters().rx_drop_mcast_no_group == n + 1);
  CHECK(b.recv_cq().empty());
}

// UD QPs on a shared receive queue (docs/engine.md §Shared receive queues).

namespace {
// b's receive of wr_id from an SRQ at mem offset off.
RecvWr srq_recv(Node& n, uint64_t wr_id, uint64_t off, uint32_t lkey) {
  RecvWr r;
  r.wr_id = wr_id;
  r.num_sge = 1;
  r.sg[0] = {n.base() + off, kRecvBytes, lkey};
  return r;
}

uint32_t make_srq(Node& n, uint32_t pdn, uint32_t max_wr) {
  uint32_t srqn = 0;
  REQUIRE(n.engine->create_srq(Node::kOwner, pdn, SrqAttr{max_wr, 4, 0}, &srqn, nullptr) == 0);
  return srqn;
}
}  // namespace

TEST_CASE("datagram__ud_qps_on_one_srq_take_its_receives_in_order_with_the_grh") {
  UdPair u;
  Node& b = u.t.b;
  const uint32_t srqn = make_srq(b, b.pd, 4);
  const uint32_t q1 = ud_qp(b, srqn), q2 = ud_qp(b, srqn);
  for (uint64_t i = 0; i < 2; ++i)
    REQUIRE(b.engine->post_srq_recv(Node::kOwner, srqn, srq_recv(b, 20 + i, i * 8192, b.mr.lkey)) == 0);
  SendWr w = ud_wr(u.t.a, u.ah, q2, 1, 100);
  w.opcode = WrOpcode::kSendImm;
  w.imm = 0xBEEF;
  REQUIRE(u.t.a.post_send(w) == 0);
  REQUIRE(u.t.a.post_send(ud_wr(u.t.a, u.ah, q1, 2, 60)) == 0);
  std::vector<Completion> rc;
  REQUIRE(u.t.run([&] {
    for (auto& c : b.recv_cq()) rc.push_back(c);
    return rc.size() == 2;
  }));
  // The SRQ's receives in posting order, each completing on the QP it served.
  CHECK(rc[0].wr_id == 20);
  CHECK(rc[0].qp_num == q2);
  CHECK(rc[0].byte_len == 140);
  CHECK(rc[0].imm == 0xBEEF);
  CHECK(rc[0].wc_flags == (kWcGrh | kWcWithImm));
  CHECK(rc[1].wr_id == 21);
  CHECK(rc[1].qp_num == q1);
  CHECK(rc[1].byte_len == 100);
  CHECK(rc[1].wc_flags == kWcGrh);
  for (const Completion& c : rc) {
    CHECK(c.status == WcStatus::kSuccess);
    CHECK(c.src_qp == u.t.a.qpn);
    CHECK(c.sl == 0xA);  // RoCE packet type: UDP over IPv4
    CHECK(c.pkey_index == 0);
  }
  // GRH then payload, as the per-QP receive queue places them.
  const uint8_t* g = b.mem.data();
  CHECK(std::vector<uint8_t>(g, g + 20) == std::vector<uint8_t>(20, 0));
  CHECK(g[20] == 0x45);
  CHECK(std::memcmp(g + 32, u.t.a.ip.bytes.data() + 12, 4) == 0);
  CHECK(std::memcmp(g + 40, u.t.a.mem.data(), 100) == 0);
  CHECK(std::memcmp(b.mem.data() + 8192 + 40, u.t.a.mem.data(), 60) == 0);
  CHECK(u.count(b, &Counters::ud_rx_delivered) == 2);
}

TEST_CASE("datagram__ud_on_an_empty_srq_is_a_counted_drop_not_rnr") {
  UdPair u;
  Node& b = u.t.b;
  const uint32_t srqn = make_srq(b, b.pd, 4);
  const uint32_t q = ud_qp(b, srqn);
  std::vector<uint8_t> pay(8, 1);
  const auto mem = b.mem;
  b.engine->on_frame(forge(b, datagram(q, kQkey, pay)));
  CHECK(u.count(b, &Counters::rx_drop_ud_srq_empty) == 1);
  CHECK(u.count(b, &Counters::rx_rnr_srq_empty) == 0);  // UD has no RNR
  CHECK(u.count(b, &Counters::rx_drop_ud_no_recv) == 0);
  CHECK(b.recv_cq().empty());
  CHECK(b.mem == mem);
  // A receive posted later serves the next datagram.
  REQUIRE(b.engine->post_srq_recv(Node::kOwner, srqn, srq_recv(b, 7, 0, b.mr.lkey)) == 0);
  b.engine->on_frame(forge(b, datagram(q, kQkey, pay)));
  auto wc = b.recv_cq();
  REQUIRE(wc.size() == 1);
  CHECK(wc[0].wr_id == 7);
  CHECK(wc[0].qp_num == q);
  CHECK(wc[0].src_qp == 0x123);
  CHECK(wc[0].byte_len == 48);
}

TEST_CASE("datagram__ud_srq_receive_is_checked_against_the_srqs_pd") {
  UdPair u;
  Node& b = u.t.b;
  uint32_t pd2 = 0;
  REQUIRE(b.engine->create_pd(Node::kOwner, &pd2) == 0);
  MrKeys mr2;
  REQUIRE(b.engine->reg_mr(Node::kOwner, pd2, b.base() + 32768, 16384, kAccessLocalWrite, &mr2) == 0);
  const uint32_t srqn = make_srq(b, pd2, 4);
  const uint32_t q = ud_qp(b, srqn);  // the QP is in b.pd, its SRQ in pd2
  REQUIRE(b.engine->post_srq_recv(Node::kOwner, srqn, srq_recv(b, 1, 32768, mr2.lkey)) == 0);
  std::vector<uint8_t> pay(8, 5);
  b.engine->on_frame(forge(b, datagram(q, kQkey, pay)));
  auto wc = b.recv_cq();
  REQUIRE(wc.size() == 1);
  CHECK(wc[0].status == WcStatus::kSuccess);
  CHECK(b.mem[32768 + 40] == 5);
  CHECK(u.count(b, &Counters::rx_drop_ud_recv_fault) == 0);
}

TEST_CASE("datagram__ud_srq_limit_event_and_last_wqe_reached") {
  UdPair u;
  Node& b = u.t.b;
  const uint32_t srqn = make_srq(b, b.pd, 8);
  const uint32_t q = ud_qp(b, srqn);
  for (uint64_t i = 0; i < 3; ++i)
    REQUIRE(b.engine->post_srq_recv(Node::kOwner, srqn, srq_recv(b, i, i * 8192, b.mr.lkey)) == 0);
  REQUIRE(b.engine->modify_srq(Node::kOwner, srqn, SrqAttr{0, 0, 2}, kSrqLimit) == 0);
  std::vector<uint8_t> pay(8, 1);
  b.engine->on_frame(forge(b, datagram(q, kQkey, pay)));  // 3 -> 2: not below 2
  CHECK(!b.events.has_event(EventType::kSrqLimitReached, srqn));
  b.engine->on_frame(forge(b, datagram(q, kQkey, pay)));  // 2 -> 1: below, once
  CHECK(b.events.has_event(EventType::kSrqLimitReached, srqn));
  CHECK(u.count(b, &Counters::srq_limit_events) == 1);
  CHECK(b.recv_cq().size() == 2);
  QpAttr err;
  err.qp_state = QpState::kErr;
  REQUIRE(b.engine->modify_qp(Node::kOwner, q, err, kAttrState) == 0);
  CHECK(b.events.has_event(EventType::kQpLastWqeReached, q));
  // In ERR the QP takes no more of the SRQ's receives.
  b.engine->on_frame(forge(b, datagram(q, kQkey, pay)));
  uint32_t taken = 0;
  REQUIRE(b.engine->query_srq(Node::kOwner, srqn, nullptr, &taken) == 0);
  CHECK(taken == 2);
  CHECK(u.count(b, &Counters::rx_drop_qp_state) == 1);
}

}  // namespace metaroce::fw::test
