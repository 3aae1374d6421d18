// The control channel: one request, one reply, on the context's
// SOCK_SEQPACKET socket, file descriptors by SCM_RIGHTS.
#include <errno.h>
#include <stdarg.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "provider/mroce.h"

namespace {

constexpr size_t kMaxReply = 4096;
constexpr int kMaxFds = 4;

int send_request(int fd, const struct mroce_msg_hdr *hdr, const struct mroce_call *call) {
  struct iovec iov[2] = {{const_cast<mroce_msg_hdr *>(hdr), sizeof(*hdr)},
                         {const_cast<void *>(call->req), call->req_len}};
  union {
    char buf[CMSG_SPACE(sizeof(int))];
    struct cmsghdr align;
  } cbuf;
  struct msghdr msg = {};
  msg.msg_iov = iov;
  msg.msg_iovlen = call->req_len ? 2 : 1;
  if (call->send_fd >= 0) {
    memset(&cbuf, 0, sizeof(cbuf));
    msg.msg_control = cbuf.buf;
    msg.msg_controllen = sizeof(cbuf.buf);
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &call->send_fd, sizeof(int));
  }
  ssize_t n;
  do {
    n = sendmsg(fd, &msg, MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return (errno == EPIPE || errno == ECONNRESET || errno == ENOTCONN) ? EIO : errno;
  return 0;
}

// Collects the fds of one received message; closes any beyond `max`.
int take_fds(struct msghdr *msg, int *fds, int max) {
  int got = 0;
  for (struct cmsghdr *c = CMSG_FIRSTHDR(msg); c; c = CMSG_NXTHDR(msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    int n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (int i = 0; i < n; i++) {
      int fd;
      memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      if (got < max)
        fds[got++] = fd;
      else
        close(fd);
    }
  }
  return got;
}

void close_fds(int *fds, int n) {
  for (int i = 0; i < n; i++) close(fds[i]);
}

// Receives one message into buf; returns its length (>0), or -errno.
ssize_t recv_reply(int fd, uint8_t *buf, int *fds, int *nfds) {
  struct pollfd p = {fd, POLLIN, 0};
  int r;
  do {
    r = poll(&p, 1, MROCE_CTRL_TIMEOUT_MS);
  } while (r < 0 && errno == EINTR);
  if (r == 0) return -ETIMEDOUT;
  if (r < 0) return -errno;
  union {
    char buf[CMSG_SPACE(sizeof(int) * kMaxFds)];
    struct cmsghdr align;
  } cbuf;
  struct iovec iov = {buf, kMaxReply};
  struct msghdr msg = {};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = cbuf.buf;
  msg.msg_controllen = sizeof(cbuf.buf);
  ssize_t n;
  do {
    n = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return errno == ECONNRESET ? -EIO : -errno;
  *nfds = take_fds(&msg, fds, kMaxFds);
  if (n == 0) return -EIO;  // the daemon hung up
  if (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) return -EPROTO;
  return n;
}

// Checks one reply against the call; copies the body and hands over fds.
int parse_reply(struct mroce_context *ctx, const struct mroce_call *call, const uint8_t *buf,
                size_t n, int *fds, int nfds) {
  struct mroce_msg_hdr hdr;
  struct mroce_reply_status st;
  if (n < sizeof(hdr) + sizeof(st)) return EPROTO;
  memcpy(&hdr, buf, sizeof(hdr));
  memcpy(&st, buf + sizeof(hdr), sizeof(st));
  if (hdr.op != call->op || hdr.length != n - sizeof(hdr)) return EPROTO;
  if (st.err != 0) {
    memcpy(ctx->last_reason, st.reason, sizeof(ctx->last_reason));
    ctx->last_reason[sizeof(ctx->last_reason) - 1] = 0;
    return st.err > 0 ? st.err : EPROTO;
  }
  size_t body = n - sizeof(hdr) - sizeof(st);
  if (body < call->resp_len || nfds != call->nfds) return EPROTO;
  if (call->resp_len) memcpy(call->resp, buf + sizeof(hdr) + sizeof(st), call->resp_len);
  for (int i = 0; i < nfds; i++) call->fds[i] = fds[i];
  return 0;
}

int call_locked(struct mroce_context *ctx, const struct mroce_call *call, uint8_t *buf) {
  ctx->last_reason[0] = 0;
  struct mroce_msg_hdr hdr = {};
  hdr.abi_version = MROCE_ABI_VERSION;
  hdr.op = call->op;
  hdr.seq = ++ctx->seq;
  hdr.length = static_cast<uint32_t>(call->req_len);
  int err = send_request(ctx->ctrl_fd, &hdr, call);
  if (err) return err;
  for (;;) {  // skip replies to requests that timed out earlier
    int fds[kMaxFds], nfds = 0;
    ssize_t n = recv_reply(ctx->ctrl_fd, buf, fds, &nfds);
    if (n < 0) {
      close_fds(fds, nfds);
      return static_cast<int>(-n);
    }
    struct mroce_msg_hdr rh;
    if (static_cast<size_t>(n) >= sizeof(rh)) {
      memcpy(&rh, buf, sizeof(rh));
      if (rh.seq != hdr.seq) {
        close_fds(fds, nfds);
        continue;
      }
    }
    err = parse_reply(ctx, call, buf, n, fds, nfds);
    if (err) close_fds(fds, nfds);
    return err;
  }
}

}  // namespace

void mroce_mark_dead(struct mroce_context *ctx) {
  __atomic_store_n(&ctx->dead, 1, __ATOMIC_RELEASE);
}

int mroce_ctrl_call(struct mroce_context *ctx, const struct mroce_call *call) {
  if (mroce_dead(ctx)) return EIO;
  uint8_t *buf = static_cast<uint8_t *>(malloc(kMaxReply));
  if (!buf) return ENOMEM;
  pthread_mutex_lock(&ctx->ctrl_lock);
  int err = call_locked(ctx, call, buf);
  pthread_mutex_unlock(&ctx->ctrl_lock);
  free(buf);
  if (err == EIO) mroce_mark_dead(ctx);
  if (err && getenv("METAROCE_DEBUG"))
    fprintf(stderr, "metaroce: control op %u failed: %s%s%s\n", call->op, strerror(err),
            ctx->last_reason[0] ? ": " : "", ctx->last_reason);
  return err;
}

int mroce_refuse(struct mroce_context *ctx, int err, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(ctx->last_reason, sizeof(ctx->last_reason), fmt, ap);
  va_end(ap);
  if (getenv("METAROCE_DEBUG"))
    fprintf(stderr, "metaroce: refused: %s: %s\n", strerror(err), ctx->last_reason);
  return err;
}

int mroce_ctrl_handle(struct mroce_context *ctx, uint16_t op, uint32_t handle) {
  struct mroce_handle_req req = {handle, 0};
  struct mroce_call call = {op, &req, sizeof(req), -1, nullptr, 0, nullptr, 0};
  return mroce_ctrl_call(ctx, &call);
}
