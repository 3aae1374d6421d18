// The unreliable connected service: sender and receiver (uc.h).
#include <algorithm>

#include "firmware-model/engine/mw_ops.h"
#include "firmware-model/engine/qp.h"

namespace metaroce::fw::uc {

namespace {

using proto::Opcode;

Opcode uc_opcode(Opcode rc) {
  switch (rc) {
    case Opcode::kSendImm: return Opcode::kUcSendImm;
    case Opcode::kWrite: return Opcode::kUcWrite;
    case Opcode::kWriteImm: return Opcode::kUcWriteImm;
    default: return Opcode::kUcSend;
  }
}

bool is_send(Opcode op) { return op == Opcode::kUcSend || op == Opcode::kUcSendImm; }
bool consumes_recv(Opcode op) { return op != Opcode::kUcWrite; }

// ---------------- sender ----------------

// A WQE that cannot be sent: it completes with its status and the QP goes
// to ERR (every WR before it has completed already), flushing the rest.
void fail(Core& c, Qp& qp, SendWqe& w, WcStatus status) {
  w.status = status;
  c.bump(&qp, &Counters::local_errors);
  c.qp_to_error(qp);
}

WcOpcode wc_opcode(WrOpcode op) {
  switch (op) {
    case WrOpcode::kRdmaWrite:
    case WrOpcode::kRdmaWriteImm: return WcOpcode::kRdmaWrite;
    case WrOpcode::kBindMw: return WcOpcode::kBindMw;
    case WrOpcode::kLocalInv: return WcOpcode::kLocalInv;
    default: return WcOpcode::kSend;
  }
}

void finish(Core& c, Qp& qp, SendWqe& w) {
  ++qp.sq_next;
  qp.sq_head = qp.sq_next;
  if (!(w.wr.send_flags & kSendSignaled) && !qp.init.sq_sig_all) return;
  Completion wc;
  wc.wr_id = w.wr.wr_id;
  wc.opcode = wc_opcode(w.wr.opcode);
  wc.byte_len = w.length;
  wc.qp_num = qp.qpn;
  wc.src_qp = qp.attr.dest_qp_num;
  c.complete(qp, qp.init.send_cqn, wc);
}

bool start(Core& c, Qp& qp, SendWqe& w) {
  if (w.status != WcStatus::kSuccess) {
    fail(c, qp, w, w.status);
    return false;
  }
  w.started = true;
  w.first_psn = qp.uc.send_psn;
  bool recv = w.wr.opcode != WrOpcode::kRdmaWrite;
  w.msn = recv ? qp.next_recv_msn++ : qp.next_recv_msn;
  return true;
}

// BIND_MW / LOCAL_INV (type 2 windows on UC as on RC, docs/engine.md
// §Memory windows): run by the NIC in send-queue order, nothing on the
// wire; every WQE before it has completed already. False: refused, the QP
// is in ERR.
bool run_local(Core& c, Qp& qp, SendWqe& w) {
  WcStatus st = w.status != WcStatus::kSuccess ? w.status : mw_ops::apply_local(c, qp, w.wr);
  if (st != WcStatus::kSuccess) {
    fail(c, qp, w, st);
    return false;
  }
  w.length = 0;
  finish(c, qp, w);
  return true;
}

void report_drained(Core& c, Qp& qp) {
  if (qp.state != QpState::kSqd || qp.sq_drained_reported) return;
  if (qp.sq_next != qp.sq_tail && qp.sqe(qp.sq_next).started) return;
  qp.sq_drained_reported = true;
  c.hal().events.async_event(EventType::kSqDrained, qp.qpn);
}

}  // namespace

uint32_t run(Core& c, Qp& qp, uint32_t budget) {
  uint32_t sent = 0;
  while (sent < budget && qp.sq_next != qp.sq_tail) {
    SendWqe& w = qp.sqe(qp.sq_next);
    bool open = qp.state == QpState::kRts || (qp.state == QpState::kSqd && w.started);
    if (open && !w.started && mw_ops::is_local(w.wr.opcode)) {
      if (!run_local(c, qp, w)) break;
      continue;
    }
    if (!open || (!w.started && !start(c, qp, w))) break;
    uint32_t len = std::min(qp.mtu, w.length - w.sent);
    proto::Packet p;
    WcStatus st = requester::build(c, qp, w, qp.uc.send_psn, w.sent, len, 0, false, &p);
    if (st != WcStatus::kSuccess) {
      fail(c, qp, w, st);
      break;
    }
    p.mbth.opcode = uc_opcode(p.mbth.opcode);
    p.mbth.flags &= static_cast<uint16_t>(~proto::kFlagAckReq);  // nothing answers
    c.send(qp, p, 0);
    ++qp.uc.send_psn;
    ++sent;
    w.sent += len;
    if (w.sent >= w.length) finish(c, qp, w);
  }
  report_drained(c, qp);
  return sent;
}

// ---------------- receiver ----------------

namespace {

// The QP stops: a host write failed (the application's memory is gone).
// The receive involved completes kLocAccessErr, the rest flush.
void fatal(Core& c, Qp& qp, RecvWqe* r) {
  if (r) {
    r->status = WcStatus::kLocAccessErr;
    r->done = true;
  }
  qp.uc.in_message = false;
  c.qp_to_error(qp);
  c.hal().events.async_event(EventType::kQpAccessErr, qp.qpn);
}

// PSN order: a gap ends the message in progress. False: drop this packet.
bool check_psn(Core& c, Qp& qp, const proto::Packet& p) {
  UcReceive& u = qp.uc;
  uint32_t psn = p.mbth.psn;
  if (psn != u.next_psn) {
    if (proto::seq_lt(psn, u.next_psn)) {  // older than expected: reordered or duplicated
      c.bump(&qp, &Counters::rx_drop_uc_stale);
      return false;
    }
    c.bump(&qp, &Counters::rx_drop_uc_psn_gap);
    u.in_message = false;  // its receive stays for the next message
  }
  u.next_psn = psn + 1;
  if (!u.in_message && p.mbth.offset != 0) {  // the start of this message was lost or refused
    c.bump(&qp, &Counters::rx_drop_uc_mid_message);
    return false;
  }
  return true;
}

// The receive for a SEND or WRITE_IMM starting now: rq_head (from the SRQ
// if the QP has one), or null.
RecvWqe* bind_recv(Core& c, Qp& qp) {
  if (qp.srq && qp.rq_head == qp.rq_tail) srq::refill(c, qp, qp.rq_head);
  if (qp.rq_head == qp.rq_tail) return nullptr;
  RecvWqe& r = qp.rqe(qp.rq_head);
  r.bound = true;
  r.placed = 0;
  r.with_imm = false;
  return &r;
}

void complete_recv(Core& c, Qp& qp, const RecvWqe& r, WcStatus status) {
  Completion wc;
  wc.wr_id = r.wr.wr_id;
  wc.status = status;
  wc.opcode = r.opcode;
  wc.byte_len = status == WcStatus::kSuccess ? r.total : 0;
  if (r.with_imm) {
    wc.imm = r.imm;
    wc.wc_flags = kWcWithImm;
  }
  wc.qp_num = qp.qpn;
  wc.src_qp = qp.attr.dest_qp_num;
  ++qp.rq_head;
  c.complete(qp, qp.init.recv_cqn, wc);
}

// The first packet of a message: its receive, its rkey, its length.
bool begin(Core& c, Qp& qp, const proto::Packet& p) {
  UcReceive& u = qp.uc;
  Opcode op = p.mbth.opcode;
  u.opcode = op;
  u.length = is_send(op) ? p.seth.length : p.reth.length;
  u.next_offset = 0;
  u.has_recv = consumes_recv(op);
  if (!is_send(op) && u.length) {
    // The rkey may name an MR or a window (a type 2 one only if bound to this QP).
    KeyCheck k = (qp.attr.qp_access_flags & kAccessRemoteWrite)
                     ? c.mrs().check_remote(qp.owner, qp.init.pdn, qp.qpn, p.reth.rkey, p.reth.va,
                                            u.length, kAccessRemoteWrite, nullptr)
                     : KeyCheck::kNoAccess;
    if (k != KeyCheck::kOk) {
      mw_ops::count_rkey_refusal(c, qp, k);
      c.bump(&qp, &Counters::rx_drop_uc_access);
      return false;
    }
  }
  if (!u.has_recv) return true;
  RecvWqe* r = bind_recv(c, qp);
  if (!r) {
    c.bump(&qp, &Counters::rx_drop_uc_no_recv);
    return false;
  }
  r->total = u.length;
  r->opcode = is_send(op) ? WcOpcode::kRecv : WcOpcode::kRecvRdmaWithImm;
  if (is_send(op) && u.length > r->capacity) {  // IB: the receive completes in error
    c.bump(&qp, &Counters::rx_drop_uc_too_long);
    complete_recv(c, qp, *r, WcStatus::kLocLenErr);
    return false;
  }
  return true;
}

// Every packet: it continues the message where the last one ended, and fits.
bool in_shape(Core& c, Qp& qp, const proto::Packet& p) {
  const UcReceive& u = qp.uc;
  uint32_t total = is_send(p.mbth.opcode) ? p.seth.length : p.reth.length;
  bool ok = p.mbth.opcode == u.opcode && total == u.length && p.mbth.offset == u.next_offset &&
            uint64_t{p.mbth.offset} + p.payload.size() <= u.length;
  if (!ok) c.bump(&qp, &Counters::rx_drop_uc_malformed);
  return ok;
}

bool place(Core& c, Qp& qp, const proto::Packet& p, RecvWqe* r) {
  if (p.payload.empty()) return true;
  bool ok = false;
  if (is_send(p.mbth.opcode)) {
    ok = responder::recv_keys_ok(c, qp, *r) &&
         sgl_write(c, qp.owner, r->wr.sg.data(), r->wr.num_sge, p.mbth.offset, p.payload);
  } else {
    ok = c.hal().dma.write(qp.owner, p.reth.va + p.mbth.offset, p.payload);
  }
  if (ok) c.placed_request(qp, p.mbth.psn, r != nullptr, qp.rq_head);
  return ok;
}

// The last packet is in: the receive completes once its data has landed.
void complete(Core& c, Qp& qp, RecvWqe* r) {
  qp.uc.in_message = false;
  if (!r) return;
  if (qp.placed && !c.commit(qp.owner)) return;  // uc::placement_failed ran
  complete_recv(c, qp, *r, WcStatus::kSuccess);
}

}  // namespace

void on_request(Core& c, Qp& qp, const proto::Frame& f) {
  const proto::Packet& p = f.packet;
  if (qp.state != QpState::kRtr && qp.state != QpState::kRts && qp.state != QpState::kSqd) {
    c.bump(&qp, &Counters::rx_drop_qp_state);
    return;
  }
  if (!check_psn(c, qp, p)) return;
  UcReceive& u = qp.uc;
  if (!u.in_message) {
    if (!begin(c, qp, p)) return;  // dropped (counted); its later packets follow it
    u.in_message = true;
  }
  if (!in_shape(c, qp, p)) {
    u.in_message = false;
    return;
  }
  RecvWqe* r = u.has_recv ? &qp.rqe(qp.rq_head) : nullptr;
  if (!place(c, qp, p, r)) return fatal(c, qp, r);
  if (r && p.mbth.opcode != Opcode::kUcSend) {
    r->with_imm = true;
    r->imm = p.imm;
  }
  u.next_offset += static_cast<uint32_t>(p.payload.size());
  if (p.mbth.flags & proto::kFlagLast) complete(c, qp, r);
}

void placement_failed(Core& c, Qp& qp) {
  for (uint32_t msn : qp.placed_recvs) {
    if (proto::seq_lt(msn, qp.rq_head) || !proto::seq_lt(msn, qp.rq_tail)) continue;
    qp.rqe(msn).status = WcStatus::kLocAccessErr;
    qp.rqe(msn).done = true;
  }
  qp.placed = false;
  qp.placed_recvs.clear();
  if (qp.state != QpState::kErr) fatal(c, qp, nullptr);
}

}  // namespace metaroce::fw::uc
