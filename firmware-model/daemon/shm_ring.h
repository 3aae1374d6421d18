// Shared-memory rings of the device ABI (firmware-model/uapi/metaroce_abi.h),
// NIC side: a memfd the daemon creates, maps, and passes to the client.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "firmware-model/uapi/metaroce_abi.h"

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

// A view of one ring inside a ShmRegion. Index ownership and ordering are
// as documented in metaroce_abi.h: the producer store-releases `producer`,
// the consumer load-acquires it (and the reverse for `consumer`).
class RingView {
 public:
  RingView() = default;
  RingView(uint8_t* base, uint32_t entries, uint32_t entry_size);  // initializes the header
  static RingView attach(uint8_t* base);                           // header already set

  mroce_ring_hdr* hdr() const { return hdr_; }
  uint32_t entries() const { return entries_; }
  void* slot(uint32_t index) const {
    return slots_ + static_cast<size_t>(index & (entries_ - 1)) * entry_size_;
  }
  uint32_t load_producer() const { return ref(hdr_->producer).load(std::memory_order_acquire); }
  uint32_t load_consumer() const { return ref(hdr_->consumer).load(std::memory_order_acquire); }
  void store_producer(uint32_t v) const { ref(hdr_->producer).store(v, std::memory_order_release); }
  void store_consumer(uint32_t v) const { ref(hdr_->consumer).store(v, std::memory_order_release); }

  static std::atomic_ref<uint32_t> ref(uint32_t& v) { return std::atomic_ref<uint32_t>(v); }

 private:
  mroce_ring_hdr* hdr_ = nullptr;
  uint8_t* slots_ = nullptr;
  uint32_t entries_ = 0;
  uint32_t entry_size_ = 0;
};

}  // namespace metaroce::daemon
