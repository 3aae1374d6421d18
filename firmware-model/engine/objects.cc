#include "firmware-model/engine/objects.h"

#include <cerrno>

namespace metaroce::fw {

const char* to_string(KeyCheck k) {
  switch (k) {
    case KeyCheck::kOk: return "ok";
    case KeyCheck::kNoKey: return "no such key";
    case KeyCheck::kWrongOwner: return "key of another owner";
    case KeyCheck::kWrongPd: return "key of another PD";
    case KeyCheck::kOutOfBounds: return "out of bounds";
    case KeyCheck::kNoAccess: return "access flag missing";
  }
  return "?";
}

namespace {
constexpr uint32_t kAllAccess =
    kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead | kAccessRemoteAtomic;

bool inside(const Mr& m, uint64_t addr, uint64_t len) {
  return addr >= m.addr && len <= m.length && addr - m.addr <= m.length - len;
}
}  // namespace

int MrTable::reg(OwnerId owner, uint32_t pdn, uint64_t addr, uint64_t length, uint32_t access,
                 uint8_t random_key, MrKeys* keys) {
  if (access & ~kAllAccess) return EINVAL;
  if ((access & (kAccessRemoteWrite | kAccessRemoteAtomic)) && !(access & kAccessLocalWrite))
    return EINVAL;
  if (addr + length < addr) return EINVAL;
  uint32_t idx = table_.add(Mr{owner, pdn, addr, length, access, 0});
  if (idx == 0) return ENOMEM;
  if (idx > 0xFFFFFF) {
    table_.remove(idx);
    return ENOMEM;
  }
  Mr* m = table_.get(idx);
  m->key = idx << 8 | random_key;
  keys->lkey = keys->rkey = m->key;
  return 0;
}

const Mr* MrTable::find(uint32_t key) const {
  const Mr* m = table_.get(key >> 8);
  return m && m->key == key ? m : nullptr;
}

int MrTable::dereg(OwnerId owner, uint32_t key, uint32_t* pdn) {
  const Mr* m = find(key);
  if (!m) return ENOENT;
  if (m->owner != owner) return EPERM;
  *pdn = m->pdn;
  table_.remove(key >> 8);
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

KeyCheck MrTable::check_remote(OwnerId owner, uint32_t pdn, uint32_t rkey, uint64_t addr,
                               uint64_t len, uint32_t need, const Mr** mr) const {
  if (len == 0) return KeyCheck::kOk;
  const Mr* m = find(rkey);
  if (!m) return KeyCheck::kNoKey;
  if (m->owner != owner) return KeyCheck::kWrongOwner;
  if (m->pdn != pdn) return KeyCheck::kWrongPd;
  if (!inside(*m, addr, len)) return KeyCheck::kOutOfBounds;
  if ((m->access & need) != need) return KeyCheck::kNoAccess;
  if (mr) *mr = m;
  return KeyCheck::kOk;
}

}  // namespace metaroce::fw
