// Per-QP memory (docs/engine.md §Memory bounds): a QP holds READ and atomic
// state only once it serves a READ or an atomic, so a fabric of millions of
// WRITE-only QPs (tests/fabric, docs/evaluation.md §7) fits in memory.
#include <doctest/doctest.h>

#include <cstring>

#include "firmware-model/engine/qp.h"
#include "firmware-model/engine/testing/fakes.h"

namespace metaroce::fw::test {

namespace {
constexpr uint32_t kAll =
    kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead | kAccessRemoteAtomic;

uint64_t used_bytes(Node& n) {
  uint64_t used = 0, bound = 0;
  REQUIRE(n.engine->qp_memory(n.qpn, &used, &bound) == 0);
  CHECK(used <= bound);
  return used;
}

void connect_small(Bench& t) {
  t.a.setup(1 << 16, kAll, {1, 1, 1, 1, 0});
  t.b.setup(1 << 16, kAll, {1, 1, 1, 1, 0});
  t.a.connect(t.b.ip, t.b.qpn, kAll);
  t.b.connect(t.a.ip, t.a.qpn, kAll);
}

bool one_send_completion(Bench& t) {
  std::vector<Completion> sc;
  t.run([&] {
    for (auto& c : t.a.send_cq()) sc.push_back(c);
    return !sc.empty();
  });
  return sc.size() == 1 && sc[0].status == WcStatus::kSuccess;
}
}  // namespace

TEST_CASE("lazy_array__reads_defaults_until_written_and_frees_on_reset") {
  LazyArray<AtomicResult, 4> a;
  const auto& ca = a;
  CHECK(!ca[3].valid);
  for (const AtomicResult& r : ca) CHECK(!r.valid);
  CHECK(!a.allocated());
  CHECK(a.heap_bytes() == 0);
  a[2].valid = true;
  CHECK(a.allocated());
  CHECK(a.heap_bytes() == 4 * sizeof(AtomicResult));
  CHECK(ca[2].valid);
  a = {};
  CHECK(!a.allocated());
  CHECK(!ca[2].valid);
}

// Before: the held-request, atomic-result and READ-job arrays lived in Qp
// (21 KB) and the scoreboard started at 64 entries (4.3 KB): 26 KB a QP.
TEST_CASE("qp_memory__a_write_only_qp_holds_no_read_or_atomic_state") {
  Bench t;
  connect_small(t);
  CHECK(used_bytes(t.a) <= 4096);
  CHECK(used_bytes(t.b) <= 4096);
  SendWr w = t.a.wr(WrOpcode::kRdmaWrite, 1, 0, 8000);
  w.remote_addr = t.b.base() + 10000;
  w.rkey = t.b.mr.rkey;
  REQUIRE(t.a.post_send(w) == 0);
  REQUIRE(one_send_completion(t));
  CHECK(std::memcmp(t.a.mem.data(), t.b.mem.data() + 10000, 8000) == 0);
  CHECK(used_bytes(t.b) <= 4096);  // the responder placed a WRITE: no READ state
}

TEST_CASE("qp_memory__reads_and_atomics_allocate_their_state_when_served") {
  Bench t;
  connect_small(t);
  const uint64_t before = used_bytes(t.b);
  std::memset(t.b.mem.data() + 100, 0x5A, 1000);
  SendWr r = t.a.wr(WrOpcode::kRdmaRead, 1, 0, 1000);
  r.remote_addr = t.b.base() + 100;
  r.rkey = t.b.mr.rkey;
  REQUIRE(t.a.post_send(r) == 0);
  REQUIRE(one_send_completion(t));
  CHECK(t.a.mem[999] == 0x5A);
  const uint64_t after_read = used_bytes(t.b);
  CHECK(after_read >= before + ReadQueue::kMaxHeapBytes);
  SendWr f = t.a.wr(WrOpcode::kAtomicFetchAdd, 2, 2000, 8);
  f.remote_addr = t.b.base() + 4096;
  f.rkey = t.b.mr.rkey;
  f.compare_add = 3;
  REQUIRE(t.a.post_send(f) == 0);
  REQUIRE(one_send_completion(t));
  CHECK(t.b.mem[4096] == 3);
  CHECK(used_bytes(t.b) >= after_read + LazyArray<AtomicResult, kAtomicCache>::kBytes);
}

}  // namespace metaroce::fw::test
