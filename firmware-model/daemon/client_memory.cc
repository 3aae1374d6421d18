#include "firmware-model/daemon/client_memory.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <set>
#include <sstream>

#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77  // Linux 6.5 (include/uapi/asm-generic/socket.h)
#endif

namespace metaroce::daemon {
namespace {

std::string hex(uint64_t v) {
  char b[24];
  std::snprintf(b, sizeof b, "0x%" PRIx64, v);
  return b;
}

int open_proc(pid_t pid, const char* file, int flags) {
  std::string path = "/proc/" + std::to_string(pid) + "/" + file;
  return ::open(path.c_str(), flags | O_CLOEXEC);
}

bool read_all(int fd, std::string* text) {
  text->clear();
  char buf[16384];
  for (off_t off = 0;;) {
    ssize_t n = ::pread(fd, buf, sizeof buf, off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return n == 0;
    text->append(buf, static_cast<size_t>(n));
    off += n;
  }
}

// "Uid:\t1000\t1000\t1000\t1000" -> the effective (second) id.
bool effective_id(const std::string& status, const char* key, unsigned* id) {
  size_t at = status.find(std::string("\n") + key);
  if (at == std::string::npos) return false;
  unsigned real = 0;
  return std::sscanf(status.c_str() + at + 1 + std::strlen(key), "%u %u", &real, id) == 2;
}

// A process whose pidfd has not signalled exit is alive, so the pid still
// names it (a pid number is not reused while its process lives).
bool alive(int pidfd) {
  pollfd p{pidfd, POLLIN, 0};
  return ::poll(&p, 1, 0) == 0;
}

// The effective uid and gid of pid now; false if it exited meanwhile.
bool effective_ids(pid_t pid, int pidfd, unsigned* euid, unsigned* egid) {
  std::string status;
  int fd = open_proc(pid, "status", O_RDONLY);
  bool ok = fd >= 0 && read_all(fd, &status);
  if (fd >= 0) ::close(fd);
  return ok && alive(pidfd) && effective_id(status, "Uid:", euid) &&
         effective_id(status, "Gid:", egid);
}

// One line of /proc/PID/maps, as REG_MR needs it.
struct Vma {
  uint64_t start = 0, end = 0;
  std::string perms, dev;
  unsigned long inode = 0;
};

bool parse_line(const std::string& line, Vma* v) {
  char perms[8] = {}, dev[16] = {};
  unsigned long long off = 0;
  if (std::sscanf(line.c_str(), "%" SCNx64 "-%" SCNx64 " %7s %llx %15s %lu", &v->start, &v->end,
                  perms, &off, dev, &v->inode) != 6) {
    return false;
  }
  v->perms = perms;
  v->dev = dev;
  return true;
}

// Why a mapping cannot back an MR with this access, or "" when it can.
std::string refuse(const Vma& v, bool write) {
  std::string at = " at " + hex(v.start) + "-" + hex(v.end);
  if (v.perms.size() < 2 || v.perms[0] != 'r') return "mapping" + at + " is not readable";
  if (write && v.perms[1] != 'w') {
    return "mapping" + at + " is not writable, and the MR asks for write access";
  }
  return "";
}

}  // namespace

std::unique_ptr<ClientMemory> ClientMemory::open_mm(pid_t pid, int pidfd, std::string* why) {
  int mem = open_proc(pid, "mem", O_RDWR);
  int maps = mem < 0 ? -1 : open_proc(pid, "maps", O_RDONLY);
  if (mem < 0 || maps < 0) {
    *why = "cannot open the address space of pid " + std::to_string(pid) + ": " +
           std::strerror(errno);
    if (mem >= 0) ::close(mem);
    ::close(pidfd);
    return nullptr;
  }
  return std::unique_ptr<ClientMemory>(new ClientMemory(pid, mem, maps, pidfd));
}

std::unique_ptr<ClientMemory> ClientMemory::bind_pid(pid_t pid, std::string* why) {
  int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (pidfd < 0) {
    *why = "pidfd_open(" + std::to_string(pid) + "): " + std::strerror(errno);
    return nullptr;
  }
  auto m = open_mm(pid, pidfd, why);
  if (m && !alive(pidfd)) {
    *why = "pid " + std::to_string(pid) + " exited while binding";
    return nullptr;
  }
  return m;
}

// The pidfd names the process that called connect(), whatever happened to
// its pid number since. The mem and maps files are opened by pid; if that
// process is still alive afterwards they are its files. Its effective
// credentials must still be those it connected with: a client that exec'd
// a setuid program before we opened them would otherwise hand us the new
// image's address space.
std::unique_ptr<ClientMemory> ClientMemory::bind_peer(int sock_fd, std::string* why) {
  ucred cred{};
  socklen_t len = sizeof cred;
  int pidfd = -1;
  socklen_t flen = sizeof pidfd;
  if (::getsockopt(sock_fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
    *why = std::string("cannot identify the peer (SO_PEERCRED): ") + std::strerror(errno);
    return nullptr;
  }
  // Before Linux 6.5 there is no SO_PEERPIDFD: a pidfd opened now may name
  // a process that took the pid after the peer exited; the credential
  // check below still refuses a more privileged one.
  if (::getsockopt(sock_fd, SOL_SOCKET, SO_PEERPIDFD, &pidfd, &flen) != 0) {
    pidfd = static_cast<int>(::syscall(SYS_pidfd_open, cred.pid, 0));
  }
  if (pidfd < 0) {
    *why = "client pid " + std::to_string(cred.pid) + " is gone: " + std::strerror(errno);
    return nullptr;
  }
  auto m = open_mm(cred.pid, pidfd, why);
  if (!m) return nullptr;
  unsigned euid = 0, egid = 0;
  if (!effective_ids(cred.pid, pidfd, &euid, &egid)) {
    *why = "client pid " + std::to_string(cred.pid) + " exited while connecting";
    return nullptr;
  }
  if (euid != cred.uid || egid != cred.gid) {
    *why = "client pid " + std::to_string(cred.pid) +
           " changed credentials since connect (exec of a setuid program?)";
    return nullptr;
  }
  return m;
}

std::unique_ptr<ClientMemory> ClientMemory::share(std::string* why) const {
  int fds[3] = {mem_fd_, maps_fd_, pidfd_};
  for (int i = 0; i < 3; i++) {
    fds[i] = ::fcntl(fds[i], F_DUPFD_CLOEXEC, 0);
    if (fds[i] < 0) {
      *why = std::string("cannot share the address space of pid ") + std::to_string(pid_) + ": " +
             std::strerror(errno);
      for (int j = 0; j < i; j++) ::close(fds[j]);
      return nullptr;
    }
  }
  std::unique_ptr<ClientMemory> m(new ClientMemory(pid_, fds[0], fds[1], fds[2]));
  m->gone_ = gone_;
  return m;
}

ClientMemory::~ClientMemory() {
  ::close(mem_fd_);
  ::close(maps_fd_);
  ::close(pidfd_);
}

bool ClientMemory::read(uint64_t addr, std::span<uint8_t> dst) {
  if (gone_) return false;
  size_t done = 0;
  while (done < dst.size()) {
    ssize_t n = ::pread(mem_fd_, dst.data() + done, dst.size() - done,
                        static_cast<off_t>(addr + done));
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) gone_ = true;  // the mm has no users left: exec or exit
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

size_t ClientMemory::write(uint64_t addr, std::span<const iovec> src, size_t total) {
  if (gone_) return 0;
  ssize_t n;
  do {
    n = ::pwritev(mem_fd_, src.data(), static_cast<int>(src.size()), static_cast<off_t>(addr));
  } while (n < 0 && errno == EINTR);
  if (n == 0 && total) gone_ = true;
  // /proc/PID/mem stops at the first page it cannot reach and reports the
  // bytes before it; a short count is a fault, not a reason to retry.
  return n < 0 ? 0 : std::min(static_cast<size_t>(n), total);
}

bool ClientMemory::read_maps(std::string* text) {
  if (gone_) return false;
  if (!read_all(maps_fd_, text)) return false;
  if (text->empty()) gone_ = true;
  return !text->empty();
}

int ClientMemory::check_range(uint64_t addr, uint64_t len, bool write, std::string* why) {
  if (addr + len < addr) {
    *why = "MR range " + hex(addr) + " + " + std::to_string(len) + " wraps around";
    return EFAULT;
  }
  std::string text;
  if (!read_maps(&text)) {
    *why = "the client's address space is gone";
    return EFAULT;
  }
  uint64_t end = addr + len, cursor = addr;
  std::set<std::string> devs;
  std::istringstream in(text);
  for (std::string line; cursor < end && std::getline(in, line);) {
    Vma v;
    if (!parse_line(line, &v) || v.end <= cursor) continue;
    if (v.start > cursor) break;  // a hole
    std::string no = refuse(v, write);
    if (!no.empty()) {
      *why = no;
      return EACCES;
    }
    if (v.inode != 0) devs.insert(v.dev);
    cursor = v.end;
  }
  if (cursor < end) {
    *why = "address " + hex(cursor) + " of the MR is not mapped in the client";
    return EFAULT;
  }
  return devs.empty() ? 0 : check_filesystems(devs, why);
}

// The filesystem behind each file mapping, from the client's mountinfo
// ("36 35 0:42 / /mnt rw - fuse.sshfs ..."; maps prints devices in hex).
int ClientMemory::check_filesystems(const std::set<std::string>& devs, std::string* why) {
  std::string text;
  int fd = open_proc(pid_, "mountinfo", O_RDONLY);
  bool ok = fd >= 0 && read_all(fd, &text);
  if (fd >= 0) ::close(fd);
  if (!ok || !alive(pidfd_)) {
    *why = "the client exited during registration";
    return EFAULT;
  }
  std::set<std::string> wanted;
  for (const std::string& d : devs) {
    unsigned major = 0, minor = 0;
    if (std::sscanf(d.c_str(), "%x:%x", &major, &minor) == 2) {
      wanted.insert(std::to_string(major) + ":" + std::to_string(minor));
    }
  }
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    std::istringstream f(line);
    std::string id, parent, dev, word;
    f >> id >> parent >> dev;
    if (!wanted.count(dev)) continue;
    while (f >> word && word != "-") {
    }
    std::string type;
    f >> type;
    for (const char* slow : {"fuse", "nfs", "cifs", "smb3", "9p", "ceph", "afs"}) {
      if (type.rfind(slow, 0) == 0) {
        *why = "MR lies on a " + type + " file mapping, whose page faults can block the daemon";
        return EACCES;
      }
    }
  }
  return 0;
}

}  // namespace metaroce::daemon
