// The soft NIC's DMA engine: reads and writes of application memory, in the
// address space of the process that registered it (docs/daemon.md §DMA).
//
// Cross-process copies use process_vm_readv/writev. One call costs ~460 ns
// even for 64 bytes (docs/packet-io.md), so:
//   - writes are queued and issued as one vectored call per client per batch
//     (flush()), up to kMaxIov segments; a read from the same client first
//     flushes, so a READ after a WRITE sees the written data;
//   - reads go through a per-client read-ahead window (kReadAhead bytes):
//     segmenting a 64 KiB message at 1 KiB MTU costs one call, not 64. The
//     window is dropped whenever that client posts new work (invalidate()),
//     because the application may rewrite a buffer before reposting it.
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
};

class ProcessDma : public fw::DmaInterface {
 public:
  static constexpr size_t kReadAhead = 64 * 1024;
  static constexpr size_t kMaxIov = 64;

  // pid_of: the process behind an owner, or -1 if unknown.
  explicit ProcessDma(std::function<pid_t(fw::OwnerId)> pid_of);

  bool read(fw::OwnerId owner, uint64_t addr, std::span<uint8_t> dst) override;
  bool write(fw::OwnerId owner, uint64_t addr, std::span<const uint8_t> src) override;

  void flush();                       // issue queued writes
  void invalidate(fw::OwnerId owner);  // drop the read-ahead window
  void forget(fw::OwnerId owner);      // client gone
  const DmaStats& stats() const { return stats_; }

 private:
  struct Window {
    uint64_t base = 0;
    size_t len = 0;
    std::vector<uint8_t> data;
  };
  struct PendingWrites {
    pid_t pid = -1;
    std::vector<iovec> local, remote;
    std::vector<uint8_t> staging;  // copies of src, so callers' spans may die
    std::vector<size_t> offsets;
  };
  bool flush_owner(fw::OwnerId owner, PendingWrites& w);

  std::function<pid_t(fw::OwnerId)> pid_of_;
  std::unordered_map<fw::OwnerId, Window> windows_;
  std::unordered_map<fw::OwnerId, PendingWrites> pending_;
  DmaStats stats_;
};

}  // namespace metaroce::daemon
