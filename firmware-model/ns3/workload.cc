#include "firmware-model/ns3/workload.h"

#include <algorithm>
#include <bit>
#include <numeric>
#include <sstream>

namespace metaroce::fabric {

namespace {

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
  if (flows_.size() > kFlowMask) {
    set_error("more than 2^28 messages");
    return;
  }
  const uint32_t id = static_cast<uint32_t>(flows_.size());
  flows_.push_back(f);
  Nic& n = *nics_[src];
  const uint32_t imm = imm_tag_ | id;
  if (!n.write_imm(conn, n.memory().base() + off, HostMemory::kBase + remote_off, len, imm, imm)) {
    set_error("host " + std::to_string(src) + ": write_imm refused");
  }
}

void Workload::on_recv(uint32_t host, uint32_t, uint32_t imm, uint32_t len) {
  const uint32_t id = imm & kFlowMask;
  if ((imm & ~kFlowMask) != imm_tag_ || id >= flows_.size() || flows_[id].end_ns >= 0 ||
      flows_[id].len != len) {
    set_error("host " + std::to_string(host) + ": unexpected immediate");
    return;
  }
  Flow& f = flows_[id];
  f.dst = host;
  f.end_ns = now_ns();
  const Flow copy = f;  // on_arrival may post, growing flows_
  on_arrival(copy);
  count_done();
}

void Workload::count_done() {
  if (remaining_ == 0 || --remaining_ > 0) return;  // open-ended, or more to come
  finish_ns_ = now_ns();
  if (on_done_) {
    on_done_();
  } else {
    ns3::Simulator::Stop();
  }
}

void Workload::on_send_done(uint32_t host, uint32_t, uint64_t wr_id, bool ok) {
  if (!ok && error_.empty()) {
    set_error("host " + std::to_string(host) + ": write " + std::to_string(wr_id & kFlowMask) +
              " failed");
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
      nics_[r]->memory().fill(0, size_, r, cfg_.seed);
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
      auto got = nics_[r]->memory().bytes(0, size_);
      auto [a, b] = std::mismatch(got.begin(), got.end(), want.begin());
      if (a != got.end()) return mismatch(r, a - got.begin(), *a, *b);
    }
    return "";
  }
  bool computes() const override { return true; }
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
      auto dst = m.bytes(data_off(c, j, s), slice_);
      auto src = m.bytes(scratch_off(c, k, s), slice_);
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
    for (uint32_t r = 0; r < n_; ++r) nics_[r]->memory().fill(0, size_, r, cfg_.seed);
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
      auto got = nics_[r]->memory().bytes(0, size_);
      auto [a, b] = std::mismatch(got.begin(), got.end(), want.begin());
      if (a != got.end()) return mismatch(r, a - got.begin(), *a, *b);
    }
    return "";
  }
  bool computes() const override { return true; }
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
      auto dst = m.bytes(mine.lo, mine.len);
      auto src = m.bytes(scratch(k), mine.len);
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
      // Spread: sender i is host 1 + i (n-1) / senders, evenly over the
      // fabric (64 of 1,024 hosts: one per leaf), instead of hosts 1..senders.
      for (uint32_t i = 0; i < senders; ++i) {
        const uint64_t s = w.incast_spread ? 1 + uint64_t{i} * (n_ - 1) / senders : 1 + i;
        pairs_.push_back({static_cast<uint32_t>(s), 0});
      }
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
    for (uint32_t h = 0; h < n_; ++h) nics_[h]->memory().fill(0, b_, h, cfg_.seed);
    for (auto& [s, d] : pairs_) nics_[d]->memory().expect(b_ + slot(s, d) * b_, b_, s, cfg_.seed);
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
    for (auto& [s, d] : pairs_) {
      const std::string e = nics_[d]->memory().check(b_ + slot(s, d) * b_, b_, s, cfg_.seed);
      if (!e.empty()) return "host " + std::to_string(d) + " " + e;
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

// ---- background traffic and several jobs sharing the fabric ----

// Open-ended traffic beside the jobs: host s sends `background_bytes`
// messages to p(s), a seeded single-cycle permutation, one every
// bytes / (load x link rate) from a seeded phase on, until the run stops.
// Every message from s carries the same bytes (s's pattern) into the one
// slot p(s) keeps for it, so overlapping messages agree and the slot is
// checked once it has received one. Its memory sits after the job's (base).
class Background final : public Workload {
 public:
  Background(const WorkloadConfig& w, std::vector<uint64_t> base, uint64_t link_bps)
      : Workload(w), base_(std::move(base)), link_bps_(link_bps) {
    n_ = w.hosts;
    b_ = w.background_bytes;
    partner_.resize(n_);
    std::iota(partner_.begin(), partner_.end(), 0);
    uint64_t x = w.seed ^ 0xBAC6;
    for (uint32_t i = n_ - 1; i > 0; --i) std::swap(partner_[i], partner_[mix(++x) % i]);
  }
  uint64_t memory_bytes(uint32_t) const override { return 2 * b_; }
  void setup(std::vector<Nic*> nics) override {
    nics_ = std::move(nics);
    for (uint32_t s = 0; s < n_; ++s) conn_.push_back(connect(s, partner_[s]).first);
    for (uint32_t s = 0; s < n_; ++s) {
      nics_[s]->memory().fill(base_[s], b_, s, cfg_.seed);
      const uint32_t d = partner_[s];
      nics_[d]->memory().expect(base_[d] + b_, b_, s, cfg_.seed);
    }
    arrived_.assign(n_, 0);
  }
  void start() override {
    mark_start();
    const double gap = line_ns(b_, link_bps_) / cfg_.background;
    gap_ns_ = std::max<int64_t>(1, static_cast<int64_t>(gap));
    for (uint32_t s = 0; s < n_; ++s) {
      const int64_t phase = static_cast<int64_t>(mix(cfg_.seed * 31 + s) % gap_ns_);
      ns3::Simulator::Schedule(ns3::NanoSeconds(phase), &Background::send, this, s);
    }
  }
  std::string verify() override {
    for (uint32_t s = 0; s < n_; ++s) {
      const uint32_t d = partner_[s];
      if (!arrived_[d]) continue;
      const std::string e = nics_[d]->memory().check(base_[d] + b_, b_, s, cfg_.seed);
      if (!e.empty()) return "background: host " + std::to_string(d) + " " + e;
    }
    return "";
  }
  double ideal_ns(const TopologyConfig&) const override { return 0; }
  JobSummary summary() const {
    JobSummary j;
    j.kind = "background";
    j.hosts = n_;
    j.posted = flows().size();
    for (uint64_t a : arrived_) j.messages += a;
    j.bytes = j.messages * b_;
    return j;
  }

 private:
  void send(uint32_t s) {
    post(s, conn_[s], base_[s], base_[partner_[s]] + b_, static_cast<uint32_t>(b_), 0);
    ns3::Simulator::Schedule(ns3::NanoSeconds(gap_ns_), &Background::send, this, s);
  }
  void on_arrival(const Flow& f) override { ++arrived_[f.dst]; }

  uint32_t n_;
  uint64_t b_;
  std::vector<uint64_t> base_;
  uint64_t link_bps_;
  int64_t gap_ns_ = 1;
  std::vector<uint32_t> partner_, conn_;
  std::vector<uint64_t> arrived_;
};

// Several jobs of one kind on disjoint host sets (consecutive or
// interleaved), and/or background traffic, over the same NICs. Each NIC's
// completions are routed by the owner tag in the immediate; a job sees its
// own ranks (host -> rank), the background all hosts.
class MultiJob final : public Workload {
 public:
  MultiJob(const WorkloadConfig& w, uint64_t link_bps) : Workload(w), link_bps_(link_bps) {
    WorkloadConfig one = w;
    one.jobs = 1;
    one.background = 0;
    one.hosts = w.hosts / w.jobs;
    rank_of_.assign(w.hosts, 0);
    job_of_.assign(w.hosts, 0);
    hosts_.resize(w.jobs);
    for (uint32_t h = 0; h < w.hosts; ++h) {
      const uint32_t j = w.interleaved ? h % w.jobs : h / one.hosts;
      job_of_[h] = j;
      rank_of_[h] = static_cast<uint32_t>(hosts_[j].size());
      hosts_[j].push_back(h);
    }
    for (uint32_t j = 0; j < w.jobs; ++j) {
      one.seed = w.seed + j;
      jobs_.push_back(Workload::make(one, link_bps));
      jobs_.back()->set_owner(j, [this] { job_done(); });
    }
  }
  uint64_t memory_bytes(uint32_t h) const override {
    return job_mem(h) + (cfg_.background > 0 ? 2 * cfg_.background_bytes : 0);
  }
  void setup(std::vector<Nic*> nics) override {
    nics_ = nics;
    for (uint32_t j = 0; j < jobs_.size(); ++j) {
      std::vector<Nic*> mine;
      for (uint32_t h : hosts_[j]) mine.push_back(nics[h]);
      jobs_[j]->setup(mine);
    }
    if (cfg_.background > 0) {
      std::vector<uint64_t> base(cfg_.hosts);
      for (uint32_t h = 0; h < cfg_.hosts; ++h) base[h] = job_mem(h);
      bg_ = std::make_unique<Background>(cfg_, base, link_bps_);
      bg_->set_owner(kBackgroundTag, [] {});
      bg_->setup(nics);
    }
    expect(jobs_.size());
  }
  void start() override {
    mark_start();
    for (auto& j : jobs_) j->start();
    if (bg_) bg_->start();
  }
  std::string verify() override {
    for (uint32_t j = 0; j < jobs_.size(); ++j) {
      if (auto e = jobs_[j]->verify(); !e.empty()) return "job " + std::to_string(j) + ": " + e;
    }
    return bg_ ? bg_->verify() : "";
  }
  bool computes() const override {
    for (auto& j : jobs_)
      if (j->computes()) return true;
    return false;
  }
  double ideal_ns(const TopologyConfig& t) const override {
    double most = 0;
    for (auto& j : jobs_) most = std::max(most, j->ideal_ns(t));
    return most;
  }
  std::string error() const override {
    for (auto& j : jobs_)
      if (!j->error().empty()) return j->error();
    return bg_ ? bg_->error() : Workload::error();
  }
  const std::vector<Flow>& flows() const override {
    all_.clear();
    for (auto& j : jobs_) all_.insert(all_.end(), j->flows().begin(), j->flows().end());
    return all_;
  }
  std::vector<JobSummary> jobs(const TopologyConfig& t) const override {
    std::vector<JobSummary> out;
    for (auto& j : jobs_) {
      JobSummary s;
      s.kind = j->config().kind;
      s.hosts = j->config().hosts;
      s.finished = j->finished();
      s.posted = j->flows().size();
      s.completion_us = s.finished ? (j->finish_ns() - j->start_ns()) / 1e3 : 0;
      s.ideal_us = j->ideal_ns(t) / 1e3;
      s.ratio = s.finished && s.ideal_us > 0 ? s.completion_us / s.ideal_us : 0;
      for (const Flow& f : j->flows()) {
        if (f.end_ns < 0) continue;
        ++s.messages;
        s.bytes += f.len;
      }
      out.push_back(s);
    }
    if (bg_) out.push_back(bg_->summary());
    return out;
  }
  void on_recv(uint32_t host, uint32_t conn, uint32_t imm, uint32_t len) override {
    if (Workload* w = owner(imm, &host)) w->on_recv(host, conn, imm, len);
  }
  void on_send_done(uint32_t host, uint32_t conn, uint64_t wr_id, bool ok) override {
    if (Workload* w = owner(static_cast<uint32_t>(wr_id), &host))
      w->on_send_done(host, conn, wr_id, ok);
  }

 private:
  static constexpr uint32_t kBackgroundTag = 15;
  uint64_t job_mem(uint32_t h) const { return jobs_[job_of_[h]]->memory_bytes(rank_of_[h]); }
  // The workload the immediate names, and the host as it knows it.
  Workload* owner(uint32_t imm, uint32_t* host) {
    const uint32_t tag = imm >> kFlowBits;
    if (tag == kBackgroundTag && bg_) return bg_.get();
    if (tag < jobs_.size() && job_of_[*host] == tag) {
      *host = rank_of_[*host];
      return jobs_[tag].get();
    }
    set_error("host " + std::to_string(*host) + ": immediate of no job");
    return nullptr;
  }
  void job_done() { count_done(); }
  void on_arrival(const Flow&) override {}

  uint64_t link_bps_;
  std::vector<std::unique_ptr<Workload>> jobs_;
  std::unique_ptr<Background> bg_;
  std::vector<std::vector<uint32_t>> hosts_;  // job -> its hosts, by rank
  std::vector<uint32_t> job_of_, rank_of_;    // host -> job, rank in it
  mutable std::vector<Flow> all_;
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
  if (w.qps_per_pair == 0) return "qps per pair must be >= 1";
  if (w.shared_qp && k != "alltoall") return "a shared QP per pair is for alltoall";
  if (w.jobs == 0 || w.jobs > 14 || w.hosts % w.jobs || w.hosts / w.jobs < 2) {
    return "jobs must be 1..14 and divide the hosts into jobs of at least 2";
  }
  if (k == "allreduce-hd" && !std::has_single_bit(w.hosts / w.jobs)) {
    return "halving-doubling needs a power-of-two host count";
  }
  if (w.background < 0 || w.background > 0.95) return "background load must be in [0, 0.95]";
  if (w.background > 0 && (w.background_bytes == 0 || w.background_bytes > (1u << 30))) {
    return "background bytes must be in 1..2^30";
  }
  if (k == "incast" && w.incast_senders >= w.hosts) return "incast senders must be < hosts";
  if (w.incast_spread && k != "incast") return "--spread is for incast";
  return "";
}

std::unique_ptr<Workload> Workload::make(const WorkloadConfig& w, uint64_t link_bps) {
  if (w.jobs > 1 || w.background > 0) return std::make_unique<MultiJob>(w, link_bps);
  if (w.kind == "allreduce-ring") return std::make_unique<RingAllreduce>(w);
  if (w.kind == "allreduce-hd") return std::make_unique<HalvingDoubling>(w);
  return std::make_unique<PointToPoint>(w);
}

}  // namespace metaroce::fabric
