// The DUT as requester: work requests posted through verbs, the tester
// checks the request frames, answers them (or NACKs, or stays silent) and
// checks the completions: every opcode, every completion status the wire
// can cause, error flushes, and the forged answers a requester must ignore
// (docs/protocol.md §2, §3, §6, §7).
#include <arpa/inet.h>

#include "tests/conformance/helpers.h"

namespace metaroce::conform::cases {
namespace {

constexpr uint64_t kRemoteVa = 0x00007f0012340000ull;  // the tester's "memory": never touched
constexpr uint32_t kRemoteKey = 0x4242;

void need_posted(Ctx& ctx, int err) {
  if (err) ctx.fail(std::string("ibv_post_send failed: ") + std::strerror(err));
}

// The single-packet request a just-posted WR sends.
const Rx& one_request(Ctx& ctx, Conn& c, Opcode op) {
  const Rx& r = *dut_requests(ctx, c, 1, std::string("the DUT's ") + proto::to_string(op))[0];
  ctx.need(is_op(r, op), std::string("the DUT sent another opcode than ") + proto::to_string(op), &r);
  return r;
}


// A WRITE of len bytes from MR offset off; returns its packets.
std::vector<const Rx*> post_write(Ctx& ctx, Conn& c, uint64_t off, uint32_t len, uint64_t id = 1) {
  need_posted(ctx, c.qp->post_send(IBV_WR_RDMA_WRITE, id, off, len, kRemoteVa, kRemoteKey));
  uint32_t mtu = ctx.setup().mtu_bytes;
  return dut_requests(ctx, c, len ? (len + mtu - 1) / mtu : 1, "the DUT's WRITE packets");
}

// Posts two one-packet WRITEs, answers the first with `answer` and checks
// the first completes with `first`, the second is flushed.
void first_fails(Ctx& ctx, const std::function<void(Conn&, const Rx&)>& answer, ibv_wc_status first,
                 const QpOptions& o = {}) {
  Conn& c = ctx.connect(o);
  auto w1 = post_write(ctx, c, 0, 64, 1);
  auto w2 = post_write(ctx, c, 64, 64, 2);
  answer(c, *w1[0]);
  ibv_wc a = send_completion(ctx, c, std::string("WR 1 completes ") + ibv_wc_status_str(first));
  ctx.need(a.wr_id == 1, "the first completion is not WR 1's");
  need_status(ctx, a, first, "WR 1");
  ibv_wc b = send_completion(ctx, c, "WR 2 flushed");
  ctx.need(b.wr_id == 2, "the second completion is not WR 2's");
  need_status(ctx, b, IBV_WC_WR_FLUSH_ERR, "WR 2 after the failed one");
}

void nack_first(Ctx& ctx, uint8_t reason, ibv_wc_status want) {
  first_fails(ctx, [&](Conn& c, const Rx& r) {
    proto::Packet n = nack_pkt(c, static_cast<proto::NackReason>(reason), r.p().mbth.psn);
    ctx.send(n);
  }, want);
}

}  // namespace

CONFORM_CASE(op_rdma_write, Level::kMust, ({"R6.3-1", "R6.1-1", "R6.9-1"}),
             "RDMA WRITE: MTU-cut packets with consecutive PSNs, RETH on each; ACK completes it") {
  Conn& c = ctx.connect();
  const uint32_t mtu = ctx.setup().mtu_bytes, len = 2 * mtu + mtu / 2;
  auto d = pattern(len, 0x12);
  std::memcpy(ctx.mem(0), d.data(), len);
  auto pk = post_write(ctx, c, 0, len);
  for (uint32_t k = 0; k < 3; ++k) {
    const proto::Packet& p = pk[k]->p();
    uint32_t n = k < 2 ? mtu : mtu / 2;
    ctx.need(is_op(*pk[k], Opcode::kWrite) && p.mbth.psn == c.dut_psn + k && p.mbth.offset == k * mtu &&
                 p.payload.size() == n && p.reth.va == kRemoteVa && p.reth.rkey == kRemoteKey &&
                 p.reth.length == len && ((p.mbth.flags & proto::kFlagLast) != 0) == (k == 2),
             "WRITE packet " + std::to_string(k) + " differs from psn=" + std::to_string(c.dut_psn + k) +
                 " off=" + std::to_string(k * mtu) + " payload=" + std::to_string(n) + "B reth.length=" +
                 std::to_string(len),
             pk[k]);
    ctx.need(std::memcmp(p.payload.data(), d.data() + k * mtu, n) == 0, "WRITE payload differs", pk[k]);
  }
  ibv_wc wc = serve(ctx, c, c.dut_psn + 3, "WRITE completion");
  need_status(ctx, wc, IBV_WC_SUCCESS, "WRITE");
  ctx.need(wc.opcode == IBV_WC_RDMA_WRITE, "completion opcode is not RDMA_WRITE");
}

CONFORM_CASE(op_send, Level::kMust, ({"R6.9-1"}), "SEND and SEND_IMM: SETH length, receive MSNs 0 and 1, IMM") {
  Conn& c = ctx.connect();
  auto d = pattern(100, 0x13);
  std::memcpy(ctx.mem(0), d.data(), 100);
  need_posted(ctx, c.qp->post_send(IBV_WR_SEND, 1, 0, 100));
  need_posted(ctx, c.qp->post_send(IBV_WR_SEND_WITH_IMM, 2, 0, 100, 0, 0, htonl(0x0A0B0C0D)));
  auto pk = dut_requests(ctx, c, 2, "SEND, SEND_IMM");
  const proto::Packet &s = pk[0]->p(), &i = pk[1]->p();
  ctx.need(is_op(*pk[0], Opcode::kSend) && s.seth.length == 100 && s.mbth.msn == 0 && s.payload.size() == 100,
           "SEND differs from msn=0 seth.length=100", pk[0]);
  ctx.need(std::memcmp(s.payload.data(), d.data(), 100) == 0, "SEND payload differs", pk[0]);
  ctx.need(is_op(*pk[1], Opcode::kSendImm) && i.mbth.msn == 1 && i.imm == 0x0A0B0C0D,
           "SEND_IMM differs from msn=1 imm=0x0a0b0c0d", pk[1]);
  for (uint64_t id : {1, 2}) {
    ibv_wc wc = serve(ctx, c, c.dut_psn + 2, "SEND completion");
    need_status(ctx, wc, IBV_WC_SUCCESS, "SEND");
    ctx.need(wc.wr_id == id && wc.opcode == IBV_WC_SEND, "SEND completions out of order or wrong opcode");
  }
}

CONFORM_CASE(op_write_imm, Level::kMust, ({"R6.9-1"}), "WRITE_IMM: RETH, IMM, receive MSN; ACK completes it") {
  Conn& c = ctx.connect();
  need_posted(ctx, c.qp->post_send(IBV_WR_RDMA_WRITE_WITH_IMM, 1, 0, 32, kRemoteVa, kRemoteKey, htonl(77)));
  const Rx& r = one_request(ctx, c, Opcode::kWriteImm);
  ctx.need(r.p().imm == 77 && r.p().reth.length == 32 && r.p().mbth.msn == 0, "WRITE_IMM fields differ", &r);
  ibv_wc wc = serve(ctx, c, c.dut_psn + 1, "WRITE_IMM completion");
  need_status(ctx, wc, IBV_WC_SUCCESS, "WRITE_IMM");
  ctx.need(wc.opcode == IBV_WC_RDMA_WRITE, "completion opcode is not RDMA_WRITE");
}

CONFORM_CASE(op_rdma_read, Level::kMust, ({"R6.9-1"}),
             "RDMA READ: READ_REQ for the range; the READ_RESPs are placed and complete the WR") {
  Conn& c = ctx.connect();
  const uint32_t mtu = ctx.setup().mtu_bytes, len = mtu + 100;
  std::memset(ctx.mem(0), 0, len);
  need_posted(ctx, c.qp->post_send(IBV_WR_RDMA_READ, 1, 0, len, kRemoteVa, kRemoteKey));
  const Rx& q = one_request(ctx, c, Opcode::kReadReq);
  const proto::Packet& p = q.p();
  ctx.need(p.reth.va == kRemoteVa && p.reth.rkey == kRemoteKey && p.reth.length == len && p.mbth.offset == 0 &&
               p.mbth.msn == 0 && p.payload.empty(),
           "READ_REQ fields differ from va, rkey, length=" + std::to_string(len) + " msn=0 off=0", &q);
  auto d = pattern(len, 0x66);
  for (uint32_t off = 0; off < len; off += mtu) {
    proto::Packet r;
    r.mbth.opcode = Opcode::kReadResp;
    r.mbth.dest_qpn = c.dut_qpn();
    r.mbth.psn = p.mbth.psn;
    r.mbth.msn = p.mbth.msn;
    r.mbth.offset = off;
    uint32_t n = std::min(mtu, len - off);
    if (off + n == len) r.mbth.flags = proto::kFlagLast;
    r.payload = std::span<const uint8_t>(d).subspan(off, n);
    ctx.send(r);
  }
  ibv_wc wc = serve(ctx, c, p.mbth.psn + 1, "READ completion", {d, 0});
  need_status(ctx, wc, IBV_WC_SUCCESS, "READ");
  ctx.need(wc.opcode == IBV_WC_RDMA_READ && std::memcmp(ctx.mem(0), d.data(), len) == 0,
           "READ data not placed or wrong opcode");
}

CONFORM_CASE(op_atomics, Level::kMust, ({"R6.9-1"}),
             "CMP_SWAP and FETCH_ADD: AtomicETH fields; ATOMIC_RESP's original lands in the local buffer") {
  Conn& c = ctx.connect();
  struct Op {
    ibv_wr_opcode verb;
    Opcode wire;
    uint64_t compare_add, swap;
  } ops[2] = {{IBV_WR_ATOMIC_CMP_AND_SWP, Opcode::kAtomicCmpSwap, 11, 22},
              {IBV_WR_ATOMIC_FETCH_AND_ADD, Opcode::kAtomicFetchAdd, 5, 0}};
  uint32_t msn = 0;
  for (const Op& o : ops) {
    std::memset(ctx.mem(0), 0, 8);
    need_posted(ctx, c.qp->post_send(o.verb, msn, 0, 8, kRemoteVa + 64, kRemoteKey, 0, o.compare_add, o.swap));
    const Rx& q = one_request(ctx, c, o.wire);
    const proto::AtomicEth& a = q.p().atomic;
    bool cas = o.wire == Opcode::kAtomicCmpSwap;
    ctx.need(a.va == kRemoteVa + 64 && a.rkey == kRemoteKey && q.p().mbth.msn == msn &&
                 a.swap_add == (cas ? o.swap : o.compare_add) && (!cas || a.compare == o.compare_add),
             "AtomicETH fields differ", &q);
    proto::Packet r;
    r.mbth.opcode = Opcode::kAtomicResp;
    r.mbth.dest_qpn = c.dut_qpn();
    r.mbth.psn = q.p().mbth.psn;
    r.mbth.msn = q.p().mbth.msn;
    r.mbth.flags = proto::kFlagLast;
    r.atomic_ack.original = 0x1122334455667788ull + msn;
    ctx.send(r);
    ibv_wc wc = serve(ctx, c, q.p().mbth.psn + 1, "atomic completion", {{}, r.atomic_ack.original});
    need_status(ctx, wc, IBV_WC_SUCCESS, proto::to_string(o.wire));
    uint64_t got;
    std::memcpy(&got, ctx.mem(0), 8);
    ctx.need(got == 0x1122334455667788ull + msn, "the original value did not land in the local buffer");
    ++msn;
  }
}

CONFORM_CASE(status_rem_access_err, Level::kMust, ({"R3.8-5", "R6.9-2"}),
             "NACK REMOTE_ACCESS_ERROR: WR completes REM_ACCESS_ERR, the next is flushed") {
  nack_first(ctx, 2, IBV_WC_REM_ACCESS_ERR);
}

CONFORM_CASE(status_rem_inv_req_err, Level::kMust, ({"R3.8-5", "R6.9-2"}),
             "NACK INVALID_REQUEST: WR completes REM_INV_REQ_ERR, the next is flushed") {
  nack_first(ctx, 3, IBV_WC_REM_INV_REQ_ERR);
}

CONFORM_CASE(status_rem_op_err, Level::kMust, ({"R3.8-5", "R6.9-2"}),
             "NACK REMOTE_OPERATION_ERROR: WR completes REM_OP_ERR, the next is flushed") {
  nack_first(ctx, 4, IBV_WC_REM_OP_ERR);
}

CONFORM_CASE(status_unknown_nack_reason, Level::kMust, ({"R3.8-6"}),
             "a NACK with an unknown reason is treated as REMOTE_OPERATION_ERROR") {
  nack_first(ctx, 0x42, IBV_WC_REM_OP_ERR);
}

CONFORM_CASE(status_rnr_retry_exceeded, Level::kMust, ({"R3.8-5", "R6.9-2"}),
             "rnr_retry 0: an RNR NACK completes the SEND RNR_RETRY_EXC_ERR") {
  QpOptions o;
  o.rnr_retry = 0;
  Conn& c = ctx.connect(o);
  need_posted(ctx, c.qp->post_send(IBV_WR_SEND, 1, 0, 16));
  need_posted(ctx, c.qp->post_send(IBV_WR_SEND, 2, 0, 16));
  auto pk = dut_requests(ctx, c, 2, "two SENDs");
  ctx.send(nack_pkt(c, proto::NackReason::kRnr, pk[0]->p().mbth.psn));
  ibv_wc a = send_completion(ctx, c, "SEND 1 completes RNR_RETRY_EXC_ERR");
  ctx.need(a.wr_id == 1, "the first completion is not WR 1's");
  need_status(ctx, a, IBV_WC_RNR_RETRY_EXC_ERR, "SEND 1");
  ibv_wc b = send_completion(ctx, c, "SEND 2 flushed");
  need_status(ctx, b, IBV_WC_WR_FLUSH_ERR, "SEND 2");
}

CONFORM_CASE(status_retry_exceeded, Level::kMust, ({"R6.10-2"}),
             "no answer at all: retransmissions with R and A set, then RETRY_EXC_ERR") {
  QpOptions o;
  o.timeout = 10;  // 4 ms
  o.retry_cnt = 2;
  Conn& c = ctx.connect(o);
  auto pk = post_write(ctx, c, 0, 64);
  const Rx& r = ctx.expect(c, "a retransmission of the WRITE with R and A", [&](const Rx& x) {
    return is_op(x, Opcode::kWrite) && x.p().mbth.psn == pk[0]->p().mbth.psn &&
           (x.p().mbth.flags & proto::kFlagRetransmit);
  });
  ctx.need(r.p().mbth.flags & proto::kFlagAckReq, "the retransmission does not ask for an ACK", &r);
  ibv_wc wc = send_completion(ctx, c, "RETRY_EXC_ERR", 60);
  need_status(ctx, wc, IBV_WC_RETRY_EXC_ERR, "the unanswered WRITE");
}

CONFORM_CASE(flush_receives_on_error, Level::kMust, ({"R6.9-2"}),
             "a QP moved to error flushes its posted receives") {
  Conn& c = ctx.connect();
  ctx.need(c.qp->post_recv(5, 0, 64) == 0 && c.qp->post_recv(6, 64, 64) == 0, "post_recv failed");
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_ERR;
  ctx.need(c.qp->modify(&a, IBV_QP_STATE) == 0, "modify to ERR failed");
  for (uint64_t id : {5, 6}) {
    ibv_wc wc = recv_completion(ctx, c, "flushed receive");
    ctx.need(wc.wr_id == id, "flushed receives out of order");
    need_status(ctx, wc, IBV_WC_WR_FLUSH_ERR, "posted receive");
  }
}

namespace {

// The forgery cases never answer the DUT's request truthfully: a DUT that
// ignores the forged frame keeps retransmitting and completes RETRY_EXC_ERR;
// one that took it completes otherwise. (retry_cnt 7: the forged frame
// arrives long before the last retry.)
void forged_is_ignored(Ctx& ctx, Conn& c, const std::string& what) {
  ctx.marker(c);  // the forged frame has been processed
  ibv_wc wc = send_completion(ctx, c, "RETRY_EXC_ERR: " + what + " changed nothing", 60);
  if (wc.status != IBV_WC_RETRY_EXC_ERR)
    ctx.fail(what + " was taken: the WR completed " + ibv_wc_status_str(wc.status),
             "transport retry counter exceeded");
}

}  // namespace

CONFORM_CASE(stale_ack_ignored, Level::kMust, ({"R6.6-1"}),
             "an ACK whose cum_psn is below the oldest undelivered PSN is ignored, SACK bits and all") {
  Conn& c = ctx.connect();
  auto pk = post_write(ctx, c, 0, 64);
  uint32_t s = pk[0]->p().mbth.psn;
  ctx.send(ctx.frame(ack_pkt(c, s - 5, uint64_t{1} << 4)), "stale cum_psn, SACK bit 4 = the WRITE's PSN");
  forged_is_ignored(ctx, c, "the stale ACK");
}

CONFORM_CASE(forged_ack_beyond_next_psn_ignored, Level::kMust, ({"R6.11-1"}),
             "an ACK for PSNs never sent is dropped") {
  Conn& c = ctx.connect();
  auto pk = post_write(ctx, c, 0, 64);
  ctx.send(ctx.frame(ack_pkt(c, pk[0]->p().mbth.psn + 50)), "cum_psn 50 beyond the next PSN");
  forged_is_ignored(ctx, c, "the ACK beyond the next PSN");
}

CONFORM_CASE(forged_nack_ignored, Level::kMust, ({"R6.11-1"}), "a NACK naming a PSN not outstanding is dropped") {
  Conn& c = ctx.connect();
  auto pk = post_write(ctx, c, 0, 64);
  ctx.send(ctx.frame(nack_pkt(c, proto::NackReason::kRemoteAccessError, pk[0]->p().mbth.psn + 10)),
           "NACK for a PSN never sent");
  forged_is_ignored(ctx, c, "the NACK for a PSN not outstanding");
}

CONFORM_CASE(forged_read_resp_ignored, Level::kMust, ({"R6.11-1"}),
             "a READ_RESP for no waiting READ, or outside its range, is dropped") {
  Conn& c = ctx.connect();
  std::memset(ctx.mem(0), 0, 128);
  need_posted(ctx, c.qp->post_send(IBV_WR_RDMA_READ, 1, 0, 64, kRemoteVa, kRemoteKey));
  const Rx& q = one_request(ctx, c, Opcode::kReadReq);
  auto bad = pattern(64, 0xEE);
  proto::Packet r;
  r.mbth.opcode = Opcode::kReadResp;
  r.mbth.dest_qpn = c.dut_qpn();
  r.mbth.psn = q.p().mbth.psn;
  r.mbth.msn = q.p().mbth.msn + 3;  // no such READ
  r.mbth.flags = proto::kFlagLast;
  r.payload = bad;
  ctx.send(ctx.frame(r), "READ_RESP for read MSN +3");
  r.mbth.msn = q.p().mbth.msn;
  r.mbth.psn = q.p().mbth.psn + 7;  // not one of the READ's request PSNs
  ctx.send(ctx.frame(r), "READ_RESP with a PSN the READ never used");
  forged_is_ignored(ctx, c, "a forged READ_RESP");
  for (int i = 0; i < 128; ++i)
    if (*ctx.mem(i)) ctx.fail("forged READ_RESP data was placed");
}

CONFORM_CASE(ack_on_any_path_accepted, Level::kMust, ({"R2.2-3", "R3.1-2"}),
             "an ACK from another source port and path, with any MBTH PSN, is accepted") {
  Conn& c = ctx.connect();
  auto pk = post_write(ctx, c, 0, 64);
  proto::Packet a = ack_pkt(c, pk[0]->p().mbth.psn + 1, 0, pk[0]->p().mbth.timestamp);
  a.mbth.path_id = static_cast<uint8_t>(pk[0]->p().mbth.path_id + 77);
  a.mbth.psn = 0xDEADBEEF;
  proto::FrameHeaders h = ctx.headers();
  h.src_port = 17;
  ctx.send(ctx.frame(a, &h), "source port 17, another path, MBTH PSN 0xdeadbeef");
  need_status(ctx, send_completion(ctx, c, "WRITE completion"), IBV_WC_SUCCESS, "WRITE");
}

CONFORM_CASE(sender_frames_well_formed, Level::kMust, ({"R3-1", "R9-2"}),
             "the DUT's frames: version 1, v1 opcodes only, reserved bits 0, UDP port 4796") {
  Conn& c = ctx.connect();
  auto pk = post_write(ctx, c, 0, 64);
  need_posted(ctx, c.qp->post_send(IBV_WR_SEND, 2, 0, 8));
  pk.push_back(&one_request(ctx, c, Opcode::kSend));
  Layout l(ctx);
  for (const Rx* r : pk) {
    const Frame& f = r->bytes;
    ctx.need(f[l.tp] == 0x10, "MBTH version/reserved byte is not 0x10", r);
    ctx.need((get16(f, l.tp + 2) & 0xFFF0) == 0, "reserved MBTH flag bits are set", r);
    ctx.need(get16(f, l.udp + 2) == proto::kUdpPort, "UDP destination port is not 4796", r);
    ctx.need(static_cast<uint8_t>(r->p().mbth.opcode) <= 0x13, "an opcode v1 peers do not know", r);
  }
  need_status(ctx, serve(ctx, c, c.dut_psn + 2, "WRITE completion"), IBV_WC_SUCCESS, "WRITE");
  need_status(ctx, serve(ctx, c, c.dut_psn + 2, "SEND completion"), IBV_WC_SUCCESS, "SEND");
}

CONFORM_CASE(sender_source_port_entropy, Level::kShould, ({"R2.2-1"}),
             "the DUT's UDP source ports are 0xC000 | entropy") {
  Conn& c = ctx.connect();
  auto pk = post_write(ctx, c, 0, 4 * ctx.setup().mtu_bytes);
  for (const Rx* r : pk)
    ctx.need((r->frame.headers.src_port & 0xC000) == 0xC000, "a source port outside 0xC000..0xFFFF", r);
  need_status(ctx, serve(ctx, c, c.dut_psn + 4, "WRITE completion"), IBV_WC_SUCCESS, "WRITE");
}

CONFORM_CASE(sender_ipv6_headers, Level::kMust, ({"R2.1-4", "R2.4-2"}),
             "IPv6: no extension headers, flow label 0, a valid UDP checksum") {
  if (!ctx.setup().ipv6) ctx.skip("an IPv6 rule; run the suite with --ipv6");
  Conn& c = ctx.connect();
  auto pk = post_write(ctx, c, 0, 64);
  const Frame& f = pk[0]->bytes;
  const size_t ip = proto::kEthLen;
  ctx.need(f[ip + 6] == 17, "IPv6 next header is not UDP (an extension header?)", pk[0]);
  ctx.need((f[ip + 1] & 0x0F) == 0 && f[ip + 2] == 0 && f[ip + 3] == 0, "IPv6 flow label is not 0", pk[0]);
  ctx.need(get16(f, ip + 40 + 6) != 0, "IPv6 UDP checksum is 0", pk[0]);  // parse_frame verified its value
  need_status(ctx, serve(ctx, c, c.dut_psn + 1, "WRITE completion"), IBV_WC_SUCCESS, "WRITE");
}

CONFORM_CASE(sender_window_bounded, Level::kMust, ({"R7.2-1"}),
             "with nothing acknowledged, the DUT stops sending new PSNs (its window) and retransmits") {
  QpOptions o;
  o.timeout = 12;  // 16 ms
  Conn& c = ctx.connect(o);
  const uint32_t mtu = ctx.setup().mtu_bytes, len = 4u << 20, total = len / mtu;
  need_posted(ctx, c.qp->post_send(IBV_WR_RDMA_WRITE, 1, 0, len, kRemoteVa, kRemoteKey));
  uint32_t fresh = 0;
  const Rx* r = nullptr;
  while ((r = ctx.await(c, [](const Rx& x) { return is_request(x); }, 30))) {
    if (r->p().mbth.flags & proto::kFlagRetransmit) break;
    ++fresh;
  }
  ctx.need(r != nullptr, "no retransmission within 30 s of the last new packet");
  ctx.need(fresh < total, "all " + std::to_string(total) + " packets were sent without any ACK");
  ctx.note("new packets before the first retransmission: " + std::to_string(fresh) + " of " +
           std::to_string(total));
}

CONFORM_CASE(sender_respects_credit, Level::kMust, ({"R7.2-2"}),
             "once an ACK granted credit 2, the DUT keeps at most 2 packets in flight") {
  Conn& c = ctx.connect();
  const uint32_t mtu = ctx.setup().mtu_bytes;
  auto first = post_write(ctx, c, 0, 64, 1);
  proto::Packet a = ack_pkt(c, first[0]->p().mbth.psn + 1, 0, first[0]->p().mbth.timestamp);
  a.ack.credit = 2;
  ctx.send(ctx.frame(a), "ACK granting credit 2");
  need_status(ctx, send_completion(ctx, c, "the first WRITE completes"), IBV_WC_SUCCESS, "first WRITE");
  // The grant holds: of a 64-packet WRITE only 2 packets may go out per ACK.
  need_posted(ctx, c.qp->post_send(IBV_WR_RDMA_WRITE, 2, 0, 64 * mtu, kRemoteVa, kRemoteKey));
  // Any request counts (a first send may carry R after timeouts): PSNs are
  // what is in flight. The tester answers each round at once (the DUT's
  // retry timer does not wait); a packet may have left under the ACK before
  // the latest, so the limit is that ACK's cum_psn + 2.
  uint32_t acked = first[0]->p().mbth.psn + 1, older = acked, cum = acked;
  for (int round = 0; round < 8; ++round) {
    const Rx* r = ctx.await(c, [](const Rx& x) { return is_request(x); });
    ctx.need(r != nullptr, "no packet at all under credit 2");
    uint32_t high = r->p().mbth.psn;
    // Until the DUT waits (it resends) or goes quiet: then ACK.
    for (; r; r = ctx.await(c, [](const Rx& x) { return is_request(x); }, 0.05)) {
      if (proto::seq_le(older + 2, r->p().mbth.psn))
        ctx.fail("PSN " + std::to_string(r->p().mbth.psn) + " sent with PSNs from " + std::to_string(older) +
                     " in flight under credit 2",
                 "PSNs below " + std::to_string(older + 2), r);
      if (proto::seq_lt(high, r->p().mbth.psn)) high = r->p().mbth.psn;
      if (r->p().mbth.flags & proto::kFlagRetransmit) break;
    }
    older = acked;
    acked = cum = std::max(cum, high + 1);
    a = ack_pkt(c, cum);
    a.ack.credit = 2;
    ctx.send(ctx.frame(a), "ACK of all so far, credit 2 again");
  }
  a = ack_pkt(c, cum);  // credit 0: no limit; let it finish
  ctx.send(ctx.frame(a), "no limit any more");
  need_status(ctx, serve(ctx, c, cum, "the 64-packet WRITE completes"), IBV_WC_SUCCESS, "64-packet WRITE");
}

}  // namespace metaroce::conform::cases
