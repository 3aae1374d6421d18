// End-to-end: UD QPs on a shared receive queue, and the exact bound of a
// receive queue, across the two namespaces through libibverbs (run by
// tests/srq/srq_ud_e2e_test.sh); setup is tests/lib/verbs_setup.
//   srq_ud_e2e recv DEV DIR SENDER_IP  creates a UD QP with its own RQ (max_recv_wr 5)
//       and two UD QPs on one SRQ; checks that exactly max_recv_wr /
//       max_wr receives can be posted (one more: ENOMEM, *bad_wr set);
//       writes "qpn_rq qpn_1 qpn_2 gid" to DIR/addr; then checks every
//       datagram's completion (IBV_WC_GRH, src_qp, sl, qp_num = the QP it
//       was sent to) and its buffer (GRH then payload), that one receive
//       can be posted again after a completion, the SRQ limit event and
//       LAST_WQE_REACHED; drains the SRQ, writes DIR/drained and waits for
//       DIR/done (the script checks the SRQ-empty drop was counted).
//   srq_ud_e2e send DEV DIR  reads DIR/addr and sends datagrams to the
//       three QPs, one round every 20 ms, until DIR/done appears (UD may
//       drop: the receiver decides when it has seen enough).
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

using namespace mroce_test;

constexpr uint32_t kQkey = 0x11110000;
constexpr uint32_t kRqWr = 5;       // not a power of two: the ring behind it has 8 slots
constexpr uint32_t kSrqWr = 6;      // rounded up by the device; the returned max_wr is the bound
constexpr uint32_t kPayload = 256;  // header (target qpn, round) then a pattern
constexpr uint32_t kSlot = 40 + 4096;
constexpr int kDeadlineS = 60;

// A UD QP in RTS; its own RQ of exactly max_recv_wr, or its receives on srq.
ibv_qp *ud_qp(ibv_pd *pd, ibv_cq *cq, ibv_srq *srq, uint32_t max_recv_wr) {
  ibv_qp_cap got{};
  ibv_qp *qp = create_qp(pd, cq, IBV_QPT_UD, {16, max_recv_wr, 1, 1, 0}, srq, &got);
  if (!qp) return nullptr;
  if (!srq && got.max_recv_wr != max_recv_wr) {
    fprintf(stderr, "create_qp returned max_recv_wr %u for %u\n", got.max_recv_wr, max_recv_wr);
    ::mroce_test::g_failures++;
  }
  if (ud_to_rts(qp, kQkey)) return nullptr;
  return qp;
}

bool file_exists(const std::string &p) { return access(p.c_str(), F_OK) == 0; }

// Receives into slot `slot` of the buffer.
ibv_recv_wr recv_wr(ibv_sge *sge, ibv_mr *mr, uint8_t *buf, uint64_t slot) {
  *sge = {reinterpret_cast<uintptr_t>(buf + slot * kSlot), kSlot, mr->lkey};
  ibv_recv_wr wr{};
  wr.wr_id = slot;
  wr.sg_list = sge;
  wr.num_sge = 1;
  return wr;
}

// Posts receives for slots [from, to) one by one; the first error and the
// slot it refused (*bad the bad_wr matched).
int post_range(ibv_qp *qp, ibv_srq *srq, ibv_mr *mr, uint8_t *buf, uint64_t from, uint64_t to,
               uint64_t *refused, bool *bad_ok) {
  for (uint64_t s = from; s < to; s++) {
    ibv_sge sge;
    ibv_recv_wr wr = recv_wr(&sge, mr, buf, s), *bad = nullptr;
    int err = srq ? ibv_post_srq_recv(srq, &wr, &bad) : ibv_post_recv(qp, &wr, &bad);
    if (err) {
      *refused = s;
      *bad_ok = bad == &wr;
      return err;
    }
  }
  return 0;
}

// The datagram in slot `slot`: GRH (IPv4 as RoCE v2 places it) from
// `src_ip`, then the payload sent to `qpn`.
bool check_datagram(const uint8_t *b, uint32_t qpn, const uint8_t *src_ip) {
  static const uint8_t zero[20] = {};
  if (memcmp(b, zero, 20) != 0 || b[20] != 0x45 || memcmp(b + 32, src_ip, 4) != 0) return false;
  uint32_t target;
  memcpy(&target, b + 40, 4);
  if (target != qpn) return false;
  for (uint32_t i = 8; i < kPayload; i++)
    if (b[40 + i] != static_cast<uint8_t>(i * 7)) return false;
  return true;
}

struct Receiver {
  ibv_context *ctx;
  ibv_pd *pd;
  ibv_cq *cq;
  ibv_mr *mr;
  ibv_srq *srq;
  ibv_qp *rq_qp, *q1, *q2;
  uint8_t *buf;
  uint32_t srq_max_wr;
  uint32_t srq_done;  // SRQ receives completed (any status)
};

int check_bounds(Receiver &r) {
  uint64_t refused = 0;
  bool bad_ok = false;
  // The QP's own RQ: exactly max_recv_wr (slots 0..4), one more ENOMEM.
  EXPECT(post_range(r.rq_qp, nullptr, r.mr, r.buf, 0, kRqWr, &refused, &bad_ok) == 0);
  EXPECT(post_range(r.rq_qp, nullptr, r.mr, r.buf, kRqWr, kRqWr + 1, &refused, &bad_ok) == ENOMEM);
  EXPECT(bad_ok);
  // The SRQ: exactly its returned max_wr (slots 16..), one more ENOMEM.
  EXPECT(post_range(nullptr, r.srq, r.mr, r.buf, 16, 16 + r.srq_max_wr, &refused, &bad_ok) == 0);
  EXPECT(post_range(nullptr, r.srq, r.mr, r.buf, 16 + r.srq_max_wr, 17 + r.srq_max_wr, &refused,
                    &bad_ok) == ENOMEM);
  EXPECT(bad_ok);
  // Armed at max_wr: the first receive taken fires the limit event.
  ibv_srq_attr la{};
  la.srq_limit = r.srq_max_wr;
  REQUIRE(ibv_modify_srq(r.srq, &la, IBV_SRQ_LIMIT) == 0);
  return 0;
}

// Polls until a completion of each of the three QPs is checked (a
// datagram to rq_qp, q1 and q2), then posts one more RQ receive.
int check_traffic(Receiver &r, const uint8_t *src_ip) {
  bool seen_rq = false, seen1 = false, seen2 = false, reposted = false;
  Deadline end(kDeadlineS);
  while (!(seen_rq && seen1 && seen2 && reposted) && !end.passed()) {
    ibv_wc wc[16];
    int n = ibv_poll_cq(r.cq, 16, wc);
    REQUIRE(n >= 0);
    for (int i = 0; i < n; i++) {
      r.srq_done += wc[i].wr_id >= 16;
      EXPECT(wc[i].status == IBV_WC_SUCCESS);
      if (wc[i].status != IBV_WC_SUCCESS || wc[i].opcode != IBV_WC_RECV) continue;
      EXPECT(wc[i].wc_flags & IBV_WC_GRH);
      EXPECT(wc[i].byte_len == 40 + kPayload);
      EXPECT(wc[i].sl == 0xA);  // RoCE v2 packet type: UDP over IPv4
      EXPECT(wc[i].pkey_index == 0);
      EXPECT(check_datagram(r.buf + wc[i].wr_id * kSlot, wc[i].qp_num, src_ip));
      bool from_srq = wc[i].wr_id >= 16;
      EXPECT(from_srq == (wc[i].qp_num != r.rq_qp->qp_num));
      seen_rq |= wc[i].qp_num == r.rq_qp->qp_num;
      seen1 |= wc[i].qp_num == r.q1->qp_num;
      seen2 |= wc[i].qp_num == r.q2->qp_num;
      if (!from_srq && !reposted) {  // one completed: exactly one more fits again
        uint64_t refused = 0;
        bool bad_ok = false;
        EXPECT(post_range(r.rq_qp, nullptr, r.mr, r.buf, kRqWr + 1, kRqWr + 2, &refused,
                          &bad_ok) == 0);
        reposted = true;
      }
    }
    if (n == 0) usleep(1000);
  }
  EXPECT(seen_rq && seen1 && seen2 && reposted);
  return 0;
}

// Polls until every SRQ receive completed (q2's successes, q1's flushes,
// and those check_traffic saw).
int drain_srq(Receiver &r) {
  uint32_t done = r.srq_done;
  Deadline end(kDeadlineS);
  while (done < r.srq_max_wr && !end.passed()) {
    ibv_wc wc[16];
    int n = ibv_poll_cq(r.cq, 16, wc);
    REQUIRE(n >= 0);
    for (int i = 0; i < n; i++) done += wc[i].wr_id >= 16;
    if (n == 0) usleep(1000);
  }
  EXPECT(done == r.srq_max_wr);
  return 0;
}

int run_recv(const char *dev, const std::string &dir, const char *sender_ip) {
  uint8_t src_ip[4];
  REQUIRE(inet_pton(AF_INET, sender_ip, src_ip) == 1);
  Receiver r{};
  REQUIRE((r.ctx = open_device(dev)));
  ibv_gid gid;
  REQUIRE(roce_v2_ipv4_gid(r.ctx, &gid) >= 0);
  REQUIRE((r.pd = ibv_alloc_pd(r.ctx)));
  REQUIRE((r.cq = create_cq(r.ctx, 256)));
  const size_t bytes = 64 * kSlot;
  REQUIRE((r.buf = static_cast<uint8_t *>(calloc(1, bytes))));
  REQUIRE((r.mr = reg_mr(r.pd, r.buf, bytes, IBV_ACCESS_LOCAL_WRITE)));
  ibv_srq_init_attr sa{};
  sa.attr = {kSrqWr, 1, 0};
  REQUIRE((r.srq = ibv_create_srq(r.pd, &sa)));
  r.srq_max_wr = sa.attr.max_wr;
  EXPECT(r.srq_max_wr >= kSrqWr && r.srq_max_wr <= 32);
  REQUIRE((r.rq_qp = ud_qp(r.pd, r.cq, nullptr, kRqWr)));
  REQUIRE((r.q1 = ud_qp(r.pd, r.cq, r.srq, 0)));
  REQUIRE((r.q2 = ud_qp(r.pd, r.cq, r.srq, 0)));
  if (check_bounds(r)) return 1;
  FILE *f = fopen((dir + "/addr.tmp").c_str(), "w");
  REQUIRE(f);
  fprintf(f, "%u %u %u", r.rq_qp->qp_num, r.q1->qp_num, r.q2->qp_num);
  for (uint8_t b : gid.raw) fprintf(f, " %u", b);
  fprintf(f, "\n");
  fclose(f);
  REQUIRE(rename((dir + "/addr.tmp").c_str(), (dir + "/addr").c_str()) == 0);
  if (check_traffic(r, src_ip) == 1) return 1;
  EXPECT(wait_async_event(r.ctx, IBV_EVENT_SRQ_LIMIT_REACHED, kDeadlineS));
  ibv_qp_attr err{};
  err.qp_state = IBV_QPS_ERR;
  REQUIRE(ibv_modify_qp(r.q1, &err, IBV_QP_STATE) == 0);
  EXPECT(wait_async_event(r.ctx, IBV_EVENT_QP_LAST_WQE_REACHED, kDeadlineS));
  if (drain_srq(r) == 1) return 1;
  // The SRQ is empty: the next datagram to q2 is a counted drop, which the
  // test script reads from the daemon before it writes DIR/done.
  FILE *d = fopen((dir + "/drained").c_str(), "w");
  if (d) fclose(d);
  Deadline end(kDeadlineS);
  while (!file_exists(dir + "/done") && !end.passed()) usleep(10000);
  EXPECT(file_exists(dir + "/done"));
  printf("recv: %s\n", failures() ? "FAILED" : "all checks passed");
  return failures() ? 1 : 0;
}

int read_addr(const std::string &dir, uint32_t qpn[3], ibv_gid *gid) {
  Deadline end(kDeadlineS);
  while (!file_exists(dir + "/addr") && !end.passed()) usleep(10000);
  FILE *f = fopen((dir + "/addr").c_str(), "r");
  REQUIRE(f);
  int got = fscanf(f, "%u %u %u", &qpn[0], &qpn[1], &qpn[2]);
  for (uint8_t &b : gid->raw) {
    unsigned v = 0;
    got += fscanf(f, "%u", &v);
    b = static_cast<uint8_t>(v);
  }
  fclose(f);
  REQUIRE(got == 3 + 16);
  return 0;
}

int run_send(const char *dev, const std::string &dir) {
  uint32_t qpn[3];
  ibv_gid dgid;
  if (read_addr(dir, qpn, &dgid)) return 1;
  ibv_context *ctx;
  REQUIRE((ctx = open_device(dev)));
  LocalPath path;
  REQUIRE(local_path(ctx, &path) == 0);
  ibv_pd *pd;
  ibv_cq *cq;
  REQUIRE((pd = ibv_alloc_pd(ctx)));
  REQUIRE((cq = create_cq(ctx, 64)));
  ibv_qp *qp;
  REQUIRE((qp = ud_qp(pd, cq, nullptr, 1)));
  ibv_ah *ah;
  REQUIRE((ah = create_ah(pd, dgid, path.gid_index)));
  static uint8_t buf[3][kPayload];
  ibv_mr *mr;
  REQUIRE((mr = reg_mr(pd, buf, sizeof(buf), 0)));
  Deadline end(kDeadlineS);
  uint32_t round = 0;
  for (; !file_exists(dir + "/done") && !end.passed(); round++) {
    for (int t = 0; t < 3; t++) {
      memcpy(buf[t], &qpn[t], 4);
      memcpy(buf[t] + 4, &round, 4);
      for (uint32_t i = 8; i < kPayload; i++) buf[t][i] = static_cast<uint8_t>(i * 7);
      ibv_sge sge{reinterpret_cast<uintptr_t>(buf[t]), kPayload, mr->lkey};
      ibv_send_wr wr{}, *bad = nullptr;
      wr.wr_id = t;
      wr.sg_list = &sge;
      wr.num_sge = 1;
      wr.opcode = IBV_WR_SEND;
      wr.send_flags = IBV_SEND_SIGNALED;
      wr.wr.ud = {ah, qpn[t], kQkey};
      REQUIRE(ibv_post_send(qp, &wr, &bad) == 0);
      ibv_wc wc;
      int n = 0;
      while ((n = ibv_poll_cq(cq, 1, &wc)) == 0 && !end.passed()) usleep(100);
      REQUIRE(n == 1 && wc.status == IBV_WC_SUCCESS);
    }
    usleep(20000);
  }
  printf("send: %u rounds\n", round);
  REQUIRE(file_exists(dir + "/done"));
  return 0;
}

}  // namespace

int main(int argc, char **argv) {
  if (argc == 5 && strcmp(argv[1], "recv") == 0) return run_recv(argv[2], argv[3], argv[4]);
  if (argc == 4 && strcmp(argv[1], "send") == 0) return run_send(argv[2], argv[3]);
  fprintf(stderr, "usage: srq_ud_e2e recv DEV DIR SENDER_IP | send DEV DIR\n");
  return 2;
}
