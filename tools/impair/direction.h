// One direction of the hop, sans I/O: decides per frame what happens to it
// (forward now, drop, hold until a departure time, mark, corrupt, copy) and
// counts every decision by reason. Time is passed in (CLOCK_MONOTONIC ns),
// randomness comes from a seeded generator: the same seed and the same input
// give the same decisions. The event loop (forwarder.cc) moves the frames.
#pragma once

#include <cstdint>
#include <queue>
#include <span>
#include <string>
#include <vector>

#include "tools/impair/config.h"

namespace metaroce::impair {

// name, meaning. Every frame received ends in exactly one of: passed
// (forwarded untouched, not impaired), a drop reason, or held (then sent or
// dropped_tx_error). forwarded counts frames handed to the other leg.
#define MROCE_IMPAIR_COUNTERS(X)                                                   \
  X(rx_frames, "frames received on this direction's ingress leg")                 \
  X(rx_bytes, "bytes of those frames (Ethernet header .. payload)")               \
  X(passed, "forwarded at once, untouched (not UDP to --port, or no impairment)") \
  X(matched, "frames subject to impairment")                                     \
  X(forwarded, "frames handed to the egress leg (duplicates included)")           \
  X(forwarded_bytes, "bytes of those frames")                                    \
  X(dropped_loss, "dropped by --loss")                                           \
  X(dropped_burst, "dropped in a --burst (Gilbert-Elliott bad state)")            \
  X(dropped_queue_full, "dropped: --rate queue at --queue capacity")              \
  X(dropped_hold_limit, "dropped: --hold-limit bytes already held")               \
  X(dropped_tx_error, "the egress leg refused the frame (counted, not retried)")  \
  X(dropped_tx_busy, "egress socket full for an untouched frame (retried, then dropped)") \
  X(dropped_rx_truncated, "larger than the receive buffer, or shorter than the prefix") \
  X(dropped_rx_kernel, "dropped by the kernel before the hop read it (socket full)") \
  X(delayed, "held for --delay/--jitter")                                        \
  X(reordered, "held --reorder GAP longer than the frames behind them")          \
  X(duplicated, "sent a second time (--dup)")                                    \
  X(corrupted, "one UDP payload byte flipped (--corrupt)")                        \
  X(corrupt_skipped, "drawn for --corrupt but carry no UDP payload")              \
  X(ecn_marked, "ECT frames marked CE above --ecn-threshold")                    \
  X(ecn_not_ect, "above --ecn-threshold but Not-ECT: left unmarked")              \
  X(queue_max_bytes, "largest --rate queue backlog seen, bytes")                  \
  X(held_max_bytes, "most bytes held at once")

struct Counters {
#define MROCE_IMPAIR_FIELD(name, doc) uint64_t name = 0;
  MROCE_IMPAIR_COUNTERS(MROCE_IMPAIR_FIELD)
#undef MROCE_IMPAIR_FIELD
};

// {"rx_frames": 1, ...}
std::string to_json(const Counters& c);

// splitmix64: small, fast, and the same sequence everywhere.
class Rng {
 public:
  explicit Rng(uint64_t seed) : s_(seed) {}
  uint64_t next();
  double uniform();  // [0, 1)
  bool chance(double p) { return p > 0 && uniform() < p; }
 private:
  uint64_t s_;
};

struct Held {
  uint64_t due_ns = 0;
  uint64_t order = 0;           // arrival order: ties leave first-in first-out
  std::vector<uint8_t> bytes;   // prefix + Ethernet frame
};

class Direction {
 public:
  // prefix_len: opaque bytes before the Ethernet header (virtio_net_hdr).
  Direction(const DirConfig& cfg, bool all_traffic, uint16_t udp_port, size_t prefix_len, uint64_t seed);

  enum class Verdict { kForward, kConsumed };
  // kForward: send `bytes` on at once, untouched. kConsumed: dropped or held.
  Verdict on_frame(uint64_t now_ns, std::span<const uint8_t> bytes);

  uint64_t next_due_ns() const;  // UINT64_MAX: nothing held
  bool pop_due(uint64_t now_ns, Held* out);
  void unpop(Held h);            // not sent (egress full): first in line again
  void recycle(std::vector<uint8_t>&& buf);

  void count_sent(size_t frame_len);
  Counters& counters() { return c_; }
  const Counters& counters() const { return c_; }
  size_t held_frames() const { return held_.size(); }

 private:
  struct Later {
    bool operator()(const Held& a, const Held& b) const {
      return a.due_ns != b.due_ns ? a.due_ns > b.due_ns : a.order > b.order;
    }
  };
  bool lost();
  bool rate_admit(uint64_t now_ns, size_t len, uint64_t* depart_ns, bool* over_threshold);
  uint64_t delay_ns();
  void corrupt(std::vector<uint8_t>& b);
  void mark(std::vector<uint8_t>& b);
  void hold(uint64_t due_ns, std::vector<uint8_t>&& b);
  std::vector<uint8_t> take_buffer(std::span<const uint8_t> bytes);

  DirConfig cfg_;
  bool all_;
  uint16_t port_;
  size_t prefix_;
  bool impairs_;
  Rng rng_;
  Counters c_;
  bool bad_state_ = false;        // Gilbert-Elliott
  uint64_t link_free_ns_ = 0;     // --rate: when the bottleneck finishes the last frame
  uint64_t last_due_ns_ = 0;      // in-order departures (jitter never reorders)
  uint64_t order_ = 0;
  uint64_t held_bytes_ = 0;
  std::priority_queue<Held, std::vector<Held>, Later> held_;
  std::vector<std::vector<uint8_t>> pool_;
};

}  // namespace metaroce::impair
