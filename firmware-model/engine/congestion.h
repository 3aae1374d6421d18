// Congestion control and multipath policy, behind interfaces the transport
// engine calls (docs/congestion.md). Pure logic: no I/O, no clock of its own;
// every input carries the time.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "firmware-model/engine/types.h"

namespace metaroce::fw {

// What one acknowledgement tells the sender (docs/protocol.md §3.7).
struct AckSample {
  Time now = 0;
  uint64_t newly_acked_bytes = 0;
  Time rtt = 0;              // 0 when this ACK gives no valid sample
  uint8_t path = 0;          // path of the packet that triggered the ACK
  bool ce = false;           // that packet was CE-marked
  uint16_t ce_count = 0;     // CE marks since the previous ACK
  uint32_t credit = 0;       // receiver grant in packets; 0 = no limit
  uint64_t bytes_in_flight = 0;
};

// Sender-side window control, one instance per QP (requester).
class CongestionControlInterface {
 public:
  virtual ~CongestionControlInterface() = default;
  virtual void on_ack(const AckSample& s) = 0;
  virtual void on_loss(Time now, uint64_t lost_bytes) = 0;  // SACK-detected loss
  virtual void on_timeout(Time now) = 0;                    // retransmission timer fired
  // The last timeout was spurious: the first ACK after it was triggered by
  // a packet sent before it (the ACKs were late, nothing was lost). Undo
  // what on_timeout did. Default: keep the decrease.
  virtual void on_spurious_timeout(Time now) { (void)now; }
  virtual uint64_t window_bytes() const = 0;                // max bytes in flight
  // Earliest time the next packet of `bytes` may leave (pacing); <= now when
  // it may leave now.
  virtual Time next_send_time(Time now, uint32_t bytes) = 0;
  virtual const char* name() const = 0;
  // Observability: the rate the window and pacing allow, bits/s; 0 when
  // unknown (no RTT sample yet, or an algorithm that does not say).
  virtual uint64_t pacing_rate_bps() const { return 0; }
};

// Per-packet path choice over `num_paths` entropies, one instance per QP
// (in trains of `train` packets per choice, see MultipathTuning::train).
class PathSelectorInterface {
 public:
  virtual ~PathSelectorInterface() = default;
  virtual uint8_t next_path(Time now) = 0;
  virtual void on_ack(uint8_t path, Time rtt, bool ce, Time now) = 0;
  virtual void on_loss(uint8_t path, Time now) = 0;
  virtual uint32_t num_paths() const = 0;
  // Observability: the share of sends path `path` would get at `now`, in
  // (0, 1] before normalisation; 1 for selectors without weights.
  virtual double path_weight(uint8_t path, Time now) const { return 1.0; }
};

// Receiver-side credit for incast, one per device: how many packets one QP's
// sender may keep in flight towards this receiver, shared among the QPs that
// are currently receiving.
class ReceiverCreditInterface {
 public:
  virtual ~ReceiverCreditInterface() = default;
  virtual uint32_t grant(uint32_t qpn, Time now, bool ce) = 0;  // 0 = no limit
  virtual void forget(uint32_t qpn) = 0;                        // QP destroyed
};

struct CongestionParams {
  uint32_t mtu_bytes = 1024;
  uint64_t link_bps = 25'000'000'000;  // the local port's line rate
  Time base_rtt = 10'000;              // ns, fabric base RTT estimate
  // Algorithm-specific tuning lives in the implementation's own struct,
  // documented in docs/congestion.md.
};

// Factories. name "default" selects the collective-traffic algorithm; an
// unknown name returns nullptr.
std::unique_ptr<CongestionControlInterface> make_congestion_control(const std::string& name,
                                                                    const CongestionParams& p);
std::unique_ptr<PathSelectorInterface> make_path_selector(uint32_t num_paths, uint64_t seed,
                                                          uint32_t train = 1);
std::unique_ptr<ReceiverCreditInterface> make_receiver_credit(const CongestionParams& p);

}  // namespace metaroce::fw
