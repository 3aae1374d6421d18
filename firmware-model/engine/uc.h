// The unreliable connected service (docs/protocol.md §14, docs/engine.md
// §Unreliable connected): SEND, SEND_IMM, RDMA_WRITE and RDMA_WRITE_IMM
// between two connected QPs, never acknowledged, never retransmitted.
// Internal to the engine.
//
// Sender (uc::run): a WR's packets leave in PSN order on one path (a second
// path could reorder them, which a UC receiver must treat as loss); the WR
// completes when its last packet is out. There is no window: UC has no
// feedback to drive one, as on IB.
//
// Receiver (uc::on_request): packets must arrive in PSN order. A PSN gap
// ends the message in progress (its receive is kept for the next message),
// and packets are dropped until one starts a message (offset 0). No ACK, no
// NACK, no RNR: a message without a receive, with a bad rkey, or longer
// than its receive (which then completes kLocLenErr) is dropped. Each drop
// is counted by reason.
#pragma once

#include <cstdint>

#include "proto/packet.h"

namespace metaroce::fw {

struct UcReceive {
  uint32_t send_psn = 0;     // sender: PSN of the next packet (RTS: sq_psn)
  uint32_t next_psn = 0;     // receiver: the PSN expected next (RTR: rq_psn)
  bool in_message = false;   // a message is being received, in order so far
  proto::Opcode opcode = proto::Opcode::kUcSend;  // of the message in progress
  uint32_t length = 0;       // its total length (SETH / RETH)
  uint32_t next_offset = 0;  // the offset its next packet must carry
  bool has_recv = false;     // it consumes the receive at rq_head
};

inline bool is_uc(proto::Opcode op) {
  return op == proto::Opcode::kUcSend || op == proto::Opcode::kUcSendImm ||
         op == proto::Opcode::kUcWrite || op == proto::Opcode::kUcWriteImm;
}

}  // namespace metaroce::fw
