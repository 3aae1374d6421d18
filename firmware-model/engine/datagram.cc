// The datagram service of UD QPs (docs/protocol.md §13, docs/engine.md
// §Datagrams). A UD message is one packet: each work request names its
// destination (address handle, QPN, Q_Key); nothing is acknowledged,
// retransmitted or held for order. Receives are consumed in posting order,
// one per datagram, with the 40-byte GRH in front of the payload as RoCE v2
// does. Every datagram that is not delivered is counted by its reason.
#include <cerrno>
#include <cstring>

#include "firmware-model/engine/qp.h"
#include "firmware-model/engine/qp_state.h"
#include "firmware-model/engine/srq.h"
#include "proto/opcode.h"

namespace metaroce::fw::datagram {
namespace {

// §13.4: a Q_Key with the high bit set is controlled (privileged). A work
// request asking for one sends the QP's own Q_Key instead, so an
// unprivileged process can never put a controlled Q_Key on the wire unless
// its QP was given one (which the host allows only to privileged users).
constexpr uint32_t kControlledQkey = 0x80000000u;
constexpr uint32_t kQpnMask = 0xFFFFFF;

const Ah* find_ah(Core& c, const Qp& qp, uint32_t ahn) {
  const Ah* ah = c.ahs().get(ahn);
  if (!ah || ah->owner != qp.owner || ah->pdn != qp.init.pdn) return nullptr;
  return ah;
}

// Why a WQE cannot leave (kSuccess: it can). The AH and the lkeys are
// looked up now, not at post: either may be gone by the time it starts.
WcStatus check_wqe(Core& c, Qp& qp, const SendWqe& w, const Ah** ah) {
  if (w.status != WcStatus::kSuccess) return w.status;
  if (WcStatus s = requester::check_local(c, qp, w); s != WcStatus::kSuccess) return s;
  *ah = find_ah(c, qp, w.wr.ah);
  if (!*ah) {
    c.bump(&qp, &Counters::ud_tx_unknown_ah);
    return WcStatus::kLocQpOpErr;
  }
  if (w.length > qp.mtu) {
    c.bump(&qp, &Counters::ud_tx_oversize);
    return WcStatus::kLocLenErr;
  }
  return WcStatus::kSuccess;
}

// §13.6: a send that fails puts the send queue in SQE. The failing WR
// completes with its status, the ones after it are flushed; receives go
// on, and modify_qp SQE -> RTS resumes sending.
void fail(Core& c, Qp& qp, WcStatus status) {
  c.bump(&qp, &Counters::local_errors);
  completer::emit(c, qp, qp.sqe(qp.sq_head), status);
  for (++qp.sq_head; qp.sq_head != qp.sq_tail; ++qp.sq_head)
    completer::emit(c, qp, qp.sqe(qp.sq_head), WcStatus::kWrFlushErr);
  qp.sq_next = qp.sq_head;
  qp.state = QpState::kSqe;
}

// Gathers the payload and sends the datagram. False: the host could not
// read the WR's memory.
bool send_one(Core& c, Qp& qp, const SendWqe& w, const Ah& ah) {
  const SendWr& wr = w.wr;
  const bool inl = wr.send_flags & kSendInline;
  if (!inl) c.commit(qp.owner);  // a host read may flush queued writes: learn their fate first
  proto::Packet p;
  p.mbth.opcode = wr.opcode == WrOpcode::kSendImm ? proto::Opcode::kUdSendImm
                                                  : proto::Opcode::kUdSend;
  p.mbth.flags = proto::kFlagLast | ((wr.send_flags & kSendSolicited) ? proto::kFlagSolicited : 0);
  p.mbth.dest_qpn = wr.remote_qpn & kQpnMask;
  p.mbth.psn = qp.ud_psn;
  p.mbth.timestamp = static_cast<uint32_t>(c.now());
  const uint8_t path = qp.paths->next_path(c.now());  // per-packet entropy (§13.3)
  p.mbth.path_id = path;
  p.deth.qkey = (wr.remote_qkey & kControlledQkey) ? qp.attr.qkey : wr.remote_qkey;
  p.deth.src_qpn = qp.qpn;
  p.imm = wr.imm;
  // Straight into the port's frame when it has one (hal.h §tx_buffer).
  std::span<uint8_t> buf = c.tx_payload(qp, ah.av, p, path, w.length);
  if (inl) {
    if (!buf.empty()) std::memcpy(buf.data(), wr.inline_data.data(), buf.size());
  } else if (!sgl_read(c, qp.owner, wr.sg.data(), wr.num_sge, 0, buf)) {
    c.tx_drop(&qp, buf);
    return false;
  }
  ++qp.ud_psn;
  p.payload = buf;
  c.send_to(qp, ah.av, p, path);
  c.bump(&qp, &Counters::ud_tx_datagrams);
  return true;
}

// Why a datagram is not for this QP's receive queue: the counter of its
// reason, or nullptr when it is to be delivered.
uint64_t Counters::*refusal(const Qp& qp, const proto::Packet& p) {
  if (!is_datagram(p.mbth.opcode)) return &Counters::rx_drop_ud_wrong_type;
  if (qp.state == QpState::kReset || qp.state == QpState::kInit || qp.state == QpState::kErr)
    return &Counters::rx_drop_qp_state;
  if (p.deth.qkey != qp.attr.qkey) return &Counters::rx_drop_ud_qkey;
  if (p.mbth.offset != 0 || !(p.mbth.flags & proto::kFlagLast))
    return &Counters::rx_drop_ud_malformed;
  if (p.payload.size() > qp.mtu) return &Counters::rx_drop_ud_oversize;
  return nullptr;
}

// The receive for a datagram at rq_head: the QP's own, or one taken from
// its SRQ into its window (srq::refill, the mechanism RC and UC use).
// nullptr: the counter of why there is none (UD has no RNR: a drop).
uint64_t Counters::*bind_recv(Core& c, Qp& qp) {
  if (qp.srq && qp.rq_head == qp.rq_tail) srq::refill(c, qp, qp.rq_head);
  if (qp.rq_head != qp.rq_tail) return nullptr;
  return qp.srq ? &Counters::rx_drop_ud_srq_empty : &Counters::rx_drop_ud_no_recv;
}

// An SRQ's receives are checked against the SRQ's PD, as the responder does.
bool recv_keys_ok(Core& c, const Qp& qp, const RecvWqe& r) {
  const uint32_t pdn = qp.srq ? qp.srq->pdn : qp.init.pdn;
  for (uint32_t i = 0; i < r.wr.num_sge; ++i) {
    const Sge& s = r.wr.sg[i];
    if (c.mrs().check_local(qp.owner, pdn, s.lkey, s.addr, s.length,
                            kAccessLocalWrite) != KeyCheck::kOk)
      return false;
  }
  return true;
}

// Writes GRH and payload into the receive; its status.
WcStatus place(Core& c, Qp& qp, const RecvWqe& r, const proto::Frame& f) {
  const proto::Packet& p = f.packet;
  if (proto::kGrhLen + p.payload.size() > r.capacity) {
    c.bump(&qp, &Counters::rx_drop_ud_recv_too_small);
    return WcStatus::kLocLenErr;
  }
  if (!recv_keys_ok(c, qp, r)) {
    c.bump(&qp, &Counters::rx_drop_ud_recv_fault);
    return WcStatus::kLocProtErr;
  }
  c.commit(qp.owner);  // earlier writes' fate first: the commit below is this datagram's
  const auto grh = proto::build_grh(f.headers, proto::transport_length(p));
  const Sge* sg = r.wr.sg.data();
  if (!sgl_write(c, qp.owner, sg, r.wr.num_sge, 0, grh) ||
      !sgl_write(c, qp.owner, sg, r.wr.num_sge, proto::kGrhLen, p.payload) ||
      !c.hal().dma.commit(qp.owner)) {
    c.bump(&qp, &Counters::rx_drop_ud_recv_fault);
    return WcStatus::kLocAccessErr;
  }
  return WcStatus::kSuccess;
}

// What a RoCE v2 NIC reports in a UD completion's `sl` (there are no IB
// service levels on Ethernet): the received frame's network header type,
// bit 3 "has a UDP header" and bits 2:0 the L3 type, 1 IPv6, 2 IPv4, as
// mlx5 fills it (Annex A17.4.5.1; UCX reads it to find the GRH's DGID).
uint8_t roce_packet_type(const proto::FrameHeaders& h) {
  constexpr uint8_t kUdp = 0x8, kIpv6 = 0x1, kIpv4 = 0x2;
  return kUdp | (h.src_ip.is_v4() ? kIpv4 : kIpv6);
}

void deliver(Core& c, Qp& qp, const proto::Frame& f) {
  const proto::Packet& p = f.packet;
  RecvWqe& r = qp.rqe(qp.rq_head++);
  Completion wc;
  wc.wr_id = r.wr.wr_id;
  wc.status = place(c, qp, r, f);
  wc.opcode = WcOpcode::kRecv;
  wc.qp_num = qp.qpn;
  if (wc.status == WcStatus::kSuccess) {
    const bool imm = p.mbth.opcode == proto::Opcode::kUdSendImm;
    wc.byte_len = static_cast<uint32_t>(proto::kGrhLen + p.payload.size());
    wc.src_qp = p.deth.src_qpn;
    wc.imm = imm ? p.imm : 0;
    wc.wc_flags = kWcGrh | (imm ? uint32_t{kWcWithImm} : 0u);
    wc.pkey_index = qp.attr.pkey_index;
    wc.sl = roce_packet_type(f.headers);
    c.bump(&qp, &Counters::ud_rx_delivered);
  }
  c.complete(qp, qp.init.recv_cqn, wc);
}

}  // namespace

bool is_datagram(proto::Opcode op) {
  const proto::OpcodeInfo* info = proto::find_opcode(op);
  return info && info->kind == proto::OpKind::kDatagram;
}

uint32_t mtu(uint32_t link_mtu) { return effective_mtu(4096, link_mtu); }

int check_post(const SendWr& wr) {
  return wr.opcode == WrOpcode::kSend || wr.opcode == WrOpcode::kSendImm ? 0 : EINVAL;
}

uint32_t run(Core& c, Qp& qp, uint32_t budget) {
  uint32_t n = 0;
  while (n < budget && qp.state == QpState::kRts && qp.sq_next != qp.sq_tail) {
    SendWqe& w = qp.sqe(qp.sq_next);
    const Ah* ah = nullptr;
    WcStatus st = check_wqe(c, qp, w, &ah);
    if (st == WcStatus::kSuccess && !send_one(c, qp, w, *ah)) st = WcStatus::kLocQpOpErr;
    if (st != WcStatus::kSuccess) {
      fail(c, qp, st);
      break;
    }
    ++qp.sq_next;
    completer::emit(c, qp, w, WcStatus::kSuccess);
    ++qp.sq_head;
    ++n;
  }
  return n;
}

void on_frame(Core& c, Qp& qp, const proto::Frame& f) {
  uint64_t Counters::*why = refusal(qp, f.packet);
  if (!why) why = bind_recv(c, qp);
  if (why) {
    c.bump(&qp, why);
    return;
  }
  deliver(c, qp, f);
}

}  // namespace metaroce::fw::datagram
