// The firmware HAL: the only ways the outside world reaches the transport
// engine, and the seam where partner silicon takes over (docs/firmware-hal.md).
//
// The engine has no I/O, threads, sockets or wall clock. Its host (the
// soft-NIC daemon, the deterministic test network, a fabric simulator, or a
// hardware backend) implements these interfaces and feeds the engine inputs:
// Engine::on_frame() for packets, Engine::on_timer() when next_deadline()
// has passed, and the verbs calls for doorbells.
#pragma once

#include <cstdint>
#include <span>

#include "firmware-model/engine/types.h"
#include "proto/packet.h"

namespace metaroce::fw {

class ClockInterface {
 public:
  virtual ~ClockInterface() = default;
  virtual Time now() const = 0;
};

// Where the engine's outbound packets go. The engine fills everything but
// the MAC addresses; the host resolves the next hop (netlink neighbour cache
// in the daemon) and frames it. Called synchronously; the packet's payload
// span is only valid during the call.
struct OutPacket {
  proto::IpAddr src_ip;
  proto::IpAddr dst_ip;
  uint16_t src_port = 0;  // per-packet path entropy (docs/protocol.md §2.2)
  uint8_t dscp = 0;
  uint8_t ttl = 64;
  proto::Packet packet;
};

class PacketPortInterface {
 public:
  virtual ~PacketPortInterface() = default;
  virtual void send(const OutPacket& p) = 0;
};

// The DMA engine: reads and writes of host memory in the address space of
// `owner` (the process that registered the MR). The engine has already
// checked keys, bounds and access; a false return means the host could not
// perform the access (the process is gone): the engine reports a local or
// remote operation error.
class DmaInterface {
 public:
  virtual ~DmaInterface() = default;
  virtual bool read(OwnerId owner, uint64_t addr, std::span<uint8_t> dst) = 0;
  virtual bool write(OwnerId owner, uint64_t addr, std::span<const uint8_t> src) = 0;
};

// Completions and asynchronous events. complete() returns false when the
// CQ is full (the engine then raises kCqErr and counts the overflow).
class EventSinkInterface {
 public:
  virtual ~EventSinkInterface() = default;
  virtual bool complete(uint32_t cqn, const Completion& wc) = 0;
  // element: a QP number for QP events, a CQ number for kCqErr.
  virtual void async_event(EventType type, uint32_t element) = 0;
};

class RandomInterface {
 public:
  virtual ~RandomInterface() = default;
  virtual uint64_t next() = 0;
};

// The engine's view of the local port: its addresses (GID table) and MTU.
// Index i of gids is GID index i.
struct PortInfo {
  std::vector<proto::IpAddr> gids;
  uint32_t link_mtu = 1500;  // IP MTU of the interface
  bool active = true;
};

struct Hal {
  ClockInterface& clock;
  PacketPortInterface& packets;
  DmaInterface& dma;
  EventSinkInterface& events;
  RandomInterface& random;
};

}  // namespace metaroce::fw
