// /dev/infiniband/rdma_cm for Debian's stock librdmacm, part of
// libmetaroce-preload.so (docs/connection-manager.md §1, §4).
//
// open() of that path returns one end of an AF_UNIX SOCK_SEQPACKET pair and
// registers it; write(), fstat() and close() on registered descriptors go to
// the emulation (ucma_emulation.h), everything else straight to libc. The
// libc functions are defined here under libc's own version nodes
// (libmetaroce-preload.map), so librdmacm's write@GLIBC_2.2.5 and
// fstat@GLIBC_2.33 bind to them, as ibv_create_comp_channel@IBVERBS_1.0 does
// for completion channels.
//
// The fast path for a descriptor that is not ours is one acquire load from
// g_files and the real call. A write racing a close of the same emulated
// descriptor is the application's bug, as on any file.
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <atomic>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include <sys/un.h>

#include "firmware-model/uapi/metaroce_abi.h"

#include "kmod-shim/launcher/ucma_emulation.h"

namespace {

using metaroce::launcher::UcmaFile;

constexpr int kMaxFds = 65536;
constexpr const char* kDevice = "/dev/infiniband/rdma_cm";

// One synchronous request/reply at a time on the file's control connection
// to metaroced (firmware-model/uapi/metaroce_abi.h framing).
struct Control {
  int fd = -1;
  std::mutex mu;
  uint32_t seq = 0;
  int request(uint16_t op, std::span<const uint8_t> body, int pass_fd, std::vector<uint8_t>* reply,
              std::string* reason);
};

struct File {
  Control ctrl;
  UcmaFile ucma;
  dev_t dev = 0;  // the socket's identity, to tell a reused descriptor number
  ino_t ino = 0;
  // The descriptor's reference and one per write() in progress: a thread
  // blocked in GET_EVENT keeps the file while another closes it.
  std::atomic<int> refs{1};
  // Descriptors naming this file (dup, dup2, dup3, fcntl F_DUPFD): the file
  // closes, and metaroced destroys its IDs, when the last one is closed.
  std::atomic<int> aliases{1};
  File(int fd, int ctrl_fd, uint64_t token)
      : ucma(fd, [this](uint16_t op, std::span<const uint8_t> b, int f, std::vector<uint8_t>* r,
                        std::string* why) { return ctrl.request(op, b, f, r, why); },
             token) {
    ctrl.fd = ctrl_fd;
  }
};

std::atomic<File*> g_files[kMaxFds];

int Control::request(uint16_t op, std::span<const uint8_t> body, int pass_fd,
                     std::vector<uint8_t>* reply, std::string* reason) {
  std::lock_guard<std::mutex> hold(mu);
  mroce_msg_hdr hdr{MROCE_ABI_VERSION, op, ++seq, static_cast<uint32_t>(body.size()), 0};
  iovec iov[2] = {{&hdr, sizeof hdr}, {const_cast<uint8_t*>(body.data()), body.size()}};
  msghdr msg{};
  msg.msg_iov = iov;
  msg.msg_iovlen = body.empty() ? 1 : 2;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  if (pass_fd >= 0) {
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &pass_fd, sizeof(int));
  }
  if (sendmsg(fd, &msg, MSG_NOSIGNAL) < 0) return *reason = "metaroced is gone (control socket)", ENODEV;
  std::vector<uint8_t> buf(64 * 1024);
  ssize_t n;
  do n = recv(fd, buf.data(), buf.size(), 0);
  while (n < 0 && errno == EINTR);
  if (n <= 0) return *reason = "metaroced closed the control socket (daemon gone)", ENODEV;
  mroce_msg_hdr rh;
  mroce_reply_status st;
  if (static_cast<size_t>(n) < sizeof rh + sizeof st) return *reason = "short reply from metaroced", EIO;
  memcpy(&rh, buf.data(), sizeof rh);
  memcpy(&st, buf.data() + sizeof rh, sizeof st);
  if (rh.seq != hdr.seq || rh.op != op) return *reason = "reply out of order from metaroced", EIO;
  st.reason[sizeof st.reason - 1] = 0;
  if (st.err) return *reason = st.reason, st.err;
  reply->assign(buf.begin() + sizeof rh + sizeof st, buf.begin() + n);
  return 0;
}

using OpenFn = int (*)(const char*, int, ...);
using WriteFn = ssize_t (*)(int, const void*, size_t);
using CloseFn = int (*)(int);
using FstatFn = int (*)(int, struct stat*);
using DupFn = int (*)(int);
using Dup2Fn = int (*)(int, int);
using Dup3Fn = int (*)(int, int, int);
using FcntlFn = int (*)(int, int, ...);
OpenFn real_open, real_open64;
WriteFn real_write;
CloseFn real_close;
FstatFn real_fstat, real_fstat64;
DupFn real_dup;
Dup2Fn real_dup2;
Dup3Fn real_dup3;
FcntlFn real_fcntl, real_fcntl64;

template <class Fn>
Fn next(const char* name, const char* version) {
  return reinterpret_cast<Fn>(dlvsym(RTLD_NEXT, name, version));
}

// Resolved once at load, before main: dlvsym is not async-signal-safe and a
// write() may come from a signal handler.
__attribute__((constructor)) void resolve() {
  real_open = next<OpenFn>("open", "GLIBC_2.2.5");
  real_open64 = next<OpenFn>("open64", "GLIBC_2.2.5");
  real_write = next<WriteFn>("write", "GLIBC_2.2.5");
  real_close = next<CloseFn>("close", "GLIBC_2.2.5");
  real_fstat = next<FstatFn>("fstat", "GLIBC_2.33");
  real_fstat64 = next<FstatFn>("fstat64", "GLIBC_2.33");
  real_dup = next<DupFn>("dup", "GLIBC_2.2.5");
  real_dup2 = next<Dup2Fn>("dup2", "GLIBC_2.2.5");
  real_dup3 = next<Dup3Fn>("dup3", "GLIBC_2.9");
  real_fcntl = next<FcntlFn>("fcntl", "GLIBC_2.2.5");
  real_fcntl64 = next<FcntlFn>("fcntl64", "GLIBC_2.28");
}

// Closing the control connection is what tells metaroced the file is
// gone: it destroys the file's IDs (their peers get REJ or DREQ).
void unref(File* f) {
  if (f->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) delete f;
}

// One descriptor of the file is gone.
void release(File* f) {
  if (f->aliases.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    f->ucma.mark_closed();
    real_close(f->ctrl.fd);
  }
  unref(f);
}

File* registered(int fd) {
  return fd >= 0 && fd < kMaxFds ? g_files[fd].load(std::memory_order_acquire) : nullptr;
}

// The emulated file behind `fd`, or nullptr. A descriptor closed without
// our close() (close_range, a raw syscall) may have been reused for another
// file: the socket's identity is checked, one fstat on our slow path only,
// and a stale entry is dropped.
File* ours(int fd) {
  File* f = registered(fd);
  if (!f) return nullptr;
  struct stat st;
  if (real_fstat && real_fstat(fd, &st) == 0 && st.st_dev == f->dev && st.st_ino == f->ino) return f;
  if (g_files[fd].compare_exchange_strong(f, nullptr, std::memory_order_acq_rel)) release(f);
  return nullptr;
}

// `newfd` (a dup of `oldfd`) names the same emulated file, or, if `oldfd`
// is not ours, nothing of ours any more (dup2 over an emulated descriptor
// closed it). Returns newfd.
int track_dup(int oldfd, int newfd) {
  if (newfd < 0 || newfd >= kMaxFds) return newfd;
  File* f = registered(oldfd);
  if (f) {
    f->aliases.fetch_add(1, std::memory_order_acq_rel);
    f->refs.fetch_add(1, std::memory_order_acq_rel);
  }
  File* old = g_files[newfd].exchange(f, std::memory_order_acq_rel);
  if (old) release(old);
  return newfd;
}

int connect_daemon(std::string* why) {
  const char* sysfs = getenv("SYSFS_PATH");
  std::string path;
  if (!metaroce::launcher::find_daemon_socket(sysfs && *sysfs ? sysfs : "/sys", &path)) {
    *why = "no MetaRoCE device published (is metaroced running?)";
    return -1;
  }
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  if (path.size() >= sizeof sa.sun_path) return -1;
  memcpy(sa.sun_path, path.c_str(), path.size() + 1);
  int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd >= 0 && connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0) return fd;
  if (fd >= 0) real_close(fd);
  return -1;
}

// The channel: one end of a SOCK_SEQPACKET pair is the application's
// descriptor, the other goes to metaroced (MROCE_OP_UCMA_OPEN), which
// writes the event records to it.
int open_emulated(int flags) {
  if ((flags & O_ACCMODE) != O_RDWR) {
    errno = EACCES;  // librdmacm opens O_RDWR; the kernel's node is 0666 crw
    return -1;
  }
  std::string why;
  const int ctrl = connect_daemon(&why);
  if (ctrl < 0) {
    errno = ENODEV;
    return -1;
  }
  int p[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, p) != 0) {
    const int err = errno;
    real_close(ctrl);
    errno = err;
    return -1;
  }
  if (p[0] >= kMaxFds) {
    real_close(p[0]);
    real_close(p[1]);
    real_close(ctrl);
    errno = EMFILE;
    return -1;
  }
  if (!(flags & O_CLOEXEC)) fcntl(p[0], F_SETFD, 0);
  auto* f = new (std::nothrow) File(p[0], ctrl, 0);
  if (!f) {
    real_close(p[0]);
    real_close(p[1]);
    real_close(ctrl);
    errno = ENOMEM;
    return -1;
  }
  std::vector<uint8_t> reply;
  const int err = f->ctrl.request(MROCE_OP_UCMA_OPEN, {}, p[1], &reply, &why);
  real_close(p[1]);  // the daemon holds its own copy
  mroce_ucma_open_resp open{};
  if (err || reply.size() < sizeof open) {
    release(f);
    real_close(p[0]);
    errno = err ? err : EIO;
    return -1;
  }
  memcpy(&open, reply.data(), sizeof open);
  f->ucma.set_token(open.token);
  f->ucma.set_find_file([](int fd) -> UcmaFile* {
    File* o = registered(fd);
    return o ? &o->ucma : nullptr;
  });
  struct stat st;
  if (real_fstat && real_fstat(p[0], &st) == 0) {
    f->dev = st.st_dev;
    f->ino = st.st_ino;
  }
  g_files[p[0]].store(f, std::memory_order_release);
  return p[0];
}

int do_open(OpenFn real, const char* path, int flags, va_list ap) {
  if (path && strcmp(path, kDevice) == 0) return open_emulated(flags);
  mode_t mode = (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE ? va_arg(ap, mode_t) : 0;
  if (!real) {
    errno = ENOSYS;
    return -1;
  }
  return real(path, flags, mode);
}

int do_fstat(FstatFn real, int fd, struct stat* st) {
  if (!real) {
    errno = ENOSYS;
    return -1;
  }
  const int r = real(fd, st);
  if (r == 0 && ours(fd)) {  // what open_cdev checks: a character device
    st->st_mode = S_IFCHR | 0666;
    st->st_rdev = 0;  // no class/misc/rdma_cm/dev is published, so none is compared
  }
  return r;
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) int open(const char* path, int flags, ...) {
  va_list ap;
  va_start(ap, flags);
  const int r = do_open(real_open, path, flags, ap);
  va_end(ap);
  return r;
}

__attribute__((visibility("default"))) int open64(const char* path, int flags, ...) {
  va_list ap;
  va_start(ap, flags);
  const int r = do_open(real_open64, path, flags, ap);
  va_end(ap);
  return r;
}

__attribute__((visibility("default"))) ssize_t write(int fd, const void* buf, size_t n) {
  File* f = ours(fd);
  if (!f) return real_write ? real_write(fd, buf, n) : (errno = ENOSYS, -1);
  f->refs.fetch_add(1, std::memory_order_acq_rel);
  const ssize_t r = f->ucma.write(buf, n);
  unref(f);
  if (r < 0) {
    errno = static_cast<int>(-r);
    return -1;
  }
  return r;
}

__attribute__((visibility("default"))) int close(int fd) {
  if (File* f = ours(fd); f && g_files[fd].compare_exchange_strong(f, nullptr)) release(f);
  return real_close ? real_close(fd) : (errno = ENOSYS, -1);
}

__attribute__((visibility("default"))) int dup(int fd) {
  return real_dup ? track_dup(fd, real_dup(fd)) : (errno = ENOSYS, -1);
}

__attribute__((visibility("default"))) int dup2(int fd, int to) {
  if (fd == to) return real_dup2 ? real_dup2(fd, to) : (errno = ENOSYS, -1);
  return real_dup2 ? track_dup(fd, real_dup2(fd, to)) : (errno = ENOSYS, -1);
}

__attribute__((visibility("default"))) int dup3(int fd, int to, int flags) {
  return real_dup3 ? track_dup(fd, real_dup3(fd, to, flags)) : (errno = ENOSYS, -1);
}

// fcntl's third argument is an int or a pointer: passed on as a pointer-
// sized value, as glibc's own wrapper reads it.
static int do_fcntl(FcntlFn real, int fd, int cmd, void* arg) {
  if (!real) return errno = ENOSYS, -1;
  const int r = real(fd, cmd, arg);
  return cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC ? track_dup(fd, r) : r;
}

__attribute__((visibility("default"))) int fcntl(int fd, int cmd, ...) {
  va_list ap;
  va_start(ap, cmd);
  void* arg = va_arg(ap, void*);
  va_end(ap);
  return do_fcntl(real_fcntl, fd, cmd, arg);
}

__attribute__((visibility("default"))) int fcntl64(int fd, int cmd, ...) {
  va_list ap;
  va_start(ap, cmd);
  void* arg = va_arg(ap, void*);
  va_end(ap);
  return do_fcntl(real_fcntl64, fd, cmd, arg);
}

__attribute__((visibility("default"))) int fstat(int fd, struct stat* st) {
  return do_fstat(real_fstat, fd, st);
}

__attribute__((visibility("default"))) int fstat64(int fd, struct stat64* st) {
  return do_fstat(real_fstat64, fd, reinterpret_cast<struct stat*>(st));
}

}  // extern "C"
