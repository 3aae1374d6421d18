// Memory windows (docs/engine.md §Memory windows, docs/protocol.md §15):
// binds, remote access through windows, invalidation and the type rules,
// between two engines on the test bench.
#include <doctest/doctest.h>

#include <cerrno>
#include <cstring>

#include "firmware-model/engine/mw.h"
#include "firmware-model/engine/testing/fakes.h"

namespace metaroce::fw::test {

namespace {

constexpr uint32_t kBindable = kAccessLocalWrite | kAccessMwBind;
constexpr uint32_t kRw = kAccessRemoteRead | kAccessRemoteWrite;

// b exposes a window on its memory to a.
struct MwBench {
  Bench t;
  MrKeys wmr;  // b's MR that windows bind to: [base + 4096, base + 4096 + 16384)
  explicit MwBench(uint32_t mr_access = kBindable) {
    t.connect_pair(1 << 16);
    REQUIRE(t.b.engine->reg_mr(Node::kOwner, t.b.pd, t.b.base() + 4096, 16384, mr_access, &wmr) ==
            0);
  }
  Counters bc() const { return t.b.engine->counters(); }
  uint32_t alloc(MwType type, uint32_t* rkey) {
    uint32_t h = 0;
    REQUIRE(t.b.engine->alloc_mw(Node::kOwner, t.b.pd, type, &h, rkey) == 0);
    return h;
  }
  // b posts BIND_MW; returns its completion.
  Completion bind(uint32_t mw, MwType type, uint32_t new_rkey, uint64_t off, uint64_t len,
                  uint32_t access, uint32_t lkey = 0) {
    SendWr w;
    w.wr_id = 900;
    w.opcode = WrOpcode::kBindMw;
    w.send_flags = kSendSignaled;
    w.rkey = new_rkey;
    w.bind = {mw, lkey ? lkey : wmr.lkey, access, t.b.base() + off, len, type};
    REQUIRE(t.b.post_send(w) == 0);
    return b_send_completion();
  }
  Completion local_inv(uint32_t rkey) {
    SendWr w;
    w.wr_id = 901;
    w.opcode = WrOpcode::kLocalInv;
    w.send_flags = kSendSignaled;
    w.imm = rkey;
    REQUIRE(t.b.post_send(w) == 0);
    return b_send_completion();
  }
  Completion b_send_completion() {
    std::vector<Completion> got;
    CHECK(t.run([&] {
      for (auto& c : t.b.send_cq()) got.push_back(c);
      return !got.empty();
    }));
    REQUIRE(!got.empty());
    return got[0];
  }
  // a accesses b's memory at off through rkey; returns a's completion.
  Completion access(WrOpcode op, uint32_t rkey, uint64_t off, uint32_t len, uint64_t local = 0) {
    SendWr w = t.a.wr(op, 77, local, len);
    w.remote_addr = t.b.base() + off;
    w.rkey = rkey;
    REQUIRE(t.a.post_send(w) == 0);
    std::vector<Completion> got;
    CHECK(t.run([&] {
      for (auto& c : t.a.send_cq()) got.push_back(c);
      return !got.empty();
    }));
    REQUIRE(!got.empty());
    return got[0];
  }
};

}  // namespace

TEST_CASE("mw__type2_bind_write_read_through_the_window") {
  MwBench m;
  uint32_t rkey0 = 0;
  uint32_t h = m.alloc(MwType::kType2, &rkey0);
  uint32_t rkey = rkey0 + 1;  // ibv_inc_rkey
  Completion b = m.bind(h, MwType::kType2, rkey, 8192, 4096, kRw);
  CHECK(b.status == WcStatus::kSuccess);
  CHECK(b.opcode == WcOpcode::kBindMw);
  CHECK(m.bc().mw_binds == 1);
  for (int i = 0; i < 2000; ++i) m.t.a.mem[i] = static_cast<uint8_t>(i * 3);
  CHECK(m.access(WrOpcode::kRdmaWrite, rkey, 8192 + 100, 2000).status == WcStatus::kSuccess);
  CHECK(std::memcmp(m.t.a.mem.data(), m.t.b.mem.data() + 8192 + 100, 2000) == 0);
  for (int i = 0; i < 1000; ++i) m.t.b.mem[8192 + 3000 + i] = static_cast<uint8_t>(i * 5 + 1);
  CHECK(m.access(WrOpcode::kRdmaRead, rkey, 8192 + 3000, 1000, 30000).status ==
        WcStatus::kSuccess);
  CHECK(std::memcmp(m.t.a.mem.data() + 30000, m.t.b.mem.data() + 8192 + 3000, 1000) == 0);
  // The initial rkey (key part 0) names nothing: the bind changed it.
  CHECK(m.access(WrOpcode::kRdmaRead, rkey0, 8192, 8, 30000).status == WcStatus::kRemAccessErr);
  CHECK(m.bc().rkey_refused_no_key == 1);
}

TEST_CASE("mw__access_beyond_the_window_is_refused_and_counted") {
  MwBench m;
  uint32_t rkey = 0;
  uint32_t h = m.alloc(MwType::kType2, &rkey);
  REQUIRE(m.bind(h, MwType::kType2, rkey + 1, 8192, 4096, kRw).status == WcStatus::kSuccess);
  // Inside the MR, but past the window's end.
  Completion c = m.access(WrOpcode::kRdmaWrite, rkey + 1, 8192 + 4000, 200);
  CHECK(c.status == WcStatus::kRemAccessErr);
  CHECK(m.bc().rkey_refused_out_of_bounds == 1);
  CHECK(m.bc().rx_nak_access >= 1);
}

TEST_CASE("mw__rights_of_the_window_not_of_the_mr_apply") {
  MwBench m;
  uint32_t rkey = 0;
  uint32_t h = m.alloc(MwType::kType2, &rkey);
  REQUIRE(m.bind(h, MwType::kType2, rkey + 1, 8192, 4096, kAccessRemoteRead).status ==
          WcStatus::kSuccess);
  CHECK(m.access(WrOpcode::kRdmaWrite, rkey + 1, 8192, 64).status == WcStatus::kRemAccessErr);
  CHECK(m.bc().rkey_refused_no_access == 1);
}

TEST_CASE("mw__send_with_invalidate_frees_the_window") {
  MwBench m;
  uint32_t rkey = 0;
  uint32_t h = m.alloc(MwType::kType2, &rkey);
  REQUIRE(m.bind(h, MwType::kType2, rkey + 1, 8192, 4096, kRw).status == WcStatus::kSuccess);
  REQUIRE(m.t.b.post_recv(5, 40000, 4096) == 0);
  SendWr s = m.t.a.wr(WrOpcode::kSendWithInv, 6, 0, 3000);
  s.imm = rkey + 1;
  REQUIRE(m.t.a.post_send(s) == 0);
  std::vector<Completion> sc, rc;
  CHECK(m.t.run([&] {
    for (auto& c : m.t.a.send_cq()) sc.push_back(c);
    for (auto& c : m.t.b.recv_cq()) rc.push_back(c);
    return !sc.empty() && !rc.empty();
  }));
  REQUIRE(rc.size() == 1);
  CHECK(rc[0].status == WcStatus::kSuccess);
  CHECK((rc[0].wc_flags & kWcWithInv) != 0);
  CHECK((rc[0].wc_flags & kWcWithImm) == 0);
  CHECK(rc[0].imm == rkey + 1);
  CHECK(rc[0].byte_len == 3000);
  CHECK(sc[0].status == WcStatus::kSuccess);
  CHECK(m.bc().mw_remote_invalidations == 1);
  // The window refuses access now, and its MR may go.
  CHECK(m.access(WrOpcode::kRdmaRead, rkey + 1, 8192, 8, 30000).status == WcStatus::kRemAccessErr);
  CHECK(m.bc().rkey_refused_no_key == 1);
  CHECK(m.t.b.engine->dereg_mr(Node::kOwner, m.wmr.lkey) == 0);
  CHECK(m.t.b.engine->dealloc_mw(Node::kOwner, h) == 0);
}

TEST_CASE("mw__type1_window_cannot_be_invalidated_remotely_or_locally") {
  MwBench m;
  uint32_t rkey = 0;
  uint32_t h = m.alloc(MwType::kType1, &rkey);
  REQUIRE(m.bind(h, MwType::kType1, rkey + 1, 8192, 4096, kRw).status == WcStatus::kSuccess);
  CHECK(m.access(WrOpcode::kRdmaWrite, rkey + 1, 8192, 64).status == WcStatus::kSuccess);
  REQUIRE(m.t.b.post_recv(5, 40000, 4096) == 0);
  SendWr s = m.t.a.wr(WrOpcode::kSendWithInv, 6, 0, 100);
  s.imm = rkey + 1;
  REQUIRE(m.t.a.post_send(s) == 0);
  std::vector<Completion> sc;
  CHECK(m.t.run([&] {
    for (auto& c : m.t.a.send_cq()) sc.push_back(c);
    return !sc.empty();
  }));
  REQUIRE(!sc.empty());
  CHECK(sc[0].status == WcStatus::kRemInvReqErr);
  CHECK(m.bc().mw_remote_inv_refused == 1);
  CHECK(m.bc().mw_refused_wrong_type == 1);
  CHECK(m.bc().mw_remote_invalidations == 0);

  MwBench l;
  h = l.alloc(MwType::kType1, &rkey);
  REQUIRE(l.bind(h, MwType::kType1, rkey + 1, 8192, 4096, kRw).status == WcStatus::kSuccess);
  CHECK(l.local_inv(rkey + 1).status == WcStatus::kLocProtErr);
  CHECK(l.bc().mw_local_inv_refused == 1);
  CHECK(l.bc().mw_refused_wrong_type == 1);
}

TEST_CASE("mw__type1_rebind_changes_the_rkey_and_zero_length_unbinds") {
  MwBench m;
  uint32_t rkey = 0;
  uint32_t h = m.alloc(MwType::kType1, &rkey);
  REQUIRE(m.bind(h, MwType::kType1, rkey + 1, 8192, 4096, kRw).status == WcStatus::kSuccess);
  REQUIRE(m.bind(h, MwType::kType1, rkey + 2, 4096, 4096, kRw).status == WcStatus::kSuccess);
  CHECK(m.t.b.engine->dereg_mr(Node::kOwner, m.wmr.lkey) == EBUSY);
  CHECK(m.access(WrOpcode::kRdmaWrite, rkey + 2, 4096, 64).status == WcStatus::kSuccess);
  REQUIRE(m.bind(h, MwType::kType1, rkey + 3, 0, 0, 0).status == WcStatus::kSuccess);
  CHECK(m.t.b.engine->dereg_mr(Node::kOwner, m.wmr.lkey) == 0);  // unbound: the MR is free
  CHECK(m.access(WrOpcode::kRdmaWrite, rkey + 2, 4096, 64).status == WcStatus::kRemAccessErr);
}

TEST_CASE("mw__local_invalidate_and_dereg_of_a_bound_mr") {
  MwBench m;
  uint32_t rkey = 0;
  uint32_t h = m.alloc(MwType::kType2, &rkey);
  REQUIRE(m.bind(h, MwType::kType2, rkey + 7, 8192, 4096, kRw).status == WcStatus::kSuccess);
  CHECK(m.t.b.engine->dereg_mr(Node::kOwner, m.wmr.lkey) == EBUSY);
  Completion c = m.local_inv(rkey + 7);
  CHECK(c.status == WcStatus::kSuccess);
  CHECK(c.opcode == WcOpcode::kLocalInv);
  CHECK(m.bc().mw_local_invalidations == 1);
  CHECK(m.access(WrOpcode::kRdmaWrite, rkey + 7, 8192, 64).status == WcStatus::kRemAccessErr);
  CHECK(m.t.b.engine->dereg_mr(Node::kOwner, m.wmr.lkey) == 0);
}

// Hostile or mistaken binds: each completes MW_BIND_ERR and is counted by reason.
TEST_CASE("mw__bind_refusals") {
  struct Case {
    const char* name;
    uint64_t off, len;
    uint32_t access;
    uint64_t Counters::*reason;
  };
  const Case cases[] = {
      {"beyond the MR", 8192, 1ull << 40, kRw, &Counters::mw_refused_out_of_bounds},
      {"wrapping length", 8192, ~0ull - 100, kRw, &Counters::mw_refused_out_of_bounds},
      {"before the MR", 0, 64, kRw, &Counters::mw_refused_out_of_bounds},
      {"local write right", 8192, 64, kAccessLocalWrite, &Counters::mw_refused_bad_access},
      {"unknown right", 8192, 64, 1u << 20, &Counters::mw_refused_bad_access},
  };
  for (const Case& k : cases) {
    CAPTURE(k.name);
    MwBench m;
    uint32_t rkey = 0;
    uint32_t h = m.alloc(MwType::kType2, &rkey);
    Completion c = m.bind(h, MwType::kType2, rkey + 1, k.off, k.len, k.access);
    CHECK(c.status == WcStatus::kMwBindErr);
    CHECK(m.bc().mw_bind_refused == 1);
    CHECK(m.bc().*k.reason == 1);
    CHECK(m.bc().mw_binds == 0);
  }
}

TEST_CASE("mw__bind_refusals_of_window_and_mr") {
  SUBCASE("MR without MW_BIND") {
    MwBench m(kAccessLocalWrite);
    uint32_t rkey = 0;
    uint32_t h = m.alloc(MwType::kType2, &rkey);
    CHECK(m.bind(h, MwType::kType2, rkey + 1, 8192, 64, kRw).status == WcStatus::kMwBindErr);
    CHECK(m.bc().mw_refused_mr_no_bind == 1);
  }
  SUBCASE("remote write on an MR without local write") {
    MwBench m(kAccessMwBind);
    uint32_t rkey = 0;
    uint32_t h = m.alloc(MwType::kType2, &rkey);
    CHECK(m.bind(h, MwType::kType2, rkey + 1, 8192, 64, kRw).status == WcStatus::kMwBindErr);
    CHECK(m.bc().mw_refused_bad_access == 1);
  }
  SUBCASE("type 2 bind of a bound window") {
    MwBench m;
    uint32_t rkey = 0;
    uint32_t h = m.alloc(MwType::kType2, &rkey);
    REQUIRE(m.bind(h, MwType::kType2, rkey + 1, 8192, 64, kRw).status == WcStatus::kSuccess);
    CHECK(m.bind(h, MwType::kType2, rkey + 2, 8192, 64, kRw).status == WcStatus::kMwBindErr);
    CHECK(m.bc().mw_refused_busy == 1);
  }
  SUBCASE("IBV_WR_BIND_MW naming a type 1 window") {
    MwBench m;
    uint32_t rkey = 0;
    uint32_t h = m.alloc(MwType::kType1, &rkey);
    CHECK(m.bind(h, MwType::kType2, rkey + 1, 8192, 64, kRw).status == WcStatus::kMwBindErr);
    CHECK(m.bc().mw_refused_wrong_type == 1);
  }
  SUBCASE("new rkey of another window") {
    MwBench m;
    uint32_t rkey = 0, other = 0;
    uint32_t h = m.alloc(MwType::kType2, &rkey);
    m.alloc(MwType::kType2, &other);
    CHECK(m.bind(h, MwType::kType2, other + 1, 8192, 64, kRw).status == WcStatus::kMwBindErr);
    CHECK(m.bc().mw_refused_wrong_key == 1);
  }
  SUBCASE("a window of another process") {
    MwBench m;
    constexpr OwnerId kOther = 99;
    uint32_t pd = 0, h = 0, rkey = 0;
    REQUIRE(m.t.b.engine->create_pd(kOther, &pd) == 0);
    REQUIRE(m.t.b.engine->alloc_mw(kOther, pd, MwType::kType2, &h, &rkey) == 0);
    CHECK(m.bind(h, MwType::kType2, rkey + 1, 8192, 64, kRw).status == WcStatus::kMwBindErr);
    CHECK(m.bc().mw_refused_wrong_owner == 1);
    CHECK(m.t.b.engine->dealloc_mw(Node::kOwner, h) == EPERM);
  }
  SUBCASE("an MR of another process") {
    MwBench m;
    constexpr OwnerId kOther = 99;
    uint32_t pd = 0, rkey = 0;
    MrKeys other;
    REQUIRE(m.t.b.engine->create_pd(kOther, &pd) == 0);
    REQUIRE(m.t.b.engine->reg_mr(kOther, pd, m.t.b.base(), 4096, kBindable, &other) == 0);
    uint32_t h = m.alloc(MwType::kType2, &rkey);
    CHECK(m.bind(h, MwType::kType2, rkey + 1, 0, 64, kRw, other.lkey).status ==
          WcStatus::kMwBindErr);
    CHECK(m.bc().mw_refused_wrong_owner == 1);
  }
  SUBCASE("no such window") {
    MwBench m;
    CHECK(m.bind(12345, MwType::kType2, 1, 8192, 64, kRw).status == WcStatus::kMwBindErr);
    CHECK(m.bc().mw_refused_no_window == 1);
  }
}

TEST_CASE("mw__type2_window_answers_only_to_its_qp") {
  // The table alone: the bench has one QP pair.
  MrTable mrs(16);
  MwTable mws(16);
  mrs.set_windows(&mws);
  FakeRandom rnd(3);
  MrKeys k;
  REQUIRE(mrs.reg(1, 1, 0x10000, 0x1000, kBindable, rnd, &k) == 0);
  uint32_t h = 0, rkey = 0;
  REQUIRE(mws.alloc(1, 1, MwType::kType2, rnd, mrs, &h, &rkey) == 0);
  BindRequest req;
  req.owner = 1;
  req.pdn = 1;
  req.qpn = 42;
  req.type = MwType::kType2;
  req.bind = {h, k.lkey, kRw, 0x10000, 0x100, MwType::kType2};
  req.new_rkey = rkey + 1;
  REQUIRE(mws.bind(req, mrs) == MwCheck::kOk);
  CHECK(mrs.check_remote(1, 1, 42, rkey + 1, 0x10000, 8, kAccessRemoteRead, nullptr) ==
        KeyCheck::kOk);
  CHECK(mrs.check_remote(1, 1, 43, rkey + 1, 0x10000, 8, kAccessRemoteRead, nullptr) ==
        KeyCheck::kWrongQp);
  CHECK(mrs.check_remote(1, 2, 42, rkey + 1, 0x10000, 8, kAccessRemoteRead, nullptr) ==
        KeyCheck::kWrongPd);
  CHECK(mrs.check_remote(2, 1, 42, rkey + 1, 0x10000, 8, kAccessRemoteRead, nullptr) ==
        KeyCheck::kWrongOwner);
  CHECK(mws.check_invalidate(1, 1, 43, rkey + 1, true) == MwCheck::kWrongQp);
  CHECK(mws.check_invalidate(1, 1, 43, rkey + 1, false) == MwCheck::kOk);  // LOCAL_INV: any QP of the PD
  // No MR key ever shares a live window's prefix.
  for (int i = 0; i < 200; ++i) {
    MrKeys x;
    REQUIRE(mrs.reg(1, 1, 0x10000, 0x10, 0, rnd, &x) == 0);
    CHECK((x.lkey >> 8) != (rkey >> 8));
    uint32_t pdn = 0;
    REQUIRE(mrs.dereg(1, x.lkey, &pdn) == 0);
  }
}

// mw2: a type 2 window is associated with the QP that bound it; when that
// QP is destroyed the window is unbound (as LOCAL_INV would): its rkey
// names nothing, its MR is free to deregister, and it can be bound again.
TEST_CASE("mw__destroying_its_qp_unbinds_a_type2_window") {
  MwBench m;
  uint32_t rkey = 0;
  uint32_t h = m.alloc(MwType::kType2, &rkey);
  REQUIRE(m.bind(h, MwType::kType2, rkey + 1, 8192, 4096, kRw).status == WcStatus::kSuccess);
  CHECK(m.t.b.engine->dereg_mr(Node::kOwner, m.wmr.lkey) == EBUSY);  // the window holds it
  REQUIRE(m.t.b.engine->destroy_qp(Node::kOwner, m.t.b.qpn) == 0);
  CHECK(m.bc().mw_invalidated_qp_destroyed == 1);
  CHECK(m.t.b.engine->dereg_mr(Node::kOwner, m.wmr.lkey) == 0);
  CHECK(m.t.b.engine->dealloc_mw(Node::kOwner, h) == 0);
}

TEST_CASE("mw__invalidate_qp_unbinds_only_that_qps_type2_windows") {
  MrTable mrs(16);
  MwTable mws(16);
  mrs.set_windows(&mws);
  FakeRandom rnd(5);
  MrKeys k;
  REQUIRE(mrs.reg(1, 1, 0x10000, 0x1000, kBindable, rnd, &k) == 0);
  auto bound = [&](MwType type, uint32_t qpn) {
    uint32_t h = 0, rkey = 0;
    REQUIRE(mws.alloc(1, 1, type, rnd, mrs, &h, &rkey) == 0);
    BindRequest req;
    req.owner = 1;
    req.pdn = 1;
    req.qpn = qpn;
    req.type = type;
    req.bind = {h, k.lkey, kRw, 0x10000, 0x100, type};
    req.new_rkey = rkey + 1;
    REQUIRE(mws.bind(req, mrs) == MwCheck::kOk);
    return rkey + 1;
  };
  uint32_t a1 = bound(MwType::kType2, 42), a2 = bound(MwType::kType2, 42);
  uint32_t other = bound(MwType::kType2, 43), t1 = bound(MwType::kType1, 42);
  CHECK(mws.invalidate_qp(7, mrs) == 0);
  CHECK(mws.invalidate_qp(42, mrs) == 2);
  for (uint32_t r : {a1, a2})
    CHECK(mrs.check_remote(1, 1, 42, r, 0x10000, 8, kAccessRemoteRead, nullptr) ==
          KeyCheck::kNoKey);
  CHECK(mrs.check_remote(1, 1, 43, other, 0x10000, 8, kAccessRemoteRead, nullptr) ==
        KeyCheck::kOk);
  CHECK(mrs.check_remote(1, 1, 42, t1, 0x10000, 8, kAccessRemoteRead, nullptr) == KeyCheck::kOk);
  CHECK(mws.invalidate_qp(42, mrs) == 0);  // nothing left bound to it
}

}  // namespace metaroce::fw::test
