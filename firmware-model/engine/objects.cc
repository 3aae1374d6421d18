#include "firmware-model/engine/objects.h"

#include <cerrno>

#include "firmware-model/engine/mw.h"

namespace metaroce::fw {

const char* to_string(KeyCheck k) {
  switch (k) {
    case KeyCheck::kOk: return "ok";
    case KeyCheck::kNoKey: return "no such key";
    case KeyCheck::kWrongOwner: return "key of another owner";
    case KeyCheck::kWrongPd: return "key of another PD";
    case KeyCheck::kOutOfBounds: return "out of bounds";
    case KeyCheck::kNoAccess: return "access flag missing";
    case KeyCheck::kWrongQp: return "window bound to another QP";
  }
  return "?";
}

namespace {
constexpr uint32_t kAllAccess = kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead |
                               kAccessRemoteAtomic | kAccessMwBind;

bool inside(const Mr& m, uint64_t addr, uint64_t len) {
  return addr >= m.addr && len <= m.length && addr - m.addr <= m.length - len;
}
}  // namespace

int MrTable::reg(OwnerId owner, uint32_t pdn, uint64_t addr, uint64_t length, uint32_t access,
                 RandomInterface& random, MrKeys* keys) {
  constexpr int kKeyTries = 16;  // live keys are < 2^17 of 2^32: a clash is rare
  if (access & ~kAllAccess) return EINVAL;
  if ((access & (kAccessRemoteWrite | kAccessRemoteAtomic)) && !(access & kAccessLocalWrite))
    return EINVAL;
  if (addr + length < addr) return EINVAL;
  uint32_t key = 0;
  auto taken = [&](uint32_t k) {
    return k == 0 || by_key_.count(k) || (windows_ && windows_->prefix_taken(k >> 8));
  };
  for (int i = 0; i < kKeyTries && taken(key); ++i) key = static_cast<uint32_t>(random.next() >> 32);
  if (taken(key)) return ENOMEM;
  uint32_t idx = table_.add(Mr{owner, pdn, addr, length, access, key});
  if (idx == 0) return ENOMEM;
  by_key_[key] = idx;
  keys->lkey = keys->rkey = key;
  return 0;
}

const Mr* MrTable::find(uint32_t key) const {
  auto it = by_key_.find(key);
  return it == by_key_.end() ? nullptr : table_.get(it->second);
}

int MrTable::dereg(OwnerId owner, uint32_t key, uint32_t* pdn) {
  const Mr* m = find(key);
  if (!m) return ENOENT;
  if (m->owner != owner) return EPERM;
  if (m->windows) return EBUSY;
  *pdn = m->pdn;
  uint32_t idx = by_key_[key];
  by_key_.erase(key);
  table_.remove(idx);
  return 0;
}

KeyCheck MrTable::check_local(OwnerId owner, uint32_t pdn, uint32_t lkey, uint64_t addr,
                              uint64_t len, uint32_t need) const {
  if (len == 0) return KeyCheck::kOk;
  const Mr* m = find(lkey);
  if (!m) return KeyCheck::kNoKey;
  if (m->owner != owner) return KeyCheck::kWrongOwner;
  if (m->pdn != pdn) return KeyCheck::kWrongPd;
  if (!inside(*m, addr, len)) return KeyCheck::kOutOfBounds;
  if ((m->access & need) != need) return KeyCheck::kNoAccess;
  return KeyCheck::kOk;
}

KeyCheck MrTable::check_remote(OwnerId owner, uint32_t pdn, uint32_t qpn, uint32_t rkey,
                               uint64_t addr, uint64_t len, uint32_t need, const Mr** mr) const {
  if (len == 0) return KeyCheck::kOk;
  const Mr* m = find(rkey);
  if (!m && windows_) return windows_->check_remote(owner, pdn, qpn, rkey, addr, len, need);
  if (!m) return KeyCheck::kNoKey;
  if (m->owner != owner) return KeyCheck::kWrongOwner;
  if (m->pdn != pdn) return KeyCheck::kWrongPd;
  if (!inside(*m, addr, len)) return KeyCheck::kOutOfBounds;
  if ((m->access & need) != need) return KeyCheck::kNoAccess;
  if (mr) *mr = m;
  return KeyCheck::kOk;
}

}  // namespace metaroce::fw
