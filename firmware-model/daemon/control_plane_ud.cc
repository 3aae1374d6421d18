// The control plane's datagram operations (docs/device-abi.md §2.4):
// address handles, and the Q_Key privilege rule of modify_qp. Every refusal
// is an errno with a reason, and counted.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include "firmware-model/daemon/control_plane.h"

namespace metaroce::daemon {
namespace {

constexpr uint32_t kControlledQkey = 0x80000000u;  // docs/protocol.md §13.4

template <class T>
bool decode_body(const ControlPlane::Request& r, T* out, ControlPlane::Reply* reply,
                 DaemonCounters& counters) {
  if (r.body.size() == sizeof(T)) {
    std::memcpy(out, r.body.data(), sizeof(T));
    return true;
  }
  counters.ctrl_malformed++;
  reply->reason = "malformed request: body of " + std::to_string(r.body.size()) +
                  " bytes, expected " + std::to_string(sizeof(T));
  return false;
}

fw::AddressVector to_av(const mroce_ah_attr& a) {
  fw::AddressVector av;
  std::memcpy(av.dgid.bytes.data(), a.dgid, sizeof(a.dgid));
  av.flow_label = a.flow_label;
  av.sgid_index = a.sgid_index;
  av.hop_limit = a.hop_limit;
  av.traffic_class = a.traffic_class;
  return av;
}

}  // namespace

int ControlPlane::op_create_ah(Client& c, const Request& r, Reply* out) {
  mroce_create_ah_req req{};
  if (!decode_body(r, &req, out, counters_)) return EINVAL;
  int err = 0;
  if (!req.ah.is_global) {
    out->reason = "address handle without a GRH: on Ethernet (RoCE) an AH needs is_global and a "
                  "destination GID";
    err = EINVAL;
  } else if (c.ahs.size() >= config_.limits.max_ah) {
    counters_.limit_refused_client++;
    out->reason = "per-client AH limit reached (" + std::to_string(config_.limits.max_ah) + ")";
    err = ENOMEM;
  }
  uint32_t ahn = 0;
  if (!err) err = backend_.create_ah(c.id, req.pdn, to_av(req.ah), &ahn);
  if (err) {
    counters_.ah_refused++;
    if (!out->reason.empty()) return err;
    if (err == ENOENT || err == EPERM) return not_ours(err, "PD", req.pdn, out);
    out->reason = err == EINVAL    ? "sgid_index " + std::to_string(req.ah.sgid_index) +
                                         " is beyond the port's GID table"
                  : err == ENOMEM  ? "no address handles left on the device"
                                   : "the transport backend has no address handles";
    return err;
  }
  c.ahs.insert(ahn);
  mroce_create_ah_resp resp{ahn, 0};
  const auto* p = reinterpret_cast<const uint8_t*>(&resp);
  out->body.assign(p, p + sizeof(resp));
  return 0;
}

int ControlPlane::op_destroy_ah(Client& c, const Request& r, Reply* out) {
  mroce_handle_req req{};
  if (!decode_body(r, &req, out, counters_)) return EINVAL;
  int err = not_ours(backend_.destroy_ah(c.id, req.handle), "AH", req.handle, out);
  if (!err) c.ahs.erase(req.handle);
  return err;
}

int ControlPlane::check_qkey(const Client& c, const mroce_qp_attr& a, Reply* out) {
  if (!(a.attr_mask & fw::kAttrQkey) || !(a.qkey & kControlledQkey) || c.uid == 0) return 0;
  counters_.qkey_privileged_refused++;
  out->reason = "Q_Key 0x" + [&] {
    char b[9];
    std::snprintf(b, sizeof b, "%08x", a.qkey);
    return std::string(b);
  }() + " is controlled (high bit set): only a privileged user (root) may give a QP one";
  return EPERM;
}

}  // namespace metaroce::daemon
