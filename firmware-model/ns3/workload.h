// Collectives and traffic patterns as libraries run them, over Nic
// connections with RDMA WRITE WITH IMMEDIATE. Each message is a flow (its
// id travels as the immediate); a step starts when the messages it depends
// on have arrived (a receive completion), never on a timer. Payload bytes
// are a seeded pattern per source host; at the end every receiver's memory
// is compared byte for byte with what the algorithm must have produced.
//
//   allreduce-ring   reduce-scatter + all-gather on C rings (NCCL channels),
//                    each chunk cut into slices that are forwarded as soon as
//                    they arrive; the reduction is byte-wise addition mod 256.
//   allreduce-hd     recursive halving reduce-scatter + recursive doubling
//                    all-gather (power-of-two host counts).
//   alltoall         every ordered pair, the block split over k QPs.
//   incast           n senders -> host 0.
//   permutation      each host sends to one other (seeded derangement).
#pragma once

#include <cstdint>
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
  uint32_t incast_senders = 0;  // 0 = all other hosts
  uint64_t seed = 1;
};

std::string check(const WorkloadConfig& w);

struct Flow {
  uint32_t src = 0, dst = 0, conn = 0;
  uint32_t len = 0;
  uint32_t tag = 0;  // the workload's own (phase, channel, step, slice)
  int64_t start_ns = -1, end_ns = -1;
};

class Workload : public NicHandler {
 public:
  static std::unique_ptr<Workload> make(const WorkloadConfig& w);
  ~Workload() override = default;

  // Host memory each host needs (the simulator allocates it).
  virtual uint64_t memory_bytes(uint32_t host) const = 0;
  // Opens and connects the QPs and fills the source memory.
  virtual void setup(std::vector<Nic*> nics) = 0;
  // Posts the first messages (call at the synchronized start time).
  virtual void start() = 0;
  // "" if every receiver holds exactly the expected bytes, else the first
  // mismatch ("host 3 byte 4096: 0x12 expected 0x34").
  virtual std::string verify() = 0;
  // Line-rate lower bound on the completion time, payload bytes only, for
  // this fabric (host links and, oversubscribed, leaf uplinks).
  virtual double ideal_ns(const TopologyConfig& t) const = 0;

  bool finished() const { return remaining_ == 0; }
  int64_t start_ns() const { return start_ns_; }
  int64_t finish_ns() const { return finish_ns_; }
  const std::string& error() const { return error_; }
  const std::vector<Flow>& flows() const { return flows_; }
  const WorkloadConfig& config() const { return cfg_; }

  void on_recv(uint32_t host, uint32_t conn, uint32_t imm, uint32_t len) final;
  void on_send_done(uint32_t host, uint32_t conn, uint64_t wr_id, bool ok) final;

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

  WorkloadConfig cfg_;
  std::vector<Nic*> nics_;
  std::vector<Flow> flows_;

 private:
  uint64_t remaining_ = 0;
  int64_t start_ns_ = 0, finish_ns_ = -1;
  std::string error_;
};

// The byte pattern of host `src` at offset `i` of its source data.
uint8_t pattern(uint32_t src, uint64_t i, uint64_t seed);
void fill_pattern(std::span<uint8_t> dst, uint32_t src, uint64_t first, uint64_t seed);

}  // namespace metaroce::fabric
