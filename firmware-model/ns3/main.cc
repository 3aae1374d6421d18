// fabric-sim: one fabric simulation from the command line (tools/fabric-sim
// wraps it). Prints a one-line summary and writes NAME.json, NAME.flows.csv
// and NAME.queues.csv into --out. Exit status 0 only when the workload
// completed and every receiver's bytes verified.
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <string>

#include "firmware-model/ns3/scenario.h"

namespace fab = metaroce::fabric;

namespace {

const char kUsage[] = R"(usage: fabric-sim WORKLOAD [options]
workloads: alltoall allreduce-ring allreduce-hd incast permutation
  --transport T        metaroce | roce-pfc | roce-lossy        (metaroce)
  --hosts N            hosts                                   (16)
  --topology T         leaf-spine | fat-tree                   (leaf-spine)
  --hosts-per-leaf N   (16)     --spines N (auto)    --oversub X (1)
  --link-gbps G        100 | 200 | 400 ...                     (100)
  --delay-ns D         per link propagation                    (1000)
  --bytes B            per pair (alltoall, incast, permutation) or per rank (allreduce)
                       (alltoall 64 KiB, allreduce 16 MiB, others 1 MiB)
  --qps K              QPs per pair (alltoall)                 (1)
  --jobs N             N concurrent jobs of the workload, hosts/N each (1)
  --placement P        disjoint (consecutive hosts) | interleaved (host h in job h % N)  (disjoint)
  --background F       background traffic: every host sends to a seeded permutation
                       partner at F x its link rate until the jobs finish (0)
  --background-bytes B per background message                  (65536)
  --shared-qp on|off   alltoall: one QP per pair for both directions (off: one per direction)
  --send-depth N       MetaRoCE send WQE slots per QP           (8)
  --recv-depth N       MetaRoCE receive WQE slots per QP        (16)
  --channels C         rings (allreduce-ring)                  (4)
  --slices S           pipelined pieces per chunk              (4)
  --senders N          incast senders, 0 = all                 (0)
  --spread on|off      incast: senders evenly over the hosts (one per leaf at 64 of 1,024), not hosts 1..N  (off)
  --paths P            MetaRoCE path entropies per QP (1 = no spraying)  (16)
  --cc NAME            MetaRoCE congestion control             (default)
  --mtu M              1024 | 2048 | 4096                      (4096)
  --tx-room-kb K       MetaRoCE NIC: data queued before the engine is held (0 = unbounded)  (0)
  --buffer-kb K        per-port egress buffer                  (1024)
  --shared-buffer-mb M shared buffer per switch (dynamic threshold) instead
  --ecn MODE           off | threshold | red    (metaroce: threshold, roce: red)
  --ecn-kb K           threshold                               (100)
  --pfc on|off         (roce-pfc: on)   --xoff-kb K (200)  --xon-kb K (180)
  --trim on|off        switches cut MetaRoCE frames that do not fit to headers, receivers NACK them (off)
  --fail-link I        fail switch link I (index, see --list-links) ...
  --fail-at-us T       ... T us after the start                (0)
  --loss-link I        random loss on link I ...   --loss P   ... with probability P
  --list-links         print the switch links and exit
  --scheduler S        ns-3 event scheduler: Heap | Map | Calendar | List  (Map)
  --memory M           host memory: store (bytes placed, compared at the end) | verify (no
                       data stored: each write checked against the pattern as it is placed,
                       coverage checked at the end; not for allreduce) | auto (verify above
                       1 GiB of simulated memory when the workload allows it)  (auto)
  --seed S             (1)     --max-sim-ms M (1000)   --name NAME   --out DIR (.)
)";

[[noreturn]] void die(const std::string& why) {
  std::cerr << "fabric-sim: " << why << "\n" << kUsage;
  std::exit(2);
}

uint64_t to_u64(const std::string& v, const std::string& opt) {
  char* end = nullptr;
  const unsigned long long x = std::strtoull(v.c_str(), &end, 0);
  if (v.empty() || *end) die("--" + opt + " wants a number, got '" + v + "'");
  return x;
}
double to_f(const std::string& v, const std::string& opt) {
  char* end = nullptr;
  const double x = std::strtod(v.c_str(), &end);
  if (v.empty() || *end) die("--" + opt + " wants a number, got '" + v + "'");
  return x;
}

struct Cli {
  fab::Scenario s;
  std::string out = ".";
  bool list_links = false;
  std::map<std::string, std::string> set;  // options given, applied after transport defaults
};

void apply(Cli& c, const std::string& k, const std::string& v) {
  fab::Scenario& s = c.s;
  fab::SwitchConfig& w = s.sw;
  using Setter = std::function<void()>;
  const std::map<std::string, Setter> table = {
      {"transport", [&] { s.transport = v; }},
      {"hosts", [&] { s.topo.hosts = s.work.hosts = static_cast<uint32_t>(to_u64(v, k)); }},
      {"topology",
       [&] {
         if (v != "leaf-spine" && v != "fat-tree") die("--topology is leaf-spine or fat-tree");
         s.topo.kind = v == "fat-tree" ? fab::TopologyConfig::Kind::kFatTree
                                       : fab::TopologyConfig::Kind::kLeafSpine;
       }},
      {"hosts-per-leaf", [&] { s.topo.hosts_per_leaf = static_cast<uint32_t>(to_u64(v, k)); }},
      {"spines", [&] { s.topo.spines = static_cast<uint32_t>(to_u64(v, k)); }},
      {"oversub", [&] { s.topo.oversubscription = to_f(v, k); }},
      {"link-gbps", [&] { s.topo.link_bps = static_cast<uint64_t>(to_f(v, k) * 1e9); }},
      {"delay-ns", [&] { s.topo.link_delay_ns = static_cast<int64_t>(to_u64(v, k)); }},
      {"bytes", [&] { s.work.bytes = to_u64(v, k); }},
      {"qps", [&] { s.work.qps_per_pair = static_cast<uint32_t>(to_u64(v, k)); }},
      {"shared-qp",
       [&] {
         if (v != "on" && v != "off") die("--shared-qp is on or off");
         s.work.shared_qp = v == "on";
       }},
      {"jobs", [&] { s.work.jobs = static_cast<uint32_t>(to_u64(v, k)); }},
      {"placement",
       [&] {
         if (v != "disjoint" && v != "interleaved") die("--placement is disjoint or interleaved");
         s.work.interleaved = v == "interleaved";
       }},
      {"background", [&] { s.work.background = to_f(v, k); }},
      {"background-bytes", [&] { s.work.background_bytes = to_u64(v, k); }},
      {"send-depth", [&] { s.send_depth = static_cast<uint32_t>(to_u64(v, k)); }},
      {"recv-depth", [&] { s.recv_depth = static_cast<uint32_t>(to_u64(v, k)); }},
      {"channels", [&] { s.work.channels = static_cast<uint32_t>(to_u64(v, k)); }},
      {"slices", [&] { s.work.slices = static_cast<uint32_t>(to_u64(v, k)); }},
      {"senders", [&] { s.work.incast_senders = static_cast<uint32_t>(to_u64(v, k)); }},
      {"spread",
       [&] {
         if (v != "on" && v != "off") die("--spread is on or off");
         s.work.incast_spread = v == "on";
       }},
      {"paths", [&] { s.num_paths = static_cast<uint32_t>(to_u64(v, k)); }},
      {"cc", [&] { s.congestion = v; }},
      {"mtu", [&] { s.mtu = static_cast<uint32_t>(to_u64(v, k)); }},
      {"tx-room-kb", [&] { s.tx_room_bytes = static_cast<uint32_t>(to_u64(v, k) * 1024); }},
      {"buffer-kb", [&] { w.port_buffer_bytes = to_u64(v, k) * 1000; }},
      {"shared-buffer-mb",
       [&] {
         w.shared_buffer = true;
         w.shared_buffer_bytes = to_u64(v, k) * 1'000'000;
       }},
      {"ecn",
       [&] {
         if (v == "off")
           w.ecn = fab::SwitchConfig::Ecn::kOff;
         else if (v == "threshold")
           w.ecn = fab::SwitchConfig::Ecn::kThreshold;
         else if (v == "red")
           w.ecn = fab::SwitchConfig::Ecn::kRed;
         else
           die("--ecn is off, threshold or red");
       }},
      {"ecn-kb", [&] { w.ecn_k_bytes = to_u64(v, k) * 1000; }},
      {"pfc",
       [&] {
         if (v != "on" && v != "off") die("--pfc is on or off");
         w.pfc = v == "on";
       }},
      {"trim",
       [&] {
         if (v != "on" && v != "off") die("--trim is on or off");
         w.trim = v == "on";
       }},
      {"xoff-kb", [&] { w.pfc_xoff_bytes = to_u64(v, k) * 1000; }},
      {"xon-kb", [&] { w.pfc_xon_bytes = to_u64(v, k) * 1000; }},
      {"fail-link", [&] { s.fail_link = static_cast<int>(to_u64(v, k)); }},
      {"fail-at-us", [&] { s.fail_at_ns = static_cast<int64_t>(to_f(v, k) * 1e3); }},
      {"loss-link", [&] { s.loss_link = static_cast<int>(to_u64(v, k)); }},
      {"loss", [&] { s.loss = to_f(v, k); }},
      {"scheduler", [&] { s.scheduler = v; }},
      {"memory", [&] { s.memory = v; }},
      {"seed", [&] { s.seed = s.work.seed = to_u64(v, k); }},
      {"max-sim-ms", [&] { s.max_sim_ns = static_cast<int64_t>(to_f(v, k) * 1e6); }},
      {"name", [&] { s.name = v; }},
      {"out", [&] { c.out = v; }},
  };
  auto it = table.find(k);
  if (it == table.end()) die("unknown option --" + k);
  it->second();
}

Cli parse(int argc, char** argv) {
  Cli c;
  if (argc >= 2 && (std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h")) {
    std::cout << kUsage;
    std::exit(0);
  }
  if (argc < 2 || std::string(argv[1]).rfind("--", 0) == 0) die("name a workload first");
  c.s.work.kind = argv[1];
  std::vector<std::pair<std::string, std::string>> opts;
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--list-links") {
      c.list_links = true;
      continue;
    }
    if (a.rfind("--", 0) != 0 || i + 1 >= argc) die("bad argument '" + a + "'");
    opts.emplace_back(a.substr(2), argv[++i]);
  }
  for (auto& [k, v] : opts) {  // transport first: its defaults, then the overrides
    if (k == "transport") apply(c, k, v);
  }
  fab::apply_transport_defaults(c.s);
  // Per-workload default size: a few ms of simulated time at 128 hosts.
  const std::string& w = c.s.work.kind;
  c.s.work.bytes = w == "alltoall" ? 64 * 1024 : w.rfind("allreduce", 0) == 0 ? 16 << 20 : 1 << 20;
  for (auto& [k, v] : opts) {
    if (k != "transport") apply(c, k, v);
  }
  if (c.s.name == "run")
    c.s.name = c.s.work.kind + "-" + c.s.transport + "-" + std::to_string(c.s.topo.hosts);
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  Cli c = parse(argc, argv);
  if (auto e = fab::check(c.s); !e.empty()) die(e);
  if (c.list_links) {
    fab::Fabric f(c.s.topo, c.s.sw);
    for (size_t i = 0; i < f.links().size(); ++i)
      std::cout << i << " " << f.links()[i].name << "\n";
    return 0;
  }
  const fab::RunResult r = fab::run(c.s);
  if (!r.ran) die(r.error);
  const std::string base = c.out + "/" + c.s.name;
  std::ofstream(base + ".json") << [&] {
    std::ostringstream o;
    fab::write_json(o, c.s, r);
    return o.str();
  }();
  std::ofstream flows(base + ".flows.csv");
  fab::write_flows_csv(flows, r);
  std::ofstream queues(base + ".queues.csv");
  fab::write_queues_csv(queues, r);
  std::cout << c.s.name << ": " << (r.completed ? "completed" : "NOT completed (" + r.error + ")")
            << ", " << (r.verify_error.empty() ? "verified" : "VERIFY FAILED: " + r.verify_error)
            << ", " << r.completion_us << " us, " << r.ratio << "x ideal (" << r.ideal_us
            << " us), p99 slowdown " << r.slowdown.p99 << ", drops " << r.drops << ", retransmits "
            << r.nic.retransmits << ", pfc pause frames " << r.pfc_pause_frames << ", wall "
            << r.wall_s << " s (setup " << r.setup_s << " s), " << r.events << " events, "
            << r.run_events_per_s << " events/s simulating, peak RSS " << r.peak_rss_mb << " MB, memory "
            << r.memory << "\n";
  for (size_t i = 0; i < r.jobs.size(); ++i) {
    const fab::JobSummary& j = r.jobs[i];
    std::cout << "  " << (j.kind == "background" ? "background" : "job " + std::to_string(i)) << ": "
              << j.hosts << " hosts, " << j.messages << " of " << j.posted << " messages arrived, "
              << j.bytes << " bytes";
    if (j.kind != "background")
      std::cout << ", " << j.completion_us << " us, " << j.ratio << "x ideal (" << j.ideal_us
                << " us)";
    std::cout << "\n";
  }
  return r.completed && r.verify_error.empty() ? 0 : 1;
}
