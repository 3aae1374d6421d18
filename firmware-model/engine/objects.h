// Verbs objects the firmware owns: protection domains, memory regions and
// completion queues, each tagged with the OwnerId that created it, plus the
// key checks the requester (lkey) and responder (rkey) run before any DMA.
// QPs live in qp.h (they carry transport state); docs/engine.md §Objects.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <utility>
#include <vector>

#include "firmware-model/engine/hal.h"
#include "firmware-model/engine/types.h"

namespace metaroce::fw {

class MwTable;  // mw.h

struct Pd {
  OwnerId owner = 0;
  uint32_t refs = 0;  // MRs and QPs using it: destroy_pd answers EBUSY while > 0
};

struct Mr {
  OwnerId owner = 0;
  uint32_t pdn = 0;
  uint64_t addr = 0;
  uint64_t length = 0;
  uint32_t access = 0;
  uint32_t key = 0;  // lkey == rkey: 32 random bits, new on every registration
  uint32_t windows = 0;  // memory windows bound to it: dereg answers EBUSY while > 0
};

struct Cq {
  OwnerId owner = 0;
  uint32_t cqe = 0;
  uint32_t refs = 0;        // QPs using it
  bool overflowed = false;  // kCqErr raised; attached QPs moved to ERR
};

// An address handle (UD sends name it; docs/protocol.md §13.3).
struct Ah {
  OwnerId owner = 0;
  uint32_t pdn = 0;
  AddressVector av;
};

// A table of objects addressed by a small handle. Slot 0 is never used, so
// handle 0 is always invalid. Freed slots are reused lowest-first.
template <class T>
class Table {
 public:
  explicit Table(uint32_t max) : max_(max) {}
  // Returns the new handle, or 0 when the table is full.
  uint32_t add(const T& v) {
    for (uint32_t i = 1; i < slots_.size(); ++i) {
      if (!used_[i]) {
        slots_[i] = v;
        used_[i] = true;
        ++count_;
        return i;
      }
    }
    if (count_ >= max_) return 0;
    if (slots_.empty()) {
      slots_.emplace_back();
      used_.push_back(false);
    }
    slots_.push_back(v);
    used_.push_back(true);
    ++count_;
    return static_cast<uint32_t>(slots_.size() - 1);
  }
  T* get(uint32_t h) { return h < slots_.size() && used_[h] ? &slots_[h] : nullptr; }
  const T* get(uint32_t h) const { return h < slots_.size() && used_[h] ? &slots_[h] : nullptr; }
  void remove(uint32_t h) {
    if (get(h)) {
      used_[h] = false;
      slots_[h] = T{};
      --count_;
    }
  }
  uint32_t end() const { return static_cast<uint32_t>(slots_.size()); }
  uint32_t count() const { return count_; }

 private:
  uint32_t max_;
  uint32_t count_ = 0;
  std::vector<T> slots_;
  std::vector<bool> used_;
};

// Why a key check failed; each maps onto a WcStatus and a counter.
enum class KeyCheck : uint8_t {
  kOk, kNoKey, kWrongOwner, kWrongPd, kOutOfBounds, kNoAccess,
  kWrongQp,  // a type 2 window bound to another QP (mw.h)
};
const char* to_string(KeyCheck k);

class MrTable {
 public:
  explicit MrTable(uint32_t max) : table_(max) {}
  // Returns 0 or an errno. access must be a valid ibv_access_flags subset;
  // remote write/atomic require local write (IB spec o10-2.2.1). The key is
  // drawn from `random` (never 0, never a live key): it carries no index,
  // so a dead or guessed key does not name a reused slot.
  int reg(OwnerId owner, uint32_t pdn, uint64_t addr, uint64_t length, uint32_t access,
          RandomInterface& random, MrKeys* keys);
  const Mr* find(uint32_t key) const;
  Mr* find(uint32_t key) { return const_cast<Mr*>(std::as_const(*this).find(key)); }
  // EBUSY while memory windows are bound to it (IB o10-... : windows first).
  int dereg(OwnerId owner, uint32_t key, uint32_t* pdn);
  // The memory windows whose rkeys check_remote also accepts, and whose
  // 24-bit key prefixes reg never hands out (mw.h).
  void set_windows(const MwTable* windows) { windows_ = windows; }
  // Local access through an SGE: owner and PD must match, [addr, addr+len)
  // inside the MR, and `need` access flags present (kAccessLocalWrite for
  // buffers the NIC writes into). len == 0 always passes.
  KeyCheck check_local(OwnerId owner, uint32_t pdn, uint32_t lkey, uint64_t addr, uint64_t len,
                       uint32_t need) const;
  // Remote access through an rkey: an MR's, or a memory window's (whose
  // type 2 windows answer only to the QP qpn). The owner, PD and QP are the
  // responder QP's. len == 0 always passes (IB: zero-length RDMA needs no
  // valid rkey).
  KeyCheck check_remote(OwnerId owner, uint32_t pdn, uint32_t qpn, uint32_t rkey, uint64_t addr,
                        uint64_t len, uint32_t need, const Mr** mr) const;
  // Removes every MR of owner; calls back with the PD of each.
  template <class F>
  void remove_owner(OwnerId owner, F&& on_removed) {
    for (uint32_t i = 1; i < table_.end(); ++i) {
      const Mr* m = table_.get(i);
      if (m && m->owner == owner) {
        on_removed(*m);
        by_key_.erase(m->key);
        table_.remove(i);
      }
    }
  }

 private:
  Table<Mr> table_;
  std::unordered_map<uint32_t, uint32_t> by_key_;  // key -> table handle
  const MwTable* windows_ = nullptr;
};

}  // namespace metaroce::fw
