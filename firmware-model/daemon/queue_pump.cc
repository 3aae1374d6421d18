#include "firmware-model/daemon/queue_pump.h"

#include "firmware-model/uapi/convert.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace metaroce::daemon {

QueuePump::QueuePump(DaemonCounters& counters, std::function<int(fw::OwnerId)> async_fd_of)
    : counters_(counters), async_fd_of_(std::move(async_fd_of)) {}

// ---------------- rings ----------------

int QueuePump::add_cq(uint32_t cqn, fw::OwnerId owner, uint64_t user_handle, uint32_t entries,
                      size_t bytes, int channel_fd, int* client_fd, size_t* size) {
  CqState cq;
  cq.owner = owner;
  cq.user_handle = user_handle;
  if (int err = cq.shm.create("metaroce-cq", bytes)) return err;
  cq.ring = RingView(cq.shm.base(), entries, sizeof(mroce_cqe));
  if (channel_fd >= 0) cq.channel_fd = fcntl(channel_fd, F_DUPFD_CLOEXEC, 0);
  *client_fd = dup(cq.shm.fd());
  *size = cq.shm.size();
  cqs_.emplace(cqn, std::move(cq));
  return 0;
}

int QueuePump::add_qp(uint32_t qpn, fw::OwnerId owner, uint64_t user_handle, uint32_t send_cqn,
                      uint32_t sq_entries, size_t sq_bytes, uint32_t rq_entries, size_t rq_bytes,
                      int* client_fd, size_t* size) {
  QpState qp;
  qp.owner = owner;
  qp.user_handle = user_handle;
  qp.send_cqn = send_cqn;
  if (int err = qp.shm.create("metaroce-qp", sq_bytes + rq_bytes)) return err;
  qp.sq = RingView(qp.shm.base(), sq_entries, sizeof(mroce_send_wqe));
  qp.rq = RingView(qp.shm.base() + sq_bytes, rq_entries, sizeof(mroce_recv_wqe));
  *client_fd = dup(qp.shm.fd());
  *size = qp.shm.size();
  qps_.emplace(qpn, std::move(qp));
  return 0;
}

size_t QueuePump::remove_cq(uint32_t cqn) {
  auto it = cqs_.find(cqn);
  if (it == cqs_.end()) return 0;
  if (it->second.channel_fd >= 0) close(it->second.channel_fd);
  size_t bytes = it->second.shm.size();
  cqs_.erase(it);
  return bytes;
}

size_t QueuePump::remove_qp(uint32_t qpn) {
  auto it = qps_.find(qpn);
  if (it == qps_.end()) return 0;
  size_t bytes = it->second.shm.size();
  qps_.erase(it);
  return bytes;
}

void QueuePump::drain(uint32_t qpn) {
  auto it = qps_.find(qpn);
  if (it == qps_.end()) return;
  drain_rq(qpn, it->second);
  drain_sq(qpn, it->second);
}

void QueuePump::ring_counters(uint32_t qpn, std::vector<hw::NamedCounter>* out) const {
  auto it = qps_.find(qpn);
  if (it == qps_.end()) return;
  const QpState& qp = it->second;
  out->push_back({"sq_posted", qp.sq.load_producer()});
  out->push_back({"sq_consumed", qp.sq_cons});
  out->push_back({"rq_posted", qp.rq.load_producer()});
  out->push_back({"rq_consumed", qp.rq_cons});
  auto cq = cqs_.find(qp.send_cqn);
  if (cq != cqs_.end()) {
    out->push_back({"send_cq_produced", cq->second.producer});
    out->push_back({"send_cq_consumed", cq->second.ring.load_consumer()});
  }
}

// ---------------- data path ----------------

int QueuePump::poll_rings() {
  int work = 0;
  for (auto& [qpn, qp] : qps_) {
    work += drain_rq(qpn, qp);
    work += drain_sq(qpn, qp);
  }
  return work + poll_srqs();
}

// A producer index more than a ring ahead of our consumer is garbage: the
// QP is fatal (as a NIC does on a corrupted queue), its rings are no longer
// read, and the loop can sleep again (a scribbled index must not keep the
// NIC spinning).
bool QueuePump::ring_index_ok(uint32_t qpn, QpState& qp, uint32_t cons, uint32_t prod,
                           uint32_t entries) {
  if (prod - cons <= entries) return true;
  counters_.ring_bad_producer++;
  qp.ring_broken = true;
  fw::QpAttr err_state;
  err_state.qp_state = fw::QpState::kErr;
  backend_->modify_qp(qp.owner, qpn, err_state, fw::kAttrState);
  async_event(fw::EventType::kQpFatal, qpn);
  return false;
}

// Converts a WQE already copied out of the ring (uapi::to_fw); 0, or EINVAL
// with *defect the counter of its reason (the caller counts it once the WQE
// is consumed).
int QueuePump::to_send_wr(const mroce_send_wqe& w, fw::SendWr* wr, uint64_t** defect) {
  switch (uapi::to_fw(w, wr)) {
    case uapi::WqeDefect::kNone: return 0;
    case uapi::WqeDefect::kBadInlineLen: *defect = &counters_.wqe_bad_inline_len; break;
    case uapi::WqeDefect::kBadSgeCount: *defect = &counters_.wqe_bad_sge_count; break;
  }
  return EINVAL;
}

// A WQE the converter or the engine refused. The engine queues it so it
// completes in posting order, after the work before it, and moves the QP to
// ERR. ENOMEM: the engine's SQ is full; it stays in the ring for a retry.
int QueuePump::reject_send(uint32_t qpn, QpState& qp, uint64_t wr_id) {
  int err = backend_->post_send_error(qp.owner, qpn, wr_id, fw::WcStatus::kLocQpOpErr);
  if (err == ENOMEM) return err;
  counters_.wqe_rejected++;
  if (err) {  // SQ not open (RESET/INIT/RTR/SQE): no earlier work to wait for
    fw::Completion wc;
    wc.wr_id = wr_id;
    wc.status = fw::WcStatus::kLocQpOpErr;
    wc.qp_num = qpn;
    complete(qp.send_cqn, wc);
  }
  return 0;
}

int QueuePump::drain_sq(uint32_t qpn, QpState& qp) {
  if (qp.ring_broken) return 0;
  uint32_t cons = qp.sq_cons;
  uint32_t prod = qp.sq.load_producer();  // read once: the client may change it meanwhile
  if (cons == prod) return 0;
  if (!ring_index_ok(qpn, qp, cons, prod, qp.sq.entries())) return 0;
  int n = 0;
  fw::SendWr wr;
  for (; cons != prod; cons++, n++) {
    mroce_send_wqe w;
    std::memcpy(&w, qp.sq.slot(cons), sizeof(w));  // the client may scribble: copy first
    uint64_t* defect = nullptr;
    int err = to_send_wr(w, &wr, &defect);
    if (!err) err = backend_->post_send(qp.owner, qpn, wr);
    if (err == ENOMEM && over_bound(qpn, qp, &counters_.wqe_send_over_bound)) continue;
    if (err == ENOMEM) break;  // engine queue full: leave it in the ring, retry later
    if (err && reject_send(qpn, qp, w.wr_id) == ENOMEM) break;
    if (defect) (*defect)++;  // counted once, when it left the ring
  }
  qp.sq_cons = cons;
  store_qp_consumers(qpn, qp);
  return n;
}

// The backend's queue is full. If it reports its depths, the application's
// ring was full too (the consumer it saw never runs ahead of the backend):
// this entry is beyond max_send_wr / max_recv_wr, written by a client that
// ignored the bound. It is consumed without a CQE, counted. A backend
// without depths keeps it in the ring for a retry.
bool QueuePump::over_bound(uint32_t qpn, const QpState& qp, uint64_t* counter) {
  uint32_t sq = 0, rq = 0;
  if (backend_->queue_depths(qp.owner, qpn, &sq, &rq) != 0) return false;
  counters_.wqe_rejected++;
  (*counter)++;
  return true;
}

// Publishes each ring's consumer index: entries read minus those the
// backend still holds. A backend without depths frees an entry when it
// takes it (the bound is then max_*_wr in the backend plus the ring).
void QueuePump::store_qp_consumers(uint32_t qpn, QpState& qp) {
  uint32_t sq = 0, rq = 0;
  if (backend_->queue_depths(qp.owner, qpn, &sq, &rq) != 0) sq = rq = 0;
  if (qp.sq_cons - sq != qp.sq_freed) qp.sq.store_consumer(qp.sq_freed = qp.sq_cons - sq);
  if (qp.rq_cons - rq != qp.rq_freed) qp.rq.store_consumer(qp.rq_freed = qp.rq_cons - rq);
}

int QueuePump::drain_rq(uint32_t qpn, QpState& qp) {
  if (qp.ring_broken) return 0;
  uint32_t cons = qp.rq_cons;
  uint32_t prod = qp.rq.load_producer();
  if (cons == prod) return 0;
  if (!ring_index_ok(qpn, qp, cons, prod, qp.rq.entries())) return 0;
  int n = 0;
  fw::RecvWr wr;
  for (; cons != prod; cons++, n++) {
    mroce_recv_wqe w;
    std::memcpy(&w, qp.rq.slot(cons), sizeof(w));
    int err = uapi::to_fw(w, &wr) == uapi::WqeDefect::kNone
                  ? backend_->post_recv(qp.owner, qpn, wr)
                  : EINVAL;  // counted by count_recv_refusal
    if (err == ENOMEM && over_bound(qpn, qp, &counters_.wqe_recv_over_bound)) continue;
    if (err == ENOMEM) break;
    if (err) count_recv_refusal(qpn, qp, w.num_sge);
  }
  qp.rq_cons = cons;
  store_qp_consumers(qpn, qp);
  return n;
}

// A receive ring entry refused. No CQE can carry it (it never entered the
// RQ), so it is counted by reason: too many SGEs (above MROCE_MAX_SGE or the
// QP's max_recv_sge), a QP in RESET, or anything else the engine refused.
void QueuePump::count_recv_refusal(uint32_t qpn, const QpState& qp, uint32_t num_sge) {
  counters_.wqe_rejected++;
  fw::QpAttr attr;
  fw::QpInitAttr init;
  int err = num_sge > MROCE_MAX_SGE ? EINVAL : backend_->query_qp(qp.owner, qpn, &attr, &init);
  if (num_sge > MROCE_MAX_SGE || (!err && num_sge > init.cap.max_recv_sge)) {
    counters_.wqe_bad_sge_count++;
  } else if (!err && attr.qp_state == fw::QpState::kReset) {
    counters_.wqe_recv_in_reset++;
  } else {
    counters_.wqe_recv_refused_other++;
  }
}

bool QueuePump::qp_has_work(const QpState& qp) const {
  return !qp.ring_broken &&
         (qp.sq.load_producer() != qp.sq_cons || qp.rq.load_producer() != qp.rq_cons);
}

bool QueuePump::prepare_sleep() {
  for (auto& [qpn, qp] : qps_) {
    qp.sq.announce_sleep();
    qp.rq.announce_sleep();
  }
  for (auto& [srqn, s] : srqs_) s.ring.announce_sleep();
  for (auto& [qpn, qp] : qps_) {
    if (qp_has_work(qp)) {
      end_sleep();
      return false;
    }
  }
  for (auto& [srqn, s] : srqs_) {
    if (srq_has_work(s)) {
      end_sleep();
      return false;
    }
  }
  return true;
}

void QueuePump::end_sleep() {
  for (auto& [qpn, qp] : qps_) {
    qp.sq.end_sleep();
    qp.rq.end_sleep();
  }
  for (auto& [srqn, s] : srqs_) s.ring.end_sleep();
}

bool QueuePump::complete(uint32_t cqn, const fw::Completion& wc) {
  auto it = cqs_.find(cqn);
  if (it == cqs_.end()) return true;  // owner gone: nothing to deliver to
  CqState& cq = it->second;
  uint32_t cons = cq.ring.load_consumer();
  if (cq.producer - cons >= cq.ring.entries()) {
    cq.ring.set_overflow();
    return false;
  }
  mroce_cqe e = uapi::to_abi(wc);
  std::memcpy(cq.ring.slot(cq.producer), &e, sizeof(e));
  cq.producer++;
  if (!cq.dirty) {
    cq.dirty = true;
    dirty_cqs_.push_back(cqn);
  }
  auto qp = qps_.find(wc.qp_num);
  if (qp != qps_.end() && !qp->second.dirty) {
    qp->second.dirty = true;
    dirty_qps_.push_back(wc.qp_num);
  }
  return true;
}

// ---------------- EventSink ----------------

// Called by the backend once the data of these completions has landed.
void QueuePump::publish() {
  if (!dirty_cqs_.empty()) store_srq_consumers();
  // Before the CQEs are visible: a completion polled means its slot is
  // free (an application that reposts on each completion finds room).
  for (uint32_t qpn : dirty_qps_) {
    auto it = qps_.find(qpn);
    if (it == qps_.end()) continue;
    it->second.dirty = false;
    store_qp_consumers(qpn, it->second);
  }
  dirty_qps_.clear();
  for (uint32_t cqn : dirty_cqs_) {
    auto it = cqs_.find(cqn);
    if (it == cqs_.end()) continue;
    CqState& cq = it->second;
    cq.dirty = false;
    cq.ring.store_producer(cq.producer);
    if (cq.channel_fd >= 0 && cq.ring.take_arm()) {
      uint64_t handle = cq.user_handle;
      if (send_record(cq.channel_fd, &handle, sizeof(handle))) {
        counters_.cq_events++;
      } else {
        counters_.cq_event_write_failed++;
      }
    }
  }
  dirty_cqs_.clear();
}

void QueuePump::send_async(int async_fd, uint64_t element, fw::EventType type) {
  if (async_fd < 0) return;
  mroce_async_event ev{element, static_cast<uint32_t>(type), 0};
  if (send_record(async_fd, &ev, sizeof(ev))) {
    counters_.async_events++;
  } else {
    counters_.async_event_write_failed++;
  }
}

void QueuePump::async_event(fw::EventType type, uint32_t element) {
  // A port event's element is the port number, not a QP: the control plane
  // sends port events to every client (ControlPlane::port_event, on
  // netlink's word); a backend's copy (the engine's on set_port, a
  // device's EQE) must not reach the owner of QP 1.
  if (type == fw::EventType::kPortActive || type == fw::EventType::kPortErr) return;
  if (type == fw::EventType::kCqErr) {
    auto it = cqs_.find(element);
    if (it != cqs_.end()) send_async(async_fd_of_(it->second.owner), it->second.user_handle, type);
    return;
  }
  if (type == fw::EventType::kSrqLimitReached || type == fw::EventType::kSrqErr)
    return srq_async_event(type, element);
  auto it = qps_.find(element);
  if (it != qps_.end()) send_async(async_fd_of_(it->second.owner), it->second.user_handle, type);
}

bool send_record(int fd, const void* rec, size_t len) {
  return ::send(fd, rec, len, MSG_DONTWAIT | MSG_NOSIGNAL) == static_cast<ssize_t>(len);
}

}  // namespace metaroce::daemon
