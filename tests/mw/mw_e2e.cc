// End-to-end memory windows between two hosts (run by tests/mw/mw_e2e_test.sh,
// the server in one namespace, the client in the other):
//   mw_e2e server DEV -p PORT         owns the memory and its windows
//   mw_e2e client DEV -p PORT SERVER  accesses the server's memory through them
// (the argument order of tests/lib/verbs.sh's pair, as for ibv_rc_pingpong)
// The two exchange QP numbers, GIDs, addresses and rkeys over TCP. Each
// session is a fresh RC QP pair (a remote access error moves both QPs to
// ERR), in order:
//   1. type 1 (ibv_bind_mw) and type 2 (IBV_WR_BIND_MW) windows: the client
//      WRITEs and READs through both, data verified on both sides; the MR
//      with bound windows refuses ibv_dereg_mr (EBUSY); the client's
//      SEND_WITH_INV frees the type 2 window (IBV_WC_WITH_INV with the
//      rkey at the server), after which a WRITE through it fails
//      IBV_WC_REM_ACCESS_ERR.
//   2. a read-only type 2 window: a WRITE through it fails REM_ACCESS_ERR.
//   3. a READ beyond the type 1 window's end (inside the MR) fails.
//   4. LOCAL_INV at the server: a READ that worked before it fails after it.
//   5. a bind beyond the MR completes IBV_WC_MW_BIND_ERR at the server; the
//      type 1 window unbound, the MR deregisters.
// The test script checks the servers' counters name each refusal.
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <string>
#include <vector>

#include "tests/lib/verbs_setup.h"

namespace {

using mroce_test::failures;
using mroce_test::SideChannel;

constexpr size_t kBuf = 1 << 16;
constexpr uint64_t kT1Off = 4096, kT2Off = 16384, kWin = 8192;

// ---- verbs ----
struct Dev {
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  ibv_cq* cq = nullptr;
  mroce_test::LocalPath path;
  std::vector<uint8_t> buf = std::vector<uint8_t>(kBuf);
  ibv_mr* mr = nullptr;  // the server's carries IBV_ACCESS_MW_BIND
};

void open_dev(const char* name, int mr_access, Dev* d) {
  REQUIRE((d->ctx = mroce_test::open_device(name)));
  REQUIRE((d->pd = ibv_alloc_pd(d->ctx)));
  REQUIRE((d->cq = mroce_test::create_cq(d->ctx, 256)));
  REQUIRE(mroce_test::local_path(d->ctx, &d->path) == 0);
  REQUIRE((d->mr = mroce_test::reg_mr(d->pd, d->buf.data(), kBuf, mr_access)));
}

// A new connected QP pair: each side sends its QP, then connects to the peer's.
ibv_qp* session(Dev& d, SideChannel& ch) {
  ibv_qp* qp = mroce_test::create_qp(d.pd, d.cq, IBV_QPT_RC, {16, 16, 1, 1, 0});
  REQUIRE(qp);
  mroce_test::RcOptions o;  // no remote atomics
  o.access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  o.min_rnr_timer = 1;
  REQUIRE(mroce_test::exchange_and_connect(ch, qp, d.path, o) == 0);
  return qp;
}

ibv_wc wait_wc(ibv_cq* cq) {
  ibv_wc wc{};
  REQUIRE(mroce_test::poll_one(cq, &wc, 60));
  return wc;
}

const char* st(const ibv_wc& wc) { return ibv_wc_status_str(wc.status); }

// ---- server ----
uint32_t bind_type2(Dev& d, ibv_qp* qp, ibv_mw* mw, uint64_t off, uint64_t len, int access,
                    ibv_wc_status want) {
  ibv_send_wr wr{}, *bad = nullptr;
  wr.wr_id = 2;
  wr.opcode = IBV_WR_BIND_MW;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.bind_mw.mw = mw;
  wr.bind_mw.rkey = ibv_inc_rkey(mw->rkey);
  wr.bind_mw.bind_info.mr = d.mr;
  wr.bind_mw.bind_info.addr = reinterpret_cast<uintptr_t>(d.buf.data()) + off;
  wr.bind_mw.bind_info.length = len;
  wr.bind_mw.bind_info.mw_access_flags = static_cast<unsigned>(access);
  REQUIRE(!ibv_post_send(qp, &wr, &bad));
  ibv_wc wc = wait_wc(d.cq);
  printf("  type 2 bind: %s\n", st(wc));
  EXPECT(wc.status == want);
  if (want == IBV_WC_SUCCESS) EXPECT(wc.opcode == IBV_WC_BIND_MW);
  if (wc.status == IBV_WC_SUCCESS) mw->rkey = wr.bind_mw.rkey;
  return mw->rkey;
}

void bind_type1(Dev& d, ibv_qp* qp, ibv_mw* mw, uint64_t off, uint64_t len, int access) {
  ibv_mw_bind b{};
  b.wr_id = 1;
  b.send_flags = IBV_SEND_SIGNALED;
  b.bind_info.mr = len ? d.mr : nullptr;
  b.bind_info.addr = len ? reinterpret_cast<uintptr_t>(d.buf.data()) + off : 0;
  b.bind_info.length = len;
  b.bind_info.mw_access_flags = static_cast<unsigned>(access);
  uint32_t before = mw->rkey;
  REQUIRE(!ibv_bind_mw(qp, mw, &b));
  EXPECT(mw->rkey != before);  // the key part changed
  ibv_wc wc = wait_wc(d.cq);
  printf("  type 1 bind: %s\n", st(wc));
  EXPECT(wc.status == IBV_WC_SUCCESS);
  EXPECT(wc.opcode == IBV_WC_BIND_MW);
}

struct Window {
  uint64_t addr;
  uint32_t rkey;
};

void post_recv(Dev& d, ibv_qp* qp) {
  ibv_sge s = {reinterpret_cast<uintptr_t>(d.buf.data()) + 40000, 4096, d.mr->lkey};
  ibv_recv_wr r{}, *bad = nullptr;
  r.wr_id = 3;
  r.sg_list = &s;
  r.num_sge = 1;
  REQUIRE(!ibv_post_recv(qp, &r, &bad));
}

void fill(uint8_t* p, size_t n, uint8_t seed) {
  for (size_t i = 0; i < n; i++) p[i] = static_cast<uint8_t>(seed + i * 13 + (i >> 7));
}
bool check(const uint8_t* p, size_t n, uint8_t seed) {
  for (size_t i = 0; i < n; i++)
    if (p[i] != static_cast<uint8_t>(seed + i * 13 + (i >> 7))) return false;
  return true;
}

int server(const char* dev, int port) {
  Dev d;
  open_dev(dev, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND, &d);
  ibv_device_attr attr;
  REQUIRE(!ibv_query_device(d.ctx, &attr));
  printf("max_mw %d, MEM_WINDOW %d, TYPE_2B %d\n", attr.max_mw,
         !!(attr.device_cap_flags & IBV_DEVICE_MEM_WINDOW),
         !!(attr.device_cap_flags & IBV_DEVICE_MEM_WINDOW_TYPE_2B));
  EXPECT(attr.max_mw > 0);
  EXPECT(attr.device_cap_flags & IBV_DEVICE_MEM_WINDOW);
  EXPECT(attr.device_cap_flags & IBV_DEVICE_MEM_WINDOW_TYPE_2B);
  ibv_mw* t1 = ibv_alloc_mw(d.pd, IBV_MW_TYPE_1);
  ibv_mw* t2 = ibv_alloc_mw(d.pd, IBV_MW_TYPE_2);
  REQUIRE(t1 && t2);
  SideChannel ch = SideChannel::listen_on(port);
  uint8_t* base = d.buf.data();
  uint64_t va = reinterpret_cast<uintptr_t>(base);
  constexpr int kRw = IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;

  printf("session 1: WRITE/READ through type 1 and type 2 windows, SEND_WITH_INV\n");
  ibv_qp* qp = session(d, ch);
  bind_type1(d, qp, t1, kT1Off, kWin, kRw);
  bind_type2(d, qp, t2, kT2Off, kWin, kRw, IBV_WC_SUCCESS);
  fill(base + kT1Off + kWin - 2048, 2048, 7);  // the client READs these
  fill(base + kT2Off, 2048, 9);
  ch.send(Window{va + kT1Off, t1->rkey});
  ch.send(Window{va + kT2Off, t2->rkey});
  post_recv(d, qp);
  ch.sync('w');  // the client wrote and read
  EXPECT(check(base + kT1Off, 4096, 1));
  EXPECT(check(base + kT2Off + 4096, 4096, 2));
  errno = 0;
  EXPECT(ibv_dereg_mr(d.mr) == EBUSY);  // windows are bound to it
  ch.sync('i');  // the client sent SEND_WITH_INV
  ibv_wc wc = wait_wc(d.cq);
  printf("  receive: %s flags 0x%x invalidated_rkey 0x%x (window 0x%x)\n", st(wc), wc.wc_flags,
         wc.invalidated_rkey, t2->rkey);
  EXPECT(wc.status == IBV_WC_SUCCESS);
  EXPECT(wc.opcode == IBV_WC_RECV);
  EXPECT(wc.wc_flags & IBV_WC_WITH_INV);
  EXPECT(wc.invalidated_rkey == t2->rkey);
  ch.sync('x');  // the client's WRITE through the invalidated window failed
  ibv_destroy_qp(qp);

  printf("session 2: a read-only type 2 window refuses a WRITE\n");
  qp = session(d, ch);
  ibv_mw* ro = ibv_alloc_mw(d.pd, IBV_MW_TYPE_2);
  REQUIRE(ro);
  bind_type2(d, qp, ro, kT2Off, kWin, IBV_ACCESS_REMOTE_READ, IBV_WC_SUCCESS);
  ch.send(Window{va + kT2Off, ro->rkey});
  ch.sync('x');
  ibv_destroy_qp(qp);

  printf("session 3: a READ beyond the type 1 window\n");
  qp = session(d, ch);
  ch.send(Window{va + kT1Off, t1->rkey});
  ch.sync('x');
  ibv_destroy_qp(qp);

  printf("session 4: LOCAL_INV\n");
  qp = session(d, ch);
  ibv_mw* li = ibv_alloc_mw(d.pd, IBV_MW_TYPE_2);
  REQUIRE(li);
  uint32_t rkey = bind_type2(d, qp, li, kT2Off, kWin, kRw, IBV_WC_SUCCESS);
  ch.send(Window{va + kT2Off, rkey});
  ch.sync('r');  // the client READ through it
  ibv_send_wr inv{}, *bad = nullptr;
  inv.wr_id = 4;
  inv.opcode = IBV_WR_LOCAL_INV;
  inv.send_flags = IBV_SEND_SIGNALED;
  inv.invalidate_rkey = rkey;
  REQUIRE(!ibv_post_send(qp, &inv, &bad));
  wc = wait_wc(d.cq);
  printf("  LOCAL_INV: %s\n", st(wc));
  EXPECT(wc.status == IBV_WC_SUCCESS);
  EXPECT(wc.opcode == IBV_WC_LOCAL_INV);
  ch.sync('l');
  ch.sync('x');
  ibv_destroy_qp(qp);

  printf("session 5: a bind beyond the MR, then unbind and deregister\n");
  qp = session(d, ch);
  ibv_mw* big = ibv_alloc_mw(d.pd, IBV_MW_TYPE_2);
  REQUIRE(big);
  bind_type2(d, qp, big, kT2Off, kBuf * 16, kRw, IBV_WC_MW_BIND_ERR);
  ibv_destroy_qp(qp);
  qp = session(d, ch);
  bind_type1(d, qp, t1, 0, 0, 0);  // zero length: unbind
  for (ibv_mw* w : {t1, t2, ro, li, big}) EXPECT(ibv_dealloc_mw(w) == 0);
  EXPECT(ibv_dereg_mr(d.mr) == 0);
  ch.sync('e');
  ibv_destroy_qp(qp);
  printf("server: %d failures\n", failures());
  return failures() ? 1 : 0;
}

// ---- client ----
ibv_wc rdma(Dev& d, ibv_qp* qp, ibv_wr_opcode op, const Window& w, uint64_t off, uint32_t len,
            uint64_t local) {
  ibv_sge s = {reinterpret_cast<uintptr_t>(d.buf.data()) + local, len, d.mr->lkey};
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

int client(const char* dev, int port, const char* host) {
  Dev d;
  open_dev(dev, IBV_ACCESS_LOCAL_WRITE, &d);
  SideChannel ch = SideChannel::connect_to(host, port);
  uint8_t* base = d.buf.data();

  ibv_qp* qp = session(d, ch);
  Window w1 = ch.recv<Window>(), w2 = ch.recv<Window>();
  fill(base, 4096, 1);
  fill(base + 4096, 4096, 2);
  EXPECT(rdma(d, qp, IBV_WR_RDMA_WRITE, w1, 0, 4096, 0).status == IBV_WC_SUCCESS);
  EXPECT(rdma(d, qp, IBV_WR_RDMA_WRITE, w2, 4096, 4096, 4096).status == IBV_WC_SUCCESS);
  EXPECT(rdma(d, qp, IBV_WR_RDMA_READ, w1, kWin - 2048, 2048, 20000).status == IBV_WC_SUCCESS);
  EXPECT(rdma(d, qp, IBV_WR_RDMA_READ, w2, 0, 2048, 24000).status == IBV_WC_SUCCESS);
  EXPECT(check(base + 20000, 2048, 7));
  EXPECT(check(base + 24000, 2048, 9));
  ch.sync('w');
  ch.sync('i');
  ibv_sge s = {reinterpret_cast<uintptr_t>(base), 100, d.mr->lkey};
  ibv_send_wr wr{}, *bad = nullptr;
  wr.wr_id = 11;
  wr.opcode = IBV_WR_SEND_WITH_INV;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.sg_list = &s;
  wr.num_sge = 1;
  wr.invalidate_rkey = w2.rkey;
  REQUIRE(!ibv_post_send(qp, &wr, &bad));
  ibv_wc wc = wait_wc(d.cq);
  printf("  SEND_WITH_INV: %s\n", st(wc));
  EXPECT(wc.status == IBV_WC_SUCCESS);
  EXPECT(rdma(d, qp, IBV_WR_RDMA_WRITE, w2, 0, 64, 0).status == IBV_WC_REM_ACCESS_ERR);
  ch.sync('x');
  ibv_destroy_qp(qp);

  qp = session(d, ch);  // 2: read-only window
  Window ro = ch.recv<Window>();
  EXPECT(rdma(d, qp, IBV_WR_RDMA_WRITE, ro, 0, 64, 0).status == IBV_WC_REM_ACCESS_ERR);
  ch.sync('x');
  ibv_destroy_qp(qp);

  qp = session(d, ch);  // 3: beyond the type 1 window, inside its MR
  w1 = ch.recv<Window>();
  EXPECT(rdma(d, qp, IBV_WR_RDMA_READ, w1, kWin - 100, 200, 20000).status ==
         IBV_WC_REM_ACCESS_ERR);
  ch.sync('x');
  ibv_destroy_qp(qp);

  qp = session(d, ch);  // 4: LOCAL_INV
  Window li = ch.recv<Window>();
  EXPECT(rdma(d, qp, IBV_WR_RDMA_READ, li, 0, 64, 20000).status == IBV_WC_SUCCESS);
  ch.sync('r');
  ch.sync('l');
  EXPECT(rdma(d, qp, IBV_WR_RDMA_READ, li, 0, 64, 20000).status == IBV_WC_REM_ACCESS_ERR);
  ch.sync('x');
  ibv_destroy_qp(qp);

  qp = session(d, ch);  // 5: the server's bind fails; nothing to do here
  ibv_destroy_qp(qp);
  qp = session(d, ch);
  ch.sync('e');
  ibv_destroy_qp(qp);
  printf("client: %d failures\n", failures());
  return failures() ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  bool port = argc >= 5 && !strcmp(argv[3], "-p");
  if (port && argc == 5 && !strcmp(argv[1], "server")) return server(argv[2], atoi(argv[4]));
  if (port && argc == 6 && !strcmp(argv[1], "client"))
    return client(argv[2], atoi(argv[4]), argv[5]);
  fprintf(stderr, "usage: mw_e2e server DEV -p PORT | mw_e2e client DEV -p PORT SERVER_IP\n");
  return 2;
}
