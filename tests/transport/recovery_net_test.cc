// Loss and delay recovery of the whole transport over the simnet (issue 15,
// docs/engine.md §Loss and delay recovery): one RC connection streaming
// 64 KiB WRITEs or READs as perftest does (ib_write_bw and ib_read_bw keep
// 128 posted, TX depth 128; ib_read_bw has 16 READs outstanding at the wire,
// max_rd_atomic, the rest wait in the send queue), over a path with 1 % random
// loss in both directions, 1 ms of delay each way, or both. The engine runs
// with the daemon's congestion parameters (base RTT 200 us, 25 Gbit/s), the
// link at 10 Gbit/s. Goodput is measured in virtual time, so the figures are
// exact and repeatable; the retained ratio is impaired goodput over the
// same flow's goodput on the clean, short path, as tools/bench computes it.
#include <doctest/doctest.h>

#include <sstream>

#include "tests/transport/harness.h"

namespace metaroce::transport_test {
namespace {

constexpr uint64_t kLinkBps = 4'000'000'000;
constexpr uint32_t kChunk = 64 * 1024;

struct Result {
  double gbps = 0;
  uint64_t retx = 0, timeouts = 0, tlps = 0, drops = 0, dups = 0, spurious = 0;
  bool failed = false, done = false;
};

// Moves `total` bytes with `depth` operations of kChunk outstanding.
Result stream(fw::WrOpcode op, uint32_t depth, double loss, simnet::Time delay_ns,
              uint64_t total, uint64_t seed = 1) {
  simnet::Network net(seed);
  fw::EngineConfig cfg;
  cfg.base_rtt = 200'000;
  // metaroced's defaults (--base-rtt-us 200, --link-gbps 25)
  cfg.link_bps = 25'000'000'000;
  cfg.port.link_mtu = 9000;  // --mtu 9000: RDMA MTU 4096
  simnet::LinkConfig edge;
  edge.bps = kLinkBps;
  edge.delay_ns = 1'000;
  edge.queue_bytes = 4'000'000;
  edge.ecn_bytes = 0;
  simnet::LinkConfig core = edge;
  core.delay_ns = delay_ns;
  core.queue_bytes = 64'000'000;  // the impairer's delay line holds what is in flight
  core.imp.loss = loss;
  auto topo = simnet::make_parallel(net, edge, {core}, cfg);
  simnet::EndpointOptions o;
  o.buf_bytes = kChunk;
  o.cap.max_send_wr = 256;
  Endpoint tx, rx;
  REQUIRE(simnet::make_endpoint(*topo.b, o, &tx) == 0);
  o.owner = 2;
  REQUIRE(simnet::make_endpoint(*topo.a, o, &rx) == 0);
  simnet::ConnectOptions co;
  co.path_mtu = 4096;
  REQUIRE(simnet::connect(tx, rx, co) == 0);

  Result r;
  uint64_t posted = 0, completed = 0;
  uint32_t outstanding = 0;
  simnet::Time start = net.sched().now(), finish = 0;
  auto drive = [&] {
    auto& cq = tx.host->cq(tx.scq);
    while (!cq.empty()) {
      if (cq.front().status != fw::WcStatus::kSuccess) r.failed = true;
      cq.pop_front();
      completed += kChunk;
      --outstanding;
    }
    bool any = false;
    while (outstanding < depth && posted < total) {
      fw::SendWr w = wr(posted / kChunk, op, tx, tx.buf, kChunk);
      w.remote_addr = rx.buf;
      w.rkey = rx.mr.rkey;
      if (tx.host->engine().post_send(tx.owner, tx.qpn, w) != 0) r.failed = true;
      posted += kChunk;
      ++outstanding;
      any = true;
    }
    if (any) tx.host->kick();
    if (completed >= total && finish == 0) finish = net.sched().now();
  };
  std::function<void()> poll = [&] {
    drive();
    if (finish == 0 && !r.failed) net.sched().after(2'000, poll);
  };
  poll();
  r.done = net.run_until(start + 20'000'000'000, [&] { return finish != 0 || r.failed; });
  r.done = r.done && finish != 0 && !r.failed;
  if (finish) r.gbps = static_cast<double>(total) * 8 / static_cast<double>(finish - start);
  const auto& c = tx.host->engine().counters();
  r.retx = c.tx_retransmits;
  r.timeouts = c.timeouts;
  r.tlps = c.tail_loss_probes + c.read_tail_probes;
  r.dups = rx.host->engine().counters().rx_drop_duplicate;
  r.spurious = c.spurious_timeouts;
  for (auto* l : topo.all) r.drops += l->stats().drops_loss + l->stats().drops_queue;
  return r;
}

std::string describe(const char* what, const Result& r, double base) {
  std::ostringstream s;
  s << what << ": " << r.gbps << " Gbit/s, retained " << r.gbps / base << ", retransmits "
    << r.retx << ", timeouts " << r.timeouts << ", probes " << r.tlps << ", drops " << r.drops
    << ", duplicates at the responder " << r.dups << ", spurious timeouts " << r.spurious;
  return s.str();
}

struct Goals {
  double loss, delay, both;
};

void scenario(fw::WrOpcode op, uint32_t depth, const std::string& name, const Goals& g) {
  const uint64_t total = 256ull << 20;  // 256 MiB: ~0.5 s at 4 Gbit/s
  Result clean = stream(op, depth, 0, 1'000, total);
  REQUIRE(clean.done);
  Result delay = stream(op, depth, 0, 1'000'000, total);
  Result loss = stream(op, depth, 0.01, 1'000, total);
  Result both = stream(op, depth, 0.01, 1'000'000, total);
  MESSAGE(name << " clean: " << clean.gbps << " Gbit/s");
  MESSAGE(describe("  delay 1 ms", delay, clean.gbps));
  MESSAGE(describe("  loss 1 %", loss, clean.gbps));
  MESSAGE(describe("  loss 1 % + delay 1 ms", both, clean.gbps));
  CHECK(delay.done);
  CHECK(loss.done);
  CHECK(both.done);
  // Nothing is lost on the delayed path: the RTO that fires before the
  // first ACK can return (1 ms initial RTO, 2 ms RTT) resends one packet,
  // not the first window (151 packets before).
  CHECK(delay.retx <= 4);
  CHECK(delay.gbps / clean.gbps >= g.delay);
  CHECK(loss.gbps / clean.gbps >= g.loss);
  CHECK(both.gbps / clean.gbps >= g.both);
}

// Issue 15's goals are 0.95 (write) and 0.90 (read) in every column. Met
// here: loss 1 % for WRITE and READ. Before session 7 (rec): write 0.93 /
// 0.99 / 0.18, read 0.98 / 0.88 / 0.36 (delay / loss / both); session 7:
// write loss + delay 0.41; session 8 (echo-named delivery beyond the SACK
// bitmap): 0.90. Session 9: READs as ib_read_bw posts them (128, not 16:
// the 16 outstanding then no longer wait for in-order completions) 0.99 /
// 0.92 / 0.59, then the reorder window and the READ hole check follow the
// paths' spread and RTT variation instead of a quarter of a 2 ms RTT: write
// 0.93 / 0.99 / 0.91, read 0.99 / 0.95 / 0.73. The floors below keep what
// was won (docs/benchmark.md, "Loss and delay recovery").
TEST_CASE("recovery_net__write_64k_keeps_goodput_under_loss_and_delay") {
  scenario(fw::WrOpcode::kRdmaWrite, 128, "ib_write_bw-like, 128 x 64 KiB", {0.95, 0.90, 0.85});
}

TEST_CASE("recovery_net__read_64k_keeps_goodput_under_loss_and_delay") {
  scenario(fw::WrOpcode::kRdmaRead, 128, "ib_read_bw-like, 128 x 64 KiB, 16 outstanding", {0.92, 0.95, 0.63});
}

}  // namespace
}  // namespace metaroce::transport_test
