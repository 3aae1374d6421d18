// Collectives and traffic patterns as libraries run them, over Nic
// connections with RDMA WRITE WITH IMMEDIATE. Each message is a flow (its
// id travels as the immediate); a step starts when the messages it depends
// on have arrived (a receive completion), never on a timer. Payload bytes
// are a seeded pattern per source host; at the end every receiver's memory
// is compared byte for byte with what the algorithm must have produced
// (host_memory.h: stored and compared, or checked as placed).
//
//   allreduce-ring   reduce-scatter + all-gather on C rings (NCCL channels),
//                    each chunk cut into slices that are forwarded as soon as
//                    they arrive; the reduction is byte-wise addition mod 256.
//   allreduce-hd     recursive halving reduce-scatter + recursive doubling
//                    all-gather (power-of-two host counts).
//   alltoall         every ordered pair, the block split over k QPs.
//   incast           n senders -> host 0.
//   permutation      each host sends to one other (seeded derangement).
//
// Several jobs share the fabric with jobs > 1: each of the same kind on
// hosts/jobs hosts, placed on consecutive hosts (disjoint: whole leaves) or
// interleaved (host h in job h % jobs); each reports its own completion.
// background > 0 adds open-ended traffic: every host sends background_bytes
// messages to its partner in a seeded permutation, paced to that fraction
// of its link, until the jobs are done.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "firmware-model/ns3/nic.h"
#include "firmware-model/ns3/topology.h"

namespace metaroce::fabric {

struct WorkloadConfig {
  std::string kind = "alltoall";
  uint32_t hosts = 16;
  uint64_t bytes = 1 << 20;     // allreduce: per rank; others: per flow (pair)
  uint32_t channels = 4;        // ring allreduce
  uint32_t slices = 4;          // ring allreduce: pieces per chunk, pipelined
  uint32_t qps_per_pair = 1;    // alltoall
  bool shared_qp = false;       // alltoall: one QP per pair carries both directions
  uint32_t jobs = 1;            // concurrent jobs of this kind
  bool interleaved = false;     // job placement: host h in job h % jobs (else consecutive)
  double background = 0;        // load fraction of every host link, 0 = none
  uint64_t background_bytes = 64 * 1024;  // per background message
  uint32_t incast_senders = 0;  // 0 = all other hosts
  bool incast_spread = false;   // senders spaced evenly over hosts 1..n-1 (else 1..senders)
  uint64_t seed = 1;
};

std::string check(const WorkloadConfig& w);

struct Flow {
  uint32_t src = 0, dst = 0, conn = 0;
  uint32_t len = 0;
  uint32_t tag = 0;  // the workload's own (phase, channel, step, slice)
  int64_t start_ns = -1, end_ns = -1;
};

// One job of several sharing the fabric (WorkloadConfig::jobs), or the
// background traffic (kind "background": completion is not defined).
struct JobSummary {
  std::string kind;
  uint32_t hosts = 0;
  bool finished = false;
  double completion_us = 0, ideal_us = 0, ratio = 0;
  uint64_t posted = 0;               // messages posted (background: offered)
  uint64_t messages = 0, bytes = 0;  // delivered
};

class Workload : public NicHandler {
 public:
  // link_bps paces the background traffic.
  static std::unique_ptr<Workload> make(const WorkloadConfig& w, uint64_t link_bps);
  ~Workload() override = default;

  // Host memory each host needs (the simulator provides it, stored or
  // verified: host_memory.h).
  virtual uint64_t memory_bytes(uint32_t host) const = 0;
  // Opens and connects the QPs and declares the memory layout (fills the
  // source buffers, names the receive buffers).
  virtual void setup(std::vector<Nic*> nics) = 0;
  // Posts the first messages (call at the synchronized start time).
  virtual void start() = 0;
  // "" if every receiver holds exactly the expected bytes, else the first
  // problem ("host 3 byte 4096: 0x12 expected 0x34"; verifying memory also
  // "host 3 bytes 8192..12288 never written (...)").
  virtual std::string verify() = 0;
  // True when the hosts compute on received bytes (the allreduce
  // reductions), so that host memory must store them (MemoryMode::kStore).
  virtual bool computes() const { return false; }
  // Line-rate lower bound on the completion time, payload bytes only, for
  // this fabric (host links and, oversubscribed, leaf uplinks).
  virtual double ideal_ns(const TopologyConfig& t) const = 0;

  bool finished() const { return remaining_ == 0; }
  int64_t start_ns() const { return start_ns_; }
  int64_t finish_ns() const { return finish_ns_; }
  virtual std::string error() const { return error_; }
  // The flows the completion statistics are over (jobs, not background).
  virtual const std::vector<Flow>& flows() const { return flows_; }
  // Each job's own figures when several share the fabric; else empty.
  virtual std::vector<JobSummary> jobs(const TopologyConfig&) const { return {}; }
  const WorkloadConfig& config() const { return cfg_; }

  void on_recv(uint32_t host, uint32_t conn, uint32_t imm, uint32_t len) override;
  void on_send_done(uint32_t host, uint32_t conn, uint64_t wr_id, bool ok) override;

  // The immediate (and wr_id) carries the flow index in its low 28 bits and
  // the owner (a job of several, the background) in the top 4.
  static constexpr uint32_t kFlowBits = 28;
  static constexpr uint32_t kFlowMask = (1u << kFlowBits) - 1;
  // Set by the owner of several: this one's tag, and what to call instead
  // of stopping the simulation when the last expected message arrived.
  void set_owner(uint32_t tag, std::function<void()> done) {
    imm_tag_ = tag << kFlowBits;
    on_done_ = std::move(done);
  }

 protected:
  explicit Workload(const WorkloadConfig& w) : cfg_(w) {}
  // A message of len bytes from local offset to the peer's offset.
  void post(uint32_t src, uint32_t conn, uint64_t off, uint64_t remote_off, uint32_t len,
            uint32_t tag);
  // QP pairs between a and b; returns (conn at a, conn at b). One-way
  // (a sends, b receives) unless both_ways.
  std::pair<uint32_t, uint32_t> connect(uint32_t a, uint32_t b, bool both_ways = false);
  virtual void on_arrival(const Flow& f) = 0;
  void expect(uint64_t n) { remaining_ += n; }
  void mark_start();
  // One expected message arrived (the last: the workload is finished).
  void count_done();
  void set_error(const std::string& e) {
    if (error_.empty()) error_ = e;
  }

  WorkloadConfig cfg_;
  std::vector<Nic*> nics_;
  std::vector<Flow> flows_;

 private:
  uint64_t remaining_ = 0;
  int64_t start_ns_ = 0, finish_ns_ = -1;
  std::string error_;
  uint32_t imm_tag_ = 0;
  std::function<void()> on_done_;  // empty: stop the simulation
};

}  // namespace metaroce::fabric
