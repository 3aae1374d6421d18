// objects.{h,cc}: key checks and the owner rules of PD/MR/CQ/QP.
#include <doctest/doctest.h>

#include <bit>
#include <cerrno>
#include <set>

#include "firmware-model/engine/objects.h"
#include "firmware-model/engine/testing/fakes.h"

namespace metaroce::fw::test {

namespace {
constexpr OwnerId kA = 1, kB = 2;
constexpr uint32_t kRw = kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead;
FakeRandom rnd(42);
}  // namespace

TEST_CASE("mr_table__reg_rejects_remote_write_without_local_write") {
  MrTable t(16);
  MrKeys k;
  CHECK(t.reg(kA, 1, 0x1000, 100, kAccessRemoteWrite, rnd, &k) == EINVAL);
  CHECK(t.reg(kA, 1, 0x1000, 100, kAccessRemoteAtomic, rnd, &k) == EINVAL);
  CHECK(t.reg(kA, 1, 0x1000, 100, 0x100, rnd, &k) == EINVAL);
  CHECK(t.reg(kA, 1, 0x1000, 100, kAccessRemoteRead, rnd, &k) == 0);
}

TEST_CASE("mr_table__keys_are_random_and_carry_no_index") {
  MrTable t(16);
  MrKeys k1, k2;
  REQUIRE(t.reg(kA, 1, 0x1000, 100, kRw, rnd, &k1) == 0);
  REQUIRE(t.reg(kA, 1, 0x2000, 100, kRw, rnd, &k2) == 0);
  CHECK(k1.rkey == k1.lkey);
  CHECK(k1.lkey != k2.lkey);
  CHECK(k1.lkey != 0);
  CHECK(t.find(k1.lkey ^ 1) == nullptr);
  CHECK(t.find(k1.lkey)->addr == 0x1000);
  CHECK(t.find(k2.lkey)->addr == 0x2000);
}

// A source that repeats itself: the table must never hand out 0 or a live key.
class StuckRandom : public RandomInterface {
 public:
  uint64_t next() override { return n_++ < 3 ? 0 : uint64_t{0xABCD1234} << 32; }

 private:
  int n_ = 0;
};

TEST_CASE("mr_table__key_never_zero_nor_a_live_key") {
  MrTable t(16);
  StuckRandom r;
  MrKeys k1, k2;
  REQUIRE(t.reg(kA, 1, 0x1000, 100, kRw, r, &k1) == 0);
  CHECK(k1.lkey == 0xABCD1234u);                            // three zeros skipped
  CHECK(t.reg(kA, 1, 0x2000, 100, kRw, r, &k2) == ENOMEM);  // only clashes left
  CHECK(t.find(k1.lkey)->addr == 0x1000);
}

TEST_CASE("check_rkey__each_failure_reason") {
  MrTable t(16);
  MrKeys k;
  REQUIRE(t.reg(kA, 1, 0x1000, 100, kAccessLocalWrite | kAccessRemoteRead, rnd, &k) == 0);
  const Mr* mr = nullptr;
  CHECK(t.check_remote(kA, 1, 0, k.rkey, 0x1000, 100, kAccessRemoteRead, &mr) == KeyCheck::kOk);
  CHECK(mr != nullptr);
  CHECK(t.check_remote(kA, 1, 0, k.rkey + 1, 0x1000, 10, kAccessRemoteRead, nullptr) ==
        KeyCheck::kNoKey);
  CHECK(t.check_remote(kB, 1, 0, k.rkey, 0x1000, 10, kAccessRemoteRead, nullptr) ==
        KeyCheck::kWrongOwner);
  CHECK(t.check_remote(kA, 2, 0, k.rkey, 0x1000, 10, kAccessRemoteRead, nullptr) ==
        KeyCheck::kWrongPd);
  CHECK(t.check_remote(kA, 1, 0, k.rkey, 0x1000, 101, kAccessRemoteRead, nullptr) ==
        KeyCheck::kOutOfBounds);
  CHECK(t.check_remote(kA, 1, 0, k.rkey, 0x0FFF, 10, kAccessRemoteRead, nullptr) ==
        KeyCheck::kOutOfBounds);
  CHECK(t.check_remote(kA, 1, 0, k.rkey, 0x1063, 2, kAccessRemoteRead, nullptr) ==
        KeyCheck::kOutOfBounds);
  CHECK(t.check_remote(kA, 1, 0, k.rkey, 0x1000, 10, kAccessRemoteWrite, nullptr) ==
        KeyCheck::kNoAccess);
}

TEST_CASE("check_rkey__zero_length_needs_no_key") {
  MrTable t(16);
  CHECK(t.check_remote(kA, 1, 0, 0xDEAD, 0, 0, kAccessRemoteWrite, nullptr) == KeyCheck::kOk);
  CHECK(t.check_local(kA, 1, 0xDEAD, 0, 0, kAccessLocalWrite) == KeyCheck::kOk);
}

TEST_CASE("check_lkey__local_write_needed_for_receive_buffers") {
  MrTable t(16);
  MrKeys k;
  REQUIRE(t.reg(kA, 1, 0x1000, 100, kAccessRemoteRead, rnd, &k) == 0);
  CHECK(t.check_local(kA, 1, k.lkey, 0x1000, 100, 0) == KeyCheck::kOk);
  CHECK(t.check_local(kA, 1, k.lkey, 0x1000, 100, kAccessLocalWrite) == KeyCheck::kNoAccess);
}

TEST_CASE("mr_table__dereg_checks_owner") {
  MrTable t(16);
  MrKeys k;
  uint32_t pdn = 0;
  REQUIRE(t.reg(kA, 3, 0x1000, 100, kRw, rnd, &k) == 0);
  CHECK(t.dereg(kB, k.lkey, &pdn) == EPERM);
  CHECK(t.dereg(kA, k.lkey + 1, &pdn) == ENOENT);
  CHECK(t.dereg(kA, k.lkey, &pdn) == 0);
  CHECK(pdn == 3);
  CHECK(t.find(k.lkey) == nullptr);
}

// Keys must be unguessable (docs/engine.md §Objects): a fresh key at every
// registration, even when the slot is reused, with >= 24 bits that vary.
TEST_CASE("engine_objects__keys_from_reg_dereg_cycles_are_distinct_and_random") {
  FakeClock clock;
  Node n(clock, 0x0A000001, 1);
  Engine& e = *n.engine;
  uint32_t pd = 0;
  REQUIRE(e.create_pd(kA, &pd) == 0);
  std::set<uint32_t> seen;
  uint32_t first = 0, varying = 0;
  for (int i = 0; i < 2000; ++i) {
    MrKeys k;
    REQUIRE(e.reg_mr(kA, pd, 0x1000, 10, kRw, &k) == 0);
    if (i == 0) first = k.lkey;
    varying |= k.lkey ^ first;
    seen.insert(k.lkey);
    REQUIRE(e.dereg_mr(kA, k.lkey) == 0);
    CHECK(e.dereg_mr(kA, k.lkey) == ENOENT);  // dead at once
  }
  CHECK(seen.size() == 2000);
  CHECK(std::popcount(varying) >= 24);
}

TEST_CASE("engine_objects__wrong_owner_gets_eperm_unknown_gets_enoent") {
  FakeClock clock;
  Node n(clock, 0x0A000001, 1);
  Engine& e = *n.engine;
  uint32_t pd = 0, cq = 0, qpn = 0;
  REQUIRE(e.create_pd(kA, &pd) == 0);
  REQUIRE(e.create_cq(kA, 16, &cq) == 0);
  QpInitAttr init;
  init.pdn = pd;
  init.send_cqn = init.recv_cqn = cq;
  init.cap = {16, 16, 4, 4, 64};
  REQUIRE(e.create_qp(kA, init, &qpn, nullptr) == 0);
  MrKeys k;
  CHECK(e.reg_mr(kB, pd, 0x1000, 10, kRw, &k) == EPERM);
  CHECK(e.reg_mr(kA, pd + 5, 0x1000, 10, kRw, &k) == ENOENT);
  CHECK(e.create_qp(kB, init, &qpn, nullptr) == EPERM);
  CHECK(e.destroy_cq(kB, cq) == EPERM);
  CHECK(e.destroy_qp(kB, qpn) == EPERM);
  CHECK(e.destroy_qp(kA, qpn + 1) == ENOENT);
  QpAttr a;
  CHECK(e.modify_qp(kB, qpn, a, kAttrState) == EPERM);
  CHECK(e.query_qp(kB, qpn, &a, nullptr) == EPERM);
  CHECK(e.post_recv(kB, qpn, RecvWr{}) == EPERM);
  CHECK(e.post_send(kB, qpn, SendWr{}) == EPERM);
}

TEST_CASE("engine_objects__busy_pd_and_cq_then_destroy_in_order") {
  FakeClock clock;
  Node n(clock, 0x0A000001, 1);
  Engine& e = *n.engine;
  uint32_t pd = 0, cq = 0, qpn = 0;
  REQUIRE(e.create_pd(kA, &pd) == 0);
  REQUIRE(e.create_cq(kA, 16, &cq) == 0);
  MrKeys k;
  REQUIRE(e.reg_mr(kA, pd, 0x1000, 10, kRw, &k) == 0);
  QpInitAttr init;
  init.pdn = pd;
  init.send_cqn = init.recv_cqn = cq;
  init.cap = {16, 16, 4, 4, 64};
  REQUIRE(e.create_qp(kA, init, &qpn, nullptr) == 0);
  CHECK(e.destroy_pd(kA, pd) == EBUSY);
  CHECK(e.destroy_cq(kA, cq) == EBUSY);
  CHECK(e.destroy_qp(kA, qpn) == 0);
  CHECK(e.destroy_cq(kA, cq) == 0);
  CHECK(e.destroy_pd(kA, pd) == EBUSY);  // the MR still uses it
  CHECK(e.dereg_mr(kA, k.lkey) == 0);
  CHECK(e.destroy_pd(kA, pd) == 0);
}

TEST_CASE("engine_objects__create_qp_checks_caps") {
  FakeClock clock;
  Node n(clock, 0x0A000001, 1);
  Engine& e = *n.engine;
  uint32_t pd = 0, cq = 0, qpn = 0;
  REQUIRE(e.create_pd(kA, &pd) == 0);
  REQUIRE(e.create_cq(kA, 16, &cq) == 0);
  CHECK(e.create_cq(kA, 0, &cq) == EINVAL);
  QpInitAttr init;
  init.pdn = pd;
  init.send_cqn = init.recv_cqn = cq;
  init.cap = {16, 16, kMaxSge + 1, 4, 64};
  CHECK(e.create_qp(kA, init, &qpn, nullptr) == EINVAL);
  init.cap = {16, 16, 4, 4, kMaxInline + 1};
  CHECK(e.create_qp(kA, init, &qpn, nullptr) == EINVAL);
  init.cap = {16, 16, 4, 4, 64};
  QpCap got;
  CHECK(e.create_qp(kA, init, &qpn, &got) == 0);
  CHECK(got.max_send_wr == 16);
  CHECK((qpn & 0xFFF) >= 2);
}

TEST_CASE("engine_objects__destroy_owner_tears_down_without_completions") {
  Bench t;
  t.connect_pair();
  REQUIRE(t.a.post_recv(1, 0, 100) == 0);
  SendWr w = t.a.wr(WrOpcode::kSend, 2, 0, 100);
  REQUIRE(t.a.post_send(w) == 0);
  t.a.engine->destroy_owner(Node::kOwner);
  CHECK(t.a.engine->qp_numbers().empty());
  t.run_idle(10'000'000);
  CHECK(t.a.events.cqs[t.a.scq].empty());
  CHECK(t.a.events.cqs[t.a.rcq].empty());
  uint32_t pd = 0;
  CHECK(t.a.engine->create_pd(Node::kOwner, &pd) == 0);
  CHECK(pd == 1);  // every PD of the owner was freed
  CHECK(t.a.engine->dereg_mr(Node::kOwner, t.a.mr.lkey) == ENOENT);
}

TEST_CASE("engine_objects__cq_overflow_raises_cq_err_and_fails_qps") {
  Bench t;
  t.connect_pair();
  t.a.events.capacity[t.a.scq] = 1;
  for (int i = 0; i < 3; ++i) {
    SendWr w = t.a.wr(WrOpcode::kRdmaWrite, i, 0, 10);
    w.remote_addr = t.b.base();
    w.rkey = t.b.mr.rkey;
    REQUIRE(t.a.post_send(w) == 0);
  }
  t.run_idle(100'000'000);
  CHECK(t.a.engine->counters().cq_overflows >= 1);
  CHECK(t.a.events.has_event(EventType::kCqErr, t.a.scq));
  CHECK(t.a.events.has_event(EventType::kQpFatal, t.a.qpn));
  QpAttr a;
  REQUIRE(t.a.engine->query_qp(Node::kOwner, t.a.qpn, &a, nullptr) == 0);
  CHECK(a.qp_state == QpState::kErr);
}

// IB: cqe may be anything from 1 to max_cqe.
TEST_CASE("engine_objects__create_cq_accepts_max_cqe") {
  FakeClock clock;
  Node n(clock, 0x0A000001, 1);
  uint32_t cq = 0;
  uint32_t max = n.engine->caps().max_cqe;
  CHECK(n.engine->create_cq(kA, max, &cq) == 0);
  CHECK(n.engine->create_cq(kA, max + 1, &cq) == EINVAL);
  CHECK(n.engine->create_cq(kA, 1, &cq) == 0);
}

// IB: receives may be posted from INIT on; in RESET the post fails (no
// completion, nothing queued); in ERR it completes at once, flushed.
TEST_CASE("engine_objects__post_recv_by_qp_state") {
  Bench t;
  t.a.setup(1 << 12, kRw);
  RecvWr r;
  r.wr_id = 5;
  r.num_sge = 1;
  r.sg[0] = {t.a.base(), 64, t.a.mr.lkey};
  Engine& e = *t.a.engine;
  CHECK(e.post_recv(Node::kOwner, t.a.qpn, r) == EINVAL);  // RESET
  t.a.connect(t.b.ip, 0x123, kRw);                          // INIT, RTR, RTS
  QpAttr a;
  for (QpState s : {QpState::kRts, QpState::kSqd}) {
    if (s == QpState::kSqd) {
      a.qp_state = s;
      REQUIRE(e.modify_qp(Node::kOwner, t.a.qpn, a, kAttrState) == 0);
    }
    CHECK(e.post_recv(Node::kOwner, t.a.qpn, r) == 0);
  }
  CHECK(t.a.recv_cq().empty());
  a.qp_state = QpState::kErr;
  REQUIRE(e.modify_qp(Node::kOwner, t.a.qpn, a, kAttrState) == 0);
  CHECK(t.a.recv_cq().size() == 2);  // the two queued ones, flushed
  CHECK(e.post_recv(Node::kOwner, t.a.qpn, r) == 0);
  auto rc = t.a.recv_cq();
  REQUIRE(rc.size() == 1);
  CHECK(std::string(status_name(rc[0].status)) == "WR_FLUSH_ERR");
  a.qp_state = QpState::kReset;
  REQUIRE(e.modify_qp(Node::kOwner, t.a.qpn, a, kAttrState) == 0);
  CHECK(e.post_recv(Node::kOwner, t.a.qpn, r) == EINVAL);
  a.qp_state = QpState::kInit;
  REQUIRE(e.modify_qp(Node::kOwner, t.a.qpn, a, kAttrState | kAttrPkeyIndex | kAttrPort |
                                                    kAttrAccessFlags) == 0);
  CHECK(e.post_recv(Node::kOwner, t.a.qpn, r) == 0);  // INIT
}

}  // namespace metaroce::fw::test
