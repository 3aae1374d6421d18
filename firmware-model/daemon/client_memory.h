// The address space of one client: the only way the daemon touches client
// memory (docs/daemon.md §DMA).
//
// A ClientMemory is bound to the mm (address space) of the process that
// connected, not to its pid number: it holds /proc/PID/mem and
// /proc/PID/maps open from connect time. The kernel ties an open mem or
// maps file to the mm it found at open (mm_access), so
//   - after the client execs (any program, setuid or not) its old mm is
//     gone: reads return 0 bytes, the handle turns gone() and every later
//     copy fails. The new image's memory is never touched;
//   - after the client exits and its pid is reused, the same holds: the
//     handle never resolves the pid again.
// process_vm_readv/writev resolve the pid on every call and follow exec;
// they are not used.
//
// Copies through /proc/PID/mem fault pages in without FAULT_FLAG_ALLOW_RETRY,
// so a userfaultfd-registered page fails (EIO) instead of waiting for a
// handler that may never answer (registered before or after REG_MR). A file
// mapping on a filesystem that can block (FUSE, network filesystems) still
// blocks; REG_MR refuses them, but not one mapped over the MR later.
#pragma once

#include <sys/types.h>
#include <sys/uio.h>

#include <cstdint>
#include <memory>
#include <set>
#include <span>
#include <string>

namespace metaroce::daemon {

class ClientMemory {
 public:
  // The process behind a connected Unix socket (SO_PEERPIDFD, SO_PEERCRED).
  // Refuses a peer whose credentials changed since connect (it exec'd a
  // setuid program in between). nullptr and *why on failure.
  static std::unique_ptr<ClientMemory> bind_peer(int sock_fd, std::string* why);
  // The process pid as it is now (the daemon's tests bind themselves).
  static std::unique_ptr<ClientMemory> bind_pid(pid_t pid, std::string* why);
  // A second, independent handle on the same address space (its files
  // dup'd: still bound to the mm found at connect). The hw device model's
  // IOMMU binds one to the owner's PASID and uses it on its own thread.
  // nullptr and *why on failure.
  std::unique_ptr<ClientMemory> share(std::string* why) const;
  ~ClientMemory();
  ClientMemory(const ClientMemory&) = delete;
  ClientMemory& operator=(const ClientMemory&) = delete;

  pid_t pid() const { return pid_; }
  bool gone() const { return gone_; }

  // Copy [addr, addr+dst.size()) out of the client. False: a fault (an
  // unmapped or unreachable page) or gone().
  bool read(uint64_t addr, std::span<uint8_t> dst);
  // Copy the pieces of src, in order, to [addr, addr+total). Returns the
  // bytes placed: total on success, less on a fault or gone().
  size_t write(uint64_t addr, std::span<const iovec> src, size_t total);

  // REG_MR's check, as pinning is in a kernel driver: every byte of
  // [addr, addr+len) lies in a mapping readable (and writable if `write`)
  // by the client, none a file on a filesystem whose faults can block
  // (FUSE, NFS, CIFS, 9p, Ceph, AFS). Reads maps, not smaps: smaps walks
  // every page table entry, which a client with a large resident set could
  // make cost milliseconds of the loop thread per REG_MR. 0, or
  // EFAULT/EACCES with *why.
  int check_range(uint64_t addr, uint64_t len, bool write, std::string* why);

 private:
  ClientMemory(pid_t pid, int mem_fd, int maps_fd, int pidfd)
      : pid_(pid), mem_fd_(mem_fd), maps_fd_(maps_fd), pidfd_(pidfd) {}
  static std::unique_ptr<ClientMemory> open_mm(pid_t pid, int pidfd, std::string* why);
  bool read_maps(std::string* text);
  int check_filesystems(const std::set<std::string>& devs, std::string* why);

  pid_t pid_;
  int mem_fd_, maps_fd_, pidfd_;
  bool gone_ = false;
};

}  // namespace metaroce::daemon
