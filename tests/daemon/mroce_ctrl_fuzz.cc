// mroce_ctrl_fuzz: sends malformed control messages to a running metaroced
// (firmware-model/uapi/metaroce_abi.h) and checks each gets a well-formed
// errno reply or a closed connection, never silence or a dead daemon.
//
//   mroce_ctrl_fuzz SOCKET_PATH [--seed N] [--random N]
//
// Deterministic cases first (short, wrong ABI version, wrong lengths,
// unknown ops, object ops before OPEN_CONTEXT, bad bodies after it,
// oversized messages, too many fds), then N seeded random messages, half of
// them with a valid header around a random body on an opened context.
// Exit status: 0 all answered as required, 1 otherwise (message on stderr).
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "firmware-model/uapi/metaroce_abi.h"

namespace {

std::string g_path;
int g_failures = 0;
int g_errno_replies = 0, g_ok_replies = 0, g_closes = 0;

enum class Want { kError, kErrorOrClose, kAny };

struct Conn {
  int fd = -1;
  bool context = false;
};

int connect_daemon() {
  int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  snprintf(a.sun_path, sizeof(a.sun_path), "%s", g_path.c_str());
  // A wall-clock deadline, not a count of tries: CI machines are slow.
  time_t end = time(nullptr) + 30;
  while (time(nullptr) < end) {
    if (connect(fd, reinterpret_cast<sockaddr *>(&a), sizeof(a)) == 0) return fd;
    usleep(50000);
  }
  fprintf(stderr, "mroce_ctrl_fuzz: DAEMON GONE? cannot connect to %s: %s\n", g_path.c_str(),
          strerror(errno));
  exit(1);
}

// Sends raw bytes (header included) with optional fds.
bool send_raw(int fd, const void *p, size_t n, const int *fds = nullptr, size_t nfds = 0) {
  iovec iov{const_cast<void *>(p), n};
  msghdr m{};
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  std::vector<char> ctl(CMSG_SPACE(sizeof(int) * (nfds ? nfds : 1)));
  if (nfds) {
    m.msg_control = ctl.data();
    m.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
    cmsghdr *c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
    memcpy(CMSG_DATA(c), fds, sizeof(int) * nfds);
  }
  return sendmsg(fd, &m, MSG_NOSIGNAL) == static_cast<ssize_t>(n);
}

// Receives one reply: >0 bytes, 0 closed, -1 timeout. Closes fds received.
ssize_t recv_reply(int fd, std::vector<uint8_t> *buf) {
  pollfd p{fd, POLLIN, 0};
  if (poll(&p, 1, 30000) != 1) return -1;
  buf->resize(1 << 17);
  iovec iov{buf->data(), buf->size()};
  alignas(cmsghdr) char ctl[CMSG_SPACE(sizeof(int) * 16)];
  msghdr m{};
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  m.msg_control = ctl;
  m.msg_controllen = sizeof(ctl);
  ssize_t n = recvmsg(fd, &m, MSG_CMSG_CLOEXEC);
  if (n <= 0) return 0;  // orderly close or ECONNRESET
  for (cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
    if (c->cmsg_type != SCM_RIGHTS) continue;
    size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < k; i++) {
      int f;
      memcpy(&f, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      close(f);
    }
  }
  buf->resize(static_cast<size_t>(n));
  return n;
}

void fail(const std::string &name, const std::string &why) {
  fprintf(stderr, "mroce_ctrl_fuzz: FAIL %s: %s\n", name.c_str(), why.c_str());
  g_failures++;
}

// One exchange; reconnects when the daemon closed the connection. Returns
// the reply's err (or -1 for a close).
int exchange(Conn *c, const std::string &name, const std::vector<uint8_t> &msg, Want want,
             const int *fds = nullptr, size_t nfds = 0) {
  if (c->fd < 0) c->fd = connect_daemon();
  if (!send_raw(c->fd, msg.data(), msg.size(), fds, nfds)) {
    // The kernel refuses what exceeds the socket's buffers: nothing reached
    // the daemon. A reset means the daemon closed us earlier.
    printf("note: %s: not sent (%s)\n", name.c_str(), strerror(errno));
    close(c->fd);
    *c = Conn{};
    return -2;
  }
  std::vector<uint8_t> r;
  ssize_t n = recv_reply(c->fd, &r);
  if (n < 0) {
    fail(name, "no reply within 5 s and the connection is still open");
    close(c->fd);
    *c = Conn{};
    return -1;
  }
  if (n == 0) {
    g_closes++;
    close(c->fd);
    *c = Conn{};
    if (want == Want::kError) fail(name, "connection closed, expected an errno reply");
    c->fd = connect_daemon();  // the daemon must still accept
    return -1;
  }
  mroce_msg_hdr h;
  mroce_reply_status st;
  if (static_cast<size_t>(n) < sizeof(h) + sizeof(st)) {
    fail(name, "reply of " + std::to_string(n) + " bytes is shorter than header + status");
    return -1;
  }
  memcpy(&h, r.data(), sizeof(h));
  memcpy(&st, r.data() + sizeof(h), sizeof(st));
  if (h.abi_version != MROCE_ABI_VERSION || h.length != n - sizeof(h))
    fail(name, "malformed reply header (abi " + std::to_string(h.abi_version) + ", length " +
                   std::to_string(h.length) + " of " + std::to_string(n) + " bytes)");
  if (msg.size() >= sizeof(h)) {
    mroce_msg_hdr q;
    memcpy(&q, msg.data(), sizeof(q));
    if (q.abi_version == MROCE_ABI_VERSION && (h.seq != q.seq || h.op != q.op))
      fail(name, "reply does not echo seq/op");
  }
  if (memchr(st.reason, 0, sizeof(st.reason)) == nullptr) fail(name, "reason not NUL-terminated");
  if (st.err < 0 || st.err > 4095) fail(name, "reply err " + std::to_string(st.err) + " is not an errno");
  if (st.err) {
    g_errno_replies++;
    if (st.reason[0] == 0) fail(name, "error " + std::to_string(st.err) + " without a reason");
  } else {
    g_ok_replies++;
    if (want == Want::kError || want == Want::kErrorOrClose)
      fail(name, "accepted (err 0), expected a refusal");
  }
  return st.err;
}

std::vector<uint8_t> message(uint16_t op, const void *body, size_t len, uint32_t seq,
                             uint16_t abi = MROCE_ABI_VERSION, int64_t length = -1) {
  mroce_msg_hdr h{abi, op, seq, static_cast<uint32_t>(length < 0 ? len : length), 0};
  std::vector<uint8_t> m(sizeof(h) + len);
  memcpy(m.data(), &h, sizeof(h));
  if (len) memcpy(m.data() + sizeof(h), body, len);
  return m;
}

void open_context(Conn *c, const std::string &name) {
  mroce_open_context_req req{MROCE_ABI_VERSION, 0};
  int err = exchange(c, name, message(MROCE_OP_OPEN_CONTEXT, &req, sizeof(req), 1), Want::kAny);
  if (err != 0) fail(name, "a valid OPEN_CONTEXT was refused");
  c->context = err == 0;
}

// Body size each op's request decodes (0: body ignored or none).
size_t body_size(uint16_t op) {
  switch (op) {
    case MROCE_OP_OPEN_CONTEXT: return sizeof(mroce_open_context_req);
    case MROCE_OP_ALLOC_PD: return 0;
    case MROCE_OP_REG_MR: return sizeof(mroce_reg_mr_req);
    case MROCE_OP_CREATE_CQ: return sizeof(mroce_create_cq_req);
    case MROCE_OP_CREATE_QP: return sizeof(mroce_create_qp_req);
    case MROCE_OP_MODIFY_QP: return sizeof(mroce_modify_qp_req);
    case MROCE_OP_QUERY_COUNTERS: return sizeof(mroce_query_counters_req);
    case MROCE_OP_DEALLOC_PD:
    case MROCE_OP_DEREG_MR:
    case MROCE_OP_DESTROY_CQ:
    case MROCE_OP_DESTROY_QP:
    case MROCE_OP_QUERY_QP: return sizeof(mroce_handle_req);
    default: return 0;
  }
}

void deterministic() {
  Conn c;
  uint32_t seq = 100;
  std::vector<uint8_t> zeros(4096, 0);
  // Short messages: nothing, then 1..15 bytes of a header.
  exchange(&c, "empty message", {}, Want::kAny);
  for (size_t n = 1; n < sizeof(mroce_msg_hdr); n++) {
    std::vector<uint8_t> m = message(MROCE_OP_QUERY_DEVICE, nullptr, 0, seq++);
    m.resize(n);
    exchange(&c, "short message of " + std::to_string(n) + " bytes", m, Want::kError);
  }
  // Wrong ABI versions.
  for (uint16_t abi : {0, 2, 7, 0xffff})
    exchange(&c, "abi_version " + std::to_string(abi),
             message(MROCE_OP_QUERY_DEVICE, nullptr, 0, seq++, abi), Want::kError);
  // Header length disagreeing with the body.
  for (int64_t len : {int64_t{1}, int64_t{7}, int64_t{8}, int64_t{9}, int64_t{100}, int64_t{65535},
                      int64_t{0x7fffffff}, int64_t{0xffffffff}}) {
    if (len == 8) continue;
    exchange(&c, "length field " + std::to_string(len) + " for an 8-byte body",
             message(MROCE_OP_QUERY_COUNTERS, zeros.data(), 8, seq++, MROCE_ABI_VERSION, len),
             Want::kError);
  }
  // Object operations (and unknown ones) before OPEN_CONTEXT.
  for (uint16_t op = MROCE_OP_ALLOC_PD; op <= MROCE_OP_DESTROY_QP; op++)
    exchange(&c, "op " + std::to_string(op) + " before OPEN_CONTEXT",
             message(op, zeros.data(), body_size(op), seq++), Want::kError);
  for (uint16_t op : {0, 16, 99, 0xffff})
    exchange(&c, "unknown op " + std::to_string(op) + " before OPEN_CONTEXT",
             message(op, nullptr, 0, seq++), Want::kError);
  // OPEN_CONTEXT with a bad body or a wrong client ABI.
  mroce_open_context_req bad_abi{MROCE_ABI_VERSION + 1, 0};
  exchange(&c, "OPEN_CONTEXT client_abi 2",
           message(MROCE_OP_OPEN_CONTEXT, &bad_abi, sizeof(bad_abi), seq++), Want::kError);
  for (size_t n : {0, 4, 9})
    exchange(&c, "OPEN_CONTEXT body of " + std::to_string(n) + " bytes",
             message(MROCE_OP_OPEN_CONTEXT, zeros.data(), n, seq++), Want::kError);
  // On an opened context: unknown ops, wrong body sizes for every op that
  // decodes one, and well-sized bodies naming objects that do not exist.
  open_context(&c, "OPEN_CONTEXT");
  exchange(&c, "second OPEN_CONTEXT", message(MROCE_OP_OPEN_CONTEXT, &bad_abi, 8, seq++),
           Want::kErrorOrClose);
  for (uint16_t op : {0, 16, 17, 200, 0x7fff, 0xffff})
    exchange(&c, "unknown op " + std::to_string(op), message(op, nullptr, 0, seq++), Want::kError);
  for (uint16_t op = MROCE_OP_DEALLOC_PD; op <= MROCE_OP_QUERY_COUNTERS; op++) {
    size_t want = body_size(op);
    if (want == 0) continue;
    for (size_t n : {size_t{0}, want - 1, want + 1, size_t{4000}})
      exchange(&c, "op " + std::to_string(op) + " with a " + std::to_string(n) + "-byte body",
               message(op, zeros.data(), n, seq++), Want::kError);
  }
  mroce_handle_req h{0xdeadbeef, 0};
  for (uint16_t op : {MROCE_OP_DEALLOC_PD, MROCE_OP_DEREG_MR, MROCE_OP_DESTROY_CQ,
                      MROCE_OP_DESTROY_QP, MROCE_OP_QUERY_QP})
    exchange(&c, "op " + std::to_string(op) + " on handle 0xdeadbeef",
             message(op, &h, sizeof(h), seq++), Want::kError);
  mroce_modify_qp_req mq{};
  mq.qpn = 0xdeadbe;
  mq.attr.attr_mask = 1;
  exchange(&c, "MODIFY_QP of an unknown QP", message(MROCE_OP_MODIFY_QP, &mq, sizeof(mq), seq++),
           Want::kError);
  mroce_reg_mr_req mr{0x1000, 1ull << 40, 0xdeadbeef, 7};
  exchange(&c, "REG_MR on an unknown PD", message(MROCE_OP_REG_MR, &mr, sizeof(mr), seq++),
           Want::kError);
  mroce_create_qp_req qp{};
  qp.pdn = qp.send_cqn = qp.recv_cqn = 0xdeadbeef;
  qp.cap = {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff};
  qp.qp_type = 2;
  exchange(&c, "CREATE_QP on unknown PD/CQ, huge caps",
           message(MROCE_OP_CREATE_QP, &qp, sizeof(qp), seq++), Want::kError);
  mroce_create_cq_req cq{0, 0xffffffff, 0};
  exchange(&c, "CREATE_CQ of 2^32-1 entries", message(MROCE_OP_CREATE_CQ, &cq, sizeof(cq), seq++),
           Want::kError);
  cq = {0, 16, 1};
  exchange(&c, "CREATE_CQ has_channel without an fd",
           message(MROCE_OP_CREATE_CQ, &cq, sizeof(cq), seq++), Want::kError);
  // Too many fds: more than any request carries (the daemon closes extras).
  int fds[12];
  for (int &f : fds) f = eventfd(0, EFD_CLOEXEC);
  exchange(&c, "QUERY_DEVICE with 12 fds", message(MROCE_OP_QUERY_DEVICE, nullptr, 0, seq++),
           Want::kAny, fds, 12);
  exchange(&c, "unknown op with 3 fds", message(77, nullptr, 0, seq++), Want::kError, fds, 3);
  exchange(&c, "DESTROY_CQ 0xdeadbeef with 1 fd", message(MROCE_OP_DESTROY_CQ, &h, sizeof(h), seq++),
           Want::kError, fds, 1);
  for (int f : fds) close(f);
  // Oversized: past the daemon's 64 KiB message limit (refused by closing).
  std::vector<uint8_t> big(70000, 0xa5);
  exchange(&c, "70000-byte message", message(MROCE_OP_QUERY_DEVICE, big.data(), big.size(), seq++),
           Want::kErrorOrClose);
  std::vector<uint8_t> huge(150000, 0x5a);
  exchange(&c, "150000-byte message", message(MROCE_OP_REG_MR, huge.data(), huge.size(), seq++),
           Want::kErrorOrClose);
  if (c.fd >= 0) close(c.fd);
}

void random_messages(uint64_t seed, int count) {
  std::mt19937_64 rng(seed);
  Conn raw, ctx;
  for (int i = 0; i < count; i++) {
    std::string name = "random message " + std::to_string(i) + " (seed " + std::to_string(seed) + ")";
    size_t len = rng() % 320;
    std::vector<uint8_t> body(len);
    for (auto &b : body) b = static_cast<uint8_t>(rng());
    switch (rng() % 4) {
      case 0:  // bytes, header and all
        exchange(&raw, name, body, Want::kAny);
        break;
      case 1: {  // a valid header around a random body, no context
        uint16_t op = static_cast<uint16_t>(rng() % 18);
        exchange(&raw, name, message(op, body.data(), len, static_cast<uint32_t>(rng())), Want::kAny);
        break;
      }
      default: {  // on an opened context; bodies sometimes of the right size
        if (ctx.fd < 0 || !ctx.context) open_context(&ctx, name + " (reopen)");
        uint16_t op = static_cast<uint16_t>(1 + rng() % 16);
        if (op == MROCE_OP_OPEN_CONTEXT) op = MROCE_OP_QUERY_PORT;
        if (rng() % 2) body.resize(body_size(op));
        int fd = -1;
        if (rng() % 8 == 0) fd = eventfd(0, EFD_CLOEXEC);
        exchange(&ctx, name, message(op, body.data(), body.size(), static_cast<uint32_t>(rng())),
                 Want::kAny, fd >= 0 ? &fd : nullptr, fd >= 0 ? 1 : 0);
        if (fd >= 0) close(fd);
        break;
      }
    }
    if (g_failures > 20) break;
  }
  if (raw.fd >= 0) close(raw.fd);
  if (ctx.fd >= 0) close(ctx.fd);
}

}  // namespace

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: mroce_ctrl_fuzz SOCKET_PATH [--seed N] [--random N]\n");
    return 2;
  }
  g_path = argv[1];
  uint64_t seed = 1;
  int count = 3000;
  for (int i = 2; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--seed")) seed = strtoull(argv[i + 1], nullptr, 0);
    else if (!strcmp(argv[i], "--random")) count = atoi(argv[i + 1]);
  }
  deterministic();
  printf("deterministic cases: %d errno replies, %d accepted, %d closed connections, %d failures\n",
         g_errno_replies, g_ok_replies, g_closes, g_failures);
  int e = g_errno_replies, k = g_ok_replies, cl = g_closes;
  random_messages(seed, count);
  printf("%d random messages (seed %llu): %d errno replies, %d accepted, %d closed connections\n",
         count, static_cast<unsigned long long>(seed), g_errno_replies - e, g_ok_replies - k,
         g_closes - cl);
  if (g_failures) {
    fprintf(stderr, "mroce_ctrl_fuzz: %d failures\n", g_failures);
    return 1;
  }
  printf("every malformed message got an errno reply or a closed connection\n");
  return 0;
}
