// The soft NIC's DMA engine: reads and writes of application memory, in the
// address space of the process that registered it (docs/daemon.md §DMA),
// through that client's ClientMemory (bound to its mm at connect time).
//
// One copy into another process costs a system call, so:
//   - writes are queued and issued per client per batch (flush()): pieces
//     that are contiguous in the client's memory go out as one pwritev,
//     up to kMaxIov pieces queued; a read from the same client first
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
//     every write queued since the previous commit() landed (hal.h
//     §Placement), including writes an earlier flush() issued.
//
// Invariant (no silent loss): the engine calls commit() before every ACK,
// atomic response and receive completion that covers written data. So the
// writes any flush() (end of a loop pass, a full batch, a read) finds are
// ones whose ACK has not been sent yet; if one of them fails, the failure
// is kept (per client) and the next commit() returns false, which the
// engine turns into a NAK or an error instead of an ACK.
//
// A client whose address space is gone (exit, exec) fails every call at
// once, counted in DmaStats::gone. The engine has already checked keys,
// bounds and access: this class only performs the copy.
#pragma once

#include <sys/types.h>
#include <sys/uio.h>

#include <cstdint>
#include <functional>
#include <unordered_map>
#include <vector>

#include "firmware-model/daemon/client_memory.h"
#include "firmware-model/engine/hal.h"

namespace metaroce::daemon {

struct DmaStats {
  uint64_t read_calls = 0, read_bytes = 0, read_cache_hits = 0;
  uint64_t write_calls = 0, write_bytes = 0, write_segments = 0;
  uint64_t faults = 0;  // a copy hit a page the client does not map (or cannot fault in)
  uint64_t write_faults = 0;  // queued writes that did not land (one per contiguous run)
  uint64_t gone = 0;    // calls refused: the client's address space is gone
  uint64_t write_in_place = 0;  // segments written straight from received frames
};

class ProcessDma : public fw::DmaInterface {
 public:
  static constexpr size_t kReadAhead = 64 * 1024;
  static constexpr size_t kMaxIov = 64;

  // memory_of: the address space behind an owner, or nullptr if unknown.
  explicit ProcessDma(std::function<ClientMemory*(fw::OwnerId)> memory_of);

  bool read(fw::OwnerId owner, uint64_t addr, std::span<uint8_t> dst) override;
  bool read_payload(fw::OwnerId owner, uint64_t addr, std::span<uint8_t> dst) override;
  bool write(fw::OwnerId owner, uint64_t addr, std::span<const uint8_t> src) override;
  bool commit(fw::OwnerId owner) override;
  bool owner_alive(fw::OwnerId owner) override;

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
    size_t len;
  };
  struct Run {  // pieces contiguous in the client's memory
    uint64_t addr = 0;
    size_t len = 0, first = 0, count = 0;  // segments[first, first+count)
  };
  struct PendingWrites {
    ClientMemory* mem = nullptr;
    std::vector<Run> runs;
    std::vector<Segment> segments;
    std::vector<iovec> local;      // scratch for one run's pwritev
    std::vector<uint8_t> staging;  // copies of unstable sources
    bool failed = false;  // a write since the last commit() did not land
  };
  bool flush_owner(PendingWrites& w);
  bool flush_pending(fw::OwnerId owner);  // this owner's queued writes, if any
  ClientMemory* usable(fw::OwnerId owner);  // nullptr (counted) when gone
  bool read_direct(ClientMemory* mem, uint64_t addr, std::span<uint8_t> dst);

  std::function<ClientMemory*(fw::OwnerId)> memory_of_;
  std::unordered_map<fw::OwnerId, Window> windows_;
  std::unordered_map<fw::OwnerId, PendingWrites> pending_;
  DmaStats stats_;
  const uint8_t* stable_base_ = nullptr;
  size_t stable_len_ = 0;
};

}  // namespace metaroce::daemon
