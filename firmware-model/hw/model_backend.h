// `metaroced --backend hw --hw-device model`: the daemon's transport is
// HwOffloadBackend (the driver) over the BAR0 of a DeviceModel, built by
// the daemon's one BackendFactory (docs/daemon.md §Roles).
#pragma once

#include <functional>
#include <string>

#include "firmware-model/daemon/device.h"
#include "firmware-model/hw/device_model.h"
#include "firmware-model/hw/hw_offload_backend.h"

namespace metaroce::hw {

// The host side of shared virtual addressing for the model: an owner's
// PASID is bound to a second handle on the address space the daemon bound
// when that client connected (ClientMemory::share), so the model's DMA
// reaches exactly the process the control plane checked, never a pid
// resolved again later.
class ModelPasidBinder final : public PasidBinderInterface {
 public:
  explicit ModelPasidBinder(DeviceModel& model) : model_(model) {}
  void set_memory_of(std::function<daemon::ClientMemory*(fw::OwnerId)> f) { memory_of_ = std::move(f); }
  int bind(uint32_t pasid, std::string* why) override;
  void unbind(uint32_t pasid) override { model_.unbind_pasid(pasid); }

 private:
  DeviceModel& model_;
  std::function<daemon::ClientMemory*(fw::OwnerId)> memory_of_;
};

// The driver's waits on a model thread: generous, the machine is shared.
inline constexpr uint64_t kModelWaitTimeoutNs = 30'000'000'000;

// A BackendFactory for HwOffloadBackend over `model` (started): brings it
// up and sets the port. A failed bring-up leaves *error set (the backend
// then answers ENODEV); the caller checks it after building the Device.
daemon::BackendFactory model_backend(DeviceModel* model, std::string* error);

}  // namespace metaroce::hw
