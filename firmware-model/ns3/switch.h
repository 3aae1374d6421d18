// An output-queued Ethernet/IP switch for the fabric: O(1) routing (a table
// from destination host to an ECMP group of ports, the group's member chosen
// by a salted hash of the 5-tuple, so UDP source-port entropy picks the
// path), egress queues with a per-port or shared (dynamic threshold) buffer,
// ECN marking by threshold or RED, and PFC per ingress port (XOFF above a
// threshold of bytes held from that port, XON below another), so pause can
// spread hop by hop. One data priority and one control priority (PFC and,
// strictly first, nothing else): that is all the scenarios need.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "firmware-model/ns3/port.h"

namespace metaroce::fabric {

struct SwitchConfig {
  // Buffer: a byte limit per egress queue, or one shared pool where a queue
  // may grow to alpha x (free pool) (dynamic threshold, Choudhury-Hahne).
  // With PFC the data class is lossless: queues are bounded by pause, and
  // only the whole pool (shared_buffer_bytes) is a hard limit.
  uint64_t port_buffer_bytes = 1 << 20;
  bool shared_buffer = false;
  uint64_t shared_buffer_bytes = 16 << 20;
  double shared_alpha = 1.0;
  // ECN on ECT frames, decided at enqueue on the egress queue's bytes.
  enum class Ecn { kOff, kThreshold, kRed } ecn = Ecn::kThreshold;
  uint64_t ecn_k_bytes = 100'000;                             // threshold mode
  uint64_t red_kmin_bytes = 5'000, red_kmax_bytes = 200'000;  // RED (DCQCN paper)
  double red_pmax = 0.01;
  // Packet trimming (NDP, UET): a MetaRoCE frame that does not fit is cut to
  // its headers (Ethernet, IPv4, UDP, MBTH), marked with kTrimmedDscp and
  // sent ahead of the data queue, so the receiver can NACK it at once.
  bool trim = false;
  // PFC: per ingress port, bytes held in this switch that came from it.
  bool pfc = false;
  uint64_t pfc_xoff_bytes = 200'000;
  uint64_t pfc_xon_bytes = 180'000;
  // After a link fails, switches keep their routes for this long (failure
  // detection and convergence), then the fabric recomputes them.
  int64_t reroute_delay_ns = 50'000;
};

struct QueueStats {
  // This port's share of SwitchCounters, so reports can name the tier of the
  // queue that dropped or marked (drops and marks: egress; pauses: sent here).
  uint64_t drops = 0, ecn_marked = 0, pfc_tx_pause = 0;
  uint64_t max_bytes = 0;
  double byte_ns = 0;  // time integral of the queue length
  uint64_t bytes = 0;
  int64_t last_ns = 0;
  void change(int64_t now, int64_t delta);
};

struct SwitchCounters {
  uint64_t rx_drop_not_ip = 0;    // not an IPv4/UDP frame
  uint64_t rx_drop_no_route = 0;  // destination host not in the table
  uint64_t drop_buffer_full = 0;  // egress queue or shared pool full
  uint64_t trimmed = 0;           // cut to headers instead of dropped (trim)
  uint64_t ecn_marked = 0;
  uint64_t pfc_tx_pause = 0, pfc_tx_resume = 0;
  uint64_t forwarded = 0;
};

class Switch final : public FrameSource, public FrameSink {
 public:
  Switch(std::string name, int tier, ns3::Ptr<ns3::Node> node, const SwitchConfig& cfg,
         uint32_t salt);
  ~Switch() override;

  // A port toward a lower (up = false) or higher (up = true) tier.
  int add_port(ns3::Ptr<ns3::PointToPointNetDevice> dev, bool up);
  int add_group(std::vector<int> ports);
  void set_route(uint32_t host, int group);
  // Drops every route and group (before the fabric recomputes them).
  void clear_routes();

  Port& port(int i) { return *ports_[i].port; }
  int num_ports() const { return static_cast<int>(ports_.size()); }
  bool port_up(int i) const { return ports_[i].up; }
  const QueueStats& queue(int i) const { return ports_[i].q; }
  const SwitchCounters& counters() const { return counters_; }
  uint64_t buffered_bytes() const { return buffered_; }
  int tier() const { return tier_; }
  const std::string& name() const { return name_; }
  ns3::Ptr<ns3::Node> node() const { return node_; }

  ns3::Ptr<ns3::Packet> next_frame(int port, bool data_ok) override;
  void on_frame(int port, ns3::Ptr<const ns3::Packet> frame) override;

 private:
  struct Entry {
    ns3::Ptr<ns3::Packet> frame;
    int ingress;
  };
  struct PortState {
    std::unique_ptr<Port> port;
    bool up = false;
    std::deque<Entry> data;
    std::deque<ns3::Ptr<ns3::Packet>> control;
    QueueStats q;
    uint64_t ingress_bytes = 0;  // bytes held here that arrived on this port
    bool pause_sent = false;
  };
  int route(const struct FlowKey& k) const;
  bool admit(const PortState& out, uint32_t size) const;
  bool should_mark(uint64_t queue_bytes);
  bool try_trim(PortState& out, ns3::Ptr<const ns3::Packet> frame);
  void send_pfc(int port, bool pause);

  std::string name_;
  int tier_;
  ns3::Ptr<ns3::Node> node_;
  SwitchConfig cfg_;
  uint32_t salt_;
  uint64_t rng_;
  std::vector<PortState> ports_;
  std::vector<std::vector<int>> groups_;
  std::vector<int> route_;  // host -> group, -1 = none
  uint64_t buffered_ = 0;
  SwitchCounters counters_;
};

}  // namespace metaroce::fabric
