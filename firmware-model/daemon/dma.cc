#include "firmware-model/daemon/dma.h"

#include <sys/uio.h>

#include <algorithm>
#include <cstring>

namespace metaroce::daemon {

ProcessDma::ProcessDma(std::function<pid_t(fw::OwnerId)> pid_of) : pid_of_(std::move(pid_of)) {}

bool ProcessDma::flush_pending(fw::OwnerId owner) {
  auto pw = pending_.find(owner);
  return pw == pending_.end() || flush_owner(owner, pw->second);
}

bool ProcessDma::read_direct(pid_t pid, uint64_t addr, std::span<uint8_t> dst) {
  iovec l{dst.data(), dst.size()}, r{reinterpret_cast<void*>(addr), dst.size()};
  ssize_t n = process_vm_readv(pid, &l, 1, &r, 1, 0);
  stats_.read_calls++;
  if (n != static_cast<ssize_t>(dst.size())) return stats_.faults++, false;
  stats_.read_bytes += n;
  return true;
}

bool ProcessDma::read(fw::OwnerId owner, uint64_t addr, std::span<uint8_t> dst) {
  if (dst.empty()) return true;
  // A READ after a WRITE from the same peer sees the written data.
  flush_pending(owner);
  pid_t pid = pid_of_(owner);
  return pid >= 0 && read_direct(pid, addr, dst);
}

bool ProcessDma::read_payload(fw::OwnerId owner, uint64_t addr, std::span<uint8_t> dst) {
  if (dst.empty()) return true;
  flush_pending(owner);
  Window& w = windows_[owner];
  if (!w.data.empty() && addr >= w.base && addr + dst.size() <= w.base + w.len) {
    std::memcpy(dst.data(), w.data.data() + (addr - w.base), dst.size());
    stats_.read_cache_hits++;
    return true;
  }
  pid_t pid = pid_of_(owner);
  if (pid < 0) return false;
  // Large reads go straight to the destination; small ones fill the window.
  if (dst.size() >= kReadAhead) return read_direct(pid, addr, dst);
  // Window size: small for small messages (an 8-byte WRITE must not copy
  // 64 KiB), doubling while the reads stream sequentially.
  size_t want = (w.last_size && addr == w.last_end)
                     ? std::min(2 * w.last_size, kReadAhead)
                     : std::clamp<size_t>(16 * dst.size(), 4096, kReadAhead);
  want = std::max(want, dst.size());
  if (w.data.size() < want) w.data.resize(kReadAhead);
  iovec l{w.data.data(), want}, r{reinterpret_cast<void*>(addr), want};
  ssize_t n = process_vm_readv(pid, &l, 1, &r, 1, 0);
  stats_.read_calls++;
  if (n < static_cast<ssize_t>(dst.size())) {
    // The window ran past the end of a mapping: read exactly what was asked.
    w.len = 0;
    return read_direct(pid, addr, dst);
  }
  w.base = addr;
  w.len = static_cast<size_t>(n);
  w.last_end = addr + w.len;
  w.last_size = w.len;
  stats_.read_bytes += n;
  std::memcpy(dst.data(), w.data.data(), dst.size());
  return true;
}

bool ProcessDma::write(fw::OwnerId owner, uint64_t addr, std::span<const uint8_t> src) {
  if (src.empty()) return true;
  PendingWrites& w = pending_[owner];
  if (w.remote.empty()) w.pid = pid_of_(owner);
  if (w.pid < 0) return false;
  // Keep a window coherent with what this client's memory is about to hold.
  auto win = windows_.find(owner);
  if (win != windows_.end() && win->second.len &&
      addr < win->second.base + win->second.len && addr + src.size() > win->second.base) {
    win->second.len = 0;
  }
  bool stable = stable_base_ && src.data() >= stable_base_ &&
                src.data() + src.size() <= stable_base_ + stable_len_;
  // Coalesce with the previous segment when both sides are contiguous
  // (in-order packets of one message).
  if (!w.remote.empty()) {
    iovec& last = w.remote.back();
    Segment& seg = w.segments.back();
    bool remote_next = reinterpret_cast<uint64_t>(last.iov_base) + last.iov_len == addr;
    bool local_next = stable ? seg.ptr && seg.ptr + last.iov_len == src.data()
                             : !seg.ptr && seg.offset + last.iov_len == w.staging.size();
    if (remote_next && local_next) {
      if (!stable) w.staging.insert(w.staging.end(), src.begin(), src.end());
      last.iov_len += src.size();
      w.bytes += src.size();
      return true;
    }
  }
  if (w.remote.size() == kMaxIov && !flush_owner(owner, w)) return false;
  if (stable) {
    w.segments.push_back({src.data(), 0});
    stats_.write_in_place++;
  } else {
    w.segments.push_back({nullptr, w.staging.size()});
    w.staging.insert(w.staging.end(), src.begin(), src.end());
  }
  w.remote.push_back({reinterpret_cast<void*>(addr), src.size()});
  w.bytes += src.size();
  return true;
}

bool ProcessDma::flush_owner(fw::OwnerId owner, PendingWrites& w) {
  if (w.remote.empty()) return true;
  w.local.resize(w.remote.size());
  for (size_t i = 0; i < w.remote.size(); i++) {
    const Segment& seg = w.segments[i];
    const uint8_t* p = seg.ptr ? seg.ptr : w.staging.data() + seg.offset;
    w.local[i] = {const_cast<uint8_t*>(p), w.remote[i].iov_len};
  }
  size_t total = w.bytes;
  ssize_t n = process_vm_writev(w.pid, w.local.data(), w.local.size(), w.remote.data(),
                                w.remote.size(), 0);
  stats_.write_calls++;
  stats_.write_segments += w.remote.size();
  bool ok = n == static_cast<ssize_t>(total);
  if (ok) {
    stats_.write_bytes += total;
  } else {
    stats_.faults++;
  }
  w.remote.clear();
  w.local.clear();
  w.staging.clear();
  w.segments.clear();
  w.bytes = 0;
  return ok;
}

bool ProcessDma::commit(fw::OwnerId owner) { return flush_pending(owner); }

void ProcessDma::flush() {
  for (auto& [owner, w] : pending_) flush_owner(owner, w);
}

void ProcessDma::invalidate(fw::OwnerId owner) {
  auto it = windows_.find(owner);
  if (it != windows_.end()) it->second.len = 0;
}

void ProcessDma::forget(fw::OwnerId owner) {
  windows_.erase(owner);
  pending_.erase(owner);
}

}  // namespace metaroce::daemon
