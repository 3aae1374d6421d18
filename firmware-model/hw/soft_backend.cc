#include "firmware-model/hw/soft_backend.h"

namespace metaroce::hw {

std::vector<NamedCounter> named_counters(const fw::Counters& c) {
  return {
      {"tx_packets", c.tx_packets},
      {"tx_bytes", c.tx_bytes},
      {"rx_packets", c.rx_packets},
      {"rx_bytes", c.rx_bytes},
      {"rx_drop_parse", c.rx_drop_parse},
      {"rx_drop_bad_icrc", c.rx_drop_bad_icrc},
      {"rx_drop_unknown_qp", c.rx_drop_unknown_qp},
      {"rx_drop_qp_state", c.rx_drop_qp_state},
      {"rx_drop_duplicate", c.rx_drop_duplicate},
      {"rx_drop_out_of_window", c.rx_drop_out_of_window},
      {"rx_nak_access", c.rx_nak_access},
      {"rx_nak_invalid", c.rx_nak_invalid},
      {"rx_nak_rnr", c.rx_nak_rnr},
      {"tx_retransmits", c.tx_retransmits},
      {"fast_retransmits", c.fast_retransmits},
      {"timeouts", c.timeouts},
      {"rnr_retries", c.rnr_retries},
      {"ecn_marks_seen", c.ecn_marks_seen},
      {"atomic_replays", c.atomic_replays},
      {"cq_overflows", c.cq_overflows},
      {"local_errors", c.local_errors},
  };
}

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
