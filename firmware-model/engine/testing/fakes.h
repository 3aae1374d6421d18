// In-test fakes for the engine's HAL and a two-engine test bench
// (docs/engine.md §Testing). Fakes record what happened as short strings
// ("tx WRITE psn 5 off 0 len 1024 LAST") and can drop, duplicate, corrupt
// and delay packets per path. Virtual time: nothing here sleeps.
#pragma once

#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <queue>
#include <set>
#include <string>
#include <vector>

#include "firmware-model/engine/engine.h"
#include "proto/packet.h"

namespace metaroce::fw::test {

class FakeClock : public ClockInterface {
 public:
  Time now() const override { return t; }
  Time t = 1'000'000;
};

class FakeRandom : public RandomInterface {
 public:
  explicit FakeRandom(uint64_t seed) : s_(seed * 2654435761u + 1) {}
  uint64_t next() override {
    s_ ^= s_ << 13;
    s_ ^= s_ >> 7;
    s_ ^= s_ << 17;
    return s_;
  }
  double uniform() { return static_cast<double>(next() >> 11) / 9007199254740992.0; }

 private:
  uint64_t s_;
};

// Addresses are real pointers; an owner marked dead fails every access (its
// memory is unmapped); an owner marked gone also fails every access and is
// not alive any more (its process exited: hal.h owner_alive).
// Reads overlapping a range of bad_reads fail.
// Writes overlapping a range of bad_writes never land: write() returns false,
// or, with fail_on_commit, it reports success (a queued write) and the next
// commit() of that owner returns false, as a host whose flush faults does.
// With reads_flush, a read of an owner drops its pending failure, as a host
// whose reads first flush queued writes and ignore the outcome (the
// daemon's ProcessDma) does. Accesses overlapping `watch` are counted.
class FakeDma : public DmaInterface {
 public:
  struct Range {
    uint64_t addr = 0, len = 0;
    bool overlaps(uint64_t a, size_t n) const { return n && a < addr + len && addr < a + n; }
  };
  bool read(OwnerId owner, uint64_t addr, std::span<uint8_t> dst) override {
    if (watch.overlaps(addr, dst.size())) ++watch_hits;
    if (reads_flush) lost.erase(owner);
    if (dead.count(owner) || gone.count(owner)) return false;
    for (const Range& r : bad_reads) {
      if (!r.overlaps(addr, dst.size())) continue;
      ++failed_reads;
      if (!dst.empty()) std::memset(dst.data(), 0xBD, dst.size());  // a partial read's debris
      return false;
    }
    if (!dst.empty()) std::memcpy(dst.data(), reinterpret_cast<const void*>(addr), dst.size());
    ++reads;
    return true;
  }
  bool write(OwnerId owner, uint64_t addr, std::span<const uint8_t> src) override {
    if (watch.overlaps(addr, src.size())) ++watch_hits;
    if (dead.count(owner) || gone.count(owner)) return false;
    for (const Range& r : bad_writes) {
      if (!r.overlaps(addr, src.size())) continue;
      ++failed_writes;
      if (!fail_on_commit) return false;
      lost.insert(owner);
      return true;
    }
    if (!src.empty()) std::memcpy(reinterpret_cast<void*>(addr), src.data(), src.size());
    ++writes;
    return true;
  }
  bool commit(OwnerId owner) override {
    ++commits;
    bool ok = !lost.erase(owner) && !dead.count(owner) && !gone.count(owner);
    if (!ok) ++failed_commits;
    return ok;
  }
  bool owner_alive(OwnerId owner) override { return !gone.count(owner); }
  std::set<OwnerId> dead, gone;
  std::vector<Range> bad_writes;
  std::vector<Range> bad_reads;  // reads overlapping these fail (a page the host cannot read)
  uint64_t failed_reads = 0;
  bool fail_on_commit = false;
  bool reads_flush = false;
  Range watch;
  uint64_t watch_hits = 0;
  uint64_t reads = 0, writes = 0, failed_writes = 0, commits = 0, failed_commits = 0;

 private:
  std::set<OwnerId> lost;  // owners with a write lost since their last commit
};

const char* status_name(WcStatus s);

class FakeEvents : public EventSinkInterface {
 public:
  bool complete(uint32_t cqn, const Completion& wc) override {
    auto& q = cqs[cqn];
    auto cap = capacity.find(cqn);
    if (cap != capacity.end() && q.size() >= cap->second) return false;
    q.push_back(wc);
    return true;
  }
  void async_event(EventType type, uint32_t element) override {
    events.push_back(std::to_string(static_cast<int>(type)) + ":" + std::to_string(element));
  }
  bool has_event(EventType type, uint32_t element) const {
    auto want = std::to_string(static_cast<int>(type)) + ":" + std::to_string(element);
    for (auto& e : events)
      if (e == want) return true;
    return false;
  }
  std::vector<Completion> take(uint32_t cqn) {
    auto v = std::move(cqs[cqn]);
    cqs[cqn].clear();
    return v;
  }
  std::map<uint32_t, std::vector<Completion>> cqs;
  std::map<uint32_t, size_t> capacity;
  std::vector<std::string> events;
};

bool frame_buffers_from_env();

// "tx WRITE psn 5 off 0 len 1024 LAST ACKREQ"
std::string describe(const proto::Packet& p);

class FakePort : public PacketPortInterface {
 public:
  void send(const OutPacket& o) override;
  // Payload straight into the frame (hal.h §tx_buffer), when frame_buffers
  // is set: each payload packet gets a frame of its own, at most
  // frames_free of them (negative = unlimited; 0 = "no buffer", the copy
  // path). Frames a packet was built in place in, frames given back, and
  // sends that broke the contract (another packet sent while a frame was
  // reserved, or a reserved frame's payload sent in a different layout)
  // are counted; held() says whether a frame is reserved now.
  std::span<uint8_t> tx_buffer(const OutPacket& o, size_t len) override;
  void tx_abandon() override;
  bool held() const { return !held_.empty(); }
  // Default: off (the copy path), on with MROCE_TEST_FRAME_BUFFERS set in
  // the environment (the *_framebuf test targets run whole suites so).
  bool frame_buffers = frame_buffers_from_env();
  int64_t frames_free = -1;
  uint64_t frames_given = 0, frames_refused = 0, frames_in_place = 0, frames_abandoned = 0;
  uint64_t contract_violations = 0;
  // Transmit backpressure (hal.h): request and READ response packets the
  // port still takes before it reports full; negative = unlimited.
  // Asked while a frame is reserved: a contract violation (a host may
  // flush its ring there, hal.h §tx_buffer).
  bool tx_ready() override {
    if (!held_.empty()) ++contract_violations;
    return tx_room != 0;
  }
  // A suite run with frame buffers fails on any contract violation.
  ~FakePort() override;
  int64_t tx_room = -1;
  std::vector<std::string> log;  // describe() of every packet sent
  bool keep_log = true;
  bool describe_packets = true;  // false: no strings at all (benchmarks)
  uint8_t ecn = 0b10;            // IP ECN bits of built frames (0b11 = CE)
  struct Frame {
    std::vector<uint8_t> bytes;
    uint8_t path;
    std::string what;
  };
  std::vector<Frame> outbox;  // built frames not yet taken by the bench
  std::vector<OutPacket> raw; // last packets (headers only; payload not kept)

 private:
  proto::FrameHeaders headers(const OutPacket& o) const;
  std::vector<uint8_t> held_;  // the frame tx_buffer() reserved
  size_t held_at_ = 0;         // where its payload starts
};

// One simulated NIC with its host memory.
struct Node {
  Node(FakeClock& clock, uint32_t ip, uint64_t seed, const EngineConfig& cfg = {});
  FakeClock& clock;
  FakePort port;
  FakeDma dma;
  FakeEvents events;
  FakeRandom random;
  proto::IpAddr ip;
  std::unique_ptr<Engine> engine;

  static constexpr OwnerId kOwner = 7;
  uint32_t pd = 0, scq = 0, rcq = 0, qpn = 0;
  std::vector<uint8_t> mem;  // registered at mr
  MrKeys mr;
  uint64_t base() const { return reinterpret_cast<uint64_t>(mem.data()); }

  // PD + CQs + one RC QP + an MR over mem (access flags given).
  void setup(size_t mem_bytes, uint32_t mr_access, QpCap cap = {64, 64, 16, 16, 256});
  // RESET -> INIT -> RTR -> RTS towards (peer_ip, peer_qpn).
  void connect(const proto::IpAddr& peer_ip, uint32_t peer_qpn, uint32_t qp_access,
               uint8_t timeout = 14, uint8_t retry_cnt = 7, uint8_t rnr_retry = 7,
               uint8_t min_rnr_timer = 1, uint32_t mtu = 1024);
  int post_send(const SendWr& wr) { return engine->post_send(kOwner, qpn, wr); }
  int post_recv(uint64_t wr_id, uint64_t off, uint32_t len);
  SendWr wr(WrOpcode op, uint64_t wr_id, uint64_t off, uint32_t len, uint32_t flags = kSendSignaled);
  std::vector<Completion> send_cq() { return events.take(scq); }
  std::vector<Completion> recv_cq() { return events.take(rcq); }
};

// Two nodes and the wire between them. Per-path one-way delay, loss,
// duplication, corruption, reordering (a frame held `reorder_gap` longer,
// as mroce-impair --reorder does) and, with link_bps, a line rate each
// direction serializes at with a drop-tail queue of queue_bytes; all
// decisions from one seeded generator.
class Bench {
 public:
  explicit Bench(uint64_t seed = 1, const EngineConfig& cfg = {});
  FakeClock clock;
  Node a, b;
  FakeRandom rng;
  double loss = 0, dup = 0, corrupt = 0;
  std::vector<Time> path_delay{5'000, 5'000, 5'000, 5'000};
  Time jitter = 0;
  double reorder = 0;
  Time reorder_gap = 100'000;
  uint64_t link_bps = 0;      // 0: frames leave at once (no serialization)
  uint64_t queue_bytes = 0;   // with link_bps: bytes waiting beyond this are dropped (0: unbounded)
  // The wire stalls (a descheduled hop): frames due in [stall_from,
  // stall_until) arrive at stall_until instead, in their order.
  Time stall_from = 0, stall_until = 0;
  // Return false to drop a specific frame (e.g. by its describe() string).
  std::function<bool(const std::string& what, bool from_a)> filter;
  uint64_t delivered = 0, dropped = 0;
  // Impairments that happened: copies added, copies corrupted, frames
  // delivered after a frame sent later in the same direction.
  uint64_t duplicated = 0, corrupted = 0, reordered = 0;
  uint64_t held = 0, queue_drops = 0;  // frames held by `reorder`; tail drops of the queue

  // Both QPs set up and connected with the given access flags.
  void connect_pair(size_t mem = 1 << 16, uint8_t timeout = 14, uint8_t retry_cnt = 7,
                    uint8_t rnr_retry = 7, uint32_t mtu = 1024);
  // Runs until done() holds or nothing is left to do or `limit` virtual ns
  // have passed. Returns true when done() held.
  bool run(const std::function<bool()>& done, Time limit = 10'000'000'000ull);
  bool run_idle(Time limit = 10'000'000'000ull) { return run([] { return false; }, limit); }

 private:
  struct InFlight {
    Time at;
    uint64_t seq;
    bool to_b;
    std::vector<uint8_t> bytes;
    bool operator>(const InFlight& o) const { return at != o.at ? at > o.at : seq > o.seq; }
  };
  void collect(Node& from, bool to_b);
  std::priority_queue<InFlight, std::vector<InFlight>, std::greater<>> wire_;
  uint64_t seq_ = 0;
  uint64_t newest_to_a_ = 0, newest_to_b_ = 0;  // highest seq delivered each way
  Time line_free_[2] = {0, 0};  // when each direction's line is free (link_bps)
  // When a frame of n bytes has left the line (now: unserialized); false: tail-dropped.
  bool serialize(bool to_b, size_t n, Time* left);
};

}  // namespace metaroce::fw::test
