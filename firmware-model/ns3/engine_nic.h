// The MetaRoCE engine (firmware-model/engine, unchanged) hosted in ns-3,
// as the daemon hosts it over AF_XDP: this class is its HAL. Clock is
// Simulator::Now(); the packet port builds real frames (proto::build_frame:
// Ethernet, IPv4 with ECT(0), UDP with the engine's source-port entropy,
// MBTH.., ICRC) and queues them in the simulated NIC; DMA reads and writes
// HostMemory; completions are queued and handed to the workload after the
// engine call returns (docs/firmware-hal.md rule 2); timers are one ns-3
// event at next_deadline().
//
// The NIC: one TX queue per destination QP served round robin, ACK/NACK
// first, one frame at a time onto the wire at line rate (Port). Data frames
// beyond tx_room_bytes make tx_ready() false: the engine then holds its
// requests, and the NIC pumps it again once a frame has left. The queues'
// peak is reported (nic_queue_max_bytes).
// Not modelled: PCIe and DMA latency/bandwidth, host CPU time (doorbells,
// reductions and completion handling take zero time).
#pragma once

#include <cstdint>
#include <deque>
#include <list>
#include <memory>
#include <unordered_map>
#include <vector>

#include "firmware-model/engine/engine.h"
#include "firmware-model/ns3/nic.h"

namespace metaroce::fabric {

struct EngineNicConfig {
  fw::EngineConfig engine;
  uint32_t path_mtu = 4096;
  uint8_t timeout = 14;  // IB encoding (4.096 us x 2^14 = 67 ms)
  uint8_t retry_cnt = 7;
  // Work queue sizes per connection. The engine preallocates every slot
  // (432 B per send and 312 B per receive WQE), which dominates memory
  // at scale, so they are small: a full send queue parks WRs in a host-side
  // backlog (as a collective library's FIFO would) until a completion frees
  // a slot; receives are re-posted as soon as one is consumed. A one-way
  // connection (ConnUse) gets one slot on the side it does not use.
  uint32_t send_depth = 8;
  uint32_t recv_depth = 16;
  // Transmit backpressure (hal.h tx_ready): the engine holds request
  // packets while this many bytes of data frames wait in the NIC; 0 = the
  // NIC queues whatever the engine sends (unbounded, as before).
  uint32_t tx_room_bytes = 64 * 1024;
};

class EngineNic final : public Nic,
                        public fw::ClockInterface,
                        public fw::PacketPortInterface,
                        public fw::DmaInterface,
                        public fw::EventSinkInterface,
                        public fw::RandomInterface {
 public:
  EngineNic(uint32_t host, ns3::Ptr<ns3::PointToPointNetDevice> dev, HostMemory memory,
            const EngineNicConfig& cfg, uint64_t seed, NicHandler* handler);
  ~EngineNic() override;

  // Nic
  uint32_t host() const override { return host_; }
  HostMemory& memory() override { return memory_; }
  uint32_t open(uint32_t peer_host, ConnUse use) override;
  ConnAddr local_addr(uint32_t conn) const override;
  void connect(uint32_t conn, const ConnAddr& peer) override;
  bool write_imm(uint32_t conn, uint64_t addr, uint64_t remote_addr, uint32_t len, uint32_t imm,
                 uint64_t wr_id) override;
  NicStats stats() const override;
  Port& port() override { return *port_; }
  fw::Engine& engine() { return *engine_; }

  // FrameSource / FrameSink (the NIC's MAC side)
  ns3::Ptr<ns3::Packet> next_frame(int port, bool data_ok) override;
  void on_frame(int port, ns3::Ptr<const ns3::Packet> frame) override;

  // HAL
  fw::Time now() const override;
  void send(const fw::OutPacket& p) override;
  bool tx_ready() override;
  bool read(fw::OwnerId owner, uint64_t addr, std::span<uint8_t> dst) override;
  bool write(fw::OwnerId owner, uint64_t addr, std::span<const uint8_t> src) override;
  bool complete(uint32_t cqn, const fw::Completion& wc) override;
  void async_event(fw::EventType type, uint32_t element) override;
  uint64_t next() override;

 private:
  // Lists, not deques: an empty std::deque allocates ~600 B, and there is
  // one of each per connection.
  struct Conn {
    uint32_t qpn = 0;
    uint32_t recv_depth = 0;  // receives kept posted
    ConnAddr peer;
    std::list<fw::SendWr> backlog;  // waiting for a send queue slot
  };
  struct TxQueue {
    std::list<ns3::Ptr<ns3::Packet>> frames;
    bool active = false;
  };
  // Re-arm the timer, hand completions to the workload.
  void after_engine_call(bool timer_fired = false);
  void arm_timer(bool timer_fired);
  void on_timer_event();
  void on_tx_room();
  void post_recvs(uint32_t qpn, uint32_t n);
  void deliver(const fw::Completion& wc);
  void post_backlog(Conn& c);

  uint32_t host_;
  EngineNicConfig cfg_;
  HostMemory memory_;
  NicHandler* handler_;
  uint64_t rng_;
  std::unique_ptr<Port> port_;
  std::unique_ptr<fw::Engine> engine_;
  uint32_t pdn_ = 0, scq_ = 0, rcq_ = 0;
  fw::MrKeys mr_;
  std::vector<Conn> conns_;
  std::unordered_map<uint32_t, uint32_t> conn_of_qpn_;
  // NIC transmit side
  std::deque<ns3::Ptr<ns3::Packet>> control_;
  std::vector<TxQueue> queues_;
  std::unordered_map<uint64_t, uint32_t> queue_of_;
  std::deque<uint32_t> active_;
  uint64_t queued_bytes_ = 0, queued_max_ = 0;
  uint64_t data_bytes_ = 0;    // of which data frames (tx_ready counts these)
  bool tx_refused_ = false;    // tx_ready() said no since the last pump
  bool tx_pump_due_ = false;   // an on_tx_room event is scheduled
  std::vector<uint8_t> tx_buf_, rx_buf_;
  // completions waiting for the engine call to return
  std::vector<fw::Completion> pending_;
  bool draining_ = false;
  uint64_t async_errors_ = 0;
  uint64_t backlogged_ = 0;  // WRs that waited for a send queue slot
  ns3::EventId timer_;
  fw::Time timer_at_ = fw::kNever;
};

}  // namespace metaroce::fabric
