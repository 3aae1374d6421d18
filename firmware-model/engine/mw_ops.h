// Memory-window work on the data path (docs/engine.md §Memory windows): the
// requester runs BIND_MW and LOCAL_INV work requests in send-queue order,
// the responder checks and applies SEND_INV's invalidation. The window
// table itself is mw.h.
#pragma once

#include <cstdint>

#include "firmware-model/engine/mw.h"
#include "firmware-model/engine/requester.h"
#include "firmware-model/engine/types.h"

namespace metaroce::fw {
class Core;
struct Qp;
}  // namespace metaroce::fw

namespace metaroce::fw::mw_ops {

bool is_local(WrOpcode op);  // BIND_MW, LOCAL_INV: run by the NIC, nothing on the wire
// Binds or invalidates as wr says, counted: kSuccess, or kMwBindErr /
// kLocProtErr on refusal (the caller completes the WQE with it).
WcStatus apply_local(Core& c, Qp& qp, const SendWr& wr);
// RC: runs the WQE at qp.sq_next (is_local). It completes in order, once every
// WQE before it has: kMwBindErr / kLocProtErr on refusal, QP to ERR then.
requester::State run_local(Core& c, Qp& qp);
// SEND_INV at the responder: may qp's peer invalidate rkey? Counts a refusal.
bool remote_invalidate_allowed(Core& c, Qp& qp, uint32_t rkey);
// The receive completes: the window stops answering to rkey.
void remote_invalidate(Core& c, Qp& qp, uint32_t rkey);
// A remote access refused by MrTable::check_remote, counted by reason.
void count_rkey_refusal(Core& c, Qp& qp, KeyCheck k);

}  // namespace metaroce::fw::mw_ops
