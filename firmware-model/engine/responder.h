// Responder role: serves inbound requests of one QP: PSN window, checks,
// direct placement, receive completions, ACK/NACK, READ responses and
// exactly-once atomics (docs/engine.md §Responder). Functions are declared
// in qp.h (namespace responder); this header names the step states, after
// rxe_resp.c.
#pragma once

#include <cstdint>

namespace metaroce::fw::responder {

enum class State : uint8_t {
  kCheckState,   // QP accepts requests (RTR, RTS, SQD, SQE)?
  kCheckPsn,     // new, duplicate or beyond the 4096-PSN window
  kCheckOp,      // lengths, offsets, alignment
  kCheckResources,  // READ / atomics: read MSN, max_dest_rd_atomic, READ queue room
  kCheckRecv,    // SEND / WRITE_IMM: the receive WQE bound to the MSN
  kCheckRkey,    // WRITE / READ / atomics: rkey, bounds, PD, access
  kExecute,      // place, queue the READ response, or run the atomic
  kAcknowledge,  // record the PSN and ACK now or later
  kDuplicate,    // re-ACK, replay an atomic result; never re-place
  kNakRnr,
  kNakAccess,
  kNakInvalid,
  kNakRemoteOp,
  kNakPlacement,  // a host write or its commit failed: REMOTE_ACCESS_ERROR
  kDone,
};
const char* to_string(State s);

}  // namespace metaroce::fw::responder
