#include "firmware-model/daemon/shm_ring.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

namespace metaroce::daemon {

ShmRegion::~ShmRegion() {
  if (base_) munmap(base_, size_);
  if (fd_ >= 0) close(fd_);
}

ShmRegion& ShmRegion::operator=(ShmRegion&& o) noexcept {
  std::swap(fd_, o.fd_);
  std::swap(size_, o.size_);
  std::swap(base_, o.base_);
  return *this;
}

// The client maps the same memfd. Unsealed, its ftruncate() would shrink
// the file under the daemon's mapping and the next ring access would kill
// the daemon with SIGBUS (every client's NIC). The size is sealed before
// the fd leaves the daemon, and the seals themselves are sealed.
int ShmRegion::create(const std::string& name, size_t bytes) {
  fd_ = memfd_create(name.c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd_ < 0) return errno;
  if (ftruncate(fd_, static_cast<off_t>(bytes)) != 0) return errno;
  if (fcntl(fd_, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) return errno;
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
  if (p == MAP_FAILED) return errno;
  base_ = static_cast<uint8_t*>(p);
  size_ = bytes;
  return 0;
}

uint32_t round_up_pow2(uint32_t v) {
  uint32_t r = 1;
  while (r < v && r < (1u << 30)) r <<= 1;
  return r;
}

size_t ring_bytes(uint32_t entries, uint32_t entry_size) {
  size_t raw = sizeof(mroce_ring_hdr) + static_cast<size_t>(entries) * entry_size;
  size_t page = 4096;
  return (raw + page - 1) / page * page;
}

}  // namespace metaroce::daemon
