#include "tools/impair/direction.h"

#include <algorithm>
#include <cstdio>
#include <limits>

#include "tools/impair/frame.h"

namespace metaroce::impair {

std::string to_json(const Counters& c) {
  std::string s = "{";
  char buf[96];
#define MROCE_IMPAIR_JSON(name, doc)                                                     \
  snprintf(buf, sizeof buf, "%s\"" #name "\": %llu", s.size() > 1 ? ", " : "",           \
           static_cast<unsigned long long>(c.name));                                      \
  s += buf;
  MROCE_IMPAIR_COUNTERS(MROCE_IMPAIR_JSON)
#undef MROCE_IMPAIR_JSON
  return s + "}";
}

uint64_t Rng::next() {
  uint64_t z = (s_ += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

double Rng::uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

Direction::Direction(const DirConfig& cfg, bool all_traffic, uint16_t udp_port, size_t prefix_len,
                     uint64_t seed)
    : cfg_(cfg), all_(all_traffic), port_(udp_port), prefix_(prefix_len), impairs_(cfg.impairs()),
      rng_(seed) {}

// Gilbert-Elliott first (a burst drops every frame it covers), then Bernoulli.
bool Direction::lost() {
  if (cfg_.burst_start > 0) {
    if (!bad_state_ && rng_.chance(cfg_.burst_start)) bad_state_ = true;
    if (bad_state_) {
      if (rng_.chance(1.0 / cfg_.burst_len)) bad_state_ = false;
      ++c_.dropped_burst;
      return true;
    }
  }
  if (rng_.chance(cfg_.loss)) {
    ++c_.dropped_loss;
    return true;
  }
  return false;
}

// The bottleneck is a FIFO drained at rate_bps: its backlog is what has been
// admitted and not yet serialized. Tail drop at the capacity.
bool Direction::rate_admit(uint64_t now, size_t len, uint64_t* depart, bool* over_threshold) {
  uint64_t backlog = 0;
  if (link_free_ns_ > now)
    backlog = static_cast<uint64_t>(static_cast<double>(link_free_ns_ - now) * cfg_.rate_bps / 8e9);
  if (backlog + len > cfg_.queue_bytes) {
    ++c_.dropped_queue_full;
    return false;
  }
  *over_threshold = cfg_.ecn_threshold && backlog + len > cfg_.ecn_threshold;
  c_.queue_max_bytes = std::max(c_.queue_max_bytes, backlog + len);
  uint64_t serialize = static_cast<uint64_t>(static_cast<double>(len) * 8e9 / cfg_.rate_bps);
  link_free_ns_ = std::max(now, link_free_ns_) + serialize;
  *depart = link_free_ns_;
  return true;
}

uint64_t Direction::delay_ns() {
  if (!cfg_.jitter_ns) return cfg_.delay_ns;
  double u = rng_.uniform() * 2 - 1;  // [-1, 1)
  return static_cast<uint64_t>(static_cast<double>(cfg_.delay_ns) + u * cfg_.jitter_ns);
}

void Direction::corrupt(std::vector<uint8_t>& b) {
  std::span<uint8_t> f(b.data() + prefix_, b.size() - prefix_);
  auto fi = parse_udp(f);
  if (!fi || fi->payload_len == 0) {
    ++c_.corrupt_skipped;
    return;
  }
  size_t at = fi->payload_offset + rng_.next() % fi->payload_len;
  f[at] ^= static_cast<uint8_t>(1 + rng_.next() % 255);
  ++c_.corrupted;
}

void Direction::mark(std::vector<uint8_t>& b) {
  std::span<uint8_t> f(b.data() + prefix_, b.size() - prefix_);
  auto fi = parse_udp(f);
  if (!fi || ecn_bits(f, *fi) == 0) {
    ++c_.ecn_not_ect;
    return;
  }
  if (ecn_bits(f, *fi) != 3) mark_ce(f, *fi);
  ++c_.ecn_marked;
}

std::vector<uint8_t> Direction::take_buffer(std::span<const uint8_t> bytes) {
  std::vector<uint8_t> b;
  if (!pool_.empty()) {
    b = std::move(pool_.back());
    pool_.pop_back();
  }
  b.assign(bytes.begin(), bytes.end());
  return b;
}

void Direction::recycle(std::vector<uint8_t>&& buf) {
  // Bounded: a buffer keeps the capacity of the largest frame it held (up
  // to 64 KiB), so at most 1024 of them (64 MiB) wait for reuse.
  if (pool_.size() < 1024) pool_.push_back(std::move(buf));
}

void Direction::hold(uint64_t due, std::vector<uint8_t>&& b) {
  held_bytes_ += b.size();
  c_.held_max_bytes = std::max(c_.held_max_bytes, held_bytes_);
  held_.push(Held{due, order_++, std::move(b)});
}

Direction::Verdict Direction::on_frame(uint64_t now, std::span<const uint8_t> bytes) {
  ++c_.rx_frames;
  if (bytes.size() < prefix_) {  // no room for the prefix: nothing to forward
    ++c_.dropped_rx_truncated;
    return Verdict::kConsumed;
  }
  size_t len = bytes.size() - prefix_;
  c_.rx_bytes += len;
  bool match = impairs_;
  if (match && !all_) {
    auto fi = parse_udp(bytes.subspan(prefix_));
    match = fi && fi->udp_dst_port == port_;
  }
  if (!match) {
    ++c_.passed;
    return Verdict::kForward;
  }
  ++c_.matched;
  if (lost()) return Verdict::kConsumed;
  uint64_t due = now;
  bool over = false;
  if (cfg_.rate_bps && !rate_admit(now, len, &due, &over)) return Verdict::kConsumed;
  if (held_bytes_ + bytes.size() > cfg_.hold_limit) {
    ++c_.dropped_hold_limit;
    return Verdict::kConsumed;
  }
  std::vector<uint8_t> b = take_buffer(bytes);
  if (over) mark(b);
  if (rng_.chance(cfg_.corrupt)) corrupt(b);
  if (cfg_.delay_ns || cfg_.jitter_ns) {
    due += delay_ns();
    ++c_.delayed;
  }
  due = std::max(due, last_due_ns_);
  last_due_ns_ = due;
  if (rng_.chance(cfg_.reorder)) {
    due += cfg_.reorder_gap_ns;
    ++c_.reordered;
  }
  if (rng_.chance(cfg_.duplicate)) {
    hold(due, take_buffer(b));
    ++c_.duplicated;
  }
  hold(due, std::move(b));
  return Verdict::kConsumed;
}

uint64_t Direction::next_due_ns() const {
  return held_.empty() ? std::numeric_limits<uint64_t>::max() : held_.top().due_ns;
}

bool Direction::pop_due(uint64_t now, Held* out) {
  if (held_.empty() || held_.top().due_ns > now) return false;
  // priority_queue::top() is const; the element is moved out before pop().
  *out = std::move(const_cast<Held&>(held_.top()));
  held_.pop();
  held_bytes_ -= out->bytes.size();
  return true;
}

void Direction::unpop(Held h) {
  held_bytes_ += h.bytes.size();
  held_.push(std::move(h));
}

void Direction::count_sent(size_t frame_len) {
  ++c_.forwarded;
  c_.forwarded_bytes += frame_len;
}

}  // namespace metaroce::impair
