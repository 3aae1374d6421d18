// hostile_client: a local client that attacks metaroced through its control
// socket and shared rings, for tests/hostile/hostile_client_test.sh. It
// speaks the device ABI directly (no provider), as an attacker would.
//
//   hostile_client truncate SOCK      ftruncate every ring memfd: must be EPERM
//   hostile_client garbage SOCK SEED  random ring contents and indices
//   hostile_client overbound SOCK     receive ring entries beyond max_recv_wr:
//                                     refused and counted, consumer index exact
//   hostile_client channel SOCK       FIFO / file / stream socket channel fds:
//                                     EINVAL with a reason; a blocking socket
//                                     nobody reads: accepted, never blocks
//   hostile_client exhaust SOCK N     two connections take QPs until refused:
//                                     ENOMEM, reason names --uid-max-qp, and
//                                     the refusal comes at N in total
//   hostile_client foreign SOCK       every QP/CQ/PD/MR handle it does not own
//                                     (from LIST_QPS and guesses): refused with
//                                     ENOENT/EINVAL and a reason; counters readable
//   hostile_client fuzz SOCK SECS SEED  random and mutated control messages and
//                                     ring scribbles for SECS seconds
//   hostile_client ptracer SOCK       opening a context does not call
//                                     prctl(PR_SET_PTRACER) (provider check;
//                                     see hostile_client_ptracer.cc)
//
// Exit 0 when every expectation held (printed as "ok ..." lines), 1 with a
// "FAIL ..." line otherwise.
#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "firmware-model/daemon/control_server.h"
#include "firmware-model/uapi/metaroce_abi.h"

namespace {

using metaroce::daemon::recv_message;
using metaroce::daemon::send_message;

int g_failures = 0;
void expect(bool ok, const std::string& what) {
  std::printf("%s %s\n", ok ? "ok" : "FAIL", what.c_str());
  if (!ok) g_failures++;
}

struct Reply {
  int err = -1;  // -1: no reply (connection gone)
  std::string reason;
  std::vector<uint8_t> body;
  std::vector<int> fds;
};

class Conn {
 public:
  explicit Conn(const std::string& path) {
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    std::snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path.c_str());
    fd_ = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (connect(fd_, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) {
      std::perror(("connect " + path).c_str());
      std::exit(1);
    }
  }
  ~Conn() { close(fd_); }
  Conn(const Conn&) = delete;

  Reply raw(uint16_t op, const void* body, size_t len, const int* fds = nullptr, size_t nfds = 0,
            uint16_t version = MROCE_ABI_VERSION) {
    Reply r;
    mroce_msg_hdr hdr{version, op, ++seq_, static_cast<uint32_t>(len), 0};
    std::vector<uint8_t> msg(sizeof(hdr) + len);
    std::memcpy(msg.data(), &hdr, sizeof(hdr));
    if (len) std::memcpy(msg.data() + sizeof(hdr), body, len);
    // send_message frames a header itself; a raw message lets us lie in it.
    iovec iov{msg.data(), msg.size()};
    msghdr mh{};
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 4)] = {};
    if (nfds) {
      mh.msg_control = control;
      mh.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
      cmsghdr* c = CMSG_FIRSTHDR(&mh);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
      std::memcpy(CMSG_DATA(c), fds, sizeof(int) * nfds);
    }
    if (sendmsg(fd_, &mh, MSG_NOSIGNAL) < 0) return r;
    return receive();
  }
  template <class T>
  Reply call(uint16_t op, const T& body, const int* fds = nullptr, size_t nfds = 0) {
    return raw(op, &body, sizeof(body), fds, nfds);
  }
  Reply call(uint16_t op) { return raw(op, nullptr, 0); }
  void open() {
    mroce_open_context_req req{MROCE_ABI_VERSION, 0};
    Reply r = call(MROCE_OP_OPEN_CONTEXT, req);
    if (r.err != 0) {
      std::printf("FAIL open context: %d %s\n", r.err, r.reason.c_str());
      std::exit(1);
    }
    for (int fd : r.fds) close(fd);
  }

 private:
  Reply receive() {
    Reply r;
    std::vector<uint8_t> buf(64 * 1024);
    int fds[4];
    size_t nfds = 0;
    for (;;) {
      ssize_t n = recv_message(fd_, buf.data(), buf.size(), fds, 4, &nfds);
      if (n == -EAGAIN) {
        pollfd p{fd_, POLLIN, 0};
        if (poll(&p, 1, 30'000) != 1) return r;
        continue;
      }
      if (n < static_cast<ssize_t>(sizeof(mroce_msg_hdr) + sizeof(mroce_reply_status))) return r;
      mroce_reply_status st;
      std::memcpy(&st, buf.data() + sizeof(mroce_msg_hdr), sizeof(st));
      st.reason[sizeof(st.reason) - 1] = 0;
      r.err = st.err;
      r.reason = st.reason;
      size_t off = sizeof(mroce_msg_hdr) + sizeof(st);
      r.body.assign(buf.begin() + off, buf.begin() + n);
      r.fds.assign(fds, fds + nfds);
      return r;
    }
  }
  int fd_ = -1;
  uint32_t seq_ = 0;
};

template <class T>
T as(const Reply& r) {
  T v{};
  if (r.body.size() >= sizeof(T)) std::memcpy(&v, r.body.data(), sizeof(T));
  return v;
}

struct Objects {
  uint32_t pdn = 0, cqn = 0, qpn = 0;
  int cq_fd = -1, qp_fd = -1;
  mroce_create_cq_resp cq{};
  mroce_create_qp_resp qp{};
};

bool create_objects(Conn& c, Objects* o, uint32_t depth = 64) {
  Reply r = c.call(MROCE_OP_ALLOC_PD);
  if (r.err) return false;
  o->pdn = as<mroce_alloc_pd_resp>(r).pdn;
  mroce_create_cq_req cr{1, depth, 0};
  r = c.call(MROCE_OP_CREATE_CQ, cr);
  if (r.err || r.fds.size() != 1) return false;
  o->cq = as<mroce_create_cq_resp>(r);
  o->cqn = o->cq.cqn;
  o->cq_fd = r.fds[0];
  mroce_create_qp_req q{};
  q.pdn = o->pdn;
  q.send_cqn = q.recv_cqn = o->cqn;
  q.cap = {depth, depth, 4, 4, 64};
  q.qp_type = 2;
  r = c.call(MROCE_OP_CREATE_QP, q);
  if (r.err || r.fds.size() != 1) return false;
  o->qp = as<mroce_create_qp_resp>(r);
  o->qpn = o->qp.qpn;
  o->qp_fd = r.fds[0];
  return true;
}

int do_truncate(const std::string& sock) {
  Conn c(sock);
  c.open();
  Objects o;
  expect(create_objects(c, &o), "created PD, CQ and QP");
  for (int fd : {o.cq_fd, o.qp_fd}) {
    errno = 0;
    bool shrink = ftruncate(fd, 0) == -1 && errno == EPERM;
    // Unsealed, the daemon's next ring access is a SIGBUS: it polls every
    // QP's ring each loop pass, and a pass runs between two replies.
    bool alive = c.call(MROCE_OP_QUERY_PORT).err == 0 && c.call(MROCE_OP_QUERY_PORT).err == 0;
    expect(alive, "daemon still answers after ftruncate(0) of memfd " + std::to_string(fd));
    errno = 0;
    bool grow = ftruncate(fd, 1 << 24) == -1 && errno == EPERM;
    expect(shrink && grow, "ftruncate of ring memfd " + std::to_string(fd) + " refused (EPERM)");
    if (!alive) return 1;
  }
  return g_failures ? 1 : 0;
}

void scribble(std::mt19937_64& rng, uint8_t* base, size_t bytes) {
  for (size_t i = 0; i + 8 <= bytes; i += 8) {
    uint64_t v = rng();
    std::memcpy(base + i, &v, 8);
  }
}

// Random bytes over both rings (headers included) and random indices,
// many times, each followed by a control call so the daemon has run.
int do_garbage(const std::string& sock, uint64_t seed) {
  std::printf("garbage seed %llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  Conn c(sock);
  c.open();
  Objects o;
  expect(create_objects(c, &o), "created PD, CQ and QP");
  auto* qp = static_cast<uint8_t*>(
      mmap(nullptr, o.qp.ring_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, o.qp_fd, 0));
  auto* cq = static_cast<uint8_t*>(
      mmap(nullptr, o.cq.ring_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, o.cq_fd, 0));
  expect(qp != MAP_FAILED && cq != MAP_FAILED, "mapped rings");
  int alive = 0;
  for (int round = 0; round < 200; round++) {
    scribble(rng, qp, o.qp.ring_bytes);
    scribble(rng, cq, o.cq.ring_bytes);
    if (round % 3 == 0) {  // plausible indices too: within the ring
      auto* sq = reinterpret_cast<mroce_ring_hdr*>(qp);
      sq->producer = static_cast<uint32_t>(rng() % (o.qp.sq_entries + 1));
    }
    mroce_query_counters_req q{0xffffffffu, 0};
    alive += c.call(MROCE_OP_QUERY_COUNTERS, q).err == 0;
  }
  expect(alive == 200, "daemon answered after every one of 200 scribbles");
  return g_failures ? 1 : 0;
}

// Receive entries beyond max_recv_wr: a QP of max_recv_wr 5 has a ring of
// 8 slots. All 8 valid WQEs at once: the daemon takes 5 and refuses 3
// (counted wqe_recv_over_bound, no CQE), so its consumer index (entries
// read minus those the engine holds) reads 3 and the ring holds nothing.
int do_overbound(const std::string& sock) {
  constexpr uint32_t kDepth = 5;
  Conn c(sock);
  c.open();
  Objects o;
  expect(create_objects(c, &o, kDepth), "created PD, CQ and QP of max_recv_wr 5");
  expect(o.qp.cap.max_recv_wr == kDepth && o.qp.rq_entries > kDepth,
         "max_recv_wr 5 returned as 5, ring of " + std::to_string(o.qp.rq_entries) + " slots");
  mroce_modify_qp_req m{};
  m.qpn = o.qpn;
  m.attr.attr_mask = 1 | 8 | 16 | 32;  // IBV_QP_STATE | ACCESS_FLAGS | PKEY_INDEX | PORT
  m.attr.qp_state = 1;                 // IBV_QPS_INIT: receives may be posted
  m.attr.port_num = 1;
  Reply r = c.call(MROCE_OP_MODIFY_QP, m);
  expect(r.err == 0, "QP to INIT: " + std::to_string(r.err) + " " + r.reason);
  auto* map = static_cast<uint8_t*>(
      mmap(nullptr, o.qp.ring_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, o.qp_fd, 0));
  expect(map != MAP_FAILED, "mapped the rings");
  if (map == MAP_FAILED) return 1;
  auto* hdr = reinterpret_cast<mroce_ring_hdr*>(map + o.qp.rq_offset);
  uint8_t* slots = reinterpret_cast<uint8_t*>(hdr + 1);
  for (uint32_t i = 0; i < o.qp.rq_entries; i++) {
    mroce_recv_wqe w{};
    w.wr_id = i;
    std::memcpy(slots + i * hdr->entry_size, &w, sizeof(w));
  }
  __atomic_store_n(&hdr->producer, o.qp.rq_entries, __ATOMIC_RELEASE);
  const uint32_t want = o.qp.rq_entries - kDepth;
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  uint32_t cons = 0;
  while ((cons = __atomic_load_n(&hdr->consumer, __ATOMIC_ACQUIRE)) != want &&
         std::chrono::steady_clock::now() < end) {
    mroce_query_counters_req q{0xffffffffu, 0};
    c.call(MROCE_OP_QUERY_COUNTERS, q);  // a round trip: the daemon's loop has run
  }
  expect(cons == want, "consumer index " + std::to_string(cons) + ", want " +
                           std::to_string(want) + " (entries read minus the 5 held)");
  return g_failures ? 1 : 0;
}

int do_channel(const std::string& sock) {
  Conn c(sock);
  c.open();
  std::string fifo = "/tmp/hostile-fifo-" + std::to_string(getpid());
  std::string file = "/tmp/hostile-file-" + std::to_string(getpid());
  mkfifo(fifo.c_str(), 0600);
  int fifo_fd = ::open(fifo.c_str(), O_RDWR);
  int file_fd = ::open(file.c_str(), O_CREAT | O_RDWR, 0600);
  int st[2], dg[2], p[2];
  socketpair(AF_UNIX, SOCK_STREAM, 0, st);
  socketpair(AF_UNIX, SOCK_DGRAM, 0, dg);
  if (pipe(p) != 0) return 1;
  mroce_create_cq_req req{7, 16, 1};
  struct {
    int fd;
    const char* name;
  } bad[] = {{fifo_fd, "FIFO"}, {p[1], "pipe"}, {file_fd, "regular file"}, {st[0], "stream socket"}};
  for (auto& b : bad) {
    Reply r = c.call(MROCE_OP_CREATE_CQ, req, &b.fd, 1);
    expect(r.err == EINVAL && r.reason.find("completion channel fd must be") == 0,
           std::string(b.name) + " as channel refused: " + std::to_string(r.err) + " " + r.reason);
  }
  int one = 1;
  setsockopt(dg[0], SOL_SOCKET, SO_SNDBUF, &one, sizeof(one));
  Reply r = c.call(MROCE_OP_CREATE_CQ, req, &dg[0], 1);
  expect(r.err == 0, "datagram socket accepted as channel");
  fcntl(dg[0], F_SETFL, fcntl(dg[0], F_GETFL) & ~O_NONBLOCK);  // and made blocking again
  unlink(fifo.c_str());
  unlink(file.c_str());
  return g_failures ? 1 : 0;
}

int do_exhaust(const std::string& sock, uint32_t limit) {
  Conn a(sock), b(sock);
  a.open();
  b.open();
  Objects oa, ob;
  uint32_t made = 0;
  std::string reason;
  for (int i = 0; i < 10'000; i++) {
    Conn& c = (i % 2) ? b : a;
    mroce_create_cq_req cr{1, 4, 0};
    Reply r = c.call(MROCE_OP_ALLOC_PD);
    if (r.err) {
      reason = r.reason;
      break;
    }
    uint32_t pdn = as<mroce_alloc_pd_resp>(r).pdn;
    r = c.call(MROCE_OP_CREATE_CQ, cr);
    if (r.err) {
      reason = r.reason;
      break;
    }
    for (int fd : r.fds) close(fd);
    mroce_create_qp_req q{};
    q.pdn = pdn;
    q.send_cqn = q.recv_cqn = as<mroce_create_cq_resp>(r).cqn;
    q.cap = {4, 4, 1, 1, 0};
    q.qp_type = 2;
    r = c.call(MROCE_OP_CREATE_QP, q);
    for (int fd : r.fds) close(fd);
    if (r.err) {
      expect(r.err == ENOMEM, "refusal is ENOMEM");
      reason = r.reason;
      break;
    }
    made++;
  }
  std::printf("made %u QPs over two connections before: %s\n", made, reason.c_str());
  expect(made == limit, "refused at the per-user limit " + std::to_string(limit));
  expect(reason.find("per-user QP limit " + std::to_string(limit) + " reached for uid") == 0 &&
             reason.find("raise --uid-max-qp") != std::string::npos,
         "reason names the per-user limit and the option");
  if (std::getenv("HOSTILE_HOLD_FILE")) {  // keep them while the victim runs
    std::FILE* f = std::fopen(std::getenv("HOSTILE_HOLD_FILE"), "w");
    if (f) std::fclose(f);
    pause();
  }
  return g_failures ? 1 : 0;
}

int do_foreign(const std::string& sock) {
  Conn c(sock);
  c.open();
  Objects mine;
  expect(create_objects(c, &mine), "created own objects");
  // The victim's QPs appear once its traffic has started: wait for them.
  std::vector<uint32_t> qpns;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (qpns.size() < 2 && std::chrono::steady_clock::now() < deadline) {
    Reply r = c.call(MROCE_OP_LIST_QPS);
    uint32_t n = std::min<uint32_t>(as<uint32_t>(r), 4096);
    qpns.assign(n, 0);
    if (r.body.size() >= 4 + 4 * size_t{n}) std::memcpy(qpns.data(), r.body.data() + 4, 4 * n);
    if (qpns.size() < 2) usleep(20'000);
  }
  int foreign = 0, refused = 0;
  for (uint32_t qpn : qpns) {
    if (qpn == mine.qpn) continue;
    foreign++;
    mroce_modify_qp_req m{};
    m.qpn = qpn;
    m.attr.attr_mask = 1;
    m.attr.qp_state = 6;  // ERR: would kill the victim's QP
    Reply a = c.call(MROCE_OP_MODIFY_QP, m);
    mroce_handle_req h{qpn, 0};
    Reply q = c.call(MROCE_OP_QUERY_QP, h);
    Reply d = c.call(MROCE_OP_DESTROY_QP, h);
    // ENOENT, as for a missing object (EPERM would confirm it exists).
    bool ok = a.err == ENOENT && q.err == ENOENT && d.err == ENOENT && !a.reason.empty() &&
              q.reason.find("in this context") != std::string::npos &&
              d.reason.find("in this context") != std::string::npos;
    refused += ok;
    std::printf("qpn %u: modify %d (%s), query %d (%s), destroy %d (%s)\n", qpn, a.err,
                a.reason.c_str(), q.err, q.reason.c_str(), d.err, d.reason.c_str());
  }
  expect(foreign > 0, "saw other clients' QPs in LIST_QPS (" + std::to_string(foreign) + ")");
  expect(refused == foreign, "every operation on a foreign QP refused with a reason");
  int bad = 0;
  auto refuses = [&](uint16_t op, uint32_t h) {
    mroce_handle_req req{h, 0};
    Reply r = c.call(op, req);
    return r.err == ENOENT && r.reason.find("in this context") != std::string::npos;
  };
  for (uint32_t h = 0; h < 256; h++) {
    if (h != mine.cqn && !refuses(MROCE_OP_DESTROY_CQ, h)) bad++;
    if (h != mine.pdn && !refuses(MROCE_OP_DEALLOC_PD, h)) bad++;
  }
  std::mt19937 rng(1);
  for (int i = 0; i < 2000; i++) {  // lkeys are random: guesses
    if (!refuses(MROCE_OP_DEREG_MR, static_cast<uint32_t>(rng()))) bad++;
  }
  expect(bad == 0, "every guessed CQ/PD/MR handle refused with ENOENT and a reason (" +
                       std::to_string(bad) + " not)");
  mroce_query_counters_req q{0xffffffffu, 0};
  expect(c.call(MROCE_OP_QUERY_COUNTERS, q).err == 0, "device counters are readable");
  return g_failures ? 1 : 0;
}

// Random control messages: random ops and bodies, valid bodies with random
// fields, lying headers, fds attached; plus real CQs/QPs whose rings are
// scribbled. Bounded in time, seeded, prints its seed and counts.
int do_fuzz(const std::string& sock, int secs, uint64_t seed) {
  std::printf("fuzz seed %llu for %d s\n", static_cast<unsigned long long>(seed), secs);
  std::mt19937_64 rng(seed);
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(secs);
  uint64_t sent = 0, errors = 0, reconnects = 0, scribbles = 0;
  while (std::chrono::steady_clock::now() < end) {
    Conn c(sock);
    reconnects++;
    if (rng() % 8) c.open();
    Objects o;
    std::vector<uint8_t*> maps;
    std::vector<size_t> lens;
    if (rng() % 2 && create_objects(c, &o, 1 + rng() % 128)) {
      for (auto [fd, len] : {std::pair{o.qp_fd, o.qp.ring_bytes}, {o.cq_fd, o.cq.ring_bytes}}) {
        void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (p != MAP_FAILED) maps.push_back(static_cast<uint8_t*>(p)), lens.push_back(len);
        close(fd);
      }
    }
    for (int i = 0; i < 200 && std::chrono::steady_clock::now() < end; i++) {
      uint8_t body[512];
      size_t len = rng() % 4 == 0 ? rng() % sizeof(body) : 8 + 8 * (rng() % 16);
      for (auto& b : body) b = static_cast<uint8_t>(rng());
      if (rng() % 3 == 0) {  // a known object's handle, or a mutated field
        uint32_t h = std::vector<uint32_t>{o.pdn, o.cqn, o.qpn}[rng() % 3];
        std::memcpy(body, &h, 4);
      }
      uint16_t op = static_cast<uint16_t>(rng() % 4 ? 1 + rng() % 15 : rng());
      int fd = -1;
      int sv[2];
      if (rng() % 16 == 0 && socketpair(AF_UNIX, SOCK_DGRAM, 0, sv) == 0) {
        fd = sv[0];
        close(sv[1]);
      }
      uint16_t version = rng() % 32 ? MROCE_ABI_VERSION : static_cast<uint16_t>(rng());
      Reply r = c.raw(op, body, len, fd >= 0 ? &fd : nullptr, fd >= 0 ? 1 : 0, version);
      if (fd >= 0) close(fd);
      for (int f : r.fds) {
        void* p = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, f, 0);
        if (p != MAP_FAILED) maps.push_back(static_cast<uint8_t*>(p)), lens.push_back(4096);
        close(f);
      }
      sent++;
      if (r.err == -1) break;  // the daemon closed us (allowed), reconnect
      if (r.err) {
        errors++;
        if (r.reason.empty()) {
          std::printf("FAIL op %u err %d without a reason\n", op, r.err);
          return 1;
        }
      }
      if (!maps.empty() && rng() % 2) {
        size_t k = rng() % maps.size();
        scribble(rng, maps[k], lens[k]);
        scribbles++;
      }
    }
    for (size_t k = 0; k < maps.size(); k++) munmap(maps[k], lens[k]);
  }
  std::printf("fuzz: %llu messages, %llu errors (each with a reason), %llu connections, %llu "
              "ring scribbles\n",
              static_cast<unsigned long long>(sent), static_cast<unsigned long long>(errors),
              static_cast<unsigned long long>(reconnects),
              static_cast<unsigned long long>(scribbles));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  if (argc < 3) {
    std::fprintf(stderr, "usage: hostile_client truncate|garbage|channel|exhaust|foreign|fuzz SOCK ...\n");
    return 2;
  }
  std::string mode = argv[1], sock = argv[2];
  if (mode == "truncate") return do_truncate(sock);
  if (mode == "garbage") return do_garbage(sock, argc > 3 ? std::strtoull(argv[3], nullptr, 0) : 1);
  if (mode == "channel") return do_channel(sock);
  if (mode == "overbound") return do_overbound(sock);
  if (mode == "exhaust") return do_exhaust(sock, argc > 3 ? std::atoi(argv[3]) : 8);
  if (mode == "foreign") return do_foreign(sock);
  if (mode == "fuzz") {
    return do_fuzz(sock, argc > 3 ? std::atoi(argv[3]) : 30,
                   argc > 4 ? std::strtoull(argv[4], nullptr, 0) : 1);
  }
  std::fprintf(stderr, "hostile_client: unknown mode %s\n", mode.c_str());
  return 2;
}
