// The DUT as responder: the tester sends crafted requests and checks the
// ACKs, NACKs, READ and atomic responses and receive completions
// (docs/protocol.md §3.7, §3.8, §6.4-§6.9, §8).
#include <arpa/inet.h>

#include "tests/conformance/helpers.h"

namespace metaroce::conform::cases {
namespace {

const Rx& expect_nack(Ctx& ctx, Conn& c, proto::NackReason reason, uint32_t psn) {
  std::string want = std::string("NACK ") + proto::to_string(reason) + " for PSN " + std::to_string(psn);
  const Rx& n = ctx.expect(c, want, [](const Rx& r) { return is_op(r, Opcode::kNack); });
  ctx.need(n.p().nack.reason == reason && n.p().nack.psn == psn, "wrong NACK; expected " + want, &n);
  return n;
}

// A SEND packet of message msn: `len` total bytes, this packet's slice at off.
proto::Packet send_pkt(Ctx& ctx, Conn& c, uint32_t msn, uint32_t len, uint32_t off,
                       std::span<const uint8_t> slice, bool last, Opcode op = Opcode::kSend) {
  proto::Packet p = ctx.request(c, op);
  p.mbth.msn = msn;
  p.mbth.offset = off;
  p.mbth.flags = proto::kFlagAckReq | (last ? proto::kFlagLast : 0);
  p.seth.length = len;
  p.payload = slice;
  return p;
}

uint64_t load64(Ctx& ctx, uint64_t off) {
  uint64_t v;
  std::memcpy(&v, ctx.mem(off), 8);
  return v;
}
void store64(Ctx& ctx, uint64_t off, uint64_t v) { std::memcpy(ctx.mem(off), &v, 8); }

proto::Packet atomic_req(Ctx& ctx, Conn& c, Opcode op, uint64_t off, uint64_t swap_add, uint64_t compare) {
  proto::Packet p = ctx.request(c, op);
  p.mbth.msn = c.read_msn++;
  p.atomic = {ctx.va(off), ctx.rkey(), swap_add, compare};
  return p;
}

const Rx& expect_atomic_resp(Ctx& ctx, Conn& c, const proto::Packet& req, uint64_t original) {
  std::string want = "ATOMIC_RESP psn=" + std::to_string(req.mbth.psn) + " original=" + std::to_string(original);
  const Rx& r = ctx.expect(c, want, [](const Rx& x) { return is_op(x, Opcode::kAtomicResp); });
  ctx.need(r.p().mbth.psn == req.mbth.psn && r.p().mbth.msn == req.mbth.msn &&
               r.p().atomic_ack.original == original,
           "wrong ATOMIC_RESP; expected " + want, &r);
  return r;
}

// The READ_RESP packets answering READ_REQ psn until the L flag, checked
// against the MR bytes from `off` (the range starts at message offset base).
void expect_read(Ctx& ctx, Conn& c, const proto::Packet& req, uint64_t off, uint32_t base, uint32_t len) {
  const uint32_t mtu = ctx.setup().mtu_bytes;
  uint32_t got = 0;
  for (uint32_t k = 0; got < len; ++k) {
    std::string want = "READ_RESP psn=" + std::to_string(req.mbth.psn) + " off=" + std::to_string(base + k * mtu);
    const Rx& r = ctx.expect(c, want, [&](const Rx& x) {
      return is_op(x, Opcode::kReadResp) && x.p().mbth.psn == req.mbth.psn;
    });
    const proto::Packet& p = r.p();
    uint32_t n = std::min(mtu, len - got);
    bool last = got + n >= len;
    ctx.need(p.mbth.msn == req.mbth.msn && p.mbth.offset == base + got && p.payload.size() == n &&
                 ((p.mbth.flags & proto::kFlagLast) != 0) == last,
             "READ_RESP fields differ; expected " + want + " payload=" + std::to_string(n) + "B" +
                 (last ? " L" : ""),
             &r);
    ctx.need(std::memcmp(p.payload.data(), ctx.mem(off + got), n) == 0, "READ_RESP data differs from memory", &r);
    got += n;
  }
}

}  // namespace

CONFORM_CASE(sack_reports_received, Level::kMust, ({"R3.7-1"}),
             "an ACK after a hole sets the SACK bits of the PSNs received past it") {
  Conn& c = ctx.connect();
  auto d = pattern(64, 1);
  proto::Packet a = write_req(ctx, c, 0, d);
  ctx.send(a);
  ctx.expect_ack(c, a.mbth.timestamp, "ACK of the first WRITE");
  ctx.request(c, Opcode::kWrite);  // this PSN is never sent: the hole
  proto::Packet b = write_req(ctx, c, 128, d);
  proto::Packet e = write_req(ctx, c, 256, d);
  ctx.send(b);
  ctx.send(e);
  const Rx& ack = ctx.expect_ack(c, e.mbth.timestamp, "ACK cum_psn=" + std::to_string(a.mbth.psn + 1) + " sack=0x3");
  ctx.need(ack.p().ack.cum_psn == a.mbth.psn + 1 && (ack.p().ack.sack & 0x3) == 0x3,
           "the SACK bitmap does not report the PSNs received past the hole", &ack);
}

CONFORM_CASE(duplicate_write_not_placed_again, Level::kMust, ({"R6.8-1"}),
             "a duplicate WRITE is not placed again and is answered with an ACK with D set") {
  Conn& c = ctx.connect();
  auto d = pattern(64, 9);
  proto::Packet p = write_req(ctx, c, 512, d);
  ctx.send(p);
  ctx.expect_ack(c, p.mbth.timestamp, "ACK of the WRITE");
  std::memset(ctx.mem(512), 0, 64);
  auto other = pattern(64, 0x80);
  p.payload = other;
  p.mbth.timestamp += 0x100000;  // its own echo
  p.mbth.flags |= proto::kFlagRetransmit;
  ctx.send(p);
  const Rx& a = ctx.expect_ack(c, p.mbth.timestamp, "ACK with the DUP flag");
  ctx.need((a.p().ack.ack_flags & proto::kAckFlagDup) && a.p().ack.cum_psn == p.mbth.psn + 1,
           "the duplicate's ACK lacks the DUP flag or cum_psn", &a);
  for (int i = 0; i < 64; ++i)
    if (*ctx.mem(512 + i)) ctx.fail("the duplicate's payload was placed again");
}

CONFORM_CASE(response_on_request_path, Level::kShould, ({"R2.2-3"}),
             "the ACK carries the path_id of the packet it answers") {
  Conn& c = ctx.connect();
  auto d = pattern(32, 3);
  proto::Packet p = write_req(ctx, c, 0, d);
  p.mbth.path_id = 5;
  ctx.send(p);
  const Rx& a = ctx.expect_ack(c, p.mbth.timestamp, "ACK with path_id 5 and echo_path 5");
  ctx.need(a.p().mbth.path_id == 5 && a.p().ack.echo_path == 5, "the ACK is not on the request's path", &a);
}

CONFORM_CASE(out_of_window_nacked, Level::kShould, ({"R6.4-1"}),
             "a PSN beyond the receive window is dropped and NACKed SEQUENCE_ERROR") {
  Conn& c = ctx.connect();
  std::memset(ctx.mem(0), 0, 64);
  auto d = pattern(64, 4);
  proto::Packet p = write_req(ctx, c, 0, d);
  const uint32_t cum = p.mbth.psn;
  p.mbth.psn += 1u << 20;
  c.tx_psn = cum;  // the marker takes the PSN the window expects
  ctx.send(p);
  expect_nack(ctx, c, proto::NackReason::kSequenceError, p.mbth.psn);
  const Rx& m = ctx.marker(c);
  ctx.need(m.p().ack.cum_psn == cum + 1, "the out-of-window PSN moved the window", &m);
  for (int i = 0; i < 64; ++i)
    if (*ctx.mem(i)) ctx.fail("the out-of-window WRITE was placed");
}

CONFORM_CASE(nack_remote_access_error, Level::kMust, ({"R3.8-2"}),
             "a WRITE with a bad R_Key is NACKed REMOTE_ACCESS_ERROR, and so is every later request") {
  Conn& c = ctx.connect();
  auto d = pattern(64, 5);
  proto::Packet p = write_req(ctx, c, 0, d);
  p.reth.rkey ^= 0x80;
  ctx.send(p);
  expect_nack(ctx, c, proto::NackReason::kRemoteAccessError, p.mbth.psn);
  proto::Packet q = write_req(ctx, c, 0, d);
  ctx.send(q);
  const Rx& n = ctx.expect(c, "the same fatal NACK again", [](const Rx& r) { return is_op(r, Opcode::kNack); });
  ctx.need(n.p().nack.reason == proto::NackReason::kRemoteAccessError, "a later request got another answer", &n);
}

CONFORM_CASE(nack_bounds_violation, Level::kMust, ({"R3.8-2"}),
             "a WRITE outside the MR is NACKed REMOTE_ACCESS_ERROR") {
  Conn& c = ctx.connect();
  auto d = pattern(64, 5);
  proto::Packet p = write_req(ctx, c, 0, d);
  p.reth.va = ctx.va(ctx.dut().mem_size() - 16);
  ctx.send(p);
  expect_nack(ctx, c, proto::NackReason::kRemoteAccessError, p.mbth.psn);
}

CONFORM_CASE(nack_invalid_misaligned_atomic, Level::kMust, ({"R3.8-3"}),
             "a misaligned atomic is NACKed INVALID_REQUEST") {
  Conn& c = ctx.connect();
  proto::Packet p = atomic_req(ctx, c, Opcode::kAtomicFetchAdd, 4100, 1, 0);
  ctx.send(p);
  expect_nack(ctx, c, proto::NackReason::kInvalidRequest, p.mbth.psn);
}

CONFORM_CASE(recv_too_small, Level::kMust, ({"R3.8-3"}),
             "a SEND longer than the receive buffer: NACK INVALID_REQUEST, receive completes LOC_LEN_ERR") {
  Conn& c = ctx.connect();
  ctx.need(c.qp->post_recv(7, 65536, 32) == 0, "post_recv failed");
  auto d = pattern(64, 6);
  proto::Packet p = send_pkt(ctx, c, c.recv_msn++, 64, 0, d, true);
  ctx.send(p);
  expect_nack(ctx, c, proto::NackReason::kInvalidRequest, p.mbth.psn);
  ibv_wc wc = recv_completion(ctx, c, "receive completion LOC_LEN_ERR");
  need_status(ctx, wc, IBV_WC_LOC_LEN_ERR, "the too-small receive");
}

CONFORM_CASE(nack_rnr_then_retry, Level::kMust, ({"R3.8-4"}),
             "a SEND without a receive is NACKed RNR with min_rnr_timer; resent after a post it lands") {
  QpOptions o;
  o.min_rnr_timer = 7;
  Conn& c = ctx.connect(o);
  auto d = pattern(100, 7);
  proto::Packet p = send_pkt(ctx, c, c.recv_msn++, 100, 0, d, true);
  ctx.send(p);
  const Rx& n = expect_nack(ctx, c, proto::NackReason::kRnr, p.mbth.psn);
  ctx.need(n.p().nack.rnr_timer == 7, "the RNR NACK does not carry min_rnr_timer 7", &n);
  ctx.need(c.qp->post_recv(11, 65536, 256) == 0, "post_recv failed");
  p.mbth.flags |= proto::kFlagRetransmit;
  p.mbth.timestamp += 0x100000;
  ctx.send(p);
  ctx.expect_ack(c, p.mbth.timestamp, "ACK of the resent SEND");
  ibv_wc wc = recv_completion(ctx, c, "receive completion of the SEND");
  need_status(ctx, wc, IBV_WC_SUCCESS, "the SEND's receive");
  ctx.need(wc.wr_id == 11 && wc.byte_len == 100 && wc.opcode == IBV_WC_RECV, "receive completion fields differ");
  ctx.need(std::memcmp(ctx.mem(65536), d.data(), 100) == 0, "the SEND's data was not placed");
}

CONFORM_CASE(sends_placed_by_msn_in_any_order, Level::kMust, ({"R6.9-3"}),
             "two 2-packet SENDs arriving in reverse order complete in MSN order with the right data") {
  Conn& c = ctx.connect();
  const uint32_t mtu = ctx.setup().mtu_bytes;
  ctx.need(c.qp->post_recv(1, 65536, 2 * mtu) == 0 && c.qp->post_recv(2, 65536 + 2 * mtu, 2 * mtu) == 0,
           "post_recv failed");
  auto m0 = pattern(2 * mtu, 0x10), m1 = pattern(2 * mtu, 0x60);
  std::span<const uint8_t> s0(m0), s1(m1);
  proto::Packet p[4] = {
      send_pkt(ctx, c, 0, 2 * mtu, 0, s0.first(mtu), false), send_pkt(ctx, c, 0, 2 * mtu, mtu, s0.subspan(mtu), true),
      send_pkt(ctx, c, 1, 2 * mtu, 0, s1.first(mtu), false), send_pkt(ctx, c, 1, 2 * mtu, mtu, s1.subspan(mtu), true)};
  for (int k = 3; k >= 0; --k) ctx.send(p[k]);
  ctx.expect(c, "ACK cum_psn past all four", [&](const Rx& r) {
    return is_op(r, Opcode::kAck) && r.p().ack.cum_psn == p[3].mbth.psn + 1;
  });
  for (uint64_t id : {1, 2}) {
    ibv_wc wc = recv_completion(ctx, c, "receive completion " + std::to_string(id));
    need_status(ctx, wc, IBV_WC_SUCCESS, "SEND receive");
    ctx.need(wc.wr_id == id && wc.byte_len == 2 * mtu, "receive completions out of MSN order or wrong length");
  }
  ctx.need(std::memcmp(ctx.mem(65536), m0.data(), 2 * mtu) == 0 &&
               std::memcmp(ctx.mem(65536 + 2 * mtu), m1.data(), 2 * mtu) == 0,
           "SEND data not placed by MSN and offset");
}

CONFORM_CASE(immediate_data_delivered, Level::kMust, ({"R6.9-3"}),
             "SEND_IMM and WRITE_IMM complete receives with their immediate data") {
  Conn& c = ctx.connect();
  ctx.need(c.qp->post_recv(1, 65536, 256) == 0 && c.qp->post_recv(2, 65536 + 256, 256) == 0, "post_recv failed");
  auto d = pattern(40, 0x21);
  proto::Packet s = send_pkt(ctx, c, c.recv_msn++, 40, 0, d, true, Opcode::kSendImm);
  s.imm = 0xA1B2C3D4;
  ctx.send(s);
  proto::Packet w = ctx.request(c, Opcode::kWriteImm);
  w.mbth.msn = c.recv_msn++;
  w.reth = {ctx.va(4096), ctx.rkey(), 40};
  w.imm = 0x01020304;
  w.payload = d;
  ctx.send(w);
  ibv_wc a = recv_completion(ctx, c, "SEND_IMM receive completion");
  ibv_wc b = recv_completion(ctx, c, "WRITE_IMM receive completion");
  need_status(ctx, a, IBV_WC_SUCCESS, "SEND_IMM");
  need_status(ctx, b, IBV_WC_SUCCESS, "WRITE_IMM");
  ctx.need(a.opcode == IBV_WC_RECV && (a.wc_flags & IBV_WC_WITH_IMM) && ntohl(a.imm_data) == 0xA1B2C3D4 &&
               a.byte_len == 40,
           "SEND_IMM completion fields differ");
  ctx.need(b.opcode == IBV_WC_RECV_RDMA_WITH_IMM && (b.wc_flags & IBV_WC_WITH_IMM) && ntohl(b.imm_data) == 0x01020304,
           "WRITE_IMM completion fields differ");
  ctx.need(std::memcmp(ctx.mem(4096), d.data(), 40) == 0, "the WRITE_IMM's data was not placed");
}

CONFORM_CASE(read_answered, Level::kMust, ({"R6.5-1"}),
             "a READ_REQ is answered by READ_RESPs with its PSN and MSN, MTU-cut, L on the last") {
  Conn& c = ctx.connect();
  const uint32_t mtu = ctx.setup().mtu_bytes, len = 2 * mtu + mtu / 2;
  auto d = pattern(len, 0x33);
  std::memcpy(ctx.mem(16384), d.data(), len);
  proto::Packet p = ctx.request(c, Opcode::kReadReq);
  p.mbth.msn = c.read_msn++;
  p.reth = {ctx.va(16384), ctx.rkey(), len};
  ctx.send(p);
  expect_read(ctx, c, p, 16384, 0, len);
}

CONFORM_CASE(read_reissue_answered, Level::kMust, ({"R6.5-5"}),
             "a READ re-issue (new PSN, same MSN, offset) is answered with the new PSN and message offsets") {
  Conn& c = ctx.connect();
  const uint32_t mtu = ctx.setup().mtu_bytes, len = 3 * mtu;
  auto d = pattern(len, 0x44);
  std::memcpy(ctx.mem(16384), d.data(), len);
  proto::Packet p = ctx.request(c, Opcode::kReadReq);
  p.mbth.msn = c.read_msn++;
  p.reth = {ctx.va(16384), ctx.rkey(), len};
  ctx.send(p);
  expect_read(ctx, c, p, 16384, 0, len);
  proto::Packet r = ctx.request(c, Opcode::kReadReq);  // the tester "lost" all but the first packet
  r.mbth.msn = p.mbth.msn;
  r.mbth.offset = mtu;
  r.reth = {ctx.va(16384 + mtu), ctx.rkey(), len - mtu};
  ctx.send(r);
  expect_read(ctx, c, r, 16384 + mtu, mtu, len - mtu);
}

CONFORM_CASE(read_duplicate_served_again, Level::kMust, ({"R6.8-1"}),
             "a duplicate READ_REQ is served again and ACKed with D set") {
  Conn& c = ctx.connect();
  const uint32_t len = 200;
  auto d = pattern(len, 0x45);
  std::memcpy(ctx.mem(16384), d.data(), len);
  proto::Packet p = ctx.request(c, Opcode::kReadReq);
  p.mbth.msn = c.read_msn++;
  p.reth = {ctx.va(16384), ctx.rkey(), len};
  ctx.send(p);
  expect_read(ctx, c, p, 16384, 0, len);
  ctx.expect_ack(c, p.mbth.timestamp, "ACK of the READ_REQ");
  p.mbth.timestamp += 0x100000;
  p.mbth.flags |= proto::kFlagRetransmit;
  ctx.send(p);
  expect_read(ctx, c, p, 16384, 0, len);
  const Rx& a = ctx.expect_ack(c, p.mbth.timestamp, "ACK with D of the duplicate READ_REQ");
  ctx.need(a.p().ack.ack_flags & proto::kAckFlagDup, "the duplicate READ_REQ's ACK lacks D", &a);
}

CONFORM_CASE(read_msn_ahead_nacked, Level::kMust, ({"R6.5-3"}),
             "a READ_REQ whose read MSN is ahead of the next one is NACKed INVALID_REQUEST") {
  Conn& c = ctx.connect();
  proto::Packet p = ctx.request(c, Opcode::kReadReq);
  p.mbth.msn = c.read_msn + 5;
  p.reth = {ctx.va(0), ctx.rkey(), 64};
  ctx.send(p);
  expect_nack(ctx, c, proto::NackReason::kInvalidRequest, p.mbth.psn);
}

CONFORM_CASE(read_limit_enforced, Level::kMust, ({"R6.5-2", "R6.5-3"}),
             "a READ beyond max_dest_rd_atomic while the first is served is NACKed INVALID_REQUEST") {
  QpOptions o;
  o.max_dest_rd_atomic = 1;
  Conn& c = ctx.connect(o);
  // Both READs arrive behind a hole, so they become runnable together when
  // it is filled: the second then finds the first still being answered.
  proto::Packet hole = ctx.request(c, Opcode::kWrite);
  hole.reth = {ctx.va(0), ctx.rkey(), 0};
  const uint32_t len = 256u << 10;
  proto::Packet a = ctx.request(c, Opcode::kReadReq);
  a.mbth.msn = c.read_msn++;
  a.reth = {ctx.va(0), ctx.rkey(), len};
  proto::Packet b = ctx.request(c, Opcode::kReadReq);
  b.mbth.msn = c.read_msn++;
  b.reth = {ctx.va(0), ctx.rkey(), 64};
  ctx.send(ctx.frame(a), "a 256 KiB READ behind a hole");
  ctx.send(ctx.frame(b), "a second READ (max_dest_rd_atomic 1)");
  ctx.send(ctx.frame(hole), "the hole, filled");
  const Rx& r = ctx.expect(c, "NACK INVALID_REQUEST for the second READ", [&](const Rx& x) {
    return (is_op(x, Opcode::kNack) && x.p().nack.psn == b.mbth.psn) ||
           (is_op(x, Opcode::kReadResp) && x.p().mbth.psn == b.mbth.psn);
  }, 60);
  if (is_op(r, Opcode::kNack)) {
    ctx.need(r.p().nack.reason == proto::NackReason::kInvalidRequest, "wrong NACK reason", &r);
    return;
  }
  // Served: a violation only if the first READ was still being answered.
  for (const Rx* x : ctx.pending(c))
    if (is_op(*x, Opcode::kReadResp) && x->p().mbth.psn == a.mbth.psn && (x->p().mbth.flags & proto::kFlagLast) &&
        x->seq < r.seq)
      ctx.skip("the DUT took the second READ only after answering the first in full");
  ctx.fail("the second READ was served while the first was still being answered", "NACK INVALID_REQUEST", &r);
}

CONFORM_CASE(read_flood_survived, Level::kMust, ({"R6.5-4"}),
             "after 256 READ re-issues at once the DUT still serves the QP (its READ queue is bounded)") {
  Conn& c = ctx.connect();
  proto::Packet first = ctx.request(c, Opcode::kReadReq);
  first.mbth.msn = c.read_msn++;
  first.reth = {ctx.va(0), ctx.rkey(), 64};
  ctx.send(first);
  expect_read(ctx, c, first, 0, 0, 64);
  for (int i = 0; i < 256; ++i) {
    proto::Packet p = ctx.request(c, Opcode::kReadReq);
    p.mbth.msn = first.mbth.msn;  // re-issues of the served READ: allowed, each queued
    p.reth = {ctx.va(0), ctx.rkey(), 4096};
    p.mbth.flags = proto::kFlagLast;
    std::vector<uint8_t> f = ctx.frame(p);
    ctx.send(f);
  }
  ctx.marker(c);
  ctx.need(c.qp->state() != IBV_QPS_ERR, "the DUT moved the QP to error");
}

CONFORM_CASE(atomic_fetch_add, Level::kMust, ({"R6.7-1"}), "FETCH_ADD returns the original value and adds once") {
  Conn& c = ctx.connect();
  store64(ctx, 8192, 5);
  proto::Packet p = atomic_req(ctx, c, Opcode::kAtomicFetchAdd, 8192, 3, 0);
  ctx.send(p);
  expect_atomic_resp(ctx, c, p, 5);
  ctx.need(load64(ctx, 8192) == 8, "memory is not 5 + 3");
}

CONFORM_CASE(atomic_cmp_swap, Level::kMust, ({"R6.7-1"}), "CMP_SWAP swaps on a match, not on a mismatch") {
  Conn& c = ctx.connect();
  store64(ctx, 8192, 8);
  proto::Packet p = atomic_req(ctx, c, Opcode::kAtomicCmpSwap, 8192, 100, 8);
  ctx.send(p);
  expect_atomic_resp(ctx, c, p, 8);
  ctx.need(load64(ctx, 8192) == 100, "a matching CMP_SWAP did not swap");
  proto::Packet q = atomic_req(ctx, c, Opcode::kAtomicCmpSwap, 8192, 7, 8);
  ctx.send(q);
  expect_atomic_resp(ctx, c, q, 100);
  ctx.need(load64(ctx, 8192) == 100, "a mismatching CMP_SWAP swapped");
}

CONFORM_CASE(atomic_replayed_exactly_once, Level::kMust, ({"R6.7-1", "R6.8-1"}),
             "a duplicate atomic is answered from the cache and not executed again") {
  Conn& c = ctx.connect();
  store64(ctx, 8192, 40);
  proto::Packet p = atomic_req(ctx, c, Opcode::kAtomicFetchAdd, 8192, 2, 0);
  ctx.send(p);
  expect_atomic_resp(ctx, c, p, 40);
  p.mbth.timestamp += 0x100000;
  p.mbth.flags |= proto::kFlagRetransmit;
  ctx.send(p);
  expect_atomic_resp(ctx, c, p, 40);
  ctx.marker(c);
  ctx.need(load64(ctx, 8192) == 42, "the duplicate atomic was executed again");
}

CONFORM_CASE(atomic_evicted_not_reexecuted, Level::kMust, ({"R6.7-2"}),
             "a duplicate of an atomic long gone from the cache is not executed again") {
  Conn& c = ctx.connect();
  store64(ctx, 8192, 0);
  proto::Packet first = atomic_req(ctx, c, Opcode::kAtomicFetchAdd, 8192, 1, 0);
  ctx.send(first);
  expect_atomic_resp(ctx, c, first, 0);
  for (uint64_t i = 1; i < 300; ++i) {  // far more than any cache of max_dest_rd_atomic entries
    proto::Packet p = atomic_req(ctx, c, Opcode::kAtomicFetchAdd, 8192, 1, 0);
    ctx.send(p);
    expect_atomic_resp(ctx, c, p, i);
  }
  first.mbth.timestamp += 0x100000;
  ctx.send(first);
  ctx.marker(c);
  ctx.need(load64(ctx, 8192) == 300, "the evicted duplicate was executed again");
  for (const Rx* r : ctx.pending(c))
    if (is_op(*r, Opcode::kAtomicResp) && r->p().atomic_ack.original != 0)
      ctx.fail("the duplicate was answered with a value it never had", "original 0 or NACK INVALID_REQUEST", r);
}

CONFORM_CASE(probe_answered, Level::kMust, ({"R8-1", "R3.1-2"}),
             "a PROBE (any MBTH PSN) is answered with its nonce, timestamp and path, to the prober") {
  Conn& c = ctx.connect();
  proto::Packet p;
  p.mbth.opcode = Opcode::kProbe;
  p.mbth.dest_qpn = c.dut_qpn();
  p.mbth.psn = 0xDEADBEEF;  // informational: must be ignored
  p.mbth.path_id = 3;
  p.mbth.timestamp = 0x5151;
  p.probe.nonce = 0xC0FFEE;
  ctx.send(p);
  const Rx& r = ctx.expect(c, "PROBE_REPLY nonce=0xc0ffee echo_ts=0x5151 path=3",
                           [](const Rx& x) { return is_op(x, Opcode::kProbeReply); });
  ctx.need(r.p().probe.nonce == 0xC0FFEE && r.p().probe.echo_ts == 0x5151 && r.p().mbth.path_id == 3,
           "PROBE_REPLY fields differ", &r);
}

CONFORM_CASE(probe_answered_in_rtr, Level::kMust, ({"R8-1"}), "a QP in RTR answers PROBEs") {
  QpOptions o;
  o.stop_at_rtr = true;
  Conn& c = ctx.connect(o);
  proto::Packet p;
  p.mbth.opcode = Opcode::kProbe;
  p.mbth.dest_qpn = c.dut_qpn();
  p.mbth.timestamp = 0x6161;
  p.probe.nonce = 0xAB;
  ctx.send(p);
  const Rx& r = ctx.expect(c, "PROBE_REPLY nonce=0xab", [](const Rx& x) { return is_op(x, Opcode::kProbeReply); });
  ctx.need(r.p().probe.nonce == 0xAB && r.p().probe.echo_ts == 0x6161, "PROBE_REPLY fields differ", &r);
}

}  // namespace metaroce::conform::cases
