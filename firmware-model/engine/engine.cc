// Engine: objects, verbs calls and the dispatch of inputs to the three
// roles (docs/engine.md). The roles live in requester.cc, responder.cc and
// completer.cc; reliability.cc holds the windows and the scoreboard.
#include "firmware-model/engine/engine.h"

#include <algorithm>
#include <cassert>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "firmware-model/engine/qp.h"
#include "firmware-model/engine/qp_state.h"

namespace metaroce::fw {

namespace {
struct ViolationName {
  Violation bit;
  const char* name;
};
constexpr ViolationName kViolationNames[] = {
    {kViolateAckWithoutSack, "ack-without-sack"},
    {kViolateWrongNackCode, "wrong-nack-code"},
    {kViolateNoProbeReply, "no-probe-reply"},
};
}  // namespace

bool parse_violations(const std::string& list, uint32_t* out, std::string* error) {
  uint32_t bits = 0;
  size_t start = 0;
  while (start <= list.size()) {
    size_t comma = std::min(list.find(',', start), list.size());
    std::string name = list.substr(start, comma - start);
    const ViolationName* hit = nullptr;
    for (const ViolationName& v : kViolationNames)
      if (name == v.name) hit = &v;
    if (!hit) {
      *error = "unknown rule '" + name + "' (known: " + violation_names(~0u) + ")";
      return false;
    }
    bits |= hit->bit;
    start = comma + 1;
  }
  *out = bits;
  return true;
}

std::string violation_names(uint32_t bits) {
  std::string s;
  for (const ViolationName& v : kViolationNames)
    if (bits & v.bit) s += (s.empty() ? "" : ",") + std::string(v.name);
  return s;
}

// ---------------- Core ----------------

Core::Core(const EngineConfig& config, Hal hal)
    : config_(config), hal_(hal), mrs_(config.caps.max_mr), mws_(config.caps.max_mw),
      ahs_(config.caps.max_ah), scratch_(8192) {
  mrs_.set_windows(&mws_);
  CongestionParams p;
  p.base_rtt = config.base_rtt;
  p.link_bps = config.link_bps;
  credit_ = make_receiver_credit(p);
}

OutPacket Core::out_packet(const Qp& qp, const AddressVector& av, const proto::Packet& p,
                           uint8_t path) const {
  OutPacket o;
  const auto& gids = config_.port.gids;
  if (av.sgid_index < gids.size()) o.src_ip = gids[av.sgid_index];
  o.dst_ip = av.dgid;
  // Path entropy: the path index in the low bits, the QP above it, so each
  // of a QP's paths hashes differently and QPs spread too.
  o.src_port = static_cast<uint16_t>(0xC000 | ((qp.qpn * 64u + path) & 0x3FFF));
  o.dscp = av.traffic_class >> 2;
  o.ttl = av.hop_limit;
  o.packet = p;
  return o;
}

void Core::send_to(Qp& qp, const AddressVector& av, const proto::Packet& p, uint8_t path) {
  // A port frame still reserved for another packet is given back first: the
  // port may reuse its memory for this one (hal.h §tx_buffer).
  if (!tx_held_.empty() && p.payload.data() != tx_held_.data()) tx_drop(&qp, tx_held_);
  tx_held_ = {};
  OutPacket o = out_packet(qp, av, p, path);
  bump(&qp, &Counters::tx_packets);
  bump(&qp, &Counters::tx_bytes, proto::transport_length(p));
  hal_.packets.send(o);
}

std::span<uint8_t> Core::tx_payload(Qp& qp, const AddressVector& av, const proto::Packet& p,
                                    uint8_t path, size_t len) {
  if (!tx_held_.empty()) tx_drop(&qp, tx_held_);  // never two reservations
  if (len == 0) return {};
  std::span<uint8_t> buf = hal_.packets.tx_buffer(out_packet(qp, av, p, path), len);
  if (buf.size() == len) {
    bump(&qp, &Counters::tx_payload_in_frame);
    tx_held_ = buf;
    return buf;
  }
  if (!buf.empty()) hal_.packets.tx_abandon();  // a port that got len wrong: not used
  bump(&qp, &Counters::tx_payload_copied);
  if (scratch_.size() < len) scratch_.resize(len);
  return {scratch_.data(), len};
}

void Core::tx_drop(Qp* qp, std::span<uint8_t> buf) {
  if (buf.empty() || buf.data() != tx_held_.data()) return;  // the scratch: nothing to give back
  tx_held_ = {};
  bump(qp, &Counters::tx_frames_abandoned);
  hal_.packets.tx_abandon();
}

void Core::complete(Qp& qp, uint32_t cqn, const Completion& wc) {
  bool failed = wc.status != WcStatus::kSuccess && wc.status != WcStatus::kWrFlushErr;
  if (failed && qp.error_status == WcStatus::kSuccess) qp.error_status = wc.status;
  if (!hal_.events.complete(cqn, wc)) {
    bump(&qp, &Counters::cq_overflows);
    overflowed_cqs_.push_back(cqn);
  }
}

void Core::activate(Qp& qp) {
  touch(qp);
  if (qp.in_active) return;
  qp.in_active = true;
  active_.push_back(&qp);
}

void Core::placed_request(Qp& qp, uint32_t psn, bool recv, uint32_t recv_msn) {
  if (!qp.placed) {
    qp.placed = true;
    qp.placed_psn = psn;
  }
  auto& r = qp.placed_recvs;
  if (recv && std::find(r.begin(), r.end(), recv_msn) == r.end()) r.push_back(recv_msn);
  if (!qp.in_uncommitted) {
    qp.in_uncommitted = true;
    uncommitted_.push_back(&qp);
  }
}

void Core::placed_response(Qp& qp, uint32_t wqe_seq) {
  if (!qp.rd_placed) {
    qp.rd_placed = true;
    qp.rd_placed_seq = wqe_seq;
  }
  if (!qp.in_uncommitted) {
    qp.in_uncommitted = true;
    uncommitted_.push_back(&qp);
  }
}

bool Core::commit(OwnerId owner) {
  bool any = false;
  for (const Qp* q : uncommitted_) any = any || q->owner == owner;
  if (!any) return true;
  bool ok = hal_.dma.commit(owner);
  // Take every QP of the owner off the list before failing any: failing
  // one may commit again (qp_to_error), and must not see them as clean.
  for (size_t i = 0; i < uncommitted_.size();) {
    Qp* q = uncommitted_[i];
    if (q->owner != owner) {
      ++i;
      continue;
    }
    uncommitted_[i] = uncommitted_.back();
    uncommitted_.pop_back();
    q->in_uncommitted = false;
    if (ok) {
      q->placed = q->rd_placed = false;
      q->placed_recvs.clear();
    } else {
      failing_.push_back(q);
    }
  }
  while (!failing_.empty()) {
    Qp* q = failing_.back();
    failing_.pop_back();
    placement_failed(*q);
  }
  return ok;
}

void Core::placement_failed(Qp& qp) {
  bool rd = qp.rd_placed;
  uint32_t seq = qp.rd_placed_seq;
  qp.rd_placed = false;
  if (rd && proto::seq_lt(seq, qp.sq_tail) && !proto::seq_lt(seq, qp.sq_head)) {
    bump(&qp, &Counters::local_errors);
    qp.sqe(seq).status = WcStatus::kLocAccessErr;
  }
  if (qp.placed && !hal_.dma.owner_alive(qp.owner)) {
    // Nothing is acknowledged, nothing NACKed: a dead owner's QP is as if
    // destroyed (hal.h owner_alive); the host tears it down.
    qp.placed = false;
    qp.placed_recvs.clear();
    bump(&qp, &Counters::rx_drop_owner_gone);
  }
  if (qp.placed && qp.init.type == QpType::kUc) uc::placement_failed(*this, qp);  // no NACK in UC
  if (qp.placed) responder::placement_failed(*this, qp);  // NACK, QP to ERR
  if (rd) completer::fail(*this, qp, seq, WcStatus::kLocAccessErr);
}

void Core::forget(Qp& qp) {
  std::erase(uncommitted_, &qp);
  std::erase(failing_, &qp);
  qp.in_uncommitted = false;
}

void Core::qp_to_error(Qp& qp) {
  if (qp.state == QpState::kErr) return;
  touch(qp);
  // Receives below complete; their data must have landed (or they fail).
  if (qp.in_uncommitted) commit(qp.owner);
  if (qp.state == QpState::kErr) return;
  qp.state = QpState::kErr;
  // Send queue, in order: an errored WQE keeps its status, the rest flush.
  for (uint32_t s = qp.sq_head; s != qp.sq_tail; ++s) {
    SendWqe& w = qp.sqe(s);
    Completion wc;
    wc.wr_id = w.wr.wr_id;
    wc.status = w.status != WcStatus::kSuccess ? w.status : WcStatus::kWrFlushErr;
    wc.qp_num = qp.qpn;
    wc.src_qp = qp.attr.dest_qp_num;
    w.release_read_state();
    complete(qp, qp.init.send_cqn, wc);
  }
  qp.sq_head = qp.sq_next = qp.sq_tail;
  // Receive queue, in order: finished receives complete with their status.
  for (uint32_t s = qp.rq_head; s != qp.rq_tail; ++s) {
    RecvWqe& r = qp.rqe(s);
    Completion wc;
    wc.wr_id = r.wr.wr_id;
    wc.status = r.done ? r.status : WcStatus::kWrFlushErr;
    wc.opcode = r.done ? r.opcode : WcOpcode::kRecv;
    wc.byte_len = r.done ? r.total : 0;
    wc.imm = r.imm;
    wc.wc_flags = r.done && r.with_imm ? uint32_t{kWcWithImm} : 0u;
    wc.qp_num = qp.qpn;
    wc.src_qp = qp.attr.dest_qp_num;
    complete(qp, qp.init.recv_cqn, wc);
  }
  qp.rq_head = qp.rq_tail;
  qp.sb.reset(qp.sb.nxt());
  qp.rd_outstanding = 0;
  qp.rd_bytes = 0;
  qp.reads.clear();
  responder::drop_held(qp);
  qp.rto_deadline = qp.rack_deadline = qp.pace_deadline = qp.ack_deadline = kNever;
  qp.tlp_deadline = qp.read_deadline = kNever;
  qp.tlp_out = qp.rto_undo = false;
  qp.pending_acks = 0;
  // IB: a QP on an SRQ that enters ERR takes no more of its WQEs.
  if (qp.srq) hal_.events.async_event(EventType::kQpLastWqeReached, qp.qpn);
}

namespace {

// Walks an SGL from message offset `offset`, calling f(addr, span index, n).
template <class F>
bool sgl_walk(const Sge* sg, uint32_t n, uint64_t offset, size_t len, F&& f) {
  size_t done = 0;
  for (uint32_t i = 0; i < n && done < len; ++i) {
    if (offset >= sg[i].length) {
      offset -= sg[i].length;
      continue;
    }
    size_t take = std::min<uint64_t>(sg[i].length - offset, len - done);
    if (!f(sg[i].addr + offset, done, take)) return false;
    done += take;
    offset = 0;
  }
  return done == len;
}

}  // namespace

bool sgl_read(Core& c, OwnerId owner, const Sge* sg, uint32_t n, uint64_t offset,
              std::span<uint8_t> dst) {
  return sgl_walk(sg, n, offset, dst.size(), [&](uint64_t addr, size_t at, size_t k) {
    return c.hal().dma.read_payload(owner, addr, dst.subspan(at, k));
  });
}

bool sgl_write(Core& c, OwnerId owner, const Sge* sg, uint32_t n, uint64_t offset,
               std::span<const uint8_t> src) {
  return sgl_walk(sg, n, offset, src.size(), [&](uint64_t addr, size_t at, size_t k) {
    return c.hal().dma.write(owner, addr, src.subspan(at, k));
  });
}

// ---------------- Engine ----------------

namespace {
constexpr uint32_t kQpIndexBits = 12;
constexpr uint32_t kQpIndexMask = (1u << kQpIndexBits) - 1;
constexpr uint32_t kFirstQpIndex = 2;  // QPN 0 and 1 are special in IB
static_assert(kQpIndexMask == 0xFFF, "Core::timers_ is indexed by the QPN index");
constexpr uint32_t kPumpBudget = 16;   // packets per QP per round (fairness)

uint32_t pow2_at_least(uint32_t n) {
  uint32_t p = 1;
  while (p < n) p <<= 1;
  return p;
}
}  // namespace

struct Engine::Impl {
  Impl(const EngineConfig& cfg, Hal hal)
      : core(cfg, hal), pds(cfg.caps.max_pd), cqs(cfg.caps.max_cq), srqs(cfg.caps.max_srq) {}

  Core core;
  bool busy = false;  // inside an entry point (reentrancy check)
  Table<Pd> pds;
  Table<Cq> cqs;
  SrqTable srqs;
  std::vector<std::unique_ptr<Qp>> qps;  // by QPN index
  std::vector<uint16_t> qp_gen;
  uint32_t qp_count = 0;
  std::vector<uint32_t> due;  // on_timer's QPs, kept for its capacity

  Qp* lookup(uint32_t qpn) const {
    uint32_t i = qpn & kQpIndexMask;
    if (i >= qps.size() || !qps[i] || qps[i]->qpn != qpn) return nullptr;
    return qps[i].get();
  }
  // The QP an entry point names: its deadlines may change (timer_index.h).
  Qp* find_qp(uint32_t qpn) const {
    Qp* q = lookup(qpn);
    if (q) core.touch(*q);
    return q;
  }
  bool answer_trimmed(std::span<const uint8_t> frame);
  Time deadline_of(uint32_t qpn) const {
    const Qp* q = lookup(qpn);
    return q ? deadline(*q) : kNever;
  }
  int owned_qp(OwnerId owner, uint32_t qpn, Qp** out) const {
    Qp* qp = find_qp(qpn);
    if (!qp) return ENOENT;
    if (qp->owner != owner) return EPERM;
    *out = qp;
    return 0;
  }
  int owned_srq(OwnerId owner, uint32_t srqn, Srq** out) const {
    Srq* s = srqs.get(srqn);
    if (!s) return ENOENT;
    if (s->owner != owner) return EPERM;
    *out = s;
    return 0;
  }
  template <class T>
  static int owned(Table<T>& t, OwnerId owner, uint32_t h, T** out) {
    T* v = t.get(h);
    if (!v) return ENOENT;
    if (v->owner != owner) return EPERM;
    *out = v;
    return 0;
  }

  // End of every entry point: CQ overflows move the CQ's QPs to ERR.
  void settle() {
    auto& list = core.overflowed_cqs();
    while (!list.empty()) {
      uint32_t cqn = list.back();
      list.pop_back();
      Cq* cq = cqs.get(cqn);
      if (!cq || cq->overflowed) continue;
      cq->overflowed = true;
      core.hal().events.async_event(EventType::kCqErr, cqn);
      for (auto& q : qps) {
        if (q && q->state != QpState::kErr && (q->init.send_cqn == cqn || q->init.recv_cqn == cqn)) {
          core.qp_to_error(*q);
          core.hal().events.async_event(EventType::kQpFatal, q->qpn);
        }
      }
    }
  }

  void reset_transport(Qp& qp) {
    if (qp.srq) srq::release_window(core, qp);
    qp.sq_head = qp.sq_next = qp.sq_tail = 0;
    qp.rq_head = qp.rq_tail = 0;
    qp.sb.reset(0);
    qp.rtt = RttEstimator{};
    qp.next_recv_msn = qp.next_rd_msn = qp.rd_outstanding = 0;
    qp.rd_bytes = 0;
    for (SendWqe& w : qp.sq) w.release_read_state();
    qp.credit = qp.retries = qp.backoff = 0;
    qp.rto_deadline = qp.rack_deadline = qp.pace_deadline = qp.ack_deadline = kNever;
    qp.tlp_deadline = qp.read_deadline = kNever;
    qp.tlp_out = qp.rto_undo = false;
    qp.req_error = false;
    qp.reads.clear();
    responder::drop_held(qp);
    qp.resp_rd_msn = 0;
    qp.atomics = {};
    qp.pending_acks = 0;
    qp.ce_count = 0;
    qp.comm_est = false;
    qp.has_fatal_nack = qp.fatal_read = false;
    qp.placed = qp.rd_placed = false;
    qp.placed_recvs.clear();
    qp.uc = UcReceive{};
    core.forget(qp);
  }

  // IB: a WR posted to a QP in ERR completes at once with kWrFlushErr.
  int flush_at_once(Qp& qp, uint64_t wr_id, bool send) {
    Completion wc;
    wc.wr_id = wr_id;
    wc.status = WcStatus::kWrFlushErr;
    wc.opcode = send ? WcOpcode::kSend : WcOpcode::kRecv;
    wc.qp_num = qp.qpn;
    core.complete(qp, send ? qp.init.send_cqn : qp.init.recv_cqn, wc);
    settle();
    return 0;
  }

  int make_cc(Qp& qp) {
    CongestionParams p;
    p.mtu_bytes = qp.mtu;
    p.base_rtt = core.config().base_rtt;
    p.link_bps = core.config().link_bps;
    auto cc = make_congestion_control(core.config().congestion, p);
    if (!cc) return EINVAL;
    qp.cc = std::move(cc);
    return 0;
  }

  void apply(Qp& qp, const QpAttr& a, uint32_t mask) {
    QpAttr& q = qp.attr;
    if (mask & kAttrAccessFlags) q.qp_access_flags = a.qp_access_flags;
    if (mask & kAttrPkeyIndex) q.pkey_index = a.pkey_index;
    if (mask & kAttrPort) q.port_num = a.port_num;
    if (mask & kAttrAv) q.av = a.av;
    if (mask & kAttrPathMtu) q.path_mtu = a.path_mtu;
    if (mask & kAttrTimeout) q.timeout = a.timeout;
    if (mask & kAttrRetryCnt) q.retry_cnt = a.retry_cnt;
    if (mask & kAttrRnrRetry) q.rnr_retry = a.rnr_retry;
    if (mask & kAttrRqPsn) q.rq_psn = a.rq_psn;
    if (mask & kAttrMaxQpRdAtomic) q.max_rd_atomic = a.max_rd_atomic;
    if (mask & kAttrMinRnrTimer) q.min_rnr_timer = a.min_rnr_timer;
    if (mask & kAttrSqPsn) q.sq_psn = a.sq_psn;
    if (mask & kAttrMaxDestRdAtomic) q.max_dest_rd_atomic = a.max_dest_rd_atomic;
    if (mask & kAttrDestQpn) q.dest_qp_num = a.dest_qp_num;
    if (mask & kAttrQkey) q.qkey = a.qkey;
  }

  void enter(Qp& qp, QpState from, QpState to) {
    switch (to) {
      case QpState::kReset:
        reset_transport(qp);
        qp.error_status = WcStatus::kSuccess;
        qp.state = to;
        return;
      case QpState::kErr:
        core.qp_to_error(qp);
        return;
      case QpState::kRtr:
        if (from == QpState::kInit && qp.init.type == QpType::kUd) {
          qp.mtu = datagram::mtu(core.config().port.link_mtu);
        } else if (from == QpState::kInit) {
          qp.mtu = effective_mtu(qp.attr.path_mtu, core.config().port.link_mtu);
          qp.rw.reset(qp.attr.rq_psn);
          qp.uc.next_psn = qp.attr.rq_psn;
          make_cc(qp);
        }
        break;
      case QpState::kRts:
        if (from == QpState::kRtr) qp.sb.reset(qp.attr.sq_psn);
        if (from == QpState::kRtr) qp.uc.send_psn = qp.attr.sq_psn;
        if (from == QpState::kRtr) qp.ud_psn = qp.attr.sq_psn;
        break;
      case QpState::kSqd:
        if (from != QpState::kSqd) qp.sq_drained_reported = false;
        break;
      default: break;
    }
    qp.state = to;
    if (to == QpState::kSqd) completer::drain(core, qp);
    if (to == QpState::kRts) core.activate(qp);
  }

  // A frame for a UD QP (datagram.cc does the checks and the placement).
  void on_datagram(Qp& qp, const proto::Frame& f, size_t frame_bytes) {
    if (!core.hal().dma.owner_alive(qp.owner)) {  // as if destroyed (hal.h)
      core.bump(&qp, &Counters::rx_drop_owner_gone);
      return;
    }
    qp.counters.rx_packets++;
    qp.counters.rx_bytes += frame_bytes;
    datagram::on_frame(core, qp, f);
    settle();
  }

  // A multicast datagram: a copy to every QP attached to its group.
  void on_multicast(const proto::Frame& f, size_t frame_bytes) {
    auto it = core.groups().find(f.headers.dst_ip.bytes);
    if (it == core.groups().end()) {
      core.bump(nullptr, &Counters::rx_drop_mcast_no_group);
      return;
    }
    const std::vector<uint32_t> members = it->second;  // delivery may not change it, but copy
    for (uint32_t qpn : members)
      if (Qp* qp = find_qp(qpn)) on_datagram(*qp, f, frame_bytes);
  }

  void leave_groups(uint32_t qpn) {
    auto& g = core.groups();
    for (auto it = g.begin(); it != g.end();) {
      std::erase(it->second, qpn);
      it = it->second.empty() ? g.erase(it) : std::next(it);
    }
  }

  void remove_ah(uint32_t ahn) {
    if (Ah* ah = core.ahs().get(ahn))
      if (Pd* pd = pds.get(ah->pdn)) --pd->refs;
    core.ahs().remove(ahn);
  }

  void destroy(Qp& qp) {
    if (qp.srq) --qp.srq->qps;
    // IB: a type 2 window is associated with its QP; with the QP gone it
    // grants nothing (docs/engine.md §Memory windows).
    if (uint32_t n = core.mws().invalidate_qp(qp.qpn, core.mrs()))
      core.bump(&qp, &Counters::mw_invalidated_qp_destroyed, n);
    if (Pd* pd = pds.get(qp.init.pdn)) --pd->refs;
    if (Cq* cq = cqs.get(qp.init.send_cqn)) --cq->refs;
    if (Cq* cq = cqs.get(qp.init.recv_cqn)) --cq->refs;
    core.credit()->forget(qp.qpn);
    core.forget(qp);
    core.timers().forget(qp.qpn);
    leave_groups(qp.qpn);
    auto& act = core.active();
    act.erase(std::remove(act.begin(), act.end(), &qp), act.end());
    uint32_t i = qp.qpn & kQpIndexMask;
    ++qp_gen[i];
    qps[i].reset();
    --qp_count;
  }

  void timers(Qp& qp, Time now) {
    if (qp.ack_deadline <= now) responder::send_ack(core, qp, false);
    if (qp.rack_deadline <= now) {
      qp.rack_deadline = kNever;
      Time recheck = kNever;
      auto& paths = core.lost_paths();
      paths.clear();
      uint64_t lost = qp.sb.detect_losses(now, qp.rtt, &recheck, &paths);
      qp.rack_deadline = recheck;
      if (lost) {
        qp.cc->on_loss(now, lost);
        for (uint8_t p : paths) qp.paths->on_loss(p, now);
        qp.rtt.on_recovery();
        core.activate(qp);
      }
    }
    if (qp.tlp_deadline <= now) requester::on_tlp(core, qp);
    if (qp.read_deadline <= now) requester::on_read_check(core, qp);
    if (qp.rto_deadline <= now) requester::on_rto(core, qp);
    if (qp.sb.any_rnr() && qp.sb.next_rnr_release() <= now) {
      qp.sb.release_rnr(now);
      requester::arm_rto(core, qp, false);
      core.activate(qp);
    }
    if (qp.pace_deadline <= now) {
      qp.pace_deadline = kNever;
      core.activate(qp);
    }
  }

  Time deadline(const Qp& qp) const {
    Time t = std::min({qp.ack_deadline, qp.rack_deadline, qp.tlp_deadline, qp.rto_deadline,
                       qp.pace_deadline, qp.read_deadline});
    if (qp.sb.any_rnr()) t = std::min(t, qp.sb.next_rnr_release());
    return t;
  }

  void pump() {
    auto& act = core.active();
    PacketPortInterface& port = core.hal().packets;
    bool progress = true;
    while (progress) {
      progress = false;
      for (size_t i = 0; i < act.size();) {
        if (!port.tx_ready()) {  // hal.h: the host pumps again when it has room
          std::rotate(act.begin(), act.begin() + static_cast<std::ptrdiff_t>(i), act.end());
          return;  // the QPs not served in this round go first next time
        }
        Qp& qp = *act[i];
        core.touch(qp);
        uint32_t n = qp.init.type == QpType::kUd   ? datagram::run(core, qp, kPumpBudget)
                     : qp.init.type == QpType::kUc ? uc::run(core, qp, kPumpBudget)
                                                   : requester::run(core, qp, kPumpBudget) +
                                                         responder::run(core, qp, kPumpBudget);
        if (n) {
          progress = true;
          ++i;
        } else {
          qp.in_active = false;
          act[i] = act.back();
          act.pop_back();
        }
      }
    }
  }
};

namespace {
// docs/engine.md §Trust: once connected (RTR on) a QP talks to one peer, the
// address of its AV; a frame from any other source is not its peer's. The
// header names no source QPN (docs/protocol.md §3.1), so the address and the
// destination QPN are what identify the peer. Before RTR the QP has no peer
// and every packet is dropped by state.
bool from_peer(const Qp& qp, const proto::FrameHeaders& h) {
  if (qp.state == QpState::kReset || qp.state == QpState::kInit) return true;
  return h.src_ip == qp.attr.av.dgid;
}

}  // namespace

// docs/protocol.md §3.8: a request cut to its headers by a switch that marks
// trimmed packets with the configured DSCP. It has no valid ICRC, so only
// the checks that need none apply (QP, peer address, owner); then the
// responder NACKs it TRIMMED. False: not a trimmed request (a parse drop).
bool Engine::Impl::answer_trimmed(std::span<const uint8_t> frame) {
  const uint8_t dscp = core.config().trimmed_dscp;
  if (dscp == 0) return false;
  auto t = proto::parse_trimmed_frame(frame, dscp);
  if (!t) return false;
  Qp* qp = find_qp(t.value().mbth.dest_qpn);
  if (!qp) {
    core.bump(nullptr, &Counters::rx_drop_unknown_qp);
  } else if (!from_peer(*qp, t.value().headers)) {
    core.bump(qp, &Counters::rx_drop_wrong_source);
  } else if (!core.hal().dma.owner_alive(qp->owner)) {
    core.bump(qp, &Counters::rx_drop_owner_gone);
  } else {
    responder::on_trimmed(core, *qp, t.value().mbth);
  }
  return true;
}

namespace {
// docs/firmware-hal.md: a host must not call into the engine from inside a
// HAL callback (the engine is mid-update then). Caught in debug builds.
class EntryGuard {
 public:
  explicit EntryGuard(bool& busy) : busy_(busy) {
    assert(!busy_ && "Engine entered from inside a HAL callback");
    busy_ = true;
  }
  ~EntryGuard() { busy_ = false; }
  EntryGuard(const EntryGuard&) = delete;
  EntryGuard& operator=(const EntryGuard&) = delete;

 private:
  bool& busy_;
};
}  // namespace

Engine::Engine(const EngineConfig& config, Hal hal) : impl_(std::make_unique<Impl>(config, hal)) {}
Engine::~Engine() = default;

void Engine::set_port(const PortInfo& port) {
  EntryGuard guard(impl_->busy);
  impl_->core.config().port = port;
  impl_->core.hal().events.async_event(port.active ? EventType::kPortActive : EventType::kPortErr, 1);
}
const PortInfo& Engine::port() const { return impl_->core.config().port; }
const DeviceCaps& Engine::caps() const { return impl_->core.config().caps; }

int Engine::create_pd(OwnerId owner, uint32_t* pdn) {
  EntryGuard guard(impl_->busy);
  uint32_t h = impl_->pds.add(Pd{owner, 0});
  if (!h) return ENOMEM;
  *pdn = h;
  return 0;
}

int Engine::destroy_pd(OwnerId owner, uint32_t pdn) {
  EntryGuard guard(impl_->busy);
  Pd* pd = nullptr;
  if (int e = Impl::owned(impl_->pds, owner, pdn, &pd)) return e;
  if (pd->refs) return EBUSY;
  impl_->pds.remove(pdn);
  return 0;
}

int Engine::reg_mr(OwnerId owner, uint32_t pdn, uint64_t addr, uint64_t length, uint32_t access,
                   MrKeys* keys) {
  EntryGuard guard(impl_->busy);
  Pd* pd = nullptr;
  if (int e = Impl::owned(impl_->pds, owner, pdn, &pd)) return e;
  if (length > caps().max_mr_size) return EINVAL;
  if (int e = impl_->core.mrs().reg(owner, pdn, addr, length, access, impl_->core.hal().random,
                                    keys))
    return e;
  ++pd->refs;
  return 0;
}

int Engine::dereg_mr(OwnerId owner, uint32_t lkey) {
  EntryGuard guard(impl_->busy);
  uint32_t pdn = 0;
  if (int e = impl_->core.mrs().dereg(owner, lkey, &pdn)) return e;
  if (Pd* pd = impl_->pds.get(pdn)) --pd->refs;
  return 0;
}

int Engine::alloc_mw(OwnerId owner, uint32_t pdn, MwType type, uint32_t* handle, uint32_t* rkey) {
  EntryGuard guard(impl_->busy);
  Pd* pd = nullptr;
  if (int e = Impl::owned(impl_->pds, owner, pdn, &pd)) return e;
  Core& c = impl_->core;
  if (int e = c.mws().alloc(owner, pdn, type, c.hal().random, c.mrs(), handle, rkey)) return e;
  ++pd->refs;
  return 0;
}

int Engine::dealloc_mw(OwnerId owner, uint32_t handle) {
  EntryGuard guard(impl_->busy);
  Core& c = impl_->core;
  const Mw* w = c.mws().get(handle);
  uint32_t pdn = w ? w->pdn : 0;
  if (int e = c.mws().dealloc(owner, handle, c.mrs())) return e;
  if (Pd* pd = impl_->pds.get(pdn)) --pd->refs;
  return 0;
}

int Engine::create_cq(OwnerId owner, uint32_t cqe, uint32_t* cqn) {
  EntryGuard guard(impl_->busy);
  if (cqe == 0 || cqe > caps().max_cqe) return EINVAL;
  uint32_t h = impl_->cqs.add(Cq{owner, cqe, 0, false});
  if (!h) return ENOMEM;
  *cqn = h;
  return 0;
}

int Engine::destroy_cq(OwnerId owner, uint32_t cqn) {
  EntryGuard guard(impl_->busy);
  Cq* cq = nullptr;
  if (int e = Impl::owned(impl_->cqs, owner, cqn, &cq)) return e;
  if (cq->refs) return EBUSY;
  impl_->cqs.remove(cqn);
  return 0;
}

int Engine::create_qp(OwnerId owner, const QpInitAttr& init, uint32_t* qpn, QpCap* actual_cap) {
  EntryGuard guard(impl_->busy);
  Impl& m = *impl_;
  Pd* pd = nullptr;
  Cq *scq = nullptr, *rcq = nullptr;
  if (init.type != QpType::kRc && init.type != QpType::kUd && init.type != QpType::kUc)
    return EINVAL;
  if (int e = Impl::owned(m.pds, owner, init.pdn, &pd)) return e;
  if (int e = Impl::owned(m.cqs, owner, init.send_cqn, &scq)) return e;
  if (int e = Impl::owned(m.cqs, owner, init.recv_cqn, &rcq)) return e;
  Srq* srq = nullptr;
  if (init.srqn)
    if (int e = m.owned_srq(owner, init.srqn, &srq)) return e;
  const DeviceCaps& c = caps();
  QpCap cap = init.cap;
  if (srq) cap.max_recv_wr = cap.max_recv_sge = 0;  // IB: ignored with an SRQ
  if (cap.max_send_wr > c.max_qp_wr || cap.max_recv_wr > c.max_qp_wr ||
      cap.max_send_sge > c.max_sge || cap.max_recv_sge > c.max_sge ||
      cap.max_inline_data > c.max_inline)
    return EINVAL;
  if (m.qp_count >= c.max_qp) return ENOMEM;
  uint32_t idx = kFirstQpIndex;
  while (idx < m.qps.size() && m.qps[idx]) ++idx;
  if (idx > kQpIndexMask) return ENOMEM;
  if (idx >= m.qps.size()) {
    m.qps.resize(idx + 1);
    m.qp_gen.resize(idx + 1);
  }
  auto qp = std::make_unique<Qp>();
  qp->qpn = (uint32_t{m.qp_gen[idx]} & 0xFFF) << kQpIndexBits | idx;
  qp->owner = owner;
  qp->init = init;
  qp->init.cap = cap;
  qp->attr.cap = cap;
  qp->srq = srq;
  qp->sq.resize(pow2_at_least(std::max<uint32_t>(1, cap.max_send_wr)));
  qp->sq_mask = static_cast<uint32_t>(qp->sq.size() - 1);
  // With an SRQ the ring is the window of receives taken from it (srq.h).
  qp->rq.resize(srq ? srq->attr.max_wr : pow2_at_least(std::max<uint32_t>(1, cap.max_recv_wr)));
  qp->rq_mask = static_cast<uint32_t>(qp->rq.size() - 1);
  // UC uses one path: another could reorder its packets, which is loss to UC.
  uint32_t paths = init.type == QpType::kUc ? 1 : m.core.config().num_paths;
  qp->paths = make_path_selector(std::max<uint32_t>(1, paths), m.core.hal().random.next(),
                                 m.core.config().path_train);
  if (int e = m.make_cc(*qp)) return e;
  m.reset_transport(*qp);
  ++pd->refs;
  ++scq->refs;
  ++rcq->refs;
  if (srq) ++srq->qps;
  *qpn = qp->qpn;
  if (actual_cap) *actual_cap = cap;
  m.qps[idx] = std::move(qp);
  ++m.qp_count;
  return 0;
}

int Engine::modify_qp(OwnerId owner, uint32_t qpn, const QpAttr& attr, uint32_t attr_mask) {
  EntryGuard guard(impl_->busy);
  Qp* qp = nullptr;
  if (int e = impl_->owned_qp(owner, qpn, &qp)) return e;
  QpState next;
  uint32_t gids = static_cast<uint32_t>(port().gids.size());
  if (int e = check_modify(qp->init.type, qp->state, attr, attr_mask, caps(), gids, &next, nullptr))
    return e;
  QpState from = qp->state;
  impl_->apply(*qp, attr, attr_mask);
  impl_->enter(*qp, from, next);
  impl_->settle();
  return 0;
}

int Engine::query_qp(OwnerId owner, uint32_t qpn, QpAttr* attr, QpInitAttr* init) const {
  Qp* qp = nullptr;
  if (int e = impl_->owned_qp(owner, qpn, &qp)) return e;
  if (attr) {
    *attr = qp->attr;
    attr->qp_state = attr->cur_qp_state = qp->state;
    attr->cap = qp->init.cap;
  }
  if (init) *init = qp->init;
  return 0;
}

int Engine::queue_depths(OwnerId owner, uint32_t qpn, uint32_t* sq, uint32_t* rq) const {
  Qp* qp = nullptr;
  if (int e = impl_->owned_qp(owner, qpn, &qp)) return e;
  *sq = qp->sq_tail - qp->sq_head;
  *rq = qp->srq ? 0 : qp->rq_tail - qp->rq_head;  // an SRQ QP's window is not its ring's
  return 0;
}

int Engine::destroy_qp(OwnerId owner, uint32_t qpn) {
  EntryGuard guard(impl_->busy);
  Qp* qp = nullptr;
  if (int e = impl_->owned_qp(owner, qpn, &qp)) return e;
  if (qp->srq) srq::release_window(impl_->core, *qp);  // the SRQ's buffers go back
  impl_->destroy(*qp);
  impl_->settle();
  return 0;
}

int Engine::create_srq(OwnerId owner, uint32_t pdn, const SrqAttr& want, uint32_t* srqn,
                       SrqAttr* actual, const char** why) {
  EntryGuard guard(impl_->busy);
  const char* reason = nullptr;
  Pd* pd = nullptr;
  if (int e = Impl::owned(impl_->pds, owner, pdn, &pd)) return e;
  SrqAttr attr;
  if (int e = srq::check_create(caps(), want, &attr, &reason)) {
    if (why) *why = reason;
    return e;
  }
  Srq* s = impl_->srqs.add();
  if (!s) return ENOMEM;
  s->owner = owner;
  s->pdn = pdn;
  s->attr = attr;
  s->ring.resize(attr.max_wr);
  ++pd->refs;
  *srqn = s->srqn;
  if (actual) *actual = attr;
  return 0;
}

int Engine::modify_srq(OwnerId owner, uint32_t srqn, const SrqAttr& attr, uint32_t mask,
                       const char** why) {
  EntryGuard guard(impl_->busy);
  Srq* s = nullptr;
  if (int e = impl_->owned_srq(owner, srqn, &s)) return e;
  const char* reason = nullptr;
  int e = srq::modify(*s, attr, mask, &reason);
  if (e && why) *why = reason;
  return e;
}

int Engine::query_srq(OwnerId owner, uint32_t srqn, SrqAttr* attr, uint32_t* taken) const {
  Srq* s = nullptr;
  if (int e = impl_->owned_srq(owner, srqn, &s)) return e;
  if (attr) *attr = s->attr;
  if (taken) *taken = s->head;
  return 0;
}

int Engine::destroy_srq(OwnerId owner, uint32_t srqn, const char** why) {
  EntryGuard guard(impl_->busy);
  Srq* s = nullptr;
  if (int e = impl_->owned_srq(owner, srqn, &s)) return e;
  if (s->qps) {
    if (why) *why = "SRQ still has QPs attached: destroy them first";
    return EBUSY;
  }
  if (Pd* pd = impl_->pds.get(s->pdn)) --pd->refs;
  impl_->srqs.remove(srqn);
  return 0;
}

int Engine::post_srq_recv(OwnerId owner, uint32_t srqn, const RecvWr& wr) {
  EntryGuard guard(impl_->busy);
  Srq* s = nullptr;
  if (int e = impl_->owned_srq(owner, srqn, &s)) return e;
  return srq::post(*s, wr);
}

void Engine::destroy_owner(OwnerId owner) {
  EntryGuard guard(impl_->busy);
  Impl& m = *impl_;
  for (auto& q : m.qps)
    if (q && q->owner == owner) m.destroy(*q);  // no completions: its CQs die too
  for (uint32_t i = 1; i < m.srqs.end(); ++i)
    if (Srq* s = m.srqs.get(i); s && s->owner == owner) {
      if (Pd* pd = m.pds.get(s->pdn)) --pd->refs;
      m.srqs.remove(i);
    }
  for (uint32_t i = 1; i < m.cqs.end(); ++i)
    if (Cq* cq = m.cqs.get(i); cq && cq->owner == owner) m.cqs.remove(i);
  auto& ahs = m.core.ahs();
  for (uint32_t i = 1; i < ahs.end(); ++i)
    if (Ah* ah = ahs.get(i); ah && ah->owner == owner) m.remove_ah(i);
  for (uint32_t i = 1; i < m.core.mws().end(); ++i)
    if (const Mw* w = m.core.mws().get(i); w && w->owner == owner) {
      if (Pd* pd = m.pds.get(w->pdn)) --pd->refs;
      m.core.mws().dealloc(owner, i, m.core.mrs());
    }
  m.core.mrs().remove_owner(owner, [&](const Mr& mr) {
    if (Pd* pd = m.pds.get(mr.pdn)) --pd->refs;
  });
  for (uint32_t i = 1; i < m.pds.end(); ++i)
    if (Pd* pd = m.pds.get(i); pd && pd->owner == owner) m.pds.remove(i);
}

int Engine::create_ah(OwnerId owner, uint32_t pdn, const AddressVector& av, uint32_t* ahn) {
  EntryGuard guard(impl_->busy);
  Pd* pd = nullptr;
  if (int e = Impl::owned(impl_->pds, owner, pdn, &pd)) return e;
  if (av.sgid_index >= port().gids.size()) return EINVAL;
  uint32_t h = impl_->core.ahs().add(Ah{owner, pdn, av});
  if (!h) return ENOMEM;
  ++pd->refs;
  *ahn = h;
  return 0;
}

int Engine::destroy_ah(OwnerId owner, uint32_t ahn) {
  EntryGuard guard(impl_->busy);
  Ah* ah = nullptr;
  if (int e = Impl::owned(impl_->core.ahs(), owner, ahn, &ah)) return e;
  impl_->remove_ah(ahn);
  return 0;
}

int Engine::attach_mcast(OwnerId owner, uint32_t qpn, const proto::IpAddr& group) {
  EntryGuard guard(impl_->busy);
  Qp* qp = nullptr;
  if (int e = impl_->owned_qp(owner, qpn, &qp)) return e;
  if (qp->init.type != QpType::kUd || !group.is_multicast()) return EINVAL;
  auto& groups = impl_->core.groups();
  auto it = groups.find(group.bytes);
  if (it == groups.end()) {
    if (groups.size() >= caps().max_mcast_grp) return ENOMEM;
    it = groups.emplace(group.bytes, std::vector<uint32_t>{}).first;
  }
  std::vector<uint32_t>& members = it->second;
  if (std::find(members.begin(), members.end(), qpn) != members.end()) return 0;  // already
  if (members.size() >= caps().max_mcast_qp_attach) return ENOMEM;
  members.push_back(qpn);
  return 0;
}

int Engine::detach_mcast(OwnerId owner, uint32_t qpn, const proto::IpAddr& group) {
  EntryGuard guard(impl_->busy);
  Qp* qp = nullptr;
  if (int e = impl_->owned_qp(owner, qpn, &qp)) return e;
  auto& groups = impl_->core.groups();
  auto it = groups.find(group.bytes);
  if (it == groups.end() || std::erase(it->second, qpn) == 0) return EINVAL;
  if (it->second.empty()) groups.erase(it);
  return 0;
}

int Engine::post_send(OwnerId owner, uint32_t qpn, const SendWr& wr) {
  EntryGuard guard(impl_->busy);
  Qp* qp = nullptr;
  if (int e = impl_->owned_qp(owner, qpn, &qp)) return e;
  if (qp->state != QpState::kRts && qp->state != QpState::kSqd && qp->state != QpState::kErr &&
      qp->state != QpState::kSqe)
    return EINVAL;
  if (static_cast<unsigned>(wr.opcode) > static_cast<unsigned>(WrOpcode::kSendWithInv))
    return EINVAL;
  // Memory windows (docs/engine.md §Memory windows): binds and local
  // invalidations on RC and UC; SEND_WITH_INV on RC only (UC has no such
  // opcode, docs/protocol.md §15); binds and invalidations carry no data.
  bool mw_op = wr.opcode == WrOpcode::kBindMw || wr.opcode == WrOpcode::kLocalInv;
  if (mw_op && qp->init.type != QpType::kRc && qp->init.type != QpType::kUc) return EINVAL;
  if (wr.opcode == WrOpcode::kSendWithInv && qp->init.type != QpType::kRc) return EINVAL;
  if (mw_op && (wr.num_sge || (wr.send_flags & kSendInline))) return EINVAL;
  if (qp->init.type == QpType::kUd && datagram::check_post(wr)) return EINVAL;
  bool inl = wr.send_flags & kSendInline;
  bool atomic = wr.opcode == WrOpcode::kAtomicCmpSwap || wr.opcode == WrOpcode::kAtomicFetchAdd;
  if (inl && (wr.inline_data.size() > qp->init.cap.max_inline_data ||
              wr.opcode == WrOpcode::kRdmaRead || atomic))
    return EINVAL;
  if (!inl && (wr.num_sge > qp->init.cap.max_send_sge || !wr.inline_data.empty())) return EINVAL;
  if (atomic && (wr.num_sge != 1 || wr.sg[0].length != 8)) return EINVAL;
  if (qp->init.type == QpType::kUc && (atomic || wr.opcode == WrOpcode::kRdmaRead)) return EINVAL;
  if (qp->state == QpState::kErr || qp->state == QpState::kSqe)
    return impl_->flush_at_once(*qp, wr.wr_id, true);
  if (qp->sq_tail - qp->sq_head >= qp->init.cap.max_send_wr) return ENOMEM;
  SendWqe& w = qp->sqe(qp->sq_tail);
  w.wr = wr;
  uint64_t len = 0;
  if (inl) len = wr.inline_data.size();
  else
    for (uint32_t i = 0; i < wr.num_sge; ++i) len += wr.sg[i].length;
  w.length = static_cast<uint32_t>(std::min<uint64_t>(len, UINT32_MAX));
  w.msn = w.sent = w.max_psn = 0;
  w.started = w.all_sent = w.response_done = w.rd_counted = false;
  w.read_check = kNever;
  w.release_read_state();  // READ tracking is allocated when the WQE starts
  // Validated now; a WQE that fails completes with its status in posting
  // order and moves the QP to ERR (requester::start_wqe, completer::drain).
  w.status = len > caps().max_msg_size ? WcStatus::kLocLenErr
                                       : requester::check_local(impl_->core, *qp, w);
  ++qp->sq_tail;
  impl_->core.activate(*qp);
  return 0;
}

int Engine::post_send_error(OwnerId owner, uint32_t qpn, uint64_t wr_id, WcStatus status) {
  EntryGuard guard(impl_->busy);
  Qp* qp = nullptr;
  if (int e = impl_->owned_qp(owner, qpn, &qp)) return e;
  if (status == WcStatus::kSuccess) return EINVAL;
  if (qp->state != QpState::kRts && qp->state != QpState::kSqd && qp->state != QpState::kErr)
    return EINVAL;
  if (qp->state == QpState::kErr) return impl_->flush_at_once(*qp, wr_id, true);
  if (qp->sq_tail - qp->sq_head >= qp->init.cap.max_send_wr) return ENOMEM;
  SendWqe& w = qp->sqe(qp->sq_tail);
  w = SendWqe{};  // carries nothing: it never executes
  w.wr.wr_id = wr_id;
  w.wr.send_flags = kSendSignaled;
  w.status = status;
  ++qp->sq_tail;
  impl_->core.activate(*qp);
  return 0;
}

int Engine::post_recv(OwnerId owner, uint32_t qpn, const RecvWr& wr) {
  EntryGuard guard(impl_->busy);
  Qp* qp = nullptr;
  if (int e = impl_->owned_qp(owner, qpn, &qp)) return e;
  if (qp->state == QpState::kReset || qp->srq) return EINVAL;  // an SRQ QP has no RQ
  if (wr.num_sge > qp->init.cap.max_recv_sge) return EINVAL;
  if (qp->rq_tail - qp->rq_head >= qp->init.cap.max_recv_wr) return ENOMEM;
  if (qp->state == QpState::kErr) return impl_->flush_at_once(*qp, wr.wr_id, false);
  RecvWqe& r = qp->rqe(qp->rq_tail);
  r = RecvWqe{};
  r.wr = wr;
  for (uint32_t i = 0; i < wr.num_sge; ++i) r.capacity += wr.sg[i].length;
  ++qp->rq_tail;
  return 0;
}

void Engine::on_frame(std::span<const uint8_t> frame) {
  EntryGuard guard(impl_->busy);
  Impl& m = *impl_;
  Core& c = m.core;
  c.bump(nullptr, &Counters::rx_packets);
  c.bump(nullptr, &Counters::rx_bytes, frame.size());
  auto parsed = proto::parse_frame(frame);
  if (!parsed) {
    if (m.answer_trimmed(frame)) return;
    c.bump(nullptr, &Counters::rx_drop_parse);
    if (parsed.error().code == proto::ParseErrorCode::kBadIcrc)
      c.bump(nullptr, &Counters::rx_drop_bad_icrc);
    return;
  }
  const proto::Frame& f = parsed.value();
  const proto::Packet& p = f.packet;
  if (p.mbth.dest_qpn == datagram::kMulticastQpn && f.headers.dst_ip.is_multicast()) {
    m.on_multicast(f, frame.size());
    return;
  }
  Qp* qp = m.find_qp(p.mbth.dest_qpn);
  if (!qp) {
    c.bump(nullptr, &Counters::rx_drop_unknown_qp);
    return;
  }
  if (qp->init.type == QpType::kUd) {  // any source may send to it (§13)
    m.on_datagram(*qp, f, frame.size());
    return;
  }
  if (!from_peer(*qp, f.headers)) {
    c.bump(qp, &Counters::rx_drop_wrong_source);
    return;
  }
  if (!c.hal().dma.owner_alive(qp->owner)) {  // as if destroyed (hal.h)
    c.bump(qp, &Counters::rx_drop_owner_gone);
    return;
  }
  if (p.mbth.opcode == proto::Opcode::kProbe) {  // docs/protocol.md §8
    if (c.config().violate & kViolateNoProbeReply) return;
    if (qp->state == QpState::kRtr || qp->state == QpState::kRts || qp->state == QpState::kSqd) {
      proto::Packet r;
      r.mbth = p.mbth;
      r.mbth.opcode = proto::Opcode::kProbeReply;
      r.mbth.dest_qpn = qp->attr.dest_qp_num;
      r.mbth.flags = 0;
      r.mbth.timestamp = static_cast<uint32_t>(c.now());
      r.probe = {p.probe.nonce, p.mbth.timestamp};
      c.send(*qp, r, p.mbth.path_id);
    } else {
      c.bump(qp, &Counters::rx_drop_qp_state);
    }
    return;
  }
  qp->counters.rx_packets++;
  qp->counters.rx_bytes += frame.size();
  if (is_uc(p.mbth.opcode) != (qp->init.type == QpType::kUc)) {  // the other service's packet
    c.bump(qp, &Counters::rx_drop_wrong_service);
    return;
  }
  if (qp->init.type == QpType::kUc) {
    uc::on_request(c, *qp, f);
    m.pump();
    m.settle();
    return;
  }
  switch (p.mbth.opcode) {
    case proto::Opcode::kSend:
    case proto::Opcode::kSendImm:
    case proto::Opcode::kSendInv:
    case proto::Opcode::kWrite:
    case proto::Opcode::kWriteImm:
    case proto::Opcode::kReadReq:
    case proto::Opcode::kAtomicCmpSwap:
    case proto::Opcode::kAtomicFetchAdd: responder::on_request(c, *qp, f); break;
    case proto::Opcode::kAck:
    case proto::Opcode::kNack:
    case proto::Opcode::kReadResp:
    case proto::Opcode::kAtomicResp: completer::on_response(c, *qp, f); break;
    case proto::Opcode::kUdSend:
    case proto::Opcode::kUdSendImm: c.bump(qp, &Counters::rx_drop_ud_wrong_type); break;
    default: c.bump(qp, &Counters::rx_drop_not_request); break;
  }
  m.pump();
  m.settle();
}

void Engine::on_timer() {
  EntryGuard guard(impl_->busy);
  Impl& m = *impl_;
  Time now = m.core.now();
  std::vector<uint32_t>& due = m.due;
  m.core.timers().take_due(now, [&m](uint32_t qpn) { return m.deadline_of(qpn); }, &due);
  for (uint32_t qpn : due)
    if (Qp* q = m.lookup(qpn); q && m.deadline(*q) <= now) m.timers(*q, now);
  m.pump();
  m.settle();
}

Time Engine::next_deadline() const {
  const Impl& m = *impl_;
  return m.core.timers().next([&m](uint32_t qpn) { return m.deadline_of(qpn); });
}

bool Engine::check_timer_index() const {
  Time scan = kNever;
  for (auto& q : impl_->qps)
    if (q) scan = std::min(scan, impl_->deadline(*q));
  return next_deadline() == scan;
}

void Engine::pump() {
  EntryGuard guard(impl_->busy);
  impl_->pump();
  impl_->settle();
}

const Counters& Engine::counters() const { return impl_->core.counters(); }

int Engine::qp_memory(uint32_t qpn, uint64_t* used, uint64_t* bound) const {
  const Qp* q = impl_->find_qp(qpn);
  if (!q) return ENOENT;
  uint64_t u = sizeof(Qp) + q->sq.capacity() * sizeof(SendWqe) + q->rq.capacity() * sizeof(RecvWqe);
  for (const SendWqe& w : q->sq)
    u += w.chunks.capacity() * sizeof(uint64_t) + w.wr.inline_data.capacity();
  u += q->sb.memory_bytes() + q->placed_recvs.capacity() * sizeof(uint32_t);
  u += q->reads.heap_bytes() + q->held.heap_bytes() + q->atomics.heap_bytes();
  *used = u;
  // docs/engine.md §Memory bounds, term by term.
  const DeviceCaps& c = caps();
  uint64_t sq = q->sq.size(), rq = q->rq.size();
  uint64_t live_reads = std::max<uint64_t>(kMaxReadBytes, c.max_msg_size) / (kReadChunk * 8) +
                        uint64_t{c.max_qp_rd_atom} * sizeof(uint64_t);
  *bound = sizeof(Qp) + sq * (sizeof(SendWqe) + c.max_inline + kKeepChunkWords * sizeof(uint64_t)) +
           rq * sizeof(RecvWqe) + live_reads + SendScoreboard::kMaxBytes +
           4 * kAckEvery * sizeof(uint32_t) + ReadQueue::kMaxHeapBytes + decltype(q->held)::kBytes +
           decltype(q->atomics)::kBytes;
  return 0;
}

int Engine::qp_counters(uint32_t qpn, Counters* out) const {
  Qp* qp = impl_->find_qp(qpn);
  if (!qp) return ENOENT;
  *out = qp->counters;
  return 0;
}

std::vector<uint32_t> Engine::qp_numbers() const {
  std::vector<uint32_t> v;
  for (auto& q : impl_->qps)
    if (q) v.push_back(q->qpn);
  return v;
}

std::string Engine::describe_qp(uint32_t qpn) const {
  const Qp* q = impl_->find_qp(qpn);
  if (!q) return "";
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "qpn %u state %s sq %u/%u/%u rq %u/%u una %u nxt %u inflight %u/%llu lost %u "
                "rd %u retries %u backoff %u srtt %llu rto_at %llu rack_at %llu pace_at %llu "
                "active %d req_error %d rcv_cum %u reads %u credit %u cwnd %llu",
                q->qpn, to_string(q->state), q->sq_head, q->sq_next, q->sq_tail, q->rq_head,
                q->rq_tail, q->sb.una(), q->sb.nxt(), q->sb.pkts_in_flight(),
                static_cast<unsigned long long>(q->sb.bytes_in_flight()), q->sb.lost_count(),
                q->rd_outstanding, q->retries, q->backoff,
                static_cast<unsigned long long>(q->rtt.srtt()),
                static_cast<unsigned long long>(q->rto_deadline),
                static_cast<unsigned long long>(q->rack_deadline),
                static_cast<unsigned long long>(q->pace_deadline), q->in_active, q->req_error,
                q->rw.cum(), q->reads.size(), q->credit,
                static_cast<unsigned long long>(q->cc ? q->cc->window_bytes() : 0));
  return buf;
}

int Engine::qp_transport(uint32_t qpn, Time now, QpTransportStats* out) const {
  const Qp* q = impl_->find_qp(qpn);
  if (!q) return ENOENT;
  *out = QpTransportStats{};
  out->srtt = q->rtt.srtt();
  out->min_rtt = q->rtt.min_rtt();
  out->rttvar = q->rtt.rttvar();
  out->rto = q->rtt.rto();
  out->bytes_in_flight = q->sb.bytes_in_flight();
  out->pkts_in_flight = q->sb.pkts_in_flight();
  out->lost = q->sb.lost_count();
  out->state = q->state;
  out->error_status = q->error_status;
  if (q->cc) {
    out->cwnd_bytes = q->cc->window_bytes();
    out->pacing_rate_bps = q->cc->pacing_rate_bps();
    out->cc = q->cc->name();
  }
  if (q->paths) {
    for (uint32_t p = 0; p < q->paths->num_paths(); p++)
      out->path_weights.push_back(q->paths->path_weight(static_cast<uint8_t>(p), now));
  }
  return 0;
}

}  // namespace metaroce::fw
