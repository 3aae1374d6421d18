// Shared-memory rings of the device ABI (firmware-model/uapi/metaroce_abi.h),
// NIC side: a memfd the daemon creates, maps, and passes to the client.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "firmware-model/uapi/metaroce_abi.h"
#include "firmware-model/uapi/ring.h"

namespace metaroce::daemon {

// One memfd mapping holding one or more rings.
class ShmRegion {
 public:
  ShmRegion() = default;
  ~ShmRegion();
  ShmRegion(ShmRegion&& o) noexcept { *this = std::move(o); }
  ShmRegion& operator=(ShmRegion&& o) noexcept;
  ShmRegion(const ShmRegion&) = delete;

  // Returns 0 or an errno.
  int create(const std::string& name, size_t bytes);
  int fd() const { return fd_; }
  size_t size() const { return size_; }
  uint8_t* base() const { return base_; }

 private:
  int fd_ = -1;
  size_t size_ = 0;
  uint8_t* base_ = nullptr;
};

// Bytes for a ring of `entries` slots of `entry_size`, page aligned.
size_t ring_bytes(uint32_t entries, uint32_t entry_size);
uint32_t round_up_pow2(uint32_t v);

// A view of one ring inside a ShmRegion: the device ABI's one ring
// implementation (firmware-model/uapi/ring.h, where each load and store
// states its ordering) with a C++ face.
class RingView {
 public:
  RingView() = default;
  RingView(uint8_t* base, uint32_t entries, uint32_t entry_size) {  // initializes the header
    mroce_ring_init(&r_, base, entries, entry_size);
  }
  static RingView attach(uint8_t* base) {  // header already set (tests: the client's side)
    auto* hdr = reinterpret_cast<mroce_ring_hdr*>(base);
    RingView v;
    v.r_ = {hdr, base + sizeof(mroce_ring_hdr), hdr->entries, hdr->entry_size};
    return v;
  }

  mroce_ring_hdr* hdr() const { return r_.hdr; }
  uint32_t entries() const { return r_.entries; }
  void* slot(uint32_t index) const { return mroce_ring_slot(&r_, index); }
  uint32_t load_producer() const { return mroce_ring_load_producer(&r_); }
  uint32_t load_consumer() const { return mroce_ring_load_consumer(&r_); }
  void store_producer(uint32_t v) { mroce_ring_publish_producer(&r_, v); }
  void store_consumer(uint32_t v) { mroce_ring_publish_consumer(&r_, v); }
  void announce_sleep() { mroce_ring_announce_sleep(&r_); }
  void end_sleep() { mroce_ring_end_sleep(&r_); }
  bool take_arm() { return mroce_ring_take_arm(&r_); }
  void arm(uint32_t how) { mroce_ring_arm(&r_, how); }  // the application's side (tests)
  void set_overflow() { mroce_ring_set_overflow(&r_); }

 private:
  mroce_ring r_{};
};

}  // namespace metaroce::daemon
