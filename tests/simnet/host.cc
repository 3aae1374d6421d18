#include "tests/simnet/host.h"

#include <cstdio>
#include <cstdlib>

#include <algorithm>
#include <cstring>

namespace metaroce::simnet {

Host::Host(std::string name, Scheduler& sched, uint64_t seed, proto::IpAddr ip,
           const fw::EngineConfig& cfg)
    : name_(std::move(name)), sched_(sched), rng_(seed), ip_(ip), tx_buf_(16384) {
  fw::EngineConfig c = cfg;
  if (c.port.gids.empty()) c.port.gids.push_back(ip);
  engine_ = std::make_unique<fw::Engine>(c, fw::Hal{*this, *this, *this, *this, *this});
}

Host::~Host() = default;

uint64_t Host::alloc(fw::OwnerId owner, size_t size) {
  uint64_t& next = next_addr_.try_emplace(owner, 0x10000).first->second;
  const uint64_t addr = next;
  memory_[owner][addr] = std::vector<uint8_t>(size);
  next = (addr + size + 0x1000 + 0xFFF) & ~uint64_t{0xFFF};  // guard gap
  return addr;
}

std::span<uint8_t> Host::find(fw::OwnerId owner, uint64_t addr, size_t len) {
  auto o = memory_.find(owner);
  if (o == memory_.end()) return {};
  auto it = o->second.upper_bound(addr);
  if (it == o->second.begin()) return {};
  --it;
  const uint64_t off = addr - it->first;
  if (off > it->second.size() || len > it->second.size() - off) return {};
  return std::span<uint8_t>(it->second).subspan(off, len);
}

std::span<uint8_t> Host::mem(fw::OwnerId owner, uint64_t addr, size_t len) {
  return find(owner, addr, len);
}

bool Host::read(fw::OwnerId owner, uint64_t addr, std::span<uint8_t> dst) {
  if (dst.empty()) return true;
  auto m = find(owner, addr, dst.size());
  if (m.size() != dst.size()) return false;
  std::memcpy(dst.data(), m.data(), dst.size());
  return true;
}

bool Host::write(fw::OwnerId owner, uint64_t addr, std::span<const uint8_t> src) {
  if (src.empty()) return true;
  auto m = find(owner, addr, src.size());
  if (m.size() != src.size()) return false;
  std::memcpy(m.data(), src.data(), src.size());
  return true;
}

bool Host::complete(uint32_t cqn, const fw::Completion& wc) {
  auto& q = cqs_[cqn];
  auto cap = cq_cap_.find(cqn);
  if (cap != cq_cap_.end() && q.size() >= cap->second) return false;
  q.push_back(wc);
  return true;
}

void Host::async_event(fw::EventType type, uint32_t element) { events_.emplace_back(type, element); }

void Host::send(const fw::OutPacket& p) {
  if (!uplink_ || mute_tx) return;
  proto::FrameHeaders h;
  h.src_mac = {0x02, 0, 0, 0, 0, ip_.bytes[15]};
  h.dst_mac = {0x02, 0, 0, 0, 0, p.dst_ip.bytes[15]};
  h.src_ip = p.src_ip;
  h.dst_ip = p.dst_ip;
  h.src_port = p.src_port;
  h.dscp = p.dscp;
  h.ttl = p.ttl;
  h.ecn = 0b10;
  const size_t need = proto::encap_length(h) + proto::transport_length(p.packet);
  if (tx_buf_.size() < need) tx_buf_.resize(need);
  const size_t n = proto::build_frame(h, p.packet, tx_buf_);
  if (n == 0) return;
  ++frames_tx;
  uplink_->send(Frame(tx_buf_.begin(), tx_buf_.begin() + static_cast<std::ptrdiff_t>(n)));
}

void Host::receive(Frame frame) {
  if (mute_rx) return;
  ++frames_rx;
  engine_->on_frame(frame);
  kick();
}

void Host::kick() {
  engine_->pump();
  arm_timer(false);
}

void Host::arm_timer(bool just_fired) {
  if (!engine_->check_timer_index()) {  // the engine's timer index against a scan of its QPs
    std::fprintf(stderr, "simnet: engine timer index disagrees with a scan of its QPs\n");
    std::abort();
  }
  Time d = engine_->next_deadline();
  if (d == fw::kNever) return;
  const Time now = sched_.now();
  if (d <= now) d = just_fired ? now + 1 : now;  // always make progress
  if (d >= timer_at_) return;  // an earlier or equal wake-up is already pending
  timer_at_ = d;
  sched_.at(d, [this, d] { on_timer_event(d); });
}

void Host::on_timer_event(Time t) {
  if (t != timer_at_) return;  // superseded by an earlier wake-up
  timer_at_ = ~Time{0};
  if (sched_.now() >= engine_->next_deadline()) engine_->on_timer();
  engine_->pump();
  arm_timer(true);
}

}  // namespace metaroce::simnet
