// End-to-end SRQ checks against a real metaroced, through libibverbs as an
// application uses it (run in a namespace by tests/srq/srq_e2e_test.sh):
//   srq_e2e DEV   device caps, SRQ limits and refusals with their errno,
//                 a loopback RC pair whose receiver takes SRQ receives,
//                 IBV_EVENT_SRQ_LIMIT_REACHED, EBUSY while attached,
//                 IBV_EVENT_QP_LAST_WQE_REACHED when the QP fails.
#include <infiniband/verbs.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <vector>

namespace {

int g_failures = 0;
#define EXPECT(c)                                                            \
  do {                                                                       \
    if (!(c)) {                                                              \
      fprintf(stderr, "%s:%d: EXPECT(%s) failed\n", __FILE__, __LINE__, #c); \
      g_failures++;                                                          \
    }                                                                        \
  } while (0)
#define REQUIRE(c)                                                                    \
  do {                                                                                \
    if (!(c)) {                                                                       \
      fprintf(stderr, "%s:%d: REQUIRE(%s) failed (errno %d: %s)\n", __FILE__, __LINE__, \
              #c, errno, strerror(errno));                                            \
      return 1;                                                                       \
    }                                                                                 \
  } while (0)

ibv_context *open_dev(const char *name) {
  int n = 0;
  ibv_device **list = ibv_get_device_list(&n);
  ibv_context *ctx = nullptr;
  for (int i = 0; list && i < n; i++)
    if (strcmp(ibv_get_device_name(list[i]), name) == 0) ctx = ibv_open_device(list[i]);
  if (list) ibv_free_device_list(list);
  return ctx;
}

int roce_v2_ipv4_gid(ibv_context *ctx, ibv_gid *gid) {
  ibv_port_attr pa;
  if (ibv_query_port(ctx, 1, &pa)) return -1;
  static const uint8_t v4[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  for (int i = 0; i < pa.gid_tbl_len; i++) {
    ibv_gid_entry e;
    if (ibv_query_gid_ex(ctx, 1, i, &e, 0)) continue;
    if (e.gid_type == IBV_GID_TYPE_ROCE_V2 && memcmp(e.gid.raw, v4, 12) == 0) {
      *gid = e.gid;
      return i;
    }
  }
  return -1;
}

int connect_qp(ibv_qp *qp, uint32_t dest, int gid_index, const ibv_gid &gid) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE;
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
    return 1;
  a = {};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_1024;
  a.dest_qp_num = dest;
  a.rq_psn = 100;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 1;
  a.ah_attr.is_global = 1;
  a.ah_attr.grh.dgid = gid;
  a.ah_attr.grh.sgid_index = static_cast<uint8_t>(gid_index);
  a.ah_attr.grh.hop_limit = 64;
  a.ah_attr.port_num = 1;
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
    return 1;
  a = {};
  a.qp_state = IBV_QPS_RTS;
  a.sq_psn = 100;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.max_rd_atomic = 1;
  return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                   IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC);
}

// Waits (30 s at most) for an async event of type `want`; with srq, it must
// name that SRQ. Other events are printed and skipped.
bool wait_async(ibv_context *ctx, ibv_event_type want, ibv_srq *srq, ibv_qp *qp) {
  pollfd pf = {ctx->async_fd, POLLIN, 0};
  while (poll(&pf, 1, 30000) == 1) {
    ibv_async_event ev;
    if (ibv_get_async_event(ctx, &ev)) return false;
    ibv_event_type t = ev.event_type;
    bool mine = (srq && t == want && ev.element.srq == srq) || (qp && t == want && ev.element.qp == qp);
    ibv_ack_async_event(&ev);
    printf("  async event: %s\n", ibv_event_type_str(t));
    if (mine) return true;
  }
  return false;
}

int recv_completions(ibv_cq *cq, int want) {
  int got = 0;
  time_t end = time(nullptr) + 30;
  while (got < want && time(nullptr) < end) {
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
  ibv_context *ctx = open_dev(argv[1]);
  REQUIRE(ctx);
  ibv_device_attr da;
  REQUIRE(ibv_query_device(ctx, &da) == 0);
  printf("  max_srq %d max_srq_wr %d max_srq_sge %d\n", da.max_srq, da.max_srq_wr, da.max_srq_sge);
  EXPECT(da.max_srq > 0 && da.max_srq_wr > 0 && da.max_srq_sge > 0);
  ibv_pd *pd = ibv_alloc_pd(ctx);
  REQUIRE(pd);
  std::vector<uint8_t> buf(64 * 1024, 7);
  ibv_mr *mr = ibv_reg_mr(pd, buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE);
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
  ibv_cq *cq_a = ibv_create_cq(ctx, 64, nullptr, nullptr, 0);
  ibv_cq *cq_b = ibv_create_cq(ctx, 64, nullptr, nullptr, 0);
  REQUIRE(cq_a && cq_b);
  ibv_qp_init_attr ia{};
  ia.send_cq = ia.recv_cq = cq_a;
  ia.qp_type = IBV_QPT_RC;
  ia.cap = {16, 16, 1, 1, 0};
  ibv_qp *a = ibv_create_qp(pd, &ia);
  ia.send_cq = ia.recv_cq = cq_b;
  ia.srq = srq;
  ibv_qp *b = ibv_create_qp(pd, &ia);
  REQUIRE(a && b);
  ibv_gid gid;
  int gi = roce_v2_ipv4_gid(ctx, &gid);
  REQUIRE(gi >= 0);
  REQUIRE(connect_qp(a, b->qp_num, gi, gid) == 0);
  REQUIRE(connect_qp(b, a->qp_num, gi, gid) == 0);
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
  printf("srq_e2e: %s\n", g_failures ? "FAILED" : "ok");
  return g_failures ? 1 : 0;
}
