// The queue pump's shared receive queues: each SRQ's ring drained into the
// backend like an RQ (one ring implementation, one WQE conversion), with
// the NIC's consumer index = WQEs taken by messages (metaroce_abi.h,
// docs/device-abi.md §2.7), so the application's full check is max_wr.
#include <cerrno>
#include <cstring>

#include <unistd.h>

#include "firmware-model/daemon/queue_pump.h"
#include "firmware-model/uapi/convert.h"

namespace metaroce::daemon {

int QueuePump::add_srq(uint32_t srqn, fw::OwnerId owner, uint64_t user_handle, uint32_t entries,
                       size_t bytes, int* client_fd, size_t* size) {
  SrqState s;
  s.owner = owner;
  s.user_handle = user_handle;
  if (int err = s.shm.create("metaroce-srq", bytes)) return err;
  s.ring = RingView(s.shm.base(), entries, sizeof(mroce_recv_wqe));
  *client_fd = dup(s.shm.fd());
  *size = s.shm.size();
  srqs_.emplace(srqn, std::move(s));
  return 0;
}

size_t QueuePump::remove_srq(uint32_t srqn) {
  auto it = srqs_.find(srqn);
  if (it == srqs_.end()) return 0;
  size_t bytes = it->second.shm.size();
  srqs_.erase(it);
  return bytes;
}

void QueuePump::drain_srq(uint32_t srqn) {
  auto it = srqs_.find(srqn);
  if (it != srqs_.end()) drain_srq(srqn, it->second);
}

int QueuePump::poll_srqs() {
  int work = 0;
  for (auto& [srqn, s] : srqs_) work += drain_srq(srqn, s);
  return work;
}

// Copies what the application posted since into the backend, then
// publishes how many WQEs messages took (plus those refused) as the ring's
// consumer index. A producer more than a ring ahead of that, or behind what
// was read, is garbage: the SRQ is in error (IBV_EVENT_SRQ_ERR) and its
// ring no longer read.
int QueuePump::drain_srq(uint32_t srqn, SrqState& s) {
  if (s.broken) return 0;
  int n = read_srq(srqn, s);
  store_srq_consumer(srqn, s);
  return n;
}

void QueuePump::store_srq_consumer(uint32_t srqn, SrqState& s) {
  uint32_t taken = 0;
  if (!s.broken && backend_->query_srq(s.owner, srqn, nullptr, &taken) == 0 &&
      taken + s.refused != s.freed) {
    s.freed = taken + s.refused;
    s.ring.store_consumer(s.freed);
  }
}

// Before completions become visible: a receive's CQE means its slot is free
// (as on a NIC, the WQE is consumed before it completes). An application
// that reposts on each completion (UCX) otherwise finds the ring full.
void QueuePump::store_srq_consumers() {
  for (auto& [srqn, s] : srqs_) store_srq_consumer(srqn, s);
}

int QueuePump::read_srq(uint32_t srqn, SrqState& s) {
  uint32_t prod = s.ring.load_producer();
  if (prod == s.read) return 0;
  if (prod - s.freed > s.ring.entries() || s.read - s.freed > prod - s.freed) {
    counters_.ring_bad_producer++;
    s.broken = true;
    send_async(async_fd_of_(s.owner), s.user_handle, fw::EventType::kSrqErr);
    return 0;
  }
  int n = 0;
  fw::RecvWr wr;
  for (; s.read != prod; s.read++, n++) {
    mroce_recv_wqe w;
    std::memcpy(&w, s.ring.slot(s.read), sizeof(w));  // the client may scribble: copy first
    bool shape_ok = uapi::to_fw(w, &wr) == uapi::WqeDefect::kNone;
    int err = shape_ok ? backend_->post_srq_recv(s.owner, srqn, wr) : EINVAL;
    if (err == ENOMEM) break;  // cannot happen within the bound above; retried
    if (err) {  // never entered the SRQ: no CQE can carry it, so counted
      counters_.wqe_rejected++;
      counters_.wqe_srq_refused++;
      s.refused++;
    }
  }
  return n;
}

bool QueuePump::srq_has_work(const SrqState& s) const {
  return !s.broken && s.ring.load_producer() != s.read;
}

void QueuePump::srq_async_event(fw::EventType type, uint32_t srqn) {
  auto it = srqs_.find(srqn);
  if (it != srqs_.end()) send_async(async_fd_of_(it->second.owner), it->second.user_handle, type);
}

}  // namespace metaroce::daemon
