// End-to-end verbs checks against a real metaroced, using libibverbs the
// way applications do. One case per invocation (tests/verbs/verbs_e2e.sh
// runs each in a namespace):
//   verbs_e2e opcodes DEV  loopback QP pair: every opcode, checksummed data,
//                          multi-SGE, inline, immediates
//   verbs_e2e access DEV   wrong rkey / out-of-bounds write -> REM_ACCESS_ERR
//   verbs_e2e fatal DEV READY_FILE
//                          waits for the daemon to be killed: DEVICE_FATAL,
//                          then EIO / poll errors instead of a hang, then
//                          reopens the device once the daemon is back
//   verbs_e2e ud DEV       loopback UD QPs: a datagram with its GRH and
//                          src_qp; bad input (another context's AH, a wrong
//                          Q_Key, an oversize message, RDMA on UD) is a clear
//                          error or a dropped datagram, and the QP goes on
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "tests/lib/verbs_setup.h"

namespace {

using mroce_test::checksum;
using mroce_test::create_ah;
using mroce_test::create_cq;
using mroce_test::create_qp;
using mroce_test::failures;
using mroce_test::open_device;
using mroce_test::poll_one;
using mroce_test::reg_mr;
using mroce_test::roce_v2_ipv4_gid;

void fill(uint8_t *p, size_t n, uint32_t seed) { mroce_test::fill_random(p, n, seed); }

struct Pair {  // two RC QPs on one device, connected to each other
  ibv_context *ctx;
  ibv_pd *pd;
  ibv_cq *cq[2];
  ibv_qp *qp[2];
  std::vector<uint8_t> buf[2];
  ibv_mr *mr[2];
};

void make_pair(Pair *p, ibv_context *ctx, size_t bytes) {
  p->ctx = ctx;
  REQUIRE((p->pd = ibv_alloc_pd(ctx)));
  for (int i = 0; i < 2; i++) {
    REQUIRE((p->cq[i] = create_cq(ctx, 64)));
    REQUIRE((p->qp[i] = create_qp(p->pd, p->cq[i], IBV_QPT_RC, {32, 32, 4, 4, 128})));
    p->buf[i].assign(bytes, 0);
    REQUIRE((p->mr[i] = reg_mr(p->pd, p->buf[i].data(), bytes,
                               IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                                   IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC)));
  }
  REQUIRE(mroce_test::connect_loopback(p->qp[0], p->qp[1], mroce_test::RcOptions{},
                                       /*use_port_mtu=*/true) == 0);
}

void free_pair(Pair *p) {
  for (int i = 0; i < 2; i++) {
    ibv_destroy_qp(p->qp[i]);
    ibv_destroy_cq(p->cq[i]);
    ibv_dereg_mr(p->mr[i]);
  }
  ibv_dealloc_pd(p->pd);
}

ibv_wc post_and_wait(Pair *p, ibv_send_wr *wr) {
  wr->send_flags |= IBV_SEND_SIGNALED;
  ibv_send_wr *bad = nullptr;
  REQUIRE(ibv_post_send(p->qp[0], wr, &bad) == 0);
  ibv_wc wc{};
  REQUIRE(poll_one(p->cq[0], &wc));
  return wc;
}

void post_recv(Pair *p, size_t off, uint32_t len, uint64_t id, int nsge = 1) {
  ibv_sge sg[2];
  uint32_t part = len / nsge;
  for (int i = 0; i < nsge; i++)
    sg[i] = {reinterpret_cast<uintptr_t>(p->buf[1].data() + off + i * part),
             i == nsge - 1 ? len - part * i : part, p->mr[1]->lkey};
  ibv_recv_wr r{};
  r.wr_id = id;
  r.sg_list = sg;
  r.num_sge = nsge;
  ibv_recv_wr *bad;
  REQUIRE(ibv_post_recv(p->qp[1], &r, &bad) == 0);
}

// Three-SGE gather from buf[0] at `off`, lengths split unevenly.
int gather3(Pair *p, size_t off, uint32_t len, ibv_sge *sg) {
  uint32_t a = len / 3, b = len / 4;
  sg[0] = {reinterpret_cast<uintptr_t>(p->buf[0].data() + off), a, p->mr[0]->lkey};
  sg[1] = {reinterpret_cast<uintptr_t>(p->buf[0].data() + off + a), b, p->mr[0]->lkey};
  sg[2] = {reinterpret_cast<uintptr_t>(p->buf[0].data() + off + a + b), len - a - b,
           p->mr[0]->lkey};
  return 3;
}

void check_send(Pair *p, uint32_t len, bool imm, bool inl) {
  fill(p->buf[0].data(), len, len + imm + inl);
  memset(p->buf[1].data(), 0, len);
  post_recv(p, 0, len, 7, 2);
  ibv_sge sg[3];
  ibv_send_wr w{};
  w.opcode = imm ? IBV_WR_SEND_WITH_IMM : IBV_WR_SEND;
  w.imm_data = htonl(0xc0ffee);
  w.sg_list = sg;
  w.num_sge = gather3(p, 0, len, sg);
  if (inl) w.send_flags = IBV_SEND_INLINE;
  ibv_wc wc = post_and_wait(p, &w);
  EXPECT(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_SEND);
  REQUIRE(poll_one(p->cq[1], &wc));
  EXPECT(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RECV && wc.wr_id == 7);
  EXPECT(wc.byte_len == len);
  EXPECT(!imm || ((wc.wc_flags & IBV_WC_WITH_IMM) && ntohl(wc.imm_data) == 0xc0ffee));
  EXPECT(checksum(p->buf[0].data(), len) == checksum(p->buf[1].data(), len));
  printf("  send len=%u imm=%d inline=%d ok\n", len, imm, inl);
}

void check_write(Pair *p, uint32_t len, bool imm, bool inl) {
  fill(p->buf[0].data(), len, 3 * len + imm);
  memset(p->buf[1].data(), 0, len);
  if (imm) post_recv(p, 0, 0, 9);
  ibv_sge sg[3];
  ibv_send_wr w{};
  w.opcode = imm ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE;
  w.imm_data = htonl(0xabc123);
  w.sg_list = sg;
  w.num_sge = gather3(p, 0, len, sg);
  if (inl) w.send_flags = IBV_SEND_INLINE;
  w.wr.rdma = {reinterpret_cast<uintptr_t>(p->buf[1].data()), p->mr[1]->rkey};
  ibv_wc wc = post_and_wait(p, &w);
  EXPECT(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RDMA_WRITE);
  if (imm) {
    REQUIRE(poll_one(p->cq[1], &wc));
    EXPECT(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM);
    EXPECT(ntohl(wc.imm_data) == 0xabc123 && (wc.wc_flags & IBV_WC_WITH_IMM));
  }
  EXPECT(checksum(p->buf[0].data(), len) == checksum(p->buf[1].data(), len));
  printf("  write len=%u imm=%d inline=%d ok\n", len, imm, inl);
}

void check_read(Pair *p, uint32_t len) {
  fill(p->buf[1].data(), len, 7 * len);
  memset(p->buf[0].data(), 0, len);
  ibv_sge sg[3];
  ibv_send_wr w{};
  w.opcode = IBV_WR_RDMA_READ;
  w.sg_list = sg;
  w.num_sge = gather3(p, 0, len, sg);
  w.wr.rdma = {reinterpret_cast<uintptr_t>(p->buf[1].data()), p->mr[1]->rkey};
  ibv_wc wc = post_and_wait(p, &w);
  EXPECT(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RDMA_READ);
  EXPECT(checksum(p->buf[0].data(), len) == checksum(p->buf[1].data(), len));
  printf("  read len=%u ok\n", len);
}

uint64_t atomic_op(Pair *p, ibv_wr_opcode op, uint64_t cmp_add, uint64_t swap) {
  uint64_t *result = reinterpret_cast<uint64_t *>(p->buf[0].data() + 4096);
  *result = 0xdeaddeaddeaddeadull;
  ibv_sge sg = {reinterpret_cast<uintptr_t>(result), 8, p->mr[0]->lkey};
  ibv_send_wr w{};
  w.opcode = op;
  w.sg_list = &sg;
  w.num_sge = 1;
  w.wr.atomic = {reinterpret_cast<uintptr_t>(p->buf[1].data() + 8192), cmp_add, swap,
                 p->mr[1]->rkey};
  ibv_wc wc = post_and_wait(p, &w);
  EXPECT(wc.status == IBV_WC_SUCCESS);
  EXPECT(wc.opcode == (op == IBV_WR_ATOMIC_FETCH_AND_ADD ? IBV_WC_FETCH_ADD : IBV_WC_COMP_SWAP));
  return *result;
}

void check_atomics(Pair *p) {
  uint64_t *target = reinterpret_cast<uint64_t *>(p->buf[1].data() + 8192);
  *target = 100;
  EXPECT(atomic_op(p, IBV_WR_ATOMIC_FETCH_AND_ADD, 5, 0) == 100);
  EXPECT(*target == 105);
  EXPECT(atomic_op(p, IBV_WR_ATOMIC_CMP_AND_SWP, 105, 7) == 105);
  EXPECT(*target == 7);
  EXPECT(atomic_op(p, IBV_WR_ATOMIC_CMP_AND_SWP, 999, 1) == 7);  // no swap
  EXPECT(*target == 7);
  printf("  atomics ok\n");
}

int case_opcodes(const char *dev) {
  ibv_context *ctx = open_device(dev);
  REQUIRE(ctx);
  Pair p;
  make_pair(&p, ctx, 1 << 20);
  for (uint32_t len : {1u, 100u, 4096u, 65536u}) {
    check_send(&p, len, false, false);
    check_send(&p, len, true, false);
    check_write(&p, len, false, false);
    check_write(&p, len, true, false);
    check_read(&p, len);
  }
  check_write(&p, 1u << 20, false, false);
  check_read(&p, 1u << 20);
  check_send(&p, 100, false, true);
  check_send(&p, 120, true, true);
  check_write(&p, 128, false, true);
  check_atomics(&p);
  free_pair(&p);
  ibv_close_device(ctx);
  return failures() ? 1 : 0;
}

ibv_wc bad_write(ibv_context *ctx, uint32_t rkey_delta, uint64_t addr_offset, uint32_t len) {
  Pair p;
  make_pair(&p, ctx, 8192);
  ibv_sge sg = {reinterpret_cast<uintptr_t>(p.buf[0].data()), len, p.mr[0]->lkey};
  ibv_send_wr w{};
  w.opcode = IBV_WR_RDMA_WRITE;
  w.sg_list = &sg;
  w.num_sge = 1;
  w.wr.rdma = {reinterpret_cast<uintptr_t>(p.buf[1].data()) + addr_offset,
               p.mr[1]->rkey + rkey_delta};
  ibv_wc wc = post_and_wait(&p, &w);
  free_pair(&p);
  return wc;
}

int case_access(const char *dev) {
  ibv_context *ctx = open_device(dev);
  REQUIRE(ctx);
  ibv_wc wc = bad_write(ctx, 0x1000, 0, 64);
  printf("  wrong rkey: %s\n", ibv_wc_status_str(wc.status));
  EXPECT(wc.status == IBV_WC_REM_ACCESS_ERR);
  wc = bad_write(ctx, 0, 8192 - 32, 64);  // runs 32 bytes past the MR
  printf("  out of bounds: %s\n", ibv_wc_status_str(wc.status));
  EXPECT(wc.status == IBV_WC_REM_ACCESS_ERR);
  wc = bad_write(ctx, 0, 0, 64);  // and a good one still works after both
  EXPECT(wc.status == IBV_WC_SUCCESS);
  ibv_close_device(ctx);
  return failures() ? 1 : 0;
}

int case_fatal(const char *dev, const char *ready_file) {
  ibv_context *ctx = open_device(dev);
  REQUIRE(ctx);
  Pair p;
  make_pair(&p, ctx, 4096);
  post_recv(&p, 0, 64, 1);
  FILE *f = fopen(ready_file, "w");
  REQUIRE(f);
  fclose(f);
  EXPECT(mroce_test::wait_async_event(ctx, IBV_EVENT_DEVICE_FATAL, 20));
  ibv_sge sg = {reinterpret_cast<uintptr_t>(p.buf[0].data()), 64, p.mr[0]->lkey};
  ibv_send_wr w{};
  w.opcode = IBV_WR_SEND;
  w.sg_list = &sg;
  w.num_sge = 1;
  ibv_send_wr *bad;
  EXPECT(ibv_post_send(p.qp[0], &w, &bad) == EIO);
  ibv_wc wc;
  int n, polls = 0;
  while ((n = ibv_poll_cq(p.cq[1], 1, &wc)) > 0 && polls++ < 100) EXPECT(wc.status != IBV_WC_SUCCESS);
  EXPECT(n < 0);  // an error, not an endless 0
  EXPECT(ibv_alloc_pd(ctx) == nullptr);
  free_pair(&p);
  ibv_close_device(ctx);
  // The daemon comes back: a new open works.
  ibv_context *again = nullptr;
  for (mroce_test::Deadline back(60); !again && !back.passed();) {
    again = mroce_test::try_open_device(dev);
    if (!again) usleep(100000);
  }
  REQUIRE(again);
  ibv_pd *pd = ibv_alloc_pd(again);
  EXPECT(pd != nullptr);
  if (pd) ibv_dealloc_pd(pd);
  ibv_close_device(again);
  printf("  reopened after restart ok\n");
  return failures() ? 1 : 0;
}

// ---- ud: the datagram service (docs/protocol.md §13) ----

constexpr uint32_t kUdQkey = 0x1111;
constexpr uint32_t kGrh = 40;

ibv_qp *ud_qp(ibv_pd *pd, ibv_cq *cq) {
  ibv_qp *qp = create_qp(pd, cq, IBV_QPT_UD, {16, 16, 1, 1, 0});
  REQUIRE(qp);
  REQUIRE(mroce_test::ud_to_rts(qp, kUdQkey) == 0);
  return qp;
}

ibv_ah *ud_ah(ibv_pd *pd, int gid_index, const ibv_gid &gid) {
  ibv_ah *ah = create_ah(pd, gid, gid_index);
  REQUIRE(ah);
  return ah;
}

struct Ud {
  ibv_context *ctx;
  ibv_pd *pd;
  ibv_cq *cq;
  ibv_qp *tx, *rx;
  ibv_mr *mr;
  ibv_ah *ah;
  std::vector<uint8_t> buf = std::vector<uint8_t>(1 << 16);
};

int ud_send(Ud &u, ibv_ah *ah, uint32_t qkey, uint32_t len, uint8_t mark) {
  memset(u.buf.data(), mark, len);
  ibv_sge sg = {reinterpret_cast<uintptr_t>(u.buf.data()), len, u.mr->lkey};
  ibv_send_wr wr{}, *bad = nullptr;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.sg_list = &sg;
  wr.num_sge = 1;
  wr.wr.ud.ah = ah;
  wr.wr.ud.remote_qpn = u.rx->qp_num;
  wr.wr.ud.remote_qkey = qkey;
  return ibv_post_send(u.tx, &wr, &bad);
}

void ud_recv(Ud &u, uint64_t id) {
  ibv_sge sg = {reinterpret_cast<uintptr_t>(u.buf.data() + 8192), kGrh + 1024, u.mr->lkey};
  ibv_recv_wr r{}, *bad = nullptr;
  r.wr_id = id;
  r.sg_list = &sg;
  r.num_sge = 1;
  REQUIRE(ibv_post_recv(u.rx, &r, &bad) == 0);
}

// The next completion of one queue (the CQ is shared: take what is there).
ibv_wc ud_wait(Ud &u, bool recv) {
  ibv_wc wc{};
  REQUIRE(poll_one(u.cq, &wc));
  EXPECT(recv == (wc.opcode == IBV_WC_RECV));
  return wc;
}

int case_ud(const char *dev) {
  Ud u;
  REQUIRE((u.ctx = open_device(dev)));
  ibv_gid gid;
  int gidx = roce_v2_ipv4_gid(u.ctx, &gid);
  REQUIRE(gidx >= 0);
  REQUIRE((u.pd = ibv_alloc_pd(u.ctx)));
  REQUIRE((u.cq = create_cq(u.ctx, 64)));
  REQUIRE((u.mr = reg_mr(u.pd, u.buf.data(), u.buf.size(), IBV_ACCESS_LOCAL_WRITE)));
  u.tx = ud_qp(u.pd, u.cq);
  u.rx = ud_qp(u.pd, u.cq);
  u.ah = ud_ah(u.pd, gidx, gid);

  // A datagram lands behind its GRH with the sender's QPN.
  ud_recv(u, 1);
  REQUIRE(ud_send(u, u.ah, kUdQkey, 64, 0xA1) == 0);
  EXPECT(ud_wait(u, false).status == IBV_WC_SUCCESS);
  ibv_wc wc = ud_wait(u, true);
  EXPECT(wc.status == IBV_WC_SUCCESS && wc.byte_len == kGrh + 64);
  EXPECT((wc.wc_flags & IBV_WC_GRH) && wc.src_qp == u.tx->qp_num && wc.pkey_index == 0);
  const uint8_t *g = u.buf.data() + 8192;
  EXPECT(g[20] == 0x45 && g[kGrh] == 0xA1 && g[kGrh + 63] == 0xA1);
  printf("  datagram with GRH ok\n");

  // A wrong Q_Key is dropped at the receiver: the receive takes the next one.
  ud_recv(u, 2);
  REQUIRE(ud_send(u, u.ah, 0x2222, 16, 0xBB) == 0);
  EXPECT(ud_wait(u, false).status == IBV_WC_SUCCESS);  // UD: the sender cannot know
  REQUIRE(ud_send(u, u.ah, kUdQkey, 16, 0xCC) == 0);
  EXPECT(ud_wait(u, false).status == IBV_WC_SUCCESS);
  wc = ud_wait(u, true);
  EXPECT(wc.status == IBV_WC_SUCCESS && wc.wr_id == 2 && g[kGrh] == 0xCC);
  printf("  wrong Q_Key dropped ok\n");

  // Over the UD MTU: LOC_LEN_ERR, the send queue in SQE; SQE -> RTS resumes.
  ibv_port_attr pa;
  REQUIRE(ibv_query_port(u.ctx, 1, &pa) == 0);
  uint32_t mtu = 128u << pa.active_mtu;
  REQUIRE(ud_send(u, u.ah, kUdQkey, mtu + 1, 0xDD) == 0);
  EXPECT(ud_wait(u, false).status == IBV_WC_LOC_LEN_ERR);
  ibv_qp_attr qa{};
  ibv_qp_init_attr qi{};
  REQUIRE(ibv_query_qp(u.tx, &qa, IBV_QP_STATE, &qi) == 0);
  EXPECT(qa.qp_state == IBV_QPS_SQE);
  qa.qp_state = IBV_QPS_RTS;
  REQUIRE(ibv_modify_qp(u.tx, &qa, IBV_QP_STATE) == 0);
  printf("  oversize -> LOC_LEN_ERR, SQE, RTS again ok\n");

  // An AH of another context names nothing of ours: LOC_QP_OP_ERR.
  ibv_context *other = open_device(dev);
  REQUIRE(other);
  ibv_pd *opd = ibv_alloc_pd(other);
  REQUIRE(opd);
  ibv_ah *foreign = ud_ah(opd, gidx, gid);
  REQUIRE(ud_send(u, foreign, kUdQkey, 8, 0xEE) == 0);
  EXPECT(ud_wait(u, false).status == IBV_WC_LOC_QP_OP_ERR);
  REQUIRE(ibv_modify_qp(u.tx, &qa, IBV_QP_STATE) == 0);
  printf("  foreign AH -> LOC_QP_OP_ERR ok\n");

  // Refused at post: no AH, RDMA on UD, an AH without a GRH.
  EXPECT(ud_send(u, nullptr, kUdQkey, 8, 0) == EINVAL);
  ibv_send_wr wr{}, *bad = nullptr;
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.wr.ud.ah = u.ah;
  EXPECT(ibv_post_send(u.tx, &wr, &bad) == EINVAL);
  ibv_ah_attr local{};
  local.port_num = 1;
  EXPECT(ibv_create_ah(u.pd, &local) == nullptr && errno == EINVAL);
  printf("  refused at post ok\n");

  // And the QP still delivers.
  ud_recv(u, 3);
  REQUIRE(ud_send(u, u.ah, kUdQkey, mtu, 0x5A) == 0);
  EXPECT(ud_wait(u, false).status == IBV_WC_SUCCESS);
  wc = ud_wait(u, true);
  EXPECT(wc.status == IBV_WC_SUCCESS && wc.byte_len == kGrh + mtu && g[kGrh + mtu - 1] == 0x5A);
  printf("  full-MTU datagram after the errors ok\n");

  ibv_destroy_ah(foreign);
  ibv_dealloc_pd(opd);
  ibv_close_device(other);
  ibv_destroy_ah(u.ah);
  ibv_destroy_qp(u.tx);
  ibv_destroy_qp(u.rx);
  ibv_dereg_mr(u.mr);
  ibv_destroy_cq(u.cq);
  ibv_dealloc_pd(u.pd);
  ibv_close_device(u.ctx);
  return failures() ? 1 : 0;
}

// ---- ud multicast (docs/protocol.md §13.8) across two hosts ----

constexpr uint32_t kGroupV4 = 0xEF070707;  // 239.7.7.7
constexpr int kMcastCount = 10;

ibv_gid group_gid() {
  ibv_gid g{};
  g.raw[10] = g.raw[11] = 0xff;
  for (int i = 0; i < 4; i++) g.raw[12 + i] = static_cast<uint8_t>(kGroupV4 >> (24 - 8 * i));
  return g;
}

void mcast_send(Ud &u, ibv_qp *from, ibv_ah *ah, uint8_t mark) {
  memset(u.buf.data(), mark, 64);
  ibv_sge sg = {reinterpret_cast<uintptr_t>(u.buf.data()), 64, u.mr->lkey};
  ibv_send_wr wr{}, *bad = nullptr;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.sg_list = &sg;
  wr.num_sge = 1;
  wr.wr.ud.ah = ah;
  wr.wr.ud.remote_qpn = 0xFFFFFF;
  wr.wr.ud.remote_qkey = kUdQkey;
  REQUIRE(ibv_post_send(from, &wr, &bad) == 0);
}

void mcast_open(Ud &u, const char *dev, int *gidx, ibv_gid *gid) {
  REQUIRE((u.ctx = open_device(dev)));
  *gidx = roce_v2_ipv4_gid(u.ctx, gid);
  REQUIRE(*gidx >= 0);
  REQUIRE((u.pd = ibv_alloc_pd(u.ctx)));
  REQUIRE((u.cq = create_cq(u.ctx, 256)));
  REQUIRE((u.mr = reg_mr(u.pd, u.buf.data(), u.buf.size(), IBV_ACCESS_LOCAL_WRITE)));
}

// Two QPs attached to the group each take kMcastCount datagrams from the
// other host, then one sent from this host by a third QP (local fan-out).
int case_mcast_recv(const char *dev, const char *ready_file) {
  Ud u;
  int gidx;
  ibv_gid gid, group = group_gid();
  mcast_open(u, dev, &gidx, &gid);
  ibv_qp *qp[2] = {ud_qp(u.pd, u.cq), ud_qp(u.pd, u.cq)};
  ibv_qp_init_attr ia{};
  ia.send_cq = ia.recv_cq = u.cq;
  ia.qp_type = IBV_QPT_UD;
  ia.cap = {kMcastCount + 8, kMcastCount + 8, 1, 1, 0};
  union ibv_gid not_mcast = gid;
  EXPECT(ibv_attach_mcast(qp[0], &not_mcast, 0) == EINVAL);
  for (int q = 0; q < 2; q++) {
    REQUIRE(ibv_attach_mcast(qp[q], &group, 0) == 0);
    for (int i = 0; i < kMcastCount + 1; i++) {
      ibv_sge sg = {reinterpret_cast<uintptr_t>(u.buf.data() + 4096 + (q * 16 + i) * 128), 128,
                    u.mr->lkey};
      ibv_recv_wr r{}, *bad = nullptr;
      r.wr_id = static_cast<uint64_t>(q) << 8 | i;
      r.sg_list = &sg;
      r.num_sge = 1;
      REQUIRE(ibv_post_recv(qp[q], &r, &bad) == 0);
    }
  }
  FILE *f = fopen(ready_file, "w");
  REQUIRE(f);
  fclose(f);
  int got[2] = {0, 0};
  for (int n = 0; n < 2 * kMcastCount; n++) {
    ibv_wc wc{};
    REQUIRE(poll_one(u.cq, &wc, 60));
    EXPECT(wc.status == IBV_WC_SUCCESS && wc.byte_len == kGrh + 64 && (wc.wc_flags & IBV_WC_GRH));
    got[wc.qp_num == qp[1]->qp_num]++;
  }
  EXPECT(got[0] == kMcastCount && got[1] == kMcastCount);
  printf("  both attached QPs got %d datagrams from the other host ok\n", kMcastCount);
  ibv_qp *sender = ud_qp(u.pd, u.cq);
  ibv_ah *ah = ud_ah(u.pd, gidx, group);
  mcast_send(u, sender, ah, 0x77);
  int recvs = 0, sends = 0;
  for (int n = 0; n < 3; n++) {
    ibv_wc wc{};
    REQUIRE(poll_one(u.cq, &wc, 60));
    EXPECT(wc.status == IBV_WC_SUCCESS);
    if (wc.opcode == IBV_WC_RECV) {
      recvs++;
      EXPECT(wc.src_qp == sender->qp_num);
    } else {
      sends++;
    }
  }
  EXPECT(recvs == 2 && sends == 1);
  printf("  a datagram sent on this host reached both attached QPs ok\n");
  for (int q = 0; q < 2; q++) {
    EXPECT(ibv_detach_mcast(qp[q], &group, 0) == 0);
    EXPECT(ibv_detach_mcast(qp[q], &group, 0) == EINVAL);
  }
  return failures() ? 1 : 0;
}

int case_mcast_send(const char *dev) {
  Ud u;
  int gidx;
  ibv_gid gid;
  mcast_open(u, dev, &gidx, &gid);
  u.tx = ud_qp(u.pd, u.cq);
  ibv_ah *ah = ud_ah(u.pd, gidx, group_gid());
  for (int i = 0; i < kMcastCount; i++) {
    mcast_send(u, u.tx, ah, static_cast<uint8_t>(i));
    ibv_wc wc{};
    REQUIRE(poll_one(u.cq, &wc));
    EXPECT(wc.status == IBV_WC_SUCCESS);
  }
  printf("  sent %d datagrams to the group ok\n", kMcastCount);
  return failures() ? 1 : 0;
}

}  // namespace

int main(int argc, char **argv) {
  setvbuf(stdout, nullptr, _IONBF, 0);
  std::string c = argc > 2 ? argv[1] : "";
  if (c == "opcodes") return case_opcodes(argv[2]);
  if (c == "access") return case_access(argv[2]);
  if (c == "fatal" && argc > 3) return case_fatal(argv[2], argv[3]);
  if (c == "ud") return case_ud(argv[2]);
  if (c == "mcast_recv" && argc > 3) return case_mcast_recv(argv[2], argv[3]);
  if (c == "mcast_send") return case_mcast_send(argv[2]);
  fprintf(stderr, "usage: verbs_e2e opcodes|access|ud DEV | fatal DEV READY_FILE\n");
  return 2;
}
