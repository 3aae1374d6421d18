// One fabric simulation run: a topology, a transport (the MetaRoCE engine
// or a RoCEv2 baseline), a workload and impairments; and its results.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "firmware-model/ns3/nic.h"
#include "firmware-model/ns3/topology.h"
#include "firmware-model/ns3/workload.h"

namespace metaroce::fabric {

struct Scenario {
  std::string name = "run";
  // metaroce | roce-pfc (RoCEv2, go-back-N, DCQCN, PFC) | roce-lossy (same, no PFC)
  std::string transport = "metaroce";
  TopologyConfig topo;
  SwitchConfig sw;
  WorkloadConfig work;
  // MetaRoCE engine knobs (EngineConfig)
  // Path entropies per QP. 16, not the engine's 4: with 4 entropies a QP
  // reaches 4 of a leaf's 16 uplinks, and the hash leaves some uplinks and
  // spine ports ~10 % above the others; at the end of a 128-host all-to-all
  // one of them still held 750 KB when every last hop was idle (1.170 x
  // ideal; 1.089 x with 16, docs/evaluation.md §8).
  uint32_t num_paths = 16;
  std::string congestion = "default";
  uint32_t mtu = 4096;
  uint32_t tx_room_bytes = 0;  // NIC transmit backpressure (EngineNicConfig), 0 = off
  uint32_t send_depth = 8, recv_depth = 16;  // WQE slots per QP (EngineNicConfig)
  // impairments: link indices into Fabric::links()
  int fail_link = -1;
  int64_t fail_at_ns = 0;  // after the start
  int loss_link = -1;
  double loss = 0;
  uint64_t seed = 1;
  int64_t max_sim_ns = 1'000'000'000;  // give up (reported as not completed)
  int64_t sample_ns = 0;               // queue sampling period, 0 = auto
  std::string scheduler = "Map";       // ns-3 event scheduler: Heap, Map, Calendar, List
  // Host memory (host_memory.h): store | verify | auto (verify when the
  // hosts do not compute on received bytes and storing would take more
  // than kAutoVerifyBytes over all hosts; else store).
  std::string memory = "auto";
  // Test hook: a placement fault at one host's memory, which verification
  // must report (host_memory.h PlacementFault).
  PlacementFault placement_fault;
  uint32_t placement_fault_host = 0;
};

constexpr uint64_t kAutoVerifyBytes = uint64_t{1} << 30;

// Applies the transport's switch defaults (PFC and RED for RoCEv2, a
// threshold for MetaRoCE) unless the caller overrode them afterwards.
void apply_transport_defaults(Scenario& s);
std::string check(const Scenario& s);  // "" or what is wrong

struct Percentiles {
  double p50 = 0, p99 = 0, max = 0;
};

struct TierStats {
  std::string name;  // "leaf-up", "leaf-down", "spine-down", ...
  uint64_t ports = 0;
  uint64_t max_queue_bytes = 0;
  double avg_queue_bytes = 0;  // mean over ports of the time-average
  uint64_t drops = 0, ecn_marked = 0, pfc_pause_sent = 0;
  double pfc_paused_us = 0;  // summed over the ports that were paused
};

struct QueueSample {
  int64_t t_ns;
  std::string tier;
  uint64_t max_bytes, total_bytes;
};

struct RunResult {
  bool ran = false;  // false: the scenario was rejected (error says why)
  bool completed = false;
  std::string error;         // workload or NIC error
  std::string verify_error;  // "" = byte-exact at every receiver
  std::string memory;        // the host memory mode used: "store" or "verify"
  uint64_t memory_bytes = 0;  // simulated host memory over all hosts (verify: not allocated)
  double completion_us = 0, ideal_us = 0, ratio = 0;
  Percentiles slowdown;  // flow completion time / (alone on an idle fabric)
  Percentiles fct_us;
  uint64_t flows = 0;
  std::vector<TierStats> tiers;
  uint64_t drops = 0, drops_buffer = 0, drops_random_loss = 0, drops_link_down = 0;
  uint64_t trimmed = 0;  // frames cut to headers by trimming switches (not drops)
  uint64_t ecn_marked = 0, pfc_pause_frames = 0;
  double pfc_paused_us = 0;  // all ports, switches and hosts
  NicStats nic;              // summed over hosts (queue: max)
  double wall_s = 0;
  uint64_t events = 0;
  double events_per_s = 0;      // over the whole wall time
  double setup_s = 0, run_s = 0;  // wall time building the fabric and QPs; simulating
  double run_events_per_s = 0;  // events / run_s
  double sim_us = 0;
  uint64_t peak_rss_mb = 0;
  std::vector<JobSummary> jobs;  // several jobs and/or background: each one's figures
  std::vector<QueueSample> samples;
  std::vector<Flow> flow_records;
  std::vector<double> flow_slowdown;  // per flow record; 0 if it did not finish
};

RunResult run(const Scenario& s);

void write_json(std::ostream& o, const Scenario& s, const RunResult& r);
void write_flows_csv(std::ostream& o, const RunResult& r);
void write_queues_csv(std::ostream& o, const RunResult& r);

}  // namespace metaroce::fabric
