// Unreliable connected QPs (docs/protocol.md §14): the tester is the UC
// peer of a DUT UC QP. Nothing is acknowledged, so a dropped packet is shown
// by a well-formed SEND that follows it: the DUT processes its link in
// order, so once that SEND's receive completes, the dropped packet has been
// processed, and it must have left no completion, placement or answer.
#include "tests/conformance/helpers.h"

namespace metaroce::conform::cases {
namespace {

constexpr uint64_t kRecvOff = 16384, kRecvLen = 4096;

Conn& uc_connect(Ctx& ctx) {
  QpOptions o;
  o.type = IBV_QPT_UC;
  return ctx.connect(o);
}

// A UC packet to the DUT: `op`, the next PSN, no A flag, L set.
proto::Packet uc_pkt(Ctx& ctx, Conn& c, Opcode op) {
  proto::Packet p = ctx.request(c, op);
  p.mbth.flags = proto::kFlagLast;
  return p;
}
proto::Packet uc_send(Ctx& ctx, Conn& c, std::span<const uint8_t> data) {
  proto::Packet p = uc_pkt(ctx, c, Opcode::kUcSend);
  p.mbth.msn = c.recv_msn++;
  p.seth.length = static_cast<uint32_t>(data.size());
  p.payload = data;
  return p;
}

void post_recv(Ctx& ctx, Conn& c, uint64_t id) {
  ctx.need(c.qp->post_recv(id, kRecvOff, kRecvLen) == 0, "the DUT refused a receive");
}

// The follow-up: a 32-byte SEND whose receive (wr_id `id`) must complete
// with exactly it. Fails if an earlier, dropped packet completed instead.
void expect_follow_up(Ctx& ctx, Conn& c, uint64_t id, const std::string& dropped) {
  auto d = pattern(32, 0x6b);
  ctx.send(uc_send(ctx, c, d));
  ibv_wc wc = recv_completion(ctx, c, "the follow-up SEND's receive");
  need_status(ctx, wc, IBV_WC_SUCCESS, "follow-up SEND");
  ctx.need(wc.wr_id == id && wc.byte_len == 32,
           "a receive completed for the dropped packet (" + dropped + "): wr_id " + std::to_string(wc.wr_id) +
               ", byte_len " + std::to_string(wc.byte_len));
  ctx.need(std::memcmp(ctx.mem(kRecvOff), d.data(), 32) == 0, "the receive does not hold the follow-up SEND (was the dropped one placed?)");
  if (auto extra = c.qp->recv_wc(0.2))
    ctx.fail("an extra receive completion (" + dropped + ")", "none");
}

// No frame at all from the DUT to c's peer (a UC receiver never answers).
void expect_silence(Ctx& ctx, Conn& c, const std::string& after) {
  if (const Rx* r = ctx.await(c, [](const Rx&) { return true; }, 1.0))
    ctx.fail("the DUT answered UC traffic (" + after + ")", "no frame", r);
}

}  // namespace

CONFORM_CASE(uc_receiver_never_answers, Level::kMust, ({"R14.3-9", "R14.1-3"}),
             "a UC receiver sends nothing in answer, even to the A flag") {
  Conn& c = uc_connect(ctx);
  post_recv(ctx, c, 1);
  auto d = pattern(64, 0x21);
  proto::Packet p = uc_send(ctx, c, d);
  p.mbth.flags |= proto::kFlagAckReq | proto::kFlagRetransmit;  // ignored on receipt
  ctx.send(p);
  ibv_wc wc = recv_completion(ctx, c, "the SEND's receive");
  need_status(ctx, wc, IBV_WC_SUCCESS, "UC SEND with A|R");
  ctx.need(wc.byte_len == 64 && std::memcmp(ctx.mem(kRecvOff), d.data(), 64) == 0, "UC SEND not placed");
  expect_silence(ctx, c, "a SEND with the A flag");
}

CONFORM_CASE(uc_rc_opcode_dropped, Level::kMust, ({"R14.1-1"}),
             "an RC SEND, an ACK or a NACK to a UC QP is dropped") {
  Conn& c = uc_connect(ctx);
  post_recv(ctx, c, 1);
  post_recv(ctx, c, 2);
  auto d = pattern(48, 0x11);
  proto::Packet p = uc_send(ctx, c, d);
  p.mbth.opcode = Opcode::kSend;
  ctx.send(p);
  ctx.send(ack_pkt(c, c.tx_psn));
  ctx.send(nack_pkt(c, proto::NackReason::kSequenceError, c.tx_psn));
  c.recv_msn--;  // the dropped SEND took no receive
  expect_follow_up(ctx, c, 1, "RC SEND to a UC QP");
  expect_silence(ctx, c, "RC opcodes to a UC QP");
}

CONFORM_CASE(uc_opcode_to_rc_dropped, Level::kMust, ({"R14.1-1"}),
             "a UC SEND to an RC QP is dropped") {
  Conn& c = ctx.connect();
  ctx.need(c.qp->post_recv(1, kRecvOff, kRecvLen) == 0, "the DUT refused a receive");
  auto d = pattern(48, 0x12);
  proto::Packet p = uc_send(ctx, c, d);
  c.recv_msn--;
  ctx.send(p);
  const Rx& m = ctx.marker(c);
  ctx.need(m.p().ack.cum_psn == p.mbth.psn, "the RC QP took the UC SEND's PSN", &m);
  if (auto wc = c.qp->recv_wc(0.5)) ctx.fail("the RC QP completed a receive for a UC SEND", "none");
}

CONFORM_CASE(uc_read_atomic_refused, Level::kMust, ({"R14.1-2"}),
             "RDMA READ and atomics on a UC QP are refused at post time") {
  Conn& c = uc_connect(ctx);
  int r = c.qp->post_send(IBV_WR_RDMA_READ, 1, 0, 64, ctx.va(0), ctx.rkey());
  int a = c.qp->post_send(IBV_WR_ATOMIC_FETCH_AND_ADD, 2, 0, 8, ctx.va(0), ctx.rkey(), 0, 1);
  ctx.need(r == EINVAL, "post READ on UC: " + std::to_string(r) + ", expected EINVAL");
  ctx.need(a == EINVAL, "post FETCH_ADD on UC: " + std::to_string(a) + ", expected EINVAL");
  if (const Rx* x = ctx.await(c, [](const Rx&) { return true; }, 1.0))
    ctx.fail("a refused UC work request reached the wire", "no frame", x);
}

CONFORM_CASE(uc_sender_one_path_in_order, Level::kMust, ({"R14.1-1", "R14.1-3", "R14.2-1", "R14.2-2"}),
             "a UC sender sends UC opcodes, in PSN order, on one path, A and R clear, and completes") {
  Conn& c = uc_connect(ctx);
  const uint32_t mtu = ctx.setup().mtu_bytes, len = 3 * mtu + 100;
  std::memcpy(ctx.mem(0), pattern(len, 0x3c).data(), len);
  ctx.need(c.qp->post_send(IBV_WR_SEND, 7, 0, len) == 0, "post UC SEND");
  ctx.need(c.qp->post_send(IBV_WR_RDMA_WRITE, 8, 0, 64, ctx.va(8192), 0x77) == 0, "post UC WRITE");
  uint32_t psn = c.dut_psn, port = 0;
  for (int i = 0; i < 5; ++i) {
    const Rx& r = ctx.expect(c, "UC packet " + std::to_string(i), [](const Rx&) { return true; });
    const proto::Packet& p = r.p();
    bool last = i == 3 || i == 4;
    Opcode want = i < 4 ? Opcode::kUcSend : Opcode::kUcWrite;
    ctx.need(p.mbth.opcode == want, "not the UC opcode expected", &r);
    ctx.need(p.mbth.psn == psn++, "UC packets out of PSN order", &r);
    ctx.need(!(p.mbth.flags & (proto::kFlagAckReq | proto::kFlagRetransmit)), "A or R set on UC", &r);
    ctx.need(bool(p.mbth.flags & proto::kFlagLast) == last, "L flag on the wrong packet", &r);
    size_t want_len = i < 3 ? mtu : i == 3 ? 100 : 64;
    ctx.need(p.payload.size() == want_len, "a packet not of the expected size (MTU but the last)", &r);
    uint16_t sp = r.frame.headers.src_port;
    ctx.need(port == 0 || sp == port, "UC packets on more than one UDP source port", &r);
    port = sp;
  }
  ibv_wc a = send_completion(ctx, c, "the UC SEND's completion (no ACK comes)");
  ibv_wc b = send_completion(ctx, c, "the UC WRITE's completion");
  need_status(ctx, a, IBV_WC_SUCCESS, "UC SEND");
  need_status(ctx, b, IBV_WC_SUCCESS, "UC WRITE");
  ctx.need(a.wr_id == 7 && b.wr_id == 8, "UC completions out of order");
}

CONFORM_CASE(uc_duplicate_dropped, Level::kMust, ({"R14.3-1"}), "a UC packet below the expected PSN is dropped") {
  Conn& c = uc_connect(ctx);
  post_recv(ctx, c, 1);
  post_recv(ctx, c, 2);
  auto d = pattern(40, 0x41);
  proto::Packet p = uc_send(ctx, c, d);
  ctx.send(p);
  ibv_wc wc = recv_completion(ctx, c, "the first SEND's receive");
  need_status(ctx, wc, IBV_WC_SUCCESS, "first UC SEND");
  ctx.send(p);  // the same PSN again
  expect_follow_up(ctx, c, 2, "a duplicate PSN");
}

CONFORM_CASE(uc_gap_abandons_message, Level::kMust, ({"R14.3-2", "R14.3-3"}),
             "a PSN gap abandons the message in progress; a packet not starting a message is dropped") {
  Conn& c = uc_connect(ctx);
  post_recv(ctx, c, 1);
  const uint32_t mtu = ctx.setup().mtu_bytes;
  auto d = pattern(2 * mtu, 0x51);
  proto::Packet first = uc_send(ctx, c, std::span<const uint8_t>(d).first(mtu));
  first.seth.length = 2 * mtu;
  first.mbth.flags = 0;  // not the last: a message in progress
  ctx.send(first);
  c.tx_psn++;  // lose one PSN
  proto::Packet tail = uc_pkt(ctx, c, Opcode::kUcSend);  // the second half after the gap
  tail.mbth.msn = first.mbth.msn;
  tail.seth.length = 2 * mtu;
  tail.mbth.offset = mtu;
  tail.payload = std::span<const uint8_t>(d).subspan(mtu);
  ctx.send(tail);
  c.recv_msn = first.mbth.msn;  // the abandoned message's receive is used by the next
  expect_follow_up(ctx, c, 1, "a message broken by a PSN gap");
}

CONFORM_CASE(uc_inconsistent_middle_abandons, Level::kMust, ({"R14.3-4"}),
             "a packet with another total length or offset abandons the message") {
  Conn& c = uc_connect(ctx);
  post_recv(ctx, c, 1);
  const uint32_t mtu = ctx.setup().mtu_bytes;
  auto d = pattern(2 * mtu, 0x61);
  proto::Packet first = uc_send(ctx, c, std::span<const uint8_t>(d).first(mtu));
  first.seth.length = 2 * mtu;
  first.mbth.flags = 0;
  ctx.send(first);
  proto::Packet bad = uc_pkt(ctx, c, Opcode::kUcSend);
  bad.mbth.msn = first.mbth.msn;
  bad.seth.length = 2 * mtu + 8;  // not the first packet's total length
  bad.mbth.offset = mtu;
  bad.payload = std::span<const uint8_t>(d).subspan(mtu);
  ctx.send(bad);
  c.recv_msn = first.mbth.msn;
  expect_follow_up(ctx, c, 1, "a middle packet with another total length");
}

CONFORM_CASE(uc_no_receive_dropped, Level::kMust, ({"R14.3-5"}),
             "a UC SEND with no receive posted is dropped, no RNR NACK") {
  Conn& c = uc_connect(ctx);
  auto d = pattern(40, 0x71);
  ctx.send(uc_send(ctx, c, d));
  expect_silence(ctx, c, "a SEND with no receive");
  post_recv(ctx, c, 1);
  c.recv_msn--;
  expect_follow_up(ctx, c, 1, "a SEND with no receive posted");
}

CONFORM_CASE(uc_send_too_long, Level::kMust, ({"R14.3-6"}),
             "a UC SEND longer than its receive completes it with a length error; the QP goes on") {
  Conn& c = uc_connect(ctx);
  ctx.need(c.qp->post_recv(1, kRecvOff, 16) == 0, "the DUT refused a receive");
  post_recv(ctx, c, 2);
  auto d = pattern(64, 0x19);
  ctx.send(uc_send(ctx, c, d));
  ibv_wc wc = recv_completion(ctx, c, "the short receive's completion");
  need_status(ctx, wc, IBV_WC_LOC_LEN_ERR, "UC SEND longer than the receive");
  ctx.need(wc.wr_id == 1, "not the short receive that completed");
  expect_follow_up(ctx, c, 2, "a SEND longer than its receive");
  ctx.need(c.qp->state() == IBV_QPS_RTS, "the UC QP left RTS after a length error");
}

CONFORM_CASE(uc_write_bad_rkey_dropped, Level::kMust, ({"R14.3-7"}),
             "a UC WRITE with a bad rkey is dropped, no NACK, no state change") {
  Conn& c = uc_connect(ctx);
  post_recv(ctx, c, 1);
  const uint64_t off = 8192;
  std::memset(ctx.mem(off), 0, 64);
  auto d = pattern(64, 0x29);
  proto::Packet w = uc_pkt(ctx, c, Opcode::kUcWrite);
  w.mbth.msn = c.recv_msn;
  w.reth = {ctx.va(off), ctx.rkey() ^ 0x5500, 64};
  w.payload = d;
  ctx.send(w);
  expect_follow_up(ctx, c, 1, "a WRITE with a bad rkey");
  expect_silence(ctx, c, "a WRITE with a bad rkey");
  for (int i = 0; i < 64; ++i)
    if (*ctx.mem(off + i)) ctx.fail("the bad-rkey WRITE was placed");
  ctx.need(c.qp->state() == IBV_QPS_RTS, "the UC QP left RTS after a bad-rkey WRITE");
}

CONFORM_CASE(uc_write_placed_then_completed, Level::kMust, ({"R14.3-8"}),
             "a UC WRITE_IMM completes its receive after its last packet is placed") {
  Conn& c = uc_connect(ctx);
  post_recv(ctx, c, 1);
  const uint32_t mtu = ctx.setup().mtu_bytes;
  const uint64_t off = 8192;
  std::memset(ctx.mem(off), 0, 2 * mtu);
  auto d = pattern(2 * mtu, 0x39);
  proto::Packet a = uc_pkt(ctx, c, Opcode::kUcWrite);
  a.mbth.opcode = Opcode::kUcWriteImm;
  a.mbth.msn = c.recv_msn;
  a.mbth.flags = 0;
  a.reth = {ctx.va(off), ctx.rkey(), 2 * mtu};
  a.imm = 0xabcd;
  a.payload = std::span<const uint8_t>(d).first(mtu);
  ctx.send(a);
  if (auto early = c.qp->recv_wc(0.5)) ctx.fail("the receive completed before the last packet", "none");
  proto::Packet b = a;
  b.mbth.psn = c.tx_psn++;
  b.mbth.offset = mtu;
  b.mbth.flags = proto::kFlagLast;
  b.payload = std::span<const uint8_t>(d).subspan(mtu);
  ctx.send(b);
  ibv_wc wc = recv_completion(ctx, c, "the WRITE_IMM's receive");
  need_status(ctx, wc, IBV_WC_SUCCESS, "UC WRITE_IMM");
  ctx.need(wc.wc_flags & IBV_WC_WITH_IMM, "no immediate in the WRITE_IMM completion");
  ctx.need(std::memcmp(ctx.mem(off), d.data(), 2 * mtu) == 0, "the WRITE_IMM's data had not landed at completion");
}

}  // namespace metaroce::conform::cases
