#include "firmware-model/hw/model_backend.h"

#include <cerrno>
#include <memory>

namespace metaroce::hw {

int ModelPasidBinder::bind(uint32_t pasid, std::string* why) {
  daemon::ClientMemory* mm = memory_of_ ? memory_of_(pasid) : nullptr;
  if (!mm) {
    *why = "no client " + std::to_string(pasid) + " with an address space";
    return ESRCH;
  }
  std::unique_ptr<daemon::ClientMemory> shared = mm->share(why);
  if (!shared) return EMFILE;
  return model_.bind_pasid(pasid, std::move(shared), why);
}

daemon::BackendFactory model_backend(DeviceModel* model, std::string* error) {
  auto binder = std::make_shared<ModelPasidBinder>(*model);
  return [model, error, binder](const fw::EngineConfig& config, const daemon::BackendEnv& env)
             -> std::unique_ptr<TransportBackend> {
    binder->set_memory_of(env.memory_of);
    HwOptions o;
    o.wait_timeout_ns = kModelWaitTimeoutNs;
    o.binder = binder.get();
    auto hw = std::make_unique<HwOffloadBackend>(*model, *env.events, o);
    std::string why;
    if (hw->bring_up(&why) != 0) {
      *error = why;
    } else if (hw->set_port(config.port) != 0) {
      *error = "hw backend: SET_PORT: " + hw->last_error();
    }
    return hw;
  };
}

}  // namespace metaroce::hw
