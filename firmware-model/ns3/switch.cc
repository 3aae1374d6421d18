#include "firmware-model/ns3/switch.h"

#include <algorithm>
#include <array>

#include "firmware-model/ns3/wire.h"
#include "proto/packet.h"

namespace metaroce::fabric {

using ns3::Ptr;

void QueueStats::change(int64_t now, int64_t delta) {
  byte_ns += static_cast<double>(bytes) * static_cast<double>(now - last_ns);
  last_ns = now;
  bytes = static_cast<uint64_t>(static_cast<int64_t>(bytes) + delta);
  max_bytes = std::max(max_bytes, bytes);
}

Switch::Switch(std::string name, int tier, Ptr<ns3::Node> node, const SwitchConfig& cfg,
               uint32_t salt)
    : name_(std::move(name)),
      tier_(tier),
      node_(node),
      cfg_(cfg),
      salt_(salt),
      rng_(0x5851F42D4C957F2Dull ^ salt) {}

Switch::~Switch() = default;

int Switch::add_port(Ptr<ns3::PointToPointNetDevice> dev, bool up) {
  const int i = static_cast<int>(ports_.size());
  ports_.emplace_back();
  ports_.back().port = std::make_unique<Port>(dev, i, this, this);
  ports_.back().up = up;
  return i;
}

int Switch::add_group(std::vector<int> ports) {
  groups_.push_back(std::move(ports));
  return static_cast<int>(groups_.size()) - 1;
}

void Switch::set_route(uint32_t host, int group) {
  if (route_.size() <= host) route_.resize(host + 1, -1);
  route_[host] = group;
}

void Switch::clear_routes() {
  groups_.clear();
  route_.clear();
}

int Switch::route(const FlowKey& k) const {
  const uint32_t host = host_of_ip(k.dst_ip);
  if (host >= route_.size() || route_[host] < 0) return -1;
  const auto& g = groups_[route_[host]];
  if (g.empty()) return -1;
  if (g.size() == 1) return g[0];
  return g[flow_hash(k, salt_) % g.size()];
}

bool Switch::admit(const PortState& out, uint32_t size) const {
  // Lossless (PFC): no per-queue limit; pause keeps the switch's total below
  // the pool, and only an overflow of the whole pool drops.
  if (cfg_.pfc) return buffered_ + size <= cfg_.shared_buffer_bytes;
  if (!cfg_.shared_buffer) return out.q.bytes + size <= cfg_.port_buffer_bytes;
  if (buffered_ + size > cfg_.shared_buffer_bytes) return false;
  const double free_bytes = static_cast<double>(cfg_.shared_buffer_bytes - buffered_);
  return static_cast<double>(out.q.bytes + size) <= cfg_.shared_alpha * free_bytes;
}

bool Switch::should_mark(uint64_t queue_bytes) {
  switch (cfg_.ecn) {
    case SwitchConfig::Ecn::kOff:
      return false;
    case SwitchConfig::Ecn::kThreshold:
      return queue_bytes > cfg_.ecn_k_bytes;
    case SwitchConfig::Ecn::kRed: {
      if (queue_bytes <= cfg_.red_kmin_bytes) return false;
      if (queue_bytes >= cfg_.red_kmax_bytes) return true;
      const double p = cfg_.red_pmax * static_cast<double>(queue_bytes - cfg_.red_kmin_bytes) /
                       static_cast<double>(cfg_.red_kmax_bytes - cfg_.red_kmin_bytes);
      rng_ ^= rng_ << 13;
      rng_ ^= rng_ >> 7;
      rng_ ^= rng_ << 17;
      return static_cast<double>(rng_ >> 11) * 0x1.0p-53 < p;
    }
  }
  return false;
}

void Switch::on_frame(int in, Ptr<const ns3::Packet> frame) {
  std::array<uint8_t, kHeaderPeek> head{};
  const uint32_t n = frame->CopyData(head.data(), head.size());
  auto key = parse_ipv4_udp(std::span<const uint8_t>(head.data(), n));
  if (!key) {
    ++counters_.rx_drop_not_ip;
    return;
  }
  const int out = route(*key);
  if (out < 0) {
    ++counters_.rx_drop_no_route;
    return;
  }
  PortState& o = ports_[out];
  const uint32_t size = frame->GetSize();
  if (!admit(o, size)) {
    if (!try_trim(o, frame)) {
      ++counters_.drop_buffer_full;
      ++o.q.drops;
    }
    return;
  }
  Ptr<ns3::Packet> p = frame->Copy();
  if (key->ecn != 0 && key->ecn != 3 && should_mark(o.q.bytes)) {
    std::vector<uint8_t> bytes(size);
    p->CopyData(bytes.data(), size);
    mark_ce(bytes);
    p = ns3::Create<ns3::Packet>(bytes.data(), size);
    ++counters_.ecn_marked;
    ++o.q.ecn_marked;
  }
  const int64_t now = ns3::Simulator::Now().GetNanoSeconds();
  o.data.push_back({p, in});
  o.q.change(now, size);
  buffered_ += size;
  PortState& i = ports_[in];
  i.ingress_bytes += size;
  if (cfg_.pfc && !i.pause_sent && i.ingress_bytes > cfg_.pfc_xoff_bytes) send_pfc(in, true);
  ++counters_.forwarded;
  o.port->wake();
}

bool Switch::try_trim(PortState& out, Ptr<const ns3::Packet> frame) {
  if (!cfg_.trim) return false;
  constexpr size_t kKeep = kIpv4UdpHeaders + proto::kMbthLen;
  std::array<uint8_t, kKeep> head{};
  const uint32_t n = frame->CopyData(head.data(), head.size());
  std::vector<uint8_t> cut = trim_frame(std::span<const uint8_t>(head.data(), n), kKeep);
  if (cut.empty() || frame->GetSize() <= kKeep) return false;
  // Headers go first, beside PFC frames: the NACK they draw is the point.
  out.control.push_back(ns3::Create<ns3::Packet>(cut.data(), cut.size()));
  ++counters_.trimmed;
  out.port->wake();
  return true;
}

Ptr<ns3::Packet> Switch::next_frame(int port, bool data_ok) {
  PortState& o = ports_[port];
  if (!o.control.empty()) {
    Ptr<ns3::Packet> c = o.control.front();
    o.control.pop_front();
    return c;
  }
  if (!data_ok || o.data.empty()) return nullptr;
  Entry e = o.data.front();
  o.data.pop_front();
  const uint32_t size = e.frame->GetSize();
  o.q.change(ns3::Simulator::Now().GetNanoSeconds(), -static_cast<int64_t>(size));
  buffered_ -= size;
  PortState& i = ports_[e.ingress];
  i.ingress_bytes -= size;
  if (cfg_.pfc && i.pause_sent && i.ingress_bytes < cfg_.pfc_xon_bytes) send_pfc(e.ingress, false);
  return e.frame;
}

void Switch::send_pfc(int port, bool pause) {
  std::array<uint8_t, kPfcFrameLen> f{};
  build_pfc(f, pause ? 0xFFFF : 0);
  PortState& p = ports_[port];
  p.pause_sent = pause;
  ++(pause ? counters_.pfc_tx_pause : counters_.pfc_tx_resume);
  if (pause) ++p.q.pfc_tx_pause;
  p.control.push_back(ns3::Create<ns3::Packet>(f.data(), f.size()));
  p.port->wake();
}

}  // namespace metaroce::fabric
