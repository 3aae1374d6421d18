// The fabric simulator end to end: the unchanged MetaRoCE engine and the
// RoCEv2 baselines on a 16-host, 4-leaf, 4-spine, 100 Gb/s leaf-spine.
// Every run is seeded and deterministic in simulated time; nothing here
// depends on wall-clock speed.
#include <array>
#include <set>
#include <sstream>

#include "doctest/doctest.h"
#include "firmware-model/ns3/roce_nic.h"
#include "firmware-model/ns3/scenario.h"
#include "firmware-model/ns3/wire.h"
#include "proto/packet.h"

namespace fab = metaroce::fabric;

namespace {

fab::Scenario scenario(const std::string& workload, const std::string& transport, uint64_t bytes) {
  fab::Scenario s;
  s.name = workload + "-" + transport;
  s.transport = transport;
  s.topo.hosts = s.work.hosts = 16;
  s.topo.hosts_per_leaf = 4;  // 4 leaves x 4 spines, full bisection
  s.work.kind = workload;
  s.work.bytes = bytes;
  fab::apply_transport_defaults(s);
  REQUIRE(fab::check(s) == "");
  return s;
}

void require_byte_exact(const fab::RunResult& r) {
  INFO("error: " << r.error << " verify: " << r.verify_error);
  REQUIRE(r.completed);
  REQUIRE(r.verify_error == "");
  CHECK(r.nic.errors == 0);
}

std::vector<uint8_t> frame(uint16_t src_port, uint8_t ecn) {
  std::vector<uint8_t> f(fab::kIpv4UdpHeaders + 32, 0);
  fab::FlowKey k{fab::host_ip(1), fab::host_ip(9), src_port, 4796, 17, ecn};
  fab::build_ipv4_udp(f, k, 3, 32);
  return f;
}

}  // namespace

TEST_CASE("wire__mark_ce_sets_ce_and_keeps_the_checksum_valid") {
  auto f = frame(0xC001, 0b10);
  REQUIRE(fab::mark_ce(f));
  auto k = fab::parse_ipv4_udp(f);
  REQUIRE(k);
  CHECK(k->ecn == 3);
  CHECK(fab::ipv4_checksum(std::span(f).subspan(fab::kEthLen, 20)) == 0);
  auto not_ect = frame(0xC001, 0);
  CHECK_FALSE(fab::mark_ce(not_ect));
}

TEST_CASE("wire__pfc_frame_round_trip") {
  std::array<uint8_t, fab::kPfcFrameLen> f{};
  fab::build_pfc(f, 0xFFFF);
  CHECK(fab::parse_pfc(f) == 0xFFFF);
  fab::build_pfc(f, 0);
  CHECK(fab::parse_pfc(f) == 0);
  CHECK_FALSE(fab::parse_pfc(frame(1, 2)));
}

TEST_CASE("wire__ecmp_hash_spreads_source_ports_over_every_member") {
  std::set<uint32_t> members;
  for (uint16_t p = 0; p < 64; ++p) {
    members.insert(fab::flow_hash(*fab::parse_ipv4_udp(frame(0xC000 | p, 2)), 7) % 4);
  }
  CHECK(members.size() == 4);
  // Same tuple, same path: per-flow consistency.
  auto k = *fab::parse_ipv4_udp(frame(0xC123, 2));
  CHECK(fab::flow_hash(k, 7) == fab::flow_hash(k, 7));
}

TEST_CASE("pattern__word_fill_matches_the_byte_definition_at_any_offset") {
  for (uint64_t first : {0, 3, 8, 13}) {
    std::vector<uint8_t> v(37);
    fab::fill_pattern(v, 5, first, 9);
    for (uint64_t i = 0; i < v.size(); ++i) REQUIRE(v[i] == fab::pattern(5, first + i, 9));
  }
  CHECK(fab::pattern(5, 0, 9) != fab::pattern(6, 0, 9));  // sources differ (for this seed)
}

// Hostile frames at the RoCEv2 baseline NIC: each cut of a data frame and a
// frame for a QP that does not exist is dropped and counted by reason.
TEST_CASE("roce_nic__malformed_and_unknown_frames_are_counted_drops") {
  struct Sink : fab::NicHandler {
    int recvs = 0;
    void on_recv(uint32_t, uint32_t, uint32_t, uint32_t) override { ++recvs; }
    void on_send_done(uint32_t, uint32_t, uint64_t, bool) override {}
  } sink;
  auto a = ns3::CreateObject<ns3::Node>(), b = ns3::CreateObject<ns3::Node>();
  auto [da, db] = fab::make_link(a, b, 100'000'000'000, 1000);
  fab::RoceNic nic(0, da, fab::HostMemory(1 << 16), fab::RoceConfig{}, &sink);
  const uint32_t conn = nic.open(1, fab::ConnUse::kBoth);
  nic.connect(conn, {1, 0x100, 1});
  std::vector<uint8_t> f(fab::kIpv4UdpHeaders + 12 + 16 + 4 + 64 + 4, 0);
  fab::FlowKey k{fab::host_ip(1), fab::host_ip(0), 0xC000, 4791, 17, 2};
  fab::build_ipv4_udp(f, k, 3, f.size() - fab::kIpv4UdpHeaders);
  uint8_t* bth = f.data() + fab::kIpv4UdpHeaders;
  bth[0] = 0x0B;                 // data, last, with immediate
  bth[7] = 0x00, bth[6] = 0x01;  // dest QP 0x100
  for (size_t cut = fab::kIpv4UdpHeaders; cut < fab::kIpv4UdpHeaders + 36; ++cut) {
    nic.on_frame(0, ns3::Create<ns3::Packet>(f.data(), cut));
  }
  bth[6] = 0x02;  // dest QP 0x200: not open
  nic.on_frame(0, ns3::Create<ns3::Packet>(f.data(), f.size()));
  const std::string d = nic.stats().detail;
  INFO(d);
  CHECK(d.find("rx_drop_malformed=36") != std::string::npos);
  CHECK(d.find("rx_drop_unknown_qp=1") != std::string::npos);
  CHECK(sink.recvs == 0);
  ns3::Simulator::Destroy();
}

TEST_CASE("metaroce__every_collective_completes_byte_exact") {
  for (std::string w : {"alltoall", "allreduce-ring", "allreduce-hd", "incast", "permutation"}) {
    CAPTURE(w);
    auto s = scenario(w, "metaroce", 256 * 1024);
    require_byte_exact(fab::run(s));
  }
}

TEST_CASE("metaroce__alltoall_within_1_2x_of_ideal") {
  auto s = scenario("alltoall", "metaroce", 256 * 1024);
  const auto r = fab::run(s);
  require_byte_exact(r);
  INFO("completion " << r.completion_us << " us, ideal " << r.ideal_us << " us");
  CHECK(r.ratio <= 1.2);
  CHECK(r.ratio >= 1.0);  // the bound is a bound
}

// hal.h tx_ready: with a bounded NIC queue the engine holds what does not
// fit, so the NIC never holds much more than its room (plus the one packet a
// QP may add after the check), where the unbounded queue takes every QP's
// first window at once.
TEST_CASE("metaroce__backpressured_nic_queue_stays_bounded_and_completes") {
  auto s = scenario("alltoall", "metaroce", 256 * 1024);
  const auto unbounded = fab::run(s);
  s.tx_room_bytes = 16 * 1024;
  const auto r = fab::run(s);
  require_byte_exact(r);
  INFO("nic queue max " << r.nic.nic_queue_max_bytes << " unbounded " << unbounded.nic.nic_queue_max_bytes);
  CHECK(r.nic.nic_queue_max_bytes < 16 * 1024 + 2 * 4200 + 4096);  // room + a packet + ACKs
  CHECK(unbounded.nic.nic_queue_max_bytes > 4 * 16 * 1024);
}

TEST_CASE("metaroce__link_failure_mid_collective_still_completes") {
  auto s = scenario("alltoall", "metaroce", 256 * 1024);
  s.fail_link = 0;        // leaf0-spine0
  s.fail_at_ns = 50'000;  // well inside the ~360 us collective
  const auto r = fab::run(s);
  require_byte_exact(r);
  CHECK(r.drops_link_down > 0);  // the failure really cost frames
  CHECK(r.nic.retransmits > 0);
}

// Routes converge after a failure: every switch stops using next hops that
// lead to the dead link (not only its two ends), so a RoCEv2 QP pinned to
// a path through it is rehashed onto a live path and recovers.
TEST_CASE("roce_pfc__link_failure_converges_and_completes") {
  auto s = scenario("alltoall", "roce-pfc", 256 * 1024);
  s.fail_link = 0;
  s.fail_at_ns = 50'000;
  const auto r = fab::run(s);
  require_byte_exact(r);
  CHECK(r.drops_link_down > 0);
  CHECK(r.nic.retransmits > 0);
}

TEST_CASE("roce_pfc__ring_allreduce_completes_byte_exact") {
  require_byte_exact(fab::run(scenario("allreduce-ring", "roce-pfc", 256 * 1024)));
}

TEST_CASE("roce_pfc__completes_lossless_with_pause_frames") {
  for (std::string w : {"alltoall", "incast"}) {
    CAPTURE(w);
    auto s = scenario(w, "roce-pfc", 256 * 1024);
    const auto r = fab::run(s);
    require_byte_exact(r);
    CHECK(r.pfc_pause_frames > 0);
    CHECK(r.pfc_paused_us > 0);
    CHECK(r.drops == 0);
    CHECK(r.nic.retransmits == 0);
  }
}

TEST_CASE("roce_lossy__recovers_by_go_back_n") {
  auto s = scenario("incast", "roce-lossy", 256 * 1024);
  s.sw.port_buffer_bytes = 200'000;  // shallow: the incast overflows it
  const auto r = fab::run(s);
  require_byte_exact(r);
  CHECK(r.drops_buffer > 0);
  CHECK(r.nic.naks_sent > 0);
  CHECK(r.nic.retransmits > r.drops);  // go-back-N resends more than was lost
  CHECK(r.pfc_pause_frames == 0);
}

// Trimming (docs/protocol.md §3.8): the switch cuts what does not fit to
// headers, the engine NACKs them TRIMMED and the sender resends at once, so
// the incast into shallow buffers loses nothing and no timer recovers it.
TEST_CASE("metaroce_trim__incast_trims_instead_of_dropping") {
  auto s = scenario("incast", "metaroce", 256 * 1024);
  s.sw.port_buffer_bytes = 200'000;  // shallow: the incast overflows it
  const auto dropping = fab::run(s);
  require_byte_exact(dropping);
  s.sw.trim = true;
  const auto r = fab::run(s);
  require_byte_exact(r);
  INFO("trimmed " << r.trimmed << " drops " << r.drops << " (without trimming " << dropping.drops << ")");
  CHECK(dropping.drops_buffer > 0);
  CHECK(r.trimmed > 0);
  CHECK(r.drops == 0);
  CHECK(r.nic.timeouts == 0);
  CHECK(r.nic.rx_drop_parse == 0);  // every trimmed header was recognised and NACKed
  CHECK(r.nic.retransmits >= r.trimmed);
}

// The switch's trimmed frame is what the engine's parser recognises.
TEST_CASE("wire__trimmed_frame_is_what_the_receiver_parses_as_trimmed") {
  metaroce::proto::FrameHeaders h;
  h.src_ip = metaroce::proto::IpAddr::v4(fab::host_ip(1));
  h.dst_ip = metaroce::proto::IpAddr::v4(fab::host_ip(9));
  metaroce::proto::Packet p;
  p.mbth.opcode = metaroce::proto::Opcode::kWriteImm;
  p.mbth.psn = 42;
  p.reth = {0x1000, 7, 4096};
  std::vector<uint8_t> payload(4096, 0x5A);
  p.payload = payload;
  std::vector<uint8_t> f(metaroce::proto::encap_length(h) + metaroce::proto::transport_length(p));
  REQUIRE(metaroce::proto::build_frame(h, p, f) == f.size());
  auto cut = fab::trim_frame(f, fab::kIpv4UdpHeaders + metaroce::proto::kMbthLen);
  REQUIRE(cut.size() == fab::kIpv4UdpHeaders + metaroce::proto::kMbthLen);
  CHECK(fab::ipv4_checksum(std::span<const uint8_t>(cut).subspan(fab::kEthLen, 20)) == 0);
  auto t = metaroce::proto::parse_trimmed_frame(cut, fab::kTrimmedDscp);
  REQUIRE(t);
  CHECK(t.value().mbth.psn == 42);
  CHECK(t.value().headers.ecn == 0b10);  // ECN kept
  std::vector<uint8_t> roce(fab::kIpv4UdpHeaders + 64, 0);
  fab::build_ipv4_udp(roce, fab::FlowKey{fab::host_ip(1), fab::host_ip(9), 0xC001, 4791, 17, 2}, 3, 64);
  CHECK(fab::trim_frame(roce, 40).empty());  // RoCEv2 (UDP 4791): never trimmed
}

TEST_CASE("fat_tree__alltoall_crosses_three_tiers_byte_exact") {
  auto s = scenario("alltoall", "metaroce", 128 * 1024);
  s.topo.kind = fab::TopologyConfig::Kind::kFatTree;  // k = 4: 16 hosts, 20 switches
  REQUIRE(fab::check(s) == "");
  const auto r = fab::run(s);
  require_byte_exact(r);
  bool core_used = false;
  for (const auto& t : r.tiers) core_used |= t.name == "core-down" && t.max_queue_bytes > 0;
  CHECK(core_used);
}

TEST_CASE("topology__rejects_what_it_cannot_build") {
  fab::TopologyConfig t;
  t.hosts = 20;
  t.kind = fab::TopologyConfig::Kind::kFatTree;
  CHECK(fab::check(t).find("k^3/4") != std::string::npos);
  t.kind = fab::TopologyConfig::Kind::kLeafSpine;
  t.hosts_per_leaf = 8;
  CHECK(fab::check(t).find("do not fill leaves") != std::string::npos);
}

TEST_CASE("scenario__a_link_index_beyond_the_fabric_is_an_error_not_a_crash") {
  auto s = scenario("alltoall", "metaroce", 4096);
  s.fail_link = 999;
  const auto r = fab::run(s);
  CHECK_FALSE(r.ran);
  CHECK_FALSE(r.completed);
  CHECK(r.error == "fail-link 999: the fabric has 16 switch links (see --list-links)");
}

TEST_CASE("scenario__check_names_what_is_wrong") {
  auto s = scenario("alltoall", "metaroce", 4096);
  s.fail_at_ns = -1;
  CHECK(fab::check(s) == "fail-at must not be negative");
  s = scenario("alltoall", "metaroce", 4096);
  s.work.qps_per_pair = 1000;
  CHECK(fab::check(s) == "at most 64 QPs per pair");
  s = scenario("alltoall", "metaroce", 4096);
  s.congestion = "bbr";
  CHECK(fab::check(s).find("no congestion control 'bbr'") != std::string::npos);
  s = scenario("alltoall", "metaroce", 4096);
  s.transport = "roce";
  CHECK(fab::check(s).find("unknown transport 'roce'") == 0);
  s = scenario("alltoall", "metaroce", 4096);
  s.work.kind = "allreduce-hd";
  s.topo.hosts = s.work.hosts = 24;
  s.topo.hosts_per_leaf = 4;
  CHECK(fab::check(s) == "halving-doubling needs a power-of-two host count");
}

TEST_CASE("runs_are_deterministic") {
  auto s = scenario("alltoall", "metaroce", 64 * 1024);
  const auto a = fab::run(s), b = fab::run(s);
  CHECK(a.completion_us == b.completion_us);
  CHECK(a.events == b.events);
  s.scheduler = "Heap";  // the event order (time, then insertion) is the scheduler's contract
  const auto h = fab::run(s);
  CHECK(h.completion_us == a.completion_us);
  CHECK(h.events == a.events);
}

// Several jobs on one fabric (WorkloadConfig::jobs): each is routed its own
// completions, verified on its own hosts and reports its own completion.
TEST_CASE("jobs__concurrent_alltoalls_each_complete_byte_exact_with_their_own_ratio") {
  for (bool interleaved : {false, true}) {
    CAPTURE(interleaved);
    auto s = scenario("alltoall", "metaroce", 64 * 1024);
    s.work.jobs = 2;
    s.work.interleaved = interleaved;
    REQUIRE(fab::check(s) == "");
    const auto r = fab::run(s);
    require_byte_exact(r);
    REQUIRE(r.jobs.size() == 2);
    for (const fab::JobSummary& j : r.jobs) {
      CHECK(j.kind == "alltoall");
      CHECK(j.hosts == 8);
      CHECK(j.finished);
      CHECK(j.messages == 8 * 7);  // every ordered pair of the job's own hosts
      CHECK(j.bytes == 8 * 7 * 64 * 1024);
      CHECK(j.ratio >= 1.0);
    }
    CHECK(r.flows == 2 * 8 * 7);
  }
}

// Background traffic (WorkloadConfig::background) shares the links with the
// job, so the job takes longer; runs stay deterministic, the background's
// bytes are verified at its receivers too.
TEST_CASE("background__slows_a_ring_allreduce_and_stays_deterministic") {
  auto alone = scenario("allreduce-ring", "metaroce", 1 << 20);
  auto busy = alone;
  busy.work.background = 0.5;
  REQUIRE(fab::check(busy) == "");
  const auto a = fab::run(alone), b = fab::run(busy), b2 = fab::run(busy);
  require_byte_exact(a);
  require_byte_exact(b);
  REQUIRE(b.jobs.size() == 2);
  CHECK(b.jobs[1].kind == "background");
  CHECK(b.jobs[1].messages > 16);  // more than one per host arrived
  CHECK(b.jobs[1].posted >= b.jobs[1].messages);
  INFO("alone " << a.completion_us << " us, with background " << b.completion_us << " us");
  CHECK(b.completion_us > 1.1 * a.completion_us);
  CHECK(b.flows == a.flows);  // the statistics are the job's messages only
  CHECK(b2.completion_us == b.completion_us);
  CHECK(b2.events == b.events);
  CHECK(b2.jobs[1].messages == b.jobs[1].messages);
}

TEST_CASE("scenario__rejects_jobs_and_background_it_cannot_place") {
  auto s = scenario("alltoall", "metaroce", 4096);
  s.work.jobs = 3;
  CHECK(fab::check(s) == "jobs must be 1..14 and divide the hosts into jobs of at least 2");
  s.work.jobs = 2;
  s.work.background = 0.99;
  CHECK(fab::check(s) == "background load must be in [0, 0.95]");
  s.work.background = 0;
  s.work.shared_qp = true;
  s.work.kind = "incast";
  CHECK(fab::check(s) == "a shared QP per pair is for alltoall");
}

// --shared-qp: one QP per pair carries both directions of the all-to-all.
TEST_CASE("metaroce__alltoall_over_one_qp_per_pair_completes_byte_exact") {
  auto s = scenario("alltoall", "metaroce", 64 * 1024);
  s.work.shared_qp = true;
  s.send_depth = s.recv_depth = 2;
  require_byte_exact(fab::run(s));
}

// --spread: 4 incast senders on 16 hosts (4 leaves) are one per leaf
// (hosts 1, 4, 8, 12), not hosts 1..4, which would fill leaf 0 and spill
// one host onto leaf 1.
TEST_CASE("incast__spread_puts_the_senders_one_per_leaf") {
  auto s = scenario("incast", "metaroce", 64 * 1024);
  s.work.incast_senders = 4;
  s.work.incast_spread = true;
  REQUIRE(fab::check(s) == "");
  const fab::RunResult r = fab::run(s);
  require_byte_exact(r);
  std::set<uint32_t> senders, leaves;
  for (const auto& f : r.flow_records) {
    CHECK(f.dst == 0);
    senders.insert(f.src);
    leaves.insert(f.src / s.topo.hosts_per_leaf);
  }
  CHECK(senders == std::set<uint32_t>{1, 4, 8, 12});
  CHECK(leaves.size() == 4);
  s.work.kind = "alltoall";
  s.work.incast_spread = true;
  CHECK(fab::check(s) == "--spread is for incast");
}

// The slowdown baseline is a flow alone on its own path. A 1-channel ring's
// steps go mostly to a neighbour on the same leaf (2 links) and run on an
// idle fabric, so they take about that time: p50 ~1. A baseline that counts
// 4 links for every flow put the p50 at ~0.5, which no flow can beat.
TEST_CASE("slowdown__ring_neighbours_on_one_leaf_are_not_faster_than_alone") {
  auto s = scenario("allreduce-ring", "metaroce", 16 * 6144);
  s.work.channels = s.work.slices = 1;
  const fab::RunResult r = fab::run(s);
  require_byte_exact(r);
  INFO("p50 " << r.slowdown.p50 << " p99 " << r.slowdown.p99);
  CHECK(r.slowdown.p50 >= 0.99);
  CHECK(r.slowdown.p50 <= 1.2);
  // flows.csv carries the same per-flow figure, so plots use this baseline.
  std::ostringstream csv;
  fab::write_flows_csv(csv, r);
  CHECK(csv.str().starts_with("flow,src,dst,bytes,start_us,end_us,fct_us,slowdown\n"));
  REQUIRE(r.flow_slowdown.size() == r.flow_records.size());
}

// Drops, ECN marks and pauses are reported under the tier of the queue that
// made them. At 2:1 oversubscription the all-to-all queues on the leaves'
// uplinks, so "leaf-up" holds marks; counted per switch and filed under its
// down tier, leaf-up always showed 0.
TEST_CASE("tiers__ecn_marks_are_reported_where_the_marking_queue_is") {
  auto s = scenario("alltoall", "metaroce", 64 * 1024);
  s.topo.oversubscription = 2;
  REQUIRE(fab::check(s) == "");
  const fab::RunResult r = fab::run(s);
  require_byte_exact(r);
  uint64_t marks = 0, drops = 0, leaf_up_marks = 0;
  for (const auto& t : r.tiers) {
    INFO(t.name << " marks " << t.ecn_marked << " drops " << t.drops);
    marks += t.ecn_marked;
    drops += t.drops;
    if (t.name == "leaf-up") leaf_up_marks = t.ecn_marked;
  }
  CHECK(marks == r.ecn_marked);
  CHECK(drops == r.drops_buffer);
  CHECK(leaf_up_marks > 0);
}

// --memory verify (host_memory.h) stores no data and checks each placement
// as it happens; the traffic is the same bytes, so a run in either mode is
// the same run, event for event, and both verify.
TEST_CASE("memory__verify_mode_runs_exactly_as_store_mode") {
  for (std::string t : {"metaroce", "roce-pfc"}) {
    for (std::string w : {"alltoall", "incast", "permutation"}) {
      CAPTURE(t);
      CAPTURE(w);
      auto s = scenario(w, t, 64 * 1024);
      s.memory = "store";
      const auto stored = fab::run(s);
      s.memory = "verify";
      const auto verified = fab::run(s);
      require_byte_exact(stored);
      require_byte_exact(verified);
      CHECK(stored.memory == "store");
      CHECK(verified.memory == "verify");
      CHECK(verified.completion_us == stored.completion_us);
      CHECK(verified.events == stored.events);
      CHECK(verified.memory_bytes == stored.memory_bytes);
    }
  }
  auto s = scenario("alltoall", "metaroce", 64 * 1024);
  CHECK(fab::run(s).memory == "store");  // auto: 16 hosts need far less than kAutoVerifyBytes
}

// A placement that writes wrong bytes, lands a byte off or never happens is
// reported by either mode, through each NIC's real write path, at the host
// it happened on and with the reason.
TEST_CASE("memory__placement_faults_are_reported_in_both_modes") {
  using Kind = fab::PlacementFault::Kind;
  for (std::string t : {"metaroce", "roce-pfc"}) {
    for (std::string mode : {"store", "verify"}) {
      for (Kind k : {Kind::kFlipByte, Kind::kShift, Kind::kSkip}) {
        CAPTURE(t);
        CAPTURE(mode);
        CAPTURE(static_cast<int>(k));
        auto s = scenario("alltoall", t, 64 * 1024);
        s.memory = mode;
        s.placement_fault = {k, 5};
        s.placement_fault_host = 3;
        const auto r = fab::run(s);
        INFO(r.verify_error);
        CHECK(r.completed);  // the NIC cannot tell: only verification can
        if (mode == "store") {
          CHECK(r.verify_error.find("host 3 byte ") == 0);
        } else if (k == Kind::kSkip) {
          CHECK(r.verify_error.find("host 3 bytes ") == 0);
          CHECK(r.verify_error.find(" never written (") != std::string::npos);
        } else {
          CHECK(r.verify_error.find("host 3 1 writes placed ") == 0);
        }
      }
    }
  }
}

TEST_CASE("memory__verify_refuses_an_allreduce_whose_hosts_compute") {
  auto s = scenario("allreduce-ring", "metaroce", 64 * 1024);
  s.memory = "verify";
  const auto r = fab::run(s);
  CHECK_FALSE(r.ran);
  CHECK(r.error == "--memory verify cannot hold an allreduce: its hosts add received bytes (use store)");
  s.memory = "stored";
  CHECK(fab::check(s) == "memory must be auto, store or verify");
}
