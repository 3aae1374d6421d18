#include "firmware-model/engine/mw_ops.h"

#include "firmware-model/engine/qp.h"

namespace metaroce::fw::mw_ops {

namespace {

uint64_t Counters::*refusal_counter(MwCheck c) {
  switch (c) {
    case MwCheck::kOk:
    case MwCheck::kNoWindow: return &Counters::mw_refused_no_window;
    case MwCheck::kWrongOwner: return &Counters::mw_refused_wrong_owner;
    case MwCheck::kWrongPd: return &Counters::mw_refused_wrong_pd;
    case MwCheck::kWrongType: return &Counters::mw_refused_wrong_type;
    case MwCheck::kBusy: return &Counters::mw_refused_busy;
    case MwCheck::kWrongKey: return &Counters::mw_refused_wrong_key;
    case MwCheck::kNoMr: return &Counters::mw_refused_no_mr;
    case MwCheck::kMrNoBind: return &Counters::mw_refused_mr_no_bind;
    case MwCheck::kOutOfBounds: return &Counters::mw_refused_out_of_bounds;
    case MwCheck::kBadAccess: return &Counters::mw_refused_bad_access;
    case MwCheck::kWrongQp: return &Counters::mw_refused_wrong_qp;
  }
  return &Counters::mw_refused_no_window;
}

MwCheck bind(Core& c, Qp& qp, const SendWr& wr) {
  BindRequest req;
  req.owner = qp.owner;
  req.pdn = qp.init.pdn;
  req.qpn = qp.qpn;
  req.type = wr.bind.type;
  req.bind = wr.bind;
  req.new_rkey = wr.rkey;
  return c.mws().bind(req, c.mrs());
}

MwCheck local_invalidate(Core& c, Qp& qp, uint32_t rkey) {
  MwCheck k = c.mws().check_invalidate(qp.owner, qp.init.pdn, qp.qpn, rkey, false);
  if (k == MwCheck::kOk) c.mws().invalidate(rkey, c.mrs());
  return k;
}

}  // namespace

bool is_local(WrOpcode op) { return op == WrOpcode::kBindMw || op == WrOpcode::kLocalInv; }

WcStatus apply_local(Core& c, Qp& qp, const SendWr& wr) {
  const bool is_bind = wr.opcode == WrOpcode::kBindMw;
  MwCheck k = is_bind ? bind(c, qp, wr) : local_invalidate(c, qp, wr.imm);
  if (k == MwCheck::kOk) {
    c.bump(&qp, is_bind ? &Counters::mw_binds : &Counters::mw_local_invalidations);
    return WcStatus::kSuccess;
  }
  c.bump(&qp, is_bind ? &Counters::mw_bind_refused : &Counters::mw_local_inv_refused);
  c.bump(&qp, refusal_counter(k));
  return is_bind ? WcStatus::kMwBindErr : WcStatus::kLocProtErr;
}

requester::State run_local(Core& c, Qp& qp) {
  SendWqe& w = qp.sqe(qp.sq_next);
  WcStatus st = apply_local(c, qp, w.wr);
  if (st != WcStatus::kSuccess) {
    w.status = st;
    qp.req_error = true;
  }
  // Completes once every PSN before it is acknowledged (completer::finished).
  w.length = 0;
  w.max_psn = qp.sb.nxt() - 1;
  w.all_sent = true;
  ++qp.sq_next;
  completer::drain(c, qp);
  return st == WcStatus::kSuccess ? requester::State::kLocalDone
                                  : requester::State::kBlockedOrder;
}

bool remote_invalidate_allowed(Core& c, Qp& qp, uint32_t rkey) {
  MwCheck k = c.mws().check_invalidate(qp.owner, qp.init.pdn, qp.qpn, rkey, true);
  if (k == MwCheck::kOk) return true;
  c.bump(&qp, &Counters::mw_remote_inv_refused);
  c.bump(&qp, refusal_counter(k));
  return false;
}

void remote_invalidate(Core& c, Qp& qp, uint32_t rkey) {
  c.mws().invalidate(rkey, c.mrs());
  c.bump(&qp, &Counters::mw_remote_invalidations);
}

void count_rkey_refusal(Core& c, Qp& qp, KeyCheck k) {
  switch (k) {
    case KeyCheck::kOk: return;
    case KeyCheck::kNoKey: c.bump(&qp, &Counters::rkey_refused_no_key); return;
    case KeyCheck::kWrongOwner: c.bump(&qp, &Counters::rkey_refused_wrong_owner); return;
    case KeyCheck::kWrongPd: c.bump(&qp, &Counters::rkey_refused_wrong_pd); return;
    case KeyCheck::kWrongQp: c.bump(&qp, &Counters::rkey_refused_wrong_qp); return;
    case KeyCheck::kOutOfBounds: c.bump(&qp, &Counters::rkey_refused_out_of_bounds); return;
    case KeyCheck::kNoAccess: c.bump(&qp, &Counters::rkey_refused_no_access); return;
  }
}

}  // namespace metaroce::fw::mw_ops
