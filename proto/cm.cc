#include "proto/cm.h"

namespace metaroce::proto {
namespace {

bool known_space(uint16_t ps) {
  switch (static_cast<PortSpace>(ps)) {
    case PortSpace::kIpoib:
    case PortSpace::kTcp:
    case PortSpace::kUdp:
    case PortSpace::kIb: return true;
  }
  return false;
}

// TCP carries RC, UDP and IPoIB carry UD, IB either (rdma_cm's rule).
bool space_allows(uint16_t ps, uint8_t qp_type) {
  switch (static_cast<PortSpace>(ps)) {
    case PortSpace::kTcp: return qp_type == kCmQpRc;
    case PortSpace::kUdp:
    case PortSpace::kIpoib: return qp_type == kCmQpUd;
    case PortSpace::kIb: return true;
  }
  return false;
}

// The fields REQ and REP share: a QP to connect to, on a transport.
CmCheck check_qp(const Cmh& c) {
  if (c.qp_type != kCmQpRc && c.qp_type != kCmQpUd) return CmCheck::kQpType;
  if (c.qpn == 0) return CmCheck::kQpn;
  if (c.qp_type == kCmQpRc && (c.path_mtu < 1 || c.path_mtu > 5)) return CmCheck::kPathMtu;
  return CmCheck::kOk;
}

CmCheck check_req(const Cmh& c) {
  if (c.remote_comm_id != 0) return CmCheck::kReqRemoteCommId;
  if (c.service_id >> 32 || !known_space(service_space(c.service_id))) return CmCheck::kServiceId;
  if (CmCheck q = check_qp(c); q != CmCheck::kOk) return q;
  if (!space_allows(service_space(c.service_id), c.qp_type)) return CmCheck::kTransport;
  return CmCheck::kOk;
}

}  // namespace

bool is_cm(Opcode op) { return op >= Opcode::kCmReq && op <= Opcode::kCmDrep; }

CmCheck check_cm(const Packet& p) {
  const Cmh& c = p.cm;
  const Opcode op = p.mbth.opcode;
  if (c.local_comm_id == 0 && op != Opcode::kCmRej) return CmCheck::kZeroLocalCommId;
  if (op == Opcode::kCmReq) return check_req(c);
  // A REJ may name only one side: the peer's id when it made no connection
  // (local 0), or only its own when it never learnt ours (remote 0).
  if (c.remote_comm_id == 0 && (op != Opcode::kCmRej || c.local_comm_id == 0))
    return CmCheck::kZeroRemoteCommId;
  switch (op) {
    case Opcode::kCmRep: return check_qp(c);
    case Opcode::kCmRej:
      if (c.reason == 0) return CmCheck::kRejReason;
      return c.message <= kCmMsgOther ? CmCheck::kOk : CmCheck::kMessage;
    case Opcode::kCmMra: return c.message <= kCmMsgRep ? CmCheck::kOk : CmCheck::kMessage;
    default: return CmCheck::kOk;  // RTU, DREQ, DREP: the two comm IDs only
  }
}

const char* to_string(CmCheck c) {
  switch (c) {
#define MROCE_CM_CHECK_NAME(e, name) \
  case CmCheck::e: return name;
    MROCE_CM_CHECKS(MROCE_CM_CHECK_NAME)
#undef MROCE_CM_CHECK_NAME
  }
  return "unknown";
}

const char* to_string(RejReason r) {
  switch (r) {
    case RejReason::kNoQp: return "NO_QP";
    case RejReason::kNoResources: return "NO_RESOURCES";
    case RejReason::kTimeout: return "TIMEOUT";
    case RejReason::kInvalidCommId: return "INVALID_COMM_ID";
    case RejReason::kInvalidServiceId: return "INVALID_SERVICE_ID";
    case RejReason::kInvalidTransportType: return "INVALID_TRANSPORT_TYPE";
    case RejReason::kStaleConn: return "STALE_CONN";
    case RejReason::kInvalidMtu: return "INVALID_MTU";
    case RejReason::kConsumerDefined: return "CONSUMER_DEFINED";
  }
  return "UNKNOWN";
}

}  // namespace metaroce::proto
