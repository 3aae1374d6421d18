// mroce_trust: what the daemon may and may not do to a client's memory, end
// to end through the provider (tests/trust/trust_e2e_test.sh). Roles:
//
//   target --port P            registers a buffer and changes it with plain
//   reader PEER --port P       CPU stores; after each store the reader RDMA
//                              READs it (must see the latest), then
//                              FETCH_ADD and CMP_SWAP act on the latest.
//   exec-target --port P --victim PROG
//                              registers an MR at a fixed address, connects
//                              two QPs, then execs PROG (keeping every fd,
//                              the control socket too). PROG is this program
//                              in role `victim` (maybe a setuid copy): it maps
//                              its own memory at that address, fills it, and
//                              reports over TCP whether it changed.
//   attacker PEER --port P [--hold FIFO]
//                              READs and WRITEs that MR after the exec; the
//                              daemon must refuse both (refused()). With
//                              --hold it keeps the target alive until a byte
//                              is written to FIFO.
//   uffd-target --port P       registers an MR, then puts it under a
//                              userfaultfd whose faults are never served;
//                              the daemon must refuse the attacker's READ
//                              and WRITE without stalling.
//   reg-mr                     REG_MR of an unmapped range and of a
//                              read-only mapping with write access: both fail
//                              (EFAULT, EACCES); run with METAROCE_DEBUG=1 the
//                              provider prints the daemon's reasons.
//
// The two sides synchronise over TCP (never by sleeping). Exit status: 0 as
// expected, 1 otherwise (with the reason on stderr), 2 bad command line.
#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <linux/userfaultfd.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

#define DIE(...)                                    \
  do {                                              \
    fprintf(stderr, "mroce_trust: " __VA_ARGS__);   \
    fputc('\n', stderr);                            \
    exit(1);                                        \
  } while (0)

constexpr int kDeadlineS = 60;  // no single completion may take longer
// Where exec-target puts its MR and the victim its own memory: the same
// virtual address in both images.
constexpr uintptr_t kFixedAddr = 0x5e0000000000;
constexpr size_t kLen = 64 * 1024;
constexpr uint8_t kOldByte = 0x0d, kNewByte = 0x4e, kAttackByte = 0xaa;

struct Options {
  std::string role, peer, dev, victim, hold;
  int port = 18800;
  int fd = -1;  // victim: the TCP connection inherited across exec
};

double now_s() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<double>(t.tv_sec) + t.tv_nsec * 1e-9;
}

// ---- TCP side channel ----

void write_all(int fd, const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n) {
    ssize_t w = write(fd, c, n);
    if (w <= 0) DIE("TCP write to the peer failed: %s", w < 0 ? strerror(errno) : "closed");
    c += w;
    n -= static_cast<size_t>(w);
  }
}

void read_all(int fd, void* p, size_t n) {
  char* c = static_cast<char*>(p);
  while (n) {
    ssize_t r = read(fd, c, n);
    if (r <= 0) DIE("TCP read from the peer failed: %s", r < 0 ? strerror(errno) : "peer closed");
    c += r;
    n -= static_cast<size_t>(r);
  }
}

template <class T>
void send_msg(int fd, const T& v) { write_all(fd, &v, sizeof v); }
template <class T>
T recv_msg(int fd) {
  T v{};
  read_all(fd, &v, sizeof v);
  return v;
}

int tcp_connect(const Options& o, bool server) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(o.port));
  int one = 1;
  if (server) {
    int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(l, reinterpret_cast<sockaddr*>(&a), sizeof a) || listen(l, 1))
      DIE("cannot listen on TCP port %d: %s", o.port, strerror(errno));
    int fd = accept4(l, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) DIE("accept: %s", strerror(errno));
    close(l);
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
  }
  if (inet_pton(AF_INET, o.peer.c_str(), &a.sin_addr) != 1) DIE("bad peer address %s", o.peer.c_str());
  for (double t0 = now_s(); now_s() - t0 < kDeadlineS;) {  // the server may still be starting
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      return fd;
    }
    close(fd);
    usleep(50000);  // retry pacing only; the deadline is wall-clock
  }
  DIE("cannot connect to %s:%d within %d s", o.peer.c_str(), o.port, kDeadlineS);
}

// ---- verbs ----

struct PeerInfo {
  uint32_t qpn[2], rkey, mtu;
  uint64_t addr;
  uint8_t gid[16];
};

struct Host {
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  ibv_cq* cq = nullptr;
  ibv_qp* qp[2] = {};
  ibv_mr* mr = nullptr;   // the buffer under test (target) or local scratch
  uint8_t* buf = nullptr;
  size_t len = 0;
  int gid_index = -1;
  ibv_gid gid{};
  ibv_mtu mtu = IBV_MTU_1024;
  PeerInfo peer{};
};

ibv_context* open_dev(const std::string& name) {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (!list || n == 0) DIE("no RDMA devices (is SYSFS_PATH / RDMAV_DRIVERS set?)");
  ibv_context* ctx = nullptr;
  for (int i = 0; i < n && !ctx; i++) {
    if (name.empty() || name == ibv_get_device_name(list[i])) {
      ctx = ibv_open_device(list[i]);
      if (!ctx) DIE("ibv_open_device(%s): %s", ibv_get_device_name(list[i]), strerror(errno));
    }
  }
  ibv_free_device_list(list);
  if (!ctx) DIE("device %s not found", name.c_str());
  return ctx;
}

int roce_v2_ipv4_gid(ibv_context* ctx, ibv_gid* gid) {
  ibv_port_attr pa;
  if (ibv_query_port(ctx, 1, &pa)) DIE("ibv_query_port: %s", strerror(errno));
  static const uint8_t v4[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  for (int i = 0; i < pa.gid_tbl_len; i++) {
    ibv_gid_entry e;
    if (ibv_query_gid_ex(ctx, 1, static_cast<uint32_t>(i), &e, 0)) continue;
    if (e.gid_type == IBV_GID_TYPE_ROCE_V2 && memcmp(e.gid.raw, v4, 12) == 0) {
      *gid = e.gid;
      return i;
    }
  }
  DIE("no RoCE v2 IPv4 GID on the device");
}

// Device, PD, CQ, two RC QPs and an MR over [buf, buf+len).
void setup(Host* h, const Options& o, uint8_t* buf, size_t len) {
  h->ctx = open_dev(o.dev);
  ibv_port_attr pa;
  if (ibv_query_port(h->ctx, 1, &pa)) DIE("ibv_query_port: %s", strerror(errno));
  h->mtu = pa.active_mtu;
  h->gid_index = roce_v2_ipv4_gid(h->ctx, &h->gid);
  if (!(h->pd = ibv_alloc_pd(h->ctx))) DIE("ibv_alloc_pd: %s", strerror(errno));
  if (!(h->cq = ibv_create_cq(h->ctx, 64, nullptr, nullptr, 0))) DIE("ibv_create_cq: %s", strerror(errno));
  for (ibv_qp*& qp : h->qp) {
    ibv_qp_init_attr ia{};
    ia.send_cq = ia.recv_cq = h->cq;
    ia.qp_type = IBV_QPT_RC;
    ia.cap = {16, 16, 1, 1, 0};
    if (!(qp = ibv_create_qp(h->pd, &ia))) DIE("ibv_create_qp: %s", strerror(errno));
  }
  int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
               IBV_ACCESS_REMOTE_ATOMIC;
  h->buf = buf;
  h->len = len;
  if (!(h->mr = ibv_reg_mr(h->pd, buf, len, access))) DIE("ibv_reg_mr: %s", strerror(errno));
}

void connect_qp(Host* h, ibv_qp* qp, uint32_t dest_qpn) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                      IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_LOCAL_WRITE;
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
    DIE("modify_qp INIT: %s", strerror(errno));
  a = {};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = std::min(h->mtu, static_cast<ibv_mtu>(h->peer.mtu));
  a.dest_qp_num = dest_qpn;
  a.rq_psn = dest_qpn * 1000u;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 1;
  a.ah_attr.is_global = 1;
  memcpy(a.ah_attr.grh.dgid.raw, h->peer.gid, 16);
  a.ah_attr.grh.sgid_index = static_cast<uint8_t>(h->gid_index);
  a.ah_attr.grh.hop_limit = 64;
  a.ah_attr.port_num = 1;
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
    DIE("modify_qp RTR: %s", strerror(errno));
  a = {};
  a.qp_state = IBV_QPS_RTS;
  a.sq_psn = qp->qp_num * 1000u;
  // ~1 s per try, 7 retries: a loaded 2-core CI under ASan must not run
  // out of retries; a refused READ (no response) takes ~8 s to fail.
  a.timeout = 18;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.max_rd_atomic = 1;
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC))
    DIE("modify_qp RTS: %s", strerror(errno));
}

// Swap QP numbers, GID, rkey and address; QP i talks to the peer's QP i.
void exchange_and_connect(Host* h, int fd) {
  PeerInfo me{};
  for (int i = 0; i < 2; i++) me.qpn[i] = h->qp[i]->qp_num;
  me.rkey = h->mr->rkey;
  me.mtu = h->mtu;
  me.addr = reinterpret_cast<uintptr_t>(h->buf);
  memcpy(me.gid, h->gid.raw, 16);
  send_msg(fd, me);
  h->peer = recv_msg<PeerInfo>(fd);
  for (int i = 0; i < 2; i++) connect_qp(h, h->qp[i], h->peer.qpn[i]);
  send_msg(fd, uint8_t{1});  // both sides at RTS before anyone posts
  recv_msg<uint8_t>(fd);
}

ibv_wc post_and_wait(Host* h, int qp, ibv_wr_opcode op, uint32_t len, uint64_t roff,
                     uint64_t cmp_add = 0, uint64_t swap = 0) {
  ibv_sge sg{reinterpret_cast<uintptr_t>(h->buf), len, h->mr->lkey};
  ibv_send_wr w{};
  w.wr_id = op;
  w.opcode = op;
  w.sg_list = &sg;
  w.num_sge = 1;
  w.send_flags = IBV_SEND_SIGNALED;
  if (op == IBV_WR_ATOMIC_FETCH_AND_ADD || op == IBV_WR_ATOMIC_CMP_AND_SWP) {
    w.wr.atomic = {h->peer.addr + roff, cmp_add, swap, h->peer.rkey};
  } else {
    w.wr.rdma = {h->peer.addr + roff, h->peer.rkey};
  }
  ibv_send_wr* bad = nullptr;
  if (int err = ibv_post_send(h->qp[qp], &w, &bad)) DIE("ibv_post_send(opcode %d): %s", op, strerror(err));
  ibv_wc wc{};
  for (double t0 = now_s();;) {
    int n = ibv_poll_cq(h->cq, 1, &wc);
    if (n < 0) DIE("ibv_poll_cq failed");
    if (n == 1) return wc;
    if (now_s() - t0 > kDeadlineS) DIE("no completion for opcode %d within %d s", op, kDeadlineS);
  }
}

uint64_t load(const uint8_t* p) {
  uint64_t v;
  memcpy(&v, p, 8);
  return v;
}

// ---- READ freshness: target and reader ----

// Steps of the freshness test; the target performs `store` with a CPU
// store, the reader checks what the operation returns and leaves.
struct Step {
  ibv_wr_opcode op;
  uint64_t store, cmp_add, swap, returns, leaves;
};
const Step kSteps[] = {
    {IBV_WR_RDMA_READ, 1, 0, 0, 1, 1},
    {IBV_WR_RDMA_READ, 2, 0, 0, 2, 2},
    {IBV_WR_RDMA_READ, 3, 0, 0, 3, 3},
    {IBV_WR_RDMA_READ, 100, 0, 0, 100, 100},
    {IBV_WR_ATOMIC_FETCH_AND_ADD, 200, 5, 0, 200, 205},
    {IBV_WR_RDMA_READ, 300, 0, 0, 300, 300},
    {IBV_WR_ATOMIC_CMP_AND_SWP, 400, 400, 7, 400, 7},
    {IBV_WR_RDMA_READ, 500, 0, 0, 500, 500},
};

int run_target(const Options& o) {
  static uint8_t mem[4096] __attribute__((aligned(64)));
  Host h;
  setup(&h, o, mem, sizeof mem);
  int fd = tcp_connect(o, true);
  exchange_and_connect(&h, fd);
  volatile uint64_t* cell = reinterpret_cast<volatile uint64_t*>(mem);
  for (const Step& s : kSteps) {
    *cell = s.store;  // an ordinary CPU store
    send_msg(fd, s.store);
    recv_msg<uint8_t>(fd);  // the reader's operation completed
    uint64_t now = *cell;
    if (now != s.leaves)
      DIE("after opcode %d on %llu my memory holds %llu, expected %llu", s.op,
          (unsigned long long)s.store, (unsigned long long)now, (unsigned long long)s.leaves);
  }
  printf("target: every step left the expected value\n");
  return 0;
}

int run_reader(const Options& o) {
  static uint8_t mem[4096] __attribute__((aligned(64)));
  Host h;
  setup(&h, o, mem, sizeof mem);
  int fd = tcp_connect(o, false);
  exchange_and_connect(&h, fd);
  for (const Step& s : kSteps) {
    uint64_t stored = recv_msg<uint64_t>(fd);
    ibv_wc wc = post_and_wait(&h, 0, s.op, 8, 0, s.cmp_add, s.swap);
    if (wc.status != IBV_WC_SUCCESS) DIE("opcode %d: %s", s.op, ibv_wc_status_str(wc.status));
    uint64_t got = load(mem);
    printf("reader: target stored %llu, opcode %d returned %llu\n", (unsigned long long)stored,
           s.op, (unsigned long long)got);
    if (got != s.returns)
      DIE("opcode %d after the target stored %llu returned %llu, expected %llu (stale)", s.op,
          (unsigned long long)stored, (unsigned long long)got, (unsigned long long)s.returns);
    send_msg(fd, uint8_t{1});
  }
  printf("reader: every READ and atomic saw the latest store\n");
  return 0;
}

// ---- exec: exec-target, victim, attacker ----

uint8_t* map_fixed(uint8_t fill) {
  void* p = mmap(reinterpret_cast<void*>(kFixedAddr), kLen, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  if (p != reinterpret_cast<void*>(kFixedAddr)) DIE("cannot map %#lx: %s", kFixedAddr, strerror(errno));
  memset(p, fill, kLen);
  return static_cast<uint8_t*>(p);
}

// Every fd survives the exec: the control socket stays connected, so the
// daemon keeps this client's context and QPs across it.
void keep_fds_across_exec() {
  DIR* d = opendir("/proc/self/fd");
  if (!d) DIE("opendir /proc/self/fd: %s", strerror(errno));
  while (dirent* e = readdir(d)) {
    int fd = atoi(e->d_name);
    if (fd > 2 && fd != dirfd(d)) fcntl(fd, F_SETFD, 0);
  }
  closedir(d);
}

int run_exec_target(const Options& o) {
  uint8_t* mem = map_fixed(kOldByte);
  Host h;
  setup(&h, o, mem, kLen);
  int fd = tcp_connect(o, true);
  exchange_and_connect(&h, fd);
  keep_fds_across_exec();
  std::string fds = std::to_string(fd);
  printf("exec-target: pid %d uid %d execs %s\n", getpid(), getuid(), o.victim.c_str());
  fflush(stdout);
  execl(o.victim.c_str(), o.victim.c_str(), "victim", "--fd", fds.c_str(), static_cast<char*>(nullptr));
  DIE("exec %s: %s", o.victim.c_str(), strerror(errno));
}

int run_victim(const Options& o) {
  uint8_t* mem = map_fixed(kNewByte);
  printf("victim: pid %d euid %d maps %#lx\n", getpid(), geteuid(), kFixedAddr);
  fflush(stdout);
  send_msg(o.fd, uint8_t{1});  // ready: attack now
  recv_msg<uint8_t>(o.fd);     // the attacker's operations completed
  for (size_t i = 0; i < kLen; i++) {
    if (mem[i] != kNewByte) {
      send_msg(o.fd, int64_t(i));
      DIE("my memory changed at offset %zu: %#x", i, mem[i]);
    }
  }
  send_msg(o.fd, int64_t{-1});
  printf("victim: my memory is untouched\n");
  return 0;
}

// READ on QP 1, then WRITE on QP 0, into the peer's MR; the daemon must
// refuse both (refused()).
// What the daemon answers when it refuses the DMA: for a live client whose
// page faults (userfaultfd), a NAK (remote access or operation error), since
// the engine commits placed data before acknowledging it (hal.h
// §Placement); for a client whose address space is gone (exec'd), no answer
// at all, as for a destroyed QP (hal.h owner_alive), so the requester
// exhausts its retries. Never SUCCESS.
bool refused(const ibv_wc& wc) {
  return wc.status == IBV_WC_REM_OP_ERR || wc.status == IBV_WC_REM_ACCESS_ERR ||
         wc.status == IBV_WC_RETRY_EXC_ERR;
}

bool attack(Host* h) {
  ibv_wc r = post_and_wait(h, 1, IBV_WR_RDMA_READ, 4096, 0);
  if (r.status == IBV_WC_SUCCESS && h->buf[0] == kNewByte)
    printf("attacker: the READ returned the new image's memory\n");
  memset(h->buf, kAttackByte, h->len);  // after the READ, which lands in buf
  ibv_wc w = post_and_wait(h, 0, IBV_WR_RDMA_WRITE, 4096, 0);
  // An acknowledged WRITE may land after its ACK; a READ behind it on the
  // same QP is answered only after it landed (the usual read-after-write
  // flush), so the target checks its memory after the data arrived.
  if (w.status == IBV_WC_SUCCESS) post_and_wait(h, 0, IBV_WR_RDMA_READ, 8, kLen - 8);
  printf("attacker: READ %s, WRITE %s\n", ibv_wc_status_str(r.status), ibv_wc_status_str(w.status));
  if (refused(r) && refused(w)) return true;
  fprintf(stderr, "mroce_trust: expected the daemon to refuse both, got READ %s and WRITE %s\n",
          ibv_wc_status_str(r.status), ibv_wc_status_str(w.status));
  return false;
}

int run_attacker(const Options& o) {
  static uint8_t mem[kLen] __attribute__((aligned(64)));
  Host h;
  setup(&h, o, mem, kLen);
  int fd = tcp_connect(o, false);
  exchange_and_connect(&h, fd);
  recv_msg<uint8_t>(fd);  // the target is ready (exec'd, or under userfaultfd)
  bool ok = attack(&h);
  if (!o.hold.empty()) {  // keep the target alive until the test says so
    printf("attacker: holding until %s is written\n", o.hold.c_str());
    char c;
    int f = open(o.hold.c_str(), O_RDONLY);
    if (f < 0 || read(f, &c, 1) != 1) DIE("hold fifo %s: %s", o.hold.c_str(), strerror(errno));
    close(f);
  }
  send_msg(fd, uint8_t{1});
  int64_t changed = recv_msg<int64_t>(fd);
  if (changed >= 0) DIE("the target's memory changed at offset %lld", (long long)changed);
  if (!ok) return 1;
  printf("attacker: the target reports its memory untouched\n");
  return 0;
}

// ---- userfaultfd ----

int run_uffd_target(const Options& o) {
  uint8_t* mem = map_fixed(kOldByte);
  Host h;
  setup(&h, o, mem, kLen);
  int fd = tcp_connect(o, true);
  exchange_and_connect(&h, fd);
  // After REG_MR: drop the pages and register them with a userfaultfd that
  // handles kernel faults too (root) and that nobody ever reads.
  if (madvise(mem, kLen, MADV_DONTNEED)) DIE("madvise: %s", strerror(errno));
  int uffd = static_cast<int>(syscall(SYS_userfaultfd, O_CLOEXEC));
  if (uffd < 0) DIE("userfaultfd: %s", strerror(errno));
  uffdio_api api{UFFD_API, 0, 0};
  uffdio_register reg{};
  reg.range = {kFixedAddr, kLen};
  reg.mode = UFFDIO_REGISTER_MODE_MISSING;
  if (ioctl(uffd, UFFDIO_API, &api) || ioctl(uffd, UFFDIO_REGISTER, &reg))
    DIE("userfaultfd register: %s", strerror(errno));
  printf("uffd-target: MR under a userfaultfd nobody serves\n");
  fflush(stdout);
  send_msg(fd, uint8_t{1});
  recv_msg<uint8_t>(fd);
  send_msg(fd, int64_t{-1});  // nothing to compare: the pages were never filled
  return 0;
}

// ---- REG_MR checks ----

int run_reg_mr(const Options& o) {
  Host h;
  h.ctx = open_dev(o.dev);
  if (!(h.pd = ibv_alloc_pd(h.ctx))) DIE("ibv_alloc_pd: %s", strerror(errno));
  void* hole = mmap(nullptr, 8192, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  void* ro = mmap(nullptr, 8192, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  munmap(hole, 8192);
  struct Case {
    const char* what;
    void* addr;
    int access, want;
  } cases[] = {
      {"unmapped range", hole, IBV_ACCESS_REMOTE_READ, EFAULT},
      {"read-only mapping with LOCAL_WRITE", ro, IBV_ACCESS_LOCAL_WRITE, EACCES},
      {"read-only mapping with REMOTE_WRITE", ro, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, EACCES},
  };
  for (const Case& c : cases) {
    errno = 0;
    ibv_mr* mr = ibv_reg_mr(h.pd, c.addr, 8192, c.access);
    int err = errno;
    printf("reg-mr %s: %s\n", c.what, mr ? "registered" : strerror(err));
    fflush(stdout);
    if (mr || err != c.want) DIE("%s: expected %s", c.what, strerror(c.want));
  }
  ibv_mr* ok = ibv_reg_mr(h.pd, ro, 8192, IBV_ACCESS_REMOTE_READ);  // read access only: fine
  if (!ok) DIE("read-only mapping with read access refused: %s", strerror(errno));
  printf("reg-mr read-only mapping with read access: registered\n");
  return 0;
}

Options parse(int argc, char** argv) {
  Options o;
  if (argc < 2) exit(2);
  o.role = argv[1];
  int i = 2;
  if ((o.role == "reader" || o.role == "attacker") && i < argc) o.peer = argv[i++];
  for (; i + 1 < argc; i += 2) {
    std::string a = argv[i], v = argv[i + 1];
    if (a == "--port") o.port = atoi(v.c_str());
    else if (a == "--dev") o.dev = v;
    else if (a == "--victim") o.victim = v;
    else if (a == "--fd") o.fd = atoi(v.c_str());
    else if (a == "--hold") o.hold = v;
    else { fprintf(stderr, "mroce_trust: unknown option %s\n", a.c_str()); exit(2); }
  }
  if (i != argc) { fprintf(stderr, "mroce_trust: option %s needs a value\n", argv[i]); exit(2); }
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  Options o = parse(argc, argv);
  if (o.role == "target") return run_target(o);
  if (o.role == "reader") return run_reader(o);
  if (o.role == "exec-target") return run_exec_target(o);
  if (o.role == "victim") return run_victim(o);
  if (o.role == "attacker") return run_attacker(o);
  if (o.role == "uffd-target") return run_uffd_target(o);
  if (o.role == "reg-mr") return run_reg_mr(o);
  fprintf(stderr, "mroce_trust: unknown role %s\n", o.role.c_str());
  return 2;
}
