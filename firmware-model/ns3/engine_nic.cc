#include "firmware-model/ns3/engine_nic.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <sstream>

#include "firmware-model/ns3/wire.h"

namespace metaroce::fabric {

using ns3::Ptr;
namespace {
constexpr fw::OwnerId kOwner = 1;
constexpr uint32_t kAllAccess =
    fw::kAccessLocalWrite | fw::kAccessRemoteWrite | fw::kAccessRemoteRead;

uint64_t splitmix(uint64_t& s) {
  uint64_t z = (s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
proto::MacAddr host_mac(uint32_t host) {
  return {0x02,
          0x00,
          static_cast<uint8_t>(host >> 24),
          static_cast<uint8_t>(host >> 16),
          static_cast<uint8_t>(host >> 8),
          static_cast<uint8_t>(host)};
}
}  // namespace

EngineNic::EngineNic(uint32_t host, Ptr<ns3::PointToPointNetDevice> dev, HostMemory memory,
                     const EngineNicConfig& cfg, uint64_t seed, NicHandler* handler)
    : host_(host),
      cfg_(cfg),
      memory_(std::move(memory)),
      handler_(handler),
      rng_(seed),
      tx_buf_(16384),
      rx_buf_(16384) {
  port_ = std::make_unique<Port>(dev, 0, this, this);
  fw::EngineConfig ec = cfg.engine;
  ec.port.gids = {proto::IpAddr::v4(host_ip(host))};
  engine_ = std::make_unique<fw::Engine>(ec, fw::Hal{*this, *this, *this, *this, *this});
  const uint32_t cqe = ec.caps.max_cqe;
  if (engine_->create_pd(kOwner, &pdn_) || engine_->create_cq(kOwner, cqe, &scq_) ||
      engine_->create_cq(kOwner, cqe, &rcq_) ||
      engine_->reg_mr(kOwner, pdn_, memory_.base(), memory_.size(), kAllAccess, &mr_)) {
    NS_FATAL_ERROR("engine setup failed on host " << host);
  }
}

EngineNic::~EngineNic() { timer_.Cancel(); }

uint32_t EngineNic::open(uint32_t peer_host, ConnUse use) {
  fw::QpInitAttr init;
  init.pdn = pdn_;
  init.send_cqn = scq_;
  init.recv_cqn = rcq_;
  Conn c;
  c.recv_depth = use == ConnUse::kSend ? 0 : cfg_.recv_depth;
  const uint32_t send_depth = use == ConnUse::kRecv ? 1 : cfg_.send_depth;
  init.cap = {send_depth, std::max<uint32_t>(1, c.recv_depth), 1, 1, 0};
  fw::QpCap actual;
  if (int rc = engine_->create_qp(kOwner, init, &c.qpn, &actual)) {
    NS_FATAL_ERROR("create_qp failed on host " << host_ << ": errno " << rc);
  }
  c.peer.host = peer_host;
  conns_.push_back(c);
  conn_of_qpn_[c.qpn] = static_cast<uint32_t>(conns_.size() - 1);
  return static_cast<uint32_t>(conns_.size() - 1);
}

ConnAddr EngineNic::local_addr(uint32_t conn) const {
  return {host_, conns_.at(conn).qpn, mr_.rkey};
}

void EngineNic::connect(uint32_t conn, const ConnAddr& peer) {
  Conn& c = conns_.at(conn);
  c.peer = peer;
  fw::QpAttr a;
  a.qp_state = fw::QpState::kInit;
  a.port_num = 1;
  a.qp_access_flags = kAllAccess;
  int rc = engine_->modify_qp(
      kOwner, c.qpn, a, fw::kAttrState | fw::kAttrPkeyIndex | fw::kAttrPort | fw::kAttrAccessFlags);
  a.qp_state = fw::QpState::kRtr;
  a.av.dgid = proto::IpAddr::v4(host_ip(peer.host));
  a.path_mtu = cfg_.path_mtu;
  a.dest_qp_num = peer.qpn;
  a.rq_psn = 0;
  a.min_rnr_timer = 1;
  if (!rc) {
    rc = engine_->modify_qp(kOwner, c.qpn, a,
                            fw::kAttrState | fw::kAttrAv | fw::kAttrPathMtu | fw::kAttrDestQpn |
                                fw::kAttrRqPsn | fw::kAttrMaxDestRdAtomic | fw::kAttrMinRnrTimer);
  }
  a.qp_state = fw::QpState::kRts;
  a.timeout = cfg_.timeout;
  a.retry_cnt = cfg_.retry_cnt;
  a.rnr_retry = 7;
  a.sq_psn = 0;
  if (!rc) {
    rc = engine_->modify_qp(kOwner, c.qpn, a,
                            fw::kAttrState | fw::kAttrTimeout | fw::kAttrRetryCnt |
                                fw::kAttrRnrRetry | fw::kAttrSqPsn | fw::kAttrMaxQpRdAtomic);
  }
  if (rc) NS_FATAL_ERROR("modify_qp failed on host " << host_ << ": errno " << rc);
  post_recvs(c.qpn, c.recv_depth);
}

void EngineNic::post_recvs(uint32_t qpn, uint32_t n) {
  fw::RecvWr wr;  // no SGE: WRITE_WITH_IMM only consumes the receive
  for (uint32_t i = 0; i < n; ++i) {
    if (int rc = engine_->post_recv(kOwner, qpn, wr)) {
      NS_FATAL_ERROR("post_recv failed on host " << host_ << ": errno " << rc);
    }
  }
}

bool EngineNic::write_imm(uint32_t conn, uint64_t addr, uint64_t remote_addr, uint32_t len,
                          uint32_t imm, uint64_t wr_id) {
  Conn& c = conns_.at(conn);
  fw::SendWr wr;
  wr.wr_id = wr_id;
  wr.opcode = fw::WrOpcode::kRdmaWriteImm;
  wr.send_flags = fw::kSendSignaled;
  wr.imm = imm;
  wr.remote_addr = remote_addr;
  wr.rkey = c.peer.rkey;
  wr.num_sge = 1;
  wr.sg[0] = {addr, len, mr_.lkey};
  if (!c.backlog.empty()) {
    c.backlog.push_back(wr);
    ++backlogged_;
    return true;
  }
  const int rc = engine_->post_send(kOwner, c.qpn, wr);
  if (rc == ENOMEM) {  // send queue full: wait for a completion
    c.backlog.push_back(wr);
    ++backlogged_;
    return true;
  }
  if (rc != 0) return false;
  engine_->pump();
  after_engine_call();
  return true;
}

void EngineNic::post_backlog(Conn& c) {
  bool posted = false;
  while (!c.backlog.empty() && engine_->post_send(kOwner, c.qpn, c.backlog.front()) == 0) {
    c.backlog.pop_front();
    posted = true;
  }
  if (posted) engine_->pump();
}

// ---- the NIC's transmit side ----

void EngineNic::send(const fw::OutPacket& p) {
  proto::FrameHeaders h;
  h.src_mac = host_mac(host_);
  h.dst_mac = host_mac(host_of_ip(p.dst_ip.v4_host_order()));
  h.src_ip = p.src_ip;
  h.dst_ip = p.dst_ip;
  h.src_port = p.src_port;
  h.dscp = p.dscp;
  h.ttl = p.ttl;
  h.ecn = 0b10;  // ECT(0)
  const size_t need = proto::encap_length(h) + proto::transport_length(p.packet);
  if (tx_buf_.size() < need) tx_buf_.resize(need);
  const size_t n = proto::build_frame(h, p.packet, tx_buf_);
  if (n == 0) return;  // cannot happen with a sized buffer; the engine would retransmit
  Ptr<ns3::Packet> f = ns3::Create<ns3::Packet>(tx_buf_.data(), n);
  const proto::Opcode op = p.packet.mbth.opcode;
  if (op == proto::Opcode::kAck || op == proto::Opcode::kNack) {
    control_.push_back(f);
  } else {
    const uint64_t key = uint64_t{p.dst_ip.v4_host_order()} << 24 | p.packet.mbth.dest_qpn;
    auto [it, fresh] = queue_of_.try_emplace(key, static_cast<uint32_t>(queues_.size()));
    if (fresh) queues_.emplace_back();
    data_bytes_ += n;
    TxQueue& q = queues_[it->second];
    q.frames.push_back(f);
    if (!q.active) {
      q.active = true;
      active_.push_back(it->second);
    }
  }
  queued_bytes_ += n;
  queued_max_ = std::max(queued_max_, queued_bytes_);
  port_->wake();
}

Ptr<ns3::Packet> EngineNic::next_frame(int, bool data_ok) {
  Ptr<ns3::Packet> f;
  bool control_taken = false;
  if (!control_.empty()) {
    f = control_.front();
    control_.pop_front();
    control_taken = true;
  } else if (data_ok && !active_.empty()) {
    const uint32_t qi = active_.front();
    active_.pop_front();
    TxQueue& q = queues_[qi];
    f = q.frames.front();
    q.frames.pop_front();
    if (q.frames.empty()) {
      q.active = false;
    } else {
      active_.push_back(qi);
    }
  }
  if (!f) return f;
  queued_bytes_ -= f->GetSize();
  if (!control_taken) {
    data_bytes_ -= f->GetSize();
    // Room again for an engine that was refused: pump it from its own event
    // (this may run inside the engine's send(), which must not re-enter it).
    if (tx_refused_ && !tx_pump_due_ && tx_ready()) {
      tx_pump_due_ = true;
      ns3::Simulator::ScheduleNow(&EngineNic::on_tx_room, this);
    }
  }
  return f;
}

bool EngineNic::tx_ready() {
  if (cfg_.tx_room_bytes == 0 || data_bytes_ < cfg_.tx_room_bytes) return true;
  tx_refused_ = true;
  return false;
}

void EngineNic::on_tx_room() {
  tx_pump_due_ = false;
  tx_refused_ = false;
  engine_->pump();
  after_engine_call();
}

void EngineNic::on_frame(int, Ptr<const ns3::Packet> frame) {
  const uint32_t n = frame->GetSize();
  if (rx_buf_.size() < n) rx_buf_.resize(n);
  frame->CopyData(rx_buf_.data(), n);
  engine_->on_frame(std::span<const uint8_t>(rx_buf_.data(), n));
  after_engine_call();
}

// ---- timers and completions ----

void EngineNic::after_engine_call(bool timer_fired) {
  arm_timer(timer_fired);
  if (draining_) return;  // the outer loop below picks the new ones up
  draining_ = true;
  for (size_t i = 0; i < pending_.size(); ++i) deliver(pending_[i]);
  pending_.clear();
  draining_ = false;
}

void EngineNic::deliver(const fw::Completion& wc) {
  auto it = conn_of_qpn_.find(wc.qp_num);
  const uint32_t conn = it == conn_of_qpn_.end() ? ~0u : it->second;
  const bool ok = wc.status == fw::WcStatus::kSuccess;
  if (wc.opcode == fw::WcOpcode::kRecvRdmaWithImm) {
    if (ok) {
      post_recvs(wc.qp_num, 1);
      handler_->on_recv(host_, conn, wc.imm, wc.byte_len);
    }
    return;  // flushed receives of a QP in error: its sender reports the failure
  }
  handler_->on_send_done(host_, conn, wc.wr_id, ok);
  if (ok && conn != ~0u) post_backlog(conns_[conn]);
}

void EngineNic::arm_timer(bool timer_fired) {
  fw::Time d = engine_->next_deadline();
  if (d == fw::kNever) return;
  const fw::Time t = now();
  if (d <= t) d = timer_fired ? t + 1 : t;  // still due right after firing: next ns
  if (d >= timer_at_) return;               // an earlier or equal wake-up is pending
  timer_.Cancel();
  timer_at_ = d;
  timer_ = ns3::Simulator::Schedule(ns3::NanoSeconds(d - t), &EngineNic::on_timer_event, this);
}

void EngineNic::on_timer_event() {
  timer_at_ = fw::kNever;
  if (now() >= engine_->next_deadline()) engine_->on_timer();
  after_engine_call(true);
}

// ---- the rest of the HAL ----

fw::Time EngineNic::now() const {
  return static_cast<fw::Time>(ns3::Simulator::Now().GetNanoSeconds());
}

bool EngineNic::read(fw::OwnerId, uint64_t addr, std::span<uint8_t> dst) {
  return memory_.read(addr, dst);
}

bool EngineNic::write(fw::OwnerId, uint64_t addr, std::span<const uint8_t> src) {
  return memory_.write(addr, src);
}

bool EngineNic::complete(uint32_t, const fw::Completion& wc) {
  pending_.push_back(wc);
  return true;
}

void EngineNic::async_event(fw::EventType type, uint32_t) {
  if (type != fw::EventType::kCommEst) ++async_errors_;
}

uint64_t EngineNic::next() { return splitmix(rng_); }

NicStats EngineNic::stats() const {
  const fw::Counters& c = engine_->counters();
  NicStats s;
  s.tx_packets = c.tx_packets;
  s.tx_bytes = c.tx_bytes;
  s.rx_packets = c.rx_packets;
  s.retransmits = c.tx_retransmits;
  s.timeouts = c.timeouts;
  s.ecn_marks_seen = c.ecn_marks_seen;
  s.errors = c.local_errors + async_errors_;
  s.rx_drop_parse = c.rx_drop_parse;
  s.nic_queue_max_bytes = queued_max_;
  std::ostringstream d;
  d << "fast_retransmits=" << c.fast_retransmits << " tail_loss_probes=" << c.tail_loss_probes
    << " rx_drop_duplicate=" << c.rx_drop_duplicate << " rx_drop_parse=" << c.rx_drop_parse
    << " rx_drop_out_of_window=" << c.rx_drop_out_of_window << " rnr_retries=" << c.rnr_retries
    << " backlogged_wrs=" << backlogged_;
  s.detail = d.str();
  return s;
}

}  // namespace metaroce::fabric
