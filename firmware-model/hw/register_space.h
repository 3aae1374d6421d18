// The device's BAR0 as the driver sees it. A real driver maps BAR0 through
// vfio-pci (VFIO_DEVICE_GET_REGION_INFO + mmap) or UIO and implements this
// with volatile loads/stores (and a write barrier before doorbells); tests
// implement it with a recording fake; on a host without the hardware,
// AbsentRegisterSpace answers like an empty PCIe slot.
#pragma once

#include <cstdint>

namespace metaroce::hw {

class RegisterSpaceInterface {
 public:
  virtual ~RegisterSpaceInterface() = default;
  virtual uint32_t read32(uint64_t offset) = 0;
  virtual void write32(uint64_t offset, uint32_t value) = 0;
  virtual void write64(uint64_t offset, uint64_t value) = 0;
};

// Reads of an absent device complete as all-ones (PCIe master abort);
// writes go nowhere.
class AbsentRegisterSpace final : public RegisterSpaceInterface {
 public:
  uint32_t read32(uint64_t) override { return 0xffffffffu; }
  void write32(uint64_t, uint32_t) override {}
  void write64(uint64_t, uint64_t) override {}
};

}  // namespace metaroce::hw
