// Error paths through the network: a peer that never answers exhausts
// retry_cnt (kRetryExcErr); a responder without receive WQEs answers RNR
// until rnr_retry is exhausted (kRnrRetryExcErr) or a WQE is posted.
#include <doctest/doctest.h>

#include "tests/transport/harness.h"

namespace metaroce::transport_test {
namespace {

struct Pair {
  explicit Pair(const simnet::ConnectOptions& co, uint64_t seed = 1) : net(seed) {
    simnet::LinkConfig l;
    topo = simnet::make_parallel(net, l, {l, l});
    simnet::EndpointOptions o;
    o.buf_bytes = 64 * 1024;
    REQUIRE(simnet::make_endpoint(*topo.a, o, &a) == 0);
    REQUIRE(simnet::make_endpoint(*topo.b, o, &b) == 0);
    REQUIRE(simnet::connect(a, b, co) == 0);
  }
  void post(fw::WrOpcode op, uint64_t id, uint32_t len) {
    fw::SendWr w = wr(id, op, a, a.buf, len);
    w.remote_addr = b.buf;
    w.rkey = b.mr.rkey;
    REQUIRE(a.host->engine().post_send(a.owner, a.qpn, w) == 0);
    a.host->kick();
  }
  simnet::Network net;
  simnet::Parallel topo;
  Endpoint a, b;
};

TEST_CASE("errors__silent_peer_exhausts_retry_cnt") {
  simnet::ConnectOptions co;
  co.timeout = 4;  // 4.096 us * 2^4 = 65.5 us
  co.retry_cnt = 3;
  Pair p(co);
  p.topo.b->mute_rx = true;
  p.post(fw::WrOpcode::kRdmaWrite, 1, 4096);
  p.post(fw::WrOpcode::kRdmaWrite, 2, 100);
  auto& cq = p.topo.a->cq(p.a.scq);
  REQUIRE(p.net.run_until(1'000'000'000, [&] { return cq.size() >= 2; }));
  CHECK(cq[0].wr_id == 1);
  CHECK(cq[0].status == fw::WcStatus::kRetryExcErr);
  CHECK(cq[1].wr_id == 2);
  CHECK(cq[1].status == fw::WcStatus::kWrFlushErr);
  const auto& c = p.topo.a->engine().counters();
  MESSAGE("retry exhausted at " << p.net.sched().now() / 1000 << " us after " << c.timeouts
          << " timeouts");
  CHECK(c.timeouts >= 3);
  CHECK(c.timeouts <= 4);
  // The QP is in the error state now: later WRs flush.
  fw::QpAttr attr;
  fw::QpInitAttr init;
  REQUIRE(p.topo.a->engine().query_qp(p.a.owner, p.a.qpn, &attr, &init) == 0);
  CHECK(attr.qp_state == fw::QpState::kErr);
}

TEST_CASE("errors__no_receive_posted_exhausts_rnr_retry") {
  simnet::ConnectOptions co;
  co.rnr_retry = 2;
  co.min_rnr_timer = 1;  // 0.01 ms
  Pair p(co);
  p.post(fw::WrOpcode::kSend, 7, 64);
  auto& cq = p.topo.a->cq(p.a.scq);
  REQUIRE(p.net.run_until(1'000'000'000, [&] { return cq.size() >= 1; }));
  CHECK(cq[0].wr_id == 7);
  CHECK(cq[0].status == fw::WcStatus::kRnrRetryExcErr);
  MESSAGE("RNR: responder sent " << p.topo.b->engine().counters().rx_nak_rnr
          << " RNR NAKs, requester counted " << p.topo.a->engine().counters().rnr_retries
          << " RNR retries");
  CHECK(p.topo.b->engine().counters().rx_nak_rnr >= 2);
  CHECK(p.topo.a->engine().counters().rnr_retries == 2);
  CHECK(p.topo.b->cq(p.b.rcq).empty());
}

TEST_CASE("errors__rnr_then_receive_posted_succeeds") {
  simnet::ConnectOptions co;
  co.rnr_retry = 7;  // infinite
  co.min_rnr_timer = 1;
  Pair p(co);
  p.post(fw::WrOpcode::kSend, 9, 300);
  p.net.run_until(200'000);
  CHECK(p.topo.a->cq(p.a.scq).empty());
  CHECK(p.topo.b->engine().counters().rx_nak_rnr >= 1);
  REQUIRE(p.b.host->engine().post_recv(p.b.owner, p.b.qpn, recv_wr(3, p.b, p.b.buf, 1024)) == 0);
  p.b.host->kick();
  auto& cq = p.topo.a->cq(p.a.scq);
  REQUIRE(p.net.run_until(1'000'000'000, [&] { return cq.size() >= 1; }));
  CHECK(cq[0].status == fw::WcStatus::kSuccess);
  auto& rcq = p.topo.b->cq(p.b.rcq);
  REQUIRE(rcq.size() == 1);
  CHECK(rcq[0].byte_len == 300);
}

}  // namespace
}  // namespace metaroce::transport_test
