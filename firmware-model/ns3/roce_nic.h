// The RoCEv2 baseline NIC, as commodity RNICs behave, written for this
// simulator (not the MetaRoCE engine):
// - one path per QP: the UDP source port is fixed per QP, so ECMP pins the
//   QP to one path;
// - go-back-N: the responder accepts only the expected PSN, answers the
//   first out-of-order packet with a NAK (PSN sequence error) and drops the
//   rest; the requester rewinds to the NAKed PSN, or to the oldest
//   unacknowledged one when its retransmission timer expires;
// - DCQCN (Zhu et al., SIGCOMM 2015) per QP: the receiver (NP) sends at most
//   one CNP per QP per cnp_interval for CE-marked arrivals; the sender (RP)
//   cuts its rate by alpha/2 per CNP and recovers through fast recovery,
//   additive and hyper increase driven by a timer and a byte counter;
// - a NIC scheduler: ACK/NAK/CNP first, then data round robin over QPs
//   whose DCQCN pacing allows a packet; honours PFC pause on the data
//   priority through Port.
//
// Wire format: Ethernet / IPv4 (ECT(0)) / UDP (dport 4791) / BTH (12 bytes,
// IBA layout: opcode, flags, P_Key, dest QP, A-bit | PSN; the PSN field
// holds 31 bits here, never wrapping in a run) / RETH (va of this packet's
// payload, rkey, message length) on data / IMM on the last packet / payload
// / 4-byte ICRC (zero: the simulated links corrupt nothing).
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "firmware-model/ns3/nic.h"

namespace metaroce::fabric {

struct RoceConfig {
  uint32_t mtu = 4096;  // payload bytes per packet
  uint64_t link_bps = 100'000'000'000;
  int64_t base_rtt_ns = 10'000;
  int64_t rto_ns = 1'000'000;  // retransmission timeout (ConnectX min is ~ms)
  uint32_t ack_every = 16;     // A-bit on every 16th packet and on each last
  // DCQCN (SIGCOMM 2015 section 5 values; R_AI scaled from 40 Gb/s)
  double g = 1.0 / 256;
  int64_t cnp_interval_ns = 50'000;    // NP: at most one CNP per QP per 50 us
  int64_t alpha_timer_ns = 55'000;     // RP: alpha decays every 55 us without CNP
  int64_t increase_timer_ns = 55'000;  // RP: rate-increase timer T
  uint64_t byte_counter = 10'000'000;  // RP: rate-increase byte counter B
  uint32_t fast_recovery_steps = 5;    // F
  double rai_fraction = 0.001;         // R_AI = 40 Mb/s at 40 Gb/s
  double rhai_fraction = 0.005;        // R_HAI
  double min_rate_fraction = 0.001;
};

class RoceNic final : public Nic {
 public:
  RoceNic(uint32_t host, ns3::Ptr<ns3::PointToPointNetDevice> dev, HostMemory memory,
          const RoceConfig& cfg, NicHandler* handler);
  ~RoceNic() override;

  uint32_t host() const override { return host_; }
  HostMemory& memory() override { return memory_; }
  uint32_t open(uint32_t peer_host, ConnUse use) override;
  ConnAddr local_addr(uint32_t conn) const override;
  void connect(uint32_t conn, const ConnAddr& peer) override;
  bool write_imm(uint32_t conn, uint64_t addr, uint64_t remote_addr, uint32_t len, uint32_t imm,
                 uint64_t wr_id) override;
  NicStats stats() const override;
  Port& port() override { return *port_; }

  ns3::Ptr<ns3::Packet> next_frame(int port, bool data_ok) override;
  void on_frame(int port, ns3::Ptr<const ns3::Packet> frame) override;

 private:
  struct Wr {
    uint64_t wr_id, laddr, raddr;
    uint32_t len, imm;
    uint32_t first_psn, npkts;
  };
  struct Dcqcn {
    double rc = 0, rt = 0, alpha = 1;
    int64_t last_alpha_ns = 0, last_timer_ns = 0;
    uint64_t bytes_since = 0;
    uint32_t timer_events = 0, byte_events = 0;
  };
  struct Qp {
    ConnAddr peer;
    uint16_t src_port = 0;
    // requester
    std::deque<Wr> sq;
    uint32_t next_psn = 0;  // next PSN to assign to a new WR
    uint32_t snd_nxt = 0, snd_una = 0, max_sent = 0;
    int64_t next_tx_ns = 0;
    int64_t last_progress_ns = 0;
    bool active = false;
    Dcqcn cc;
    // responder
    uint32_t epsn = 0;
    bool nak_pending = false;
    int64_t last_cnp_ns = -1'000'000'000;
  };
  bool has_data(const Qp& q) const { return q.snd_nxt < q.next_psn; }
  ns3::Ptr<ns3::Packet> build_data(uint32_t qi, Qp& q);
  void send_control(const Qp& q, uint8_t opcode, uint8_t syndrome, uint32_t psn);
  void on_data(uint32_t qi, Qp& q, std::span<const uint8_t> f, bool ce);
  void on_ack(Qp& q, uint8_t syndrome, uint32_t psn);
  void on_cnp(Qp& q);
  void dcqcn_tick(Qp& q, int64_t now);
  void dcqcn_increase(Qp& q);
  void activate(uint32_t qi);
  void schedule_wake(int64_t at);
  void check_timeouts();

  uint32_t host_;
  RoceConfig cfg_;
  HostMemory memory_;
  NicHandler* handler_;
  std::unique_ptr<Port> port_;
  std::vector<Qp> qps_;
  std::deque<ns3::Ptr<ns3::Packet>> control_;
  std::deque<uint32_t> active_;
  std::vector<uint8_t> buf_;
  int64_t wake_at_ = -1;
  ns3::EventId wake_, rto_timer_;
  NicStats stats_;
  // Receive drops by reason.
  uint64_t rx_drop_not_roce_ = 0, rx_drop_malformed_ = 0, rx_drop_unknown_qp_ = 0;
  uint64_t rx_drop_out_of_order_ = 0, rx_drop_duplicate_ = 0, rx_drop_bad_address_ = 0;
};

}  // namespace metaroce::fabric
