#include "firmware-model/daemon/control_server.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

namespace metaroce::daemon {

namespace asio = boost::asio;
using seqpacket = asio::generic::seq_packet_protocol;

static constexpr size_t kMaxMessage = 64 * 1024;
static constexpr size_t kMaxFds = 4;

int send_message(int fd, uint16_t op, uint32_t seq, const void* body, size_t len,
                 const int* fds, size_t nfds) {
  mroce_msg_hdr hdr{MROCE_ABI_VERSION, op, seq, static_cast<uint32_t>(len), 0};
  iovec iov[2] = {{&hdr, sizeof(hdr)}, {const_cast<void*>(body), len}};
  msghdr msg{};
  msg.msg_iov = iov;
  msg.msg_iovlen = len ? 2 : 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)] = {};
  if (nfds) {
    if (nfds > kMaxFds) return EINVAL;
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
    std::memcpy(CMSG_DATA(c), fds, sizeof(int) * nfds);
  }
  ssize_t n = sendmsg(fd, &msg, MSG_NOSIGNAL);
  if (n < 0) return errno;
  return n == static_cast<ssize_t>(sizeof(hdr) + len) ? 0 : EIO;
}

ssize_t recv_message(int fd, void* buf, size_t cap, int* fds, size_t max_fds, size_t* nfds) {
  iovec iov{buf, cap};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)] = {};
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  ssize_t n = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
  if (n < 0) return -errno;
  *nfds = 0;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    const int* in = reinterpret_cast<const int*>(CMSG_DATA(c));
    for (size_t i = 0; i < k; i++) {
      if (*nfds < max_fds) {
        fds[(*nfds)++] = in[i];
      } else {
        close(in[i]);  // more than any request may carry: refuse, don't leak
      }
    }
  }
  if (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) {
    for (size_t i = 0; i < *nfds; i++) close(fds[i]);
    *nfds = 0;
    return -EMSGSIZE;
  }
  return n;
}

struct ControlServer::Session {
  explicit Session(asio::io_context& io) : socket(io) {}
  seqpacket::socket socket;
  Device::Client* client = nullptr;
  std::string refusal;  // set when over the uid's connection limit (client stays null)
  std::vector<uint8_t> buf = std::vector<uint8_t>(kMaxMessage);
};

ControlServer::ControlServer(asio::io_context& io, Device& device, std::string path, Log log)
    : io_(io), device_(device), path_(std::move(path)), log_(std::move(log)) {}

ControlServer::~ControlServer() {
  for (auto& [p, s] : sessions_) {
    if (s->client) device_.close_client(s->client->id);
  }
  sessions_.clear();
  if (acceptor_) ::unlink(path_.c_str());
}

int ControlServer::start(std::string* why) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path_.size() >= sizeof(addr.sun_path)) {
    *why = "socket path too long: " + path_;
    return ENAMETOOLONG;
  }
  std::strcpy(addr.sun_path, path_.c_str());
  ::unlink(path_.c_str());  // a stale socket of a dead daemon
  boost::system::error_code ec;
  acceptor_ = std::make_unique<asio::basic_socket_acceptor<seqpacket>>(io_);
  seqpacket::endpoint ep(&addr, sizeof(addr), SOCK_SEQPACKET);
  acceptor_->open(seqpacket(AF_UNIX, 0), ec);
  // Any local user may open a context, as with /dev/infiniband/uverbs*:
  // every object belongs to the connection (context) that created it, and
  // DMA reaches only the address space of the process that connected
  // (ClientMemory, bound at accept).
  // bind() creates the socket file with mode 0777 & ~umask, so the umask
  // gives it 0666 the moment it exists. A chmod() by path afterwards left a
  // window, and followed whatever the path named by then (a symlink planted
  // in a writable run directory: chmod 0666 of any file, as root). The
  // daemon is single-threaded here, so the process-wide umask is safe.
  if (!ec) {
    mode_t old = ::umask(0111);
    acceptor_->bind(ep, ec);
    ::umask(old);
  }
  if (!ec) acceptor_->listen(64, ec);
  if (ec) {
    *why = "cannot listen on " + path_ + ": " + ec.message();
    return ec.value();
  }
  accept_next();
  return 0;
}

void ControlServer::accept_next() {
  auto s = std::make_shared<Session>(io_);
  acceptor_->async_accept(s->socket, [this, s](const boost::system::error_code& ec) {
    if (ec == asio::error::operation_aborted) return;
    if (!ec) {
      ucred cred{};
      socklen_t len = sizeof(cred);
      int fd = s->socket.native_handle();
      std::string why;
      auto memory = ClientMemory::bind_peer(fd, &why);
      if (!memory) log_(io::LogLevel::kWarn, "client refused: " + why);
      if (memory && getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0) {
        s->client = device_.open_client(std::move(memory), cred.uid, -1, &why);
        if (!s->client) return refuse(s, why);
        sessions_[s.get()] = s;
        log_(io::LogLevel::kDebug, "client pid " + std::to_string(cred.pid) + " uid " +
                                       std::to_string(cred.uid) + " connected as context " +
                                       std::to_string(s->client->id));
        wait_readable(s);
      }
    }
    accept_next();
  });
}

// Over its uid's connection limit: the first request is answered with
// ENOMEM and the reason, then the connection closes. Refusals waiting for
// that request are bounded too; beyond that the connection just closes.
void ControlServer::refuse(const std::shared_ptr<Session>& s, const std::string& why) {
  log_(io::LogLevel::kWarn, why);
  if (refusing_ >= kMaxRefusing) {
    accept_next();
    return;  // s (the socket) is closed as it goes out of scope
  }
  refusing_++;
  s->refusal = why;
  sessions_[s.get()] = s;
  wait_readable(s);
  accept_next();
}

void ControlServer::wait_readable(const std::shared_ptr<Session>& s) {
  s->socket.async_wait(seqpacket::socket::wait_read,
                       [this, s](const boost::system::error_code& ec) {
                         if (ec) return close_session(s);
                         if (!serve_one(*s)) return close_session(s);
                         wait_readable(s);
                       });
}

bool ControlServer::serve_one(Session& s) {
  int fds[kMaxFds];
  size_t nfds = 0;
  int fd = s.socket.native_handle();
  ssize_t n = recv_message(fd, s.buf.data(), s.buf.size(), fds, kMaxFds, &nfds);
  if (n == -EAGAIN) return true;
  if (n <= 0) return false;  // closed, or a message too large for the protocol
  auto close_fds = [&] {
    for (size_t i = 0; i < nfds; i++) ::close(fds[i]);
  };
  Device::Reply reply;
  mroce_msg_hdr hdr{};
  if (static_cast<size_t>(n) >= sizeof(hdr)) std::memcpy(&hdr, s.buf.data(), sizeof(hdr));
  if (!s.client) {
    reply.err = ENOMEM;
    reply.reason = s.refusal;
  } else if (static_cast<size_t>(n) < sizeof(hdr)) {
    reply.err = EINVAL;
    reply.reason = "message shorter than its header";
  } else {
    if (hdr.abi_version != MROCE_ABI_VERSION) {
      reply.err = EPROTO;
      reply.reason = "device-ABI version " + std::to_string(hdr.abi_version) + " not spoken (" +
                     std::to_string(MROCE_ABI_VERSION) + " is)";
    } else if (hdr.length != n - sizeof(hdr)) {
      reply.err = EINVAL;
      reply.reason = "header length " + std::to_string(hdr.length) + " but body has " +
                     std::to_string(n - sizeof(hdr)) + " bytes";
    } else {
      Device::Request req;
      req.op = hdr.op;
      req.body = {s.buf.data() + sizeof(hdr), hdr.length};
      req.fds.assign(fds, fds + nfds);
      device_.handle(*s.client, req, &reply);
    }
  }
  close_fds();
  mroce_reply_status st{};
  st.err = reply.err;
  std::strncpy(st.reason, reply.reason.c_str(), sizeof(st.reason) - 1);
  std::vector<uint8_t> body(sizeof(st) + reply.body.size());
  std::memcpy(body.data(), &st, sizeof(st));
  if (!reply.body.empty()) std::memcpy(body.data() + sizeof(st), reply.body.data(), reply.body.size());
  int err = send_message(fd, hdr.op, hdr.seq, body.data(), body.size(), reply.fds.data(),
                         reply.fds.size());
  for (int f : reply.fds) ::close(f);
  if (!s.client) return false;  // refused: the reason is sent, now close
  if (reply.err) {
    log_(io::LogLevel::kWarn, "context " + std::to_string(s.client->id) + ": op " + std::to_string(hdr.op) +
         " failed: " + std::strerror(reply.err) + ": " + reply.reason);
  }
  return err == 0;
}

void ControlServer::close_session(const std::shared_ptr<Session>& s) {
  if (!s->refusal.empty()) refusing_--;
  if (s->client) {
    log_(io::LogLevel::kInfo, "context " + std::to_string(s->client->id) + " (pid " + std::to_string(s->client->pid) +
         ") closed: tearing down its resources");
    device_.close_client(s->client->id);
    s->client = nullptr;
  }
  boost::system::error_code ec;
  s->socket.close(ec);
  sessions_.erase(s.get());
}

}  // namespace metaroce::daemon
