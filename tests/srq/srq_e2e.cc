// End-to-end SRQ checks against a real metaroced, through libibverbs as an
// application uses it (run in a namespace by tests/srq/srq_e2e_test.sh):
//   srq_e2e DEV   device caps, SRQ limits and refusals with their errno,
//                 a loopback RC pair whose receiver takes SRQ receives,
//                 IBV_EVENT_SRQ_LIMIT_REACHED, EBUSY while attached,
//                 IBV_EVENT_QP_LAST_WQE_REACHED when the QP fails.
#include <infiniband/verbs.h>
#include <stdio.h>
#include <string.h>

#include <vector>

#include "tests/lib/verbs_setup.h"

namespace {

using mroce_test::failures;

// Waits (30 s at most) for an async event of type `want`; with srq, it must
// name that SRQ, else that QP. Other events are printed and skipped.
bool wait_async(ibv_context *ctx, ibv_event_type want, ibv_srq *srq, ibv_qp *qp) {
  return mroce_test::wait_async_event(ctx, want, 30, [&](const ibv_async_event &ev) {
    return srq ? ev.element.srq == srq : ev.element.qp == qp;
  });
}

// Takes up to `want` successful receive completions within 30 s.
int recv_completions(ibv_cq *cq, int want) {
  int got = 0;
  for (mroce_test::Deadline deadline(30); got < want && !deadline.passed();) {
    ibv_wc wc;
    int n = ibv_poll_cq(cq, 1, &wc);
    if (n == 1) {
      EXPECT(wc.status == IBV_WC_SUCCESS);
      EXPECT(wc.opcode == IBV_WC_RECV);
      got++;
    }
  }
  return got;
}

}  // namespace

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: srq_e2e DEV\n");
    return 2;
  }
  ibv_context *ctx = mroce_test::open_device(argv[1]);
  REQUIRE(ctx);
  ibv_device_attr da;
  REQUIRE(ibv_query_device(ctx, &da) == 0);
  printf("  max_srq %d max_srq_wr %d max_srq_sge %d\n", da.max_srq, da.max_srq_wr, da.max_srq_sge);
  EXPECT(da.max_srq > 0 && da.max_srq_wr > 0 && da.max_srq_sge > 0);
  ibv_pd *pd = ibv_alloc_pd(ctx);
  REQUIRE(pd);
  std::vector<uint8_t> buf(64 * 1024, 7);
  ibv_mr *mr = mroce_test::reg_mr(pd, buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE);
  REQUIRE(mr);

  // Attributes beyond the device's are refused; the actual max_wr comes back.
  ibv_srq_init_attr si{};
  si.attr = {static_cast<uint32_t>(da.max_srq_wr) + 1, 1, 0};
  EXPECT(ibv_create_srq(pd, &si) == nullptr);
  si.attr = {8, 1, 0};
  ibv_srq *srq = ibv_create_srq(pd, &si);
  REQUIRE(srq);
  EXPECT(si.attr.max_wr == 8);

  // Eight receives fit; the ninth is ENOMEM (the SRQ's max_wr).
  ibv_sge sge{reinterpret_cast<uint64_t>(buf.data()), 1024, mr->lkey};
  ibv_recv_wr rw{}, *bad = nullptr;
  rw.sg_list = &sge;
  rw.num_sge = 1;
  for (int i = 0; i < 8; i++) {
    rw.wr_id = 100 + i;
    sge.addr = reinterpret_cast<uint64_t>(buf.data()) + 1024 * i;
    REQUIRE(ibv_post_srq_recv(srq, &rw, &bad) == 0);
  }
  EXPECT(ibv_post_srq_recv(srq, &rw, &bad) == ENOMEM);
  rw.num_sge = 2;
  EXPECT(ibv_post_srq_recv(srq, &rw, &bad) == EINVAL);  // max_sge 1
  rw.num_sge = 1;

  // Resizing is refused; a limit above max_wr too; a limit of 4 is armed.
  ibv_srq_attr sa{16, 0, 0};
  EXPECT(ibv_modify_srq(srq, &sa, IBV_SRQ_MAX_WR) == EINVAL);
  sa = {0, 0, 9};
  EXPECT(ibv_modify_srq(srq, &sa, IBV_SRQ_LIMIT) == EINVAL);
  sa = {0, 0, 4};
  EXPECT(ibv_modify_srq(srq, &sa, IBV_SRQ_LIMIT) == 0);
  EXPECT(ibv_query_srq(srq, &sa) == 0 && sa.srq_limit == 4 && sa.max_wr == 8);

  // A sends five messages to B, whose receives come from the SRQ.
  ibv_cq *cq_a = mroce_test::create_cq(ctx, 64);
  ibv_cq *cq_b = mroce_test::create_cq(ctx, 64);
  REQUIRE(cq_a && cq_b);
  ibv_qp *a = mroce_test::create_qp(pd, cq_a, IBV_QPT_RC, {16, 16, 1, 1, 0});
  ibv_qp *b = mroce_test::create_qp(pd, cq_b, IBV_QPT_RC, {16, 16, 1, 1, 0}, srq);
  REQUIRE(a && b);
  mroce_test::RcOptions o;  // receives only: no remote access, one READ
  o.access = IBV_ACCESS_LOCAL_WRITE;
  o.rd_atomic = 1;
  o.min_rnr_timer = 1;
  REQUIRE(mroce_test::connect_loopback(a, b, o, /*use_port_mtu=*/false) == 0);
  ibv_recv_wr *bad_rq = nullptr;
  EXPECT(ibv_post_recv(b, &rw, &bad_rq) == EINVAL);  // B has no receive queue of its own
  ibv_sge ssge{reinterpret_cast<uint64_t>(buf.data()) + 32768, 256, mr->lkey};
  ibv_send_wr sw{}, *sbad = nullptr;
  sw.sg_list = &ssge;
  sw.num_sge = 1;
  sw.opcode = IBV_WR_SEND;
  sw.send_flags = IBV_SEND_SIGNALED;
  for (int i = 0; i < 5; i++) REQUIRE(ibv_post_send(a, &sw, &sbad) == 0);
  EXPECT(recv_completions(cq_b, 5) == 5);
  // 8 -> 3 receives: below the limit of 4, once; the limit reads 0 again.
  EXPECT(wait_async(ctx, IBV_EVENT_SRQ_LIMIT_REACHED, srq, nullptr));
  EXPECT(ibv_query_srq(srq, &sa) == 0 && sa.srq_limit == 0);

  // Attached: EBUSY. B failing: LAST_WQE_REACHED. Detached: destroyed.
  EXPECT(ibv_destroy_srq(srq) == EBUSY);
  ibv_qp_attr err{};
  err.qp_state = IBV_QPS_ERR;
  EXPECT(ibv_modify_qp(b, &err, IBV_QP_STATE) == 0);
  EXPECT(wait_async(ctx, IBV_EVENT_QP_LAST_WQE_REACHED, nullptr, b));
  EXPECT(ibv_destroy_qp(b) == 0);
  EXPECT(ibv_destroy_srq(srq) == 0);
  ibv_destroy_qp(a);
  ibv_destroy_cq(cq_a);
  ibv_destroy_cq(cq_b);
  ibv_dereg_mr(mr);
  ibv_dealloc_pd(pd);
  ibv_close_device(ctx);
  printf("srq_e2e: %s\n", failures() ? "FAILED" : "ok");
  return failures() ? 1 : 0;
}
