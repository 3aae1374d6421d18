#include "firmware-model/hw/soft_backend.h"

namespace metaroce::hw {


SoftBackend::SoftBackend(const fw::EngineConfig& config, fw::Hal hal) : engine_(config, hal) {}

int SoftBackend::set_port(const fw::PortInfo& port) {
  engine_.set_port(port);
  return 0;
}

int SoftBackend::service(fw::Time now) {
  int work = 0;
  if (now >= engine_.next_deadline()) {
    engine_.on_timer();
    work++;
  }
  engine_.pump();
  return work;
}

int SoftBackend::query_counters(uint32_t qpn, std::vector<NamedCounter>* out) {
  if (qpn == kDeviceCounters) {
    *out = named_counters(engine_.counters());
    return 0;
  }
  fw::Counters c;
  if (int err = engine_.qp_counters(qpn, &c)) return err;
  *out = named_counters(c);
  return 0;
}

}  // namespace metaroce::hw
