// The soft NIC's DMA engine: reads and writes of application memory, in the
// address space of the process that registered it (docs/daemon.md §DMA).
//
// Cross-process copies use process_vm_readv/writev. One call costs ~460 ns
// even for 64 bytes (docs/packet-io.md), so:
//   - writes are queued and issued as one vectored call per client per batch
//     (flush()), up to kMaxIov segments; a read from the same client first
//     flushes, so a READ after a WRITE sees the written data;
//   - read() copies memory as it is now: responder READs and atomics see
//     the target's latest stores (hal.h §Freshness). No cache serves them;
//   - read_payload() (a posted request's payload) goes through a per-client
//     read-ahead window (up to kReadAhead bytes; 16x the request for a new
//     stream, doubling while reads stay sequential): segmenting a 64 KiB
//     message at 1 KiB MTU costs a few calls, not 64, and an 8-byte
//     message copies 4 KiB, not 64. The window is dropped whenever that
//     client posts new work (invalidate()), because the application may
//     rewrite a buffer before reposting it, and whenever this daemon writes
//     into it;
//   - commit(owner) flushes that client's queued writes and reports whether
//     every one landed (hal.h §Placement).
// The engine has already checked keys, bounds and access: this class only
// performs the copy, and reports failure when the process is gone.
#pragma once

#include <sys/types.h>
#include <sys/uio.h>

#include <cstdint>
#include <functional>
#include <unordered_map>
#include <vector>

#include "firmware-model/engine/hal.h"

namespace metaroce::daemon {

struct DmaStats {
  uint64_t read_calls = 0, read_bytes = 0, read_cache_hits = 0;
  uint64_t write_calls = 0, write_bytes = 0, write_segments = 0;
  uint64_t faults = 0;  // a process_vm_* call copied less than asked
  uint64_t write_in_place = 0;  // segments written straight from received frames
};

class ProcessDma : public fw::DmaInterface {
 public:
  static constexpr size_t kReadAhead = 64 * 1024;
  static constexpr size_t kMaxIov = 64;

  // pid_of: the process behind an owner, or -1 if unknown.
  explicit ProcessDma(std::function<pid_t(fw::OwnerId)> pid_of);

  bool read(fw::OwnerId owner, uint64_t addr, std::span<uint8_t> dst) override;
  bool read_payload(fw::OwnerId owner, uint64_t addr, std::span<uint8_t> dst) override;
  bool write(fw::OwnerId owner, uint64_t addr, std::span<const uint8_t> src) override;
  bool commit(fw::OwnerId owner) override;

  void flush();                       // issue queued writes
  // Writes whose source lies in [base, base+len) reference it in place
  // instead of copying it to staging: the caller guarantees the range stays
  // valid until flush() (received frames, until the ring slot is released).
  void set_stable_source(const uint8_t* base, size_t len) {
    stable_base_ = base;
    stable_len_ = len;
  }
  void invalidate(fw::OwnerId owner);  // drop the read-ahead window
  void forget(fw::OwnerId owner);      // client gone
  const DmaStats& stats() const { return stats_; }

 private:
  struct Window {
    uint64_t base = 0;
    size_t len = 0;  // valid bytes; 0 after invalidate()
    std::vector<uint8_t> data;
    uint64_t last_end = 0;  // end and size of the last fill, kept across
    size_t last_size = 0;   // invalidation: a sequential stream doubles it
  };
  struct Segment {
    const uint8_t* ptr;  // in place (stable source), or nullptr: staged
    size_t offset;       // into staging when staged
  };
  struct PendingWrites {
    pid_t pid = -1;
    std::vector<iovec> local, remote;
    std::vector<uint8_t> staging;  // copies of unstable sources
    std::vector<Segment> segments;
    size_t bytes = 0;
  };
  bool flush_owner(fw::OwnerId owner, PendingWrites& w);
  bool flush_pending(fw::OwnerId owner);  // this owner's queued writes, if any
  bool read_direct(pid_t pid, uint64_t addr, std::span<uint8_t> dst);

  std::function<pid_t(fw::OwnerId)> pid_of_;
  std::unordered_map<fw::OwnerId, Window> windows_;
  std::unordered_map<fw::OwnerId, PendingWrites> pending_;
  DmaStats stats_;
  const uint8_t* stable_base_ = nullptr;
  size_t stable_len_ = 0;
};

}  // namespace metaroce::daemon
