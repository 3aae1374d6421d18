// qp_state.{h,cc}: the RC modify_qp table and attribute checks.
#include <doctest/doctest.h>

#include <cerrno>
#include <string>

#include "firmware-model/engine/qp_state.h"
#include "firmware-model/engine/testing/fakes.h"

namespace metaroce::fw::test {

namespace {
constexpr uint32_t kToInit = kAttrState | kAttrPkeyIndex | kAttrPort | kAttrAccessFlags;
constexpr uint32_t kToRtr = kAttrState | kAttrAv | kAttrPathMtu | kAttrDestQpn | kAttrRqPsn |
                            kAttrMaxDestRdAtomic | kAttrMinRnrTimer;
constexpr uint32_t kToRts =
    kAttrState | kAttrTimeout | kAttrRetryCnt | kAttrRnrRetry | kAttrSqPsn | kAttrMaxQpRdAtomic;

int check(QpState cur, QpState to, uint32_t mask, QpAttr a = {}, std::string* why = nullptr) {
  a.qp_state = to;
  QpState next;
  const char* w = nullptr;
  int r = check_modify(cur, a, mask, DeviceCaps{}, 1, &next, &w);
  if (why) *why = w ? w : "";
  if (r == 0) CHECK(next == to);
  return r;
}
}  // namespace

TEST_CASE("check_modify__legal_rc_path") {
  CHECK(check(QpState::kReset, QpState::kInit, kToInit) == 0);
  CHECK(check(QpState::kInit, QpState::kInit, kAttrState | kAttrAccessFlags) == 0);
  CHECK(check(QpState::kInit, QpState::kRtr, kToRtr) == 0);
  CHECK(check(QpState::kInit, QpState::kRtr, kToRtr | kAttrAccessFlags) == 0);
  CHECK(check(QpState::kRtr, QpState::kRts, kToRts) == 0);
  CHECK(check(QpState::kRts, QpState::kRts, kAttrState | kAttrMinRnrTimer) == 0);
  CHECK(check(QpState::kRts, QpState::kSqd, kAttrState) == 0);
  CHECK(check(QpState::kSqd, QpState::kRts, kAttrState) == 0);
  CHECK(check(QpState::kSqd, QpState::kSqd, kAttrState | kAttrTimeout) == 0);
  CHECK(check(QpState::kSqe, QpState::kRts, kAttrState) == 0);
}

TEST_CASE("check_modify__any_state_to_reset_or_err") {
  for (int s = 0; s <= 6; ++s) {
    CHECK(check(static_cast<QpState>(s), QpState::kReset, kAttrState) == 0);
    CHECK(check(static_cast<QpState>(s), QpState::kErr, kAttrState) == 0);
  }
}

TEST_CASE("check_modify__illegal_transitions") {
  std::string why;
  CHECK(check(QpState::kReset, QpState::kRtr, kToRtr, {}, &why) == EINVAL);
  CHECK(why == "transition not allowed");
  CHECK(check(QpState::kReset, QpState::kRts, kToRts) == EINVAL);
  CHECK(check(QpState::kInit, QpState::kRts, kToRts) == EINVAL);
  CHECK(check(QpState::kErr, QpState::kRts, kToRts) == EINVAL);
  CHECK(check(QpState::kErr, QpState::kInit, kToInit) == EINVAL);
  CHECK(check(QpState::kRtr, QpState::kSqd, kAttrState) == EINVAL);
}

TEST_CASE("check_modify__missing_required_attribute") {
  std::string why;
  CHECK(check(QpState::kReset, QpState::kInit, kToInit & ~kAttrPort, {}, &why) == EINVAL);
  CHECK(why == "required attribute missing");
  CHECK(check(QpState::kInit, QpState::kRtr, kToRtr & ~kAttrDestQpn) == EINVAL);
  CHECK(check(QpState::kInit, QpState::kRtr, kToRtr & ~kAttrAv) == EINVAL);
  CHECK(check(QpState::kRtr, QpState::kRts, kToRts & ~kAttrSqPsn) == EINVAL);
  CHECK(check(QpState::kRtr, QpState::kRts, kToRts & ~kAttrRetryCnt) == EINVAL);
}

TEST_CASE("check_modify__attribute_not_allowed_in_transition") {
  std::string why;
  CHECK(check(QpState::kReset, QpState::kInit, kToInit | kAttrSqPsn, {}, &why) == EINVAL);
  CHECK(why == "attribute not allowed in this transition");
  CHECK(check(QpState::kRts, QpState::kRts, kAttrState | kAttrRqPsn) == EINVAL);
  CHECK(check(QpState::kRtr, QpState::kRts, kToRts | kAttrCap) == EINVAL);
}

TEST_CASE("check_modify__cur_state_must_match") {
  QpAttr a;
  std::string why;
  a.cur_qp_state = QpState::kRtr;
  CHECK(check(QpState::kRts, QpState::kRts, kAttrState | kAttrCurState, a, &why) == EINVAL);
  CHECK(why == "cur_qp_state mismatch");
  a.cur_qp_state = QpState::kRts;
  CHECK(check(QpState::kRts, QpState::kRts, kAttrState | kAttrCurState, a) == 0);
}

TEST_CASE("check_modify__value_ranges") {
  struct Case {
    QpState from, to;
    uint32_t mask;
    void (*spoil)(QpAttr&);
    const char* why;
  };
  const Case cases[] = {
      {QpState::kInit, QpState::kRtr, kToRtr, [](QpAttr& a) { a.path_mtu = 1500; },
       "path_mtu not 256..4096"},
      {QpState::kInit, QpState::kRtr, kToRtr, [](QpAttr& a) { a.av.sgid_index = 1; },  // one GID
       "sgid_index beyond the GID table"},
      {QpState::kInit, QpState::kRtr, kToRtr, [](QpAttr& a) { a.dest_qp_num = 1u << 24; },
       "dest_qp_num exceeds 24 bits"},
      {QpState::kRtr, QpState::kRts, kToRts, [](QpAttr& a) { a.timeout = 32; }, "timeout > 31"},
      {QpState::kRtr, QpState::kRts, kToRts, [](QpAttr& a) { a.retry_cnt = 8; }, "retry_cnt > 7"},
      {QpState::kRtr, QpState::kRts, kToRts, [](QpAttr& a) { a.rnr_retry = 8; }, "rnr_retry > 7"},
      {QpState::kRtr, QpState::kRts, kToRts, [](QpAttr& a) { a.max_rd_atomic = 200; },
       "max_rd_atomic above device max_qp_rd_atom"},
      {QpState::kReset, QpState::kInit, kToInit, [](QpAttr& a) { a.port_num = 2; },
       "port_num must be 1"},
      {QpState::kReset, QpState::kInit, kToInit, [](QpAttr& a) { a.qp_access_flags = 0x80; },
       "unknown access flag"},
  };
  for (const Case& c : cases) {
    INFO(c.why);
    QpAttr a;
    c.spoil(a);
    std::string why;
    CHECK(check(c.from, c.to, c.mask, a, &why) == EINVAL);
    CHECK(why == c.why);
  }
}

TEST_CASE("check_modify__no_state_bit_means_same_state") {
  QpAttr a;
  QpState next;
  const char* why = nullptr;
  CHECK(check_modify(QpState::kRts, a, kAttrMinRnrTimer, DeviceCaps{}, 1, &next, nullptr) == 0);
  CHECK(next == QpState::kRts);
  CHECK(check_modify(QpState::kRts, a, kAttrSqPsn, DeviceCaps{}, 1, &next, &why) == EINVAL);
  CHECK(std::string(why) == "attribute not allowed in this transition");
}

TEST_CASE("effective_mtu__fits_link_and_path") {
  CHECK(effective_mtu(4096, 9000) == 4096);
  CHECK(effective_mtu(4096, 1500) == 1024);
  CHECK(effective_mtu(1024, 9000) == 1024);
  CHECK(effective_mtu(256, 100) == 256);
}

TEST_CASE("engine_modify_qp__walks_states_and_query_reflects_them") {
  Bench t;
  t.connect_pair();
  QpAttr a;
  REQUIRE(t.a.engine->query_qp(Node::kOwner, t.a.qpn, &a, nullptr) == 0);
  CHECK(a.qp_state == QpState::kRts);
  CHECK(a.dest_qp_num == t.b.qpn);
  CHECK(a.sq_psn == 1000);
  QpAttr bad;
  bad.qp_state = QpState::kRtr;
  CHECK(t.a.engine->modify_qp(Node::kOwner, t.a.qpn, bad, kAttrState) == EINVAL);
  QpAttr sqd;
  sqd.qp_state = QpState::kSqd;
  CHECK(t.a.engine->modify_qp(Node::kOwner, t.a.qpn, sqd, kAttrState) == 0);
  CHECK(t.a.events.has_event(EventType::kSqDrained, t.a.qpn));
  QpAttr reset;
  reset.qp_state = QpState::kReset;
  CHECK(t.a.engine->modify_qp(Node::kOwner, t.a.qpn, reset, kAttrState) == 0);
  REQUIRE(t.a.engine->query_qp(Node::kOwner, t.a.qpn, &a, nullptr) == 0);
  CHECK(a.qp_state == QpState::kReset);
  CHECK(t.a.engine->post_recv(Node::kOwner, t.a.qpn, RecvWr{}) == EINVAL);
}

TEST_CASE("engine_modify_qp__sqd_waits_for_outstanding_then_reports_drained") {
  Bench t;
  t.connect_pair();
  SendWr w = t.a.wr(WrOpcode::kRdmaWrite, 1, 0, 5000);
  w.remote_addr = t.b.base();
  w.rkey = t.b.mr.rkey;
  REQUIRE(t.a.post_send(w) == 0);
  t.a.engine->pump();
  QpAttr sqd;
  sqd.qp_state = QpState::kSqd;
  REQUIRE(t.a.engine->modify_qp(Node::kOwner, t.a.qpn, sqd, kAttrState) == 0);
  CHECK_FALSE(t.a.events.has_event(EventType::kSqDrained, t.a.qpn));
  REQUIRE(t.a.post_send(w) == 0);  // queued, not started while SQD
  t.run_idle(50'000'000);
  CHECK(t.a.events.has_event(EventType::kSqDrained, t.a.qpn));
  CHECK(t.a.send_cq().size() == 1);
  QpAttr rts;
  rts.qp_state = QpState::kRts;
  REQUIRE(t.a.engine->modify_qp(Node::kOwner, t.a.qpn, rts, kAttrState) == 0);
  t.run_idle(50'000'000);
  CHECK(t.a.send_cq().size() == 1);
}

}  // namespace metaroce::fw::test
