// The device as the driver sees it: BAR0, and what the platform gives a
// driver around it (vfio-pci and the IOMMU). A real driver maps BAR0
// through vfio-pci (VFIO_DEVICE_GET_REGION_INFO + mmap) or UIO and
// implements this with volatile loads/stores (and a write barrier before
// doorbells); tests implement it with a recording fake; the device model
// (device_model.h) implements it with a simulated NIC in its own thread; on
// a host without the hardware, AbsentRegisterSpace answers like an empty
// PCIe slot.
//
// Ordering a driver may rely on (docs/hardware-offload.md §8): every
// write32/write64 is a release (host memory written before it, e.g. a WQE
// and its ring's producer, is visible to the device once the device sees
// the register write); read32 is an acquire.
#pragma once

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <string>

namespace metaroce::hw {

class RegisterSpaceInterface {
 public:
  virtual ~RegisterSpaceInterface() = default;
  virtual uint32_t read32(uint64_t offset) = 0;
  virtual void write32(uint64_t offset, uint32_t value) = 0;
  virtual void write64(uint64_t offset, uint64_t value) = 0;

  // VFIO_IOMMU_MAP_DMA / VFIO_IOMMU_UNMAP_DMA: the device may DMA
  // [iova, iova + len), which is the driver's memory at `host`. Without an
  // IOMMU to program (the fake, an empty slot) there is nothing to do.
  virtual int map_dma(uint64_t /*iova*/, void* /*host*/, size_t /*len*/) { return 0; }
  virtual void unmap_dma(uint64_t /*iova*/) {}
  // VFIO_DEVICE_SET_IRQS: MSI-X vector 0 (the event queue's) signals this
  // eventfd. EOPNOTSUPP: no interrupt; the driver polls its event ring.
  virtual int set_irq(int /*eventfd*/) { return EOPNOTSUPP; }
};

// Reads of an absent device complete as all-ones (PCIe master abort);
// writes go nowhere.
class AbsentRegisterSpace final : public RegisterSpaceInterface {
 public:
  uint32_t read32(uint64_t) override { return 0xffffffffu; }
  void write32(uint64_t, uint32_t) override {}
  void write64(uint64_t, uint64_t) override {}
};

// Shared virtual addressing (iommu_sva_bind_device): before the device
// may DMA into a process's memory (its MRs), the driver binds that
// process's address space to a PASID, and names the PASID as `owner` in
// every admin command for that process's objects. The host side of that
// binding is the platform's (kernel IOMMU driver; in the daemon, its
// client-memory code); the driver only asks for it.
class PasidBinderInterface {
 public:
  virtual ~PasidBinderInterface() = default;
  // Binds the address space of the daemon's client `pasid` (its owner id).
  // 0, or an errno with *why.
  virtual int bind(uint32_t pasid, std::string* why) = 0;
  virtual void unbind(uint32_t pasid) = 0;
};

}  // namespace metaroce::hw
