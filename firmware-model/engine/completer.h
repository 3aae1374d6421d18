// Completer role: acknowledgements, NACKs and READ/atomic responses update
// the scoreboard and turn finished WQEs into completions, strictly in
// posting order (docs/engine.md §Completer). Functions are declared in
// qp.h (namespace completer).
#pragma once

#include <cstdint>

#include "firmware-model/engine/types.h"
#include "proto/packet.h"

namespace metaroce::fw::completer {

// What a NACK reason does to the WQE it names.
enum class NackAction : uint8_t {
  kRnrWait,     // wait the RNR timer, retransmit, count against rnr_retry
  kRetransmit,  // payload trimmed: retransmit that PSN now
  kFail,        // complete the WQE with an error, QP to ERR
  kIgnore,      // sequence error: the timers recover
};
NackAction action_for(proto::NackReason r, WcStatus* status);

}  // namespace metaroce::fw::completer
