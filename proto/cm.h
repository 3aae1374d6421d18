// MetaRoCE connection management messages (docs/protocol.md §12): the
// constants that go with the CMH (proto/packet.h) and check_cm(), which
// bounds every CMH field of a message the codec has parsed.
//
// The codec (proto/packet.cc) only knows the layout: it reads any value of a
// field. Which values a message may carry is decided here, once, so the CM
// state machine (firmware-model/cm/) counts and drops a message that breaks a
// rule before it looks at any connection.
#pragma once

#include <cstddef>
#include <cstdint>

#include "proto/packet.h"

namespace metaroce::proto {

// The seven CM opcodes (§12.1), in opcode order.
bool is_cm(Opcode op);

// Port spaces (rdma_cm, IBA Annex A11 service ID bytes 4-5).
enum class PortSpace : uint16_t {
  kIpoib = 0x0002,
  kTcp = 0x0106,  // RC
  kUdp = 0x0111,  // UD
  kIb = 0x013F,   // RC or UD
};

// Service ID = port space << 16 | port, as IB CM over RoCE derives it from a
// sockaddr (§12.2). The upper 32 bits are 0.
inline constexpr uint64_t service_id(PortSpace ps, uint16_t port) {
  return uint64_t{static_cast<uint16_t>(ps)} << 16 | port;
}
inline constexpr uint16_t service_port(uint64_t sid) { return static_cast<uint16_t>(sid); }
inline constexpr uint16_t service_space(uint64_t sid) { return static_cast<uint16_t>(sid >> 16); }

// CMH qp_type values: the verbs enum ibv_qp_type numbers.
inline constexpr uint8_t kCmQpRc = 2;
inline constexpr uint8_t kCmQpUd = 4;

// CMH message field (REJ: the message rejected; MRA: the message delayed).
inline constexpr uint8_t kCmMsgReq = 0;
inline constexpr uint8_t kCmMsgRep = 1;
inline constexpr uint8_t kCmMsgOther = 2;

// Reject reasons: IB CM's values (IBA 12.6.7.2, Linux enum ib_cm_rej_reason),
// so librdmacm's REJECTED event carries the status programs already test for.
enum class RejReason : uint16_t {
  kNoQp = 1,
  kNoResources = 3,        // listener backlog or connection table full
  kTimeout = 4,            // the sender gave up waiting for the peer
  kInvalidCommId = 6,
  kInvalidServiceId = 8,   // nobody listens on that port
  kInvalidTransportType = 9,
  kStaleConn = 10,
  kInvalidMtu = 26,
  kConsumerDefined = 28,   // the application rejected (rdma_reject)
};
const char* to_string(RejReason r);  // "INVALID_SERVICE_ID"; "UNKNOWN" otherwise

// CM timeouts use IB's encoding: 4.096 us * 2^x, x = 0..31, in nanoseconds.
inline constexpr uint64_t cm_timeout_ns(uint8_t x) { return uint64_t{4096} << (x & 0x1F); }

// Why check_cm refused a message. One row per rule of §12.3; the CM counts
// each under the name in the second column (rx_invalid_<name>).
#define MROCE_CM_CHECKS(X)                                                  \
  X(kOk, "ok")                                                              \
  X(kZeroLocalCommId, "zero_local_comm_id")     /* every message but REJ */ \
  X(kZeroRemoteCommId, "zero_remote_comm_id")   /* but REQ; REJ: one of two */ \
  X(kReqRemoteCommId, "req_remote_comm_id")     /* REQ names no peer id */  \
  X(kServiceId, "service_id")                   /* REQ: unknown port space */ \
  X(kQpType, "qp_type")                         /* REQ/REP: not RC or UD */  \
  X(kTransport, "transport")                    /* port space vs qp_type */  \
  X(kQpn, "qpn")                                /* REQ/REP: QPN 0 */         \
  X(kPathMtu, "path_mtu")                       /* RC REQ/REP: not 1..5 */   \
  X(kRejReason, "rej_reason")                   /* REJ: reason 0 */          \
  X(kMessage, "message")                        /* REJ/MRA: unknown message */

enum class CmCheck : uint8_t {
#define MROCE_CM_CHECK_ENUM(e, name) e,
  MROCE_CM_CHECKS(MROCE_CM_CHECK_ENUM)
#undef MROCE_CM_CHECK_ENUM
};
inline constexpr size_t kCmCheckCount = 0
#define MROCE_CM_CHECK_COUNT(e, name) +1
    MROCE_CM_CHECKS(MROCE_CM_CHECK_COUNT)
#undef MROCE_CM_CHECK_COUNT
    ;
const char* to_string(CmCheck c);  // the counter name: "zero_local_comm_id"

// The rules of §12.3 for a parsed CM packet (is_cm(p.mbth.opcode)); kOk if
// every field is in range for its opcode. Private data length was already
// bounded by the parser (kBadLength).
CmCheck check_cm(const Packet& p);

}  // namespace metaroce::proto
