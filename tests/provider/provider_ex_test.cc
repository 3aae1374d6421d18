// Unit tests of the extended verbs (provider/qp_ex.cc, provider/cq_ex.cc,
// query_device_ex) against the fake daemon: the WQEs the ibv_wr_* ops leave
// in the SQ ring, batch errors, the cq_ex iterator over a CQ ring the test
// fills, and the device attributes.
#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <string>

#include "provider/mroce.h"
#include "tests/provider/fake_daemon.h"

using mroce_test::FakeDaemon;

namespace {

constexpr uint64_t kRcOps = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM |
                            IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM |
                            IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |
                            IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD;

// A context on a fake daemon with a PD and a CQ (fake CQ ring 0).
struct Fixture {
  FakeDaemon fake;
  mroce_context *ctx = static_cast<mroce_context *>(calloc(1, sizeof(mroce_context)));
  ibv_context *ibctx = &ctx->ibv_ctx.context;
  ibv_pd *pd = nullptr;
  ibv_cq *cq = nullptr;
  Fixture() {
    ctx->ibv_ctx.context.async_fd = -1;
    REQUIRE(mroce_context_open(ctx, fake.client_fd()) == 0);
    pd = mroce_alloc_pd(ibctx);
    cq = mroce_create_cq(ibctx, 8, nullptr, 0);
    REQUIRE((pd && cq));
  }
  ~Fixture() {
    mroce_destroy_cq(cq);
    mroce_dealloc_pd(pd);
    mroce_context_close(ctx);
    if (ibctx->async_fd >= 0) close(ibctx->async_fd);
    free(ctx);
  }
  ibv_qp_init_attr_ex attr(ibv_qp_type type, uint64_t ops) {
    ibv_qp_init_attr_ex a{};
    a.send_cq = a.recv_cq = cq;
    a.qp_type = type;
    a.cap = {8, 8, 4, 4, 64};
    a.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    a.pd = pd;
    a.send_ops_flags = ops;
    return a;
  }
  // A QP made by create_qp_ex, in RTS (the fake accepts any transition).
  ibv_qp *qp_ex(ibv_qp_type type = IBV_QPT_RC, uint64_t ops = kRcOps) {
    ibv_qp_init_attr_ex a = attr(type, ops);
    ibv_qp *q = mroce_create_qp_ex(ibctx, &a);
    REQUIRE(q);
    ibv_qp_attr s{};
    s.qp_state = IBV_QPS_RTS;
    REQUIRE(mroce_modify_qp(q, &s, IBV_QP_STATE) == 0);
    return q;
  }
  std::string reason() const { return ctx->last_reason; }
};

mroce_send_wqe *sq_slots(Fixture &f, int qp_index) {
  return reinterpret_cast<mroce_send_wqe *>(f.fake.sq_ring(qp_index) + 1);
}

ibv_qp_ex *x_of(ibv_qp *q) { return &to_mroce_qp(q)->vqp.qp_ex; }

}  // namespace

TEST_CASE("wr_ops__fill_the_same_wqe_as_post_send") {
  Fixture f;
  ibv_qp *q = f.qp_ex();
  char a[16] = "hello", b[16] = "world";
  ibv_sge sg[2] = {{reinterpret_cast<uintptr_t>(a), 5, 0x101},
                   {reinterpret_cast<uintptr_t>(b), 6, 0x102}};
  ibv_send_wr w[4] = {};
  w[0] = {};
  w[0].wr_id = 1;
  w[0].opcode = IBV_WR_SEND_WITH_IMM;
  w[0].imm_data = htonl(0xdeadbeef);
  w[0].sg_list = sg;
  w[0].num_sge = 2;
  w[0].send_flags = IBV_SEND_SIGNALED;
  w[1].wr_id = 2;
  w[1].opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
  w[1].imm_data = htonl(7);
  w[1].sg_list = sg;
  w[1].num_sge = 2;
  w[1].send_flags = IBV_SEND_INLINE | IBV_SEND_FENCE;
  w[1].wr.rdma = {0x7000, 0x55};
  w[2].wr_id = 3;
  w[2].opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
  w[2].sg_list = sg;
  w[2].num_sge = 1;
  w[2].wr.atomic = {0x8000, 5, 6, 0x66};
  w[3].wr_id = 4;
  w[3].opcode = IBV_WR_RDMA_READ;
  w[3].sg_list = &sg[1];
  w[3].num_sge = 1;
  w[3].wr.rdma = {0x9000, 0x77};
  for (int i = 0; i < 3; i++) w[i].next = &w[i + 1];
  ibv_send_wr *bad = nullptr;
  REQUIRE(mroce_post_send(q, w, &bad) == 0);

  ibv_qp_ex *x = x_of(q);
  ibv_data_buf bufs[2] = {{a, 5}, {b, 6}};
  x->wr_start(x);
  x->wr_id = 1;
  x->wr_flags = IBV_SEND_SIGNALED;
  x->wr_send_imm(x, htonl(0xdeadbeef));
  x->wr_set_sge_list(x, 2, sg);
  x->wr_id = 2;
  x->wr_flags = IBV_SEND_FENCE;
  x->wr_rdma_write_imm(x, 0x55, 0x7000, htonl(7));
  x->wr_set_inline_data_list(x, 2, bufs);
  x->wr_id = 3;
  x->wr_flags = 0;
  x->wr_atomic_cmp_swp(x, 0x66, 0x8000, 5, 6);
  x->wr_set_sge(x, 0x101, reinterpret_cast<uintptr_t>(a), 5);
  x->wr_id = 4;
  x->wr_rdma_read(x, 0x77, 0x9000);
  x->wr_set_sge(x, 0x102, reinterpret_cast<uintptr_t>(b), 6);
  REQUIRE(x->wr_complete(x) == 0);
  CHECK(f.fake.sq_ring(0)->producer == 8);
  mroce_send_wqe *s = sq_slots(f, 0);
  for (int i = 0; i < 4; i++) {
    CAPTURE(i);
    CHECK(memcmp(&s[i], &s[4 + i], sizeof(mroce_send_wqe)) == 0);
  }
  CHECK(s[5].send_flags == (IBV_SEND_INLINE | IBV_SEND_FENCE));
  CHECK(memcmp(s[5].u.inline_data, "helloworld", 11) == 0);
  // fetch_add: compare_add is the addend, swap 0.
  __atomic_store_n(&f.fake.sq_ring(0)->consumer, 8, __ATOMIC_RELEASE);  // the NIC took all
  x->wr_start(x);
  x->wr_atomic_fetch_add(x, 0x66, 0x8000, 9);
  x->wr_set_sge(x, 0x101, 0x1000, 8);
  REQUIRE(x->wr_complete(x) == 0);
  CHECK((s[0].opcode == IBV_WR_ATOMIC_FETCH_AND_ADD && s[0].compare_add == 9 && s[0].swap == 0));
  mroce_destroy_qp(q);
}

TEST_CASE("wr_batch__an_error_posts_nothing_and_wr_complete_says_why") {
  Fixture f;
  ibv_qp *q = f.qp_ex();
  ibv_qp_ex *x = x_of(q);
  char big[100] = {};
  x->wr_start(x);
  x->wr_rdma_write(x, 1, 0x1000);
  x->wr_set_sge(x, 1, 0x2000, 8);
  x->wr_send(x);
  x->wr_set_inline_data(x, big, sizeof(big));  // max_inline_data is 64
  x->wr_send(x);                               // after the error: ignored
  CHECK(x->wr_complete(x) == EINVAL);
  CHECK(f.fake.sq_ring(0)->producer == 0);
  CHECK(f.reason().find("max_inline_data") != std::string::npos);
  CHECK(f.reason().find("nothing posted") != std::string::npos);

  struct {
    const char *reason;
    int err;
  } cases[] = {{"max_send_sge", EINVAL}, {"READ or an atomic", EINVAL},
               {"before any opcode", EINVAL}, {"not supported", EOPNOTSUPP}};
  ibv_sge many[5] = {};
  for (auto &c : cases) {
    CAPTURE(c.reason);
    x->wr_start(x);
    if (c.err == EOPNOTSUPP) {
      x->wr_send_tso(x, big, 8, 1024);  // no TSO on metaroce
    } else if (!strcmp(c.reason, "before any opcode")) {
      x->wr_set_sge(x, 1, 0x2000, 8);
    } else if (!strcmp(c.reason, "max_send_sge")) {
      x->wr_send(x);
      x->wr_set_sge_list(x, 5, many);
    } else {
      x->wr_rdma_read(x, 1, 0x1000);
      x->wr_set_inline_data(x, big, 8);
    }
    CHECK(x->wr_complete(x) == c.err);
    CHECK(f.reason().find(c.reason) != std::string::npos);
  }
  CHECK(f.fake.sq_ring(0)->producer == 0);
  mroce_destroy_qp(q);
}

TEST_CASE("wr_batch__abort_posts_nothing_and_the_next_batch_reuses_the_slots") {
  Fixture f;
  ibv_qp *q = f.qp_ex();
  ibv_qp_ex *x = x_of(q);
  x->wr_start(x);
  x->wr_id = 11;
  x->wr_send(x);
  x->wr_abort(x);
  CHECK(f.fake.sq_ring(0)->producer == 0);
  x->wr_start(x);
  x->wr_id = 12;
  x->wr_send(x);
  REQUIRE(x->wr_complete(x) == 0);
  CHECK(f.fake.sq_ring(0)->producer == 1);
  CHECK(sq_slots(f, 0)[0].wr_id == 12);
  CHECK(x->wr_complete(x) == EINVAL);  // no batch open
  mroce_destroy_qp(q);
}

TEST_CASE("wr_batch__a_full_sq_is_enomem_and_posts_nothing") {
  Fixture f;
  ibv_qp *q = f.qp_ex();
  ibv_qp_ex *x = x_of(q);
  x->wr_start(x);
  for (uint32_t i = 0; i <= FakeDaemon::kQueueEntries; i++) x->wr_send(x);
  CHECK(x->wr_complete(x) == ENOMEM);
  CHECK(f.reason().find("send queue full") != std::string::npos);
  CHECK(f.fake.sq_ring(0)->producer == 0);
  mroce_destroy_qp(q);
}

TEST_CASE("wr_batch__ops_outside_send_ops_flags_and_a_qp_not_in_rts_are_refused") {
  Fixture f;
  ibv_qp *q = f.qp_ex(IBV_QPT_RC, IBV_QP_EX_WITH_SEND);
  ibv_qp_ex *x = x_of(q);
  x->wr_start(x);
  x->wr_rdma_write(x, 1, 0x1000);
  CHECK(x->wr_complete(x) == EINVAL);
  CHECK(f.reason().find("not in the QP's send_ops_flags") != std::string::npos);
  ibv_qp_attr s{};
  s.qp_state = IBV_QPS_RESET;
  REQUIRE(mroce_modify_qp(q, &s, IBV_QP_STATE) == 0);
  x->wr_start(x);
  x->wr_send(x);
  CHECK(x->wr_complete(x) == EINVAL);
  CHECK(f.reason().find("sends need RTS") != std::string::npos);
  CHECK(f.fake.sq_ring(0)->producer == 0);
  mroce_destroy_qp(q);
}

TEST_CASE("wr_batch__a_ud_wr_needs_its_address") {
  Fixture f;
  ibv_qp *q = f.qp_ex(IBV_QPT_UD, IBV_QP_EX_WITH_SEND);
  ibv_qp_ex *x = x_of(q);
  x->wr_start(x);
  x->wr_send(x);
  x->wr_set_sge(x, 1, 0x2000, 8);
  CHECK(x->wr_complete(x) == EINVAL);
  CHECK(f.reason().find("ibv_wr_set_ud_addr") != std::string::npos);
  mroce_ah ah{};
  ah.ahn = 77;
  x->wr_start(x);
  x->wr_send(x);
  x->wr_set_ud_addr(x, &ah.ibv_ah, 0x55, 0x1234);
  REQUIRE(x->wr_complete(x) == 0);
  mroce_send_wqe &w = sq_slots(f, 0)[0];
  CHECK((w.ud.ah == 77 && w.ud.remote_qpn == 0x55 && w.ud.remote_qkey == 0x1234));
  mroce_destroy_qp(q);
}

TEST_CASE("create_qp_ex__refusals_have_reasons") {
  Fixture f;
  struct {
    ibv_qp_type type;
    uint64_t ops;
    uint32_t extra_mask;
    int err;
    const char *reason;
  } cases[] = {
      {IBV_QPT_UC, IBV_QP_EX_WITH_RDMA_READ, 0, EOPNOTSUPP, "not supported on this QP type"},
      {IBV_QPT_UD, IBV_QP_EX_WITH_RDMA_WRITE, 0, EOPNOTSUPP, "not supported on this QP type"},
      {IBV_QPT_RC, IBV_QP_EX_WITH_TSO, 0, EOPNOTSUPP, "not supported on this QP type"},
      {IBV_QPT_RC, IBV_QP_EX_WITH_SEND, IBV_QP_INIT_ATTR_XRCD, EOPNOTSUPP, "comp_mask"},
  };
  for (auto &c : cases) {
    CAPTURE(c.reason);
    ibv_qp_init_attr_ex a = f.attr(c.type, c.ops);
    a.comp_mask |= c.extra_mask;
    errno = 0;
    CHECK(mroce_create_qp_ex(f.ibctx, &a) == nullptr);
    CHECK(errno == c.err);
    CHECK(f.reason().find(c.reason) != std::string::npos);
  }
  ibv_qp_init_attr_ex a = f.attr(IBV_QPT_RC, 0);
  a.comp_mask = IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;  // no PD
  CHECK(mroce_create_qp_ex(f.ibctx, &a) == nullptr);
  CHECK(errno == EINVAL);
  a = f.attr(IBV_QPT_RC, 0);
  a.comp_mask |= IBV_QP_INIT_ATTR_CREATE_FLAGS;
  a.create_flags = IBV_QP_CREATE_SCATTER_FCS;
  CHECK(mroce_create_qp_ex(f.ibctx, &a) == nullptr);
  CHECK(errno == EOPNOTSUPP);
  // Made with SEND_OPS_FLAGS: ibv_qp_to_qp_ex's VERBS_QP_EX is set and the caps written back.
  a = f.attr(IBV_QPT_RC, IBV_QP_EX_WITH_SEND);
  a.cap = {};
  ibv_qp *q = mroce_create_qp_ex(f.ibctx, &a);
  REQUIRE(q);
  CHECK((to_mroce_qp(q)->vqp.comp_mask & VERBS_QP_EX));
  CHECK((x_of(q)->wr_send != nullptr));
  mroce_destroy_qp(q);
}

TEST_CASE("cq_ex__start_next_end_poll_read_each_field_and_hand_slots_back") {
  Fixture f;
  ibv_cq_init_attr_ex ca{};
  ca.cqe = 8;
  ca.wc_flags = IBV_WC_STANDARD_FLAGS;
  ca.cq_context = &f;
  ibv_cq_ex *cq = mroce_create_cq_ex(f.ibctx, &ca);
  REQUIRE(cq);
  CHECK(cq->cq_context == &f);
  mroce_ring_hdr *h = f.fake.cq_ring(1);
  auto *slots = reinterpret_cast<mroce_cqe *>(h + 1);
  ibv_poll_cq_attr pa{};
  CHECK(cq->start_poll(cq, &pa) == ENOENT);
  CHECK(cq->start_poll(cq, &pa) == ENOENT);  // ENOENT released the lock
  slots[0] = {};
  slots[0].wr_id = 100;
  slots[0].opcode = IBV_WC_RECV;
  slots[0].byte_len = 4136;
  slots[0].imm = 0x11223344;
  slots[0].qp_num = 0x41;
  slots[0].src_qp = 0x42;
  slots[0].wc_flags = IBV_WC_WITH_IMM | IBV_WC_GRH;
  slots[0].ud = {3, 0xA, 1, 0, 0};
  slots[1] = {};
  slots[1].wr_id = 101;
  slots[1].status = IBV_WC_REM_ACCESS_ERR;
  slots[1].vendor_err = 9;
  __atomic_store_n(&h->producer, 2, __ATOMIC_RELEASE);
  REQUIRE(cq->start_poll(cq, &pa) == 0);
  CHECK((cq->wr_id == 100 && cq->status == IBV_WC_SUCCESS));
  CHECK(cq->read_opcode(cq) == IBV_WC_RECV);
  CHECK(cq->read_byte_len(cq) == 4136);
  CHECK(cq->read_imm_data(cq) == htonl(0x11223344));
  CHECK(cq->read_qp_num(cq) == 0x41);
  CHECK(cq->read_src_qp(cq) == 0x42);
  CHECK(cq->read_wc_flags(cq) == (IBV_WC_WITH_IMM | IBV_WC_GRH));
  CHECK(cq->read_slid(cq) == 3);
  CHECK(cq->read_sl(cq) == 0xA);
  CHECK(cq->read_dlid_path_bits(cq) == 1);
  REQUIRE(cq->next_poll(cq) == 0);
  CHECK((cq->wr_id == 101 && cq->status == IBV_WC_REM_ACCESS_ERR));
  CHECK(cq->read_vendor_err(cq) == 9);
  CHECK(cq->next_poll(cq) == ENOENT);
  CHECK(h->consumer == 0);  // handed back at end_poll
  cq->end_poll(cq);
  CHECK(h->consumer == 2);
  // The same CQ through ibv_poll_cq.
  slots[2] = {};
  slots[2].wr_id = 102;
  __atomic_store_n(&h->producer, 3, __ATOMIC_RELEASE);
  ibv_wc wc;
  REQUIRE(mroce_poll_cq(ibv_cq_ex_to_cq(cq), 1, &wc) == 1);
  CHECK(wc.wr_id == 102);
  CHECK(mroce_destroy_cq(ibv_cq_ex_to_cq(cq)) == 0);
}

TEST_CASE("cq_ex__timestamps_parent_domains_and_bad_sizes_are_refused_with_reasons") {
  Fixture f;
  ibv_cq_init_attr_ex ca{};
  ca.cqe = 8;
  ca.wc_flags = IBV_WC_EX_WITH_COMPLETION_TIMESTAMP;
  errno = 0;
  CHECK(mroce_create_cq_ex(f.ibctx, &ca) == nullptr);
  CHECK(errno == EOPNOTSUPP);
  CHECK(f.reason().find("timestamps") != std::string::npos);
  ca.wc_flags = 0;
  ca.comp_mask = IBV_CQ_INIT_ATTR_MASK_PD;
  CHECK(mroce_create_cq_ex(f.ibctx, &ca) == nullptr);
  CHECK(errno == EOPNOTSUPP);
  ca.comp_mask = 0;
  ca.cqe = 4097;  // the fake's max_cqe is 4096
  CHECK(mroce_create_cq_ex(f.ibctx, &ca) == nullptr);
  CHECK(errno == EINVAL);
  CHECK(f.reason().find("max_cqe") != std::string::npos);
}

TEST_CASE("query_device_ex__per_context_limits_no_mw_one_port_nothing_extended") {
  Fixture f;
  f.ctx->dev_attr_ex.ctx_max_qp = 10;  // as a daemon with a per-connection limit sends
  f.ctx->dev_attr_ex.max_mcast_grp = 4;
  f.ctx->dev_attr_ex.max_mcast_qp_attach = 8;
  ibv_device_attr_ex ex;
  memset(&ex, 0xab, sizeof(ex));
  REQUIRE(mroce_query_device_ex(f.ibctx, nullptr, &ex, sizeof(ex)) == 0);
  CHECK(ex.orig_attr.max_qp == 10);
  CHECK(ex.orig_attr.max_cq == 64);  // no per-context limit sent: the device's
  CHECK(ex.orig_attr.max_mw == 0);
  CHECK(ex.orig_attr.device_cap_flags ==
        (IBV_DEVICE_RC_RNR_NAK_GEN | IBV_DEVICE_SYS_IMAGE_GUID));
  CHECK(ex.orig_attr.max_total_mcast_qp_attach == 32);
  CHECK(ex.phys_port_cnt_ex == 1);
  CHECK((ex.completion_timestamp_mask == 0 && ex.hca_core_clock == 0));
  CHECK((ex.odp_caps.general_caps == 0 && ex.device_cap_flags_ex == 0 && ex.max_dm_size == 0));
}
