// A one-way link: an output queue (drop-tail, ECN CE-marking threshold),
// serialization at `bps`, propagation delay, and injectable impairments
// (loss, reordering, duplication, corruption). Random choices come from the
// network's one Rng.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tests/simnet/rng.h"
#include "tests/simnet/scheduler.h"

namespace metaroce::simnet {

using Frame = std::vector<uint8_t>;

class Node {
 public:
  virtual ~Node() = default;
  virtual void receive(Frame frame) = 0;
};

struct Impairments {
  double loss = 0;         // probability a frame is dropped on the wire
  double reorder = 0;      // probability a frame is delayed by up to reorder_ns
  Time reorder_ns = 20'000;
  double duplicate = 0;    // probability a frame is delivered twice
  double corrupt = 0;      // probability one byte of the transport part is flipped
};

struct LinkConfig {
  uint64_t bps = 25'000'000'000;
  Time delay_ns = 1'000;               // propagation
  uint64_t queue_bytes = 1'000'000;    // drop-tail capacity (bytes waiting + in service)
  uint64_t ecn_bytes = 100'000;        // CE-mark ECT packets arriving above this; 0 = never
  Impairments imp;
};

struct LinkStats {
  uint64_t frames_in = 0, frames_out = 0, bytes_out = 0;
  uint64_t drops_queue = 0, drops_loss = 0, duplicates = 0, corruptions = 0, reorders = 0;
  uint64_t ce_marked = 0;
  uint64_t max_queue_bytes = 0;
  // Time integral of queue bytes, for the time-average.
  double queue_byte_ns = 0;
  Time first_arrival = 0, last_change = 0;
  Time busy_ns = 0;  // time spent serializing
};

class Link {
 public:
  Link(std::string name, Scheduler& sched, Rng& rng, Node& to, const LinkConfig& cfg);
  void send(Frame frame);
  const LinkStats& stats() const { return stats_; }
  LinkConfig& config() { return cfg_; }
  const std::string& name() const { return name_; }
  uint64_t queue_bytes() const { return queued_; }
  double avg_queue_bytes(Time now) const;
  void reset_stats();
  // Optional trace of every event on this link (determinism tests).
  void set_trace(std::vector<std::string>* trace) { trace_ = trace; }
  // Called for every frame as it finishes serialization (before loss).
  void set_tap(std::function<void(const Frame&)> tap) { tap_ = std::move(tap); }

 private:
  void account(Time now);
  void depart(Frame frame, uint64_t size);
  void deliver(Frame frame, Time delay);

  std::string name_;
  Scheduler& sched_;
  Rng& rng_;
  Node& to_;
  LinkConfig cfg_;
  LinkStats stats_;
  uint64_t queued_ = 0;
  Time busy_until_ = 0;
  std::vector<std::string>* trace_ = nullptr;
  std::function<void(const Frame&)> tap_;
};

}  // namespace metaroce::simnet
