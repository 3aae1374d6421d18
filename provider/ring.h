// Shared-memory rings of the MetaRoCE device ABI, provider side
// (firmware-model/uapi/metaroce_abi.h, "shared-memory rings").
//
// Who owns what: on SQ and RQ rings the provider is the producer (it alone
// writes `producer`) and the NIC the consumer; on CQ rings the reverse. Each
// side keeps its own index in private memory and only publishes it, so the
// only loads of shared indices are of the other side's.
#pragma once

#include <stddef.h>
#include <stdint.h>

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
