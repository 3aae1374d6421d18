#include "firmware-model/engine/responder.h"

#include <algorithm>
#include <cstring>

#include "firmware-model/engine/mw_ops.h"
#include "firmware-model/engine/qp.h"

namespace metaroce::fw::responder {

const char* to_string(State s) {
  static constexpr const char* kNames[] = {
      "CHECK_STATE", "CHECK_PSN",  "CHECK_OP",    "CHECK_RESOURCES", "CHECK_RECV", "CHECK_RKEY",
      "EXECUTE",     "ACKNOWLEDGE", "DUPLICATE",  "NAK_RNR",        "NAK_ACCESS",
      "NAK_INVALID", "NAK_REMOTE_OP", "NAK_PLACEMENT", "DONE"};
  return kNames[static_cast<unsigned>(s)];
}

namespace {

using proto::Opcode;

// One inbound request being served.
struct Req {
  const proto::Packet& p;
  bool ce;
  RecvWqe* recv = nullptr;
  WcStatus recv_status = WcStatus::kSuccess;  // error to complete the receive with
  bool first_issue = false;  // READ/atomic carrying the next read MSN (not a re-issue)
  bool replay = false;       // a held request run now that its turn came (hold_unordered)
};

bool consumes_recv(Opcode op) {
  return op == Opcode::kSend || op == Opcode::kSendImm || op == Opcode::kSendInv ||
         op == Opcode::kWriteImm;
}
bool is_atomic(Opcode op) { return op == Opcode::kAtomicCmpSwap || op == Opcode::kAtomicFetchAdd; }

proto::Packet reply(Qp& qp, Opcode op, uint32_t psn, uint32_t msn, Time now, uint8_t path) {
  proto::Packet p;
  p.mbth.opcode = op;
  p.mbth.dest_qpn = qp.attr.dest_qp_num;
  p.mbth.psn = psn;
  p.mbth.msn = msn;
  p.mbth.path_id = path;
  p.mbth.timestamp = static_cast<uint32_t>(now);
  return p;
}

void send_nack(Core& c, Qp& qp, proto::NackReason reason, uint32_t psn, uint8_t path) {
  proto::Packet p = reply(qp, Opcode::kNack, psn, qp.rq_head, c.now(), path);
  p.nack = {reason, qp.attr.min_rnr_timer, psn};
  c.send(qp, p, path);
}

// Receive completions in posting order, each only once every request before
// the message's last PSN has arrived: the WRITE-then-SEND pattern relies on
// the SEND's completion meaning the WRITE's data is in place (docs/engine.md
// §Ordering). A placed SEND whose predecessors still have holes waits here
// until the cumulative point passes it.
void drain_recv(Core& c, Qp& qp) {
  while (qp.rq_head != qp.rq_tail && qp.rqe(qp.rq_head).done) {
    RecvWqe& r = qp.rqe(qp.rq_head);
    if (r.have_last && !proto::seq_lt(r.last_psn, qp.rw.cum())) break;
    if (qp.placed && !c.commit(qp.owner)) return;  // its data did not land: QP in ERR
    Completion wc;
    wc.wr_id = r.wr.wr_id;
    wc.status = r.status;
    wc.opcode = r.opcode;
    wc.byte_len = r.total;
    wc.imm = r.imm;
    wc.wc_flags = r.with_imm ? uint32_t{kWcWithImm} : 0u;
    if (r.with_inv && r.status == WcStatus::kSuccess) {
      // In receive order: requests before the SEND_INV still saw the window.
      mw_ops::remote_invalidate(c, qp, r.inv_rkey);
      wc.wc_flags |= kWcWithInv;
      wc.imm = r.inv_rkey;
    }
    wc.qp_num = qp.qpn;
    wc.src_qp = qp.attr.dest_qp_num;
    ++qp.rq_head;
    c.complete(qp, qp.init.recv_cqn, wc);
  }
}

State check_state(Core& c, Qp& qp, Req& r) {
  switch (qp.state) {
    case QpState::kRtr:
      if (!qp.comm_est) {
        qp.comm_est = true;
        c.hal().events.async_event(EventType::kCommEst, qp.qpn);
      }
      return State::kCheckPsn;
    case QpState::kRts:
    case QpState::kSqd:
    case QpState::kSqe: return State::kCheckPsn;
    case QpState::kErr:
      if (qp.has_fatal_nack) {  // keep telling the requester why (the first NACK may be lost)
        bool reissue = qp.fatal_read && r.p.mbth.opcode == Opcode::kReadReq &&
                       r.p.mbth.msn == qp.fatal_read_msn;
        send_nack(c, qp, qp.fatal_nack.reason, reissue ? r.p.mbth.psn : qp.fatal_nack.psn,
                  r.p.mbth.path_id);
      }
      [[fallthrough]];
    default: c.bump(&qp, &Counters::rx_drop_qp_state); return State::kDone;
  }
}

State check_psn(Core& c, Qp& qp, Req& r) {
  switch (qp.rw.classify(r.p.mbth.psn)) {
    case RecvWindow::Verdict::kNew: return State::kCheckOp;
    case RecvWindow::Verdict::kDuplicate: return State::kDuplicate;
    case RecvWindow::Verdict::kOutOfWindow: break;
  }
  c.bump(&qp, &Counters::rx_drop_out_of_window);
  send_nack(c, qp, proto::NackReason::kSequenceError, r.p.mbth.psn, r.p.mbth.path_id);
  return State::kDone;
}

bool is_held(const Qp& qp, uint32_t psn) {
  if (!qp.held_count) return false;
  for (const HeldRequest& h : qp.held)
    if (h.used && h.p.mbth.psn == psn) return true;
  return false;
}

// RC ordering (docs/engine.md §Ordering): WRITE and SEND payload may be
// placed in any order, but a READ or an atomic must observe every earlier
// request of the QP, as verbs users rely on (a READ after a WRITE sees the
// written data; a CMP_SWAP after a FETCH_ADD sees the added value). One that
// arrives ahead of a missing earlier PSN is received (marked, so the ACK's
// SACK shows the hole at once) but held, and runs when the cumulative point
// passes it (run_held). With the held set full it is dropped unmarked, and
// the requester's loss detection resends it.
bool ordered(Core& c, Qp& qp, const Req& r) {
  const uint32_t psn = r.p.mbth.psn;
  if (r.replay || psn == qp.rw.cum()) return true;
  // A READ re-issue repairs a READ whose first issue already ran in order:
  // nothing it must observe can be missing, and held behind an unrelated
  // hole the repair waited for that hole's recovery too.
  if (r.p.mbth.opcode == Opcode::kReadReq && proto::seq_lt(r.p.mbth.msn, qp.resp_rd_msn))
    return true;
  HeldRequest* room = nullptr;
  for (HeldRequest& h : qp.held)
    if (!h.used) room = &h;
  if (!room || qp.reads.size() + qp.held_count >= kReadJobs) {
    c.bump(&qp, &Counters::rx_drop_unordered);
    return false;
  }
  *room = {true, r.ce, r.p};
  room->p.payload = {};  // READ_REQ and atomics carry none (check_op)
  ++qp.held_count;
  c.bump(&qp, &Counters::rx_held_unordered);
  qp.rw.mark(psn);  // psn > cum: the cumulative point stays at the hole
  qp.ack_echo_ts = r.p.mbth.timestamp;
  qp.ack_echo_path = r.p.mbth.path_id;
  qp.ack_ce = r.ce;
  send_ack(c, qp, false);  // past a hole: ACK at once (docs/protocol.md §6.6)
  return false;
}

State check_op(Core& c, Qp& qp, Req& r) {
  const proto::Packet& p = r.p;
  uint64_t end = uint64_t{p.mbth.offset} + p.payload.size();
  switch (p.mbth.opcode) {
    case Opcode::kSend:
    case Opcode::kSendImm:
    case Opcode::kSendInv:
      if (end > p.seth.length) return State::kNakInvalid;
      return State::kCheckRecv;
    case Opcode::kWrite:
    case Opcode::kWriteImm:
      if (end > p.reth.length) return State::kNakInvalid;
      return consumes_recv(p.mbth.opcode) ? State::kCheckRecv : State::kCheckRkey;
    case Opcode::kReadReq:
      if (!p.payload.empty()) return State::kNakInvalid;
      return ordered(c, qp, r) ? State::kCheckResources : State::kDone;
    case Opcode::kAtomicCmpSwap:
    case Opcode::kAtomicFetchAdd:
      if (p.atomic.va % 8 != 0) return State::kNakInvalid;
      return ordered(c, qp, r) ? State::kCheckResources : State::kDone;
    default: return State::kNakInvalid;
  }
}

// READ/atomic resources (IB "responder resources", rxe's check_resource).
// Requests run in PSN order, so a first issue carries exactly the next read
// MSN and a READ re-issue (docs/protocol.md §6.5) an earlier one. A read
// MSN ahead of the next, an atomic that is not a first issue, or a first
// issue while max_dest_rd_atomic first-issue READs are still being answered
// (the requester cannot have completed them: their data is not all sent)
// breaks the requester's max_rd_atomic: NAK INVALID_REQUEST, as IB does. A
// READ that finds the queue full of re-issues is dropped unmarked and resent.
State check_resources(Core& c, Qp& qp, Req& r) {
  const uint32_t msn = r.p.mbth.msn;
  const uint32_t limit = std::max<uint32_t>(1, qp.attr.max_dest_rd_atomic);
  const bool read = r.p.mbth.opcode == Opcode::kReadReq;
  if (msn == qp.resp_rd_msn) {
    if (qp.reads.first_issues() >= limit) return State::kNakInvalid;
    r.first_issue = true;
  } else if (!read || !proto::seq_lt(msn, qp.resp_rd_msn)) {
    return State::kNakInvalid;
  }
  if (read && qp.reads.full()) {
    c.bump(&qp, &Counters::rx_drop_read_queue_full);
    return State::kDone;
  }
  return State::kCheckRkey;
}

}  // namespace

bool recv_keys_ok(Core& c, const Qp& qp, const RecvWqe& rw) {
  for (uint32_t i = 0; i < rw.wr.num_sge; ++i) {
    const Sge& s = rw.wr.sg[i];
    // A receive from an SRQ is checked against the SRQ's PD (IB).
    uint32_t pdn = qp.srq ? qp.srq->pdn : qp.init.pdn;
    if (c.mrs().check_local(qp.owner, pdn, s.lkey, s.addr, s.length,
                            kAccessLocalWrite) != KeyCheck::kOk)
      return false;
  }
  return true;
}

namespace {

// SEND_INV (docs/protocol.md §15): every packet names the same rkey, one
// the peer may invalidate (a bound type 2 window of this QP); the first
// packet to arrive records it in the receive.
bool check_invalidate(Core& c, Qp& qp, RecvWqe& rw, uint32_t rkey) {
  if (rw.with_inv) {
    if (rw.inv_rkey == rkey) return true;
    c.bump(&qp, &Counters::mw_remote_inv_refused);
    c.bump(&qp, &Counters::mw_refused_wrong_key);
    return false;
  }
  if (!mw_ops::remote_invalidate_allowed(c, qp, rkey)) return false;
  rw.with_inv = true;
  rw.inv_rkey = rkey;
  return true;
}

// Binds the message's MSN to the MSN-th posted receive (docs/engine.md
// §Message numbering): out-of-order packets of different messages land in
// the right buffers.
State check_recv(Core& c, Qp& qp, Req& r) {
  const proto::Packet& p = r.p;
  uint32_t msn = p.mbth.msn;
  if (proto::seq_lt(msn, qp.rq_head)) {  // message already completed
    c.bump(&qp, &Counters::rx_drop_duplicate);
    return State::kAcknowledge;
  }
  if (qp.srq && !proto::seq_lt(msn, qp.rq_tail)) srq::refill(c, qp, msn);
  if (!proto::seq_lt(msn, qp.rq_tail)) return State::kNakRnr;
  RecvWqe& rw = qp.rqe(msn);
  bool is_send = p.mbth.opcode != Opcode::kWriteImm;
  uint32_t total = is_send ? p.seth.length : p.reth.length;
  r.recv = &rw;
  if (!rw.bound) {
    rw.bound = true;
    rw.total = total;
    rw.opcode = is_send ? WcOpcode::kRecv : WcOpcode::kRecvRdmaWithImm;
    if (is_send && total > rw.capacity) {
      r.recv_status = WcStatus::kLocLenErr;
      return State::kNakInvalid;
    }
  } else if (rw.total != total || rw.done) {
    return State::kNakInvalid;
  }
  if (p.mbth.opcode == Opcode::kSendInv && !check_invalidate(c, qp, rw, p.ieth.rkey))
    return State::kNakInvalid;
  // Every packet: the receive's MRs may have been deregistered mid-message.
  if (is_send && !recv_keys_ok(c, qp, rw)) {
    r.recv_status = WcStatus::kLocProtErr;
    return State::kNakRemoteOp;
  }
  return is_send ? State::kExecute : State::kCheckRkey;
}

State check_rkey(Core& c, Qp& qp, Req& r) {
  const proto::Packet& p = r.p;
  uint64_t va = 0, len = 0;
  uint32_t rkey = 0, need = 0;
  if (is_atomic(p.mbth.opcode)) {
    va = p.atomic.va, len = 8, rkey = p.atomic.rkey, need = kAccessRemoteAtomic;
  } else {
    va = p.reth.va, len = p.reth.length, rkey = p.reth.rkey;
    need = p.mbth.opcode == Opcode::kReadReq ? kAccessRemoteRead : kAccessRemoteWrite;
  }
  if (len == 0) return State::kExecute;  // IB: zero-length needs no key
  if ((qp.attr.qp_access_flags & need) != need) {
    mw_ops::count_rkey_refusal(c, qp, KeyCheck::kNoAccess);
    return State::kNakAccess;
  }
  KeyCheck k = c.mrs().check_remote(qp.owner, qp.init.pdn, qp.qpn, rkey, va, len, need, nullptr);
  if (k != KeyCheck::kOk) {
    mw_ops::count_rkey_refusal(c, qp, k);
    return State::kNakAccess;
  }
  return State::kExecute;
}

// A repair asks for READ data the requester misses. What of it a queued job
// of the same READ has not sent yet is on its way (that job goes first), so
// only the rest is served: otherwise a READ still being answered when the
// requester's timer fired was served again in full. False: nothing is left.
bool trim_repair(const ReadQueue& q, ReadJob& j) {
  for (uint32_t k = 0; k < q.size() && j.length; ++k) {
    const ReadJob& o = q.job(k);
    if (o.msn != j.msn) continue;
    const uint64_t s = uint64_t{o.base_offset} + o.done, e = uint64_t{o.base_offset} + o.length;
    const uint64_t b = j.base_offset, f = b + j.length;
    if (s >= f || e <= b) continue;  // disjoint
    if (s <= b && e >= f) return false;
    if (s <= b) {  // the job sends the head of the repair
      const uint32_t d = static_cast<uint32_t>(e - b);
      j.va += d;
      j.base_offset += d;
      j.length -= d;
    } else if (e >= f) {  // ... its tail
      j.length = static_cast<uint32_t>(s - b);
    }  // inside it: served whole
  }
  return true;
}

// Queues a READ job (ReadQueue::push: a repair goes ahead of later READs).
void queue_read(Core& c, Qp& qp, ReadJob j) {
  if (!j.first_issue) {
    const uint32_t asked = j.length;
    const bool left = trim_repair(qp.reads, j);
    if (!left || j.length != asked) c.bump(&qp, &Counters::read_repairs_trimmed);
    if (!left) return;
  }
  qp.reads.push(j);
  c.activate(qp);
}

void run_atomic(Core& c, Qp& qp, const proto::Packet& p, uint64_t* original, bool* ok) {
  uint8_t b[8];
  *ok = false;
  if (!c.commit(qp.owner)) return;  // earlier placements failed: QP in ERR already
  *ok = c.hal().dma.read(qp.owner, p.atomic.va, b);
  if (!*ok) return;
  uint64_t v;
  std::memcpy(&v, b, 8);
  *original = v;
  if (p.mbth.opcode == Opcode::kAtomicCmpSwap) {
    if (v == p.atomic.compare) v = p.atomic.swap_add;
  } else {
    v += p.atomic.swap_add;
  }
  std::memcpy(b, &v, 8);
  *ok = c.hal().dma.write(qp.owner, p.atomic.va, b);
  if (!*ok) return;
  // The result is answered only once the new value is in host memory.
  c.placed_request(qp, p.mbth.psn, false, 0);
  *ok = c.commit(qp.owner);
}

void send_atomic_resp(Core& c, Qp& qp, const AtomicResult& a) {
  proto::Packet resp = reply(qp, Opcode::kAtomicResp, a.psn, a.msn, c.now(), a.path);
  resp.mbth.flags = proto::kFlagLast;
  resp.atomic_ack.original = a.original;
  c.send(qp, resp, a.path);
}

State execute(Core& c, Qp& qp, Req& r) {
  const proto::Packet& p = r.p;
  switch (p.mbth.opcode) {
    case Opcode::kSend:
    case Opcode::kSendImm:
    case Opcode::kSendInv:
      if (!p.payload.empty() && !sgl_write(c, qp.owner, r.recv->wr.sg.data(),
                                           r.recv->wr.num_sge, p.mbth.offset, p.payload)) {
        r.recv_status = WcStatus::kLocAccessErr;
        return State::kNakPlacement;
      }
      break;
    case Opcode::kWrite:
    case Opcode::kWriteImm:
      if (!p.payload.empty() &&
          !c.hal().dma.write(qp.owner, p.reth.va + p.mbth.offset, p.payload)) {
        if (r.recv) r.recv_status = WcStatus::kLocAccessErr;
        return State::kNakPlacement;
      }
      break;
    case Opcode::kReadReq:
      queue_read(c, qp, {p.mbth.psn, p.mbth.msn, p.reth.va, p.reth.length, p.mbth.offset, 0,
                         p.mbth.path_id, r.first_issue, p.reth.rkey});
      if (r.first_issue) ++qp.resp_rd_msn;
      break;
    case Opcode::kAtomicCmpSwap:
    case Opcode::kAtomicFetchAdd: {
      ++qp.resp_rd_msn;  // check_resources: an atomic is always a first issue
      bool ok = false;
      AtomicResult& a = qp.atomics[p.mbth.psn % kAtomicCache];
      a = {true, p.mbth.psn, p.mbth.msn, 0, p.mbth.path_id};
      run_atomic(c, qp, p, &a.original, &ok);
      if (!ok) {
        a.valid = false;
        // A failed commit has already NACKed and moved the QP to ERR.
        return qp.state == QpState::kErr ? State::kDone : State::kNakPlacement;
      }
      send_atomic_resp(c, qp, a);
      break;
    }
    default: return State::kNakInvalid;
  }
  if (!p.payload.empty() && !is_atomic(p.mbth.opcode))
    c.placed_request(qp, p.mbth.psn, r.recv != nullptr, p.mbth.msn);
  if (RecvWqe* rw = r.recv) {
    rw->placed += static_cast<uint32_t>(p.payload.size());
    if (p.mbth.flags & proto::kFlagLast) {
      rw->last_psn = p.mbth.psn;
      rw->have_last = true;
    }
    if (p.mbth.opcode == Opcode::kSendImm || p.mbth.opcode == Opcode::kWriteImm) {
      rw->with_imm = true;
      rw->imm = p.imm;
    }
    if (rw->placed >= rw->total) rw->done = true;
  }
  return State::kAcknowledge;
}

State acknowledge(Core& c, Qp& qp, Req& r) {
  const proto::Packet& p = r.p;
  if (r.replay) return State::kDone;  // marked and acknowledged when it arrived
  uint32_t before = qp.rw.cum();
  qp.rw.mark(p.mbth.psn);
  // The cumulative point may have passed a placed message that was waiting.
  if (qp.rw.cum() != before || (r.recv && r.recv->done)) drain_recv(c, qp);
  if (qp.state == QpState::kErr) return State::kDone;  // its placement failed
  ++qp.pending_acks;
  qp.ack_echo_ts = p.mbth.timestamp;
  qp.ack_echo_path = p.mbth.path_id;
  qp.ack_ce = r.ce;
  bool gap = p.mbth.psn != before || qp.rw.sack() != 0;
  if ((p.mbth.flags & proto::kFlagAckReq) || qp.pending_acks >= kAckEvery || gap)
    send_ack(c, qp, false);
  else if (qp.ack_deadline == kNever)
    qp.ack_deadline = c.now() + kDelayedAck;
  return State::kDone;
}

// A duplicate READ_REQ: its ACK was lost, perhaps its responses too. One
// whose job is still queued is being answered already (no second job);
// otherwise its range is served again, if the bounded queue has room (else
// the requester's timers ask again).
void serve_duplicate_read(Core& c, Qp& qp, const proto::Packet& p) {
  if (qp.reads.has_psn(p.mbth.psn)) return;
  if (qp.reads.full()) {
    c.bump(&qp, &Counters::rx_drop_read_queue_full);
    return;
  }
  queue_read(c, qp, {p.mbth.psn, p.mbth.msn, p.reth.va, p.reth.length, p.mbth.offset, 0,
                     p.mbth.path_id, false, p.reth.rkey});
}

// docs/protocol.md §6.8: never placed or executed again; READs are served
// again (idempotent), atomics replayed from the cache.
State duplicate(Core& c, Qp& qp, Req& r) {
  const proto::Packet& p = r.p;
  c.bump(&qp, &Counters::rx_drop_duplicate);
  if (is_held(qp, p.mbth.psn)) {
    // Held for its turn (ordered): it runs once, then; only re-ACKed now.
  } else if (is_atomic(p.mbth.opcode)) {
    const AtomicResult& a = qp.atomics[p.mbth.psn % kAtomicCache];
    if (a.valid && a.psn == p.mbth.psn) {
      c.bump(&qp, &Counters::atomic_replays);
      send_atomic_resp(c, qp, a);
    } else {  // evicted: must not execute twice
      send_nack(c, qp, proto::NackReason::kInvalidRequest, p.mbth.psn, p.mbth.path_id);
    }
  } else if (p.mbth.opcode == Opcode::kReadReq && check_rkey(c, qp, r) == State::kExecute) {
    serve_duplicate_read(c, qp, p);
  }
  qp.ack_echo_ts = p.mbth.timestamp;
  qp.ack_echo_path = p.mbth.path_id;
  qp.ack_ce = r.ce;
  send_ack(c, qp, true);
  return State::kDone;
}

// Class C/D responder errors (IB 9.9.3): NACK, complete the receive with
// its error if one is involved, QP to ERR with an affiliated event.
void fatal_nack(Core& c, Qp& qp, proto::NackReason reason, uint32_t psn, uint8_t path,
                EventType ev) {
  if ((c.config().violate & kViolateWrongNackCode) && reason == proto::NackReason::kRemoteAccessError)
    reason = proto::NackReason::kInvalidRequest;
  send_nack(c, qp, reason, psn, path);
  qp.has_fatal_nack = true;
  qp.fatal_nack = {reason, qp.attr.min_rnr_timer, psn};
  c.qp_to_error(qp);
  c.hal().events.async_event(ev, qp.qpn);
}

State fatal(Core& c, Qp& qp, Req& r, proto::NackReason reason, EventType ev) {
  if (r.recv && r.recv_status != WcStatus::kSuccess) {
    r.recv->status = r.recv_status;
    r.recv->done = true;
  }
  fatal_nack(c, qp, reason, r.p.mbth.psn, r.p.mbth.path_id, ev);
  return State::kDone;
}

State nak_rnr(Core& c, Qp& qp, Req& r) {
  c.bump(&qp, &Counters::rx_nak_rnr);
  send_nack(c, qp, proto::NackReason::kRnr, r.p.mbth.psn, r.p.mbth.path_id);
  return State::kDone;
}

State step(Core& c, Qp& qp, Req& r, State s) {
  switch (s) {
    case State::kCheckState: return check_state(c, qp, r);
    case State::kCheckPsn: return check_psn(c, qp, r);
    case State::kCheckOp: return check_op(c, qp, r);
    case State::kCheckResources: return check_resources(c, qp, r);
    case State::kCheckRecv: return check_recv(c, qp, r);
    case State::kCheckRkey: return check_rkey(c, qp, r);
    case State::kExecute: return execute(c, qp, r);
    case State::kAcknowledge: return acknowledge(c, qp, r);
    case State::kDuplicate: return duplicate(c, qp, r);
    case State::kNakRnr: return nak_rnr(c, qp, r);
    case State::kNakAccess:
      c.bump(&qp, &Counters::rx_nak_access);
      return fatal(c, qp, r, proto::NackReason::kRemoteAccessError, EventType::kQpAccessErr);
    case State::kNakInvalid:
      c.bump(&qp, &Counters::rx_nak_invalid);
      return fatal(c, qp, r, proto::NackReason::kInvalidRequest, EventType::kQpReqErr);
    case State::kNakRemoteOp:
      c.bump(&qp, &Counters::rx_nak_invalid);
      return fatal(c, qp, r, proto::NackReason::kRemoteOperationError, EventType::kQpFatal);
    case State::kNakPlacement:  // the host write failed: a remote access error (hal.h)
      if (!c.hal().dma.owner_alive(qp.owner)) {  // as if destroyed: no answer
        c.bump(&qp, &Counters::rx_drop_owner_gone);
        return State::kDone;
      }
      c.bump(&qp, &Counters::rx_nak_access);
      return fatal(c, qp, r, proto::NackReason::kRemoteAccessError, EventType::kQpAccessErr);
    case State::kDone: break;
  }
  return State::kDone;
}

}  // namespace

void on_trimmed(Core& c, Qp& qp, const proto::Mbth& m) {
  if (qp.state != QpState::kRtr && qp.state != QpState::kRts && qp.state != QpState::kSqd) {
    c.bump(&qp, &Counters::rx_drop_qp_state);
    return;
  }
  switch (qp.rw.classify(m.psn)) {
    case RecvWindow::Verdict::kDuplicate: c.bump(&qp, &Counters::rx_drop_duplicate); return;
    case RecvWindow::Verdict::kOutOfWindow: c.bump(&qp, &Counters::rx_drop_out_of_window); return;
    case RecvWindow::Verdict::kNew: break;
  }
  send_nack(c, qp, proto::NackReason::kTrimmed, m.psn, m.path_id);
}

namespace {

void serve(Core& c, Qp& qp, Req& r) {
  State s = State::kCheckState;
  while (s != State::kDone) s = step(c, qp, r, s);
}

// Held READs/atomics whose turn has come (ordered): the cumulative point
// passed them, so every request before each has arrived. They run in PSN
// order from CHECK_RESOURCES, as they would have had they come in order.
void run_held(Core& c, Qp& qp) {
  while (qp.held_count && qp.state != QpState::kErr && qp.state != QpState::kReset) {
    HeldRequest* next = nullptr;
    for (HeldRequest& h : qp.held) {
      if (!h.used || !proto::seq_lt(h.p.mbth.psn, qp.rw.cum())) continue;
      if (!next || proto::seq_lt(h.p.mbth.psn, next->p.mbth.psn)) next = &h;
    }
    if (!next) return;
    HeldRequest mine = *next;
    next->used = false;
    --qp.held_count;
    Req r{mine.p, mine.ce};
    r.replay = true;
    State s = State::kCheckResources;
    while (s != State::kDone) s = step(c, qp, r, s);
  }
}

}  // namespace

void on_request(Core& c, Qp& qp, const proto::Frame& f) {
  Req r{f.packet, f.headers.ecn == 0b11};
  if (r.ce) {
    c.bump(&qp, &Counters::ecn_marks_seen);
    if (qp.ce_count < UINT16_MAX) ++qp.ce_count;  // saturates (protocol.md §3.7)
  }
  serve(c, qp, r);
  if (qp.held_count) run_held(c, qp);
}

void drop_held(Qp& qp) {
  qp.held = {};  // every slot unused again, and its memory freed
  qp.held_count = 0;
}

void placement_failed(Core& c, Qp& qp) {
  c.bump(&qp, &Counters::rx_nak_access);
  for (uint32_t msn : qp.placed_recvs) {
    if (proto::seq_lt(msn, qp.rq_head) || !proto::seq_lt(msn, qp.rq_tail)) continue;
    RecvWqe& rw = qp.rqe(msn);
    rw.status = WcStatus::kLocAccessErr;
    rw.done = true;
  }
  uint32_t psn = qp.placed_psn;
  qp.placed = false;
  qp.placed_recvs.clear();
  if (qp.state == QpState::kErr) return;
  fatal_nack(c, qp, proto::NackReason::kRemoteAccessError, psn, qp.ack_echo_path,
             EventType::kQpAccessErr);
}

void send_ack(Core& c, Qp& qp, bool dup) {
  // Never acknowledge data that did not land (hal.h §Placement).
  if (qp.placed && !c.commit(qp.owner)) return;
  Time now = c.now();
  proto::Packet p = reply(qp, Opcode::kAck, qp.rw.cum(), qp.rq_head, now, qp.ack_echo_path);
  proto::Ackh& a = p.ack;
  a.cum_psn = qp.rw.cum();
  a.sack = (c.config().violate & kViolateAckWithoutSack) ? 0 : qp.rw.sack();
  a.echo_ts = qp.ack_echo_ts;
  a.echo_path = qp.ack_echo_path;
  a.credit = c.credit()->grant(qp.qpn, now, qp.ack_ce);
  a.ce_count = qp.ce_count;
  a.ack_flags = (qp.ack_ce ? 1 : 0) | (dup ? 2 : 0);
  a.rcv_msn = qp.rq_head;
  c.send(qp, p, qp.ack_echo_path);
  qp.pending_acks = 0;
  qp.ce_count = 0;
  qp.ack_deadline = kNever;
}

uint32_t run(Core& c, Qp& qp, uint32_t budget) {
  uint32_t sent = 0;
  while (sent < budget && !qp.reads.empty() && qp.state != QpState::kErr) {
    if (sent && !c.hal().packets.tx_ready()) break;  // hal.h: held until the host pumps
    ReadJob& j = qp.reads.front();
    uint32_t len = std::min(qp.mtu, j.length - j.done);
    uint32_t wire = len + static_cast<uint32_t>(proto::header_length(Opcode::kReadResp) +
                                                proto::kIcrcLen);
    // Line-rate pacing, not the QP's congestion window: that window is the
    // requester role's and only ACKs of this QP's own requests move it, so
    // after one loss of its own it would hold every later READ response at
    // one packet per RTT for good (READs then ran out of retries). The data
    // a peer can pull is bounded on its side (max_rd_atomic, READ budget),
    // as on IB.
    Time now = c.now();
    if (qp.read_pace_at > now) {
      qp.pace_deadline = qp.read_pace_at;
      break;
    }
    uint64_t bps = c.config().link_bps ? c.config().link_bps : 25'000'000'000;
    qp.read_pace_at = std::max(qp.read_pace_at, now - std::min(now, kReadPaceBurst)) +
                      static_cast<Time>(uint64_t{wire} * 8'000'000'000 / bps);
    c.commit(qp.owner);  // a READ sees earlier writes, and their failure is not lost
    if (qp.state == QpState::kErr) break;
    if (len && c.mrs().check_remote(qp.owner, qp.init.pdn, qp.qpn, j.rkey, j.va + j.done, len,
                                    kAccessRemoteRead, nullptr) != KeyCheck::kOk) {
      // The MR was deregistered (or changed) after the request was accepted.
      c.bump(&qp, &Counters::rx_nak_access);
      qp.fatal_read = true;
      qp.fatal_read_msn = j.msn;
      fatal_nack(c, qp, proto::NackReason::kRemoteAccessError, j.psn, j.path,
                 EventType::kQpAccessErr);
      break;
    }
    uint8_t path = qp.paths->next_path(now);
    proto::Packet p = reply(qp, Opcode::kReadResp, j.psn, j.msn, now, path);
    p.mbth.offset = j.base_offset + j.done;
    if (j.done + len >= j.length) p.mbth.flags = proto::kFlagLast;
    // Read straight into the port's frame when it has one (hal.h §tx_buffer).
    std::span<uint8_t> buf = c.tx_payload(qp, qp.attr.av, p, path, len);
    if (len && !c.hal().dma.read(qp.owner, j.va + j.done, buf)) {
      c.tx_drop(&qp, buf);
      c.qp_to_error(qp);
      c.hal().events.async_event(EventType::kQpFatal, qp.qpn);
      break;
    }
    p.payload = buf;
    j.done += len;
    bool finished = j.done >= j.length;
    c.send(qp, p, path);
    ++sent;
    if (finished) qp.reads.pop();
  }
  return sent;
}

}  // namespace metaroce::fw::responder
