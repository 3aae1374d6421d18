#include "tools/ctl/client.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "firmware-model/uapi/metaroce_abi.h"

namespace metaroce::ctl {

namespace {

constexpr size_t kMaxMessage = 64 * 1024;  // the daemon's limit, docs/device-abi.md
constexpr size_t kMaxFds = 4;

constexpr const char* kOpNames[] = {
    nullptr,       "OPEN_CONTEXT", "QUERY_DEVICE", "QUERY_PORT", "ALLOC_PD",
    "DEALLOC_PD",  "REG_MR",       "DEREG_MR",     "CREATE_CQ",  "DESTROY_CQ",
    "CREATE_QP",   "MODIFY_QP",    "QUERY_QP",     "DESTROY_QP", "QUERY_COUNTERS",
    "LIST_QPS",    "QUERY_QP_TRANSPORT",
};

// The fds a reply carried: into *out when given, else closed.
void take_fds(msghdr* msg, std::vector<int>* out) {
  for (cmsghdr* c = CMSG_FIRSTHDR(msg); c; c = CMSG_NXTHDR(msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < k; i++) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      if (out) {
        out->push_back(fd);
      } else {
        ::close(fd);
      }
    }
  }
}

}  // namespace

std::string op_name(uint16_t op) {
  if (op < std::size(kOpNames) && kOpNames[op]) return kOpNames[op];
  return "op " + std::to_string(op);
}

ControlClient::~ControlClient() {
  if (fd_ >= 0) ::close(fd_);
  if (async_fd_ >= 0) ::close(async_fd_);
}

int ControlClient::connect(const std::string& path, const std::string& dev, std::string* why) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) {
    *why = "socket path too long: " + path;
    return ENAMETOOLONG;
  }
  std::strcpy(addr.sun_path, path.c_str());
  fd_ = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd_ < 0) {
    *why = std::string("socket: ") + std::strerror(errno);
    return errno;
  }
  if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) return 0;
  int err = errno;
  ::close(fd_);
  fd_ = -1;
  if (err == ECONNREFUSED || err == ENOENT) {
    *why = "metaroced for " + dev + " is not running (no one listens on " + path + ")";
  } else {
    *why = "cannot connect to " + path + ": " + std::strerror(err);
  }
  return err;
}

int ControlClient::call(uint16_t op, const void* req, size_t len, std::vector<uint8_t>* body,
                        std::string* why, std::vector<int>* fds) {
  const std::string what = op_name(op);
  if (fd_ < 0) {
    *why = what + ": not connected";
    return ENOTCONN;
  }
  uint32_t seq = ++seq_;
  mroce_msg_hdr hdr{MROCE_ABI_VERSION, op, seq, static_cast<uint32_t>(len), 0};
  iovec out[2] = {{&hdr, sizeof(hdr)}, {const_cast<void*>(req), len}};
  msghdr m{};
  m.msg_iov = out;
  m.msg_iovlen = len ? 2 : 1;
  if (::sendmsg(fd_, &m, MSG_NOSIGNAL) < 0) {
    int err = errno;
    *why = what + ": cannot send to metaroced: " + std::strerror(err);
    return err;
  }
  pollfd p{fd_, POLLIN, 0};
  int r = ::poll(&p, 1, timeout_ms_);
  if (r == 0) {
    *why = what + ": metaroced did not answer within " + std::to_string(timeout_ms_ / 1000) + " s";
    return ETIMEDOUT;
  }
  std::vector<uint8_t> buf(kMaxMessage);
  iovec in{buf.data(), buf.size()};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)] = {};
  msghdr rm{};
  rm.msg_iov = &in;
  rm.msg_iovlen = 1;
  rm.msg_control = control;
  rm.msg_controllen = sizeof(control);
  ssize_t n = r < 0 ? -1 : ::recvmsg(fd_, &rm, MSG_CMSG_CLOEXEC);
  if (n < 0) {
    int err = errno;
    *why = what + ": cannot receive from metaroced: " + std::strerror(err);
    return err;
  }
  std::vector<int> got;
  take_fds(&rm, &got);
  auto close_got = [&] {
    for (int f : got) ::close(f);
    got.clear();
  };
  if (n == 0) {
    *why = what + ": metaroced closed the connection (did it exit?)";
    close_got();
    return ECONNRESET;
  }
  mroce_msg_hdr rh{};
  mroce_reply_status st{};
  if (static_cast<size_t>(n) < sizeof(rh) + sizeof(st)) {
    *why = what + ": reply of " + std::to_string(n) + " bytes is shorter than header + status";
    close_got();
    return EPROTO;
  }
  std::memcpy(&rh, buf.data(), sizeof(rh));
  std::memcpy(&st, buf.data() + sizeof(rh), sizeof(st));
  if (rh.abi_version != MROCE_ABI_VERSION || rh.seq != seq || rh.op != op ||
      rh.length != n - sizeof(rh)) {
    *why = what + ": malformed reply (abi " + std::to_string(rh.abi_version) + ", op " +
           std::to_string(rh.op) + ", seq " + std::to_string(rh.seq) + ", length " +
           std::to_string(rh.length) + " of " + std::to_string(n - sizeof(rh)) + ")";
    close_got();
    return EPROTO;
  }
  if (st.err) {
    st.reason[sizeof(st.reason) - 1] = 0;
    *why = what + ": " + std::strerror(st.err) + (st.reason[0] ? std::string(": ") + st.reason : "");
    close_got();
    return st.err;
  }
  body->assign(buf.begin() + sizeof(rh) + sizeof(st), buf.begin() + n);
  if (fds) {
    fds->insert(fds->end(), got.begin(), got.end());
  } else {
    close_got();
  }
  return 0;
}

int ControlClient::open_context(std::string* why) {
  mroce_open_context_req req{MROCE_ABI_VERSION, 0};
  std::vector<uint8_t> body;
  return call(MROCE_OP_OPEN_CONTEXT, &req, sizeof(req), &body, why);
}

int ControlClient::open_context_keeping_events(std::string* why) {
  mroce_open_context_req req{MROCE_ABI_VERSION, 0};
  std::vector<uint8_t> body;
  std::vector<int> fds;  // [doorbell eventfd, async event socket] (docs/device-abi.md)
  int err = call(MROCE_OP_OPEN_CONTEXT, &req, sizeof(req), &body, why, &fds);
  if (!err && fds.size() == 2 && async_fd_ < 0) {
    async_fd_ = fds[1];
    fds.pop_back();
  }
  for (int f : fds) ::close(f);
  return err;
}

size_t ControlClient::drain_async_events() {
  size_t n = 0;
  mroce_async_event ev;
  while (async_fd_ >= 0 && ::recv(async_fd_, &ev, sizeof(ev), MSG_DONTWAIT) > 0) n++;
  return n;
}

int ControlClient::query_counters(uint32_t qpn, std::vector<Counter>* out, std::string* why) {
  mroce_query_counters_req req{qpn, 0};
  std::vector<uint8_t> body;
  int err = call(MROCE_OP_QUERY_COUNTERS, &req, sizeof(req), &body, why);
  if (err) return err;
  mroce_query_counters_resp resp{};
  if (body.size() < sizeof(resp)) {
    *why = "QUERY_COUNTERS: reply body of " + std::to_string(body.size()) + " bytes";
    return EPROTO;
  }
  std::memcpy(&resp, body.data(), sizeof(resp));
  if (body.size() != sizeof(resp) + size_t{resp.n} * sizeof(mroce_counter)) {
    *why = "QUERY_COUNTERS: reply says " + std::to_string(resp.n) + " counters but has " +
           std::to_string(body.size()) + " bytes";
    return EPROTO;
  }
  out->clear();
  for (uint32_t i = 0; i < resp.n; i++) {
    mroce_counter c;
    std::memcpy(&c, body.data() + sizeof(resp) + i * sizeof(c), sizeof(c));
    c.name[sizeof(c.name) - 1] = 0;
    out->push_back({c.name, c.value});
  }
  return 0;
}

int ControlClient::list_qps(std::vector<uint32_t>* out, std::string* why) {
  std::vector<uint8_t> body;
  int err = call(MROCE_OP_LIST_QPS, nullptr, 0, &body, why);
  if (err) return err;
  uint32_t n = 0;
  if (body.size() < sizeof(n)) {
    *why = "LIST_QPS: empty reply body";
    return EPROTO;
  }
  std::memcpy(&n, body.data(), sizeof(n));
  if (body.size() != sizeof(n) * (size_t{n} + 1)) {
    *why = "LIST_QPS: reply says " + std::to_string(n) + " QPs but has " +
           std::to_string(body.size()) + " bytes";
    return EPROTO;
  }
  out->resize(n);
  if (n) std::memcpy(out->data(), body.data() + sizeof(n), n * sizeof(uint32_t));
  return 0;
}

int ControlClient::query_qp_transport(uint32_t qpn, mroce_qp_transport_resp* out,
                                      std::string* why) {
  mroce_handle_req req{qpn, 0};
  std::vector<uint8_t> body;
  int err = call(MROCE_OP_QUERY_QP_TRANSPORT, &req, sizeof(req), &body, why);
  if (err) return err;
  if (body.size() != sizeof(*out)) {
    *why = "QUERY_QP_TRANSPORT: reply body of " + std::to_string(body.size()) + " bytes, expected " +
           std::to_string(sizeof(*out));
    return EPROTO;
  }
  std::memcpy(out, body.data(), sizeof(*out));
  out->cc[sizeof(out->cc) - 1] = 0;
  if (out->num_paths > MROCE_MAX_PATHS) out->num_paths = MROCE_MAX_PATHS;
  return 0;
}

}  // namespace metaroce::ctl
