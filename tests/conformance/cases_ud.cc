// Unreliable datagram QPs (docs/protocol.md §13): the tester is a UD peer
// QP (its QPN is the Conn's peer QPN) of a DUT UD QP. Nothing is
// acknowledged, so a dropped datagram is shown by a good one that follows
// it: the DUT processes its link in order, so once the good datagram's
// receive completes, the dropped one has been processed, and it must have
// consumed no receive and drawn no answer.
#include <arpa/inet.h>

#include "tests/conformance/helpers.h"

namespace metaroce::conform::cases {
namespace {

constexpr uint64_t kRecvOff = 16384, kRecvLen = 8192;
constexpr uint32_t kQkey = 0x1234567;  // the DUT QP's (QpOptions::qkey)

Conn& ud_connect(Ctx& ctx, const QpOptions& base = {}) {
  QpOptions o = base;
  o.type = IBV_QPT_UD;
  o.qkey = kQkey;
  return ctx.connect(o);
}

// A datagram from the tester's QP to the DUT's, with the right Q_Key.
proto::Packet ud_pkt(Ctx& ctx, Conn& c, std::span<const uint8_t> data, Opcode op = Opcode::kUdSend) {
  proto::Packet p = ctx.request(c, op);
  p.mbth.flags = proto::kFlagLast;
  p.deth = {kQkey, c.peer_qpn};
  p.payload = data;
  return p;
}

void post_recv(Ctx& ctx, Conn& c, uint64_t id, uint32_t len = kRecvLen) {
  ctx.need(c.qp->post_recv(id, kRecvOff, len) == 0, "the DUT refused a receive");
}

// No frame at all from the DUT to c's peer QP.
void expect_silence(Ctx& ctx, Conn& c, const std::string& after) {
  if (const Rx* r = ctx.await(c, [](const Rx&) { return true; }, 1.0))
    ctx.fail("the DUT answered a datagram (" + after + ")", "no frame", r);
}

// A good 32-byte datagram whose receive (wr_id `id`) must complete with
// exactly it: an earlier dropped datagram took no receive.
void expect_follow_up(Ctx& ctx, Conn& c, uint64_t id, const std::string& dropped) {
  auto d = pattern(32, 0x6b);
  ctx.send(ud_pkt(ctx, c, d));
  ibv_wc wc = recv_completion(ctx, c, "the follow-up datagram's receive");
  need_status(ctx, wc, IBV_WC_SUCCESS, "follow-up datagram");
  ctx.need(wc.wr_id == id && wc.byte_len == proto::kGrhLen + 32,
           "a receive completed for the dropped datagram (" + dropped + "): wr_id " + std::to_string(wc.wr_id) +
               ", byte_len " + std::to_string(wc.byte_len));
  ctx.need(std::memcmp(ctx.mem(kRecvOff + proto::kGrhLen), d.data(), 32) == 0,
           "the receive does not hold the follow-up datagram after the GRH (was the dropped one delivered?)");
  if (c.qp->recv_wc(0.2)) ctx.fail("an extra receive completion (" + dropped + ")", "none");
  expect_silence(ctx, c, dropped);
}

// Sends `bad` (a datagram the DUT must drop), then the follow-up.
void expect_dropped(Ctx& ctx, Conn& c, const proto::Packet& bad, const std::string& what) {
  post_recv(ctx, c, 1);
  ctx.send(bad);
  expect_follow_up(ctx, c, 1, what);
}

// The DUT's next datagram to the tester's QP.
const Rx& dut_datagram(Ctx& ctx, Conn& c, const std::string& what) {
  return ctx.expect(c, what, [](const Rx& r) { return is_op(r, Opcode::kUdSend) || is_op(r, Opcode::kUdSendImm); });
}

// A multicast group of the run's family and its Ethernet address
// (RFC 1112: 01:00:5e + low 23 bits; RFC 2464: 33:33 + low 32 bits).
struct Group {
  proto::IpAddr ip;
  proto::MacAddr mac;
};
Group group(Ctx& ctx, uint8_t n) {
  Group g;
  if (ctx.setup().ipv6) {
    g.ip.bytes = {0xff, 0x05, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, 0, n};
    g.mac = {0x33, 0x33, 0x00, 0x01, 0x00, n};
  } else {
    g.ip = proto::IpAddr::v4(0xEF010200u | n);  // 239.1.2.n
    g.mac = {0x01, 0x00, 0x5e, 0x01, 0x02, n};
  }
  return g;
}
// A datagram from the tester to group g (dest_qpn 0xFFFFFF).
Frame mcast_frame(Ctx& ctx, Conn& c, const Group& g, std::span<const uint8_t> data) {
  proto::Packet p = ud_pkt(ctx, c, data);
  p.mbth.dest_qpn = 0xFFFFFF;
  proto::FrameHeaders h = ctx.headers();
  h.dst_ip = g.ip;
  h.dst_mac = g.mac;
  return ctx.frame(p, &h);
}

}  // namespace

CONFORM_CASE(ud_sender_one_packet, Level::kMust, ({"R13.1-1", "R13.1-3", "R13.2-1", "R13.3-2"}),
             "a UD send is one packet, offset 0 and L, DETH reserved 0, port from QPN and path, never resent") {
  Conn& c = ud_connect(ctx);
  const uint32_t len = ctx.dut().active_mtu_bytes();
  ctx.need(len >= 256, "cannot read the DUT port's active MTU");
  std::memcpy(ctx.mem(0), pattern(len, 0x13).data(), len);
  ctx.need(c.qp->post_send(IBV_WR_SEND, 3, 0, len) == 0, "post UD SEND of the UD MTU");
  const Rx& r = dut_datagram(ctx, c, "the DUT's datagram");
  const proto::Packet& p = r.p();
  ctx.need(p.mbth.offset == 0 && (p.mbth.flags & proto::kFlagLast), "a datagram without offset 0 and L", &r);
  ctx.need(!(p.mbth.flags & (proto::kFlagAckReq | proto::kFlagRetransmit)), "A or R set on a datagram", &r);
  ctx.need(p.payload.size() == len, "the datagram does not carry the whole message", &r);
  ctx.need(p.deth.qkey == 0x7654321 && p.deth.src_qpn == c.dut_qpn(), "DETH Q_Key or source QPN wrong", &r);
  size_t deth = Layout(ctx).tp + proto::kMbthLen;
  ctx.need(r.bytes[deth + 4] == 0, "the DETH reserved byte is not 0", &r);
  uint16_t want = static_cast<uint16_t>(0xC000 | ((c.dut_qpn() * 64u + p.mbth.path_id) & 0x3FFF));
  ctx.need(r.frame.headers.src_port == want, "UDP source port is not 0xC000 | ((qpn*64 + path_id) & 0x3FFF)", &r);
  ibv_wc wc = send_completion(ctx, c, "the UD send's completion (no ACK comes)");
  need_status(ctx, wc, IBV_WC_SUCCESS, "UD send");
  if (const Rx* again = ctx.await(c, [](const Rx&) { return true; }, 2.0))
    ctx.fail("the DUT sent again after the datagram (no retransmission in UD)", "no frame", again);
}

CONFORM_CASE(ud_controlled_qkey_sent_as_own, Level::kMust, ({"R13.4-2"}),
             "a work request with a controlled Q_Key is sent with the QP's own Q_Key") {
  QpOptions o;
  o.remote_qkey = 0x80000042;
  Conn& c = ud_connect(ctx, o);
  ctx.need(c.qp->post_send(IBV_WR_SEND, 3, 0, 16) == 0, "post UD SEND");
  const Rx& r = dut_datagram(ctx, c, "the DUT's datagram");
  ctx.need(r.p().deth.qkey == kQkey, "a controlled Q_Key went on the wire instead of the QP's own", &r);
  need_status(ctx, send_completion(ctx, c, "the UD send's completion"), IBV_WC_SUCCESS, "UD send");
}

CONFORM_CASE(ud_oversize_send_refused, Level::kMust, ({"R13.3-3", "R13.6-1"}),
             "a send longer than the UD MTU completes with a length error, SQE flushes, SQE->RTS resumes") {
  Conn& c = ud_connect(ctx);
  const uint32_t mtu = ctx.dut().active_mtu_bytes();
  ctx.need(mtu >= 256 && mtu + 1 <= ctx.dut().mem_size(), "cannot read the DUT port's active MTU");
  ctx.need(c.qp->post_send(IBV_WR_SEND, 1, 0, mtu + 1) == 0, "post an oversize UD SEND");
  ctx.need(c.qp->post_send(IBV_WR_SEND, 2, 0, 16) == 0, "post a UD SEND after it");
  ibv_wc a = send_completion(ctx, c, "the oversize send's completion");
  need_status(ctx, a, IBV_WC_LOC_LEN_ERR, "oversize UD send");
  ibv_wc b = send_completion(ctx, c, "the next send's completion");
  need_status(ctx, b, IBV_WC_WR_FLUSH_ERR, "a send after the error");
  ctx.need(c.qp->state() == IBV_QPS_SQE, "the QP is not in SQE after a send error");
  if (const Rx* r = ctx.await(c, [](const Rx&) { return true; }, 1.0))
    ctx.fail("a refused or flushed datagram reached the wire", "no frame", r);
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_RTS;
  attr.cur_qp_state = IBV_QPS_SQE;
  ctx.need(c.qp->modify(&attr, IBV_QP_STATE | IBV_QP_CUR_STATE) == 0, "modify SQE -> RTS refused");
  ctx.need(c.qp->post_send(IBV_WR_SEND, 3, 0, 16) == 0, "post after SQE -> RTS");
  dut_datagram(ctx, c, "a datagram after SQE -> RTS");
  need_status(ctx, send_completion(ctx, c, "the resumed send's completion"), IBV_WC_SUCCESS, "resumed UD send");
}

CONFORM_CASE(ud_grh_and_completion, Level::kMust, ({"R13.5-1"}),
             "a UD receive holds the GRH (the IP header) then the payload; the completion names the source") {
  Conn& c = ud_connect(ctx);
  post_recv(ctx, c, 9);
  std::memset(ctx.mem(kRecvOff), 0xee, 128);
  auto d = pattern(48, 0x5d);
  proto::Packet p = ud_pkt(ctx, c, d, Opcode::kUdSendImm);
  p.imm = 0x01020304;
  Frame f = ctx.frame(p);
  ctx.send(f);
  ibv_wc wc = recv_completion(ctx, c, "the datagram's receive");
  need_status(ctx, wc, IBV_WC_SUCCESS, "UD_SEND_IMM");
  ctx.need(wc.byte_len == proto::kGrhLen + 48, "byte_len is not 40 + payload: " + std::to_string(wc.byte_len));
  ctx.need((wc.wc_flags & IBV_WC_GRH) && (wc.wc_flags & IBV_WC_WITH_IMM), "IBV_WC_GRH or WITH_IMM missing");
  ctx.need(wc.src_qp == c.peer_qpn, "src_qp is not the DETH's source QPN");
  ctx.need(ntohl(wc.imm_data) == 0x01020304, "wrong immediate");
  ctx.need(wc.pkey_index == 0 && wc.slid == 0 && wc.dlid_path_bits == 0, "pkey/slid/dlid_path_bits not 0");
  Frame grh(proto::kGrhLen, 0);
  Layout l(ctx);
  // sl: the RoCE packet type, UDP (bit 3) and IPv4 (2) or IPv6 (1) (§13.5).
  ctx.need(wc.sl == (l.v4 ? 0xA : 0x9), "sl is not the RoCE packet type: " + std::to_string(wc.sl));
  if (l.v4) {
    std::copy(f.begin() + l.ip, f.begin() + l.ip + proto::kIpv4Len, grh.begin() + 20);
  } else {
    std::copy(f.begin() + l.ip, f.begin() + l.ip + proto::kIpv6Len, grh.begin());
  }
  ctx.need(std::memcmp(ctx.mem(kRecvOff), grh.data(), proto::kGrhLen) == 0,
           "the GRH in the receive buffer is not the datagram's IP header as sent");
  ctx.need(std::memcmp(ctx.mem(kRecvOff + proto::kGrhLen), d.data(), 48) == 0, "payload not after the GRH");
}

CONFORM_CASE(ud_bad_position_dropped, Level::kMust, ({"R13.1-2"}),
             "a datagram with offset != 0 or without L is dropped") {
  Conn& c = ud_connect(ctx);
  auto d = pattern(32, 0x44);
  proto::Packet a = ud_pkt(ctx, c, d);
  a.mbth.offset = 32;
  proto::Packet b = ud_pkt(ctx, c, d);
  b.mbth.flags = 0;
  post_recv(ctx, c, 1);
  ctx.send(a);
  ctx.send(b);
  expect_follow_up(ctx, c, 1, "offset 32 / no L flag");
}

CONFORM_CASE(ud_oversize_dropped, Level::kMust, ({"R13.3-4"}),
             "a datagram longer than the receiver's UD MTU is dropped (one of exactly the MTU is delivered)") {
  Conn& c = ud_connect(ctx);
  const uint32_t mtu = ctx.dut().active_mtu_bytes();
  ctx.need(mtu >= 256 && proto::kGrhLen + mtu <= kRecvLen, "cannot read the DUT port's active MTU");
  auto d = pattern(mtu + 1, 0x23);
  post_recv(ctx, c, 1);
  ctx.send(ud_pkt(ctx, c, std::span<const uint8_t>(d).first(mtu)));
  ibv_wc wc = recv_completion(ctx, c, "a datagram of exactly the UD MTU");
  need_status(ctx, wc, IBV_WC_SUCCESS, "UD-MTU datagram");
  expect_dropped(ctx, c, ud_pkt(ctx, c, d), "a datagram of UD MTU + 1 bytes");
}

CONFORM_CASE(ud_qkey_mismatch_dropped, Level::kMust, ({"R13.4-1"}), "a datagram with another Q_Key is dropped") {
  Conn& c = ud_connect(ctx);
  auto d = pattern(32, 0x55);
  proto::Packet p = ud_pkt(ctx, c, d);
  p.deth.qkey = kQkey ^ 1;
  expect_dropped(ctx, c, p, "a wrong Q_Key");
  proto::Packet q = ud_pkt(ctx, c, d);
  q.deth.qkey = kQkey | 0x80000000u;  // a controlled Q_Key the QP does not have
  expect_dropped(ctx, c, q, "a controlled Q_Key");
}

CONFORM_CASE(ud_no_receive_dropped, Level::kMust, ({"R13.5-2", "R13.1-3"}),
             "a datagram with no receive posted is dropped, and nothing answers it") {
  Conn& c = ud_connect(ctx);
  auto d = pattern(32, 0x66);
  ctx.send(ud_pkt(ctx, c, d));
  expect_silence(ctx, c, "a datagram with no receive");
  post_recv(ctx, c, 1);
  expect_follow_up(ctx, c, 1, "a datagram with no receive posted");
}

CONFORM_CASE(ud_receive_too_small, Level::kMust, ({"R13.5-3"}),
             "a receive shorter than 40 + payload completes with a length error; the QP goes on") {
  Conn& c = ud_connect(ctx);
  post_recv(ctx, c, 1, proto::kGrhLen + 16);
  auto d = pattern(64, 0x77);
  ctx.send(ud_pkt(ctx, c, d));
  ibv_wc wc = recv_completion(ctx, c, "the short receive's completion");
  need_status(ctx, wc, IBV_WC_LOC_LEN_ERR, "datagram longer than its receive");
  post_recv(ctx, c, 2);
  expect_follow_up(ctx, c, 2, "a datagram longer than its receive");
  ctx.need(c.qp->state() == IBV_QPS_RTS, "the UD QP left RTS after a length error");
}

CONFORM_CASE(ud_receive_bad_lkey, Level::kMust, ({"R13.5-3"}),
             "a receive with a bad lkey completes with a local protection error; the QP goes on") {
  Conn& c = ud_connect(ctx);
  const uint32_t good = c.qp->lkey;
  c.qp->lkey = good ^ 0x5a00;  // no such MR
  int err = c.qp->post_recv(1, kRecvOff, kRecvLen);
  c.qp->lkey = good;
  ctx.need(err == 0, "the DUT refused a receive with an unknown lkey at post time");
  auto d = pattern(32, 0x2f);
  ctx.send(ud_pkt(ctx, c, d));
  ibv_wc wc = recv_completion(ctx, c, "the bad-lkey receive's completion");
  ctx.need(wc.wr_id == 1, "not the bad-lkey receive that completed");
  ctx.need(wc.status == IBV_WC_LOC_PROT_ERR || wc.status == IBV_WC_LOC_ACCESS_ERR,
           std::string("bad-lkey receive completed with ") + ibv_wc_status_str(wc.status) +
               ", expected a local protection or access error");
  post_recv(ctx, c, 2);
  expect_follow_up(ctx, c, 2, "a datagram whose receive has a bad lkey");
  ctx.need(c.qp->state() == IBV_QPS_RTS, "the UD QP left RTS after a bad-lkey receive");
}

CONFORM_CASE(ud_wrong_service_dropped, Level::kMust, ({"R13.5-4"}),
             "a UD opcode to an RC QP and an RC SEND to a UD QP are dropped") {
  Conn& u = ud_connect(ctx);
  auto d = pattern(32, 0x0d);
  proto::Packet s = ctx.request(u, Opcode::kSend);
  s.mbth.flags = proto::kFlagLast;
  s.seth.length = 32;
  s.payload = d;
  expect_dropped(ctx, u, s, "an RC SEND to a UD QP");

  Conn& r = ctx.connect();
  ctx.need(r.qp->post_recv(1, kRecvOff, kRecvLen) == 0, "the DUT refused a receive");
  proto::Packet p = ud_pkt(ctx, r, d);
  ctx.send(p);
  const Rx& m = ctx.marker(r);
  ctx.need(m.p().ack.cum_psn == p.mbth.psn, "the RC QP took the datagram's PSN", &m);
  if (r.qp->recv_wc(0.5)) ctx.fail("the RC QP completed a receive for a datagram", "none");
}

CONFORM_CASE(ud_multicast_delivered_to_members, Level::kMust, ({"R13.7-1"}),
             "a multicast datagram reaches every attached QP; one for a group nobody joined is dropped") {
  Conn& a = ud_connect(ctx);
  Conn& b = ud_connect(ctx);
  Group g = group(ctx, 7), other = group(ctx, 8);
  ctx.need(a.qp->attach_mcast(g.ip) == 0 && b.qp->attach_mcast(g.ip) == 0, "ibv_attach_mcast refused");
  ctx.need(a.qp->post_recv(1, kRecvOff, 256) == 0 && b.qp->post_recv(2, kRecvOff + 256, 256) == 0,
           "the DUT refused a receive");
  auto d = pattern(24, 0x4e);
  ctx.send(mcast_frame(ctx, a, other, d), "to a group no QP joined");
  ctx.send(mcast_frame(ctx, a, g, d), "to the group");
  for (Conn* c : {&a, &b}) {
    ibv_wc wc = recv_completion(ctx, *c, "the group datagram's receive on each member");
    need_status(ctx, wc, IBV_WC_SUCCESS, "multicast datagram");
    ctx.need(wc.byte_len == proto::kGrhLen + 24, "byte_len " + std::to_string(wc.byte_len));
    if (c->qp->recv_wc(0.2)) ctx.fail("a member got two datagrams (the unjoined group's was delivered)", "one");
  }
  ctx.need(std::memcmp(ctx.mem(kRecvOff + proto::kGrhLen), d.data(), 24) == 0 &&
               std::memcmp(ctx.mem(kRecvOff + 256 + proto::kGrhLen), d.data(), 24) == 0,
           "a member's copy was not placed");
}

CONFORM_CASE(ud_multicast_looped_back, Level::kMust, ({"R13.7-2"}),
             "a datagram a DUT QP sends to a group reaches the DUT's own QPs attached to it") {
  Conn& member = ud_connect(ctx);
  Conn& sender = ud_connect(ctx);
  Group g = group(ctx, 9);
  ctx.need(member.qp->attach_mcast(g.ip) == 0, "ibv_attach_mcast refused");
  ctx.need(member.qp->post_recv(1, kRecvOff, 256) == 0, "the DUT refused a receive");
  ibv_destroy_ah(sender.qp->ah);
  sender.qp->ah = ctx.dut().create_ah(g.ip);
  ctx.need(sender.qp->ah != nullptr, "ibv_create_ah for the group refused");
  sender.qp->ud_qpn = 0xFFFFFF;
  sender.qp->ud_qkey = kQkey;
  auto d = pattern(24, 0x3a);
  std::memcpy(ctx.mem(0), d.data(), 24);
  ctx.need(sender.qp->post_send(IBV_WR_SEND, 5, 0, 24) == 0, "post a UD SEND to the group");
  need_status(ctx, send_completion(ctx, sender, "the group send's completion"), IBV_WC_SUCCESS, "group send");
  ibv_wc wc = recv_completion(ctx, member, "the member's receive of its own host's datagram");
  need_status(ctx, wc, IBV_WC_SUCCESS, "looped-back datagram");
  ctx.need(wc.src_qp == sender.dut_qpn(), "src_qp is not the sending DUT QP");
  ctx.need(std::memcmp(ctx.mem(kRecvOff + proto::kGrhLen), d.data(), 24) == 0, "the looped-back copy not placed");
}

}  // namespace metaroce::conform::cases
