// The control plane's memory-window operations (docs/device-abi.md §2.8):
// ALLOC_MW / DEALLOC_MW through the transport backend, bounded per client
// (--max-mw-per-client) and per user (--uid-max-mw), refusals counted.
// Binding and invalidation are work requests (queue pump -> engine).
#include <cerrno>
#include <string>

#include "firmware-model/daemon/control_codec.h"
#include "firmware-model/daemon/control_plane.h"

namespace metaroce::daemon {

using control::encode;

int ControlPlane::op_alloc_mw(Client& c, const Request& r, Reply* out) {
  MROCE_DECODE(mroce_alloc_mw_req, req);
  if (req.type != 1 && req.type != 2) {
    out->reason = "memory window type " + std::to_string(req.type) + " (IBV_MW_TYPE_1 or _2)";
    return EINVAL;
  }
  if (int err = check_limits(c, "MW", c.mws.size(), config_.limits.max_mw, &UserUsage::mws,
                             &UserLimits::max_mw, out))
    return err;
  if (!c.pds.count(req.pdn)) return not_ours(ENOENT, "PD", req.pdn, out);
  mroce_alloc_mw_resp resp{};
  fw::MwType type = req.type == 2 ? fw::MwType::kType2 : fw::MwType::kType1;
  int err = backend_.alloc_mw(c.id, req.pdn, type, &resp.handle, &resp.rkey);
  if (err) {
    if (err == EOPNOTSUPP) out->reason = "this transport backend has no memory windows";
    else if (err == ENOMEM) out->reason = "no memory windows left on the device";
    return not_ours(err, "PD", req.pdn, out);
  }
  c.mws.insert(resp.handle);
  usage(c).mws++;
  encode(resp, &out->body);
  return 0;
}

int ControlPlane::op_dealloc_mw(Client& c, const Request& r, Reply* out) {
  MROCE_DECODE(mroce_handle_req, req);
  if (!c.mws.count(req.handle)) return not_ours(ENOENT, "MW", req.handle, out);
  int err = not_ours(backend_.dealloc_mw(c.id, req.handle), "MW", req.handle, out);
  if (!err) {
    c.mws.erase(req.handle);
    usage(c).mws--;
  }
  return err;
}

}  // namespace metaroce::daemon
