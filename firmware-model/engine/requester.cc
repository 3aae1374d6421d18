#include "firmware-model/engine/requester.h"

#include <algorithm>
#include <cstring>

#include "firmware-model/engine/mw_ops.h"
#include "firmware-model/engine/qp.h"

namespace metaroce::fw::requester {

const char* to_string(State s) {
  static constexpr const char* kNames[] = {"RETRANSMIT", "START_WQE",      "SEGMENT",
                                           "SENT",       "IDLE",           "BLOCKED_WINDOW",
                                           "BLOCKED_PACING", "BLOCKED_ORDER", "LOCAL_DONE"};
  return kNames[static_cast<unsigned>(s)];
}

namespace {

using proto::Opcode;

Opcode wire_opcode(WrOpcode op) {
  switch (op) {
    case WrOpcode::kRdmaWrite: return Opcode::kWrite;
    case WrOpcode::kRdmaWriteImm: return Opcode::kWriteImm;
    case WrOpcode::kSend: return Opcode::kSend;
    case WrOpcode::kSendImm: return Opcode::kSendImm;
    case WrOpcode::kRdmaRead: return Opcode::kReadReq;
    case WrOpcode::kAtomicCmpSwap: return Opcode::kAtomicCmpSwap;
    case WrOpcode::kAtomicFetchAdd: return Opcode::kAtomicFetchAdd;
    case WrOpcode::kSendWithInv: return Opcode::kSendInv;
    case WrOpcode::kLocalInv:
    case WrOpcode::kBindMw: break;  // local: never on the wire (mw_ops.cc)
  }
  return Opcode::kSend;
}

bool carries_payload(WrOpcode op) {
  return op == WrOpcode::kRdmaWrite || op == WrOpcode::kRdmaWriteImm || op == WrOpcode::kSend ||
         op == WrOpcode::kSendImm || op == WrOpcode::kSendWithInv;
}

// Bytes charged to the congestion window for one packet.
uint32_t wire_bytes(WrOpcode op, uint32_t payload) {
  return static_cast<uint32_t>(proto::header_length(wire_opcode(op)) + proto::kIcrcLen) +
         (carries_payload(op) ? payload : 0);
}

}  // namespace

// Builds the request packet for [offset, offset+len) of w (for READ_REQ the
// range to read) and fills its payload into the scratch buffer. Fails with
// kLocProtErr when an lkey died since the WQE started (dereg_mr: the NIC
// never reads through a dead key), kLocQpOpErr when the host read failed.
WcStatus build(Core& c, Qp& qp, SendWqe& w, uint32_t psn, uint32_t offset, uint32_t len,
               uint8_t path, bool retransmit, proto::Packet* p) {
  const SendWr& wr = w.wr;
  *p = proto::Packet{};
  proto::Mbth& m = p->mbth;
  m.opcode = wire_opcode(wr.opcode);
  m.path_id = path;
  m.dest_qpn = qp.attr.dest_qp_num;
  m.psn = psn;
  m.msn = w.msn;
  m.offset = offset;
  m.timestamp = qp.sb.take_stamp(c.now());  // unique per QP: an echo names it
  bool last = w.is_rd() || offset + len == w.length;
  if (last) m.flags |= proto::kFlagLast | proto::kFlagAckReq;
  if (last && (wr.send_flags & kSendSolicited)) m.flags |= proto::kFlagSolicited;
  if (retransmit) m.flags |= proto::kFlagRetransmit | proto::kFlagAckReq;
  switch (wr.opcode) {
    case WrOpcode::kRdmaWriteImm:
      p->imm = wr.imm;
      [[fallthrough]];
    case WrOpcode::kRdmaWrite:
      p->reth = {wr.remote_addr, wr.rkey, w.length};
      break;
    case WrOpcode::kSendImm:
      p->imm = wr.imm;
      [[fallthrough]];
    case WrOpcode::kSend:
      p->seth.length = w.length;
      break;
    case WrOpcode::kSendWithInv:
      p->seth.length = w.length;
      p->ieth.rkey = wr.imm;  // invalidate_rkey
      break;
    case WrOpcode::kLocalInv:
    case WrOpcode::kBindMw: return WcStatus::kLocQpOpErr;  // never segmented (start_wqe)
    case WrOpcode::kRdmaRead:
      p->reth = {wr.remote_addr + offset, wr.rkey, len};
      return WcStatus::kSuccess;
    case WrOpcode::kAtomicCmpSwap:
      p->atomic = {wr.remote_addr, wr.rkey, wr.swap, wr.compare_add};
      return WcStatus::kSuccess;
    case WrOpcode::kAtomicFetchAdd:
      p->atomic = {wr.remote_addr, wr.rkey, wr.compare_add, 0};
      return WcStatus::kSuccess;
  }
  const bool inl = wr.send_flags & kSendInline;
  if (!inl) {
    if (check_local(c, qp, w) != WcStatus::kSuccess) return WcStatus::kLocProtErr;
    // A host read may flush queued writes: learn their fate first, before
    // a frame is reserved (a failure sends NACKs through the port).
    c.commit(qp.owner);
    if (qp.state == QpState::kErr) return WcStatus::kLocQpOpErr;  // callers check the state first
  }
  // The payload goes straight into the port's frame when it has one
  // (hal.h §tx_buffer), else into the scratch.
  std::span<uint8_t> buf = c.tx_payload(qp, qp.attr.av, *p, path, len);
  if (inl) {
    if (len) std::memcpy(buf.data(), wr.inline_data.data() + offset, len);
  } else if (!sgl_read(c, qp.owner, wr.sg.data(), wr.num_sge, offset, buf)) {
    c.tx_drop(&qp, buf);
    return WcStatus::kLocQpOpErr;
  }
  p->payload = buf;
  return WcStatus::kSuccess;
}


WcStatus check_local(Core& c, const Qp& qp, const SendWqe& w) {
  const SendWr& wr = w.wr;
  if (wr.send_flags & kSendInline) return WcStatus::kSuccess;
  uint32_t need = w.is_rd() ? uint32_t{kAccessLocalWrite} : 0u;
  uint64_t total = 0;
  for (uint32_t i = 0; i < wr.num_sge; ++i) {
    const Sge& s = wr.sg[i];
    if (c.mrs().check_local(qp.owner, qp.init.pdn, s.lkey, s.addr, s.length, need) !=
        KeyCheck::kOk)
      return WcStatus::kLocProtErr;
    total += s.length;
  }
  if (total > c.config().caps.max_msg_size) return WcStatus::kLocLenErr;
  return WcStatus::kSuccess;
}

namespace {

bool window_allows(Qp& qp, uint32_t wire) {
  const SendScoreboard& sb = qp.sb;
  if (sb.pkts_in_flight() == 0) return true;  // always let one packet out
  if (qp.credit && sb.pkts_in_flight() >= qp.credit) return false;
  return sb.pipe_bytes() + wire <= qp.cc->window_bytes();
}

// After a packet of `wire` bytes leaves, the window holds another one back:
// nothing more goes out until an ACK arrives, so the packet asks for one
// (kFlagAckReq) rather than wait out the responder's delayed ACK. With
// small windows (many senders per receiver) that delay was in every RTT
// sample, above the delay target, and the window shrank for it.
bool window_full_after(const Qp& qp, uint32_t wire) {
  const SendScoreboard& sb = qp.sb;
  if (qp.credit && sb.pkts_in_flight() + 1 >= qp.credit) return true;
  return sb.pipe_bytes() + 2 * uint64_t{wire} > qp.cc->window_bytes();
}

// Pacing: true when a packet of wire bytes may leave now. A result <= now
// from next_send_time() means the packet is sent (docs/firmware-hal.md).
bool pacing_allows(Core& c, Qp& qp, uint32_t wire) {
  Time now = c.now();
  Time t = qp.cc->next_send_time(now, wire);
  if (t > now) {
    qp.pace_deadline = t;
    return false;
  }
  qp.pace_deadline = kNever;
  return true;
}

State retransmit(Core& c, Qp& qp, TxEntry& e) {
  SendWqe& w = qp.sqe(e.wqe_seq);
  // The oldest hole holds the responder's cumulative point: it goes out
  // even when the window is full of packets beyond the SACK bitmap.
  if (e.psn != qp.sb.una() && !window_allows(qp, e.wire)) return State::kBlockedWindow;
  if (!pacing_allows(c, qp, e.wire)) return State::kBlockedPacing;
  uint8_t path = qp.paths->next_path(c.now());
  proto::Packet p;
  WcStatus st = build(c, qp, w, e.psn, e.offset, e.len, path, true, &p);
  if (qp.state == QpState::kErr) return State::kBlockedOrder;  // a commit failed (Core::commit)
  if (st != WcStatus::kSuccess) {
    c.bump(&qp, &Counters::local_errors);
    completer::fail(c, qp, e.wqe_seq, st);
    return State::kBlockedOrder;
  }
  c.bump(&qp, &Counters::tx_retransmits);
  if (e.lost_by_rack) c.bump(&qp, &Counters::fast_retransmits);
  qp.sb.on_retransmit(e, path, c.now(), p.mbth.timestamp);
  c.send(qp, p, path);
  return State::kSent;
}

// The read MSN a new READ/atomic takes finds its WQE through
// rd_slot[msn % kRdSlots]. READs give their slot back out of order
// (Qp::release_rd), so an older one still waiting for data may hold the
// entry this MSN would overwrite: its responses would then match nothing.
bool rd_slot_free(Qp& qp) {
  const uint32_t slot = qp.next_rd_msn % kRdSlots;
  uint32_t seq = qp.rd_slot[slot];
  if (proto::seq_lt(seq, qp.sq_head) || !proto::seq_lt(seq, qp.sq_next)) return true;
  const SendWqe& w = qp.sqe(seq);
  return !(w.rd_counted && w.msn % kRdSlots == slot);
}

State start_wqe(Core& c, Qp& qp) {
  SendWqe& w = qp.sqe(qp.sq_next);
  if (qp.state != QpState::kRts) return State::kBlockedOrder;  // SQD: drain only
  if ((w.wr.send_flags & kSendFence) && qp.rd_outstanding > 0) return State::kBlockedOrder;
  if (w.is_rd() && qp.rd_outstanding >= std::max<uint32_t>(1, qp.attr.max_rd_atomic))
    return State::kBlockedOrder;
  if (w.is_rd() && !rd_slot_free(qp)) return State::kBlockedOrder;
  bool read = w.wr.opcode == WrOpcode::kRdmaRead;
  if (read && qp.rd_outstanding > 0 && qp.rd_bytes + w.length > kMaxReadBytes)
    return State::kBlockedOrder;  // READ tracking memory (docs/engine.md §Memory bounds)
  w.started = true;
  WcStatus st = w.status != WcStatus::kSuccess ? w.status : check_local(c, qp, w);
  if (st != WcStatus::kSuccess) {
    c.bump(&qp, &Counters::local_errors);
    w.status = st;
    w.all_sent = true;
    qp.req_error = true;
    ++qp.sq_next;
    completer::drain(c, qp);
    return State::kBlockedOrder;
  }
  if (mw_ops::is_local(w.wr.opcode)) return mw_ops::run_local(c, qp);
  switch (w.wr.opcode) {
    case WrOpcode::kSend:
    case WrOpcode::kSendImm:
    case WrOpcode::kSendWithInv:
    case WrOpcode::kRdmaWriteImm: w.msn = qp.next_recv_msn++; break;
    case WrOpcode::kRdmaWrite: w.msn = qp.next_recv_msn; break;
    default:
      w.msn = qp.next_rd_msn++;
      qp.rd_slot[w.msn % kRdSlots] = qp.sq_next;
      ++qp.rd_outstanding;
      w.rd_counted = true;
      break;
  }
  if (read) {  // validated: now the chunk bitmap may be allocated
    w.chunks_total = std::max<uint32_t>(1, (w.length + kReadChunk - 1) / kReadChunk);
    w.chunks.assign((w.chunks_total + 63) / 64, 0);
    w.chunks_hw = 0;
    w.hw_at = 0;
    qp.rd_bytes += w.length;
  }
  return State::kSegment;
}

State segment(Core& c, Qp& qp) {
  uint32_t seq = qp.sq_next;
  SendWqe& w = qp.sqe(seq);
  uint32_t len = w.is_rd() ? w.length : std::min(qp.mtu, w.length - w.sent);
  if (w.wr.opcode == WrOpcode::kAtomicCmpSwap || w.wr.opcode == WrOpcode::kAtomicFetchAdd) len = 8;
  uint32_t wire = wire_bytes(w.wr.opcode, len);
  if (qp.sb.outstanding() >= kRecvWindow - 1) return State::kBlockedWindow;
  if (!window_allows(qp, wire)) return State::kBlockedWindow;
  if (!pacing_allows(c, qp, wire)) return State::kBlockedPacing;
  uint8_t path = qp.paths->next_path(c.now());
  uint32_t psn = qp.sb.nxt();
  proto::Packet p;
  WcStatus st = build(c, qp, w, psn, w.sent, len, path, false, &p);
  if (qp.state == QpState::kErr) return State::kBlockedOrder;  // a commit failed (Core::commit)
  if (st != WcStatus::kSuccess) {
    c.bump(&qp, &Counters::local_errors);
    w.status = st;
    w.all_sent = true;
    qp.req_error = true;
    ++qp.sq_next;
    completer::drain(c, qp);
    return State::kBlockedOrder;
  }
  if (window_full_after(qp, wire)) p.mbth.flags |= proto::kFlagAckReq;
  qp.sb.add_new(seq, w.sent, len, wire, path, c.now(), p.mbth.timestamp);
  if (w.sent == 0) w.first_psn = psn;
  w.max_psn = psn;
  w.sent += len;
  if (w.is_rd() || w.sent >= w.length) {
    w.all_sent = true;
    ++qp.sq_next;
  }
  c.send(qp, p, path);
  return State::kSent;
}

State step(Core& c, Qp& qp) {
  if (TxEntry* e = qp.sb.next_lost()) return retransmit(c, qp, *e);
  if (qp.req_error) return State::kBlockedOrder;
  if (qp.sq_next == qp.sq_tail) return State::kIdle;
  if (!qp.sqe(qp.sq_next).started) {
    State s = start_wqe(c, qp);
    if (s != State::kSegment) return s;
  }
  return segment(c, qp);
}

}  // namespace

bool has_work(const Qp& qp) {
  if (qp.state != QpState::kRts && qp.state != QpState::kSqd) return false;
  return qp.sb.lost_count() > 0 || (!qp.req_error && qp.sq_next != qp.sq_tail);
}

uint32_t run(Core& c, Qp& qp, uint32_t budget) {
  if (qp.state != QpState::kRts && qp.state != QpState::kSqd) return 0;
  qp.sb.release_rnr(c.now());
  uint32_t sent = 0;
  while (sent < budget && (qp.state == QpState::kRts || qp.state == QpState::kSqd)) {
    if (sent && !c.hal().packets.tx_ready()) break;  // hal.h: held until the host pumps
    State s = step(c, qp);
    if (s == State::kLocalDone) continue;
    if (s != State::kSent) break;
    ++sent;
  }
  if (sent) {
    arm_rto(c, qp, false);
    arm_tlp(c, qp);
  }
  return sent;
}

void arm_tlp(Core& c, Qp& qp) {
  // READ responses are not acknowledged: a READ waiting for data is a flight
  // too, and its probe asks for the data (on_tlp).
  bool waiting = qp.sb.pkts_in_flight() > 0 || qp.rd_outstanding > 0;
  if (!waiting || qp.state == QpState::kErr || qp.tlp_out) {
    qp.tlp_deadline = kNever;
    return;
  }
  Time t = c.now() + qp.rtt.pto();
  qp.tlp_deadline = t < qp.rto_deadline ? t : kNever;
}

namespace {
void reissue_read(Core& c, Qp& qp, uint32_t seq, uint32_t limit);

// No response for a probe timeout while READs wait for data whose request
// reached the responder: their last responses were lost (no hole check can
// see that), or the responder or the path stalls. Ask, before the RTO, for
// the holes below the highest chunk received and one MTU past it (a lost
// LAST response): responses held up by a stalled path would otherwise all
// come twice. What a stalled responder's queued job is still to send it
// does not serve twice (responder: trim_repair).
bool probe_reads(Core& c, Qp& qp) {
  bool any = false;
  for (uint32_t seq = qp.sq_head; seq != qp.sq_next; ++seq) {
    SendWqe& w = qp.sqe(seq);
    if (w.wr.opcode != WrOpcode::kRdmaRead || !w.all_sent || w.response_done) continue;
    if (w.status != WcStatus::kSuccess || !qp.sb.delivered(w.max_psn)) continue;
    reissue_read(c, qp, seq, w.chunks_hw + qp.mtu / kReadChunk);
    w.read_check = kNever;
    any = true;
  }
  return any;
}
}  // namespace

void on_tlp(Core& c, Qp& qp) {
  qp.tlp_deadline = kNever;
  if (qp.state != QpState::kRts && qp.state != QpState::kSqd) return;
  if (qp.sb.lost_count() != 0) return;
  if (qp.sb.probe_tail()) {
    qp.tlp_out = true;
    c.bump(&qp, &Counters::tail_loss_probes);
    c.activate(qp);
  }
  if (qp.rd_outstanding && probe_reads(c, qp)) {
    qp.tlp_out = true;
    c.bump(&qp, &Counters::read_tail_probes);
    arm_rto(c, qp, false);
  }
}

void arm_rto(Core& c, Qp& qp, bool restart) {
  bool waiting = qp.sb.any_unacked() || qp.rd_outstanding > 0;
  if (!waiting || qp.state == QpState::kErr) {
    qp.rto_deadline = kNever;
    return;
  }
  if (qp.rto_deadline == kNever && qp.retries == 0) qp.progress_at = c.now();
  if (qp.rto_deadline != kNever && !restart) return;
  Time cap = ib_timeout_ns(qp.attr.timeout);
  cap = cap == kNever ? kInfiniteTimeoutCap : std::max(cap, kMinRto);
  Time rto = qp.rtt.rto();
  for (uint32_t i = 0; i < qp.backoff && rto < cap; ++i) rto *= 2;
  qp.rto_deadline = c.now() + std::min(rto, cap);
}

namespace {

void resend_atomic(Core& c, Qp& qp, uint32_t seq);

// READ data still missing: ask again for each missing run of chunks below
// `limit`, with a new PSN, the same MSN, MBTH.offset = run start.
void reissue_read(Core& c, Qp& qp, uint32_t seq, uint32_t limit) {
  SendWqe& w = qp.sqe(seq);
  uint32_t runs = 0;
  limit = std::min(limit, w.chunks_total);
  // Within the 4096-PSN window like first transmissions (memory bound).
  for (uint32_t i = 0; i < limit && runs < 8 && qp.sb.outstanding() < kRecvWindow - 1;) {
    if ((w.chunks[i / 64] >> (i % 64)) & 1) {
      ++i;
      continue;
    }
    uint32_t j = i;
    while (j < limit && !((w.chunks[j / 64] >> (j % 64)) & 1)) ++j;
    uint32_t off = i * kReadChunk;
    uint32_t end = std::min<uint64_t>(uint64_t{j} * kReadChunk, w.length);
    uint32_t len = end - off;
    uint8_t path = qp.paths->next_path(c.now());
    uint32_t psn = qp.sb.nxt();
    proto::Packet p;
    build(c, qp, w, psn, off, len, path, true, &p);
    qp.sb.add_new(seq, off, len, wire_bytes(w.wr.opcode, len), path, c.now(), p.mbth.timestamp);
    w.max_psn = psn;
    c.bump(&qp, &Counters::tx_retransmits);
    c.send(qp, p, path);
    ++runs;
    i = j;
  }
}

// The READs an RTO re-issues, and how much of each. The responder serves
// READs one after another, in PSN order, each in offset order. So the data
// of a READ queued behind an incomplete one, or past the highest chunk a
// READ has received, may simply not have been sent yet: the responder may
// still be serializing it, or the path stalled. Re-issuing all of it (as
// the RTO did, for every incomplete READ) had the responder serve it twice:
// long READs through a busy host saw ~20 timeouts and 1.1-1.7k responses
// arriving after their READ had completed. Holes below a READ's highest
// chunk are overdue (reordering would have filled them within the hole
// check) and are re-issued; past it, only the oldest incomplete READ asks
// for a slice of 16 MTUs, doubling with each RTO without progress, so a
// lost tail still comes back in a few RTOs.
void reissue_reads_on_rto(Core& c, Qp& qp) {
  uint64_t bytes = uint64_t{16} * qp.mtu << std::min<uint32_t>(qp.backoff, 16);
  uint32_t slice = static_cast<uint32_t>(std::min<uint64_t>(bytes / kReadChunk, UINT32_MAX / 2));
  bool oldest = true;
  for (uint32_t seq = qp.sq_head; seq != qp.sq_next; ++seq) {
    SendWqe& w = qp.sqe(seq);
    if (!w.is_rd() || !w.all_sent || w.response_done || w.status != WcStatus::kSuccess) continue;
    if (w.wr.opcode != WrOpcode::kRdmaRead) {
      if (qp.sb.delivered(w.max_psn)) resend_atomic(c, qp, seq);
      oldest = false;
      continue;
    }
    if (qp.sb.delivered(w.max_psn))
      reissue_read(c, qp, seq, oldest ? w.chunks_hw + slice : w.chunks_hw);
    oldest = false;
  }
}

// An atomic whose request was acknowledged but whose response never came:
// resend the request with its original PSN; the responder replays the
// result from its cache instead of executing twice.
void resend_atomic(Core& c, Qp& qp, uint32_t seq) {
  SendWqe& w = qp.sqe(seq);
  uint8_t path = qp.paths->next_path(c.now());
  proto::Packet p;
  build(c, qp, w, w.max_psn, 0, 8, path, true, &p);
  c.bump(&qp, &Counters::tx_retransmits);
  c.send(qp, p, path);
}

}  // namespace

void on_read_check(Core& c, Qp& qp) {
  Time now = c.now();
  qp.read_deadline = kNever;
  if (qp.state != QpState::kRts && qp.state != QpState::kSqd) return;
  for (uint32_t seq = qp.sq_head; seq != qp.sq_next; ++seq) {
    SendWqe& w = qp.sqe(seq);
    if (w.read_check == kNever || w.response_done || !w.is_rd()) continue;
    if (w.read_check > now) {
      qp.read_deadline = std::min(qp.read_deadline, w.read_check);
      continue;
    }
    w.read_check = kNever;
    uint64_t before = qp.counters.tx_retransmits;
    if (w.wr.opcode == WrOpcode::kRdmaRead) reissue_read(c, qp, seq, w.chunks_total);
    else resend_atomic(c, qp, seq);
    c.bump(&qp, &Counters::fast_retransmits, qp.counters.tx_retransmits - before);
  }
  arm_rto(c, qp, false);
}

void on_rto(Core& c, Qp& qp) {
  qp.rto_deadline = kNever;
  if (qp.state != QpState::kRts && qp.state != QpState::kSqd) return;
  if (!qp.sb.any_unacked() && qp.rd_outstanding == 0) return;
  if (qp.sb.pkts_in_flight() == 0 && qp.sb.lost_count() > 0 && qp.rd_outstanding == 0) {
    // Nothing is on the wire: retransmissions wait for window or pacing.
    // That is not a timeout of the peer.
    c.activate(qp);
    arm_rto(c, qp, true);
    return;
  }
  c.bump(&qp, &Counters::timeouts);
  ++qp.retries;
  Time ib_timeout = ib_timeout_ns(qp.attr.timeout);
  if (ib_timeout != kNever && qp.retries > qp.attr.retry_cnt &&
      c.now() - qp.progress_at >= ib_timeout * (uint64_t{qp.attr.retry_cnt} + 1)) {
    completer::fail(c, qp, qp.sq_head, WcStatus::kRetryExcErr);
    return;
  }
  qp.cc->on_timeout(c.now());
  if (!qp.rto_undo) qp.rto_fired_at = c.now();  // the first of a run of timeouts
  qp.rto_undo = true;
  qp.tlp_out = true;  // the RTO retransmission is the probe until progress
  qp.tlp_deadline = kNever;
  // Before the first RTT sample the RTO is a guess (kInitialRto, 1 ms): on
  // a longer path (1 ms of delay each way) it fires before the first ACK
  // can return and declaring the flight lost resent all of it (151 packets
  // of a 625 KB first window in recovery_net_test). Resend only the oldest
  // (RFC 6298 §5.4): its ACK brings the RTT sample, and RACK judges the
  // rest against it.
  if (qp.rtt.has_sample()) qp.sb.mark_all_lost();
  else qp.sb.mark_lost(qp.sb.una());
  // Responses lost after their request was delivered.
  reissue_reads_on_rto(c, qp);
  ++qp.backoff;
  c.activate(qp);
  arm_rto(c, qp, true);
}

}  // namespace metaroce::fw::requester
