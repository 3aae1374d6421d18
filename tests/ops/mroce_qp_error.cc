// mroce_qp_error: drives two RC QPs of one device into ERR and keeps them
// there, for tests/ops/ops_e2e_test.sh (metaroce-ctl monitor must report
// the state change and its reason). An ordinary libibverbs application.
//
//   mroce_qp_error DEVICE GID_INDEX GO_FILE
//
// Creates QPs a and b, connects them to each other over the device's own
// GID (a loopback pair), prints "ready qpn A B" once both are in RTS, and
// waits (at most 60 s) for GO_FILE to exist. Then a RDMA WRITEs to b with a
// wrong rkey: b refuses it (remote access error, b to ERR), a's work
// request completes with IBV_WC_REM_ACCESS_ERR (a to ERR). Prints
// "status A <ibv_wc_status_str>" and then holds both QPs until SIGTERM or
// 120 s, so the ERR state lasts longer than any poll interval.
//
// Exit status: 0 after the error completion arrived as expected, 1 any
// other outcome (with a message on stderr), 2 bad command line.
#include <errno.h>
#include <infiniband/verbs.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

namespace {

#define DIE(...)                                     \
  do {                                               \
    fprintf(stderr, "mroce_qp_error: " __VA_ARGS__); \
    fputc('\n', stderr);                             \
    exit(1);                                         \
  } while (0)

volatile sig_atomic_t g_stop = 0;

double now_s() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec / 1e9;
}

ibv_context* open_device(const char* name) {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  ibv_context* ctx = nullptr;
  for (int i = 0; list && i < n && !ctx; i++)
    if (strcmp(ibv_get_device_name(list[i]), name) == 0) ctx = ibv_open_device(list[i]);
  if (list) ibv_free_device_list(list);
  if (!ctx) DIE("no device %s (of %d)", name, n);
  return ctx;
}

void modify(ibv_qp* qp, ibv_qp_attr* a, int mask, const char* what) {
  int err = ibv_modify_qp(qp, a, mask);
  if (err) DIE("modify QP %u to %s: %s", qp->qp_num, what, strerror(err));
}

// RESET -> INIT -> RTR -> RTS towards (gid, dest).
void connect(ibv_qp* qp, const ibv_gid& gid, int gid_index, uint32_t dest) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
  modify(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS, "INIT");
  a = {};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_1024;
  a.dest_qp_num = dest;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 1;
  a.ah_attr.is_global = 1;
  a.ah_attr.port_num = 1;
  a.ah_attr.grh.dgid = gid;
  a.ah_attr.grh.sgid_index = static_cast<uint8_t>(gid_index);
  a.ah_attr.grh.hop_limit = 64;
  modify(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                     IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER, "RTR");
  a = {};
  a.qp_state = IBV_QPS_RTS;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.max_rd_atomic = 1;
  modify(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                     IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC, "RTS");
}

ibv_qp* create_qp(ibv_pd* pd, ibv_cq* cq) {
  ibv_qp_init_attr init{};
  init.send_cq = init.recv_cq = cq;
  init.qp_type = IBV_QPT_RC;
  init.cap = {4, 4, 1, 1, 0};
  ibv_qp* qp = ibv_create_qp(pd, &init);
  if (!qp) DIE("create QP: %s", strerror(errno));
  return qp;
}

void wait_for_file(const char* path) {
  double deadline = now_s() + 60;
  while (access(path, F_OK) != 0) {
    if (now_s() > deadline) DIE("%s did not appear within 60 s", path);
    usleep(10000);
  }
}

// The one completion of a's WRITE (at most 60 s).
ibv_wc wait_completion(ibv_cq* cq) {
  ibv_wc wc{};
  double deadline = now_s() + 60;
  while (ibv_poll_cq(cq, 1, &wc) == 0) {
    if (now_s() > deadline) DIE("no completion within 60 s");
    usleep(1000);
  }
  return wc;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: mroce_qp_error DEVICE GID_INDEX GO_FILE\n");
    return 2;
  }
  signal(SIGTERM, [](int) { g_stop = 1; });
  int gid_index = atoi(argv[2]);
  ibv_context* ctx = open_device(argv[1]);
  ibv_gid gid;
  if (ibv_query_gid(ctx, 1, gid_index, &gid)) DIE("query GID %d failed", gid_index);
  ibv_pd* pd = ibv_alloc_pd(ctx);
  ibv_cq* cq = pd ? ibv_create_cq(ctx, 16, nullptr, nullptr, 0) : nullptr;
  static char buf[4096];
  ibv_mr* mr = cq ? ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)
                  : nullptr;
  if (!mr) DIE("PD, CQ or MR: %s", strerror(errno));
  ibv_qp* a = create_qp(pd, cq);
  ibv_qp* b = create_qp(pd, cq);
  connect(a, gid, gid_index, b->qp_num);
  connect(b, gid, gid_index, a->qp_num);
  printf("ready qpn %u %u\n", a->qp_num, b->qp_num);
  fflush(stdout);
  wait_for_file(argv[3]);
  ibv_sge sge{reinterpret_cast<uintptr_t>(buf), 64, mr->lkey};
  ibv_send_wr wr{}, *bad = nullptr;
  wr.wr_id = 1;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(buf) + 1024;
  wr.wr.rdma.rkey = mr->rkey ^ 0x80;  // wrong: no MR has it
  if (int err = ibv_post_send(a, &wr, &bad)) DIE("post WRITE: %s", strerror(err));
  ibv_wc wc = wait_completion(cq);
  printf("status %u %s\n", wc.qp_num, ibv_wc_status_str(wc.status));
  fflush(stdout);
  if (wc.status != IBV_WC_REM_ACCESS_ERR) DIE("expected remote access error");
  for (double end = now_s() + 120; !g_stop && now_s() < end;) usleep(10000);
  ibv_destroy_qp(a);
  ibv_destroy_qp(b);
  ibv_dereg_mr(mr);
  ibv_destroy_cq(cq);
  ibv_dealloc_pd(pd);
  ibv_close_device(ctx);
  return 0;
}
