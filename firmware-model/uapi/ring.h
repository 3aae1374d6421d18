// Shared-memory rings of the MetaRoCE device ABI (metaroce_abi.h,
// docs/device-abi.md §3): the one implementation, used by the provider (SQ
// and RQ producer, CQ consumer), the daemon's queue pump (the NIC side of
// the same rings) and the hardware backend (the driver side of the rings
// silicon DMAs).
//
// Who owns what: on SQ and RQ rings the application is the producer (it
// alone writes `producer`) and the NIC the consumer; on CQ rings the
// reverse. Each side keeps its own index in private memory and only
// publishes it, so the only loads of shared indices are of the other
// side's. The NIC writes `entries`, `entry_size` (at creation, before the
// memory is shared), `nic_sleeping` and `overflow`; the application writes
// `armed` and the NIC exchanges it back to 0.
//
// Ordering, as libxdp's xsk rings:
//   - the producer writes the slot(s), then store-RELEASEs `producer`;
//   - the consumer load-ACQUIREs `producer`, reads the slots, then
//     store-RELEASEs `consumer`;
//   - the producer load-ACQUIREs `consumer` before reusing a slot;
//   - `nic_sleeping` and `armed` are seq_cst on both sides (a full fence
//     after the producer's release store), so no doorbell or completion
//     event is lost (§3.4, §3.5).
#pragma once

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "firmware-model/uapi/metaroce_abi.h"

struct mroce_ring {
  struct mroce_ring_hdr *hdr;
  uint8_t *slots;
  uint32_t entries;  // power of two
  uint32_t entry_size;
};

// Binds a ring view to a header at `base + offset` inside a mapping of
// `map_len` bytes. Returns 0, or EPROTO when the NIC's header disagrees with
// what the control reply announced or the slots do not fit the mapping.
static inline int mroce_ring_bind(struct mroce_ring *r, void *base, size_t map_len,
                                  uint64_t offset, uint32_t entries, size_t min_entry_size) {
  if (entries == 0 || (entries & (entries - 1)) != 0) return EPROTO;
  if (offset + sizeof(struct mroce_ring_hdr) > map_len) return EPROTO;
  auto *hdr = reinterpret_cast<struct mroce_ring_hdr *>(static_cast<uint8_t *>(base) + offset);
  if (hdr->entries != entries || hdr->entry_size < min_entry_size) return EPROTO;
  if (offset + sizeof(*hdr) + uint64_t{entries} * hdr->entry_size > map_len) return EPROTO;
  r->hdr = hdr;
  r->slots = reinterpret_cast<uint8_t *>(hdr + 1);
  r->entries = entries;
  r->entry_size = hdr->entry_size;
  return 0;
}

static inline void *mroce_ring_slot(const struct mroce_ring *r, uint32_t index) {
  return r->slots + size_t{index & (r->entries - 1)} * r->entry_size;
}

// The other side's index: load-ACQUIRE, so the slots it covers (CQEs the NIC
// wrote, or slots the NIC finished reading) are visible/free after it.
static inline uint32_t mroce_ring_load_producer(const struct mroce_ring *r) {
  return __atomic_load_n(&r->hdr->producer, __ATOMIC_ACQUIRE);
}
static inline uint32_t mroce_ring_load_consumer(const struct mroce_ring *r) {
  return __atomic_load_n(&r->hdr->consumer, __ATOMIC_ACQUIRE);
}

// Our own index: store-RELEASE, after the slot writes (producer) or slot
// reads (consumer) it publishes.
static inline void mroce_ring_publish_producer(struct mroce_ring *r, uint32_t v) {
  __atomic_store_n(&r->hdr->producer, v, __ATOMIC_RELEASE);
}
static inline void mroce_ring_publish_consumer(struct mroce_ring *r, uint32_t v) {
  __atomic_store_n(&r->hdr->consumer, v, __ATOMIC_RELEASE);
}

// After publishing `producer` on a SQ/RQ: does the NIC need a doorbell?
// The NIC stores nic_sleeping (seq_cst) and then rescans `producer`; we store
// `producer` and then load nic_sleeping. Store->load order is not kept by a
// release store alone (x86 reorders it), so a full fence sits between: at
// least one side then sees the other's store and no doorbell is lost.
static inline bool mroce_ring_nic_sleeping(const struct mroce_ring *r) {
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
  return __atomic_load_n(&r->hdr->nic_sleeping, __ATOMIC_SEQ_CST) != 0;
}

// CQ arming (seq_cst, as the ABI says): the NIC exchanges it back to 0 when
// it writes the notification.
static inline void mroce_ring_arm(struct mroce_ring *r, uint32_t how) {
  __atomic_store_n(&r->hdr->armed, how, __ATOMIC_SEQ_CST);
}


// ---------------- the NIC side ----------------

// Creates a ring header at `base` (memory not yet shared: plain stores).
static inline void mroce_ring_init(struct mroce_ring *r, void *base, uint32_t entries,
                                   uint32_t entry_size) {
  auto *hdr = static_cast<struct mroce_ring_hdr *>(base);
  memset(hdr, 0, sizeof(*hdr));
  hdr->entries = entries;
  hdr->entry_size = entry_size;
  r->hdr = hdr;
  r->slots = reinterpret_cast<uint8_t *>(hdr + 1);
  r->entries = entries;
  r->entry_size = entry_size;
}

// The NIC is about to sleep (seq_cst store); it then rescans `producer`.
// Paired with mroce_ring_nic_sleeping() on the application's side.
static inline void mroce_ring_announce_sleep(struct mroce_ring *r) {
  __atomic_store_n(&r->hdr->nic_sleeping, 1u, __ATOMIC_SEQ_CST);
}
// Awake again: relaxed, a stale 1 only costs the application a doorbell.
static inline void mroce_ring_end_sleep(struct mroce_ring *r) {
  __atomic_store_n(&r->hdr->nic_sleeping, 0u, __ATOMIC_RELAXED);
}

// After publishing a CQ's `producer`: true if the application had armed it
// and this call took the arm (seq_cst load, then exchange to 0: one arm, at
// most one event).
static inline bool mroce_ring_take_arm(struct mroce_ring *r) {
  return __atomic_load_n(&r->hdr->armed, __ATOMIC_SEQ_CST) != 0 &&
         __atomic_exchange_n(&r->hdr->armed, 0u, __ATOMIC_SEQ_CST) != 0;
}

// A CQE could not be written (the ring is full): release, after the CQEs
// before it.
static inline void mroce_ring_set_overflow(struct mroce_ring *r) {
  __atomic_store_n(&r->hdr->overflow, 1u, __ATOMIC_RELEASE);
}
