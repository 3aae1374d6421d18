// Requester role: turns send-queue work requests into request packets and
// retransmits lost ones (docs/engine.md §Requester). Declared in qp.h
// (namespace requester); this header names the per-packet step states.
#pragma once

#include <cstdint>

namespace metaroce::fw::requester {

// One step of the requester decides what the next packet is, or why there
// is none. Blocked states end the current run; kSent continues it.
enum class State : uint8_t {
  kRetransmit,     // a lost PSN is queued
  kStartWqe,       // next WQE not started: local checks, MSN, fence, rd limit
  kSegment,        // next segment of the current WQE
  kSent,           // a packet left
  kIdle,           // nothing to send
  kBlockedWindow,  // congestion window, receiver credit or PSN window full
  kBlockedPacing,  // pacing: retry at Qp::pace_deadline
  kBlockedOrder,   // fence, max_rd_atomic, SQD or an earlier failure
  kLocalDone,      // a local WQE (BIND_MW, LOCAL_INV) ran: no packet, continue
};
const char* to_string(State s);

}  // namespace metaroce::fw::requester
