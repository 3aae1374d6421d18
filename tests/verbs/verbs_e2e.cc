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
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <string>
#include <vector>

namespace {

int g_failures = 0;
#define EXPECT(c)                                                          \
  do {                                                                     \
    if (!(c)) {                                                            \
      fprintf(stderr, "%s:%d: EXPECT(%s) failed\n", __FILE__, __LINE__, #c); \
      g_failures++;                                                        \
    }                                                                      \
  } while (0)
#define REQUIRE(c)                                                          \
  do {                                                                      \
    if (!(c)) {                                                             \
      fprintf(stderr, "%s:%d: REQUIRE(%s) failed (errno %d: %s)\n", __FILE__, \
              __LINE__, #c, errno, strerror(errno));                        \
      exit(1);                                                              \
    }                                                                       \
  } while (0)

uint32_t checksum(const uint8_t *p, size_t n) {  // FNV-1a
  uint32_t h = 2166136261u;
  for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 16777619u;
  return h;
}

void fill(uint8_t *p, size_t n, uint32_t seed) {
  for (size_t i = 0; i < n; i++) {
    seed = seed * 1103515245u + 12345u;
    p[i] = static_cast<uint8_t>(seed >> 16);
  }
}

ibv_context *open_dev(const char *name) {
  int n = 0;
  ibv_device **list = ibv_get_device_list(&n);
  ibv_context *ctx = nullptr;
  for (int i = 0; list && i < n; i++)
    if (strcmp(ibv_get_device_name(list[i]), name) == 0) ctx = ibv_open_device(list[i]);
  if (list) ibv_free_device_list(list);
  return ctx;
}

// The RoCE v2 IPv4-mapped GID, as perftest picks by default.
int roce_v2_ipv4_gid(ibv_context *ctx, ibv_gid *gid) {
  ibv_port_attr pa;
  REQUIRE(ibv_query_port(ctx, 1, &pa) == 0);
  for (int i = 0; i < pa.gid_tbl_len; i++) {
    ibv_gid_entry e;
    if (ibv_query_gid_ex(ctx, 1, i, &e, 0)) continue;
    static const uint8_t v4[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (e.gid_type == IBV_GID_TYPE_ROCE_V2 && memcmp(e.gid.raw, v4, 12) == 0) {
      *gid = e.gid;
      return i;
    }
  }
  return -1;
}

struct Pair {  // two RC QPs on one device, connected to each other
  ibv_context *ctx;
  ibv_pd *pd;
  ibv_cq *cq[2];
  ibv_qp *qp[2];
  std::vector<uint8_t> buf[2];
  ibv_mr *mr[2];
};

void connect_qp(ibv_qp *qp, uint32_t dest, int gid_index, const ibv_gid &gid, ibv_mtu mtu) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                      IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_LOCAL_WRITE;
  REQUIRE(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                    IBV_QP_ACCESS_FLAGS) == 0);
  a = {};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = mtu;
  a.dest_qp_num = dest;
  a.rq_psn = 100;
  a.max_dest_rd_atomic = 4;
  a.min_rnr_timer = 12;
  a.ah_attr.is_global = 1;
  a.ah_attr.grh.dgid = gid;
  a.ah_attr.grh.sgid_index = static_cast<uint8_t>(gid_index);
  a.ah_attr.grh.hop_limit = 64;
  a.ah_attr.port_num = 1;
  REQUIRE(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                    IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
                                    IBV_QP_MIN_RNR_TIMER) == 0);
  a = {};
  a.qp_state = IBV_QPS_RTS;
  a.sq_psn = 100;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.max_rd_atomic = 4;
  REQUIRE(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT |
                                    IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                    IBV_QP_MAX_QP_RD_ATOMIC) == 0);
}

void make_pair(Pair *p, ibv_context *ctx, size_t bytes) {
  p->ctx = ctx;
  REQUIRE((p->pd = ibv_alloc_pd(ctx)));
  ibv_gid gid;
  int gi = roce_v2_ipv4_gid(ctx, &gid);
  REQUIRE(gi >= 0);
  ibv_port_attr pa;
  REQUIRE(ibv_query_port(ctx, 1, &pa) == 0);
  for (int i = 0; i < 2; i++) {
    REQUIRE((p->cq[i] = ibv_create_cq(ctx, 64, nullptr, nullptr, 0)));
    ibv_qp_init_attr ia{};
    ia.send_cq = ia.recv_cq = p->cq[i];
    ia.qp_type = IBV_QPT_RC;
    ia.cap = {32, 32, 4, 4, 128};
    REQUIRE((p->qp[i] = ibv_create_qp(p->pd, &ia)));
    p->buf[i].assign(bytes, 0);
    REQUIRE((p->mr[i] = ibv_reg_mr(p->pd, p->buf[i].data(), bytes,
                                   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                                       IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC)));
  }
  connect_qp(p->qp[0], p->qp[1]->qp_num, gi, gid, pa.active_mtu);
  connect_qp(p->qp[1], p->qp[0]->qp_num, gi, gid, pa.active_mtu);
}

void free_pair(Pair *p) {
  for (int i = 0; i < 2; i++) {
    ibv_destroy_qp(p->qp[i]);
    ibv_destroy_cq(p->cq[i]);
    ibv_dereg_mr(p->mr[i]);
  }
  ibv_dealloc_pd(p->pd);
}

// Polls one completion (5 s at most).
bool poll_one(ibv_cq *cq, ibv_wc *wc) {
  timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (;;) {
    int n = ibv_poll_cq(cq, 1, wc);
    if (n == 1) return true;
    if (n < 0) return false;
    timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    if (t.tv_sec - t0.tv_sec > 5) {
      fprintf(stderr, "timeout waiting for a completion\n");
      return false;
    }
  }
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
  ibv_context *ctx = open_dev(dev);
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
  return g_failures ? 1 : 0;
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
  ibv_context *ctx = open_dev(dev);
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
  return g_failures ? 1 : 0;
}

bool wait_async(ibv_context *ctx, ibv_event_type want, int ms) {
  pollfd pf = {ctx->async_fd, POLLIN, 0};
  while (poll(&pf, 1, ms) == 1) {
    ibv_async_event ev;
    if (ibv_get_async_event(ctx, &ev)) return false;
    ibv_event_type t = ev.event_type;
    ibv_ack_async_event(&ev);
    printf("  async event: %s\n", ibv_event_type_str(t));
    if (t == want) return true;
  }
  return false;
}

int case_fatal(const char *dev, const char *ready_file) {
  ibv_context *ctx = open_dev(dev);
  REQUIRE(ctx);
  Pair p;
  make_pair(&p, ctx, 4096);
  post_recv(&p, 0, 64, 1);
  FILE *f = fopen(ready_file, "w");
  REQUIRE(f);
  fclose(f);
  EXPECT(wait_async(ctx, IBV_EVENT_DEVICE_FATAL, 20000));
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
  for (time_t end = time(nullptr) + 60; !again && time(nullptr) < end;) {
    again = open_dev(dev);
    if (!again) usleep(100000);
  }
  REQUIRE(again);
  ibv_pd *pd = ibv_alloc_pd(again);
  EXPECT(pd != nullptr);
  if (pd) ibv_dealloc_pd(pd);
  ibv_close_device(again);
  printf("  reopened after restart ok\n");
  return g_failures ? 1 : 0;
}

// ---- ud: the datagram service (docs/protocol.md §13) ----

constexpr uint32_t kUdQkey = 0x1111;
constexpr uint32_t kGrh = 40;

ibv_qp *ud_qp(ibv_pd *pd, ibv_cq *cq) {
  ibv_qp_init_attr ia{};
  ia.send_cq = ia.recv_cq = cq;
  ia.qp_type = IBV_QPT_UD;
  ia.cap = {16, 16, 1, 1, 0};
  ibv_qp *qp = ibv_create_qp(pd, &ia);
  REQUIRE(qp);
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qkey = kUdQkey;
  REQUIRE(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY) == 0);
  a.qp_state = IBV_QPS_RTR;
  REQUIRE(ibv_modify_qp(qp, &a, IBV_QP_STATE) == 0);
  a.qp_state = IBV_QPS_RTS;
  a.sq_psn = 1;
  REQUIRE(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN) == 0);
  return qp;
}

ibv_ah *ud_ah(ibv_pd *pd, int gid_index, const ibv_gid &gid) {
  ibv_ah_attr aa{};
  aa.is_global = 1;
  aa.port_num = 1;
  aa.grh.dgid = gid;
  aa.grh.sgid_index = static_cast<uint8_t>(gid_index);
  aa.grh.hop_limit = 64;
  ibv_ah *ah = ibv_create_ah(pd, &aa);
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
  REQUIRE((u.ctx = open_dev(dev)));
  ibv_gid gid;
  int gidx = roce_v2_ipv4_gid(u.ctx, &gid);
  REQUIRE(gidx >= 0);
  REQUIRE((u.pd = ibv_alloc_pd(u.ctx)));
  REQUIRE((u.cq = ibv_create_cq(u.ctx, 64, nullptr, nullptr, 0)));
  REQUIRE((u.mr = ibv_reg_mr(u.pd, u.buf.data(), u.buf.size(), IBV_ACCESS_LOCAL_WRITE)));
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
  ibv_context *other = open_dev(dev);
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
  return g_failures ? 1 : 0;
}

}  // namespace

int main(int argc, char **argv) {
  setvbuf(stdout, nullptr, _IONBF, 0);
  std::string c = argc > 2 ? argv[1] : "";
  if (c == "opcodes") return case_opcodes(argv[2]);
  if (c == "access") return case_access(argv[2]);
  if (c == "fatal" && argc > 3) return case_fatal(argv[2], argv[3]);
  if (c == "ud") return case_ud(argv[2]);
  fprintf(stderr, "usage: verbs_e2e opcodes|access|ud DEV | fatal DEV READY_FILE\n");
  return 2;
}
