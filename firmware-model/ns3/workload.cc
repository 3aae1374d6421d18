#include "firmware-model/ns3/workload.h"

#include <algorithm>
#include <bit>
#include <numeric>
#include <sstream>

namespace metaroce::fabric {

namespace {

uint64_t mix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// tag = phase(2) | channel(6) | step(12) | slice(12)
constexpr uint32_t kPhaseRs = 0, kPhaseAg = 1;
uint32_t tag(uint32_t phase, uint32_t ch, uint32_t step, uint32_t slice) {
  return phase << 30 | ch << 24 | step << 12 | slice;
}
uint32_t tag_phase(uint32_t t) { return t >> 30; }
uint32_t tag_channel(uint32_t t) { return (t >> 24) & 63; }
uint32_t tag_step(uint32_t t) { return (t >> 12) & 4095; }
uint32_t tag_slice(uint32_t t) { return t & 4095; }

int64_t now_ns() { return ns3::Simulator::Now().GetNanoSeconds(); }

double line_ns(uint64_t bytes, uint64_t bps) {
  return static_cast<double>(bytes) * 8e9 / static_cast<double>(bps);
}

std::string mismatch(uint32_t host, uint64_t off, uint8_t got, uint8_t want) {
  std::ostringstream e;
  e << "host " << host << " byte " << off << ": 0x" << std::hex << int{got} << " expected 0x"
    << int{want};
  return e.str();
}

}  // namespace

uint8_t pattern(uint32_t src, uint64_t i, uint64_t seed) {
  return static_cast<uint8_t>(mix(seed * 0x100000001B3ull ^ uint64_t{src} << 40 ^ (i >> 3)) >>
                              ((i & 7) * 8));
}

void fill_pattern(std::span<uint8_t> dst, uint32_t src, uint64_t first, uint64_t seed) {
  uint64_t i = 0;
  for (; i < dst.size() && ((first + i) & 7); ++i) dst[i] = pattern(src, first + i, seed);
  for (; i + 8 <= dst.size(); i += 8) {  // a whole word of the pattern per mix()
    uint64_t w = mix(seed * 0x100000001B3ull ^ uint64_t{src} << 40 ^ ((first + i) >> 3));
    for (int b = 0; b < 8; ++b, w >>= 8) dst[i + b] = static_cast<uint8_t>(w);
  }
  for (; i < dst.size(); ++i) dst[i] = pattern(src, first + i, seed);
}

namespace {
// The byte-wise sum mod 256 over all ranks of their pattern: what every
// rank of an allreduce must hold.
std::vector<uint8_t> reduced_pattern(uint32_t ranks, uint64_t size, uint64_t seed) {
  std::vector<uint8_t> want(size, 0), one(size);
  for (uint32_t r = 0; r < ranks; ++r) {
    fill_pattern(one, r, 0, seed);
    for (uint64_t i = 0; i < size; ++i) want[i] = static_cast<uint8_t>(want[i] + one[i]);
  }
  return want;
}
}  // namespace

// ---- the common part: flows, posting, arrival ----

void Workload::mark_start() { start_ns_ = now_ns(); }

std::pair<uint32_t, uint32_t> Workload::connect(uint32_t a, uint32_t b, bool both_ways) {
  const uint32_t ca = nics_[a]->open(b, both_ways ? ConnUse::kBoth : ConnUse::kSend);
  const uint32_t cb = nics_[b]->open(a, both_ways ? ConnUse::kBoth : ConnUse::kRecv);
  nics_[a]->connect(ca, nics_[b]->local_addr(cb));
  nics_[b]->connect(cb, nics_[a]->local_addr(ca));
  return {ca, cb};
}

void Workload::post(uint32_t src, uint32_t conn, uint64_t off, uint64_t remote_off, uint32_t len,
                    uint32_t t) {
  Flow f;
  f.src = src;
  f.conn = conn;
  f.len = len;
  f.tag = t;
  f.start_ns = now_ns();
  const uint32_t id = static_cast<uint32_t>(flows_.size());
  flows_.push_back(f);
  Nic& n = *nics_[src];
  if (!n.write_imm(conn, n.memory().base() + off, HostMemory::kBase + remote_off, len, id, id)) {
    if (error_.empty()) error_ = "host " + std::to_string(src) + ": write_imm refused";
  }
}

void Workload::on_recv(uint32_t host, uint32_t, uint32_t imm, uint32_t len) {
  if (imm >= flows_.size() || flows_[imm].end_ns >= 0 || flows_[imm].len != len) {
    if (error_.empty()) error_ = "host " + std::to_string(host) + ": unexpected immediate";
    return;
  }
  Flow& f = flows_[imm];
  f.dst = host;
  f.end_ns = now_ns();
  const Flow copy = f;  // on_arrival may post, growing flows_
  on_arrival(copy);
  if (--remaining_ == 0) {
    finish_ns_ = now_ns();
    ns3::Simulator::Stop();
  }
}

void Workload::on_send_done(uint32_t host, uint32_t, uint64_t wr_id, bool ok) {
  if (!ok && error_.empty()) {
    error_ = "host " + std::to_string(host) + ": write " + std::to_string(wr_id) + " failed";
    ns3::Simulator::Stop();
  }
}

// ---- ring allreduce ----

class RingAllreduce final : public Workload {
 public:
  explicit RingAllreduce(const WorkloadConfig& w) : Workload(w) {
    n_ = w.hosts;
    slice_ = std::max<uint64_t>(1, w.bytes / (uint64_t{w.channels} * n_ * w.slices));
    chunk_ = slice_ * w.slices;
    size_ = chunk_ * n_ * w.channels;
  }
  uint64_t memory_bytes(uint32_t) const override {
    return size_ + uint64_t{cfg_.channels} * (n_ - 1) * chunk_;
  }
  void setup(std::vector<Nic*> nics) override {
    nics_ = std::move(nics);
    right_.assign(n_, std::vector<uint32_t>(cfg_.channels));
    for (uint32_t r = 0; r < n_; ++r) {
      for (uint32_t c = 0; c < cfg_.channels; ++c) right_[r][c] = connect(r, (r + 1) % n_).first;
      fill_pattern(nics_[r]->memory().at(HostMemory::kBase, size_), r, 0, cfg_.seed);
    }
    expect(uint64_t{n_} * 2 * (n_ - 1) * cfg_.channels * cfg_.slices);
  }
  void start() override {
    mark_start();
    for (uint32_t r = 0; r < n_; ++r) {
      for (uint32_t c = 0; c < cfg_.channels; ++c) {
        for (uint32_t s = 0; s < cfg_.slices; ++s) send_rs(r, c, 0, r, s);
      }
    }
  }
  std::string verify() override {
    const std::vector<uint8_t> want = reduced_pattern(n_, size_, cfg_.seed);
    for (uint32_t r = 0; r < n_; ++r) {
      auto got = nics_[r]->memory().at(HostMemory::kBase, size_);
      auto [a, b] = std::mismatch(got.begin(), got.end(), want.begin());
      if (a != got.end()) return mismatch(r, a - got.begin(), *a, *b);
    }
    return "";
  }
  double ideal_ns(const TopologyConfig& t) const override {
    return line_ns(2 * (n_ - 1) * (size_ / n_), t.link_bps);
  }

 private:
  uint64_t data_off(uint32_t c, uint32_t j, uint32_t s) const {
    return (uint64_t{c} * n_ + j) * chunk_ + uint64_t{s} * slice_;
  }
  uint64_t scratch_off(uint32_t c, uint32_t k, uint32_t s) const {
    return size_ + (uint64_t{c} * (n_ - 1) + k) * chunk_ + uint64_t{s} * slice_;
  }
  void send_rs(uint32_t r, uint32_t c, uint32_t k, uint32_t j, uint32_t s) {
    post(r, right_[r][c], data_off(c, j, s), scratch_off(c, k, s), static_cast<uint32_t>(slice_),
         tag(kPhaseRs, c, k, s));
  }
  void send_ag(uint32_t r, uint32_t c, uint32_t k, uint32_t j, uint32_t s) {
    post(r, right_[r][c], data_off(c, j, s), data_off(c, j, s), static_cast<uint32_t>(slice_),
         tag(kPhaseAg, c, k, s));
  }
  void on_arrival(const Flow& f) override {
    const uint32_t q = f.dst, c = tag_channel(f.tag), k = tag_step(f.tag), s = tag_slice(f.tag);
    if (tag_phase(f.tag) == kPhaseRs) {
      const uint32_t j = (q + 2 * n_ - 1 - k) % n_;
      HostMemory& m = nics_[q]->memory();
      auto dst = m.at(HostMemory::kBase + data_off(c, j, s), slice_);
      auto src = m.at(HostMemory::kBase + scratch_off(c, k, s), slice_);
      for (uint64_t i = 0; i < slice_; ++i) dst[i] = static_cast<uint8_t>(dst[i] + src[i]);
      if (k + 2 < n_) {
        send_rs(q, c, k + 1, j, s);
      } else {
        send_ag(q, c, 0, j, s);  // chunk j is fully reduced here
      }
    } else if (k + 2 < n_) {
      send_ag(q, c, k + 1, (q + n_ - k) % n_, s);
    }
  }

  uint32_t n_;
  uint64_t slice_, chunk_, size_;
  std::vector<std::vector<uint32_t>> right_;  // [rank][channel] -> conn to rank+1
};

// ---- halving-doubling allreduce ----

class HalvingDoubling final : public Workload {
 public:
  explicit HalvingDoubling(const WorkloadConfig& w) : Workload(w) {
    n_ = w.hosts;
    steps_ = static_cast<uint32_t>(std::countr_zero(n_));
    size_ = std::max<uint64_t>(n_, w.bytes / n_ * n_);
  }
  uint64_t memory_bytes(uint32_t) const override { return 2 * size_; }
  void setup(std::vector<Nic*> nics) override {
    nics_ = std::move(nics);
    conn_.assign(n_, std::vector<uint32_t>(steps_));
    for (uint32_t k = 0; k < steps_; ++k) {
      const uint32_t d = n_ >> (k + 1);
      for (uint32_t r = 0; r < n_; ++r) {
        if (r & d) continue;
        auto [a, b] = connect(r, r ^ d, true);
        conn_[r][k] = a;
        conn_[r ^ d][k] = b;
      }
    }
    for (uint32_t r = 0; r < n_; ++r) {
      fill_pattern(nics_[r]->memory().at(HostMemory::kBase, size_), r, 0, cfg_.seed);
    }
    rs_in_.assign(n_, std::vector<bool>(steps_));
    ag_in_ = rs_in_;
    rs_next_.assign(n_, 0);
    ag_next_.assign(n_, 0);
    expect(uint64_t{n_} * 2 * steps_);
  }
  void start() override {
    mark_start();
    for (uint32_t r = 0; r < n_; ++r) send_rs(r, 0);
  }
  std::string verify() override {
    const std::vector<uint8_t> want = reduced_pattern(n_, size_, cfg_.seed);
    for (uint32_t r = 0; r < n_; ++r) {
      auto got = nics_[r]->memory().at(HostMemory::kBase, size_);
      auto [a, b] = std::mismatch(got.begin(), got.end(), want.begin());
      if (a != got.end()) return mismatch(r, a - got.begin(), *a, *b);
    }
    return "";
  }
  double ideal_ns(const TopologyConfig& t) const override {
    return line_ns(2 * (size_ - size_ / n_), t.link_bps);
  }

 private:
  struct Range {
    uint64_t lo, len;
  };
  // Rank r's range after reduce-scatter step k (k = -1: everything).
  Range kept(uint32_t r, int k) const {
    Range x{0, size_};
    for (int i = 0; i <= k; ++i) {
      x.len /= 2;
      if (r & (n_ >> (i + 1))) x.lo += x.len;
    }
    return x;
  }
  uint64_t scratch(uint32_t k) const { return size_ + (size_ - (size_ >> k)); }
  void send_rs(uint32_t r, uint32_t k) {
    const Range peer = kept(r ^ (n_ >> (k + 1)), static_cast<int>(k));
    post(r, conn_[r][k], peer.lo, scratch(k), static_cast<uint32_t>(peer.len),
         tag(kPhaseRs, 0, k, 0));
  }
  void send_ag(uint32_t r, uint32_t k) {  // exchange the ranges kept after RS step k
    const Range mine = kept(r, static_cast<int>(k));
    post(r, conn_[r][k], mine.lo, mine.lo, static_cast<uint32_t>(mine.len), tag(kPhaseAg, 0, k, 0));
  }
  // Steps with different partners arrive on different QPs, in any order.
  // Reduction commutes, so each arrival is reduced at once; but step k+1
  // may only be sent once every earlier step is in (rs_next_/ag_next_).
  void on_arrival(const Flow& f) override {
    const uint32_t q = f.dst, k = tag_step(f.tag);
    if (tag_phase(f.tag) == kPhaseRs) {
      const Range mine = kept(q, static_cast<int>(k));
      HostMemory& m = nics_[q]->memory();
      auto dst = m.at(HostMemory::kBase + mine.lo, mine.len);
      auto src = m.at(HostMemory::kBase + scratch(k), mine.len);
      for (uint64_t i = 0; i < mine.len; ++i) dst[i] = static_cast<uint8_t>(dst[i] + src[i]);
      rs_in_[q][k] = true;
      while (rs_next_[q] < steps_ && rs_in_[q][rs_next_[q]]) {
        if (++rs_next_[q] < steps_) {
          send_rs(q, rs_next_[q]);
        } else {
          send_ag(q, steps_ - 1);
        }
      }
    } else {
      ag_in_[q][k] = true;
      // AG runs from step steps-1 down to 0; ag_next_ counts steps done.
      while (ag_next_[q] < steps_ && ag_in_[q][steps_ - 1 - ag_next_[q]]) {
        const uint32_t done = steps_ - 1 - ag_next_[q]++;
        if (done > 0) send_ag(q, done - 1);
      }
    }
  }

  std::vector<std::vector<bool>> rs_in_, ag_in_;
  std::vector<uint32_t> rs_next_, ag_next_;
  uint32_t n_, steps_;
  uint64_t size_;
  std::vector<std::vector<uint32_t>> conn_;  // [rank][step] -> conn to the partner
};

// ---- point-to-point patterns: all-to-all, incast, permutation ----

// Each flow writes its source's pattern into the receiver at a slot named
// by the source, so a frame placed at the wrong host, slot or offset shows.
class PointToPoint final : public Workload {
 public:
  explicit PointToPoint(const WorkloadConfig& w) : Workload(w) {
    n_ = w.hosts;
    b_ = std::max<uint64_t>(w.qps_per_pair, w.bytes / w.qps_per_pair * w.qps_per_pair);
    if (w.kind == "alltoall") {
      for (uint32_t s = 0; s < n_; ++s) {
        for (uint32_t d = 1; d < n_; ++d) pairs_.push_back({s, (s + d) % n_});
      }
    } else if (w.kind == "incast") {
      const uint32_t senders = w.incast_senders ? w.incast_senders : n_ - 1;
      for (uint32_t s = 1; s <= senders; ++s) pairs_.push_back({s, 0});
    } else {  // permutation: Sattolo's shuffle gives a single cycle, no fixed point
      std::vector<uint32_t> p(n_);
      std::iota(p.begin(), p.end(), 0);
      uint64_t x = w.seed;
      for (uint32_t i = n_ - 1; i > 0; --i) std::swap(p[i], p[mix(++x) % i]);
      for (uint32_t s = 0; s < n_; ++s) pairs_.push_back({s, p[s]});
    }
    in_.assign(n_, 0);
    for (auto& [s, d] : pairs_) ++in_[d];
  }
  uint64_t memory_bytes(uint32_t h) const override { return b_ + slots(h) * b_; }
  void setup(std::vector<Nic*> nics) override {
    nics_ = std::move(nics);
    // One QP (per k) for each direction of each pair, as NCCL's p2p
    // connections are: a send connection and a receive connection per peer;
    // with shared_qp one QP per pair (per k) carries both directions.
    if (cfg_.shared_qp) {
      connect_shared();
    } else {
      for (auto& [s, d] : pairs_) {
        std::vector<uint32_t> cs;
        for (uint32_t k = 0; k < cfg_.qps_per_pair; ++k) cs.push_back(connect(s, d).first);
        conns_.push_back(cs);
      }
    }
    for (uint32_t h = 0; h < n_; ++h) {
      fill_pattern(nics_[h]->memory().at(HostMemory::kBase, b_), h, 0, cfg_.seed);
    }
    expect(pairs_.size() * cfg_.qps_per_pair);
  }
  void start() override {
    mark_start();
    const uint64_t part = b_ / cfg_.qps_per_pair;
    for (size_t i = 0; i < pairs_.size(); ++i) {
      const auto [s, d] = pairs_[i];
      for (uint32_t k = 0; k < cfg_.qps_per_pair; ++k) {
        post(s, conns_[i][k], k * part, b_ + slot(s, d) * b_ + k * part,
             static_cast<uint32_t>(part), static_cast<uint32_t>(i));
      }
    }
  }
  std::string verify() override {
    std::vector<uint8_t> want;
    for (auto& [s, d] : pairs_) {
      auto got = nics_[d]->memory().at(HostMemory::kBase + b_ + slot(s, d) * b_, b_);
      want.resize(b_);
      fill_pattern(want, s, 0, cfg_.seed);
      auto [a, b] = std::mismatch(got.begin(), got.end(), want.begin());
      if (a != got.end()) return mismatch(d, b_ + slot(s, d) * b_ + (a - got.begin()), *a, *b);
    }
    return "";
  }
  double ideal_ns(const TopologyConfig& t) const override {
    uint64_t most = *std::max_element(in_.begin(), in_.end());
    double bound = line_ns(most * b_, t.link_bps);
    if (cfg_.kind == "alltoall" && t.kind == TopologyConfig::Kind::kLeafSpine) {
      // Oversubscribed: a leaf's cross-leaf bytes over its uplinks.
      const double hpl = std::min(t.hosts, t.hosts_per_leaf);
      const double cross = (n_ - hpl) / (n_ - 1.0);
      bound *= std::max(1.0, cross * t.oversubscription);
    }
    return bound;
  }

 private:
  // Receive slots: all-to-all and incast by source; permutation has one.
  uint64_t slots(uint32_t h) const {
    if (cfg_.kind == "alltoall") return n_;
    if (cfg_.kind == "incast") return h == 0 ? n_ : 0;
    return 1;
  }
  uint64_t slot(uint32_t s, uint32_t) const { return cfg_.kind == "permutation" ? 0 : s; }
  // All-to-all over one QP per pair (per k): pair (s, d) sends on the
  // lower host's end when s < d, on the other end otherwise.
  void connect_shared() {
    std::vector<std::vector<uint32_t>> lo(n_ * uint64_t{n_}), hi(lo.size());
    for (uint32_t a = 0; a < n_; ++a) {
      for (uint32_t b = a + 1; b < n_; ++b) {
        for (uint32_t k = 0; k < cfg_.qps_per_pair; ++k) {
          auto [ca, cb] = connect(a, b, true);
          lo[uint64_t{a} * n_ + b].push_back(ca);
          hi[uint64_t{a} * n_ + b].push_back(cb);
        }
      }
    }
    for (auto& [s, d] : pairs_) {
      const uint64_t key = uint64_t{std::min(s, d)} * n_ + std::max(s, d);
      conns_.push_back(std::move(s < d ? lo[key] : hi[key]));
    }
  }
  void on_arrival(const Flow&) override {}

  uint32_t n_;
  uint64_t b_;
  std::vector<std::pair<uint32_t, uint32_t>> pairs_;
  std::vector<std::vector<uint32_t>> conns_;
  std::vector<uint32_t> in_;
};

std::string check(const WorkloadConfig& w) {
  const std::string& k = w.kind;
  if (k != "allreduce-ring" && k != "allreduce-hd" && k != "alltoall" && k != "incast" &&
      k != "permutation") {
    return "unknown workload '" + k +
           "' (allreduce-ring, allreduce-hd, alltoall, incast, permutation)";
  }
  if (w.hosts < 2) return "need at least 2 hosts";
  if (w.hosts > 4095) return "at most 4095 hosts (the step field of the immediate)";
  if (w.bytes == 0 || w.bytes > (uint64_t{1} << 31)) return "bytes must be in 1..2^31";
  if (k == "allreduce-ring" &&
      (w.channels == 0 || w.channels > 63 || w.slices == 0 || w.slices > 4095)) {
    return "channels must be 1..63 and slices 1..4095";
  }
  if (k == "allreduce-hd" && !std::has_single_bit(w.hosts)) {
    return "halving-doubling needs a power-of-two host count";
  }
  if (w.qps_per_pair == 0) return "qps per pair must be >= 1";
  if (w.shared_qp && k != "alltoall") return "a shared QP per pair is for alltoall";
  if (k == "incast" && w.incast_senders >= w.hosts) return "incast senders must be < hosts";
  return "";
}

std::unique_ptr<Workload> Workload::make(const WorkloadConfig& w) {
  if (w.kind == "allreduce-ring") return std::make_unique<RingAllreduce>(w);
  if (w.kind == "allreduce-hd") return std::make_unique<HalvingDoubling>(w);
  return std::make_unique<PointToPoint>(w);
}

}  // namespace metaroce::fabric
