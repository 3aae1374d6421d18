#include "firmware-model/ns3/roce_nic.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <sstream>

#include "firmware-model/ns3/wire.h"

namespace metaroce::fabric {

using ns3::Ptr;

namespace {
constexpr uint16_t kRoceV2Port = 4791;
constexpr uint32_t kQpnBase = 0x100;
// BTH opcodes (IBA RC): WRITE_ONLY-like data packets carry their own RETH.
constexpr uint8_t kOpData = 0x0A, kOpDataLastImm = 0x0B, kOpAck = 0x11, kOpCnp = 0x81;
constexpr uint8_t kSynAck = 0x00, kSynNakSeq = 0x60;
constexpr size_t kBth = 12, kReth = 16, kImm = 4, kAeth = 4, kIcrc = 4;
constexpr uint32_t kAckReq = 1u << 31;

int64_t now_ns() { return ns3::Simulator::Now().GetNanoSeconds(); }
void put32(uint8_t* p, uint32_t v) {
  p[0] = static_cast<uint8_t>(v >> 24);
  p[1] = static_cast<uint8_t>(v >> 16);
  p[2] = static_cast<uint8_t>(v >> 8);
  p[3] = static_cast<uint8_t>(v);
}
void put64(uint8_t* p, uint64_t v) {
  put32(p, static_cast<uint32_t>(v >> 32));
  put32(p + 4, static_cast<uint32_t>(v));
}
uint32_t get32(const uint8_t* p) {
  return uint32_t{p[0]} << 24 | uint32_t{p[1]} << 16 | uint32_t{p[2]} << 8 | p[3];
}
uint64_t get64(const uint8_t* p) { return uint64_t{get32(p)} << 32 | get32(p + 4); }
}  // namespace

RoceNic::RoceNic(uint32_t host, Ptr<ns3::PointToPointNetDevice> dev, HostMemory memory,
                 const RoceConfig& cfg, NicHandler* handler)
    : host_(host), cfg_(cfg), memory_(std::move(memory)), handler_(handler), buf_(16384) {
  port_ = std::make_unique<Port>(dev, 0, this, this);
}

RoceNic::~RoceNic() {
  wake_.Cancel();
  rto_timer_.Cancel();
}

uint32_t RoceNic::open(uint32_t peer_host, ConnUse) {  // its queues grow as needed
  Qp q;
  q.peer.host = peer_host;
  const uint32_t conn = static_cast<uint32_t>(qps_.size());
  // One fixed source port per QP (RoCEv2 practice: a hash of the QPNs).
  q.src_port = static_cast<uint16_t>(0xC000 | ((host_ * 7919u + conn * 104729u) & 0x3FFF));
  q.cc.rc = q.cc.rt = static_cast<double>(cfg_.link_bps);
  qps_.push_back(q);
  return conn;
}

ConnAddr RoceNic::local_addr(uint32_t conn) const { return {host_, kQpnBase + conn, 1}; }

void RoceNic::connect(uint32_t conn, const ConnAddr& peer) { qps_.at(conn).peer = peer; }

bool RoceNic::write_imm(uint32_t conn, uint64_t addr, uint64_t remote_addr, uint32_t len,
                        uint32_t imm, uint64_t wr_id) {
  Qp& q = qps_.at(conn);
  if (len == 0 || !memory_.contains(addr, len)) return false;
  const uint32_t npkts = (len + cfg_.mtu - 1) / cfg_.mtu;
  q.sq.push_back({wr_id, addr, remote_addr, len, imm, q.next_psn, npkts});
  if (q.snd_una == q.next_psn) q.last_progress_ns = now_ns();
  q.next_psn += npkts;
  activate(conn);
  if (!rto_timer_.IsRunning()) {
    rto_timer_ =
        ns3::Simulator::Schedule(ns3::NanoSeconds(cfg_.rto_ns / 4), &RoceNic::check_timeouts, this);
  }
  return true;
}

void RoceNic::activate(uint32_t qi) {
  Qp& q = qps_[qi];
  if (q.active || !has_data(q)) return;
  q.active = true;
  active_.push_back(qi);
  port_->wake();
}

// ---- transmit ----

Ptr<ns3::Packet> RoceNic::next_frame(int, bool data_ok) {
  if (!control_.empty()) {
    Ptr<ns3::Packet> c = control_.front();
    control_.pop_front();
    return c;
  }
  if (!data_ok) return nullptr;
  const int64_t now = now_ns();
  int64_t earliest = -1;
  for (size_t n = active_.size(); n > 0; --n) {
    const uint32_t qi = active_.front();
    active_.pop_front();
    Qp& q = qps_[qi];
    if (!has_data(q)) {
      q.active = false;
      continue;
    }
    active_.push_back(qi);
    dcqcn_tick(q, now);
    if (q.next_tx_ns > now) {
      earliest = earliest < 0 ? q.next_tx_ns : std::min(earliest, q.next_tx_ns);
      continue;
    }
    return build_data(qi, q);
  }
  if (earliest >= 0) schedule_wake(earliest);
  return nullptr;
}

void RoceNic::schedule_wake(int64_t at) {
  if (wake_.IsRunning() && wake_at_ <= at) return;
  wake_.Cancel();
  wake_at_ = at;
  wake_ = ns3::Simulator::Schedule(ns3::NanoSeconds(at - now_ns()), [this] { port_->wake(); });
}

Ptr<ns3::Packet> RoceNic::build_data(uint32_t qi, Qp& q) {
  const uint32_t psn = q.snd_nxt++;
  auto wr = std::find_if(q.sq.begin(), q.sq.end(),
                         [&](const Wr& w) { return psn < w.first_psn + w.npkts; });
  const uint32_t k = psn - wr->first_psn;
  const uint32_t off = k * cfg_.mtu;
  const uint32_t len = std::min(cfg_.mtu, wr->len - off);
  const bool last = k + 1 == wr->npkts;
  const size_t l4 = kBth + kReth + (last ? kImm : 0) + len + kIcrc;
  const size_t n = kIpv4UdpHeaders + l4;
  if (buf_.size() < n) buf_.resize(n);
  FlowKey key{host_ip(host_), host_ip(q.peer.host), q.src_port, kRoceV2Port, 17, 0b10};
  build_ipv4_udp(buf_, key, kDataPriority, l4);
  uint8_t* b = buf_.data() + kIpv4UdpHeaders;
  b[0] = last ? kOpDataLastImm : kOpData;
  b[1] = 0;
  b[2] = 0xFF;
  b[3] = 0xFF;
  put32(b + 4, q.peer.qpn);
  const bool ack_req = last || (psn + 1) % cfg_.ack_every == 0;
  put32(b + 8, psn | (ack_req ? kAckReq : 0));
  put64(b + kBth, wr->raddr + off);
  put32(b + kBth + 8, q.peer.rkey);
  put32(b + kBth + 12, wr->len);
  uint8_t* p = b + kBth + kReth;
  if (last) {
    put32(p, wr->imm);
    p += kImm;
  }
  memory_.read(wr->laddr + off, std::span(p, len));  // in range: write_imm checked
  std::memset(p + len, 0, kIcrc);
  if (psn < q.max_sent) {
    ++stats_.retransmits;
  } else {
    q.max_sent = psn + 1;
  }
  ++stats_.tx_packets;
  stats_.tx_bytes += n;
  // DCQCN pacing: the next packet of this QP leaves one serialization at Rc later.
  q.next_tx_ns = std::max(q.next_tx_ns, now_ns()) +
                 static_cast<int64_t>(static_cast<double>(n) * 8e9 / q.cc.rc);
  q.cc.bytes_since += n;
  (void)qi;
  return ns3::Create<ns3::Packet>(buf_.data(), n);
}

void RoceNic::send_control(const Qp& q, uint8_t opcode, uint8_t syndrome, uint32_t psn) {
  std::array<uint8_t, kIpv4UdpHeaders + kBth + kAeth + kIcrc> f{};
  FlowKey key{host_ip(host_), host_ip(q.peer.host), q.src_port, kRoceV2Port, 17, 0b10};
  build_ipv4_udp(f, key, kDataPriority, f.size() - kIpv4UdpHeaders);
  uint8_t* b = f.data() + kIpv4UdpHeaders;
  b[0] = opcode;
  b[2] = 0xFF;
  b[3] = 0xFF;
  put32(b + 4, q.peer.qpn);
  put32(b + 8, psn);
  b[kBth] = syndrome;
  control_.push_back(ns3::Create<ns3::Packet>(f.data(), f.size()));
  port_->wake();
}

// ---- receive ----

void RoceNic::on_frame(int, Ptr<const ns3::Packet> frame) {
  const uint32_t n = frame->GetSize();
  if (buf_.size() < n) buf_.resize(n);
  frame->CopyData(buf_.data(), n);
  const std::span<const uint8_t> f(buf_.data(), n);
  auto key = parse_ipv4_udp(f);
  if (!key || key->dst_port != kRoceV2Port) {
    ++rx_drop_not_roce_;
    return;
  }
  const uint8_t* b = buf_.data() + kIpv4UdpHeaders;
  const bool data = n >= kIpv4UdpHeaders + kBth && (b[0] == kOpData || b[0] == kOpDataLastImm);
  const size_t need =
      kIpv4UdpHeaders + kBth + kIcrc + (data ? kReth + (b[0] == kOpDataLastImm ? kImm : 0) : kAeth);
  if (n < need) {
    ++rx_drop_malformed_;
    return;
  }
  ++stats_.rx_packets;
  const uint32_t qi = (get32(b + 4) & 0xFFFFFF) - kQpnBase;
  if (qi >= qps_.size()) {
    ++rx_drop_unknown_qp_;
    return;
  }
  Qp& q = qps_[qi];
  const uint32_t psn = get32(b + 8) & ~kAckReq;
  const bool ce = key->ecn == 3;
  if (ce) ++stats_.ecn_marks_seen;
  switch (b[0]) {
    case kOpData:
    case kOpDataLastImm:
      on_data(qi, q, f, ce);
      break;
    case kOpAck:
      on_ack(q, b[kBth], psn);
      break;
    case kOpCnp:
      on_cnp(q);
      break;
    default:
      break;
  }
}

void RoceNic::on_data(uint32_t qi, Qp& q, std::span<const uint8_t> f, bool ce) {
  const uint8_t* b = f.data() + kIpv4UdpHeaders;
  const uint32_t raw = get32(b + 8), psn = raw & ~kAckReq;
  const int64_t now = now_ns();
  if (ce && now - q.last_cnp_ns >= cfg_.cnp_interval_ns) {  // DCQCN NP
    q.last_cnp_ns = now;
    ++stats_.cnps;
    send_control(q, kOpCnp, 0, 0);
  }
  if (psn != q.epsn) {
    if (psn < q.epsn) {  // duplicate: re-acknowledge
      ++rx_drop_duplicate_;
      send_control(q, kOpAck, kSynAck, q.epsn - 1);
      return;
    }
    ++rx_drop_out_of_order_;  // go-back-N keeps nothing beyond a gap
    if (!q.nak_pending) {     // first gap: one NAK, then silence
      q.nak_pending = true;
      ++stats_.naks_sent;
      send_control(q, kOpAck, kSynNakSeq, q.epsn);
    }
    return;
  }
  const bool last = b[0] == kOpDataLastImm;
  const uint64_t va = get64(b + kBth);
  const uint32_t msg_len = get32(b + kBth + 12);
  const uint8_t* p = b + kBth + kReth + (last ? kImm : 0);
  const size_t len = static_cast<size_t>(f.data() + f.size() - kIcrc - p);
  if (len > cfg_.mtu || !memory_.write(va, std::span(p, len))) {  // outside the region: the sender times out
    ++rx_drop_bad_address_;
    return;
  }
  ++q.epsn;
  q.nak_pending = false;
  if (raw & kAckReq) send_control(q, kOpAck, kSynAck, psn);
  if (last) handler_->on_recv(host_, qi, get32(b + kBth + kReth), msg_len);
}

void RoceNic::on_ack(Qp& q, uint8_t syndrome, uint32_t psn) {
  const uint32_t acked = syndrome == kSynNakSeq ? psn : psn + 1;  // first PSN not yet delivered
  if (acked > q.snd_una && acked <= q.next_psn) {
    q.snd_una = acked;
    q.last_progress_ns = now_ns();
  }
  if (syndrome == kSynNakSeq && psn >= q.snd_una && psn < q.snd_nxt) {
    q.snd_nxt = psn;  // go back N
    activate(static_cast<uint32_t>(&q - qps_.data()));
  }
  q.snd_nxt = std::max(q.snd_nxt, q.snd_una);
  while (!q.sq.empty() && q.sq.front().first_psn + q.sq.front().npkts <= q.snd_una) {
    const Wr w = q.sq.front();
    q.sq.pop_front();
    handler_->on_send_done(host_, static_cast<uint32_t>(&q - qps_.data()), w.wr_id, true);
  }
}

void RoceNic::check_timeouts() {
  const int64_t now = now_ns();
  bool outstanding = false;
  for (uint32_t qi = 0; qi < qps_.size(); ++qi) {
    Qp& q = qps_[qi];
    if (q.snd_una == q.next_psn) continue;
    outstanding = true;
    if (q.snd_una < q.snd_nxt && now - q.last_progress_ns >= cfg_.rto_ns) {
      ++stats_.timeouts;
      q.snd_nxt = q.snd_una;  // go back to the oldest unacknowledged PSN
      q.last_progress_ns = now;
      activate(qi);
    }
  }
  if (outstanding) {
    rto_timer_ =
        ns3::Simulator::Schedule(ns3::NanoSeconds(cfg_.rto_ns / 4), &RoceNic::check_timeouts, this);
  }
}

// ---- DCQCN reaction point ----

void RoceNic::on_cnp(Qp& q) {
  Dcqcn& c = q.cc;
  const int64_t now = now_ns();
  c.rt = c.rc;
  c.rc = std::max(c.rc * (1 - c.alpha / 2), cfg_.min_rate_fraction * cfg_.link_bps);
  c.alpha = (1 - cfg_.g) * c.alpha + cfg_.g;
  c.last_alpha_ns = c.last_timer_ns = now;
  c.bytes_since = 0;
  c.timer_events = c.byte_events = 0;
}

// Timers evaluated lazily, when the QP is considered for sending.
void RoceNic::dcqcn_tick(Qp& q, int64_t now) {
  Dcqcn& c = q.cc;
  if (c.last_alpha_ns == 0) c.last_alpha_ns = c.last_timer_ns = now;
  if (const int64_t k = (now - c.last_alpha_ns) / cfg_.alpha_timer_ns; k > 0) {
    c.alpha *= std::pow(1 - cfg_.g, static_cast<double>(k));
    c.last_alpha_ns += k * cfg_.alpha_timer_ns;
  }
  if (c.rc >= cfg_.link_bps) return;
  while (now - c.last_timer_ns >= cfg_.increase_timer_ns) {
    c.last_timer_ns += cfg_.increase_timer_ns;
    ++c.timer_events;
    dcqcn_increase(q);
  }
  while (c.bytes_since >= cfg_.byte_counter) {
    c.bytes_since -= cfg_.byte_counter;
    ++c.byte_events;
    dcqcn_increase(q);
  }
}

void RoceNic::dcqcn_increase(Qp& q) {
  Dcqcn& c = q.cc;
  const double line = static_cast<double>(cfg_.link_bps);
  const uint32_t f = cfg_.fast_recovery_steps;
  if (std::max(c.timer_events, c.byte_events) < f) {
    // fast recovery: towards the target
  } else if (std::min(c.timer_events, c.byte_events) >= f) {
    c.rt += cfg_.rhai_fraction * line * (std::min(c.timer_events, c.byte_events) - f + 1);
  } else {
    c.rt += cfg_.rai_fraction * line;
  }
  c.rt = std::min(c.rt, line);
  c.rc = std::min((c.rt + c.rc) / 2, line);
}

NicStats RoceNic::stats() const {
  NicStats s = stats_;
  std::ostringstream d;
  double min_rate = static_cast<double>(cfg_.link_bps);
  for (const Qp& q : qps_) min_rate = std::min(min_rate, q.cc.rc);
  d << "min_rate_gbps=" << min_rate / 1e9 << " rx_drop_not_roce=" << rx_drop_not_roce_
    << " rx_drop_malformed=" << rx_drop_malformed_ << " rx_drop_unknown_qp=" << rx_drop_unknown_qp_
    << " rx_drop_out_of_order=" << rx_drop_out_of_order_
    << " rx_drop_duplicate=" << rx_drop_duplicate_
    << " rx_drop_bad_address=" << rx_drop_bad_address_;
  s.detail = d.str();
  return s;
}

}  // namespace metaroce::fabric
