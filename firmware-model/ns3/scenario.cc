#include "firmware-model/ns3/scenario.h"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <memory>
#include <ostream>
#include <sstream>

#include "firmware-model/engine/congestion.h"
#include "firmware-model/ns3/wire.h"
#include "firmware-model/ns3/engine_nic.h"
#include "firmware-model/ns3/roce_nic.h"
#include "ns3/global-value.h"
#include "ns3/string.h"

namespace metaroce::fabric {

namespace {

// Frame bytes beyond the payload: Ethernet, IPv4, UDP, MBTH, RETH, IMM,
// ICRC and the 2-byte PPP header of the ns-3 link.
constexpr uint32_t kWireOverhead = 14 + 20 + 8 + 24 + 16 + 4 + 4 + 2;

int64_t one_way_ns(const TopologyConfig& t, uint64_t bytes, uint32_t mtu) {
  const int links = t.kind == TopologyConfig::Kind::kFatTree ? 6 : 4;
  const double ser = (std::min<uint64_t>(bytes, mtu) + kWireOverhead) * 8e9 / t.link_bps;
  return static_cast<int64_t>(links * (t.link_delay_ns + ser));
}

// A flow alone on an idle fabric, store and forward over its own path: the
// propagation of every link, every frame serialized once (the frames
// pipeline), plus the first frame serialized again at each switch.
double alone_ns(const TopologyConfig& t, const Flow& f, uint32_t mtu) {
  const int links = static_cast<int>(host_links(t, f.src, f.dst));
  const uint64_t frames = std::max<uint64_t>(1, (uint64_t{f.len} + mtu - 1) / mtu);
  const double wire_bytes = static_cast<double>(f.len) + frames * kWireOverhead;
  const double first = (std::min<uint64_t>(f.len, mtu) + kWireOverhead) * 8e9 / t.link_bps;
  return links * static_cast<double>(t.link_delay_ns) + wire_bytes * 8e9 / t.link_bps +
         std::max(0, links - 1) * first;
}

Percentiles percentiles(std::vector<double> v) {
  Percentiles p;
  if (v.empty()) return p;
  std::sort(v.begin(), v.end());
  auto at = [&](double q) { return v[std::min(v.size() - 1, static_cast<size_t>(q * v.size()))]; };
  p.p50 = at(0.50);
  p.p99 = at(0.99);
  p.max = v.back();
  return p;
}

std::string tier_name(const Switch& s, bool up) {
  static const char* kTiers[] = {"leaf", "spine", "core"};
  return std::string(kTiers[std::min(s.tier(), 2)]) + (up ? "-up" : "-down");
}

uint64_t peak_rss_mb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<uint64_t>(u.ru_maxrss) / 1024;
}

// Periodic queue samples per tier, for the queue-over-time plot.
void sample(Fabric* f, std::vector<QueueSample>* out, int64_t period, const Workload* w) {
  std::map<std::string, std::pair<uint64_t, uint64_t>> by_tier;
  for (auto& s : f->switches()) {
    for (int p = 0; p < s->num_ports(); ++p) {
      auto& e = by_tier[tier_name(*s, s->port_up(p))];
      e.first = std::max(e.first, s->queue(p).bytes);
      e.second += s->queue(p).bytes;
    }
  }
  const int64_t now = ns3::Simulator::Now().GetNanoSeconds();
  for (auto& [t, e] : by_tier) out->push_back({now, t, e.first, e.second});
  if (!w->finished())
    ns3::Simulator::Schedule(ns3::NanoSeconds(period), &sample, f, out, period, w);
}

void collect_switches(Fabric& f, double dur_ns, RunResult& r) {
  std::map<std::string, TierStats> tiers;
  for (auto& s : f.switches()) {
    const SwitchCounters& c = s->counters();
    r.drops_buffer += c.drop_buffer_full;
    r.trimmed += c.trimmed;
    r.ecn_marked += c.ecn_marked;
    r.pfc_pause_frames += c.pfc_tx_pause;
    for (int p = 0; p < s->num_ports(); ++p) {
      TierStats& t = tiers[tier_name(*s, s->port_up(p))];
      const QueueStats& q = s->queue(p);
      const PortCounters pc = s->port(p).counters();
      ++t.ports;
      t.max_queue_bytes = std::max(t.max_queue_bytes, q.max_bytes);
      t.avg_queue_bytes +=
          (q.byte_ns + static_cast<double>(q.bytes) * (dur_ns - q.last_ns)) / dur_ns;
      t.pfc_paused_us += pc.paused_ns / 1e3;
      t.drops += q.drops;
      t.ecn_marked += q.ecn_marked;
      t.pfc_pause_sent += q.pfc_tx_pause;
      r.drops_random_loss += pc.rx_drop_random_loss;
      r.drops_link_down += pc.drop_link_down;
    }
  }
  for (auto& [name, t] : tiers) {
    t.name = name;
    if (t.ports) t.avg_queue_bytes /= static_cast<double>(t.ports);
    r.pfc_paused_us += t.pfc_paused_us;
    r.tiers.push_back(t);
  }
}

void collect_nics(const std::vector<std::unique_ptr<Nic>>& nics, RunResult& r) {
  for (auto& n : nics) {
    const NicStats s = n->stats();
    const PortCounters pc = n->port().counters();
    r.nic.tx_packets += s.tx_packets;
    r.nic.tx_bytes += s.tx_bytes;
    r.nic.rx_packets += s.rx_packets;
    r.nic.retransmits += s.retransmits;
    r.nic.timeouts += s.timeouts;
    r.nic.naks_sent += s.naks_sent;
    r.nic.ecn_marks_seen += s.ecn_marks_seen;
    r.nic.cnps += s.cnps;
    r.nic.errors += s.errors;
    r.nic.rx_drop_parse += s.rx_drop_parse;
    r.nic.nic_queue_max_bytes = std::max(r.nic.nic_queue_max_bytes, s.nic_queue_max_bytes);
    r.pfc_paused_us += pc.paused_ns / 1e3;
    r.drops_random_loss += pc.rx_drop_random_loss;
  }
  if (!nics.empty()) r.nic.detail = "host0: " + nics[0]->stats().detail;
}

void collect_flows(const Workload& w, const Scenario& s, RunResult& r) {
  std::vector<double> slow, fct;
  r.flow_records = w.flows();
  r.flow_slowdown.assign(r.flow_records.size(), 0);
  for (size_t i = 0; i < r.flow_records.size(); ++i) {
    const Flow& f = r.flow_records[i];
    if (f.end_ns < 0) continue;
    const double t = static_cast<double>(f.end_ns - f.start_ns);
    r.flow_slowdown[i] = t / alone_ns(s.topo, f, s.mtu);
    fct.push_back(t / 1e3);
    slow.push_back(r.flow_slowdown[i]);
  }
  r.flows = fct.size();
  r.fct_us = percentiles(fct);
  r.slowdown = percentiles(slow);
}

std::unique_ptr<Nic> make_nic(const Scenario& s, uint32_t h, Fabric& f, HostMemory mem,
                              NicHandler* handler) {
  const uint64_t seed = s.seed * 1000003 + h;
  const int64_t rtt = 2 * one_way_ns(s.topo, s.mtu, s.mtu);
  if (s.transport == "metaroce") {
    EngineNicConfig c;
    c.engine.num_paths = s.num_paths;
    c.engine.congestion = s.congestion;
    c.engine.base_rtt = static_cast<fw::Time>(rtt);
    c.engine.link_bps = s.topo.link_bps;
    c.engine.port.link_mtu = 9000;
    c.engine.caps.max_qp = 1 << 16;
    c.path_mtu = s.mtu;
    c.tx_room_bytes = s.tx_room_bytes;
    c.send_depth = s.send_depth;
    c.recv_depth = s.recv_depth;
    if (s.sw.trim) c.engine.trimmed_dscp = kTrimmedDscp;
    return std::make_unique<EngineNic>(h, f.host_device(h), std::move(mem), c, seed, handler);
  }
  RoceConfig c;
  c.mtu = s.mtu;
  c.link_bps = s.topo.link_bps;
  c.base_rtt_ns = rtt;
  return std::make_unique<RoceNic>(h, f.host_device(h), std::move(mem), c, handler);
}

// Link indices name switch links of the built fabric (--list-links).
std::string check_links(const Scenario& s, size_t links) {
  for (auto [what, i] :
       {std::pair{"fail-link", s.fail_link}, std::pair{"loss-link", s.loss_link}}) {
    if (i >= 0 && static_cast<size_t>(i) >= links) {
      return std::string(what) + " " + std::to_string(i) + ": the fabric has " +
             std::to_string(links) + " switch links (see --list-links)";
    }
  }
  return "";
}

// The memory mode of the run (Scenario::memory), or "" with *error set.
std::string memory_mode(const Scenario& s, const Workload& w, uint64_t total, std::string* error) {
  if (s.memory == "store" || (s.memory == "auto" && (w.computes() || total <= kAutoVerifyBytes))) {
    return "store";
  }
  if (w.computes()) {
    *error = "--memory verify cannot hold an allreduce: its hosts add received bytes (use store)";
    return "";
  }
  return "verify";
}

}  // namespace

void apply_transport_defaults(Scenario& s) {
  if (s.transport == "metaroce") {
    s.sw.pfc = false;
    s.sw.ecn = SwitchConfig::Ecn::kThreshold;
    return;
  }
  // DCQCN (Zhu et al., SIGCOMM 2015): RED-style marking Kmin 5 KB, Kmax
  // 200 KB, Pmax 1%, scaled from 40 to this link speed.
  const double scale = s.topo.link_bps / 40e9;
  s.sw.ecn = SwitchConfig::Ecn::kRed;
  s.sw.red_kmin_bytes = static_cast<uint64_t>(5'000 * scale);
  s.sw.red_kmax_bytes = static_cast<uint64_t>(200'000 * scale);
  s.sw.red_pmax = 0.01;
  s.sw.pfc = s.transport == "roce-pfc";
}

std::string check(const Scenario& s) {
  if (s.transport != "metaroce" && s.transport != "roce-pfc" && s.transport != "roce-lossy") {
    return "unknown transport '" + s.transport + "' (metaroce, roce-pfc, roce-lossy)";
  }
  if (auto e = check(s.topo); !e.empty()) return e;
  if (auto e = check(s.work); !e.empty()) return e;
  if (s.work.hosts != s.topo.hosts) return "workload and topology host counts differ";
  if (s.mtu != 1024 && s.mtu != 2048 && s.mtu != 4096) return "mtu must be 1024, 2048 or 4096";
  if (s.num_paths == 0 || s.num_paths > 64) return "paths must be 1..64";
  if (s.sw.trim && s.transport != "metaroce") return "trimming needs a receiver that NACKs trimmed packets: metaroce only";
  if (s.sw.trim && s.sw.pfc) return "trimming is for lossy fabrics: not with PFC";
  if (s.loss < 0 || s.loss >= 1) return "loss must be in [0, 1)";
  if (s.fail_at_ns < 0) return "fail-at must not be negative";
  if (s.max_sim_ns <= 0) return "max-sim must be positive";
  if (s.scheduler != "Heap" && s.scheduler != "Map" && s.scheduler != "Calendar" &&
      s.scheduler != "List") {
    return "scheduler must be Heap, Map, Calendar or List";
  }
  if (s.work.qps_per_pair > 64) return "at most 64 QPs per pair";
  if (s.send_depth == 0 || s.send_depth > 4096 || s.recv_depth == 0 || s.recv_depth > 4096) {
    return "send and receive depth must be 1..4096";
  }
  if (s.transport == "metaroce" && !fw::make_congestion_control(s.congestion, {})) {
    return "the engine has no congestion control '" + s.congestion +
           "' (docs/congestion.md lists them)";
  }
  if (s.sw.pfc && s.sw.pfc_xon_bytes >= s.sw.pfc_xoff_bytes) return "PFC XON must be below XOFF";
  if (s.memory != "auto" && s.memory != "store" && s.memory != "verify") {
    return "memory must be auto, store or verify";
  }
  if (s.placement_fault_host >= s.topo.hosts) return "placement fault host beyond the hosts";
  return "";
}

RunResult run(const Scenario& s) {
  RunResult r;
  const auto wall0 = std::chrono::steady_clock::now();
  ns3::GlobalValue::Bind("SchedulerType", ns3::StringValue("ns3::" + s.scheduler + "Scheduler"));
  auto fabric = std::make_unique<Fabric>(s.topo, s.sw);
  if (auto e = check_links(s, fabric->links().size()); !e.empty()) {
    r.error = e;
    fabric.reset();
    ns3::Simulator::Destroy();
    return r;
  }
  auto work = Workload::make(s.work, s.topo.link_bps);
  for (uint32_t h = 0; h < s.topo.hosts; ++h) r.memory_bytes += work->memory_bytes(h);
  r.memory = memory_mode(s, *work, r.memory_bytes, &r.error);
  if (r.memory.empty()) {
    work.reset();
    fabric.reset();
    ns3::Simulator::Destroy();
    return r;
  }
  const MemoryMode mode = r.memory == "verify" ? MemoryMode::kVerify : MemoryMode::kStore;
  std::vector<std::unique_ptr<Nic>> nics;
  std::vector<Nic*> raw;
  for (uint32_t h = 0; h < s.topo.hosts; ++h) {
    HostMemory mem(work->memory_bytes(h), mode);
    if (h == s.placement_fault_host) mem.inject(s.placement_fault);
    nics.push_back(make_nic(s, h, *fabric, std::move(mem), work.get()));
    raw.push_back(nics.back().get());
  }
  work->setup(raw);
  if (s.loss_link >= 0) fabric->set_link_loss(s.loss_link, s.loss, s.seed * 7919 + 1);
  const double ideal = work->ideal_ns(s.topo);
  const int64_t t0 = 1'000;  // synchronized start of every rank
  ns3::Simulator::Schedule(ns3::NanoSeconds(t0), [w = work.get()] { w->start(); });
  if (s.fail_link >= 0) {
    ns3::Simulator::Schedule(ns3::NanoSeconds(t0 + s.fail_at_ns),
                             [f = fabric.get(), i = s.fail_link] { f->fail_link(i); });
  }
  const int64_t period = s.sample_ns ? s.sample_ns : std::max<int64_t>(1'000, ideal / 200);
  ns3::Simulator::Schedule(ns3::NanoSeconds(t0), &sample, fabric.get(), &r.samples, period,
                           work.get());
  ns3::Simulator::Stop(ns3::NanoSeconds(s.max_sim_ns));
  const auto run0 = std::chrono::steady_clock::now();
  r.setup_s = std::chrono::duration<double>(run0 - wall0).count();
  ns3::Simulator::Run();
  r.run_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - run0).count();
  r.ran = true;

  const int64_t end = ns3::Simulator::Now().GetNanoSeconds();
  r.completed = work->finished() && work->error().empty();
  r.error = work->error();
  if (!work->finished() && r.error.empty()) r.error = "did not finish within max_sim_ns";
  r.verify_error = work->verify();
  r.sim_us = end / 1e3;
  r.completion_us = work->finished() ? (work->finish_ns() - work->start_ns()) / 1e3 : 0;
  r.ideal_us = ideal / 1e3;
  r.ratio = r.completed ? r.completion_us / r.ideal_us : 0;
  collect_flows(*work, s, r);
  r.jobs = work->jobs(s.topo);
  collect_switches(*fabric, static_cast<double>(std::max<int64_t>(end, 1)), r);
  collect_nics(nics, r);
  r.drops = r.drops_buffer + r.drops_random_loss + r.drops_link_down;
  r.events = ns3::Simulator::GetEventCount();
  r.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
  r.events_per_s = r.events / std::max(r.wall_s, 1e-9);
  r.run_events_per_s = r.events / std::max(r.run_s, 1e-9);
  r.peak_rss_mb = peak_rss_mb();
  ns3::Simulator::Destroy();
  return r;
}

// ---- output ----

namespace {
std::string quote(const std::string& s) {
  std::string o = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    o += c;
  }
  return o + "\"";
}
void pct(std::ostream& o, const char* name, const Percentiles& p) {
  o << "\"" << name << "\": {\"p50\": " << p.p50 << ", \"p99\": " << p.p99 << ", \"max\": " << p.max
    << "}";
}
}  // namespace

void write_json(std::ostream& o, const Scenario& s, const RunResult& r) {
  o << "{\n  \"name\": " << quote(s.name) << ",\n  \"transport\": " << quote(s.transport)
    << ",\n  \"workload\": " << quote(s.work.kind) << ",\n  \"hosts\": " << s.topo.hosts
    << ",\n  \"topology\": "
    << quote(s.topo.kind == TopologyConfig::Kind::kFatTree ? "fat-tree" : "leaf-spine")
    << ",\n  \"link_gbps\": " << s.topo.link_bps / 1e9
    << ",\n  \"oversubscription\": " << s.topo.oversubscription
    << ",\n  \"bytes\": " << s.work.bytes << ",\n  \"num_paths\": " << s.num_paths
    << ",\n  \"congestion\": " << quote(s.congestion) << ",\n  \"tx_room_bytes\": " << s.tx_room_bytes
    << ",\n  \"jobs_placed\": " << s.work.jobs << ",\n  \"interleaved\": "
    << (s.work.interleaved ? "true" : "false") << ",\n  \"background\": " << s.work.background
    << ",\n  \"background_bytes\": " << s.work.background_bytes
    << ",\n  \"shared_qp\": " << (s.work.shared_qp ? "true" : "false")
    << ",\n  \"incast_senders\": " << s.work.incast_senders
    << ",\n  \"incast_spread\": " << (s.work.incast_spread ? "true" : "false")
    << ",\n  \"send_depth\": " << s.send_depth << ",\n  \"recv_depth\": " << s.recv_depth
    << ",\n  \"seed\": " << s.seed
    << ",\n  \"completed\": " << (r.completed ? "true" : "false")
    << ",\n  \"error\": " << quote(r.error)
    << ",\n  \"verified\": " << (r.verify_error.empty() ? "true" : "false")
    << ",\n  \"verify_error\": " << quote(r.verify_error)
    << ",\n  \"memory\": " << quote(r.memory) << ",\n  \"memory_bytes\": " << r.memory_bytes
    << ",\n  \"completion_us\": " << r.completion_us << ",\n  \"ideal_us\": " << r.ideal_us
    << ",\n  \"ratio_to_ideal\": " << r.ratio << ",\n  \"flows\": " << r.flows << ",\n  ";
  pct(o, "fct_us", r.fct_us);
  o << ",\n  ";
  pct(o, "slowdown", r.slowdown);
  o << ",\n  \"drops\": " << r.drops << ",\n  \"trimmed\": " << r.trimmed
    << ",\n  \"drops_buffer\": " << r.drops_buffer
    << ",\n  \"drops_random_loss\": " << r.drops_random_loss
    << ",\n  \"drops_link_down\": " << r.drops_link_down << ",\n  \"ecn_marked\": " << r.ecn_marked
    << ",\n  \"pfc_pause_frames\": " << r.pfc_pause_frames
    << ",\n  \"pfc_paused_us\": " << r.pfc_paused_us
    << ",\n  \"retransmits\": " << r.nic.retransmits << ",\n  \"timeouts\": " << r.nic.timeouts
    << ",\n  \"naks\": " << r.nic.naks_sent << ",\n  \"cnps\": " << r.nic.cnps
    << ",\n  \"nic_errors\": " << r.nic.errors
    << ",\n  \"nic_queue_max_bytes\": " << r.nic.nic_queue_max_bytes
    << ",\n  \"nic_detail\": " << quote(r.nic.detail) << ",\n  \"tiers\": [";
  for (size_t i = 0; i < r.tiers.size(); ++i) {
    const TierStats& t = r.tiers[i];
    o << (i ? ", " : "") << "\n    {\"tier\": " << quote(t.name) << ", \"ports\": " << t.ports
      << ", \"max_queue_bytes\": " << t.max_queue_bytes
      << ", \"avg_queue_bytes\": " << t.avg_queue_bytes << ", \"drops\": " << t.drops
      << ", \"ecn_marked\": " << t.ecn_marked << ", \"pfc_pause_sent\": " << t.pfc_pause_sent
      << ", \"pfc_paused_us\": " << t.pfc_paused_us << "}";
  }
  o << "\n  ],\n  \"jobs\": [";
  for (size_t i = 0; i < r.jobs.size(); ++i) {
    const JobSummary& j = r.jobs[i];
    o << (i ? ",\n    " : "\n    ") << "{\"kind\": " << quote(j.kind) << ", \"hosts\": " << j.hosts
      << ", \"finished\": " << (j.finished ? "true" : "false")
      << ", \"completion_us\": " << j.completion_us << ", \"ideal_us\": " << j.ideal_us
      << ", \"ratio_to_ideal\": " << j.ratio << ", \"posted\": " << j.posted
      << ", \"messages\": " << j.messages
      << ", \"bytes\": " << j.bytes << "}";
  }
  o << "\n  ],\n  \"sim_us\": " << r.sim_us << ",\n  \"wall_s\": " << r.wall_s
    << ",\n  \"setup_s\": " << r.setup_s << ",\n  \"run_s\": " << r.run_s
    << ",\n  \"events\": " << r.events << ",\n  \"events_per_s\": " << r.events_per_s
    << ",\n  \"run_events_per_s\": " << r.run_events_per_s
    << ",\n  \"peak_rss_mb\": " << r.peak_rss_mb << "\n}\n";
}

void write_flows_csv(std::ostream& o, const RunResult& r) {
  o << "flow,src,dst,bytes,start_us,end_us,fct_us,slowdown\n";
  for (size_t i = 0; i < r.flow_records.size(); ++i) {
    const Flow& f = r.flow_records[i];
    if (f.end_ns < 0) continue;
    o << i << "," << f.src << "," << f.dst << "," << f.len << "," << f.start_ns / 1e3 << ","
      << f.end_ns / 1e3 << "," << (f.end_ns - f.start_ns) / 1e3 << ","
      << (i < r.flow_slowdown.size() ? r.flow_slowdown[i] : 0) << "\n";
  }
}

void write_queues_csv(std::ostream& o, const RunResult& r) {
  o << "t_us,tier,max_bytes,total_bytes\n";
  for (const QueueSample& q : r.samples) {
    o << q.t_ns / 1e3 << "," << q.tier << "," << q.max_bytes << "," << q.total_bytes << "\n";
  }
}

}  // namespace metaroce::fabric
