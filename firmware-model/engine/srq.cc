// Shared receive queues: the pool and how a QP's receive window draws
// from it (srq.h, docs/engine.md §Shared receive queues).
#include "firmware-model/engine/srq.h"

#include <cerrno>

#include "firmware-model/engine/qp.h"

namespace metaroce::fw {

Srq* SrqTable::add() {
  if (count_ >= max_) return nullptr;
  uint32_t h = 1;
  while (h < slots_.size() && slots_[h]) ++h;
  if (h >= slots_.size()) slots_.resize(h + 1);
  slots_[h] = std::make_unique<Srq>();
  slots_[h]->srqn = h;
  ++count_;
  return slots_[h].get();
}

void SrqTable::remove(uint32_t h) {
  if (!get(h)) return;
  slots_[h].reset();
  --count_;
}

namespace srq {

namespace {
uint32_t pow2_at_least(uint32_t n) {
  uint32_t p = 1;
  while (p < n) p <<= 1;
  return p;
}

// IB: the limit event fires once when the WQEs in the SRQ drop below an
// armed limit, and disarms it (a query then reports srq_limit 0).
void check_limit(Core& c, Srq& s) {
  if (s.attr.srq_limit == 0 || s.count() >= s.attr.srq_limit) return;
  s.attr.srq_limit = 0;
  c.bump(nullptr, &Counters::srq_limit_events);
  c.hal().events.async_event(EventType::kSrqLimitReached, s.srqn);
}
}  // namespace

int check_create(const DeviceCaps& caps, const SrqAttr& want, SrqAttr* actual, const char** why) {
  if (want.max_wr == 0 || want.max_wr > caps.max_qp_wr) {
    *why = "SRQ max_wr must be 1..max_srq_wr";
    return EINVAL;
  }
  if (want.max_sge == 0 || want.max_sge > caps.max_sge) {
    *why = "SRQ max_sge must be 1..max_srq_sge";
    return EINVAL;
  }
  *actual = {pow2_at_least(want.max_wr), want.max_sge, 0};
  return 0;
}

int modify(Srq& s, const SrqAttr& attr, uint32_t mask, const char** why) {
  if (mask & ~uint32_t{kSrqMaxWr | kSrqLimit}) {
    *why = "unknown ibv_srq_attr_mask bits";
    return EINVAL;
  }
  if (mask & kSrqMaxWr) {
    *why = "resizing an SRQ (IBV_SRQ_MAX_WR) is not supported";
    return EINVAL;
  }
  if ((mask & kSrqLimit) && attr.srq_limit > s.attr.max_wr) {
    *why = "srq_limit above the SRQ's max_wr";
    return EINVAL;
  }
  if (mask & kSrqLimit) s.attr.srq_limit = attr.srq_limit;
  return 0;
}

int post(Srq& s, const RecvWr& wr) {
  if (wr.num_sge > s.attr.max_sge) return EINVAL;
  if (s.count() >= s.attr.max_wr) return ENOMEM;
  s.ring[s.tail & (s.attr.max_wr - 1)] = wr;
  ++s.tail;
  return 0;
}

void refill(Core& c, Qp& qp, uint32_t msn) {
  Srq& s = *qp.srq;
  bool took = false;
  // The window is the QP's receive ring: receives are taken only for an
  // MSN within it, so a peer's far-ahead MSN takes nothing.
  if (msn - qp.rq_head >= qp.rq.size()) {
    c.bump(&qp, &Counters::rx_rnr_srq_window);
    return;
  }
  while (!proto::seq_lt(msn, qp.rq_tail) && qp.rq_tail - qp.rq_head < qp.rq.size() &&
         s.count() > 0) {
    RecvWqe& r = qp.rqe(qp.rq_tail);
    r = RecvWqe{};
    r.wr = s.ring[s.head & (s.attr.max_wr - 1)];
    for (uint32_t i = 0; i < r.wr.num_sge; ++i) r.capacity += r.wr.sg[i].length;
    ++s.head;
    ++qp.rq_tail;
    took = true;
  }
  // Within the window: the SRQ ran dry. RC and UC answer (or drop) with
  // RNR; a UD caller counts its own drop (rx_drop_ud_srq_empty).
  if (!proto::seq_lt(msn, qp.rq_tail) && qp.init.type != QpType::kUd)
    c.bump(&qp, &Counters::rx_rnr_srq_empty);
  if (took) check_limit(c, s);
}

void release_window(Core& c, Qp& qp) {
  for (uint32_t s = qp.rq_head; s != qp.rq_tail; ++s) {
    Completion wc;
    wc.wr_id = qp.rqe(s).wr.wr_id;
    wc.status = WcStatus::kWrFlushErr;
    wc.qp_num = qp.qpn;
    c.complete(qp, qp.init.recv_cqn, wc);
  }
  qp.rq_head = qp.rq_tail;
}

}  // namespace srq
}  // namespace metaroce::fw
