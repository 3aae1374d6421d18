// Shared receive queues (docs/engine.md §Shared receive queues): one pool
// of receive WQEs that the QPs attached to it draw from. Internal to the
// engine; the public surface is engine.h.
//
// A QP attached to an SRQ keeps its own receive ring (`Qp::rq`) as a
// window of receives bound to its messages by MSN, exactly as a QP with
// its own RQ does: the responder's binding, completion order, flushes and
// placement-failure handling stay one mechanism. The SRQ only fills that
// window: when a message with MSN m arrives and the window holds no receive
// for m, receives for the MSNs up to m are taken from the SRQ, oldest
// first (srq::refill). The window is bounded (a peer cannot drain the SRQ
// for MSNs far ahead of what it has sent); beyond it, or with the SRQ
// empty, the message is answered RNR, as with an empty RQ. A UD QP takes
// one receive per datagram the same way (MSN = its rq_head); with the SRQ
// empty the datagram is dropped and counted, as UD has no RNR.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "firmware-model/engine/types.h"

namespace metaroce::fw {

class Core;
struct Qp;
struct RecvWqe;

struct Srq {
  uint32_t srqn = 0;
  OwnerId owner = 0;
  uint32_t pdn = 0;
  SrqAttr attr;  // max_wr is the ring's size (a power of two)
  std::vector<RecvWr> ring;
  // Free-running: head = WQEs taken by messages, tail = WQEs posted.
  uint32_t head = 0, tail = 0;
  uint32_t qps = 0;  // attached QPs: destroy_srq is EBUSY while > 0
  uint32_t count() const { return tail - head; }
};

// SRQs by handle (1..max); slot 0 unused, freed slots reused lowest-first.
// Pointers stay valid until remove(): attached QPs hold one.
class SrqTable {
 public:
  explicit SrqTable(uint32_t max) : max_(max) {}
  Srq* add();  // nullptr when the table is full
  Srq* get(uint32_t h) const { return h < slots_.size() ? slots_[h].get() : nullptr; }
  void remove(uint32_t h);
  uint32_t end() const { return static_cast<uint32_t>(slots_.size()); }

 private:
  uint32_t max_;
  uint32_t count_ = 0;
  std::vector<std::unique_ptr<Srq>> slots_;
};

namespace srq {
// The attributes a new SRQ gets for `want`, or EINVAL (*why says which
// bound was broken): max_wr 1..max_qp_wr (rounded up to a power of two),
// max_sge <= max_sge. srq_limit is not armed at creation (IB: only
// modify_srq arms it).
int check_create(const DeviceCaps& caps, const SrqAttr& want, SrqAttr* actual, const char** why);
// modify_srq: only kSrqLimit (resizing is not supported: EINVAL), a limit
// above max_wr is EINVAL.
int modify(Srq& s, const SrqAttr& attr, uint32_t mask, const char** why);
// 0, EINVAL (too many SGEs), ENOMEM (max_wr WQEs are posted and not yet
// taken).
int post(Srq& s, const RecvWr& wr);
// Receives for qp's messages up to `msn` from its SRQ, into its window;
// raises kSrqLimitReached once when the SRQ falls below an armed limit.
void refill(Core& c, Qp& qp, uint32_t msn);
// The receives qp took from its SRQ and has not completed, completed
// kWrFlushErr (the QP is reset or destroyed: they are the application's
// buffers and must come back to it).
void release_window(Core& c, Qp& qp);
}  // namespace srq

}  // namespace metaroce::fw
