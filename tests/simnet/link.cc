#include "tests/simnet/link.h"

#include <algorithm>

#include "tests/simnet/frame_util.h"

namespace metaroce::simnet {

Link::Link(std::string name, Scheduler& sched, Rng& rng, Node& to, const LinkConfig& cfg)
    : name_(std::move(name)), sched_(sched), rng_(rng), to_(to), cfg_(cfg) {}

void Link::account(Time now) {
  if (now > stats_.last_change) {
    stats_.queue_byte_ns += static_cast<double>(queued_) * static_cast<double>(now - stats_.last_change);
    stats_.last_change = now;
  }
}

double Link::avg_queue_bytes(Time now) const {
  double integral = stats_.queue_byte_ns;
  if (now > stats_.last_change) integral += static_cast<double>(queued_) * (now - stats_.last_change);
  const Time span = now > stats_.first_arrival ? now - stats_.first_arrival : 0;
  return span ? integral / static_cast<double>(span) : 0;
}

void Link::reset_stats() {
  stats_ = LinkStats{};
  stats_.first_arrival = stats_.last_change = sched_.now();
}

void Link::send(Frame frame) {
  const Time now = sched_.now();
  if (stats_.frames_in++ == 0 && stats_.last_change == 0) stats_.first_arrival = stats_.last_change = now;
  account(now);
  const uint64_t size = frame.size();
  if (queued_ + size > cfg_.queue_bytes) {
    ++stats_.drops_queue;
    if (trace_) trace_->push_back(name_ + " qdrop " + std::to_string(now));
    return;
  }
  if (cfg_.ecn_bytes && queued_ > cfg_.ecn_bytes && mark_ce(frame)) ++stats_.ce_marked;
  queued_ += size;
  stats_.max_queue_bytes = std::max(stats_.max_queue_bytes, queued_);
  const Time ser = static_cast<Time>((size * 8'000'000'000ull + cfg_.bps - 1) / cfg_.bps);
  const Time start = std::max(now, busy_until_);
  busy_until_ = start + ser;
  stats_.busy_ns += ser;
  sched_.at(busy_until_, [this, f = std::move(frame), size]() mutable { depart(std::move(f), size); });
}

void Link::depart(Frame frame, uint64_t size) {
  account(sched_.now());
  queued_ -= size;
  ++stats_.frames_out;
  stats_.bytes_out += size;
  if (trace_) trace_->push_back(name_ + " tx " + std::to_string(sched_.now()) + " " + std::to_string(size));
  if (tap_) tap_(frame);
  const Impairments& imp = cfg_.imp;
  if (rng_.chance(imp.loss)) {
    ++stats_.drops_loss;
    return;
  }
  if (rng_.chance(imp.corrupt)) {
    auto info = inspect_frame(frame);
    // Flip one byte after the UDP header: the ICRC must catch it.
    const size_t from = info ? info->l4_offset + 8 : 0;
    if (from < frame.size()) {
      frame[from + rng_.below(frame.size() - from)] ^= static_cast<uint8_t>(1 + rng_.below(255));
      ++stats_.corruptions;
    }
  }
  Time delay = cfg_.delay_ns;
  if (rng_.chance(imp.reorder)) {
    delay += 1 + rng_.below(imp.reorder_ns);
    ++stats_.reorders;
  }
  if (rng_.chance(imp.duplicate)) {
    ++stats_.duplicates;
    deliver(frame, delay + 1 + rng_.below(imp.reorder_ns ? imp.reorder_ns : 1000));
  }
  deliver(std::move(frame), delay);
}

void Link::deliver(Frame frame, Time delay) {
  sched_.after(delay, [this, f = std::move(frame)]() mutable { to_.receive(std::move(f)); });
}

}  // namespace metaroce::simnet
