// The device under test as a verbs application sees it: any rdma-core
// device, through its own provider. The tester registers one MR over its
// own memory (the DUT places into it and reads from it) and creates one RC
// QP per case, connected to a peer QPN the tester impersonates.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "proto/packet.h"

namespace metaroce::conform {

struct QpOptions {
  uint32_t peer_qpn = 0;      // filled by Ctx::connect
  uint32_t rq_psn = 1000;     // first PSN the tester sends
  uint32_t sq_psn = 5000;     // first PSN the DUT sends
  uint8_t timeout = 14;       // IB encoding (14: 67 ms)
  uint8_t retry_cnt = 7;
  uint8_t rnr_retry = 7;
  uint8_t min_rnr_timer = 1;
  uint8_t max_rd_atomic = 4, max_dest_rd_atomic = 4;
  bool stop_at_rtr = false;   // leave the QP in RTR (receive only)
  uint32_t max_send_wr = 64, max_recv_wr = 64;
  // IBV_QPT_UC: connected without ACKs (no RC-only attributes);
  // IBV_QPT_UD: the QP's Q_Key is `qkey`, its sends go through an address
  // handle to (peer, peer_qpn) with remote Q_Key `remote_qkey`.
  ibv_qp_type type = IBV_QPT_RC;
  uint32_t qkey = 0x1234567, remote_qkey = 0x7654321;
};

class DutQp {
 public:
  DutQp(ibv_qp* qp, ibv_cq* scq, ibv_cq* rcq) : qp_(qp), scq_(scq), rcq_(rcq) {}
  ~DutQp();
  uint32_t qpn() const { return qp_->qp_num; }
  ibv_qp* qp() { return qp_; }
  // Posts one WR of `op` with one SGE over [off, off+len) of the MR
  // (len 0: no SGE). 0 or the provider's errno.
  int post_send(ibv_wr_opcode op, uint64_t wr_id, uint64_t off, uint32_t len, uint64_t remote_va = 0,
                uint32_t rkey = 0, uint32_t imm_be = 0, uint64_t compare_add = 0, uint64_t swap = 0,
                unsigned flags = IBV_SEND_SIGNALED);
  int post_recv(uint64_t wr_id, uint64_t off, uint32_t len);
  // The next completion of the send / receive CQ within `seconds`.
  std::optional<ibv_wc> send_wc(double seconds = 30) { return poll(scq_, seconds); }
  std::optional<ibv_wc> recv_wc(double seconds = 30) { return poll(rcq_, seconds); }
  int modify(ibv_qp_attr* a, int mask) { return ibv_modify_qp(qp_, a, mask); }
  // Joins the multicast group `group` (its GID). 0 or the provider's errno.
  int attach_mcast(const proto::IpAddr& group);
  ibv_qp_state state();

  // Bound to the MR for post_*.
  uint8_t* mem = nullptr;
  uint32_t lkey = 0;
  // UD: the address handle, QPN and Q_Key post_send sends to.
  ibv_ah* ah = nullptr;
  uint32_t ud_qpn = 0, ud_qkey = 0;

 private:
  std::optional<ibv_wc> poll(ibv_cq* cq, double seconds);
  ibv_qp* qp_;
  ibv_cq* scq_;
  ibv_cq* rcq_;
};

class Dut {
 public:
  // Opens `device` (empty: the first one) and registers `mem_bytes` of
  // memory with every access right. nullptr + *error on failure.
  static std::unique_ptr<Dut> open(const std::string& device, size_t mem_bytes, std::string* error);
  // Uses the GID of `ip` (IPv4-mapped for IPv4) as the QPs' source. False
  // if the DUT has none.
  bool select_gid(const proto::IpAddr& ip);
  ~Dut();
  // A QP in RTS (or RTR) towards (peer, opts.peer_qpn), or nullptr + *error.
  std::unique_ptr<DutQp> connect(const proto::IpAddr& peer, ibv_mtu mtu, const QpOptions& opts,
                                 std::string* error);
  std::string name() const;
  // An address handle to `dest` from the selected GID, or nullptr.
  ibv_ah* create_ah(const proto::IpAddr& dest);
  // Port 1's active MTU in bytes (the UD MTU, docs/protocol.md §13.3); 0 on error.
  uint32_t active_mtu_bytes();
  int gid_index() const { return gid_index_; }
  // Every GID of port 1 that carries an IP address (IPv4-mapped or not).
  std::vector<proto::IpAddr> gid_addresses();

  uint8_t* mem() { return mem_.data(); }
  uint64_t va(uint64_t off) const { return reinterpret_cast<uint64_t>(mem_.data()) + off; }
  uint32_t rkey() const { return mr_->rkey; }
  uint32_t lkey() const { return mr_->lkey; }
  ibv_pd* pd() { return pd_; }  // memory-window cases register their own MR in it
  size_t mem_size() const { return mem_.size(); }

 private:
  Dut() = default;
  std::unique_ptr<DutQp> ud_ready(std::unique_ptr<DutQp> q, const proto::IpAddr& peer, const QpOptions& o,
                                  std::string* error);
  ibv_context* ctx_ = nullptr;
  ibv_pd* pd_ = nullptr;
  ibv_mr* mr_ = nullptr;
  std::vector<uint8_t> mem_;
  int gid_index_ = -1;
};

}  // namespace metaroce::conform
