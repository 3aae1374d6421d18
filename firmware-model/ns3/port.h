// One end of a point-to-point link: an ns-3 PointToPointNetDevice (line-rate
// serialization and propagation delay, partitionable over MPI with
// PointToPointRemoteChannel) plus what the device does not model: a pull
// scheduler (the port asks its owner for the next frame only when the wire
// is free, so the owner's queues, not the device's, hold the backlog), PFC
// pause of the data priority, random loss and link failure.
#pragma once

#include <cstdint>
#include <span>

// Individual ns-3 headers: the module headers pull in singleton.h, which
// GCC 12 rejects in C++20 mode (a template-id constructor, DR 2237).
#include "ns3/data-rate.h"
#include "ns3/drop-tail-queue.h"
#include "ns3/mac48-address.h"
#include "ns3/node.h"
#include "ns3/packet.h"
#include "ns3/point-to-point-channel.h"
#include "ns3/point-to-point-net-device.h"
#include "ns3/simulator.h"

namespace metaroce::fabric {

// The owner of a port's transmit queues: a switch or a host NIC.
class FrameSource {
 public:
  virtual ~FrameSource() = default;
  // Next frame to transmit on port `port`, or null. data_ok is false while
  // the data priority is paused by PFC: only control frames may go.
  virtual ns3::Ptr<ns3::Packet> next_frame(int port, bool data_ok) = 0;
};

// Receives the IP frames a port delivers (PFC frames are consumed by the
// port itself).
class FrameSink {
 public:
  virtual ~FrameSink() = default;
  virtual void on_frame(int port, ns3::Ptr<const ns3::Packet> frame) = 0;
};

struct PortCounters {
  uint64_t tx_frames = 0, tx_bytes = 0, rx_frames = 0, rx_bytes = 0;
  uint64_t rx_drop_random_loss = 0;  // dropped by the link's loss model
  uint64_t drop_link_down = 0;       // sent into or arriving on a failed link
  uint64_t pfc_rx_pause = 0, pfc_rx_resume = 0;
  int64_t paused_ns = 0;  // total time the data priority was paused
};

class Port {
 public:
  Port(ns3::Ptr<ns3::PointToPointNetDevice> dev, int index, FrameSource* src, FrameSink* sink);
  Port(const Port&) = delete;
  Port& operator=(const Port&) = delete;

  // The owner queued something: start transmitting if the wire is idle.
  void wake();
  // Loss model on received frames: each is dropped with probability p.
  void set_loss(double p, uint64_t seed);
  // Link down from now on: frames sent or arriving are dropped and counted.
  void fail() { failed_ = true; }
  bool failed() const { return failed_; }
  bool paused() const { return paused_; }
  int index() const { return index_; }
  uint64_t rate_bps() const { return rate_bps_; }
  PortCounters counters() const;  // includes a pause in progress
  ns3::Ptr<ns3::PointToPointNetDevice> device() const { return dev_; }

 private:
  bool on_receive(ns3::Ptr<ns3::NetDevice>, ns3::Ptr<const ns3::Packet> p, uint16_t,
                  const ns3::Address&);
  void on_tx_end(ns3::Ptr<const ns3::Packet>);
  void try_send();
  void set_paused(bool paused);
  bool lose();

  ns3::Ptr<ns3::PointToPointNetDevice> dev_;
  ns3::Address broadcast_;  // GetBroadcast() parses a string on every call
  int index_;
  FrameSource* src_;
  FrameSink* sink_;
  uint64_t rate_bps_;
  bool busy_ = false, failed_ = false, paused_ = false;
  int64_t paused_since_ = 0;
  double loss_ = 0;
  uint64_t rng_ = 0;
  PortCounters counters_;
};

// Connects two fresh devices on nodes a and b with a channel; returns them.
std::pair<ns3::Ptr<ns3::PointToPointNetDevice>, ns3::Ptr<ns3::PointToPointNetDevice>> make_link(
    ns3::Ptr<ns3::Node> a, ns3::Ptr<ns3::Node> b, uint64_t rate_bps, int64_t delay_ns);

}  // namespace metaroce::fabric
