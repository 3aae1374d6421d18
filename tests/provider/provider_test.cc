// Unit tests of the provider with no daemon: ABI layout, matching, and the
// verbs against a fake daemon (tests/provider/fake_daemon.h).
#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>

#include "provider/mroce.h"
#include "tests/provider/fake_daemon.h"

using mroce_test::FakeDaemon;

// The async record is the kernel's, which libibverbs reads unchanged.
static_assert(sizeof(struct mroce_async_event) == sizeof(struct ib_uverbs_async_event_desc));

namespace {

// A context opened against a fake daemon, as alloc_context would (minus
// libibverbs' part, which needs a published device).
struct Fixture {
  FakeDaemon fake;
  mroce_context *ctx = static_cast<mroce_context *>(calloc(1, sizeof(mroce_context)));
  ibv_context *ibctx = &ctx->ibv_ctx.context;
  int open_err;
  Fixture() {
    ctx->ibv_ctx.context.async_fd = -1;
    open_err = mroce_context_open(ctx, fake.client_fd());
  }
  ~Fixture() {
    mroce_context_close(ctx);
    if (ibctx->async_fd >= 0) close(ibctx->async_fd);
    free(ctx);
  }
  bool logged(const std::string &prefix) {
    for (auto &l : fake.log())
      if (l.rfind(prefix, 0) == 0) return true;
    return false;
  }
};

struct QpFixture : Fixture {
  ibv_pd *pd = nullptr;
  ibv_cq *cq = nullptr;
  ibv_qp *qp = nullptr;
  QpFixture() {
    pd = mroce_alloc_pd(ibctx);
    cq = mroce_create_cq(ibctx, 8, nullptr, 0);
    ibv_qp_init_attr a{};
    a.send_cq = a.recv_cq = cq;
    a.qp_type = IBV_QPT_RC;
    a.cap = {8, 8, 4, 4, 64};
    qp = mroce_create_qp(pd, &a);
  }
  void to_state(ibv_qp_state state) {
    ibv_qp_attr attr{};
    attr.qp_state = state;
    REQUIRE(mroce_modify_qp(qp, &attr, IBV_QP_STATE) == 0);
  }
  void to_rts() { to_state(IBV_QPS_RTS); }
  ~QpFixture() {
    if (qp) mroce_destroy_qp(qp);
    if (cq) mroce_destroy_cq(cq);
    if (pd) mroce_dealloc_pd(pd);
  }
};

bool wait_readable(int fd, int ms) {
  pollfd p = {fd, POLLIN, 0};
  return poll(&p, 1, ms) == 1;
}

}  // namespace

TEST_CASE("abi__every_measured_layout_fact_is_asserted") {
  // The asserts are in provider/rdma_private_layout.h: compiling is the test.
  CHECK(MROCE_PABI_LAYOUT_ASSERTS == 292);
  CHECK(sizeof(struct verbs_context_ops) == 608);
  CHECK(offsetof(struct mroce_context, ibv_ctx) == 0);
}

TEST_CASE("match_table__modalias_pattern_matches_metaroce_devices_only") {
  const verbs_match_ent *e = mroce_match_table;
  REQUIRE(e[0].kind == VERBS_MATCH_MODALIAS);
  CHECK(e[1].kind == VERBS_MATCH_SENTINEL);
  CHECK(fnmatch(e[0].u.modalias, "rdma_device:Nmetaroce0", 0) == 0);
  CHECK(fnmatch(e[0].u.modalias, "rdma_device:Nmetaroce12", 0) == 0);
  CHECK(fnmatch(e[0].u.modalias, "rdma_device:Nrxe0", 0) != 0);
  CHECK(fnmatch(e[0].u.modalias, "rdma_device:Nmlx5_0", 0) != 0);
  CHECK(std::string(mroce_dev_ops.name) == "metaroce");
  CHECK(bool(mroce_dev_ops.alloc_device));
  CHECK(bool(mroce_dev_ops.alloc_context));
}

TEST_CASE("resolve_socket__published_file_then_default_run_dir") {
  char dir[] = "/tmp/mroce-sysfs-XXXXXX";
  REQUIRE(mkdtemp(dir));
  char out[108];
  REQUIRE(mroce_resolve_socket(dir, "metaroce3", out, sizeof(out)) == 0);
  CHECK(std::string(out) == "/run/metaroce/metaroce3.sock");
  std::string file = std::string(dir) + "/metaroce_socket";
  FILE *f = fopen(file.c_str(), "w");
  fputs("/run/metaroce/ns-a/metaroce0.sock\n", f);
  fclose(f);
  REQUIRE(mroce_resolve_socket(dir, "metaroce0", out, sizeof(out)) == 0);
  CHECK(std::string(out) == "/run/metaroce/ns-a/metaroce0.sock");
  unlink(file.c_str());
  rmdir(dir);
}

TEST_CASE("open_context__gets_doorbell_async_and_attributes") {
  Fixture f;
  REQUIRE(f.open_err == 0);
  CHECK(f.ctx->doorbell_fd >= 0);
  CHECK(f.ibctx->async_fd >= 0);
  CHECK(f.ibctx->num_comp_vectors == 1);
  CHECK(f.ctx->ctx_id == 3);
  CHECK(f.logged("OPEN_CONTEXT"));
}

TEST_CASE("query_device_ex__honest_caps_and_legacy_size") {
  Fixture f;
  ibv_device_attr_ex ex;
  memset(&ex, 0xab, sizeof(ex));
  REQUIRE(mroce_query_device_ex(f.ibctx, nullptr, &ex, sizeof(ex)) == 0);
  CHECK(ex.orig_attr.atomic_cap == IBV_ATOMIC_HCA);
  CHECK(ex.orig_attr.vendor_id == 0x4D52);
  CHECK(ex.orig_attr.max_sge == 16);
  CHECK(ex.orig_attr.max_cqe == 4096);
  CHECK(ex.orig_attr.phys_port_cnt == 1);
  CHECK(be64toh(ex.orig_attr.node_guid) == 0x0102030405060708ull);
  CHECK(std::string(ex.orig_attr.fw_ver) == "fake-fw 1.0");
  CHECK(ex.comp_mask == 0);
  // The legacy ibv_query_device passes 232 bytes: nothing beyond is touched.
  memset(&ex, 0xab, sizeof(ex));
  REQUIRE(mroce_query_device_ex(f.ibctx, nullptr, &ex, sizeof(ibv_device_attr)) == 0);
  CHECK(ex.comp_mask == 0xababababu);
  CHECK(mroce_query_device_ex(f.ibctx, nullptr, &ex, 100) == EINVAL);
}

TEST_CASE("query_port__ethernet_active_from_daemon") {
  Fixture f;
  ibv_port_attr pa;
  REQUIRE(mroce_query_port(f.ibctx, 1, &pa) == 0);
  CHECK(pa.state == IBV_PORT_ACTIVE);
  CHECK(pa.link_layer == IBV_LINK_LAYER_ETHERNET);
  CHECK(pa.active_mtu == IBV_MTU_1024);
  CHECK(pa.gid_tbl_len == 2);
  CHECK(pa.max_msg_sz == 1u << 31);
  CHECK(f.logged("QUERY_PORT port=1"));
  CHECK(mroce_query_port(f.ibctx, 2, &pa) == EINVAL);
}

TEST_CASE("daemon_error__positive_errno_and_null_with_errno") {
  Fixture f;
  ibv_pd *pd = mroce_alloc_pd(f.ibctx);
  REQUIRE(pd);
  char buf[64];
  f.fake.fail_next(EINVAL, "invalid MR: bad PD");
  errno = 0;
  CHECK(mroce_reg_mr(pd, buf, sizeof(buf), reinterpret_cast<uintptr_t>(buf), 1) == nullptr);
  CHECK(errno == EINVAL);
  CHECK(std::string(f.ctx->last_reason) == "invalid MR: bad PD");
  ibv_mr *mr = mroce_reg_mr(pd, buf, sizeof(buf), reinterpret_cast<uintptr_t>(buf), 7);
  REQUIRE(mr);
  CHECK(mr->lkey != 0);
  CHECK(mr->rkey != 0);
  CHECK(f.logged("REG_MR len=64 access=7"));
  CHECK(mroce_reg_mr(pd, buf, 8, 1234, 1) == nullptr);  // iova != address
  CHECK(errno == EOPNOTSUPP);
  CHECK(mroce_dereg_mr(verbs_get_mr(mr)) == 0);
  CHECK(mroce_dealloc_pd(pd) == 0);
}

TEST_CASE("create_qp__rc_uc_and_ud_only") {
  QpFixture f;
  REQUIRE(f.qp);
  ibv_qp_init_attr a{};
  a.send_cq = a.recv_cq = f.cq;
  a.qp_type = IBV_QPT_RAW_PACKET;
  errno = 0;
  CHECK(mroce_create_qp(f.pd, &a) == nullptr);
  CHECK(errno == EOPNOTSUPP);
  CHECK(mroce_destroy_cq(f.cq) == EBUSY);  // the QP still uses it
}

TEST_CASE("poll_cq__reads_ring_without_syscalls_and_converts") {
  QpFixture f;
  mroce_ring_hdr *h = f.fake.cq_ring(0);
  auto *slots = reinterpret_cast<mroce_cqe *>(h + 1);
  ibv_wc wc[4];
  CHECK(mroce_poll_cq(f.cq, 4, wc) == 0);
  for (uint32_t i = 0; i < 3; i++) {
    slots[i] = {};
    slots[i].wr_id = 100 + i;
    slots[i].opcode = i == 2 ? IBV_WC_RECV : IBV_WC_SEND;
    slots[i].status = i == 1 ? IBV_WC_REM_ACCESS_ERR : IBV_WC_SUCCESS;
    slots[i].imm = 0x11223344;
    slots[i].byte_len = 4096;
    slots[i].qp_num = 0x41;
    slots[i].wc_flags = i == 2 ? IBV_WC_WITH_IMM : 0;
  }
  __atomic_store_n(&h->producer, 3, __ATOMIC_RELEASE);
  REQUIRE(mroce_poll_cq(f.cq, 2, wc) == 2);
  CHECK(wc[0].wr_id == 100);
  CHECK(wc[1].status == IBV_WC_REM_ACCESS_ERR);
  CHECK(h->consumer == 2);
  REQUIRE(mroce_poll_cq(f.cq, 4, wc) == 1);
  CHECK(wc[0].opcode == IBV_WC_RECV);
  CHECK(wc[0].wc_flags == IBV_WC_WITH_IMM);
  CHECK(wc[0].imm_data == htonl(0x11223344));  // network order, as verbs wants
  CHECK(wc[0].byte_len == 4096);
  CHECK(h->consumer == 3);
  CHECK(mroce_poll_cq(f.cq, 4, wc) == 0);
}

TEST_CASE("req_notify_cq__arms_the_ring") {
  QpFixture f;
  CHECK(mroce_req_notify_cq(f.cq, 0) == 0);
  CHECK(f.fake.cq_ring(0)->armed == MROCE_CQ_ARM_ANY);
  CHECK(mroce_req_notify_cq(f.cq, 1) == 0);
  CHECK(f.fake.cq_ring(0)->armed == MROCE_CQ_ARM_SOLICITED);
}

TEST_CASE("post_send__encodes_each_opcode_multi_sge_inline_imm") {
  QpFixture f;
  f.to_rts();
  char a[16] = "hello", b[16] = "world";
  ibv_sge sg[2] = {{reinterpret_cast<uintptr_t>(a), 5, 0x101},
                   {reinterpret_cast<uintptr_t>(b), 6, 0x102}};
  ibv_send_wr w[3] = {};
  w[0].wr_id = 1;
  w[0].opcode = IBV_WR_SEND_WITH_IMM;
  w[0].imm_data = htonl(0xdeadbeef);
  w[0].sg_list = sg;
  w[0].num_sge = 2;
  w[0].send_flags = IBV_SEND_SIGNALED;
  w[0].next = &w[1];
  w[1].wr_id = 2;
  w[1].opcode = IBV_WR_RDMA_WRITE;
  w[1].sg_list = sg;
  w[1].num_sge = 2;
  w[1].send_flags = IBV_SEND_INLINE;
  w[1].wr.rdma = {0x7000, 0x55};
  w[1].next = &w[2];
  w[2].wr_id = 3;
  w[2].opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
  w[2].sg_list = sg;
  w[2].num_sge = 1;
  w[2].wr.atomic = {0x8000, 5, 6, 0x66};
  ibv_send_wr *bad = nullptr;
  REQUIRE(mroce_post_send(f.qp, w, &bad) == 0);
  mroce_ring_hdr *h = f.fake.sq_ring(0);
  CHECK(h->producer == 3);
  auto *s = reinterpret_cast<mroce_send_wqe *>(h + 1);
  CHECK(s[0].opcode == IBV_WR_SEND_WITH_IMM);
  CHECK(s[0].imm == 0xdeadbeef);  // host order in the WQE
  CHECK(s[0].num_sge == 2);
  CHECK(s[0].u.sg[1].lkey == 0x102);
  CHECK(s[0].send_flags == IBV_SEND_SIGNALED);
  CHECK(s[1].inline_len == 11);
  CHECK(s[1].num_sge == 0);
  CHECK(memcmp(s[1].u.inline_data, "helloworld", 11) == 0);
  CHECK(s[1].remote_addr == 0x7000);
  CHECK(s[1].rkey == 0x55);
  CHECK(s[2].remote_addr == 0x8000);
  CHECK(s[2].compare_add == 5);
  CHECK(s[2].swap == 6);
  CHECK(s[2].rkey == 0x66);
}

// UCX posts inline sends whose gather list holds an empty entry at address
// 0: it adds nothing and is never copied from (memcpy from a null source is
// undefined even for 0 bytes; the ASan/UBSan build aborts on it).
TEST_CASE("post_send__inline_skips_empty_entries_at_address_zero") {
  QpFixture f;
  f.to_rts();
  char a[8] = "abc";
  ibv_sge sg[3] = {{0, 0, 0}, {reinterpret_cast<uintptr_t>(a), 3, 0x101}, {0, 0, 0}};
  ibv_send_wr w{};
  w.opcode = IBV_WR_SEND;
  w.sg_list = sg;
  w.num_sge = 3;
  w.send_flags = IBV_SEND_INLINE;
  ibv_send_wr *bad = nullptr;
  REQUIRE(mroce_post_send(f.qp, &w, &bad) == 0);
  auto *s = reinterpret_cast<mroce_send_wqe *>(f.fake.sq_ring(0) + 1);
  CHECK(s[0].inline_len == 3);
  CHECK(memcmp(s[0].u.inline_data, "abc", 3) == 0);
}

TEST_CASE("post_send__doorbell_only_when_nic_sleeping") {
  QpFixture f;
  f.to_rts();
  ibv_send_wr w{};
  w.opcode = IBV_WR_RDMA_WRITE;
  ibv_send_wr *bad;
  REQUIRE(mroce_post_send(f.qp, &w, &bad) == 0);
  CHECK(f.fake.doorbells() == 0);
  f.fake.sq_ring(0)->nic_sleeping = 1;
  REQUIRE(mroce_post_send(f.qp, &w, &bad) == 0);
  CHECK(f.fake.doorbells() == 1);
  ibv_recv_wr r{};
  ibv_recv_wr *rbad;
  REQUIRE(mroce_post_recv(f.qp, &r, &rbad) == 0);
  CHECK(f.fake.doorbells() == 0);
  f.fake.rq_ring(0)->nic_sleeping = 1;
  REQUIRE(mroce_post_recv(f.qp, &r, &rbad) == 0);
  CHECK(f.fake.doorbells() == 1);
}

TEST_CASE("post_send__ring_full_is_enomem_with_bad_wr") {
  QpFixture f;
  f.to_rts();
  ibv_send_wr w[FakeDaemon::kQueueEntries + 2] = {};
  for (size_t i = 0; i + 1 < std::size(w); i++) w[i].next = &w[i + 1];
  for (auto &x : w) x.opcode = IBV_WR_RDMA_WRITE;
  ibv_send_wr *bad = nullptr;
  CHECK(mroce_post_send(f.qp, w, &bad) == ENOMEM);
  CHECK(bad == &w[FakeDaemon::kQueueEntries]);
  CHECK(f.fake.sq_ring(0)->producer == FakeDaemon::kQueueEntries);  // the rest stays posted
  __atomic_store_n(&f.fake.sq_ring(0)->consumer, 2, __ATOMIC_RELEASE);  // NIC took two
  w[1].next = nullptr;
  CHECK(mroce_post_send(f.qp, w, &bad) == 0);
}

TEST_CASE("post_send__rejects_bad_input_with_einval") {
  QpFixture f;
  ibv_send_wr w{};
  w.opcode = IBV_WR_SEND;
  ibv_send_wr *bad = nullptr;
  CHECK(mroce_post_send(f.qp, &w, &bad) == EINVAL);  // QP still in RESET
  CHECK(bad == &w);
  f.to_rts();
  w.opcode = IBV_WR_TSO;  // not supported
  CHECK(mroce_post_send(f.qp, &w, &bad) == EINVAL);
  w.opcode = IBV_WR_BIND_MW;  // names no window
  CHECK(mroce_post_send(f.qp, &w, &bad) == EINVAL);
  ibv_mw type1 = {};
  type1.type = IBV_MW_TYPE_1;  // binds through ibv_bind_mw only
  w.bind_mw.mw = &type1;
  CHECK(mroce_post_send(f.qp, &w, &bad) == EINVAL);
  w.opcode = IBV_WR_SEND;
  w.num_sge = 5;  // cap is 4
  CHECK(mroce_post_send(f.qp, &w, &bad) == EINVAL);
  char big[100] = {};
  ibv_sge sg = {reinterpret_cast<uintptr_t>(big), sizeof(big), 1};
  w.num_sge = 1;
  w.sg_list = &sg;
  w.send_flags = IBV_SEND_INLINE;  // over max_inline (64)
  CHECK(mroce_post_send(f.qp, &w, &bad) == EINVAL);
  w.opcode = IBV_WR_RDMA_READ;
  sg.length = 8;
  CHECK(mroce_post_send(f.qp, &w, &bad) == EINVAL);  // inline READ
  CHECK(f.fake.sq_ring(0)->producer == 0);
}

TEST_CASE("post_recv__in_reset_is_einval_with_bad_wr_and_writes_nothing") {
  QpFixture f;
  ibv_sge sg = {0x1000, 64, 7};
  ibv_recv_wr r2{};
  r2.wr_id = 2;
  r2.sg_list = &sg;
  r2.num_sge = 1;
  ibv_recv_wr r1 = r2;
  r1.wr_id = 1;
  r1.next = &r2;
  ibv_recv_wr *bad = nullptr;
  REQUIRE(f.qp->state == IBV_QPS_RESET);  // a fresh QP
  CHECK(mroce_post_recv(f.qp, &r1, &bad) == EINVAL);
  CHECK(bad == &r1);
  CHECK(f.fake.rq_ring(0)->producer == 0);
  f.to_state(IBV_QPS_INIT);  // receives may be posted from INIT on
  bad = nullptr;
  CHECK(mroce_post_recv(f.qp, &r1, &bad) == 0);
  CHECK(f.fake.rq_ring(0)->producer == 2);
  f.to_state(IBV_QPS_RESET);
  CHECK(mroce_post_recv(f.qp, &r2, &bad) == EINVAL);
  CHECK(bad == &r2);
  CHECK(f.fake.rq_ring(0)->producer == 2);
}

TEST_CASE("post_recv__encodes_sges") {
  QpFixture f;
  f.to_state(IBV_QPS_INIT);
  ibv_sge sg[2] = {{0x1000, 64, 7}, {0x2000, 32, 8}};
  ibv_recv_wr r{};
  r.wr_id = 42;
  r.sg_list = sg;
  r.num_sge = 2;
  ibv_recv_wr *bad;
  REQUIRE(mroce_post_recv(f.qp, &r, &bad) == 0);
  auto *w = reinterpret_cast<mroce_recv_wqe *>(f.fake.rq_ring(0) + 1);
  CHECK(w[0].wr_id == 42);
  CHECK(w[0].num_sge == 2);
  CHECK(w[0].sg[1].addr == 0x2000);
  CHECK(w[0].sg[1].length == 32);
  r.num_sge = 5;
  CHECK(mroce_post_recv(f.qp, &r, &bad) == EINVAL);
  CHECK(bad == &r);
}

TEST_CASE("modify_and_query_qp__round_trip") {
  QpFixture f;
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_RTR;
  attr.path_mtu = IBV_MTU_1024;
  attr.dest_qp_num = 0x99;
  attr.ah_attr.is_global = 1;
  attr.ah_attr.grh.sgid_index = 1;
  REQUIRE(mroce_modify_qp(f.qp, &attr, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
                                           IBV_QP_DEST_QPN) == 0);
  CHECK(f.qp->state == IBV_QPS_RTR);
  ibv_qp_attr q;
  ibv_qp_init_attr init;
  REQUIRE(mroce_query_qp(f.qp, &q, IBV_QP_CAP | IBV_QP_STATE | IBV_QP_DEST_QPN, &init) == 0);
  CHECK(q.qp_state == IBV_QPS_RTS);
  CHECK(q.dest_qp_num == 0x99);
  CHECK(q.cap.max_inline_data == 64);
  CHECK(init.cap.max_send_sge == 4);
  CHECK(init.qp_type == IBV_QPT_RC);
}

TEST_CASE("query_qp__writes_only_the_masked_fields_and_refuses_unknown_bits") {
  QpFixture f;
  ibv_qp_attr q;
  ibv_qp_init_attr init;
  memset(&q, 0xab, sizeof(q));
  REQUIRE(mroce_query_qp(f.qp, &q, IBV_QP_PATH_MTU, &init) == 0);
  CHECK(q.path_mtu == IBV_MTU_1024);
  CHECK(q.dest_qp_num == 0xababababu);  // not asked: untouched
  CHECK(q.cap.max_send_wr == 0xababababu);
  uint32_t state_bits;  // not a valid enum value: read as an integer
  memcpy(&state_bits, &q.qp_state, sizeof(state_bits));
  CHECK(state_bits == 0xababababu);
  REQUIRE(mroce_query_qp(f.qp, &q, IBV_QP_CAP, &init) == 0);
  CHECK(q.cap.max_inline_data == 64);
  CHECK(q.dest_qp_num == 0xababababu);
  CHECK(init.cap.max_send_sge == 4);  // init_attr is always filled
  CHECK(mroce_query_qp(f.qp, &q, IBV_QP_RATE_LIMIT << 1, &init) == EINVAL);
  CHECK(std::string(f.ctx->last_reason).find("attr_mask") != std::string::npos);
}

TEST_CASE("modify_qp__address_vector_without_grh_is_einval_with_reason") {
  QpFixture f;
  f.to_state(IBV_QPS_INIT);
  size_t requests = f.fake.log().size();
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_RTR;
  attr.path_mtu = IBV_MTU_1024;
  attr.dest_qp_num = 0x99;
  attr.ah_attr.is_global = 0;  // qperf's native mode does this: no destination GID
  CHECK(mroce_modify_qp(f.qp, &attr, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
                                         IBV_QP_DEST_QPN) == EINVAL);
  CHECK(std::string(to_mroce_ctx(f.qp->context)->last_reason).find("without a GRH") !=
        std::string::npos);
  CHECK(f.qp->state == IBV_QPS_INIT);
  CHECK(f.fake.log().size() == requests);  // nothing reached the daemon
}

TEST_CASE("async__daemon_records_are_relayed") {
  Fixture f;
  f.fake.send_async(0x1234, IBV_EVENT_QP_FATAL);
  REQUIRE(wait_readable(f.ibctx->async_fd, 30000));
  mroce_async_event ev;
  REQUIRE(read(f.ibctx->async_fd, &ev, sizeof(ev)) == sizeof(ev));
  CHECK(ev.element == 0x1234);
  CHECK(ev.event_type == IBV_EVENT_QP_FATAL);
}

TEST_CASE("daemon_hangup__device_fatal_then_eio_and_flush_not_hang") {
  QpFixture f;
  f.to_rts();
  ibv_send_wr w{};
  w.wr_id = 77;
  w.opcode = IBV_WR_RDMA_WRITE;
  ibv_send_wr *bad;
  REQUIRE(mroce_post_send(f.qp, &w, &bad) == 0);  // never taken by the NIC
  ibv_recv_wr r{};
  r.wr_id = 88;
  ibv_recv_wr *rbad;
  REQUIRE(mroce_post_recv(f.qp, &r, &rbad) == 0);
  f.fake.hang_up();
  REQUIRE(wait_readable(f.ibctx->async_fd, 30000));
  mroce_async_event ev;
  REQUIRE(read(f.ibctx->async_fd, &ev, sizeof(ev)) == sizeof(ev));
  CHECK(ev.event_type == IBV_EVENT_DEVICE_FATAL);
  CHECK(mroce_dead(f.ctx));
  CHECK(mroce_post_send(f.qp, &w, &bad) == EIO);
  CHECK(mroce_post_recv(f.qp, &r, &rbad) == EIO);
  CHECK(mroce_alloc_pd(f.ibctx) == nullptr);
  CHECK(errno == EIO);
  ibv_port_attr pa;
  CHECK(mroce_query_port(f.ibctx, 1, &pa) == EIO);
  ibv_wc wc[4];
  REQUIRE(mroce_poll_cq(f.cq, 4, wc) == 2);
  CHECK(wc[0].status == IBV_WC_WR_FLUSH_ERR);
  CHECK(wc[0].wr_id == 77);
  CHECK(wc[0].opcode == IBV_WC_RDMA_WRITE);
  CHECK(wc[1].wr_id == 88);
  CHECK(wc[1].opcode == IBV_WC_RECV);
  CHECK(mroce_poll_cq(f.cq, 4, wc) == -EIO);
  // Teardown still succeeds, so applications can release everything.
  CHECK(mroce_destroy_qp(f.qp) == 0);
  f.qp = nullptr;
  CHECK(mroce_destroy_cq(f.cq) == 0);
  f.cq = nullptr;
  CHECK(mroce_dealloc_pd(f.pd) == 0);
  f.pd = nullptr;
}

TEST_CASE("create_cq__completion_channel_peer_goes_to_daemon") {
  Fixture f;
  int p[2];
  REQUIRE(pipe(p) == 0);
  static int peer;
  peer = p[1];
  auto saved = mroce_channel_peer_hook;
  mroce_channel_peer_hook = [](int) { return peer; };
  ibv_comp_channel ch{};
  ch.fd = p[0];
  ibv_cq *cq = mroce_create_cq(f.ibctx, 4, &ch, 0);
  REQUIRE(cq);
  CHECK(f.logged("CREATE_CQ cqe=4 channel=1 fds=1"));
  // The daemon writes the CQ's user handle to its end; the channel reads it.
  uint64_t handle = reinterpret_cast<uintptr_t>(cq);
  REQUIRE(write(f.fake.channel_fd(), &handle, 8) == 8);
  uint64_t got = 0;
  REQUIRE(read(p[0], &got, 8) == 8);
  CHECK(got == reinterpret_cast<uintptr_t>(cq));
  mroce_channel_peer_hook = [](int) { return -1; };  // not an interposer channel
  errno = 0;
  CHECK(mroce_create_cq(f.ibctx, 4, &ch, 0) == nullptr);
  CHECK(errno == EINVAL);
  mroce_channel_peer_hook = saved;
  CHECK(mroce_create_cq(f.ibctx, 0, nullptr, 0) == nullptr);
  // When the daemon dies, a thread blocked in ibv_get_cq_event wakes up.
  f.fake.hang_up();
  REQUIRE(wait_readable(p[0], 30000));
  REQUIRE(read(p[0], &got, 8) == 8);
  CHECK(got == reinterpret_cast<uintptr_t>(cq));
  CHECK(mroce_destroy_cq(cq) == 0);
  close(p[0]);
  close(p[1]);
}
