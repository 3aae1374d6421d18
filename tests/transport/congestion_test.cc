// Congestion behaviour of the whole transport over the simnet
// (docs/congestion.md §6): incast of 16 senders into one receiver, and a
// long-lived flow sharing a bottleneck with flows that join later. Prints
// queue, utilization and fairness figures with MESSAGE().
#include <doctest/doctest.h>

#include <functional>
#include <map>
#include <memory>
#include <sstream>

#include "tests/simnet/frame_util.h"
#include "tests/transport/harness.h"

namespace metaroce::transport_test {
namespace {

constexpr uint64_t kLinkBps = 25'000'000'000;

simnet::LinkConfig edge_link() {
  simnet::LinkConfig c;
  c.bps = kLinkBps;
  c.delay_ns = 1'000;
  c.queue_bytes = 4'000'000;  // deep buffer: we measure, the switch rarely drops
  c.ecn_bytes = 60'000;
  return c;
}

// One sender -> receiver RC connection with a driver that keeps `depth`
// WRITEs of `chunk` bytes outstanding until `total` bytes were posted
// (total 0 = forever).
struct Flow {
  Endpoint tx, rx;
  uint64_t chunk = 64 * 1024, total = 0, posted = 0, completed = 0;
  uint32_t depth = 8, outstanding = 0;
  simnet::Time start = 0, finish = 0;
  bool failed = false;

  void post(uint64_t id) {
    fw::SendWr w = wr(id, fw::WrOpcode::kRdmaWrite, tx, tx.buf, static_cast<uint32_t>(chunk));
    w.remote_addr = rx.buf;
    w.rkey = rx.mr.rkey;
    if (tx.host->engine().post_send(tx.owner, tx.qpn, w) != 0) failed = true;
    posted += chunk;
    ++outstanding;
  }
  void drive(simnet::Time now) {
    auto& cq = tx.host->cq(tx.scq);
    while (!cq.empty()) {
      if (cq.front().status != fw::WcStatus::kSuccess) failed = true;
      cq.pop_front();
      completed += chunk;
      --outstanding;
    }
    bool posted_any = false;
    while (outstanding < depth && (total == 0 || posted < total)) {
      post(posted / chunk);
      posted_any = true;
    }
    if (posted_any) tx.host->kick();
    if (total && completed >= total && finish == 0) finish = now;
  }
  bool done() const { return total && completed >= total; }
};

struct Bench {
  explicit Bench(uint32_t n, uint64_t seed = 1) : net(seed) {
    topo = simnet::make_incast(net, n, edge_link(), edge_link());
    simnet::EndpointOptions o;
    o.buf_bytes = 64 * 1024;
    o.cap.max_send_wr = 64;
    for (uint32_t i = 0; i < n; ++i) {
      auto f = std::make_unique<Flow>();
      o.owner = i + 1;
      REQUIRE(simnet::make_endpoint(*topo.senders[i], o, &f->tx) == 0);
      REQUIRE(simnet::make_endpoint(*topo.receiver, o, &f->rx) == 0);
      REQUIRE(simnet::connect(f->tx, f->rx) == 0);
      flows.push_back(std::move(f));
    }
    topo.bottleneck->set_tap([this](const simnet::Frame& fr) {
      if (auto info = simnet::inspect_frame(fr)) bytes_from[info->src_ip.bytes[15]] += fr.size();
    });
  }
  // Drives all flows every `period` ns from now on.
  void start_polling(simnet::Time period = 2'000) {
    net.sched().after(period, [this, period] {
      for (auto& f : flows) {
        if (f->start <= net.sched().now()) f->drive(net.sched().now());
      }
      start_polling(period);
    });
  }
  uint64_t from(uint32_t i) { return bytes_from[topo.senders[i]->ip().bytes[15]]; }

  simnet::Network net;
  simnet::Incast topo;
  std::vector<std::unique_ptr<Flow>> flows;
  std::map<uint8_t, uint64_t> bytes_from;  // bottleneck bytes by sender (last IP byte)
};

TEST_CASE("congestion__incast_16_to_1_bounded_queue_full_utilization") {
  const uint32_t n = 16;
  const uint64_t per_flow = 2 * 1024 * 1024;
  Bench b(n);
  for (auto& f : b.flows) f->total = per_flow;
  b.start_polling();
  const bool done = b.net.run_until(200'000'000, [&] {
    for (auto& f : b.flows) if (!f->done()) return false;
    return true;
  });
  REQUIRE(done);
  simnet::Time last = 0;
  std::vector<double> rates;
  for (auto& f : b.flows) {
    CHECK(!f->failed);
    last = std::max(last, f->finish);
    rates.push_back(static_cast<double>(per_flow) / static_cast<double>(f->finish));
  }
  const auto& st = b.topo.bottleneck->stats();
  const double payload = static_cast<double>(n * per_flow);
  const double util = payload * 8e9 / (static_cast<double>(kLinkBps) * static_cast<double>(last));
  const double wire_util = static_cast<double>(st.busy_ns) / static_cast<double>(last);
  const double avg_q = b.topo.bottleneck->avg_queue_bytes(last);
  const double fair = jain(rates);
  uint64_t retx = 0, timeouts = 0;
  for (auto* h : b.topo.senders) {
    retx += h->engine().counters().tx_retransmits;
    timeouts += h->engine().counters().timeouts;
  }
  MESSAGE("incast 16->1, 2 MiB each: completion " << last / 1000 << " us, goodput utilization "
          << util << ", wire utilization " << wire_util << ", bottleneck queue max "
          << st.max_queue_bytes << " B avg " << avg_q << " B, drops " << st.drops_queue
          << ", CE marks " << st.ce_marked << ", retransmits " << retx << ", timeouts " << timeouts
          << ", Jain(per-flow rate) " << fair);
  CHECK(util > 0.8);
  CHECK(st.max_queue_bytes < 1'000'000);
  CHECK(avg_q < 300'000);
  CHECK(st.drops_queue == 0);
  CHECK(fair > 0.9);
}

TEST_CASE("congestion__long_lived_flow_shares_bottleneck_fairly") {
  const uint32_t n = 4;
  Bench b(n);
  const simnet::Time join = 2'000'000, measure_from = 8'000'000, measure_to = 20'000'000;
  for (uint32_t i = 1; i < n; ++i) b.flows[i]->start = join;
  b.start_polling();
  b.net.run_until(measure_from);
  b.topo.bottleneck->reset_stats();
  std::vector<uint64_t> base;
  for (uint32_t i = 0; i < n; ++i) base.push_back(b.from(i));
  b.net.run_until(measure_to);
  std::vector<double> got;
  double sum = 0;
  for (uint32_t i = 0; i < n; ++i) {
    got.push_back(static_cast<double>(b.from(i) - base[i]));
    sum += got.back();
    CHECK(!b.flows[i]->failed);
  }
  const double window = static_cast<double>(measure_to - measure_from);
  const double util = sum * 8e9 / (static_cast<double>(kLinkBps) * window);
  const auto& st = b.topo.bottleneck->stats();
  const double avg_q = b.topo.bottleneck->avg_queue_bytes(measure_to);
  const double fair = jain(got);
  std::ostringstream shares;
  for (double g : got) shares << " " << g * 8 / window << "G";
  MESSAGE("long-lived + 3 joiners on a 25G bottleneck, window 8-20 ms: utilization " << util
          << ", queue max " << st.max_queue_bytes << " B avg " << avg_q << " B, drops "
          << st.drops_queue << ", CE marks " << st.ce_marked << ", Jain " << fair
          << ", per-flow" << shares.str());
  CHECK(util > 0.85);
  CHECK(fair >= 0.9);
  CHECK(st.max_queue_bytes < 1'000'000);
}

}  // namespace
}  // namespace metaroce::transport_test
