// The soft-NIC host: what silicon does around its transport, done in the
// daemon for the software engine. It implements the engine's HAL (packets
// through a PacketIo backend, DMA into clients' memory through ProcessDma,
// entropy from getrandom) and feeds the engine received frames, and it is
// the daemon's TransportBackend when --backend soft: the control plane and
// the queue pump see only that interface (docs/daemon.md §Roles).
// Single-threaded: every method runs on the daemon's loop thread.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <functional>
#include <vector>

#include "firmware-model/daemon/clock.h"
#include "firmware-model/daemon/daemon_counters.h"
#include "firmware-model/daemon/dma.h"
#include "firmware-model/daemon/io/packet_io.h"
#include "firmware-model/hw/soft_backend.h"

namespace metaroce::daemon {

// Next-hop resolution and local link facts (netlink in the daemon).
class CmRole;

class LinkInterface {
 public:
  virtual ~LinkInterface() = default;
  // The MAC to send to for destination ip; false when not (yet) known
  // (resolution has been triggered; the engine's retransmission retries).
  virtual bool resolve(const proto::IpAddr& ip, proto::MacAddr* mac) = 0;
  virtual proto::MacAddr local_mac() const = 0;
};

// What any backend takes from the daemon around it.
struct BackendEnv {
  MonotonicClock* clock = nullptr;
  hw::EventSink* events = nullptr;  // the queue pump
  std::function<ClientMemory*(fw::OwnerId)> memory_of;  // a client's address space
  DaemonCounters* counters = nullptr;  // the soft NIC counts tx drops there
  CmRole* cm = nullptr;  // CM frames go here before the engine (cm_role.h)
};

// ... and what the soft NIC takes besides.
struct SoftNicEnv : BackendEnv {
  io::PacketIo* io = nullptr;  // nullptr: no wire (tests: loopback only)
  LinkInterface* link = nullptr;
};

// The HAL half: constructed before the engine it serves (a base of
// SoftNic, so it exists when the engine's constructor takes references).
class SoftNicHal : public fw::PacketPortInterface, public fw::RandomInterface {
 protected:
  SoftNicHal(const SoftNicEnv& env, const fw::PortInfo& port);
  fw::Hal hal() { return {*env_.clock, *this, dma_, *env_.events, *this}; }

  // Frames the engine sends: built in place in the tx ring, or kept for
  // our own rx when addressed to one of our GIDs (loopback QPs).
  void send(const fw::OutPacket& p) override;
  // Transmit backpressure (hal.h): false while the TX ring has no more
  // than kTxReserve free buffers after a flush; the engine then holds its
  // request and READ response packets (unsent, so not timed and not lost)
  // and the reserve is left for the ACKs and NACKs it still sends.
  // service() keeps the loop polling until the ring has room again.
  bool tx_ready() override;
  // Payload straight into the frame (hal.h §tx_buffer): a frame of the tx
  // ring for a packet to the wire whose next hop is known, the span at its
  // payload offset handed out, the frame finished in place by send() or
  // released unsent by tx_abandon(). Loopback and multicast packets, an
  // unknown next hop, a frame too big and a full ring get no frame: the
  // engine's copy path then reaches send(), which counts and drops them as
  // it did (a next hop tx_buffer() found unknown is not asked again).
  std::span<uint8_t> tx_buffer(const fw::OutPacket& p, size_t len) override;
  void tx_abandon() override;
  // Keys and path seeds: getrandom(2), read in batches (MR keys must not
  // be guessable from earlier ones, docs/engine.md §Objects).
  uint64_t next() override;

  // Buffers kept for the packets the engine sends while held (ACK, NACK,
  // PROBE_REPLY, CM) and for the last QP round started before the check
  // (kPumpBudget packets of a READ responder); at most a quarter of the
  // ring, so that a small ring still carries requests.
  static constexpr uint32_t kTxReserve = 32;

  SoftNicEnv env_;
  ProcessDma dma_;
  std::vector<proto::IpAddr> gids_;  // the port's, for the loopback test
  std::deque<std::vector<uint8_t>> loopback_;  // frames to our own GIDs
  bool tx_held_ = false;  // this pass's tx_ready() said no (counted once per pass)
  // The frame tx_buffer() reserved (the tx ring's current buffer), where its
  // payload starts and the next hop it was resolved for.
  std::span<uint8_t> frame_;
  size_t frame_payload_at_ = 0;
  proto::MacAddr frame_mac_{};
  // The destination tx_buffer() found no next hop for: the send() of that
  // packet counts the drop without resolving again.
  bool unresolved_ = false;
  proto::IpAddr unresolved_ip_;

 private:
  std::array<uint64_t, 64> random_{};
  size_t random_left_ = 0;
};

class SoftNic final : private SoftNicHal, public hw::SoftBackend {
 public:
  SoftNic(const fw::EngineConfig& config, const SoftNicEnv& env);

  int set_port(const fw::PortInfo& port) override;
  // The read-ahead window of a client that posts new work is dropped: it
  // may have rewritten a buffer before reposting it (docs/daemon.md §DMA).
  int post_send(fw::OwnerId owner, uint32_t qpn, const fw::SendWr& wr) override;
  // A new address handle starts resolving its next hop through the
  // kernel's neighbour table at once, so its first datagram finds the MAC.
  int create_ah(fw::OwnerId owner, uint32_t pdn, const fw::AddressVector& av,
                uint32_t* ahn) override;
  // Queued DMA is flushed first; the client's DMA state goes after.
  void destroy_owner(fw::OwnerId owner) override;
  // Received frames, due timers and transmission, then the DMA flush and
  // the completions' publication (data before its completion), then one
  // tx kick for the pass.
  int service(fw::Time now) override;
  // Now, while frames to our own GIDs wait to be received.
  fw::Time next_deadline() const override;
  int wait_fd() const override { return env_.io ? env_.io->wait_fd() : -1; }
  void host_counters(std::vector<hw::NamedCounter>* out) const override;

  const DmaStats& dma_stats() const { return dma_.stats(); }
  // A control frame (CM) from the daemon, by the engine's own path.
  void send_control(const fw::OutPacket& p) { SoftNicHal::send(p); }

 private:
  int poll_rx();

  std::vector<io::RxFrame> rx_batch_;
};

}  // namespace metaroce::daemon
