// End-to-end memory windows on the data path, driven by work requests (run
// by tests/mw/mw_wr_e2e_test.sh, the server in one namespace, the client in
// the other):
//   mw_wr_e2e server DEV -p PORT         owns the memory and its windows
//   mw_wr_e2e client DEV -p PORT SERVER  accesses it through them
// Setup (device, GID, QP states, side channel, polls) is tests/lib/verbs_setup.
// Sessions (each a fresh QP pair: a remote access error moves RC QPs to ERR):
//   1. RC, extended API: the server binds W with ibv_wr_bind_mw, P with
//      ibv_post_send IBV_WR_BIND_MW, T (type 1, read-only) with ibv_bind_mw,
//      and Q with post_send; the client WRITEs W and READs P and T, data
//      verified. The server invalidates W with ibv_wr_local_inv; the client's
//      ibv_wr_send_inv frees P (IBV_WC_WITH_INV and the rkey in
//      invalidated_rkey at the server), and a WRITE through P then fails
//      IBV_WC_REM_ACCESS_ERR. The server destroys the QP Q is bound to.
//   2. RC: a WRITE through the locally invalidated W fails REM_ACCESS_ERR.
//   3. RC: Q binds again to the new QP (it was unbound when its QP went:
//      a bound type 2 window would refuse the bind); a WRITE through it
//      lands; a WRITE through the read-only T fails REM_ACCESS_ERR.
//   4. RC: Q binds again; a WRITE past its end (inside the MR) fails.
//   5. UC: the server binds U on a UC QP (post_send); UC WRITEs into it land,
//      one past its end is dropped (the bytes there stay), LOCAL_INV on the
//      UC QP ends it (a later WRITE is dropped); SEND_WITH_INV is EINVAL on UC.
//   Then the server allocates windows up to its max_mw: the next is refused
//   ENOMEM with the daemon's reason; all are freed and the MR deregisters.
// The test script checks the server daemon's counters name each refusal.
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <string>
#include <vector>

#include "tests/lib/verbs_setup.h"

namespace {

using namespace mroce_test;

constexpr size_t kBuf = 1 << 17;
constexpr uint64_t kWOff = 4096, kPOff = 20480, kTOff = 36864, kQOff = 53248, kUOff = 69632;
constexpr uint64_t kWin = 8192;
constexpr uint64_t kRecvOff = 110000;
constexpr int kRw = IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;

// ---- verbs ----
struct Dev {
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  ibv_cq* cq = nullptr;
  LocalPath path;
  std::vector<uint8_t> buf = std::vector<uint8_t>(kBuf);
  ibv_mr* mr = nullptr;
  SideChannel* ch = nullptr;
  uint8_t* base() { return buf.data(); }
  uint64_t va(uint64_t off) { return reinterpret_cast<uintptr_t>(buf.data()) + off; }
};

void open_dev(const char* name, int mr_access, Dev* d) {
  REQUIRE((d->ctx = open_device(name)));
  REQUIRE((d->pd = ibv_alloc_pd(d->ctx)));
  REQUIRE((d->cq = create_cq(d->ctx, 256)));
  REQUIRE(local_path(d->ctx, &d->path) == 0);
  REQUIRE((d->mr = reg_mr(d->pd, d->buf.data(), kBuf, mr_access)));
}

// RC sessions use the extended API (ibv_wr_*), the UC one plain verbs.
ibv_qp* create_qp(Dev& d, ibv_qp_type type) {
  ibv_qp_init_attr_ex ia{};
  ia.send_cq = ia.recv_cq = d.cq;
  ia.qp_type = type;
  ia.cap = {16, 16, 1, 1, 0};
  ia.pd = d.pd;
  ia.comp_mask = IBV_QP_INIT_ATTR_PD;
  if (type == IBV_QPT_RC) {
    ia.comp_mask |= IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    ia.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_READ |
                        IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_BIND_MW |
                        IBV_QP_EX_WITH_LOCAL_INV | IBV_QP_EX_WITH_SEND_WITH_INV;
  }
  ibv_qp* qp = ibv_create_qp_ex(d.ctx, &ia);
  REQUIRE(qp);
  return qp;
}

ibv_qp* session(Dev& d, ibv_qp_type type = IBV_QPT_RC) {
  ibv_qp* qp = create_qp(d, type);
  RcOptions o;
  o.access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
             (type == IBV_QPT_RC ? IBV_ACCESS_REMOTE_READ : 0);
  o.min_rnr_timer = 1;
  REQUIRE(exchange_and_connect(*d.ch, qp, d.path, o) == 0);
  return qp;
}

ibv_wc wait_wc(ibv_cq* cq) {
  ibv_wc wc{};
  REQUIRE(poll_one(cq, &wc, 60));
  return wc;
}
const char* st(const ibv_wc& wc) { return ibv_wc_status_str(wc.status); }

void fill(uint8_t* p, size_t n, uint8_t seed) {
  for (size_t i = 0; i < n; i++) p[i] = static_cast<uint8_t>(seed + i * 13 + (i >> 7));
}
bool check(const uint8_t* p, size_t n, uint8_t seed) {
  for (size_t i = 0; i < n; i++)
    if (p[i] != static_cast<uint8_t>(seed + i * 13 + (i >> 7))) return false;
  return true;
}

struct Window {
  uint64_t addr;
  uint32_t rkey;
};

void post_recv(Dev& d, ibv_qp* qp) {
  ibv_sge s = {d.va(kRecvOff), 4096, d.mr->lkey};
  ibv_recv_wr r{}, *bad = nullptr;
  r.wr_id = 3;
  r.sg_list = &s;
  r.num_sge = 1;
  REQUIRE(!ibv_post_recv(qp, &r, &bad));
}

// ---- server ----
ibv_mw_bind_info range(Dev& d, uint64_t off, int access) {
  return ibv_mw_bind_info{d.mr, d.va(off), kWin, static_cast<unsigned>(access)};
}

void expect_done(Dev& d, ibv_wc_opcode op, const char* what) {
  ibv_wc wc = wait_wc(d.cq);
  printf("  %s: %s\n", what, st(wc));
  EXPECT(wc.status == IBV_WC_SUCCESS);
  EXPECT(wc.opcode == op);
}

// ibv_wr_bind_mw (extended API)
Window bind_wr(Dev& d, ibv_qp* qp, ibv_mw* mw, uint64_t off) {
  ibv_qp_ex* x = ibv_qp_to_qp_ex(qp);
  uint32_t rkey = ibv_inc_rkey(mw->rkey);
  ibv_mw_bind_info info = range(d, off, kRw);
  ibv_wr_start(x);
  x->wr_id = 20;
  x->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_bind_mw(x, mw, rkey, &info);
  REQUIRE(!ibv_wr_complete(x));
  expect_done(d, IBV_WC_BIND_MW, "ibv_wr_bind_mw");
  mw->rkey = rkey;
  return Window{d.va(off), rkey};
}

// ibv_post_send IBV_WR_BIND_MW; returns the completion's status.
ibv_wc_status bind_post(Dev& d, ibv_qp* qp, ibv_mw* mw, uint64_t off, Window* w) {
  ibv_send_wr wr{}, *bad = nullptr;
  wr.wr_id = 21;
  wr.opcode = IBV_WR_BIND_MW;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.bind_mw.mw = mw;
  wr.bind_mw.rkey = ibv_inc_rkey(mw->rkey);
  wr.bind_mw.bind_info = range(d, off, kRw);
  REQUIRE(!ibv_post_send(qp, &wr, &bad));
  ibv_wc wc = wait_wc(d.cq);
  printf("  post_send BIND_MW (%s QP): %s\n", qp->qp_type == IBV_QPT_UC ? "UC" : "RC", st(wc));
  if (wc.status == IBV_WC_SUCCESS) {
    EXPECT(wc.opcode == IBV_WC_BIND_MW);
    mw->rkey = wr.bind_mw.rkey;
  }
  *w = Window{d.va(off), mw->rkey};
  return wc.status;
}

Window bind_type1(Dev& d, ibv_qp* qp, ibv_mw* mw, uint64_t off, int access) {
  ibv_mw_bind b{};
  b.wr_id = 22;
  b.send_flags = IBV_SEND_SIGNALED;
  b.bind_info = range(d, off, access);
  REQUIRE(!ibv_bind_mw(qp, mw, &b));
  expect_done(d, IBV_WC_BIND_MW, "ibv_bind_mw (type 1)");
  return Window{d.va(off), mw->rkey};
}

void local_inv_post(Dev& d, ibv_qp* qp, uint32_t rkey) {
  ibv_send_wr inv{}, *bad = nullptr;
  inv.wr_id = 23;
  inv.opcode = IBV_WR_LOCAL_INV;
  inv.send_flags = IBV_SEND_SIGNALED;
  inv.invalidate_rkey = rkey;
  REQUIRE(!ibv_post_send(qp, &inv, &bad));
  expect_done(d, IBV_WC_LOCAL_INV, "post_send LOCAL_INV");
}

void local_inv_wr(Dev& d, ibv_qp* qp, uint32_t rkey) {
  ibv_qp_ex* x = ibv_qp_to_qp_ex(qp);
  ibv_wr_start(x);
  x->wr_id = 24;
  x->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_local_inv(x, rkey);
  REQUIRE(!ibv_wr_complete(x));
  expect_done(d, IBV_WC_LOCAL_INV, "ibv_wr_local_inv");
}

// Windows up to max_mw, the next refused with the daemon's reason; freed.
void limit(Dev& d, int live) {
  ibv_device_attr attr;
  REQUIRE(!ibv_query_device(d.ctx, &attr));
  const char* want = getenv("MW_LIMIT");
  printf("limit: max_mw %d (%d live)\n", attr.max_mw, live);
  EXPECT(want && attr.max_mw == atoi(want));
  std::vector<ibv_mw*> more;
  for (int i = live; i < attr.max_mw; i++) {
    ibv_mw* w = ibv_alloc_mw(d.pd, i % 2 ? IBV_MW_TYPE_1 : IBV_MW_TYPE_2);
    EXPECT(w);
    if (w) more.push_back(w);
  }
  StderrCapture r;
  errno = 0;
  ibv_mw* over = ibv_alloc_mw(d.pd, IBV_MW_TYPE_2);
  int err = errno;
  std::string why = r.text();
  EXPECT(!over);
  EXPECT(err == ENOMEM);
  EXPECT(why.find("per-client MW limit reached (" + std::string(want ? want : "?") + ")") !=
         std::string::npos);
  for (ibv_mw* w : more) EXPECT(ibv_dealloc_mw(w) == 0);
  ibv_mw* again = ibv_alloc_mw(d.pd, IBV_MW_TYPE_2);  // room again
  EXPECT(again);
  if (again) EXPECT(ibv_dealloc_mw(again) == 0);
}

int server(const char* dev, int port) {
  Dev d;
  open_dev(dev, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND, &d);
  ibv_mw* w = ibv_alloc_mw(d.pd, IBV_MW_TYPE_2);
  ibv_mw* p = ibv_alloc_mw(d.pd, IBV_MW_TYPE_2);
  ibv_mw* t = ibv_alloc_mw(d.pd, IBV_MW_TYPE_1);
  ibv_mw* q = ibv_alloc_mw(d.pd, IBV_MW_TYPE_2);
  ibv_mw* u = ibv_alloc_mw(d.pd, IBV_MW_TYPE_2);
  REQUIRE(w && p && t && q && u);
  SideChannel ch = SideChannel::listen_on(port);
  d.ch = &ch;
  uint8_t* base = d.base();

  printf("session 1: binds by ibv_wr_bind_mw, post_send and ibv_bind_mw; invalidations\n");
  ibv_qp* qp = session(d);
  Window ww = bind_wr(d, qp, w, kWOff), pw{}, qw{};
  EXPECT(bind_post(d, qp, p, kPOff, &pw) == IBV_WC_SUCCESS);
  Window tw = bind_type1(d, qp, t, kTOff, IBV_ACCESS_REMOTE_READ);
  EXPECT(bind_post(d, qp, q, kQOff, &qw) == IBV_WC_SUCCESS);
  fill(base + kPOff, 2048, 7);
  fill(base + kTOff + 1000, 2048, 8);
  ch.send(ww), ch.send(pw), ch.send(tw);
  post_recv(d, qp);
  ch.sync('w');  // the client wrote W, read P and T
  EXPECT(check(base + kWOff + 100, 4096, 1));
  local_inv_wr(d, qp, ww.rkey);
  ch.sync('l');
  ch.sync('i');  // the client sent SEND_WITH_INV for P
  ibv_wc wc = wait_wc(d.cq);
  printf("  receive: %s flags 0x%x invalidated_rkey 0x%x (P 0x%x)\n", st(wc), wc.wc_flags,
         wc.invalidated_rkey, pw.rkey);
  EXPECT(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RECV);
  EXPECT(wc.wc_flags & IBV_WC_WITH_INV);
  EXPECT(wc.invalidated_rkey == pw.rkey);
  ch.sync('x');  // the client's WRITE through P failed
  ibv_destroy_qp(qp);  // Q was bound to it

  printf("session 2: W was invalidated locally\n");
  qp = session(d);
  ch.sync('x');
  ibv_destroy_qp(qp);

  printf("session 3: Q binds to a new QP; T is read-only\n");
  qp = session(d);
  EXPECT(bind_post(d, qp, q, kQOff, &qw) == IBV_WC_SUCCESS);
  ch.send(qw);
  ch.sync('w');
  EXPECT(check(base + kQOff, 2048, 3));
  ch.sync('x');
  ibv_destroy_qp(qp);

  printf("session 4: a WRITE past Q's end\n");
  qp = session(d);
  EXPECT(bind_post(d, qp, q, kQOff, &qw) == IBV_WC_SUCCESS);
  ch.send(qw);
  ch.sync('x');
  ibv_destroy_qp(qp);

  printf("session 5: a type 2 window on a UC QP\n");
  qp = session(d, IBV_QPT_UC);
  Window uw{};
  EXPECT(bind_post(d, qp, u, kUOff, &uw) == IBV_WC_SUCCESS);
  fill(base + kUOff + kWin - 100, 200, 4);  // past U's end: must stay
  for (int i = 0; i < 3; i++) post_recv(d, qp);
  ch.send(uw);
  for (int step = 0; step < 3; step++) {
    if (step == 2) local_inv_post(d, qp, uw.rkey);
    ch.sync('u');  // the client WRITEs, then SENDs: the WRITE was handled
    wc = wait_wc(d.cq);
    printf("  UC receive %d: %s\n", step, st(wc));
    EXPECT(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RECV);
    EXPECT(check(base + kUOff, 2048, 5));  // step 2's WRITE (seed 6) did not land
    EXPECT(check(base + kUOff + kWin - 100, 200, 4));
  }
  ch.sync('e');
  ibv_destroy_qp(qp);

  limit(d, 5);
  for (ibv_mw* m : {w, p, t, q, u}) EXPECT(ibv_dealloc_mw(m) == 0);
  EXPECT(ibv_dereg_mr(d.mr) == 0);
  printf("server: %d failures\n", failures());
  return failures() ? 1 : 0;
}

// ---- client ----
ibv_wc rdma(Dev& d, ibv_qp* qp, ibv_wr_opcode op, const Window& w, uint64_t off, uint32_t len,
            uint64_t local) {
  ibv_sge s = {d.va(local), len, d.mr->lkey};
  ibv_send_wr wr{}, *bad = nullptr;
  wr.wr_id = 10;
  wr.opcode = op;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.sg_list = &s;
  wr.num_sge = 1;
  wr.wr.rdma.remote_addr = w.addr + off;
  wr.wr.rdma.rkey = w.rkey;
  REQUIRE(!ibv_post_send(qp, &wr, &bad));
  ibv_wc wc = wait_wc(d.cq);
  printf("  %s %u bytes at +%lu rkey 0x%x: %s\n", op == IBV_WR_RDMA_READ ? "READ" : "WRITE", len,
         static_cast<unsigned long>(off), w.rkey, st(wc));
  return wc;
}

ibv_wc_status send_plain(Dev& d, ibv_qp* qp) {
  ibv_sge s = {d.va(0), 64, d.mr->lkey};
  ibv_send_wr wr{}, *bad = nullptr;
  wr.wr_id = 12;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.sg_list = &s;
  wr.num_sge = 1;
  REQUIRE(!ibv_post_send(qp, &wr, &bad));
  return wait_wc(d.cq).status;
}

void send_inv_wr(Dev& d, ibv_qp* qp, uint32_t rkey) {
  ibv_qp_ex* x = ibv_qp_to_qp_ex(qp);
  ibv_wr_start(x);
  x->wr_id = 11;
  x->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_send_inv(x, rkey);
  ibv_wr_set_sge(x, d.mr->lkey, d.va(0), 100);
  REQUIRE(!ibv_wr_complete(x));
  ibv_wc wc = wait_wc(d.cq);
  printf("  ibv_wr_send_inv: %s\n", st(wc));
  EXPECT(wc.status == IBV_WC_SUCCESS);
}

void uc_session(Dev& d) {
  SideChannel& ch = *d.ch;
  ibv_qp* qp = session(d, IBV_QPT_UC);
  Window uw = ch.recv<Window>();
  uint8_t* base = d.base();
  fill(base, 2048, 5);
  fill(base + 4096, 2048, 6);
  // 0: inside U; 1: past its end (dropped); 2: after LOCAL_INV (dropped)
  const uint64_t at[3] = {0, kWin - 100, 0};
  const uint32_t len[3] = {2048, 200, 2048};
  const uint64_t from[3] = {0, 4096, 4096};
  for (int step = 0; step < 3; step++) {
    ch.sync('u');
    EXPECT(rdma(d, qp, IBV_WR_RDMA_WRITE, uw, at[step], len[step], from[step]).status ==
           IBV_WC_SUCCESS);  // UC: nothing answers; the server checks
    EXPECT(send_plain(d, qp) == IBV_WC_SUCCESS);
  }
  ibv_sge s = {d.va(0), 8, d.mr->lkey};
  ibv_send_wr wr{}, *bad = nullptr;
  wr.opcode = IBV_WR_SEND_WITH_INV;
  wr.sg_list = &s;
  wr.num_sge = 1;
  wr.invalidate_rkey = uw.rkey;
  EXPECT(ibv_post_send(qp, &wr, &bad) == EINVAL);  // UC has no SEND with invalidate
  ch.sync('e');
  ibv_destroy_qp(qp);
}

int client(const char* dev, int port, const char* host) {
  Dev d;
  open_dev(dev, IBV_ACCESS_LOCAL_WRITE, &d);
  SideChannel ch = SideChannel::connect_to(host, port);
  d.ch = &ch;
  uint8_t* base = d.base();

  ibv_qp* qp = session(d);  // 1
  Window ww = ch.recv<Window>(), pw = ch.recv<Window>(), tw = ch.recv<Window>();
  fill(base, 4096, 1);
  EXPECT(rdma(d, qp, IBV_WR_RDMA_WRITE, ww, 100, 4096, 0).status == IBV_WC_SUCCESS);
  EXPECT(rdma(d, qp, IBV_WR_RDMA_READ, pw, 0, 2048, 20000).status == IBV_WC_SUCCESS);
  EXPECT(check(base + 20000, 2048, 7));
  EXPECT(rdma(d, qp, IBV_WR_RDMA_READ, tw, 1000, 2048, 24000).status == IBV_WC_SUCCESS);
  EXPECT(check(base + 24000, 2048, 8));
  ch.sync('w');
  ch.sync('l');
  send_inv_wr(d, qp, pw.rkey);
  ch.sync('i');
  EXPECT(rdma(d, qp, IBV_WR_RDMA_WRITE, pw, 0, 64, 0).status == IBV_WC_REM_ACCESS_ERR);
  ch.sync('x');
  ibv_destroy_qp(qp);

  qp = session(d);  // 2: W, invalidated by the server's LOCAL_INV
  EXPECT(rdma(d, qp, IBV_WR_RDMA_WRITE, ww, 0, 64, 0).status == IBV_WC_REM_ACCESS_ERR);
  ch.sync('x');
  ibv_destroy_qp(qp);

  qp = session(d);  // 3: Q rebound; T read-only
  Window qw = ch.recv<Window>();
  fill(base, 2048, 3);
  EXPECT(rdma(d, qp, IBV_WR_RDMA_WRITE, qw, 0, 2048, 0).status == IBV_WC_SUCCESS);
  ch.sync('w');
  EXPECT(rdma(d, qp, IBV_WR_RDMA_WRITE, tw, 1000, 64, 0).status == IBV_WC_REM_ACCESS_ERR);
  ch.sync('x');
  ibv_destroy_qp(qp);

  qp = session(d);  // 4: past Q's end, inside the MR
  qw = ch.recv<Window>();
  EXPECT(rdma(d, qp, IBV_WR_RDMA_WRITE, qw, kWin - 100, 200, 0).status == IBV_WC_REM_ACCESS_ERR);
  ch.sync('x');
  ibv_destroy_qp(qp);

  uc_session(d);  // 5
  printf("client: %d failures\n", failures());
  return failures() ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  setenv("METAROCE_DEBUG", "1", 1);  // refusal reasons on stderr (StderrCapture)
  bool port = argc >= 5 && !strcmp(argv[3], "-p");
  if (port && argc == 5 && !strcmp(argv[1], "server")) return server(argv[2], atoi(argv[4]));
  if (port && argc == 6 && !strcmp(argv[1], "client"))
    return client(argv[2], atoi(argv[4]), argv[5]);
  fprintf(stderr, "usage: mw_wr_e2e server DEV -p PORT | mw_wr_e2e client DEV -p PORT SERVER_IP\n");
  return 2;
}
