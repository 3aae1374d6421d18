#include "firmware-model/daemon/device.h"

#include <sys/random.h>

namespace metaroce::daemon {

BackendFactory soft_nic_backend(io::PacketIo* io, LinkInterface* link) {
  return [io, link](const fw::EngineConfig& config, const BackendEnv& env) {
    SoftNicEnv soft;
    static_cast<BackendEnv&>(soft) = env;
    soft.io = io;
    soft.link = link;
    return std::make_unique<SoftNic>(config, soft);
  };
}

Device::Device(const DeviceConfig& config, io::PacketIo* io, LinkInterface* link, int doorbell_fd)
    : Device(config, soft_nic_backend(io, link), doorbell_fd) {}

// The backend and the pump reach the clients only through the control
// plane's lookups, which run after construction.
Device::Device(const DeviceConfig& config, const BackendFactory& make_backend, int doorbell_fd)
    : pump_(counters_, [this](fw::OwnerId o) { return control_.async_fd_of(o); }),
      cm_(cm::Config{}, config.cm_limits, {}),
      backend_(make_backend(config.engine, backend_env())),
      control_(config, doorbell_fd, *backend_, pump_, counters_, clock_) {
  pump_.set_backend(backend_.get());
  CmRole::Env env;
  if (SoftNic* nic = soft_nic()) env.send = [nic](const fw::OutPacket& p) { nic->send_control(p); };
  env.link = config.link;
  env.node_guid = config.node_guid;
  env.random = [](void*) {
    uint32_t v = 0;
    while (getrandom(&v, sizeof v, 0) != sizeof v) {
    }
    return v;
  };
  cm_.set_env(env);
  cm_.set_port(config.engine.port);
  control_.set_cm(&cm_);
}

BackendEnv Device::backend_env() {
  BackendEnv env;
  env.cm = &cm_;
  env.clock = &clock_;
  env.events = &pump_;
  env.memory_of = [this](fw::OwnerId o) { return control_.memory_of(o); };
  env.counters = &counters_;
  return env;
}

SoftNic* Device::soft_nic() const { return dynamic_cast<SoftNic*>(backend_.get()); }

int Device::poll_once() {
  fw::Time now = read_clock();
  // Rings first: a receive the application posted before its peer's SEND
  // arrives must be in the engine when the SEND is processed, or the SEND
  // is refused with an RNR NAK and the sender backs off for min_rnr_timer
  // (ib_send_bw averaged 68 MB/s from exactly this: 58,759 RNR NAKs).
  int work = pump_.poll_rings();
  work += backend_->service(now);
  work += cm_.poll(read_clock());
  return work;
}

bool Device::prepare_sleep() {
  if (!pump_.prepare_sleep()) return false;
  if (next_deadline() <= now()) {  // the backend has work due (e.g. loopback frames)
    pump_.end_sleep();
    return false;
  }
  return true;
}

}  // namespace metaroce::daemon
