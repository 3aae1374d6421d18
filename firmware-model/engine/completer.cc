#include "firmware-model/engine/completer.h"

#include <algorithm>
#include <cstring>

#include "firmware-model/engine/qp.h"

namespace metaroce::fw::completer {

NackAction action_for(proto::NackReason r, WcStatus* status) {
  switch (r) {
    case proto::NackReason::kRnr: return NackAction::kRnrWait;
    case proto::NackReason::kTrimmed: return NackAction::kRetransmit;
    case proto::NackReason::kRemoteAccessError: *status = WcStatus::kRemAccessErr; return NackAction::kFail;
    case proto::NackReason::kInvalidRequest: *status = WcStatus::kRemInvReqErr; return NackAction::kFail;
    case proto::NackReason::kRemoteOperationError: *status = WcStatus::kRemOpErr; return NackAction::kFail;
    case proto::NackReason::kSequenceError: return NackAction::kIgnore;
  }
  // docs/protocol.md §3.8: an unknown reason is a REMOTE_OPERATION_ERROR.
  *status = WcStatus::kRemOpErr;
  return NackAction::kFail;
}

namespace {

WcOpcode wc_opcode(WrOpcode op) {
  switch (op) {
    case WrOpcode::kRdmaWrite:
    case WrOpcode::kRdmaWriteImm: return WcOpcode::kRdmaWrite;
    case WrOpcode::kSend:
    case WrOpcode::kSendImm:
    case WrOpcode::kSendWithInv: return WcOpcode::kSend;
    case WrOpcode::kBindMw: return WcOpcode::kBindMw;
    case WrOpcode::kLocalInv: return WcOpcode::kLocalInv;
    case WrOpcode::kRdmaRead: return WcOpcode::kRdmaRead;
    case WrOpcode::kAtomicCmpSwap: return WcOpcode::kCompSwap;
    case WrOpcode::kAtomicFetchAdd: return WcOpcode::kFetchAdd;
  }
  return WcOpcode::kSend;
}

// Finished: every PSN delivered and, for READ/atomics, the response in.
bool finished(Qp& qp, const SendWqe& w) {
  if (!w.all_sent) return false;
  if (!proto::seq_lt(w.max_psn, qp.sb.una())) return false;
  return !w.is_rd() || w.response_done;
}

}  // namespace

void emit(Core& c, Qp& qp, SendWqe& w, WcStatus status) {
  bool signaled = status != WcStatus::kSuccess || (w.wr.send_flags & kSendSignaled) ||
                  qp.init.sq_sig_all;
  qp.release_rd(w);
  w.release_read_state();
  if (!signaled) return;
  Completion wc;
  wc.wr_id = w.wr.wr_id;
  wc.status = status;
  wc.opcode = wc_opcode(w.wr.opcode);
  wc.byte_len = w.length;
  wc.qp_num = qp.qpn;
  wc.src_qp = qp.attr.dest_qp_num;
  c.complete(qp, qp.init.send_cqn, wc);
}

namespace {

void maybe_report_drained(Core& c, Qp& qp) {
  if (qp.state == QpState::kSqd && !qp.sq_drained_reported && qp.sq_head == qp.sq_next) {
    qp.sq_drained_reported = true;
    c.hal().events.async_event(EventType::kSqDrained, qp.qpn);
  }
}

// Which WQE a PSN belongs to (nullptr: not outstanding any more).
SendWqe* wqe_of(Qp& qp, uint32_t psn, uint32_t* seq) {
  TxEntry* e = qp.sb.find(psn);
  if (!e) return nullptr;
  *seq = e->wqe_seq;
  return &qp.sqe(e->wqe_seq);
}

// The READ/atomic WQE a response's MSN names, if still waiting for it.
SendWqe* rd_wqe(Qp& qp, uint32_t msn, WrOpcode a, WrOpcode b) {
  uint32_t seq = qp.rd_slot[msn % kRdSlots];
  if (proto::seq_lt(seq, qp.sq_head) || !proto::seq_lt(seq, qp.sq_next)) return nullptr;
  SendWqe& w = qp.sqe(seq);
  if (!w.started || w.msn != msn || w.response_done) return nullptr;
  if (w.wr.opcode != a && w.wr.opcode != b) return nullptr;
  return &w;
}

void on_progress(Core& c, Qp& qp) {
  qp.retries = 0;
  qp.progress_at = c.now();
  qp.backoff = 0;
  qp.tlp_out = false;
  requester::arm_rto(c, qp, true);
  requester::arm_tlp(c, qp);
  c.activate(qp);
}

// The responder sends an atomic's response just before the ACK of its PSN:
// once the PSN is delivered, a response that has not come within the
// reorder window and the paths' spread was lost. Resend the request then
// (the responder replays its cached result) instead of waiting for the RTO.
void watch_atomic_responses(Core& c, Qp& qp) {
  for (uint32_t seq = qp.sq_head; seq != qp.sq_next; ++seq) {
    SendWqe& w = qp.sqe(seq);
    if (!w.is_rd() || w.wr.opcode == WrOpcode::kRdmaRead || w.response_done) continue;
    if (w.read_check != kNever || !w.all_sent || !qp.sb.delivered(w.max_psn)) continue;
    w.read_check = c.now() + qp.rtt.reorder_window() + qp.rtt.spread();
    qp.read_deadline = std::min(qp.read_deadline, w.read_check);
  }
}

// docs/engine.md §Trust: an ACK must acknowledge what was sent. cum_psn in
// [una, nxt] (below una it is old news, or forged: it carries no fact the
// requester lacks), and no SACK bit for a PSN not yet sent. The counter of
// the reason, or nullptr when the ACK may be applied.
uint64_t Counters::*ack_drop_reason(const Qp& qp, const proto::Ackh& a) {
  uint32_t una = qp.sb.una(), nxt = qp.sb.nxt();
  if (proto::seq_lt(a.cum_psn, una)) return &Counters::rx_drop_ack_stale;
  if (proto::seq_lt(nxt, a.cum_psn)) return &Counters::rx_drop_ack_out_of_range;
  // SACK bit i names cum + 1 + i; the PSNs sent above cum are cum+1 .. nxt-1.
  uint32_t sent_above = nxt - a.cum_psn == 0 ? 0 : nxt - a.cum_psn - 1;
  if (sent_above < 64 && (a.sack >> sent_above) != 0) return &Counters::rx_drop_ack_out_of_range;
  return nullptr;
}

void on_ack(Core& c, Qp& qp, const proto::Frame& f) {
  const proto::Ackh& a = f.packet.ack;
  if (uint64_t Counters::*why = ack_drop_reason(qp, a)) {
    c.bump(&qp, why);
    return;
  }
  Time now = c.now();
  uint32_t rtt32 = static_cast<uint32_t>(now) - a.echo_ts;
  Time rtt = rtt32 < 1'000'000'000 ? rtt32 : 0;
  if (rtt) qp.rtt.sample(rtt, a.echo_path);
  if (a.ack_flags & 2) qp.rtt.on_spurious();  // the trigger was a duplicate
  qp.credit = a.credit;
  AckOutcome out = qp.sb.on_ack(a.cum_psn, a.sack, now, qp.rtt);
  if (rtt && !(a.ack_flags & proto::kAckFlagDup)) {
    // Beyond the SACK bitmap the echo names the packet; failing that (the
    // first copy of a resent packet), one packet beyond is assumed to have
    // left the network.
    bool named = qp.sb.echo_delivery(a.echo_ts, a.echo_path, now, qp.rtt, &out);
    if (!named && !out.progress) qp.sb.on_unseen_delivery();
  }
  if (rtt) qp.sb.on_echo(now - rtt, rtt);
  Time recheck = kNever;
  std::vector<uint8_t>& lost_paths = c.lost_paths();
  lost_paths.clear();
  uint64_t lost = qp.sb.detect_losses(now, qp.rtt, &recheck, &lost_paths);
  qp.rack_deadline = recheck;
  if (qp.rto_undo && out.progress) {
    qp.rto_undo = false;
    if (rtt && now - rtt < qp.rto_fired_at) {  // triggered by a packet sent before the RTO
      c.bump(&qp, &Counters::spurious_timeouts);
      qp.cc->on_spurious_timeout(now);
    }
  }
  bool ce = a.ack_flags & 1;
  AckSample s{now, out.newly_acked_bytes, rtt, a.echo_path, ce, a.ce_count, a.credit,
              qp.sb.bytes_in_flight()};
  qp.cc->on_ack(s);
  qp.paths->on_ack(a.echo_path, rtt, ce, now);
  if (lost) {
    qp.cc->on_loss(now, lost);
    for (uint8_t p : lost_paths) qp.paths->on_loss(p, now);
    qp.rtt.on_recovery();
  }
  if (out.progress) {
    on_progress(c, qp);
    if (qp.rd_outstanding) watch_atomic_responses(c, qp);
  } else {
    requester::arm_rto(c, qp, false);
  }
  drain(c, qp);
  c.activate(qp);
}

void on_nack(Core& c, Qp& qp, const proto::Frame& f) {
  const proto::Nackh& n = f.packet.nack;
  WcStatus status = WcStatus::kGeneralErr;
  NackAction act = action_for(n.reason, &status);
  uint32_t seq = 0;
  // Only a PSN sent and not delivered can be refused (docs/engine.md §Trust).
  SendWqe* w = wqe_of(qp, n.psn, &seq);
  if (!w || qp.sb.delivered(n.psn)) {
    c.bump(&qp, &Counters::rx_drop_nack_out_of_range);
    return;
  }
  switch (act) {
    case NackAction::kRnrWait: {
      TxEntry* e = qp.sb.find(n.psn);
      if (qp.attr.rnr_retry != 7 && e->rnr_tries >= qp.attr.rnr_retry) {
        fail(c, qp, seq, WcStatus::kRnrRetryExcErr);
        return;
      }
      c.bump(&qp, &Counters::rnr_retries);
      // The larger of the responder's timer and our own min_rnr_timer.
      Time wait = std::max(rnr_timer_ns(n.rnr_timer), rnr_timer_ns(qp.attr.min_rnr_timer));
      qp.sb.rnr_wait(n.psn, c.now() + wait);
      requester::arm_rto(c, qp, false);
      return;
    }
    case NackAction::kRetransmit: {  // TRIMMED: a congested hop, a loss signal (protocol §3.8)
      TxEntry* e = qp.sb.find(n.psn);
      if (e && e->state == TxState::kInFlight) {
        qp.cc->on_loss(c.now(), e->wire);
        qp.paths->on_loss(e->path, c.now());
      }
      qp.sb.mark_lost(n.psn);
      c.activate(qp);
      return;
    }
    case NackAction::kFail: fail(c, qp, seq, status); return;
    case NackAction::kIgnore: c.bump(&qp, &Counters::rx_drop_unexpected); return;
  }
}

void mark_chunks(SendWqe& w, uint32_t first, uint32_t end) {
  for (uint32_t i = first; i < end; ++i) {
    uint64_t bit = uint64_t{1} << (i % 64);
    if (!(w.chunks[i / 64] & bit)) {
      w.chunks[i / 64] |= bit;
      ++w.chunks_got;
    }
  }
}

bool chunks_all_set(const SendWqe& w, uint32_t first, uint32_t end) {
  for (uint32_t i = first; i < end; ++i)
    if (!((w.chunks[i / 64] >> (i % 64)) & 1)) return false;
  return true;
}

// docs/engine.md §Trust: a response answers one of its WQE's request PSNs
// (the first issue .. the latest READ re-issue) and, while that request is
// still on the scoreboard, lies within the range it asked for.
bool answers_request(Qp& qp, const SendWqe& w, uint32_t psn, uint64_t off, uint64_t len) {
  if (proto::seq_lt(psn, w.first_psn) || proto::seq_lt(w.max_psn, psn)) return false;
  const TxEntry* e = qp.sb.find(psn);
  if (!e) return true;  // acknowledged: only the WQE's PSN range is known
  return &qp.sqe(e->wqe_seq) == &w && off >= e->offset && off + len <= uint64_t{e->offset} + e->len;
}

// The responder answers READs in read MSN order, a repair ahead of later
// READs (ReadQueue::push). So a response of READ `msn` shows that every
// earlier READ whose latest request had reached the responder was answered
// in full: data of those still missing is lost (or on a slower path), even
// their LAST response, which no hole check sees. Each gets its hole check
// (re-issue after the paths' spread) instead of waiting for the RTO.
void watch_earlier_reads(Core& c, Qp& qp, uint32_t msn) {
  const Time at = c.now() + qp.rtt.reorder_window() + qp.rtt.response_lateness();
  for (uint32_t k = 1; k < kRdSlots; ++k) {
    SendWqe* w = rd_wqe(qp, msn - k, WrOpcode::kRdmaRead, WrOpcode::kRdmaRead);
    if (!w || w->read_check != kNever || !w->all_sent || !qp.sb.delivered(w->max_psn)) continue;
    w->read_check = at;
    qp.read_deadline = std::min(qp.read_deadline, at);
    c.bump(&qp, &Counters::read_holes_by_order);
  }
}

void on_read_resp(Core& c, Qp& qp, const proto::Frame& f) {
  const proto::Packet& p = f.packet;
  SendWqe* w = rd_wqe(qp, p.mbth.msn, WrOpcode::kRdmaRead, WrOpcode::kRdmaRead);
  uint64_t off = p.mbth.offset, len = p.payload.size();
  if (!w) {
    c.bump(&qp, &Counters::rx_drop_unexpected);
    return;
  }
  if (off + len > w->length || off % kReadChunk != 0 ||
      (len % kReadChunk != 0 && off + len != w->length) ||
      !answers_request(qp, *w, p.mbth.psn, off, len)) {
    c.bump(&qp, &Counters::rx_drop_resp_out_of_range);
    return;
  }
  uint32_t first = static_cast<uint32_t>(off / kReadChunk);
  uint32_t end = w->length == 0 ? 1 : static_cast<uint32_t>((off + len + kReadChunk - 1) / kReadChunk);
  if (chunks_all_set(*w, first, end)) {
    // Data already in: a re-issue (or probe) asked for what was only late.
    // Wider reordering allowance, as for a duplicate at the responder.
    c.bump(&qp, &Counters::rx_drop_duplicate);
    qp.rtt.on_spurious();
    return;
  }
  uint32_t seq = qp.rd_slot[p.mbth.msn % kRdSlots];
  if (requester::check_local(c, qp, *w) != WcStatus::kSuccess) {  // an MR died meanwhile
    c.bump(&qp, &Counters::local_errors);
    fail(c, qp, seq, WcStatus::kLocProtErr);
    return;
  }
  if (len && !sgl_write(c, qp.owner, w->wr.sg.data(), w->wr.num_sge, off, p.payload)) {
    c.bump(&qp, &Counters::local_errors);
    fail(c, qp, seq, WcStatus::kLocAccessErr);
    return;
  }
  if (len) c.placed_response(qp, seq);
  if (p.mbth.psn == w->first_psn) {  // repairs come later by design: not lateness
    if (end > w->chunks_hw) w->hw_at = c.now();
    else if (w->hw_at) qp.rtt.on_late_response(c.now() - w->hw_at);  // overtaken
  }
  if (end > w->chunks_hw) w->chunks_hw = end;
  const bool first_data = w->chunks_got == 0, last = p.mbth.flags & proto::kFlagLast;
  mark_chunks(*w, first, end);
  if (first_data || last) watch_earlier_reads(c, qp, p.mbth.msn);
  qp.sb.on_delivered(p.mbth.psn, c.now(), qp.rtt);  // the request evidently arrived
  if (w->chunks_got == w->chunks_total) {
    // Completes only once the data is in host memory (hal.h §Placement).
    if (!c.commit(qp.owner)) return;  // failed: the WQE completed kLocAccessErr
    w->response_done = true;
    w->read_check = kNever;
    qp.release_rd(*w);  // later READs may start now, before this one completes
    w->release_read_state();
  } else if (last && w->read_check == kNever) {
    // The last response of a range is in but holes remain: unless they
    // arrive within the paths' delay spread, re-issue them (no RTO wait).
    w->read_check = c.now() + qp.rtt.reorder_window() + qp.rtt.response_lateness();
    qp.read_deadline = std::min(qp.read_deadline, w->read_check);
  }
  on_progress(c, qp);
  drain(c, qp);
}

void on_atomic_resp(Core& c, Qp& qp, const proto::Frame& f) {
  const proto::Packet& p = f.packet;
  SendWqe* w = rd_wqe(qp, p.mbth.msn, WrOpcode::kAtomicCmpSwap, WrOpcode::kAtomicFetchAdd);
  if (!w) {
    c.bump(&qp, &Counters::rx_drop_unexpected);
    return;
  }
  if (p.mbth.psn != w->first_psn) {  // an atomic has one PSN, resent unchanged
    c.bump(&qp, &Counters::rx_drop_resp_out_of_range);
    return;
  }
  uint8_t bytes[8];
  std::memcpy(bytes, &p.atomic_ack.original, 8);
  uint32_t seq = qp.rd_slot[p.mbth.msn % kRdSlots];
  if (requester::check_local(c, qp, *w) != WcStatus::kSuccess) {  // an MR died meanwhile
    c.bump(&qp, &Counters::local_errors);
    fail(c, qp, seq, WcStatus::kLocProtErr);
    return;
  }
  if (!sgl_write(c, qp.owner, w->wr.sg.data(), w->wr.num_sge, 0, bytes)) {
    c.bump(&qp, &Counters::local_errors);
    fail(c, qp, seq, WcStatus::kLocAccessErr);
    return;
  }
  c.placed_response(qp, seq);
  if (!c.commit(qp.owner)) return;  // failed: the WQE completed kLocAccessErr
  w->response_done = true;
  // The response proves the request arrived even if its ACK was lost.
  qp.sb.on_delivered(p.mbth.psn, c.now(), qp.rtt);
  on_progress(c, qp);
  drain(c, qp);
}

}  // namespace

void on_response(Core& c, Qp& qp, const proto::Frame& f) {
  if (qp.state != QpState::kRts && qp.state != QpState::kSqd) {
    c.bump(&qp, &Counters::rx_drop_qp_state);
    return;
  }
  switch (f.packet.mbth.opcode) {
    case proto::Opcode::kAck: on_ack(c, qp, f); break;
    case proto::Opcode::kNack: on_nack(c, qp, f); break;
    case proto::Opcode::kReadResp: on_read_resp(c, qp, f); break;
    case proto::Opcode::kAtomicResp: on_atomic_resp(c, qp, f); break;
    default: break;
  }
}

void drain(Core& c, Qp& qp) {
  while (qp.sq_head != qp.sq_next && qp.state != QpState::kErr) {
    SendWqe& w = qp.sqe(qp.sq_head);
    if (w.status != WcStatus::kSuccess) {
      fail(c, qp, qp.sq_head, w.status);
      return;
    }
    if (!finished(qp, w)) break;
    emit(c, qp, w, WcStatus::kSuccess);
    ++qp.sq_head;
  }
  maybe_report_drained(c, qp);
  requester::arm_rto(c, qp, false);
  c.activate(qp);  // a finished READ/atomic may unblock fence or max_rd_atomic
}

void fail(Core& c, Qp& qp, uint32_t wqe_seq, WcStatus status) {
  if (qp.state == QpState::kErr) return;
  // In order: finished WQEs before the failing one succeed, unfinished ones
  // are flushed (their outcome at the responder is unknown), the failing
  // one carries status, everything after is flushed by qp_to_error.
  for (; qp.sq_head != wqe_seq && proto::seq_lt(qp.sq_head, qp.sq_tail); ++qp.sq_head) {
    SendWqe& w = qp.sqe(qp.sq_head);
    emit(c, qp, w, finished(qp, w) ? WcStatus::kSuccess : WcStatus::kWrFlushErr);
  }
  if (qp.sq_head == wqe_seq && proto::seq_lt(qp.sq_head, qp.sq_tail)) {
    emit(c, qp, qp.sqe(qp.sq_head), status);
    ++qp.sq_head;
  }
  if (proto::seq_lt(qp.sq_next, qp.sq_head)) qp.sq_next = qp.sq_head;
  c.qp_to_error(qp);
}

}  // namespace metaroce::fw::completer
