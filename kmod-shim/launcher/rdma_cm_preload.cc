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

#include "kmod-shim/launcher/ucma_emulation.h"

namespace {

using metaroce::launcher::UcmaFile;

constexpr int kMaxFds = 65536;
constexpr const char* kDevice = "/dev/infiniband/rdma_cm";

struct File {
  UcmaFile ucma;
  int peer_fd;  // the other end: where events come from (the daemon's, later)
  dev_t dev = 0;  // the socket's identity, to tell a reused descriptor number
  ino_t ino = 0;
  File(int fd, int peer, const char* sysfs) : ucma(fd, sysfs), peer_fd(peer) {}
};

std::atomic<File*> g_files[kMaxFds];

using OpenFn = int (*)(const char*, int, ...);
using WriteFn = ssize_t (*)(int, const void*, size_t);
using CloseFn = int (*)(int);
using FstatFn = int (*)(int, struct stat*);
OpenFn real_open, real_open64;
WriteFn real_write;
CloseFn real_close;
FstatFn real_fstat, real_fstat64;

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
  if (g_files[fd].compare_exchange_strong(f, nullptr, std::memory_order_acq_rel)) {
    real_close(f->peer_fd);
    delete f;
  }
  return nullptr;
}

int open_emulated(int flags) {
  if ((flags & O_ACCMODE) != O_RDWR) {
    errno = EACCES;  // librdmacm opens O_RDWR; the kernel's node is 0666 crw
    return -1;
  }
  int p[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, p) != 0) return -1;
  if (p[0] >= kMaxFds) {
    real_close(p[0]);
    real_close(p[1]);
    errno = EMFILE;
    return -1;
  }
  if (!(flags & O_CLOEXEC)) fcntl(p[0], F_SETFD, 0);
  const char* sysfs = getenv("SYSFS_PATH");
  auto* f = new (std::nothrow) File(p[0], p[1], sysfs && *sysfs ? sysfs : "/sys");
  if (!f) {
    real_close(p[0]);
    real_close(p[1]);
    errno = ENOMEM;
    return -1;
  }
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
  const ssize_t r = f->ucma.write(buf, n);
  if (r < 0) {
    errno = static_cast<int>(-r);
    return -1;
  }
  return r;
}

__attribute__((visibility("default"))) int close(int fd) {
  if (File* f = ours(fd); f && g_files[fd].compare_exchange_strong(f, nullptr)) {
    real_close(f->peer_fd);
    delete f;
  }
  return real_close ? real_close(fd) : (errno = ENOSYS, -1);
}

__attribute__((visibility("default"))) int fstat(int fd, struct stat* st) {
  return do_fstat(real_fstat, fd, st);
}

__attribute__((visibility("default"))) int fstat64(int fd, struct stat64* st) {
  return do_fstat(real_fstat64, fd, reinterpret_cast<struct stat*>(st));
}

}  // extern "C"
