#include "tools/pcap-compare/reference.h"

#include <cerrno>
#include <cstring>
#include <deque>

namespace metaroce::pcapcmp {
namespace {

constexpr fw::OwnerId kOwner = 1;
// Receive buffers live far from any address a capture's R_Keys name.
constexpr uint64_t kRecvBase = uint64_t{0x7E} << 40;
constexpr uint64_t kRecvSpan = uint64_t{1} << 40;
constexpr uint32_t kAllRemote =
    fw::kAccessLocalWrite | fw::kAccessRemoteWrite | fw::kAccessRemoteRead | fw::kAccessRemoteAtomic;

class Clock : public fw::ClockInterface {
 public:
  fw::Time now() const override { return t; }
  fw::Time t = 1'000'000;
};

class Port : public fw::PacketPortInterface {
 public:
  explicit Port(const uint64_t& fed) : fed_(fed) {}
  void send(const fw::OutPacket& o) override {
    bytes += sizeof(RefPacket) + o.packet.payload.size();
    if (bytes > max_bytes) {  // stop recording; the host sees overflowed()
      overflowed = true;
      return;
    }
    RefPacket r;
    r.packet = o.packet;
    r.payload.assign(o.packet.payload.begin(), o.packet.payload.end());
    r.packet.payload = {};
    r.after_fed = fed_;
    sent.push_back(std::move(r));
  }
  std::vector<RefPacket> sent;
  uint64_t bytes = 0, max_bytes = ~uint64_t{0};
  bool overflowed = false;

 private:
  const uint64_t& fed_;
};

class Events : public fw::EventSinkInterface {
 public:
  bool complete(uint32_t, const fw::Completion&) override { return true; }
  void async_event(fw::EventType, uint32_t) override {}
};

// Hands out scripted values first (the R_Key an MR must get), then a
// deterministic sequence.
class Random : public fw::RandomInterface {
 public:
  uint64_t next() override {
    if (!script.empty()) {
      uint64_t v = script.front();
      script.pop_front();
      return v;
    }
    s_ ^= s_ << 13;
    s_ ^= s_ >> 7;
    s_ ^= s_ << 17;
    return s_;
  }
  std::deque<uint64_t> script;

 private:
  uint64_t s_ = 0x9E3779B97F4A7C15ull;
};

}  // namespace

// ---- SparseMemory ----

SparseMemory::Page* SparseMemory::page(uint64_t addr, bool create) {
  uint64_t base = addr & ~uint64_t{kPage - 1};
  auto it = pages_.find(base);
  if (it != pages_.end()) return it->second.get();
  if (!create) return nullptr;
  if (pages_.size() >= max_pages_) {
    exhausted_ = true;
    return nullptr;
  }
  return (pages_[base] = std::make_unique<Page>()).get();
}

bool SparseMemory::read(fw::OwnerId, uint64_t addr, std::span<uint8_t> dst) {
  size_t done = 0;
  while (done < dst.size()) {
    uint64_t a = addr + done;
    size_t in = a % kPage, n = std::min(dst.size() - done, kPage - in);
    const Page* p = page(a, false);
    if (p) std::memcpy(dst.data() + done, p->data.data() + in, n);
    else std::memset(dst.data() + done, 0, n);
    done += n;
  }
  return true;
}

bool SparseMemory::put(uint64_t addr, std::span<const uint8_t> src, bool only_unknown) {
  size_t done = 0;
  while (done < src.size()) {
    uint64_t a = addr + done;
    size_t in = a % kPage, n = std::min(src.size() - done, kPage - in);
    Page* p = page(a, true);
    if (!p) return false;
    for (size_t i = 0; i < n; ++i) {
      if (only_unknown && p->known[in + i]) continue;
      p->data[in + i] = src[done + i];
      p->known[in + i] = true;
    }
    done += n;
  }
  return true;
}

bool SparseMemory::write(fw::OwnerId, uint64_t addr, std::span<const uint8_t> src) {
  return put(addr, src, false);
}

void SparseMemory::seed(uint64_t addr, std::span<const uint8_t> src) { put(addr, src, true); }

// ---- Reference ----

struct Reference::Hal {
  explicit Hal(const uint64_t& fed) : port(fed) {}
  Clock clock;
  Port port;
  Events events;
  Random random;
};

Reference::Reference(size_t max_pages, uint64_t max_sent_bytes)
    : hal_(std::make_unique<Hal>(fed_)), mem_(std::make_unique<SparseMemory>(max_pages)) {
  hal_->port.max_bytes = max_sent_bytes;
}

bool Reference::overflowed() const { return hal_->port.overflowed; }

Reference::~Reference() = default;

const std::vector<RefPacket>& Reference::sent() const { return hal_->port.sent; }
const fw::Counters& Reference::counters() const { return engine_->counters(); }

namespace {
std::string failed(const char* what, int e) { return std::string(what) + ": " + std::strerror(e); }

fw::QpAttr mirror_attr(const QpMirror& m) {
  fw::QpAttr a;
  a.qp_access_flags = kAllRemote & ~fw::kAccessLocalWrite;
  a.av.dgid = m.peer_ip;
  a.path_mtu = m.path_mtu;
  a.dest_qp_num = m.peer_qpn;
  a.rq_psn = m.rq_psn;
  a.sq_psn = m.sq_psn;
  a.min_rnr_timer = m.min_rnr_timer;
  return a;
}
}  // namespace

int Reference::setup(const QpMirror& m, uint32_t* ref_qpn, std::string* why) {
  fw::EngineConfig cfg;
  cfg.port.gids = {m.dut_ip};
  cfg.port.link_mtu = 9216;
  engine_ = std::make_unique<fw::Engine>(
      cfg, fw::Hal{hal_->clock, hal_->port, *mem_, hal_->events, hal_->random});
  fw::Engine& e = *engine_;
  if (int r = e.create_pd(kOwner, &pd_)) return *why = failed("create_pd", r), r;
  if (int r = e.create_cq(kOwner, 65536, &cq_)) return *why = failed("create_cq", r), r;
  for (const QpMirror::Key& k : m.keys) {
    fw::MrKeys keys;
    hal_->random.script.push_back(uint64_t{k.rkey} << 32);
    uint32_t access = k.access | ((k.access & ~fw::kAccessRemoteRead) ? uint32_t{fw::kAccessLocalWrite} : 0u);
    if (int r = e.reg_mr(kOwner, pd_, k.addr, k.length, access, &keys))
      return *why = failed(("reg_mr for R_Key " + std::to_string(k.rkey)).c_str(), r), r;
    if (keys.rkey != k.rkey) return *why = "R_Key " + std::to_string(k.rkey) + " already taken", EEXIST;
  }
  fw::MrKeys rk;
  if (int r = e.reg_mr(kOwner, pd_, kRecvBase, kRecvSpan, fw::kAccessLocalWrite, &rk))
    return *why = failed("reg_mr for receive buffers", r), r;
  recv_lkey_ = rk.lkey;
  recv_next_ = kRecvBase;
  fw::QpInitAttr init;
  init.pdn = pd_;
  init.send_cqn = init.recv_cqn = cq_;
  init.cap = {4096, 4096, 1, 1, 0};
  if (int r = e.create_qp(kOwner, init, &qpn_, nullptr)) return *why = failed("create_qp", r), r;
  fw::QpAttr a = mirror_attr(m);
  using namespace fw;
  const uint32_t steps[3] = {
      kAttrState | kAttrPkeyIndex | kAttrPort | kAttrAccessFlags,
      kAttrState | kAttrAv | kAttrPathMtu | kAttrDestQpn | kAttrRqPsn | kAttrMaxDestRdAtomic |
          kAttrMinRnrTimer,
      kAttrState | kAttrTimeout | kAttrRetryCnt | kAttrRnrRetry | kAttrSqPsn | kAttrMaxQpRdAtomic};
  const QpState states[3] = {QpState::kInit, QpState::kRtr, QpState::kRts};
  for (int i = 0; i < 3; ++i) {
    a.qp_state = states[i];
    if (int r = e.modify_qp(kOwner, qpn_, a, steps[i])) return *why = failed("modify_qp", r), r;
  }
  *ref_qpn = qpn_;
  return 0;
}

int Reference::post_recv(uint32_t len) {
  fw::RecvWr wr;
  wr.wr_id = recv_next_;
  wr.num_sge = 1;
  wr.sg[0] = {recv_next_, len, recv_lkey_};
  recv_next_ += (uint64_t{len} + 2 * SparseMemory::kPage - 1) & ~uint64_t{SparseMemory::kPage - 1};
  return engine_->post_recv(kOwner, qpn_, wr);
}

void Reference::advance(uint64_t t) {
  constexpr int kMaxSteps = 1'000'000;  // a timer that never moves on is a bug, not a hang
  for (int i = 0; i < kMaxSteps && !overflowed() && engine_->next_deadline() <= t; ++i) {
    hal_->clock.t = std::max(hal_->clock.t, engine_->next_deadline());
    engine_->on_timer();
  }
  hal_->clock.t = std::max(hal_->clock.t, t);
}

void Reference::feed(uint64_t t, std::span<const uint8_t> frame) {
  advance(t);
  ++fed_;
  engine_->on_frame(frame);
}

void Reference::drain(uint64_t horizon, uint64_t max_steps) {
  for (uint64_t i = 0; i < max_steps && !overflowed() && engine_->next_deadline() <= horizon; ++i) {
    hal_->clock.t = std::max(hal_->clock.t, engine_->next_deadline());
    engine_->on_timer();
  }
}

}  // namespace metaroce::pcapcmp
