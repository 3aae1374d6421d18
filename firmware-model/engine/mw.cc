#include "firmware-model/engine/mw.h"

#include <cerrno>

namespace metaroce::fw {

const char* to_string(MwCheck c) {
  switch (c) {
    case MwCheck::kOk: return "ok";
    case MwCheck::kNoWindow: return "no such memory window";
    case MwCheck::kWrongOwner: return "window or MR of another process";
    case MwCheck::kWrongPd: return "window, MR and QP not in one PD";
    case MwCheck::kWrongType: return "wrong window type for this operation";
    case MwCheck::kBusy: return "type 2 window is bound: invalidate it first";
    case MwCheck::kWrongKey: return "rkey does not name this window";
    case MwCheck::kNoMr: return "no such MR";
    case MwCheck::kMrNoBind: return "MR not registered with IBV_ACCESS_MW_BIND";
    case MwCheck::kOutOfBounds: return "window range not inside its MR";
    case MwCheck::kBadAccess: return "window rights not allowed";
    case MwCheck::kWrongQp: return "type 2 window bound to another QP";
  }
  return "?";
}

namespace {
constexpr uint32_t kWindowRights = kAccessRemoteRead | kAccessRemoteWrite | kAccessRemoteAtomic;

bool inside(uint64_t base, uint64_t size, uint64_t addr, uint64_t len) {
  return addr >= base && len <= size && addr - base <= size - len;
}

// No MR key may start with the prefix: MR keys are 32 random bits, so all
// 256 keys of the prefix are looked up (once per window).
bool mr_uses_prefix(const MrTable& mrs, uint32_t prefix) {
  for (uint32_t k = 0; k < 256; ++k)
    if (mrs.find(prefix << 8 | k)) return true;
  return false;
}
}  // namespace

int MwTable::alloc(OwnerId owner, uint32_t pdn, MwType type, RandomInterface& random,
                   const MrTable& mrs, uint32_t* handle, uint32_t* rkey) {
  constexpr int kTries = 16;
  if (type != MwType::kType1 && type != MwType::kType2) return EINVAL;
  uint32_t prefix = 0;
  auto taken = [&](uint32_t p) { return p == 0 || prefix_taken(p) || mr_uses_prefix(mrs, p); };
  for (int i = 0; i < kTries && taken(prefix); ++i)
    prefix = static_cast<uint32_t>(random.next() >> 40);  // 24 bits
  if (taken(prefix)) return ENOMEM;
  Mw w;
  w.owner = owner;
  w.pdn = pdn;
  w.type = type;
  w.rkey = prefix << 8;
  uint32_t h = table_.add(w);
  if (!h) return ENOMEM;
  by_prefix_[prefix] = h;
  *handle = h;
  *rkey = w.rkey;
  return 0;
}

void MwTable::unbind(Mw& w, MrTable& mrs) {
  if (!w.bound) return;
  if (Mr* m = mrs.find(w.mr_key); m && m->windows) --m->windows;
  if (w.type == MwType::kType2) {
    auto it = bound_to_qp_.find(w.qpn);
    if (it != bound_to_qp_.end() && --it->second == 0) bound_to_qp_.erase(it);
  }
  w.bound = false;
  w.mr_key = 0;
  w.addr = w.length = 0;
  w.access = 0;
  w.qpn = 0;
}

int MwTable::dealloc(OwnerId owner, uint32_t handle, MrTable& mrs) {
  Mw* w = table_.get(handle);
  if (!w) return ENOENT;
  if (w->owner != owner) return EPERM;
  unbind(*w, mrs);
  by_prefix_.erase(w->rkey >> 8);
  table_.remove(handle);
  return 0;
}

MwCheck MwTable::check_bind_mr(const BindRequest& req, const Mr* mr) const {
  const SendWr::Bind& b = req.bind;
  if (!mr) return MwCheck::kNoMr;
  if (mr->owner != req.owner) return MwCheck::kWrongOwner;
  if (mr->pdn != req.pdn) return MwCheck::kWrongPd;
  if (!(mr->access & kAccessMwBind)) return MwCheck::kMrNoBind;
  if (!inside(mr->addr, mr->length, b.addr, b.length)) return MwCheck::kOutOfBounds;
  if (b.access & ~kWindowRights) return MwCheck::kBadAccess;
  // IB: a window granting remote write or atomic needs local write on its MR.
  if ((b.access & (kAccessRemoteWrite | kAccessRemoteAtomic)) && !(mr->access & kAccessLocalWrite))
    return MwCheck::kBadAccess;
  return MwCheck::kOk;
}

MwCheck MwTable::bind(const BindRequest& req, MrTable& mrs) {
  Mw* w = table_.get(req.bind.mw);
  if (!w) return MwCheck::kNoWindow;
  if (w->owner != req.owner) return MwCheck::kWrongOwner;
  if (w->pdn != req.pdn) return MwCheck::kWrongPd;
  if (w->type != req.type) return MwCheck::kWrongType;
  if ((req.new_rkey >> 8) != (w->rkey >> 8)) return MwCheck::kWrongKey;
  if (w->type == MwType::kType2 && w->bound) return MwCheck::kBusy;
  const bool unbind_only = w->type == MwType::kType1 && req.bind.length == 0;
  if (!unbind_only)
    if (MwCheck c = check_bind_mr(req, mrs.find(req.bind.lkey)); c != MwCheck::kOk) return c;
  unbind(*w, mrs);
  w->rkey = req.new_rkey;
  if (unbind_only) return MwCheck::kOk;
  ++mrs.find(req.bind.lkey)->windows;
  w->bound = true;
  w->mr_key = req.bind.lkey;
  w->addr = req.bind.addr;
  w->length = req.bind.length;
  w->access = req.bind.access;
  w->qpn = w->type == MwType::kType2 ? req.qpn : 0;
  if (w->type == MwType::kType2) ++bound_to_qp_[w->qpn];
  return MwCheck::kOk;
}

const Mw* MwTable::find(uint32_t rkey) const {
  auto it = by_prefix_.find(rkey >> 8);
  return it == by_prefix_.end() ? nullptr : table_.get(it->second);
}

MwCheck MwTable::check_invalidate(OwnerId owner, uint32_t pdn, uint32_t qpn, uint32_t rkey,
                                  bool remote) const {
  const Mw* w = find(rkey);
  if (!w) return MwCheck::kNoWindow;
  if (w->owner != owner) return MwCheck::kWrongOwner;
  if (w->pdn != pdn) return MwCheck::kWrongPd;
  if (w->type != MwType::kType2) return MwCheck::kWrongType;  // IB: type 1 is never invalidated
  if (!w->bound || w->rkey != rkey) return MwCheck::kWrongKey;
  if (remote && w->qpn != qpn) return MwCheck::kWrongQp;
  return MwCheck::kOk;
}

void MwTable::invalidate(uint32_t rkey, MrTable& mrs) {
  auto it = by_prefix_.find(rkey >> 8);
  if (it == by_prefix_.end()) return;
  Mw* w = table_.get(it->second);
  if (w && w->bound && w->rkey == rkey) unbind(*w, mrs);
}

uint32_t MwTable::invalidate_qp(uint32_t qpn, MrTable& mrs) {
  auto it = bound_to_qp_.find(qpn);
  if (it == bound_to_qp_.end()) return 0;  // the common case: no scan
  uint32_t n = 0;
  for (uint32_t h = 1; h < table_.end() && bound_to_qp_.count(qpn); ++h)
    if (Mw* w = table_.get(h); w && w->bound && w->type == MwType::kType2 && w->qpn == qpn) {
      unbind(*w, mrs);
      ++n;
    }
  return n;
}

KeyCheck MwTable::check_remote(OwnerId owner, uint32_t pdn, uint32_t qpn, uint32_t rkey,
                               uint64_t addr, uint64_t len, uint32_t need) const {
  const Mw* w = find(rkey);
  if (!w || !w->bound || w->rkey != rkey) return KeyCheck::kNoKey;
  if (w->owner != owner) return KeyCheck::kWrongOwner;
  if (w->pdn != pdn) return KeyCheck::kWrongPd;
  if (w->type == MwType::kType2 && w->qpn != qpn) return KeyCheck::kWrongQp;
  if (!inside(w->addr, w->length, addr, len)) return KeyCheck::kOutOfBounds;
  if ((w->access & need) != need) return KeyCheck::kNoAccess;
  return KeyCheck::kOk;
}

}  // namespace metaroce::fw
