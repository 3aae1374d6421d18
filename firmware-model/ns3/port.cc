#include "firmware-model/ns3/port.h"

#include <array>

#include "firmware-model/ns3/wire.h"

namespace metaroce::fabric {

using ns3::Ptr;

Port::Port(Ptr<ns3::PointToPointNetDevice> dev, int index, FrameSource* src, FrameSink* sink)
    : dev_(dev), broadcast_(dev->GetBroadcast()), index_(index), src_(src), sink_(sink) {
  ns3::DataRateValue rate;
  dev_->GetAttribute("DataRate", rate);
  rate_bps_ = rate.Get().GetBitRate();
  dev_->SetReceiveCallback(ns3::MakeCallback(&Port::on_receive, this));
  dev_->TraceConnectWithoutContext("PhyTxEnd", ns3::MakeCallback(&Port::on_tx_end, this));
}

PortCounters Port::counters() const {
  PortCounters c = counters_;
  if (paused_) c.paused_ns += ns3::Simulator::Now().GetNanoSeconds() - paused_since_;
  return c;
}

void Port::wake() {
  if (!busy_) try_send();
}

void Port::try_send() {
  while (!busy_) {
    Ptr<ns3::Packet> p = src_->next_frame(index_, !paused_);
    if (!p) return;
    if (failed_) {
      ++counters_.drop_link_down;
      continue;
    }
    busy_ = true;
    ++counters_.tx_frames;
    counters_.tx_bytes += p->GetSize();
    dev_->Send(p, broadcast_, kEtherIpv4);
  }
}

void Port::on_tx_end(Ptr<const ns3::Packet>) {
  busy_ = false;
  // The device clears its current packet after this trace returns; sending
  // from inside the trace would be overwritten, so continue one event later.
  ns3::Simulator::ScheduleNow(&Port::try_send, this);
}

void Port::set_loss(double p, uint64_t seed) {
  loss_ = p;
  rng_ = seed | 1;
}

bool Port::lose() {
  if (loss_ <= 0) return false;
  rng_ ^= rng_ << 13;  // xorshift64: seeded, deterministic per port
  rng_ ^= rng_ >> 7;
  rng_ ^= rng_ << 17;
  return static_cast<double>(rng_ >> 11) * 0x1.0p-53 < loss_;
}

void Port::set_paused(bool paused) {
  const int64_t now = ns3::Simulator::Now().GetNanoSeconds();
  if (paused == paused_) return;
  if (paused_) counters_.paused_ns += now - paused_since_;
  paused_ = paused;
  paused_since_ = now;
  if (!paused_) wake();
}

bool Port::on_receive(Ptr<ns3::NetDevice>, Ptr<const ns3::Packet> p, uint16_t,
                      const ns3::Address&) {
  if (failed_) {
    ++counters_.drop_link_down;
    return true;
  }
  std::array<uint8_t, kHeaderPeek> head{};
  const uint32_t n = p->CopyData(head.data(), head.size());
  const std::span<const uint8_t> h(head.data(), n);
  if (ether_type(h) == kEtherPfc) {
    if (auto quanta = parse_pfc(h)) {
      ++(*quanta ? counters_.pfc_rx_pause : counters_.pfc_rx_resume);
      set_paused(*quanta != 0);
    }
    return true;
  }
  if (lose()) {
    ++counters_.rx_drop_random_loss;
    return true;
  }
  ++counters_.rx_frames;
  counters_.rx_bytes += p->GetSize();
  sink_->on_frame(index_, p);
  return true;
}

std::pair<Ptr<ns3::PointToPointNetDevice>, Ptr<ns3::PointToPointNetDevice>> make_link(
    Ptr<ns3::Node> a, Ptr<ns3::Node> b, uint64_t rate_bps, int64_t delay_ns) {
  auto chan = ns3::CreateObject<ns3::PointToPointChannel>();
  chan->SetAttribute("Delay", ns3::TimeValue(ns3::NanoSeconds(delay_ns)));
  std::array<Ptr<ns3::PointToPointNetDevice>, 2> devs;
  std::array<Ptr<ns3::Node>, 2> nodes{a, b};
  for (int i = 0; i < 2; ++i) {
    devs[i] = ns3::CreateObject<ns3::PointToPointNetDevice>();
    devs[i]->SetAddress(ns3::Mac48Address::Allocate());
    devs[i]->SetDataRate(ns3::DataRate(rate_bps));
    devs[i]->SetMtu(9216);
    // Only the port's own pull scheduler feeds the device: one frame at a
    // time, so the device queue never holds a backlog.
    auto q = ns3::CreateObject<ns3::DropTailQueue<ns3::Packet>>();
    q->SetMaxSize(ns3::QueueSize("2p"));
    devs[i]->SetQueue(q);
    nodes[i]->AddDevice(devs[i]);
    devs[i]->Attach(chan);
  }
  return {devs[0], devs[1]};
}

}  // namespace metaroce::fabric
