#include "firmware-model/engine/qp_state.h"

#include <cerrno>

namespace metaroce::fw {

const char* to_string(QpState s) {
  static constexpr const char* kNames[] = {"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"};
  auto i = static_cast<unsigned>(s);
  return i < 7 ? kNames[i] : "?";
}

namespace {

constexpr uint32_t kAnyRts = kAttrCurState | kAttrAccessFlags | kAttrMinRnrTimer;

Transition table_entry(QpState cur, QpState next) {
  using S = QpState;
  if (next == S::kReset || next == S::kErr) return {true, 0, 0};
  switch (cur) {
    case S::kReset:
      if (next == S::kInit) return {true, kAttrPkeyIndex | kAttrPort | kAttrAccessFlags, 0};
      break;
    case S::kInit:
      if (next == S::kInit) return {true, 0, kAttrPkeyIndex | kAttrPort | kAttrAccessFlags};
      if (next == S::kRtr)
        return {true,
                kAttrAv | kAttrPathMtu | kAttrDestQpn | kAttrRqPsn | kAttrMaxDestRdAtomic |
                    kAttrMinRnrTimer,
                kAttrAccessFlags | kAttrPkeyIndex};
      break;
    case S::kRtr:
      if (next == S::kRts)
        return {true, kAttrTimeout | kAttrRetryCnt | kAttrRnrRetry | kAttrSqPsn | kAttrMaxQpRdAtomic,
                kAnyRts};
      break;
    case S::kRts:
      if (next == S::kRts) return {true, 0, kAnyRts};
      if (next == S::kSqd) return {true, 0, 0};
      break;
    case S::kSqd:
      if (next == S::kRts) return {true, 0, kAnyRts};
      if (next == S::kSqd)
        return {true, 0,
                kAnyRts | kAttrAv | kAttrPkeyIndex | kAttrPort | kAttrMaxQpRdAtomic |
                    kAttrMaxDestRdAtomic | kAttrTimeout | kAttrRetryCnt | kAttrRnrRetry};
      break;
    case S::kSqe:
      if (next == S::kRts) return {true, 0, kAttrCurState | kAttrAccessFlags};
      break;
    case S::kErr:
      break;
  }
  return {};
}

// UD: Q_Key where RC has access flags; no AV, path MTU, PSN on receive,
// timers or RDMA resources.
Transition ud_entry(QpState cur, QpState next) {
  using S = QpState;
  constexpr uint32_t kAnyUd = kAttrCurState | kAttrQkey;
  if (next == S::kReset || next == S::kErr) return {true, 0, 0};
  switch (cur) {
    case S::kReset:
      if (next == S::kInit) return {true, kAttrPkeyIndex | kAttrPort | kAttrQkey, 0};
      break;
    case S::kInit:
      if (next == S::kInit) return {true, 0, kAttrPkeyIndex | kAttrPort | kAttrQkey};
      if (next == S::kRtr) return {true, 0, kAttrPkeyIndex | kAttrQkey};
      break;
    case S::kRtr:
      if (next == S::kRts) return {true, kAttrSqPsn, kAnyUd};
      break;
    case S::kRts:
      if (next == S::kRts) return {true, 0, kAnyUd};
      if (next == S::kSqd) return {true, 0, 0};
      break;
    case S::kSqd:
      if (next == S::kRts) return {true, 0, kAnyUd};
      if (next == S::kSqd) return {true, 0, kAnyUd | kAttrPkeyIndex};
      break;
    case S::kSqe:
      if (next == S::kRts) return {true, 0, kAnyUd};
      break;
    case S::kErr:
      break;
  }
  return {};
}

bool valid_mtu(uint32_t m) { return m == 256 || m == 512 || m == 1024 || m == 2048 || m == 4096; }

// Range checks of the attributes present in mask. Returns a reason or null.
const char* check_values(const QpAttr& a, uint32_t mask, const DeviceCaps& caps,
                         uint32_t num_gids) {
  constexpr uint32_t kAllAccess =
      kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead | kAccessRemoteAtomic;
  if ((mask & kAttrAccessFlags) && (a.qp_access_flags & ~kAllAccess)) return "unknown access flag";
  if ((mask & kAttrPort) && a.port_num != 1) return "port_num must be 1";
  if ((mask & kAttrPkeyIndex) && a.pkey_index != 0) return "pkey_index must be 0";
  if ((mask & kAttrPathMtu) && !valid_mtu(a.path_mtu)) return "path_mtu not 256..4096";
  if ((mask & kAttrAv) && a.av.sgid_index >= num_gids) return "sgid_index beyond the GID table";
  if ((mask & kAttrDestQpn) && a.dest_qp_num > 0xFFFFFF) return "dest_qp_num exceeds 24 bits";
  if ((mask & kAttrTimeout) && a.timeout > 31) return "timeout > 31";
  if ((mask & kAttrRetryCnt) && a.retry_cnt > 7) return "retry_cnt > 7";
  if ((mask & kAttrRnrRetry) && a.rnr_retry > 7) return "rnr_retry > 7";
  if ((mask & kAttrMinRnrTimer) && a.min_rnr_timer > 31) return "min_rnr_timer > 31";
  if ((mask & kAttrMaxQpRdAtomic) && a.max_rd_atomic > caps.max_qp_rd_atom)
    return "max_rd_atomic above device max_qp_rd_atom";
  if ((mask & kAttrMaxDestRdAtomic) && a.max_dest_rd_atomic > caps.max_qp_rd_atom)
    return "max_dest_rd_atomic above device max_qp_rd_atom";
  return nullptr;
}

}  // namespace

Transition rc_transition(QpState cur, QpState next) { return table_entry(cur, next); }
Transition ud_transition(QpState cur, QpState next) { return ud_entry(cur, next); }

int check_modify(QpState cur, const QpAttr& attr, uint32_t mask, const DeviceCaps& caps,
                 uint32_t num_gids, QpState* next, const char** why) {
  return check_modify(QpType::kRc, cur, attr, mask, caps, num_gids, next, why);
}

int check_modify(QpType type, QpState cur, const QpAttr& attr, uint32_t mask,
                 const DeviceCaps& caps, uint32_t num_gids, QpState* next, const char** why) {
  const char* reason = nullptr;
  QpState to = (mask & kAttrState) ? attr.qp_state : cur;
  Transition t = static_cast<unsigned>(to) > 6 ? Transition{}
                 : type == QpType::kUd         ? ud_entry(cur, to)
                                               : table_entry(cur, to);
  if (type == QpType::kUc) {  // RC's table without reliability and responder resources
    constexpr uint32_t kRcOnly = kAttrTimeout | kAttrRetryCnt | kAttrRnrRetry | kAttrMinRnrTimer |
                                 kAttrMaxQpRdAtomic | kAttrMaxDestRdAtomic;
    t.required &= ~kRcOnly;
    t.optional &= ~kRcOnly;
  }
  uint32_t extra = mask & ~(kAttrState | kAttrCurState | t.required | t.optional);
  if (static_cast<unsigned>(to) > 6) reason = "unknown qp_state";
  else if ((mask & kAttrCurState) && attr.cur_qp_state != cur) reason = "cur_qp_state mismatch";
  else if (!t.valid) reason = "transition not allowed";
  else if ((mask & t.required) != t.required) reason = "required attribute missing";
  else if (extra) reason = "attribute not allowed in this transition";
  else reason = check_values(attr, mask, caps, num_gids);
  if (why) *why = reason;
  if (reason) return EINVAL;
  *next = to;
  return 0;
}

uint32_t effective_mtu(uint32_t path_mtu, uint32_t link_mtu) {
  // IPv6 40 + UDP 8 + MBTH 24 + RETH 16 + IMM 4 + ICRC 4: the largest header stack.
  constexpr uint32_t kOverhead = 40 + 8 + 24 + 16 + 4 + 4;
  uint32_t room = link_mtu > kOverhead ? link_mtu - kOverhead : 0;
  uint32_t m = 4096;
  while (m > 256 && (m > path_mtu || m > room)) m >>= 1;
  return m;
}

}  // namespace metaroce::fw
