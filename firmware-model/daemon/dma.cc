#include "firmware-model/daemon/dma.h"

#include <algorithm>
#include <cstring>

namespace metaroce::daemon {

ProcessDma::ProcessDma(std::function<ClientMemory*(fw::OwnerId)> memory_of)
    : memory_of_(std::move(memory_of)) {}

ClientMemory* ProcessDma::usable(fw::OwnerId owner) {
  ClientMemory* mem = memory_of_(owner);
  if (mem && !mem->gone()) return mem;
  stats_.gone++;
  return nullptr;
}

bool ProcessDma::flush_pending(fw::OwnerId owner) {
  auto pw = pending_.find(owner);
  return pw == pending_.end() || flush_owner(pw->second);
}

bool ProcessDma::read_direct(ClientMemory* mem, uint64_t addr, std::span<uint8_t> dst) {
  stats_.read_calls++;
  if (!mem->read(addr, dst)) {
    mem->gone() ? stats_.gone++ : stats_.faults++;
    return false;
  }
  stats_.read_bytes += dst.size();
  return true;
}

bool ProcessDma::read(fw::OwnerId owner, uint64_t addr, std::span<uint8_t> dst) {
  if (dst.empty()) return true;
  // A READ after a WRITE from the same peer sees the written data.
  flush_pending(owner);
  ClientMemory* mem = usable(owner);
  return mem && read_direct(mem, addr, dst);
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
  ClientMemory* mem = usable(owner);
  if (!mem) return false;
  // Large reads go straight to the destination; small ones fill the window.
  if (dst.size() >= kReadAhead) return read_direct(mem, addr, dst);
  // Window size: small for small messages (an 8-byte WRITE must not copy
  // 64 KiB), doubling while the reads stream sequentially.
  size_t want = (w.last_size && addr == w.last_end)
                     ? std::min(2 * w.last_size, kReadAhead)
                     : std::clamp<size_t>(16 * dst.size(), 4096, kReadAhead);
  want = std::max(want, dst.size());
  if (w.data.size() < want) w.data.resize(kReadAhead);
  stats_.read_calls++;
  if (!mem->read(addr, {w.data.data(), want})) {
    // The window ran past the end of a mapping: read exactly what was asked.
    w.len = 0;
    return !mem->gone() && read_direct(mem, addr, dst);
  }
  w.base = addr;
  w.len = want;
  w.last_end = addr + w.len;
  w.last_size = w.len;
  stats_.read_bytes += want;
  std::memcpy(dst.data(), w.data.data(), dst.size());
  return true;
}

bool ProcessDma::write(fw::OwnerId owner, uint64_t addr, std::span<const uint8_t> src) {
  if (src.empty()) return true;
  ClientMemory* mem = usable(owner);
  if (!mem) return false;
  PendingWrites& w = pending_[owner];
  if (w.mem != mem) flush_owner(w);
  w.mem = mem;
  // Keep a window coherent with what this client's memory is about to hold.
  auto win = windows_.find(owner);
  if (win != windows_.end() && win->second.len &&
      addr < win->second.base + win->second.len && addr + src.size() > win->second.base) {
    win->second.len = 0;
  }
  bool stable = stable_base_ && src.data() >= stable_base_ &&
                src.data() + src.size() <= stable_base_ + stable_len_;
  bool run_next = !w.runs.empty() && w.runs.back().addr + w.runs.back().len == addr;
  // Coalesce with the previous piece when both sides are contiguous
  // (in-order packets of one message).
  if (run_next) {
    Segment& seg = w.segments.back();
    bool local_next = stable ? seg.ptr && seg.ptr + seg.len == src.data()
                             : !seg.ptr && seg.offset + seg.len == w.staging.size();
    if (local_next) {
      if (!stable) w.staging.insert(w.staging.end(), src.begin(), src.end());
      seg.len += src.size();
      w.runs.back().len += src.size();
      return true;
    }
  }
  if (w.segments.size() == kMaxIov) {
    flush_owner(w);  // a failure is kept for commit()
    run_next = false;
  }
  if (stable) {
    w.segments.push_back({src.data(), 0, src.size()});
    stats_.write_in_place++;
  } else {
    w.segments.push_back({nullptr, w.staging.size(), src.size()});
    w.staging.insert(w.staging.end(), src.begin(), src.end());
  }
  if (run_next) {
    w.runs.back().len += src.size();
    w.runs.back().count++;
  } else {
    w.runs.push_back({addr, src.size(), w.segments.size() - 1, 1});
  }
  return true;
}

// Issues every queued run; a run that does not land in full marks the
// client's writes failed until the next commit(). Returns false if a run
// of this flush failed.
bool ProcessDma::flush_owner(PendingWrites& w) {
  bool ok = true;
  for (const Run& run : w.runs) {
    w.local.clear();
    for (size_t i = run.first; i < run.first + run.count; i++) {
      const Segment& seg = w.segments[i];
      const uint8_t* p = seg.ptr ? seg.ptr : w.staging.data() + seg.offset;
      w.local.push_back({const_cast<uint8_t*>(p), seg.len});
    }
    size_t n = w.mem->write(run.addr, w.local, run.len);
    stats_.write_calls++;
    stats_.write_segments += run.count;
    stats_.write_bytes += n;
    if (n != run.len) {
      ok = false;
      w.failed = true;
      stats_.write_faults++;
      w.mem->gone() ? stats_.gone++ : stats_.faults++;
    }
  }
  w.runs.clear();
  w.segments.clear();
  w.staging.clear();
  return ok;
}

bool ProcessDma::owner_alive(fw::OwnerId owner) {
  ClientMemory* mem = memory_of_(owner);
  return mem && !mem->gone();
}

bool ProcessDma::commit(fw::OwnerId owner) {
  auto pw = pending_.find(owner);
  if (pw == pending_.end()) return true;
  bool ok = flush_owner(pw->second) && !pw->second.failed;
  pw->second.failed = false;
  return ok;
}

void ProcessDma::flush() {
  for (auto& [owner, w] : pending_) flush_owner(w);
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
