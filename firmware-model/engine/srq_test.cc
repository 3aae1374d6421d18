// Shared receive queues (srq.h, docs/engine.md §Shared receive queues):
// the verbs calls and their refusals, QPs drawing from one SRQ, RNR when it
// is empty, the limit event, LAST_WQE_REACHED, and what a peer cannot make
// the SRQ do.
#include <doctest/doctest.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "firmware-model/engine/testing/fakes.h"

namespace metaroce::fw::test {

namespace {

constexpr uint32_t kAll =
    kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead | kAccessRemoteAtomic;
constexpr OwnerId kOther = 99;

uint32_t make_srq(Node& n, uint32_t max_wr, uint32_t max_sge = 4) {
  uint32_t srqn = 0;
  SrqAttr want{max_wr, max_sge, 0};
  REQUIRE(n.engine->create_srq(Node::kOwner, n.pd, want, &srqn, nullptr) == 0);
  return srqn;
}

RecvWr recv_wr(Node& n, uint64_t wr_id, uint64_t off, uint32_t len) {
  RecvWr r;
  r.wr_id = wr_id;
  r.num_sge = 1;
  r.sg[0] = {n.base() + off, len, n.mr.lkey};
  return r;
}

// Replaces n's QP by one on srqn, and connects it to peer_qpn.
void attach(Node& n, uint32_t srqn, const proto::IpAddr& peer, uint32_t peer_qpn) {
  if (n.qpn) REQUIRE(n.engine->destroy_qp(Node::kOwner, n.qpn) == 0);
  QpInitAttr init;
  init.pdn = n.pd;
  init.send_cqn = n.scq;
  init.recv_cqn = n.rcq;
  init.cap = {16, 16, 4, 4, 64};
  init.srqn = srqn;
  QpCap cap;
  REQUIRE(n.engine->create_qp(Node::kOwner, init, &n.qpn, &cap) == 0);
  CHECK(cap.max_recv_wr == 0);
  n.connect(peer, peer_qpn, kAll);
}

// a (one QP) -> b, whose QP takes receives from an SRQ of max_wr.
struct SrqBench {
  explicit SrqBench(uint32_t max_wr = 8) {
    t.a.setup(1 << 16, kAll);
    t.b.setup(1 << 16, kAll);
    srqn = make_srq(t.b, max_wr);
    attach(t.b, srqn, t.a.ip, t.a.qpn);
    t.a.connect(t.b.ip, t.b.qpn, kAll);
  }
  Bench t;
  uint32_t srqn = 0;
  int post(uint64_t wr_id, uint64_t off, uint32_t len = 1024) {
    return t.b.engine->post_srq_recv(Node::kOwner, srqn, recv_wr(t.b, wr_id, off, len));
  }
  Counters counters() const { return t.b.engine->counters(); }
};

}  // namespace

TEST_CASE("srq__create_refuses_bad_attributes_with_reason") {
  Bench t;
  t.b.setup(4096, kAll);
  uint32_t srqn = 0;
  const char* why = nullptr;
  SrqAttr a{0, 1, 0};
  CHECK(t.b.engine->create_srq(Node::kOwner, t.b.pd, a, &srqn, nullptr, &why) == EINVAL);
  CHECK(std::string(why) == "SRQ max_wr must be 1..max_srq_wr");
  a = {t.b.engine->caps().max_qp_wr + 1, 1, 0};
  CHECK(t.b.engine->create_srq(Node::kOwner, t.b.pd, a, &srqn, nullptr, &why) == EINVAL);
  a = {8, kMaxSge + 1, 0};
  CHECK(t.b.engine->create_srq(Node::kOwner, t.b.pd, a, &srqn, nullptr, &why) == EINVAL);
  CHECK(std::string(why) == "SRQ max_sge must be 1..max_srq_sge");
  a = {8, 1, 0};
  CHECK(t.b.engine->create_srq(kOther, t.b.pd, a, &srqn, nullptr) == EPERM);
  CHECK(t.b.engine->create_srq(Node::kOwner, 4242, a, &srqn, nullptr) == ENOENT);
  SrqAttr got;
  a = {5, 2, 3};
  REQUIRE(t.b.engine->create_srq(Node::kOwner, t.b.pd, a, &srqn, &got) == 0);
  CHECK(got.max_wr == 8);      // rounded up to the ring's size
  CHECK(got.srq_limit == 0);   // IB: only modify_srq arms the limit
  // The PD is in use by the SRQ.
  CHECK(t.b.engine->destroy_pd(Node::kOwner, t.b.pd) == EBUSY);
}

TEST_CASE("srq__post_beyond_max_wr_is_enomem_and_too_many_sges_einval") {
  SrqBench s(4);
  for (uint64_t i = 0; i < 4; ++i) CHECK(s.post(i, i * 1024) == 0);
  CHECK(s.post(9, 0) == ENOMEM);
  RecvWr r = recv_wr(s.t.b, 10, 0, 16);
  r.num_sge = 5;  // SRQ max_sge 4
  CHECK(s.t.b.engine->post_srq_recv(Node::kOwner, s.srqn, r) == EINVAL);
  // The QP has no receive queue of its own.
  CHECK(s.t.b.post_recv(11, 0, 16) == EINVAL);
}

TEST_CASE("srq__other_owner_and_unknown_handles_are_refused") {
  SrqBench s(4);
  Engine& e = *s.t.b.engine;
  SrqAttr a{};
  CHECK(e.post_srq_recv(kOther, s.srqn, recv_wr(s.t.b, 1, 0, 16)) == EPERM);
  CHECK(e.query_srq(kOther, s.srqn, &a) == EPERM);
  CHECK(e.modify_srq(kOther, s.srqn, a, kSrqLimit) == EPERM);
  CHECK(e.destroy_srq(kOther, s.srqn) == EPERM);
  CHECK(e.post_srq_recv(Node::kOwner, 777, recv_wr(s.t.b, 1, 0, 16)) == ENOENT);
  CHECK(e.post_srq_recv(Node::kOwner, 0, recv_wr(s.t.b, 1, 0, 16)) == ENOENT);
  // Another owner's QP cannot attach to it.
  uint32_t pd = 0, cq = 0, qpn = 0;
  REQUIRE(e.create_pd(kOther, &pd) == 0);
  REQUIRE(e.create_cq(kOther, 16, &cq) == 0);
  QpInitAttr init;
  init.pdn = pd;
  init.send_cqn = init.recv_cqn = cq;
  init.cap = {4, 4, 1, 1, 0};
  init.srqn = s.srqn;
  CHECK(e.create_qp(kOther, init, &qpn, nullptr) == EPERM);
}

TEST_CASE("srq__destroy_with_attached_qp_is_ebusy_with_reason") {
  SrqBench s(4);
  const char* why = nullptr;
  CHECK(s.t.b.engine->destroy_srq(Node::kOwner, s.srqn, &why) == EBUSY);
  CHECK(std::string(why) == "SRQ still has QPs attached: destroy them first");
  REQUIRE(s.t.b.engine->destroy_qp(Node::kOwner, s.t.b.qpn) == 0);
  CHECK(s.t.b.engine->destroy_srq(Node::kOwner, s.srqn) == 0);
  CHECK(s.t.b.engine->destroy_pd(Node::kOwner, s.t.b.pd) == EBUSY);  // the MR still
}

TEST_CASE("srq__sends_of_two_qps_draw_from_one_srq_in_order") {
  SrqBench s(8);
  Node& a = s.t.a;
  Node& b = s.t.b;
  // A second pair: a2 on a, b2 on b, b2 on the same SRQ.
  uint32_t a1 = a.qpn, b1 = b.qpn;
  QpInitAttr init;
  init.pdn = a.pd;
  init.send_cqn = a.scq;
  init.recv_cqn = a.rcq;
  init.cap = {16, 16, 4, 4, 64};
  REQUIRE(a.engine->create_qp(Node::kOwner, init, &a.qpn, nullptr) == 0);
  uint32_t a2 = a.qpn;
  b.qpn = 0;
  attach(b, s.srqn, a.ip, a2);
  uint32_t b2 = b.qpn;
  a.connect(b.ip, b2, kAll);
  for (uint64_t i = 0; i < 4; ++i) REQUIRE(s.post(100 + i, 8192 + i * 1024) == 0);
  std::memset(a.mem.data(), 0x11, 512);
  std::memset(a.mem.data() + 512, 0x22, 512);
  REQUIRE(a.engine->post_send(Node::kOwner, a1, a.wr(WrOpcode::kSend, 1, 0, 300)) == 0);
  std::vector<Completion> rc;
  REQUIRE(s.t.run([&] {
    for (auto& c : b.recv_cq()) rc.push_back(c);
    return rc.size() == 1;
  }));
  REQUIRE(a.engine->post_send(Node::kOwner, a2, a.wr(WrOpcode::kSend, 2, 512, 200)) == 0);
  REQUIRE(s.t.run([&] {
    for (auto& c : b.recv_cq()) rc.push_back(c);
    return rc.size() == 2;
  }));
  CHECK(rc[0].wr_id == 100);
  CHECK(rc[0].qp_num == b1);
  CHECK(rc[0].byte_len == 300);
  CHECK(rc[1].wr_id == 101);
  CHECK(rc[1].qp_num == b2);
  CHECK(rc[1].byte_len == 200);
  CHECK(b.mem[8192] == 0x11);
  CHECK(b.mem[8192 + 1024] == 0x22);
  uint32_t taken = 0;
  SrqAttr attr;
  REQUIRE(b.engine->query_srq(Node::kOwner, s.srqn, &attr, &taken) == 0);
  CHECK(taken == 2);
}

TEST_CASE("srq__empty_srq_answers_rnr_until_a_receive_is_posted") {
  SrqBench s(4);
  REQUIRE(s.t.a.post_send(s.t.a.wr(WrOpcode::kSend, 1, 0, 100)) == 0);
  s.t.run([&] { return s.counters().rx_rnr_srq_empty > 0; }, 100'000'000);
  CHECK(s.counters().rx_rnr_srq_empty > 0);
  CHECK(s.counters().rx_nak_rnr > 0);
  CHECK(s.t.b.recv_cq().empty());
  REQUIRE(s.post(55, 4096) == 0);
  std::vector<Completion> rc, sc;
  CHECK(s.t.run([&] {
    for (auto& c : s.t.b.recv_cq()) rc.push_back(c);
    for (auto& c : s.t.a.send_cq()) sc.push_back(c);
    return rc.size() == 1 && sc.size() == 1;
  }));
  REQUIRE(rc.size() == 1);
  CHECK(rc[0].wr_id == 55);
  CHECK(rc[0].status == WcStatus::kSuccess);
  CHECK(sc[0].status == WcStatus::kSuccess);
}

TEST_CASE("srq__limit_event_fires_once_below_the_armed_limit_and_disarms") {
  SrqBench s(8);
  Engine& e = *s.t.b.engine;
  const char* why = nullptr;
  SrqAttr lim{0, 0, 9};
  CHECK(e.modify_srq(Node::kOwner, s.srqn, lim, kSrqLimit, &why) == EINVAL);
  CHECK(std::string(why) == "srq_limit above the SRQ's max_wr");
  CHECK(e.modify_srq(Node::kOwner, s.srqn, lim, kSrqMaxWr, &why) == EINVAL);
  CHECK(std::string(why) == "resizing an SRQ (IBV_SRQ_MAX_WR) is not supported");
  lim.srq_limit = 3;
  REQUIRE(e.modify_srq(Node::kOwner, s.srqn, lim, kSrqLimit) == 0);
  for (uint64_t i = 0; i < 4; ++i) REQUIRE(s.post(i, i * 1024) == 0);
  std::vector<Completion> rc;
  for (uint64_t i = 0; i < 2; ++i)
    REQUIRE(s.t.a.post_send(s.t.a.wr(WrOpcode::kSend, i, 0, 64)) == 0);
  REQUIRE(s.t.run([&] {
    for (auto& c : s.t.b.recv_cq()) rc.push_back(c);
    return rc.size() == 2;
  }));
  int events = 0;
  for (auto& ev : s.t.b.events.events)
    if (ev == "15:" + std::to_string(s.srqn)) ++events;
  CHECK(events == 1);  // 4 -> 3 is not below 3; 3 -> 2 is, once
  CHECK(s.counters().srq_limit_events == 1);
  SrqAttr q;
  REQUIRE(e.query_srq(Node::kOwner, s.srqn, &q) == 0);
  CHECK(q.srq_limit == 0);
}

TEST_CASE("srq__qp_entering_err_raises_last_wqe_reached_and_flushes_its_window") {
  SrqBench s(8);
  for (uint64_t i = 0; i < 3; ++i) REQUIRE(s.post(i, i * 1024) == 0);
  QpAttr err;
  err.qp_state = QpState::kErr;
  REQUIRE(s.t.b.engine->modify_qp(Node::kOwner, s.t.b.qpn, err, kAttrState) == 0);
  CHECK(s.t.b.events.has_event(EventType::kQpLastWqeReached, s.t.b.qpn));
  // Nothing was taken: the SRQ keeps its receives for the other QPs.
  uint32_t taken = 9;
  SrqAttr a;
  REQUIRE(s.t.b.engine->query_srq(Node::kOwner, s.srqn, &a, &taken) == 0);
  CHECK(taken == 0);
  CHECK(s.t.b.recv_cq().empty());
}

TEST_CASE("srq__destroying_a_qp_returns_the_receives_it_took_as_flushes") {
  SrqBench s(8);
  for (uint64_t i = 0; i < 3; ++i) REQUIRE(s.post(i, i * 1024) == 0);
  // Message 1 arrives before message 0 (its first packet lost): the window
  // takes receives for MSNs 0 and 1; then the QP is destroyed.
  int dropped = 0;
  s.t.filter = [&](const std::string& what, bool from_a) {
    if (from_a && what.find("SEND") != std::string::npos && dropped == 0) {
      ++dropped;
      return false;
    }
    return true;
  };
  REQUIRE(s.t.a.post_send(s.t.a.wr(WrOpcode::kSend, 1, 0, 64)) == 0);
  REQUIRE(s.t.a.post_send(s.t.a.wr(WrOpcode::kSend, 2, 0, 64)) == 0);
  uint32_t taken = 0;
  SrqAttr a;
  s.t.run([&] {
    s.t.b.engine->query_srq(Node::kOwner, s.srqn, &a, &taken);
    return taken == 2;
  }, 1'000'000);
  REQUIRE(taken == 2);
  auto before = s.t.b.recv_cq();
  REQUIRE(s.t.b.engine->destroy_qp(Node::kOwner, s.t.b.qpn) == 0);
  auto after = s.t.b.recv_cq();
  // Every receive taken comes back: completed (before) or flushed (after).
  CHECK(before.size() + after.size() == 2);
  for (auto& c : after) CHECK(c.status == WcStatus::kWrFlushErr);
}

TEST_CASE("srq__a_peer_naming_an_msn_far_ahead_takes_no_receive_from_the_srq") {
  SrqBench s(8);
  for (uint64_t i = 0; i < 8; ++i) REQUIRE(s.post(i, i * 1024, 64) == 0);
  // From the peer's address, a SEND with MSN 1000: beyond the window of 8.
  proto::Packet p;
  p.mbth.opcode = proto::Opcode::kSend;
  p.mbth.dest_qpn = s.t.b.qpn;
  p.mbth.psn = 1000;  // the receive window's start (Node::connect)
  p.mbth.msn = 1000;
  p.mbth.flags = proto::kFlagLast;
  p.seth.length = 0;
  proto::FrameHeaders h;
  h.src_ip = s.t.a.ip;
  h.dst_ip = s.t.b.ip;
  std::vector<uint8_t> f(proto::encap_length(h) + proto::transport_length(p));
  f.resize(proto::build_frame(h, p, f));
  s.t.b.engine->on_frame(f);
  CHECK(s.counters().rx_rnr_srq_window == 1);
  CHECK(s.counters().rx_nak_rnr == 1);
  uint32_t taken = 9;
  SrqAttr a;
  REQUIRE(s.t.b.engine->query_srq(Node::kOwner, s.srqn, &a, &taken) == 0);
  CHECK(taken == 0);  // nothing left the SRQ for it
  CHECK(s.t.b.recv_cq().empty());
}

}  // namespace metaroce::fw::test
