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
  // Transmit backpressure: false while the host's transmit queue is full.
  // The engine then starts no further request or READ response packets
  // (ACK, NACK and PROBE_REPLY still go out through send(): they answer
  // what arrived) until the host calls Engine::pump() again, which it
  // should do once it has room. A packet's MBTH timestamp is taken when it
  // is handed to send(), so packets that wait in a host queue inflate every
  // RTT sample and with it the sender's recovery timers; held in the
  // engine they wait unsent. Default: never full (the host queues).
  virtual bool tx_ready() { return true; }

  // Payload straight into the frame (docs/firmware-hal.md §Transmit
  // buffers). Optional: the defaults say "no buffer", and the engine then
  // gathers the payload into its own scratch buffer and send() copies it
  // into a frame, as a host that copies anyway (a simulator) wants.
  //
  // For a packet whose payload comes from host memory (requests, READ
  // responses, datagrams, retransmissions), the engine asks for the
  // payload's place in a frame first: tx_buffer(p, len) gets the packet
  // with its addresses and headers (p.packet.payload empty; only the
  // opcode and the address family fix the layout, other header fields may
  // still change) and returns len writable bytes at the payload offset of a
  // frame the port has reserved for it, or an empty span when it has none
  // (no zero-copy, ring full, next hop unknown, frame too big, a loopback
  // or multicast destination: the copy path, whose send() then counts and
  // drops as it would). The engine has the DMA read the payload straight
  // into the span, then ends the reservation with exactly one of:
  //   send(p) with p.packet.payload == that span: the port writes the
  //     headers and the ICRC around the payload in place and sends the
  //     frame (the MBTH timestamp was taken before the read, as on the
  //     copy path);
  //   tx_abandon(): the read failed (or the packet is not sent after
  //     all); the port releases the frame unsent (the engine counts it).
  // Between tx_buffer() and the call that ends it the engine calls no
  // other method of the port; the span is invalid after it. tx_ready()
  // remains the backpressure signal: a port whose tx_buffer() finds no
  // room lets the copy path's send() handle the packet as today.
  virtual std::span<uint8_t> tx_buffer(const OutPacket& p, size_t len) { return {}; }
  virtual void tx_abandon() {}
};

// The DMA engine: reads and writes of host memory in the address space of
// `owner` (the process that registered the MR). The engine has already
// checked keys, bounds and access; a false return means the host could not
// perform the access (the process is gone, the page is unmapped): the engine
// reports a local or remote operation error.
//
// Freshness: read() returns host memory as it is at the moment of the call,
// as a NIC reads host memory when it serves a request. The engine uses it
// for everything a remote peer or the host CPU may change at any time:
// responder READs and atomics. read_payload() gathers the payload of a work
// request the owner has posted; verbs forbid changing such a buffer until
// the request completes, so a host may serve it from a read-ahead window
// filled after the request was posted. Its default is read().
//
// Placement: write() may queue the copy. commit(owner) makes every write
// queued for `owner` land and returns false if any did not. The engine
// calls commit() before it acknowledges placed data, answers an atomic or
// completes a receive, so it never acknowledges data that was not placed
// (docs/security.md); a false return becomes a remote access error for
// that operation. A host whose write() is synchronous keeps the default.
class DmaInterface {
 public:
  virtual ~DmaInterface() = default;
  virtual bool read(OwnerId owner, uint64_t addr, std::span<uint8_t> dst) = 0;
  virtual bool read_payload(OwnerId owner, uint64_t addr, std::span<uint8_t> dst) {
    return read(owner, addr, dst);
  }
  virtual bool write(OwnerId owner, uint64_t addr, std::span<const uint8_t> src) = 0;
  virtual bool commit(OwnerId owner) { return true; }
  // False once owner's address space is gone (the process exited or
  // exec'd; learnt from a failed access). Its QPs then behave as already
  // destroyed, as on a NIC whose driver tears down a dead process's QPs:
  // inbound packets are dropped without a response (rx_drop_owner_gone)
  // and a placement that failed for that reason is not NACKed, so peers see
  // the ordinary retry path (IBV_WC_RETRY_EXC_ERR) while the host tears the
  // owner down.
  virtual bool owner_alive(OwnerId owner) { return true; }
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
