// What a workload sees of a host: its memory and an RDMA NIC with reliable
// connections that carry RDMA WRITE WITH IMMEDIATE, as collective libraries
// use them (NCCL's IB transport writes data and signals with the immediate).
// Implemented by EngineNic (the MetaRoCE engine, unchanged) and RoceNic (the
// RoCEv2 baseline model).
#pragma once

#include <cstdint>
#include <string>

#include "firmware-model/ns3/host_memory.h"
#include "firmware-model/ns3/port.h"

namespace metaroce::fabric {

// Where a connection's far end is, exchanged out of band at setup (as
// RDMA CM or a bootstrap socket would).
struct ConnAddr {
  uint32_t host = 0;
  uint32_t qpn = 0;
  uint32_t rkey = 0;
};

class NicHandler {
 public:
  virtual ~NicHandler() = default;
  // A WRITE_WITH_IMM on local connection `conn` has been placed in memory.
  virtual void on_recv(uint32_t host, uint32_t conn, uint32_t imm, uint32_t len) = 0;
  // The local WRITE `wr_id` completed (acknowledged by the peer). ok=false:
  // it failed (the run is then an error).
  virtual void on_send_done(uint32_t host, uint32_t conn, uint64_t wr_id, bool ok) = 0;
};

struct NicStats {
  uint64_t tx_packets = 0, tx_bytes = 0, rx_packets = 0;
  uint64_t retransmits = 0;  // packets sent again
  uint64_t timeouts = 0;
  uint64_t naks_sent = 0;  // go-back-N NAKs (RoCEv2) / NACKs
  uint64_t ecn_marks_seen = 0;
  uint64_t cnps = 0;                 // RoCEv2: CNPs sent
  uint64_t errors = 0;               // failed work requests
  uint64_t rx_drop_parse = 0;        // frames the NIC could not parse (MetaRoCE: ICRC, cut)
  uint64_t nic_queue_max_bytes = 0;  // largest backlog in the NIC's TX queues
  std::string detail;                // implementation-specific counters, "k=v ..."
};

// Which way a connection carries messages, so a NIC sizes its queues for
// that: a one-way connection needs no receive queue at the sender and no
// send queue at the receiver (2 million QPs at 1,024 hosts).
enum class ConnUse { kBoth, kSend, kRecv };

class Nic : public FrameSource, public FrameSink {
 public:
  ~Nic() override = default;
  virtual uint32_t host() const = 0;
  virtual HostMemory& memory() = 0;
  // Creates a connection's local end; returns the local connection id.
  virtual uint32_t open(uint32_t peer_host, ConnUse use) = 0;
  virtual ConnAddr local_addr(uint32_t conn) const = 0;
  // Connects the local end to the peer's (both sides call it).
  virtual void connect(uint32_t conn, const ConnAddr& peer) = 0;
  // RDMA WRITE WITH IMMEDIATE of local [addr, addr+len) to the peer's
  // remote_addr. Returns false if the NIC refused the work request.
  virtual bool write_imm(uint32_t conn, uint64_t addr, uint64_t remote_addr, uint32_t len,
                         uint32_t imm, uint64_t wr_id) = 0;
  virtual NicStats stats() const = 0;
  virtual Port& port() = 0;
};

}  // namespace metaroce::fabric
