#include "tests/provider/fake_daemon.h"

#include <errno.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

namespace mroce_test {
namespace {

const char *op_name(uint16_t op) {
  switch (op) {
    case MROCE_OP_OPEN_CONTEXT: return "OPEN_CONTEXT";
    case MROCE_OP_QUERY_DEVICE: return "QUERY_DEVICE";
    case MROCE_OP_QUERY_PORT: return "QUERY_PORT";
    case MROCE_OP_ALLOC_PD: return "ALLOC_PD";
    case MROCE_OP_DEALLOC_PD: return "DEALLOC_PD";
    case MROCE_OP_REG_MR: return "REG_MR";
    case MROCE_OP_DEREG_MR: return "DEREG_MR";
    case MROCE_OP_CREATE_CQ: return "CREATE_CQ";
    case MROCE_OP_DESTROY_CQ: return "DESTROY_CQ";
    case MROCE_OP_CREATE_QP: return "CREATE_QP";
    case MROCE_OP_MODIFY_QP: return "MODIFY_QP";
    case MROCE_OP_QUERY_QP: return "QUERY_QP";
    case MROCE_OP_DESTROY_QP: return "DESTROY_QP";
    default: return "?";
  }
}

template <class T>
T body_as(const uint8_t *body, size_t len) {
  T v{};
  memcpy(&v, body, len < sizeof(T) ? len : sizeof(T));
  return v;
}

mroce_ring_hdr *init_ring(uint8_t *base, uint32_t entries, uint32_t entry_size) {
  auto *h = reinterpret_cast<mroce_ring_hdr *>(base);
  h->entries = entries;
  h->entry_size = entry_size;
  return h;
}

}  // namespace

FakeDaemon::FakeDaemon() {
  int sv[2];
  socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv);
  client_fd_ = sv[0];
  server_fd_ = sv[1];
  doorbell_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  thread_ = std::thread([this] { serve(); });
}

FakeDaemon::FakeDaemon(int server_fd) : server_fd_(server_fd) {
  doorbell_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  thread_ = std::thread([this] { serve(); });
}

FakeDaemon::~FakeDaemon() {
  hang_up();
  thread_.join();
  for (auto &m : maps_) munmap(m.first, m.second);
  for (int fd : {doorbell_fd_, async_peer_fd_, channel_fd_})
    if (fd >= 0) close(fd);
}

void FakeDaemon::note(std::string s) {
  std::lock_guard<std::mutex> l(mu_);
  log_.push_back(std::move(s));
}

std::vector<std::string> FakeDaemon::log() {
  std::lock_guard<std::mutex> l(mu_);
  return log_;
}

void FakeDaemon::fail_next(int err, const char *reason) {
  std::lock_guard<std::mutex> l(mu_);
  fail_err_ = err;
  fail_reason_ = reason;
}

void FakeDaemon::hang_up() {
  std::lock_guard<std::mutex> l(mu_);
  if (server_fd_ >= 0) shutdown(server_fd_, SHUT_RDWR);
  if (async_peer_fd_ >= 0) shutdown(async_peer_fd_, SHUT_RDWR);
}

int FakeDaemon::doorbells() {
  uint64_t v = 0;
  return read(doorbell_fd_, &v, sizeof(v)) == sizeof(v) ? static_cast<int>(v) : 0;
}

void FakeDaemon::send_async(uint64_t element, uint32_t event_type) {
  mroce_async_event ev = {element, event_type, 0};
  if (write(async_peer_fd_, &ev, sizeof(ev)) != sizeof(ev)) note("async write failed");
}

int FakeDaemon::make_ring_memfd(size_t bytes) {
  int fd = memfd_create("fake-ring", MFD_CLOEXEC);
  if (ftruncate(fd, static_cast<off_t>(bytes))) return -1;
  return fd;
}

void FakeDaemon::reply(const mroce_msg_hdr &h, int err, const void *body, size_t len,
                       std::vector<int> fds) {
  note(line_);  // before the reply, so the test sees it once the verb returns
  std::vector<uint8_t> buf(sizeof(mroce_msg_hdr) + sizeof(mroce_reply_status) + len);
  mroce_msg_hdr rh = h;
  rh.length = static_cast<uint32_t>(buf.size() - sizeof(rh));
  mroce_reply_status st{};
  st.err = err;
  if (err) snprintf(st.reason, sizeof(st.reason), "%s", fail_reason_.c_str());
  memcpy(buf.data(), &rh, sizeof(rh));
  memcpy(buf.data() + sizeof(rh), &st, sizeof(st));
  if (len) memcpy(buf.data() + sizeof(rh) + sizeof(st), body, len);
  iovec iov = {buf.data(), buf.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  std::vector<char> cbuf(CMSG_SPACE(sizeof(int) * (fds.empty() ? 1 : fds.size())));
  if (!fds.empty()) {
    msg.msg_control = cbuf.data();
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
    cmsghdr *c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
  }
  sendmsg(server_fd_, &msg, MSG_NOSIGNAL);
  for (int fd : fds) close(fd);
}

void FakeDaemon::handle(const mroce_msg_hdr &h, const uint8_t *body, size_t len,
                        std::vector<int> &fds) {
  std::string &line = line_;
  line = op_name(h.op);
  int fail = 0;
  {
    std::lock_guard<std::mutex> l(mu_);
    std::swap(fail, fail_err_);
  }
  if (fail) {
    line += std::string(" -> ") + strerror(fail);
    reply(h, fail, nullptr, 0);
    return;
  }
  switch (h.op) {
    case MROCE_OP_OPEN_CONTEXT: {
      mroce_open_context_resp r{};
      r.ctx_id = 3;
      r.device = {1ull << 40, 0x0102030405060708ull, 64, 1024, 16, 64, 4096, 64, 16,
                  16, 256, 1u << 31, 0x4D52, 1, 1, 0, "fake-fw 1.0"};
      r.port = {4, 5, 3, 2, 7, 1500, 32, 1, 5, 0, 0};
      int sv[2];
      socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv);
      async_peer_fd_ = sv[0];
      reply(h, 0, &r, sizeof(r), {dup(doorbell_fd_), sv[1]});
      break;
    }
    case MROCE_OP_QUERY_PORT: {
      mroce_port_attr p = {4, 5, 3, 2, 7, 1500, 32, 1, 5, 0, 0};
      line += " port=" + std::to_string(body_as<mroce_handle_req>(body, len).handle);
      reply(h, 0, &p, sizeof(p));
      break;
    }
    case MROCE_OP_ALLOC_PD: {
      mroce_alloc_pd_resp r = {next_handle_++, 0};
      reply(h, 0, &r, sizeof(r));
      break;
    }
    case MROCE_OP_REG_MR: {
      auto q = body_as<mroce_reg_mr_req>(body, len);
      line += " len=" + std::to_string(q.length) + " access=" + std::to_string(q.access);
      mroce_reg_mr_resp r = {0x100 + next_handle_, 0x200 + next_handle_};
      next_handle_++;
      reply(h, 0, &r, sizeof(r));
      break;
    }
    case MROCE_OP_CREATE_CQ: {
      auto q = body_as<mroce_create_cq_req>(body, len);
      line += " cqe=" + std::to_string(q.cqe) + " channel=" + std::to_string(q.has_channel) +
              " fds=" + std::to_string(fds.size());
      if (!fds.empty()) {
        channel_fd_ = fds[0];
        fds.clear();
      }
      uint32_t entries = 16;
      size_t bytes = sizeof(mroce_ring_hdr) + entries * sizeof(mroce_cqe);
      int fd = make_ring_memfd(bytes);
      auto *base = static_cast<uint8_t *>(
          mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
      maps_.push_back({base, bytes});
      cq_rings_.push_back(init_ring(base, entries, sizeof(mroce_cqe)));
      mroce_create_cq_resp r = {next_handle_++, entries, bytes};
      reply(h, 0, &r, sizeof(r), {fd});
      break;
    }
    case MROCE_OP_CREATE_QP: {
      auto q = body_as<mroce_create_qp_req>(body, len);
      line += " sge=" + std::to_string(q.cap.max_send_sge) +
              " inline=" + std::to_string(q.cap.max_inline_data);
      size_t sq_bytes = sizeof(mroce_ring_hdr) + kQueueEntries * sizeof(mroce_send_wqe);
      size_t bytes = sq_bytes + sizeof(mroce_ring_hdr) + kQueueEntries * sizeof(mroce_recv_wqe);
      int fd = make_ring_memfd(bytes);
      auto *base = static_cast<uint8_t *>(
          mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
      maps_.push_back({base, bytes});
      sq_rings_.push_back(init_ring(base, kQueueEntries, sizeof(mroce_send_wqe)));
      rq_rings_.push_back(init_ring(base + sq_bytes, kQueueEntries, sizeof(mroce_recv_wqe)));
      mroce_create_qp_resp r{};
      r.qpn = 0x40 + next_handle_++;
      r.cap = q.cap;
      r.sq_entries = r.rq_entries = kQueueEntries;
      r.ring_bytes = bytes;
      r.rq_offset = sq_bytes;
      reply(h, 0, &r, sizeof(r), {fd});
      break;
    }
    case MROCE_OP_MODIFY_QP: {
      auto q = body_as<mroce_modify_qp_req>(body, len);
      line += " qpn=" + std::to_string(q.qpn) + " state=" + std::to_string(q.attr.qp_state) +
              " mask=" + std::to_string(q.attr.attr_mask);
      reply(h, 0, nullptr, 0);
      break;
    }
    case MROCE_OP_QUERY_QP: {
      mroce_query_qp_resp r{};
      r.attr.qp_state = 3;
      r.attr.path_mtu = 3;
      r.attr.dest_qp_num = 0x99;
      reply(h, 0, &r, sizeof(r));
      break;
    }
    default: {
      if (len >= sizeof(mroce_handle_req))
        line += " handle=" + std::to_string(body_as<mroce_handle_req>(body, len).handle);
      reply(h, 0, nullptr, 0);
      break;
    }
  }
}

void FakeDaemon::serve() {
  std::vector<uint8_t> buf(4096);
  for (;;) {
    char cbuf[CMSG_SPACE(sizeof(int) * 4)];
    iovec iov = {buf.data(), buf.size()};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf;
    msg.msg_controllen = sizeof(cbuf);
    ssize_t n = recvmsg(server_fd_, &msg, MSG_CMSG_CLOEXEC);
    if (n <= 0) break;
    std::vector<int> fds;
    for (cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
      size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < k; i++) {
        int fd;
        memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
        fds.push_back(fd);
      }
    }
    mroce_msg_hdr h;
    memcpy(&h, buf.data(), sizeof(h));
    handle(h, buf.data() + sizeof(h), static_cast<size_t>(n) - sizeof(h), fds);
    for (int fd : fds) close(fd);
  }
  std::lock_guard<std::mutex> l(mu_);
  close(server_fd_);
  server_fd_ = -1;
  if (async_peer_fd_ >= 0) close(async_peer_fd_);
  async_peer_fd_ = -1;
}

}  // namespace mroce_test
