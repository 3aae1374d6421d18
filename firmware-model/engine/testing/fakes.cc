#include "firmware-model/engine/testing/fakes.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace metaroce::fw::test {

const char* status_name(WcStatus s) {
  switch (s) {
    case WcStatus::kSuccess: return "SUCCESS";
    case WcStatus::kLocLenErr: return "LOC_LEN_ERR";
    case WcStatus::kLocQpOpErr: return "LOC_QP_OP_ERR";
    case WcStatus::kLocProtErr: return "LOC_PROT_ERR";
    case WcStatus::kLocAccessErr: return "LOC_ACCESS_ERR";
    case WcStatus::kWrFlushErr: return "WR_FLUSH_ERR";
    case WcStatus::kRemInvReqErr: return "REM_INV_REQ_ERR";
    case WcStatus::kRemAccessErr: return "REM_ACCESS_ERR";
    case WcStatus::kRemOpErr: return "REM_OP_ERR";
    case WcStatus::kRetryExcErr: return "RETRY_EXC_ERR";
    case WcStatus::kRnrRetryExcErr: return "RNR_RETRY_EXC_ERR";
    default: return "OTHER";
  }
}

std::string describe(const proto::Packet& p) {
  char buf[160];
  const proto::Mbth& m = p.mbth;
  switch (m.opcode) {
    case proto::Opcode::kAck:
      std::snprintf(buf, sizeof buf, "ACK cum %u sack %llx", p.ack.cum_psn,
                    static_cast<unsigned long long>(p.ack.sack));
      return buf;
    case proto::Opcode::kNack:
      std::snprintf(buf, sizeof buf, "NACK %s psn %u", proto::to_string(p.nack.reason), p.nack.psn);
      return buf;
    case proto::Opcode::kUdSend:
    case proto::Opcode::kUdSendImm:
      std::snprintf(buf, sizeof buf, "%s psn %u qpn 0x%x qkey 0x%08x src_qp 0x%x len %zu",
                    proto::to_string(m.opcode), m.psn, m.dest_qpn, p.deth.qkey, p.deth.src_qpn,
                    p.payload.size());
      return buf;
    default: break;
  }
  std::snprintf(buf, sizeof buf, "%s psn %u msn %u off %u len %zu", proto::to_string(m.opcode),
                m.psn, m.msn, m.offset, p.payload.size());
  std::string s = buf;
  if (m.flags & proto::kFlagLast) s += " LAST";
  if (m.flags & proto::kFlagAckReq) s += " ACKREQ";
  if (m.flags & proto::kFlagRetransmit) s += " RETX";
  return s;
}

bool frame_buffers_from_env() { return std::getenv("MROCE_TEST_FRAME_BUFFERS") != nullptr; }

proto::FrameHeaders FakePort::headers(const OutPacket& o) const {
  proto::FrameHeaders h;
  h.src_ip = o.src_ip;
  h.dst_ip = o.dst_ip;
  h.src_port = o.src_port;
  h.dscp = o.dscp;
  h.ttl = o.ttl;
  h.ecn = ecn;
  return h;
}

FakePort::~FakePort() {
  if (contract_violations == 0) return;
  std::fprintf(stderr, "FakePort: %llu tx_buffer contract violations (hal.h §tx_buffer)\n",
               static_cast<unsigned long long>(contract_violations));
  std::abort();
}

std::span<uint8_t> FakePort::tx_buffer(const OutPacket& o, size_t len) {
  if (!held_.empty()) ++contract_violations;  // two reservations at once
  held_.clear();
  if (!frame_buffers || frames_free == 0) {
    ++frames_refused;
    return {};
  }
  const size_t at = proto::payload_offset(headers(o), o.packet.mbth.opcode);
  if (at == 0) {
    ++frames_refused;
    return {};
  }
  if (frames_free > 0) --frames_free;
  ++frames_given;
  held_.assign(at + len + proto::kIcrcLen, 0xEE);  // poison: every byte must be written
  held_at_ = at;
  return {held_.data() + at, len};
}

void FakePort::tx_abandon() {
  if (held_.empty()) ++contract_violations;  // nothing was reserved
  held_.clear();
  ++frames_abandoned;
}

void FakePort::send(const OutPacket& o) {
  std::string what = describe_packets ? describe(o.packet) : std::string();
  if (keep_log) log.push_back("tx " + what);
  const proto::Opcode op = o.packet.mbth.opcode;
  if (tx_room > 0 && op != proto::Opcode::kAck && op != proto::Opcode::kNack) --tx_room;
  const proto::FrameHeaders h = headers(o);
  Frame f;
  const bool in_place = !held_.empty() && o.packet.payload.data() == held_.data() + held_at_;
  if (in_place) {
    // Built around the payload the DMA read into it (hal.h §tx_buffer).
    if (proto::payload_offset(h, op) != held_at_ ||
        o.packet.payload.size() + held_at_ + proto::kIcrcLen != held_.size())
      ++contract_violations;
    f.bytes = std::move(held_);
    held_.clear();
    ++frames_in_place;
  } else {
    if (!held_.empty()) {  // another packet while a frame is reserved
      ++contract_violations;
      held_.clear();
    }
    f.bytes.resize(proto::encap_length(h) + proto::transport_length(o.packet));
  }
  size_t n = proto::build_frame(h, o.packet, f.bytes);
  f.bytes.resize(n);
  f.path = o.packet.mbth.path_id;
  f.what = std::move(what);
  outbox.push_back(std::move(f));
  if (keep_log) {
    OutPacket hdr = o;
    hdr.packet.payload = {};
    raw.push_back(hdr);
  }
}

Node::Node(FakeClock& c, uint32_t ipv4, uint64_t seed, const EngineConfig& cfg0)
    : clock(c), random(seed), ip(proto::IpAddr::v4(ipv4)) {
  EngineConfig cfg = cfg0;
  if (cfg.port.gids.empty()) cfg.port.gids.push_back(ip);
  cfg.port.link_mtu = std::max<uint32_t>(cfg.port.link_mtu, 4200);
  engine = std::make_unique<Engine>(cfg, Hal{clock, port, dma, events, random});
}

void Node::setup(size_t mem_bytes, uint32_t mr_access, QpCap cap) {
  mem.assign(mem_bytes, 0);
  engine->create_pd(kOwner, &pd);
  engine->create_cq(kOwner, 4096, &scq);
  engine->create_cq(kOwner, 4096, &rcq);
  engine->reg_mr(kOwner, pd, base(), mem.size(), mr_access, &mr);
  QpInitAttr init;
  init.pdn = pd;
  init.send_cqn = scq;
  init.recv_cqn = rcq;
  init.cap = cap;
  engine->create_qp(kOwner, init, &qpn, nullptr);
}

void Node::connect(const proto::IpAddr& peer_ip, uint32_t peer_qpn, uint32_t qp_access,
                   uint8_t timeout, uint8_t retry_cnt, uint8_t rnr_retry, uint8_t min_rnr_timer,
                   uint32_t mtu) {
  QpAttr a;
  a.qp_state = QpState::kInit;
  a.qp_access_flags = qp_access;
  engine->modify_qp(kOwner, qpn, a, kAttrState | kAttrPkeyIndex | kAttrPort | kAttrAccessFlags);
  a.qp_state = QpState::kRtr;
  a.av.dgid = peer_ip;
  a.path_mtu = mtu;
  a.dest_qp_num = peer_qpn;
  a.rq_psn = 1000;
  a.min_rnr_timer = min_rnr_timer;
  engine->modify_qp(kOwner, qpn, a,
                    kAttrState | kAttrAv | kAttrPathMtu | kAttrDestQpn | kAttrRqPsn |
                        kAttrMaxDestRdAtomic | kAttrMinRnrTimer);
  a.qp_state = QpState::kRts;
  a.sq_psn = 1000;
  a.timeout = timeout;
  a.retry_cnt = retry_cnt;
  a.rnr_retry = rnr_retry;
  engine->modify_qp(kOwner, qpn, a,
                    kAttrState | kAttrTimeout | kAttrRetryCnt | kAttrRnrRetry | kAttrSqPsn |
                        kAttrMaxQpRdAtomic);
}

int Node::post_recv(uint64_t wr_id, uint64_t off, uint32_t len) {
  RecvWr r;
  r.wr_id = wr_id;
  r.num_sge = 1;
  r.sg[0] = {base() + off, len, mr.lkey};
  return engine->post_recv(kOwner, qpn, r);
}

SendWr Node::wr(WrOpcode op, uint64_t wr_id, uint64_t off, uint32_t len, uint32_t flags) {
  SendWr w;
  w.wr_id = wr_id;
  w.opcode = op;
  w.send_flags = flags;
  w.num_sge = 1;
  w.sg[0] = {base() + off, len, mr.lkey};
  return w;
}

Bench::Bench(uint64_t seed, const EngineConfig& cfg)
    : a(clock, 0x0A000001, seed * 3 + 1, cfg), b(clock, 0x0A000002, seed * 3 + 2, cfg),
      rng(seed) {}

void Bench::connect_pair(size_t mem, uint8_t timeout, uint8_t retry_cnt, uint8_t rnr_retry,
                         uint32_t mtu) {
  constexpr uint32_t kAll =
      kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead | kAccessRemoteAtomic;
  a.setup(mem, kAll);
  b.setup(mem, kAll);
  a.connect(b.ip, b.qpn, kAll, timeout, retry_cnt, rnr_retry, 1, mtu);
  b.connect(a.ip, a.qpn, kAll, timeout, retry_cnt, rnr_retry, 1, mtu);
}

bool Bench::serialize(bool to_b, size_t n, Time* left) {
  *left = clock.t;
  if (!link_bps) return true;
  Time& free = line_free_[to_b];
  Time start = std::max(free, clock.t);
  if (queue_bytes && (start - clock.t) * link_bps / 8'000'000'000 > queue_bytes) {
    ++queue_drops;
    return false;
  }
  free = start + static_cast<Time>(n * 8'000'000'000 / link_bps);
  *left = free;
  return true;
}

void Bench::collect(Node& from, bool to_b) {
  for (auto& f : from.port.outbox) {
    if (filter && !filter(f.what, /*from_a=*/to_b)) {
      ++dropped;
      continue;
    }
    if (loss > 0 && rng.uniform() < loss) {
      ++dropped;
      continue;
    }
    Time left;
    if (!serialize(to_b, f.bytes.size(), &left)) {
      ++dropped;
      continue;
    }
    int copies = dup > 0 && rng.uniform() < dup ? 2 : 1;
    duplicated += copies - 1;
    for (int i = 0; i < copies; ++i) {
      InFlight x;
      x.at = left + path_delay[f.path % path_delay.size()] + (jitter ? rng.next() % jitter : 0);
      if (reorder > 0 && rng.uniform() < reorder) {
        x.at += reorder_gap;
        ++held;
      }
      if (x.at >= stall_from && x.at < stall_until) x.at = stall_until;
      x.seq = seq_++;
      x.to_b = to_b;
      x.bytes = f.bytes;
      if (corrupt > 0 && rng.uniform() < corrupt && x.bytes.size() > 60) {
        x.bytes[50 + rng.next() % (x.bytes.size() - 60)] ^= 0x20;
        ++corrupted;
      }
      wire_.push(std::move(x));
    }
  }
  from.port.outbox.clear();
}

bool Bench::run(const std::function<bool()>& done, Time limit) {
  Time end = clock.t + limit;
  while (true) {
    a.engine->pump();
    b.engine->pump();
    collect(a, true);
    collect(b, false);
    if (done()) return true;
    // Every engine test checks the timer index against a scan of the QPs.
    if (!a.engine->check_timer_index() || !b.engine->check_timer_index()) {
      std::fprintf(stderr, "engine timer index disagrees with a scan of its QPs\n");
      std::abort();
    }
    Time next = std::min(a.engine->next_deadline(), b.engine->next_deadline());
    if (!wire_.empty()) next = std::min(next, wire_.top().at);
    if (next == kNever || next > end) return false;
    if (next > clock.t) clock.t = next;
    while (!wire_.empty() && wire_.top().at <= clock.t) {
      InFlight x = wire_.top();
      wire_.pop();
      ++delivered;
      uint64_t& newest = x.to_b ? newest_to_b_ : newest_to_a_;
      if (x.seq < newest) ++reordered;
      newest = std::max(newest, x.seq);
      (x.to_b ? b : a).engine->on_frame(x.bytes);
      collect(a, true);
      collect(b, false);
    }
    if (a.engine->next_deadline() <= clock.t) a.engine->on_timer();
    if (b.engine->next_deadline() <= clock.t) b.engine->on_timer();
  }
}

}  // namespace metaroce::fw::test
