// A host in the test network: one metaroce::fw::Engine (one NIC port) and
// the HAL implemented over the simulation: virtual clock, frames into the
// uplink, in-process memory per owner, completions recorded per CQ, and a
// seeded random source.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "firmware-model/engine/engine.h"
#include "tests/simnet/link.h"
#include "tests/simnet/rng.h"
#include "tests/simnet/scheduler.h"

namespace metaroce::simnet {

class Host final : public Node,
                   public fw::ClockInterface,
                   public fw::PacketPortInterface,
                   public fw::DmaInterface,
                   public fw::EventSinkInterface,
                   public fw::RandomInterface {
 public:
  Host(std::string name, Scheduler& sched, uint64_t seed, proto::IpAddr ip,
       const fw::EngineConfig& cfg);
  ~Host() override;

  const std::string& name() const { return name_; }
  const proto::IpAddr& ip() const { return ip_; }
  fw::Engine& engine() { return *engine_; }
  void set_uplink(Link* l) { uplink_ = l; }
  Link* uplink() const { return uplink_; }

  // Memory of `owner`: a fresh zeroed buffer, and direct access to it.
  uint64_t alloc(fw::OwnerId owner, size_t size);
  std::span<uint8_t> mem(fw::OwnerId owner, uint64_t addr, size_t len);

  // Completions recorded per CQ, in the order the engine produced them.
  std::deque<fw::Completion>& cq(uint32_t cqn) { return cqs_[cqn]; }
  void set_cq_capacity(uint32_t cqn, size_t n) { cq_cap_[cqn] = n; }
  std::vector<std::pair<fw::EventType, uint32_t>>& async_events() { return events_; }

  // After doorbells: let the engine transmit and re-arm its timer.
  void kick();
  // Drop every frame arriving at (mute_rx) or leaving (mute_tx) this host.
  bool mute_rx = false, mute_tx = false;
  uint64_t frames_rx = 0, frames_tx = 0;

  // Node
  void receive(Frame frame) override;
  // ClockInterface
  fw::Time now() const override { return sched_.now(); }
  // PacketPortInterface
  void send(const fw::OutPacket& p) override;
  // DmaInterface
  bool read(fw::OwnerId owner, uint64_t addr, std::span<uint8_t> dst) override;
  bool write(fw::OwnerId owner, uint64_t addr, std::span<const uint8_t> src) override;
  // EventSinkInterface
  bool complete(uint32_t cqn, const fw::Completion& wc) override;
  void async_event(fw::EventType type, uint32_t element) override;
  // RandomInterface
  uint64_t next() override { return rng_.next(); }

 private:
  void arm_timer(bool just_fired);
  void on_timer_event(Time t);
  std::span<uint8_t> find(fw::OwnerId owner, uint64_t addr, size_t len);

  std::string name_;
  Scheduler& sched_;
  Rng rng_;
  proto::IpAddr ip_;
  Link* uplink_ = nullptr;
  std::unique_ptr<fw::Engine> engine_;
  Time timer_at_ = ~Time{0};
  std::map<fw::OwnerId, std::map<uint64_t, std::vector<uint8_t>>> memory_;
  std::map<fw::OwnerId, uint64_t> next_addr_;
  std::map<uint32_t, std::deque<fw::Completion>> cqs_;
  std::map<uint32_t, size_t> cq_cap_;
  std::vector<std::pair<fw::EventType, uint32_t>> events_;
  std::vector<uint8_t> tx_buf_;
};

}  // namespace metaroce::simnet
