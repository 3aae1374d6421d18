// Memory windows (docs/protocol.md §15): the DUT binds a type 2 window on
// the case's QP over its memory; the tester accesses through the window's
// rkey and sends SEND_INV. A DUT without memory windows skips.
#include "tests/conformance/helpers.h"

namespace metaroce::conform::cases {
namespace {

constexpr uint64_t kWinOff = 8192, kWinLen = 4096, kRecvOff = 32768;

// A type 2 window over [kWinOff, kWinOff + kWinLen) of the DUT's memory,
// bound through c's QP (so only c may use it). Freed with the case.
class Window {
 public:
  Window(Ctx& ctx, Conn& c, int access) {
    Dut& d = ctx.dut();
    // Skip reasons start "the DUT has no memory windows " (conformance_hw_e2e_test allows it).
    mw_ = ibv_alloc_mw(d.pd(), IBV_MW_TYPE_2);
    if (!mw_) ctx.skip("the DUT has no memory windows (ibv_alloc_mw type 2 failed)");
    mr_ = ibv_reg_mr(d.pd(), d.mem(), d.mem_size(), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
    if (!mr_) ctx.skip("the DUT has no memory windows (ibv_reg_mr with IBV_ACCESS_MW_BIND failed)");
    ibv_send_wr wr{}, *bad = nullptr;
    wr.opcode = IBV_WR_BIND_MW;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.bind_mw.mw = mw_;
    wr.bind_mw.rkey = ibv_inc_rkey(mw_->rkey);
    wr.bind_mw.bind_info = {mr_, d.va(kWinOff), kWinLen, static_cast<unsigned>(access)};
    ctx.need(ibv_post_send(c.qp->qp(), &wr, &bad) == 0, "the DUT refused IBV_WR_BIND_MW");
    auto wc = c.qp->send_wc();
    ctx.need(wc && wc->status == IBV_WC_SUCCESS && wc->opcode == IBV_WC_BIND_MW,
             "the window's bind did not complete IBV_WC_BIND_MW successfully");
    rkey = wr.bind_mw.rkey;
  }
  ~Window() {
    if (mw_) ibv_dealloc_mw(mw_);
    if (mr_) ibv_dereg_mr(mr_);
  }
  uint32_t rkey = 0;

 private:
  ibv_mr* mr_ = nullptr;
  ibv_mw* mw_ = nullptr;
};

const Rx& expect_nack(Ctx& ctx, Conn& c, proto::NackReason reason, uint32_t psn) {
  std::string want = std::string("NACK ") + proto::to_string(reason) + " for PSN " + std::to_string(psn);
  const Rx& n = ctx.expect(c, want, [](const Rx& r) { return is_op(r, Opcode::kNack); });
  ctx.need(n.p().nack.reason == reason && n.p().nack.psn == psn, "wrong NACK; expected " + want, &n);
  return n;
}

proto::Packet window_write(Ctx& ctx, Conn& c, const Window& w, uint64_t off,
                           std::span<const uint8_t> d) {
  proto::Packet p = write_req(ctx, c, off, d);
  p.reth.rkey = w.rkey;
  p.mbth.flags = proto::kFlagAckReq | proto::kFlagLast;
  return p;
}

proto::Packet send_inv(Ctx& ctx, Conn& c, uint32_t rkey, std::span<const uint8_t> d) {
  proto::Packet p = ctx.request(c, Opcode::kSendInv);
  p.mbth.msn = c.recv_msn++;
  p.mbth.flags = proto::kFlagAckReq | proto::kFlagLast;
  p.seth.length = static_cast<uint32_t>(d.size());
  p.ieth.rkey = rkey;
  p.payload = d;
  return p;
}

}  // namespace

CONFORM_CASE(mw_window_range_and_rights, Level::kMust, ({"R15.3-1", "R3.8-2"}),
             "a WRITE through a window lands inside it; beyond it (inside the MR) it is NACKed "
             "REMOTE_ACCESS_ERROR") {
  Conn& c = ctx.connect();
  Window w(ctx, c, IBV_ACCESS_REMOTE_WRITE);
  auto d = pattern(64, 0x5a);
  proto::Packet ok = window_write(ctx, c, w, kWinOff + 100, d);
  ctx.send(ok);
  ctx.expect(c, "ACK of the WRITE inside the window", [&](const Rx& r) {
    return is_op(r, Opcode::kAck) && proto::seq_lt(ok.mbth.psn, r.p().ack.cum_psn);
  });
  ctx.need(std::memcmp(ctx.mem(kWinOff + 100), d.data(), d.size()) == 0,
           "the WRITE through the window was not placed");
  proto::Packet out = window_write(ctx, c, w, kWinOff + kWinLen - 32, d);  // 32 bytes past its end
  ctx.send(out);
  expect_nack(ctx, c, proto::NackReason::kRemoteAccessError, out.mbth.psn);
  for (size_t i = 32; i < 64; ++i)
    if (*ctx.mem(kWinOff + kWinLen + i - 32) == d[i]) ctx.fail("the WRITE beyond the window was placed");
}

CONFORM_CASE(mw_send_inv_invalidates, Level::kMust, ({"R15.3-3", "R15.2-1", "R3.8-2"}),
             "SEND_INV completes its receive with the invalidated rkey; the window then refuses "
             "access") {
  Conn& c = ctx.connect();
  Window w(ctx, c, IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
  ctx.need(c.qp->post_recv(1, kRecvOff, 256) == 0, "post_recv failed");
  auto d = pattern(48, 0x31);
  ctx.send(send_inv(ctx, c, w.rkey, d));
  ibv_wc wc = recv_completion(ctx, c, "the SEND_INV's receive");
  need_status(ctx, wc, IBV_WC_SUCCESS, "SEND_INV");
  ctx.need(wc.opcode == IBV_WC_RECV && (wc.wc_flags & IBV_WC_WITH_INV) &&
               wc.invalidated_rkey == w.rkey && wc.byte_len == 48,
           "the receive does not report IBV_WC_WITH_INV with the window's rkey");
  ctx.need(std::memcmp(ctx.mem(kRecvOff), d.data(), 48) == 0, "the SEND_INV's data was not placed");
  proto::Packet after = window_write(ctx, c, w, kWinOff, d);
  ctx.send(after);
  expect_nack(ctx, c, proto::NackReason::kRemoteAccessError, after.mbth.psn);
}

CONFORM_CASE(mw_send_inv_of_mr_rkey_nacked, Level::kMust, ({"R15.3-2"}),
             "SEND_INV naming an MR's rkey (not a type 2 window of the QP) is NACKed "
             "INVALID_REQUEST and placed nowhere") {
  Conn& c = ctx.connect();
  ctx.need(c.qp->post_recv(1, kRecvOff, 256) == 0, "post_recv failed");
  std::memset(ctx.mem(kRecvOff), 0, 64);
  auto d = pattern(64, 0x77);
  proto::Packet p = send_inv(ctx, c, ctx.rkey(), d);
  ctx.send(p);
  expect_nack(ctx, c, proto::NackReason::kInvalidRequest, p.mbth.psn);
  ctx.need(std::memcmp(ctx.mem(kRecvOff), d.data(), 64) != 0, "the refused SEND_INV was placed");
}

}  // namespace metaroce::conform::cases
