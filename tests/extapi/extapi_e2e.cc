// End-to-end checks of the extended verbs (ibv_create_qp_ex + ibv_wr_*,
// ibv_create_cq_ex + start/next/end_poll + read_*, ibv_query_device_ex
// against the limits actually enforced, ibv_query_qp masks) against a real
// metaroced. One case per invocation (tests/extapi/extapi_e2e_test.sh):
//   extapi_e2e rc DEV      loopback RC pair: every wr_* opcode with its data
//                          checked, batches, wr_abort, errors at wr_complete
//   extapi_e2e ud DEV      loopback UD: wr_send(_imm) + wr_set_ud_addr, the
//                          receive's read_* values, max_qp_wr receives
//   extapi_e2e limits DEV  query_device_ex values; max+1 refused with reasons;
//                          query_qp writes only what the mask names
// Refusal reasons are read from the provider's METAROCE_DEBUG lines.
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <string>
#include <vector>

#include "tests/lib/verbs_setup.h"

namespace {

using mroce_test::checksum;
using mroce_test::failures;
using mroce_test::has;
using mroce_test::open_device;
using mroce_test::roce_v2_ipv4_gid;
// What the provider printed while a call was refused (METAROCE_DEBUG=1).
using Reason = mroce_test::StderrCapture;

constexpr uint32_t kGrh = 40;
constexpr uint32_t kQkey = 0x11111111;

ibv_cq_ex *make_cq_ex(ibv_context *ctx, uint32_t cqe = 64) {
  ibv_cq_init_attr_ex ca{};
  ca.cqe = cqe;
  ca.wc_flags = IBV_WC_STANDARD_FLAGS;
  ibv_cq_ex *cq = ibv_create_cq_ex(ctx, &ca);
  REQUIRE(cq);
  return cq;
}

ibv_qp *make_qp_ex(ibv_pd *pd, ibv_cq_ex *cq, ibv_qp_type type, uint64_t ops,
                   ibv_qp_cap cap = {32, 32, 4, 4, 128}) {
  ibv_qp_init_attr_ex a{};
  a.send_cq = a.recv_cq = ibv_cq_ex_to_cq(cq);
  a.qp_type = type;
  a.cap = cap;
  a.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
  a.pd = pd;
  a.send_ops_flags = ops;
  return ibv_create_qp_ex(pd->context, &a);
}

// One completion as the read_* accessors give it.
struct Wc {
  uint64_t wr_id;
  ibv_wc_status status;
  ibv_wc_opcode opcode;
  uint32_t byte_len, qp_num, src_qp, vendor_err;
  __be32 imm;
  unsigned int flags;
  uint32_t slid;
  uint8_t sl, dlid_path_bits;
};

// Polls one completion with start_poll/end_poll (30 s deadline).
bool poll_ex(ibv_cq_ex *cq, Wc *out) {
  mroce_test::Deadline deadline(30);
  for (;;) {
    ibv_poll_cq_attr pa{};
    int r = ibv_start_poll(cq, &pa);
    if (r == 0) {
      *out = {cq->wr_id,
              cq->status,
              ibv_wc_read_opcode(cq),
              ibv_wc_read_byte_len(cq),
              ibv_wc_read_qp_num(cq),
              ibv_wc_read_src_qp(cq),
              ibv_wc_read_vendor_err(cq),
              ibv_wc_read_imm_data(cq),
              ibv_wc_read_wc_flags(cq),
              ibv_wc_read_slid(cq),
              ibv_wc_read_sl(cq),
              ibv_wc_read_dlid_path_bits(cq)};
      ibv_end_poll(cq);
      return true;
    }
    if (r != ENOENT) {
      fprintf(stderr, "ibv_start_poll failed: %d\n", r);
      return false;
    }
    if (deadline.passed()) {
      fprintf(stderr, "no completion within 30 s\n");
      return false;
    }
  }
}

void fill(uint8_t *p, size_t n, uint32_t seed) { mroce_test::fill_random(p, n, seed); }

// ---------------- RC ----------------

constexpr uint64_t kRcOps = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM |
                            IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM |
                            IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |
                            IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD;

struct Rc {
  ibv_context *ctx;
  ibv_pd *pd;
  ibv_cq_ex *cq[2];
  ibv_qp *qp[2];
  ibv_qp_ex *x;  // qp[0]'s
  std::vector<uint8_t> buf[2];
  ibv_mr *mr[2];
  uint8_t *local(size_t off) { return buf[0].data() + off; }
  uint8_t *remote(size_t off) { return buf[1].data() + off; }
  uint64_t raddr(size_t off) { return reinterpret_cast<uintptr_t>(remote(off)); }
  uint64_t laddr(size_t off) { return reinterpret_cast<uintptr_t>(local(off)); }
};

void make_rc(Rc *p, ibv_context *ctx) {
  p->ctx = ctx;
  REQUIRE((p->pd = ibv_alloc_pd(ctx)));
  for (int i = 0; i < 2; i++) {
    p->cq[i] = make_cq_ex(ctx);
    REQUIRE((p->qp[i] = make_qp_ex(p->pd, p->cq[i], IBV_QPT_RC, kRcOps)));
    p->buf[i].assign(1 << 20, 0);
    REQUIRE((p->mr[i] = mroce_test::reg_mr(p->pd, p->buf[i].data(), p->buf[i].size(),
                                           IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                                               IBV_ACCESS_REMOTE_READ |
                                               IBV_ACCESS_REMOTE_ATOMIC)));
  }
  REQUIRE(mroce_test::connect_loopback(p->qp[0], p->qp[1], mroce_test::RcOptions{},
                                       /*use_port_mtu=*/true) == 0);
  REQUIRE((p->x = ibv_qp_to_qp_ex(p->qp[0])));
}

void post_recv(Rc *p, size_t off, uint32_t len, uint64_t id) {
  ibv_sge sg = {reinterpret_cast<uintptr_t>(p->remote(off)), len, p->mr[1]->lkey};
  ibv_recv_wr r{}, *bad;
  r.wr_id = id;
  r.sg_list = &sg;
  r.num_sge = 1;
  REQUIRE(ibv_post_recv(p->qp[1], &r, &bad) == 0);
}

// The sender's completion of one signaled WR.
void expect_send_done(Rc *p, uint64_t id, ibv_wc_opcode op) {
  Wc wc;
  REQUIRE(poll_ex(p->cq[0], &wc));
  EXPECT(wc.status == IBV_WC_SUCCESS && wc.wr_id == id && wc.opcode == op);
  EXPECT(wc.qp_num == p->qp[0]->qp_num);
}

// The receiver's completion, every read_* checked against what was sent.
void expect_recv(Rc *p, uint64_t id, ibv_wc_opcode op, uint32_t len, bool imm, uint32_t imm_v) {
  Wc wc;
  REQUIRE(poll_ex(p->cq[1], &wc));
  EXPECT(wc.status == IBV_WC_SUCCESS && wc.wr_id == id && wc.opcode == op);
  EXPECT(wc.byte_len == len);
  EXPECT(wc.qp_num == p->qp[1]->qp_num);
  EXPECT(wc.src_qp == p->qp[0]->qp_num);
  EXPECT(wc.vendor_err == 0);
  EXPECT(!!(wc.flags & IBV_WC_WITH_IMM) == imm);
  EXPECT(!imm || ntohl(wc.imm) == imm_v);
}

void begin(Rc *p, uint64_t id, unsigned flags = IBV_SEND_SIGNALED) {
  p->x->wr_id = id;
  p->x->wr_flags = flags;
}

void rc_write_and_read(Rc *p) {
  fill(p->local(0), 65536, 1);
  ibv_wr_start(p->x);
  begin(p, 1);
  ibv_wr_rdma_write(p->x, p->mr[1]->rkey, p->raddr(0));
  ibv_wr_set_sge(p->x, p->mr[0]->lkey, p->laddr(0), 65536);
  REQUIRE(ibv_wr_complete(p->x) == 0);
  expect_send_done(p, 1, IBV_WC_RDMA_WRITE);
  EXPECT(checksum(p->local(0), 65536) == checksum(p->remote(0), 65536));

  // A gather list of three pieces, read back into another place.
  ibv_sge sg[3] = {{p->laddr(100), 10, p->mr[0]->lkey},
                   {p->laddr(5000), 3000, p->mr[0]->lkey},
                   {p->laddr(9000), 1, p->mr[0]->lkey}};
  ibv_wr_start(p->x);
  begin(p, 2);
  ibv_wr_rdma_write(p->x, p->mr[1]->rkey, p->raddr(200000));
  ibv_wr_set_sge_list(p->x, 3, sg);
  REQUIRE(ibv_wr_complete(p->x) == 0);
  expect_send_done(p, 2, IBV_WC_RDMA_WRITE);
  EXPECT(memcmp(p->remote(200000), p->local(100), 10) == 0);
  EXPECT(memcmp(p->remote(200010), p->local(5000), 3000) == 0);
  EXPECT(*p->remote(203010) == *p->local(9000));

  fill(p->remote(300000), 4096, 2);
  ibv_wr_start(p->x);
  begin(p, 3);
  ibv_wr_rdma_read(p->x, p->mr[1]->rkey, p->raddr(300000));
  ibv_wr_set_sge(p->x, p->mr[0]->lkey, p->laddr(400000), 4096);
  REQUIRE(ibv_wr_complete(p->x) == 0);
  expect_send_done(p, 3, IBV_WC_RDMA_READ);
  EXPECT(memcmp(p->local(400000), p->remote(300000), 4096) == 0);
  printf("  wr_rdma_write (sge, sge_list), wr_rdma_read ok\n");
}

void rc_write_imm_and_sends(Rc *p) {
  // WRITE_WITH_IMM from inline data: the receiver sees the immediate.
  post_recv(p, 0, 0, 50);
  const char inl[] = "inline-write-with-imm";
  ibv_wr_start(p->x);
  begin(p, 4);
  ibv_wr_rdma_write_imm(p->x, p->mr[1]->rkey, p->raddr(500000), htonl(0xabc123));
  ibv_wr_set_inline_data(p->x, const_cast<char *>(inl), sizeof(inl));
  REQUIRE(ibv_wr_complete(p->x) == 0);
  expect_send_done(p, 4, IBV_WC_RDMA_WRITE);
  expect_recv(p, 50, IBV_WC_RECV_RDMA_WITH_IMM, sizeof(inl), true, 0xabc123);
  EXPECT(memcmp(p->remote(500000), inl, sizeof(inl)) == 0);

  // SEND from an inline list, SEND_WITH_IMM from an SGE.
  post_recv(p, 600000, 4096, 51);
  post_recv(p, 610000, 4096, 52);
  char a[] = "first piece,", b[] = " second piece";
  ibv_data_buf bufs[2] = {{a, strlen(a)}, {b, strlen(b)}};
  fill(p->local(700000), 3000, 3);
  ibv_wr_start(p->x);
  begin(p, 5);
  ibv_wr_send(p->x);
  ibv_wr_set_inline_data_list(p->x, 2, bufs);
  begin(p, 6);
  ibv_wr_send_imm(p->x, htonl(0xc0ffee));
  ibv_wr_set_sge(p->x, p->mr[0]->lkey, p->laddr(700000), 3000);
  REQUIRE(ibv_wr_complete(p->x) == 0);
  expect_send_done(p, 5, IBV_WC_SEND);
  expect_send_done(p, 6, IBV_WC_SEND);
  expect_recv(p, 51, IBV_WC_RECV, strlen(a) + strlen(b), false, 0);
  EXPECT(memcmp(p->remote(600000), "first piece, second piece", 25) == 0);
  expect_recv(p, 52, IBV_WC_RECV, 3000, true, 0xc0ffee);
  EXPECT(memcmp(p->remote(610000), p->local(700000), 3000) == 0);
  printf("  wr_rdma_write_imm (inline), wr_send (inline list), wr_send_imm ok\n");
}

void rc_atomics(Rc *p) {
  auto *target = reinterpret_cast<uint64_t *>(p->remote(800000));
  auto *result = reinterpret_cast<uint64_t *>(p->local(800000));
  *target = 100;
  ibv_wr_start(p->x);
  begin(p, 7);
  ibv_wr_atomic_fetch_add(p->x, p->mr[1]->rkey, p->raddr(800000), 5);
  ibv_wr_set_sge(p->x, p->mr[0]->lkey, p->laddr(800000), 8);
  begin(p, 8);
  ibv_wr_atomic_cmp_swp(p->x, p->mr[1]->rkey, p->raddr(800000), 105, 7);
  ibv_wr_set_sge(p->x, p->mr[0]->lkey, p->laddr(800008), 8);
  REQUIRE(ibv_wr_complete(p->x) == 0);
  expect_send_done(p, 7, IBV_WC_FETCH_ADD);
  expect_send_done(p, 8, IBV_WC_COMP_SWAP);
  EXPECT(result[0] == 100 && result[1] == 105 && *target == 7);
  printf("  wr_atomic_fetch_add, wr_atomic_cmp_swp ok\n");
}

// A later signaled WRITE of `mark` to offset 0 of the marker area: once it
// completes, everything posted before it has been executed.
void fence_write(Rc *p, uint64_t id) {
  *p->local(900000) = static_cast<uint8_t>(id);
  ibv_wr_start(p->x);
  begin(p, id);
  ibv_wr_rdma_write(p->x, p->mr[1]->rkey, p->raddr(900000));
  ibv_wr_set_sge(p->x, p->mr[0]->lkey, p->laddr(900000), 1);
  REQUIRE(ibv_wr_complete(p->x) == 0);
  expect_send_done(p, id, IBV_WC_RDMA_WRITE);
}

void rc_abort_and_errors(Rc *p) {
  memset(p->remote(910000), 0, 64);
  memset(p->local(910000), 0xEE, 64);
  // wr_abort: nothing of the batch reaches the wire.
  ibv_wr_start(p->x);
  begin(p, 20);
  ibv_wr_rdma_write(p->x, p->mr[1]->rkey, p->raddr(910000));
  ibv_wr_set_sge(p->x, p->mr[0]->lkey, p->laddr(910000), 64);
  ibv_wr_abort(p->x);
  fence_write(p, 21);
  EXPECT(*p->remote(910000) == 0);

  // An error in the batch: wr_complete says which and why; the good WR
  // before it is not posted either.
  std::vector<char> big(4096, 'x');
  struct Bad {
    const char *what, *reason;
    int err;
  } cases[] = {{"inline over max_inline_data", "max_inline_data", EINVAL},
               {"too many SGEs", "max_send_sge", EINVAL},
               {"inline data on a READ", "READ or an atomic", EINVAL},
               {"bind_mw naming no window", "bind_mw", EINVAL},
               {"set_sge before an opcode", "before any opcode", EINVAL}};
  ibv_sge many[5] = {};
  for (const Bad &c : cases) {
    ibv_wr_start(p->x);
    if (!strcmp(c.what, "set_sge before an opcode"))
      ibv_wr_set_sge(p->x, p->mr[0]->lkey, p->laddr(0), 1);
    begin(p, 22);
    ibv_wr_rdma_write(p->x, p->mr[1]->rkey, p->raddr(910000));
    ibv_wr_set_sge(p->x, p->mr[0]->lkey, p->laddr(910000), 64);
    begin(p, 23);
    if (!strcmp(c.what, "inline over max_inline_data")) {
      ibv_wr_send(p->x);
      ibv_wr_set_inline_data(p->x, big.data(), big.size());
    } else if (!strcmp(c.what, "too many SGEs")) {
      ibv_wr_send(p->x);
      ibv_wr_set_sge_list(p->x, 5, many);
    } else if (!strcmp(c.what, "inline data on a READ")) {
      ibv_wr_rdma_read(p->x, p->mr[1]->rkey, p->raddr(0));
      ibv_wr_set_inline_data(p->x, big.data(), 8);
    } else if (!strcmp(c.what, "bind_mw naming no window")) {
      ibv_wr_bind_mw(p->x, nullptr, 0, nullptr);
    }
    Reason r;
    int err = ibv_wr_complete(p->x);
    std::string why = r.text();
    EXPECT(err == c.err);
    EXPECT(has(why, c.reason) && has(why, "nothing posted"));
    if (err != c.err || !has(why, c.reason)) fprintf(stderr, "  case: %s\n", c.what);
  }
  fence_write(p, 24);
  EXPECT(*p->remote(910000) == 0);  // none of the good WRITEs went
  printf("  wr_abort posts nothing; batch errors at wr_complete, nothing posted ok\n");
}

// Opcodes the QP type or the device lacks are refused when the QP is made.
void rc_create_refusals(Rc *p) {
  struct {
    ibv_qp_type type;
    uint64_t ops;
    const char *reason;
  } cases[] = {{IBV_QPT_UC, IBV_QP_EX_WITH_RDMA_READ, "not supported on this QP type"},
               {IBV_QPT_UD, IBV_QP_EX_WITH_RDMA_WRITE, "not supported on this QP type"},
               {IBV_QPT_UC, IBV_QP_EX_WITH_SEND_WITH_INV, "not supported on this QP type"},
               {IBV_QPT_RC, IBV_QP_EX_WITH_TSO, "not supported on this QP type"}};
  for (auto &c : cases) {
    Reason r;
    errno = 0;
    ibv_qp *q = make_qp_ex(p->pd, p->cq[0], c.type, c.ops);
    int err = errno;
    std::string why = r.text();
    EXPECT(q == nullptr && err == EOPNOTSUPP && has(why, c.reason));
    if (q) ibv_destroy_qp(q);
  }
  // An opcode left out of send_ops_flags fails the batch.
  ibv_qp *q = make_qp_ex(p->pd, p->cq[0], IBV_QPT_RC, IBV_QP_EX_WITH_SEND);
  REQUIRE(q);
  mroce_test::LocalPath path;
  REQUIRE(mroce_test::local_path(p->ctx, &path) == 0);
  mroce_test::RcOptions o;
  o.mtu = path.active_mtu;
  REQUIRE(mroce_test::connect_rc(q, {p->qp[1]->qp_num, path.gid, path.gid_index}, o) == 0);
  ibv_qp_ex *x = ibv_qp_to_qp_ex(q);
  ibv_wr_start(x);
  ibv_wr_rdma_read(x, 1, 0);
  Reason r;
  EXPECT(ibv_wr_complete(x) == EINVAL);
  EXPECT(has(r.text(), "not in the QP's send_ops_flags"));
  ibv_destroy_qp(q);
  // No completion timestamps: the NIC does not stamp CQEs.
  ibv_cq_init_attr_ex ca{};
  ca.cqe = 8;
  ca.wc_flags = IBV_WC_EX_WITH_COMPLETION_TIMESTAMP;
  Reason rt;
  errno = 0;
  EXPECT(ibv_create_cq_ex(p->ctx, &ca) == nullptr && errno == EOPNOTSUPP);
  EXPECT(has(rt.text(), "timestamps"));
  printf("  unsupported send_ops_flags and wc_flags refused at create ok\n");
}

// The cq_ex CQ is an ordinary CQ too: ibv_poll_cq reads the same ring.
void rc_poll_cq_on_cq_ex(Rc *p) {
  ibv_wr_start(p->x);
  begin(p, 30);
  ibv_wr_rdma_write(p->x, p->mr[1]->rkey, p->raddr(0));
  ibv_wr_set_sge(p->x, p->mr[0]->lkey, p->laddr(0), 16);
  REQUIRE(ibv_wr_complete(p->x) == 0);
  ibv_wc wc{};
  bool got = mroce_test::poll_one(ibv_cq_ex_to_cq(p->cq[0]), &wc, 30);
  EXPECT(got && wc.wr_id == 30 && wc.status == IBV_WC_SUCCESS);
  printf("  ibv_poll_cq on a cq_ex ok\n");
}

int case_rc(const char *dev) {
  ibv_context *ctx = open_device(dev);
  REQUIRE(ctx);
  Rc p;
  make_rc(&p, ctx);
  rc_write_and_read(&p);
  rc_write_imm_and_sends(&p);
  rc_atomics(&p);
  rc_abort_and_errors(&p);
  rc_create_refusals(&p);
  rc_poll_cq_on_cq_ex(&p);
  for (int i = 0; i < 2; i++) {
    EXPECT(ibv_destroy_qp(p.qp[i]) == 0);
    EXPECT(ibv_destroy_cq(ibv_cq_ex_to_cq(p.cq[i])) == 0);
    ibv_dereg_mr(p.mr[i]);
  }
  ibv_dealloc_pd(p.pd);
  ibv_close_device(ctx);
  return failures() ? 1 : 0;
}

// ---------------- UD ----------------

ibv_qp *ud_qp(ibv_pd *pd, ibv_cq_ex *cq, uint32_t recv_wr) {
  ibv_qp *qp = make_qp_ex(pd, cq, IBV_QPT_UD,
                          IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM,
                          {16, recv_wr, 1, 1, 64});
  REQUIRE(qp);
  REQUIRE(mroce_test::ud_to_rts(qp, kQkey) == 0);
  return qp;
}

int ud_post_recv(ibv_qp *qp, ibv_mr *mr, uint8_t *at, uint64_t id) {
  ibv_sge sg = {reinterpret_cast<uintptr_t>(at), kGrh + 1024, mr->lkey};
  ibv_recv_wr r{}, *bad;
  r.wr_id = id;
  r.sg_list = &sg;
  r.num_sge = 1;
  return ibv_post_recv(qp, &r, &bad);
}

int case_ud(const char *dev) {
  ibv_context *ctx = open_device(dev);
  REQUIRE(ctx);
  ibv_device_attr_ex dx;
  REQUIRE(ibv_query_device_ex(ctx, nullptr, &dx) == 0);
  uint32_t max_wr = static_cast<uint32_t>(dx.orig_attr.max_qp_wr);
  ibv_gid gid;
  int gi = roce_v2_ipv4_gid(ctx, &gid);
  REQUIRE(gi >= 0);
  ibv_pd *pd = ibv_alloc_pd(ctx);
  REQUIRE(pd);
  ibv_cq_ex *cq = make_cq_ex(ctx, 2 * max_wr);
  std::vector<uint8_t> buf(1 << 16);
  ibv_mr *mr = mroce_test::reg_mr(pd, buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE);
  REQUIRE(mr);
  ibv_qp *tx = ud_qp(pd, cq, 16), *rx = ud_qp(pd, cq, max_wr);
  ibv_ah *ah = mroce_test::create_ah(pd, gid, gi);
  REQUIRE(ah);

  // As UCX does: max_qp_wr receives on one UD QP. (More are not refused
  // yet: the NIC holds them in the ring until the engine has room, see
  // docs/provider.md §Extended verbs.)
  uint8_t *rbuf = buf.data() + 8192;
  for (uint32_t i = 0; i < max_wr; i++) REQUIRE(ud_post_recv(rx, mr, rbuf, 1000 + i) == 0);
  printf("  %u UD receives posted ok\n", max_wr);

  ibv_qp_ex *x = ibv_qp_to_qp_ex(tx);
  REQUIRE(x);
  memset(buf.data(), 0xA5, 200);
  ibv_wr_start(x);
  x->wr_id = 1;
  x->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_send_imm(x, htonl(0x5eed));
  ibv_wr_set_ud_addr(x, ah, rx->qp_num, kQkey);
  ibv_wr_set_sge(x, mr->lkey, reinterpret_cast<uintptr_t>(buf.data()), 200);
  x->wr_id = 2;
  ibv_wr_send(x);
  ibv_wr_set_ud_addr(x, ah, rx->qp_num, kQkey);
  const char inl[] = "inline datagram";
  ibv_wr_set_inline_data(x, const_cast<char *>(inl), sizeof(inl));
  REQUIRE(ibv_wr_complete(x) == 0);
  int sends = 0, recvs = 0;
  for (int i = 0; i < 4; i++) {
    Wc wc;
    REQUIRE(poll_ex(cq, &wc));
    EXPECT(wc.status == IBV_WC_SUCCESS);
    if (wc.opcode == IBV_WC_SEND) {
      EXPECT(wc.qp_num == tx->qp_num && wc.wr_id == static_cast<uint64_t>(++sends));
      continue;
    }
    recvs++;
    EXPECT(wc.opcode == IBV_WC_RECV && wc.wr_id == 999 + static_cast<uint64_t>(recvs));
    EXPECT(wc.qp_num == rx->qp_num && wc.src_qp == tx->qp_num);
    EXPECT(wc.flags & IBV_WC_GRH);
    EXPECT(wc.slid == 0 && wc.dlid_path_bits == 0);  // RoCE: no LIDs
    if (recvs == 1) {
      EXPECT(wc.byte_len == kGrh + 200 && (wc.flags & IBV_WC_WITH_IMM) && ntohl(wc.imm) == 0x5eed);
    } else {
      EXPECT(wc.byte_len == kGrh + sizeof(inl) && !(wc.flags & IBV_WC_WITH_IMM));
      EXPECT(memcmp(rbuf + kGrh, inl, sizeof(inl)) == 0);
    }
  }
  EXPECT(sends == 2 && recvs == 2);
  printf("  UD wr_send_imm/wr_send + wr_set_ud_addr, read_* of the receives ok\n");

  // A UD WR without its destination fails the batch.
  ibv_wr_start(x);
  ibv_wr_send(x);
  ibv_wr_set_sge(x, mr->lkey, reinterpret_cast<uintptr_t>(buf.data()), 10);
  Reason r;
  EXPECT(ibv_wr_complete(x) == EINVAL);
  EXPECT(has(r.text(), "ibv_wr_set_ud_addr"));
  printf("  UD WR without wr_set_ud_addr refused ok\n");

  ibv_destroy_ah(ah);
  EXPECT(ibv_destroy_qp(tx) == 0 && ibv_destroy_qp(rx) == 0);
  EXPECT(ibv_destroy_cq(ibv_cq_ex_to_cq(cq)) == 0);
  ibv_dereg_mr(mr);
  ibv_dealloc_pd(pd);
  ibv_close_device(ctx);
  return failures() ? 1 : 0;
}

// ---------------- limits and query_qp ----------------

void expect_qp_refused(ibv_pd *pd, ibv_cq *cq, ibv_qp_cap cap, const char *reason) {
  ibv_qp_init_attr a{};
  a.send_cq = a.recv_cq = cq;
  a.qp_type = IBV_QPT_RC;
  a.cap = cap;
  Reason r;
  errno = 0;
  ibv_qp *q = ibv_create_qp(pd, &a);
  int err = errno;
  EXPECT(q == nullptr && err == EINVAL && has(r.text(), reason));
  if (q) ibv_destroy_qp(q);
}

ibv_qp *rc_qp(ibv_pd *pd, ibv_cq *cq, ibv_qp_cap cap) {
  return mroce_test::create_qp(pd, cq, IBV_QPT_RC, cap);
}

void limits_qp_caps(ibv_pd *pd, ibv_cq *cq, const ibv_device_attr &d) {
  uint32_t wr = static_cast<uint32_t>(d.max_qp_wr), sge = static_cast<uint32_t>(d.max_sge);
  ibv_qp *q = rc_qp(pd, cq, {wr, wr, sge, sge, 0});
  EXPECT(q != nullptr);  // the maxima themselves are accepted
  if (q) ibv_destroy_qp(q);
  expect_qp_refused(pd, cq, {wr + 1, 1, 1, 1, 0}, "max_qp_wr");
  expect_qp_refused(pd, cq, {1, wr + 1, 1, 1, 0}, "max_qp_wr");
  expect_qp_refused(pd, cq, {1, 1, sge + 1, 1, 0}, "max_sge");
  expect_qp_refused(pd, cq, {1, 1, 1, 1, 4097}, "max_inline_data");
  printf("  max_qp_wr %u, max_sge %u enforced ok\n", wr, sge);
}

void limits_cq_srq(ibv_context *ctx, ibv_pd *pd, const ibv_device_attr &d) {
  ibv_cq *cq = ibv_create_cq(ctx, d.max_cqe, nullptr, nullptr, 0);
  EXPECT(cq != nullptr);
  if (cq) ibv_destroy_cq(cq);
  errno = 0;
  EXPECT(ibv_create_cq(ctx, d.max_cqe + 1, nullptr, nullptr, 0) == nullptr && errno == EINVAL);
  ibv_cq_init_attr_ex ca{};
  ca.cqe = static_cast<uint32_t>(d.max_cqe) + 1;
  Reason r;
  EXPECT(ibv_create_cq_ex(ctx, &ca) == nullptr && errno == EINVAL);
  EXPECT(has(r.text(), "max_cqe"));
  EXPECT(d.max_srq > 0 && d.max_srq_wr > 0 && d.max_srq_sge > 0);
  ibv_srq_init_attr sa{};
  sa.attr = {static_cast<uint32_t>(d.max_srq_wr), static_cast<uint32_t>(d.max_srq_sge), 0};
  ibv_srq *s = ibv_create_srq(pd, &sa);
  EXPECT(s != nullptr);
  if (s) ibv_destroy_srq(s);
  sa.attr = {static_cast<uint32_t>(d.max_srq_wr) + 1, 1, 0};
  errno = 0;
  EXPECT(ibv_create_srq(pd, &sa) == nullptr && errno == EINVAL);
  sa.attr = {1, static_cast<uint32_t>(d.max_srq_sge) + 1, 0};
  errno = 0;
  EXPECT(ibv_create_srq(pd, &sa) == nullptr && errno == EINVAL);
  printf("  max_cqe %d, max_srq_wr %d, max_srq_sge %d enforced ok\n", d.max_cqe, d.max_srq_wr,
         d.max_srq_sge);
}

void limits_rd_atomic(ibv_pd *pd, ibv_cq *cq, const ibv_device_attr &d) {
  ibv_qp *q = rc_qp(pd, cq, {1, 1, 1, 1, 0});
  REQUIRE(q);
  REQUIRE(mroce_test::modify_to_init(q, 0) == 0);
  ibv_qp_attr a{};
  a.max_dest_rd_atomic = static_cast<uint8_t>(d.max_qp_rd_atom + 1);
  a.qp_state = IBV_QPS_INIT;
  Reason r;
  EXPECT(ibv_modify_qp(q, &a, IBV_QP_STATE | IBV_QP_MAX_DEST_RD_ATOMIC) == EINVAL);
  EXPECT(has(r.text(), "max_dest_rd_atomic"));
  ibv_destroy_qp(q);
  printf("  max_qp_rd_atom %d enforced ok\n", d.max_qp_rd_atom);
}

// max_mcast_qp_attach QPs join one group; one more is refused.
void limits_mcast(ibv_pd *pd, ibv_cq *cq, const ibv_device_attr &d) {
  EXPECT(d.max_mcast_grp > 0 && d.max_mcast_qp_attach > 0);
  EXPECT(d.max_total_mcast_qp_attach == d.max_mcast_grp * d.max_mcast_qp_attach);
  ibv_gid g{};
  g.raw[10] = g.raw[11] = 0xff;
  g.raw[12] = 239, g.raw[13] = 9, g.raw[14] = 9, g.raw[15] = 9;
  std::vector<ibv_qp *> qps;
  for (int i = 0; i <= d.max_mcast_qp_attach; i++) {
    ibv_qp *q = mroce_test::create_qp(pd, cq, IBV_QPT_UD, {1, 1, 1, 1, 0});
    REQUIRE(q);
    qps.push_back(q);
    int err = ibv_attach_mcast(q, &g, 0);
    EXPECT(i < d.max_mcast_qp_attach ? err == 0 : err != 0);
  }
  for (ibv_qp *q : qps) {
    ibv_detach_mcast(q, &g, 0);
    ibv_destroy_qp(q);
  }
  printf("  max_mcast_qp_attach %d enforced ok\n", d.max_mcast_qp_attach);
}

void query_qp_masks(ibv_pd *pd, ibv_cq *cq) {
  ibv_qp *q = rc_qp(pd, cq, {8, 8, 2, 2, 32});
  REQUIRE(q);
  REQUIRE(mroce_test::modify_to_init(q, IBV_ACCESS_REMOTE_WRITE) == 0);
  ibv_qp_attr got;
  ibv_qp_init_attr init;
  memset(&got, 0xab, sizeof(got));
  REQUIRE(ibv_query_qp(q, &got, IBV_QP_STATE, &init) == 0);
  EXPECT(got.qp_state == IBV_QPS_INIT);
  EXPECT(got.qp_access_flags == 0xababababu);  // not asked: untouched
  EXPECT(got.cap.max_send_wr == 0xababababu);
  REQUIRE(ibv_query_qp(q, &got, IBV_QP_ACCESS_FLAGS | IBV_QP_CAP | IBV_QP_PORT, &init) == 0);
  EXPECT(got.qp_access_flags == static_cast<unsigned>(IBV_ACCESS_REMOTE_WRITE) && got.port_num == 1);
  EXPECT(got.cap.max_send_wr >= 8 && got.cap.max_inline_data >= 32);
  EXPECT(got.dest_qp_num == 0xababababu && got.rq_psn == 0xababababu);
  EXPECT(init.qp_type == IBV_QPT_RC && init.send_cq == cq);
  ibv_destroy_qp(q);
  printf("  query_qp writes only the masked fields ok\n");
}

int case_limits(const char *dev) {
  ibv_context *ctx = open_device(dev);
  REQUIRE(ctx);
  ibv_device_attr_ex dx;
  memset(&dx, 0xab, sizeof(dx));
  REQUIRE(ibv_query_device_ex(ctx, nullptr, &dx) == 0);
  const ibv_device_attr &d = dx.orig_attr;
  printf("  max_qp %d max_qp_wr %d max_sge %d max_cq %d max_cqe %d max_mr %d max_pd %d "
         "max_ah %d max_srq %d max_mw %d max_mcast_grp %d cap_flags 0x%x\n",
         d.max_qp, d.max_qp_wr, d.max_sge, d.max_cq, d.max_cqe, d.max_mr, d.max_pd, d.max_ah,
         d.max_srq, d.max_mw, d.max_mcast_grp, d.device_cap_flags);
  EXPECT(dx.phys_port_cnt_ex == 1 && d.phys_port_cnt == 1);
  EXPECT(d.max_mw > 0 && (d.device_cap_flags & IBV_DEVICE_MEM_WINDOW) &&  // mw: tests/mw
         (d.device_cap_flags & IBV_DEVICE_MEM_WINDOW_TYPE_2B));
  EXPECT(d.device_cap_flags & IBV_DEVICE_RC_RNR_NAK_GEN);
  EXPECT(!(d.device_cap_flags & (IBV_DEVICE_XRC | IBV_DEVICE_SRQ_RESIZE |
                                 IBV_DEVICE_MEM_MGT_EXTENSIONS | IBV_DEVICE_UD_IP_CSUM)));
  EXPECT(dx.odp_caps.general_caps == 0 && dx.completion_timestamp_mask == 0);
  EXPECT(dx.hca_core_clock == 0 && dx.device_cap_flags_ex == 0 && dx.comp_mask == 0);
  EXPECT(dx.tso_caps.max_tso == 0 && dx.max_dm_size == 0 && dx.cq_mod_caps.max_cq_count == 0);
  EXPECT(d.atomic_cap == IBV_ATOMIC_HCA && d.max_qp_init_rd_atom == d.max_qp_rd_atom);
  ibv_values_ex v{};
  v.comp_mask = IBV_VALUES_MASK_RAW_CLOCK;
  EXPECT(ibv_query_rt_values_ex(ctx, &v) == EOPNOTSUPP);  // no clock is offered
  ibv_pd *pd = ibv_alloc_pd(ctx);
  ibv_cq *cq = mroce_test::create_cq(ctx, 256);
  REQUIRE(pd && cq);
  limits_qp_caps(pd, cq, d);
  limits_cq_srq(ctx, pd, d);
  limits_rd_atomic(pd, cq, d);
  limits_mcast(pd, cq, d);
  query_qp_masks(pd, cq);
  ibv_destroy_cq(cq);
  ibv_dealloc_pd(pd);
  ibv_close_device(ctx);
  return failures() ? 1 : 0;
}

}  // namespace

int main(int argc, char **argv) {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  setenv("METAROCE_DEBUG", "1", 1);  // refusal reasons on stderr (class Reason)
  if (argc != 3) {
    fprintf(stderr, "usage: extapi_e2e rc|ud|limits DEV\n");
    return 2;
  }
  std::string c = argv[1];
  int rc = c == "rc" ? case_rc(argv[2]) : c == "ud" ? case_ud(argv[2]) : c == "limits" ? case_limits(argv[2]) : 2;
  printf("%s: %s (%d failures)\n", argv[1], rc ? "FAILED" : "ok", failures());
  return rc;
}
