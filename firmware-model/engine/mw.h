// Memory windows (docs/engine.md §Memory windows): a remote-access grant on
// a range of a registered MR, with its own rkey. Type 1 windows belong to a
// PD and are bound and unbound by a BIND_MW work request (ibv_bind_mw);
// type 2 windows are bound by IBV_WR_BIND_MW to the QP that posts it, are
// usable only through that QP, and are freed again by LOCAL_INV or by the
// peer's SEND_WITH_INV (docs/protocol.md §15). A window's rkey is
// prefix << 8 | key: the 24-bit prefix is random and fixed for the
// window's life (no MR key and no other window shares it), the 8-bit key is
// the consumer's (ibv_inc_rkey) and changes with each bind, so an rkey from
// an earlier binding names nothing.
#pragma once

#include <cstdint>
#include <unordered_map>

#include "firmware-model/engine/hal.h"
#include "firmware-model/engine/objects.h"
#include "firmware-model/engine/types.h"

namespace metaroce::fw {

struct Mw {
  OwnerId owner = 0;
  uint32_t pdn = 0;
  MwType type = MwType::kType1;
  bool bound = false;
  uint32_t rkey = 0;    // prefix << 8 | key
  uint32_t mr_key = 0;  // the MR it is bound to (its windows count holds it)
  uint64_t addr = 0, length = 0;
  uint32_t access = 0;  // remote read/write/atomic
  uint32_t qpn = 0;     // type 2: the QP it is bound to
};

// Why a bind or an invalidation was refused; each has a counter
// (Counters::mw_bind_* / mw_inv_*) and a completion status.
enum class MwCheck : uint8_t {
  kOk,
  kNoWindow,      // no such window handle / rkey
  kWrongOwner,    // the window or MR belongs to another process
  kWrongPd,       // window, MR and QP not in one PD
  kWrongType,     // a type 1 window named by IBV_WR_BIND_MW / invalidation, or the reverse
  kBusy,          // type 2 bind of a window that is bound (invalidate it first)
  kWrongKey,      // new rkey with another window's prefix, or not the bound rkey
  kNoMr,          // the MR named by lkey does not exist
  kMrNoBind,      // the MR lacks IBV_ACCESS_MW_BIND
  kOutOfBounds,   // [addr, addr + length) not inside the MR
  kBadAccess,     // rights other than remote read/write/atomic, or write/atomic on an MR
                  // without local write
  kWrongQp,       // type 2 window bound to another QP
};
const char* to_string(MwCheck c);

struct BindRequest {
  OwnerId owner = 0;
  uint32_t pdn = 0;  // the posting QP's
  uint32_t qpn = 0;
  MwType type = MwType::kType1;  // kType2: IBV_WR_BIND_MW; kType1: ibv_bind_mw
  SendWr::Bind bind;
  uint32_t new_rkey = 0;
};

class MwTable {
 public:
  explicit MwTable(uint32_t max) : table_(max) {}
  // Returns 0 or an errno (EINVAL type, ENOMEM full). The initial key part
  // is 0; *rkey is what ibv_mw.rkey starts as.
  int alloc(OwnerId owner, uint32_t pdn, MwType type, RandomInterface& random,
            const MrTable& mrs, uint32_t* handle, uint32_t* rkey);
  // Unbinds (releasing the MR) and frees. ENOENT, EPERM (another owner).
  int dealloc(OwnerId owner, uint32_t handle, MrTable& mrs);
  // A bind, rebind (type 1) or, with length 0, an unbind (type 1).
  MwCheck bind(const BindRequest& req, MrTable& mrs);
  // LOCAL_INV (remote = false) or SEND_WITH_INV (remote = true, qpn the
  // receiving QP): only bound type 2 windows, by their current rkey.
  MwCheck check_invalidate(OwnerId owner, uint32_t pdn, uint32_t qpn, uint32_t rkey,
                           bool remote) const;
  // Unbinds the window whose rkey this is, if it is still bound with it.
  void invalidate(uint32_t rkey, MrTable& mrs);
  // The QP qpn is destroyed: every type 2 window bound to it is unbound
  // (its rkey names nothing; a later QP with the same number gets no
  // access through it). Returns how many.
  uint32_t invalidate_qp(uint32_t qpn, MrTable& mrs);
  // Remote access through a window's rkey (MrTable::check_remote's second half).
  KeyCheck check_remote(OwnerId owner, uint32_t pdn, uint32_t qpn, uint32_t rkey, uint64_t addr,
                        uint64_t len, uint32_t need) const;
  bool prefix_taken(uint32_t prefix) const { return by_prefix_.count(prefix) != 0; }
  const Mw* get(uint32_t handle) const { return table_.get(handle); }
  uint32_t count() const { return table_.count(); }
  uint32_t end() const { return table_.end(); }

 private:
  const Mw* find(uint32_t rkey) const;
  void unbind(Mw& w, MrTable& mrs);
  MwCheck check_bind_mr(const BindRequest& req, const Mr* mr) const;
  Table<Mw> table_;
  std::unordered_map<uint32_t, uint32_t> by_prefix_;  // rkey >> 8 -> handle
  std::unordered_map<uint32_t, uint32_t> bound_to_qp_;  // qpn -> type 2 windows bound to it
};

}  // namespace metaroce::fw
