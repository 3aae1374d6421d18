// The verbs QP state machine for RC (IB spec 1.4 §10.3.1, rdma-core /
// kernel ib_modify_qp_is_ok): which transitions exist and which attributes
// each one requires or allows. Pure table logic; the engine applies the
// attributes (docs/engine.md §QP state machine).
#pragma once

#include <cstdint>

#include "firmware-model/engine/types.h"

namespace metaroce::fw {

const char* to_string(QpState s);

struct Transition {
  bool valid = false;
  uint32_t required = 0;  // QpAttrMask bits that must be present
  uint32_t optional = 0;  // QpAttrMask bits that may be present
};

// The RC transition table entry cur -> next.
Transition rc_transition(QpState cur, QpState next);
// The UD one (IB spec 1.4 Table 91 for UD; no AV, MTU, PSN on the receive
// side or retry attributes: a UD QP has no peer).
Transition ud_transition(QpState cur, QpState next);

// Decides the next state of a modify_qp call and checks the mask against the
// table and the attribute values against their ranges. Returns 0 or EINVAL.
// `why` (may be null) receives a static explanation for the daemon's log.
// A UC QP (type kUc) has the same table without the attributes of
// reliability and responder resources (timeout, retry_cnt, rnr_retry,
// min_rnr_timer, max_rd_atomic, max_dest_rd_atomic), as ib_modify_qp_is_ok.
int check_modify(QpState cur, const QpAttr& attr, uint32_t mask, const DeviceCaps& caps,
                 uint32_t num_gids, QpState* next, const char** why);
// The same for a QP of `type`: RC, UD, or UC (RC's table without the
// attributes of reliability and responder resources, as ib_modify_qp_is_ok).
int check_modify(QpType type, QpState cur, const QpAttr& attr, uint32_t mask,
                 const DeviceCaps& caps, uint32_t num_gids, QpState* next, const char** why);

// Payload bytes per packet for a path MTU over a link with IP MTU link_mtu:
// the largest IB MTU (256..4096) <= path_mtu that fits the link after
// IPv6+UDP+MetaRoCE headers. Never below 256.
uint32_t effective_mtu(uint32_t path_mtu, uint32_t link_mtu);

}  // namespace metaroce::fw
