// Simulated host memory: one registered region per host, which the NIC
// reads and writes only through read() and write() (the engine's DMA HAL
// and the RoCEv2 model alike). Two modes, the same interface:
//
//   kStore   a byte vector: bytes are really placed, and check() compares
//            them with the pattern afterwards. Needed where the host
//            computes on received data (the allreduce reductions: bytes()).
//   kVerify  no data bytes. The workload declares its layout: source
//            buffers (fill) whose reads are generated from the pattern, and
//            receive buffers (expect) where each write is compared with the
//            pattern due at that address as it is placed, and recorded in
//            an interval set of covered bytes. check() then asks that every
//            byte of a receive buffer was written and that no write
//            mismatched or fell outside every receive buffer. Memory is the
//            layout and the coverage (a few intervals per buffer while
//            messages are in flight, one when done), not the data, so a
//            1,024-host all-to-all of 64 KiB per pair needs no 128 GiB.
//
// A write checked in kVerify is exactly the bytes kStore would have stored,
// so a run's traffic and timing do not depend on the mode; kVerify is
// stricter, as it also reports writes that land outside every receive
// buffer (kStore sees those only if they overwrite checked bytes).
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

namespace metaroce::fabric {

// The byte pattern of host `src` at offset `i` of its source data.
uint8_t pattern(uint32_t src, uint64_t i, uint64_t seed);
void fill_pattern(std::span<uint8_t> dst, uint32_t src, uint64_t first, uint64_t seed);

// The 64-bit finalizer (splitmix64) behind the pattern; workloads draw
// their seeded permutations and phases from it too.
uint64_t mix(uint64_t x);

enum class MemoryMode { kStore, kVerify };

// A placement fault, to show that verification catches one (tests): the
// nth write to this memory (from 0) has one byte flipped, lands one byte
// further on (unless that is past the end), or is not performed at all.
struct PlacementFault {
  enum class Kind { kNone, kFlipByte, kShift, kSkip };
  Kind kind = Kind::kNone;
  uint64_t nth_write = 0;
};

class HostMemory {
 public:
  static constexpr uint64_t kBase = 0x10000000;  // virtual address of offset 0
  explicit HostMemory(uint64_t size, MemoryMode mode = MemoryMode::kStore);
  uint64_t base() const { return kBase; }
  uint64_t size() const { return size_; }
  MemoryMode mode() const { return mode_; }
  bool contains(uint64_t addr, uint64_t len) const;

  // DMA at virtual addresses; false (nothing done) when out of range.
  // kVerify reads the pattern of the buffer declared there (zeros outside
  // every declared buffer).
  bool read(uint64_t addr, std::span<uint8_t> dst);
  bool write(uint64_t addr, std::span<const uint8_t> src);

  // The layout, at offsets from base, declared before any transfer:
  // [off, off+len) holds (fill) or must receive (expect) host src's
  // pattern from pattern offset 0.
  void fill(uint64_t off, uint64_t len, uint32_t src, uint64_t seed);
  void expect(uint64_t off, uint64_t len, uint32_t src, uint64_t seed);
  // "" if [off, off+len) holds src's pattern, else what is wrong, naming
  // offsets from base ("byte 4096: 0x12 expected 0x34").
  std::string check(uint64_t off, uint64_t len, uint32_t src, uint64_t seed) const;
  // kStore only (empty in kVerify): the bytes, for a host that computes.
  std::span<uint8_t> bytes(uint64_t off, uint64_t len);

  void inject(const PlacementFault& f) { fault_ = f; }
  uint64_t writes() const { return writes_; }
  // kVerify: bytes written more than once (retransmissions placed again).
  uint64_t rewritten_bytes() const { return rewritten_; }

 private:
  struct Region {
    uint64_t off, len, seed;
    uint32_t src;
    bool sink;  // a receive buffer (expect), else a source (fill)
  };
  const Region* region_at(uint64_t off) const;  // the region holding off, or null
  void declare(const Region& r);
  void verify_write(uint64_t off, std::span<const uint8_t> src);
  void cover(uint64_t lo, uint64_t hi);
  void bad_write(uint64_t bytes, const std::string& first);
  std::string coverage_gap(uint64_t off, uint64_t len) const;

  uint64_t size_;
  MemoryMode mode_;
  std::vector<uint8_t> bytes_;  // kStore
  // kVerify: the layout, sorted by offset, and the covered bytes [lo, hi)
  // of receive buffers as lo -> hi, adjacent intervals merged.
  std::vector<Region> regions_;
  std::map<uint64_t, uint64_t> covered_;
  uint64_t bad_writes_ = 0, bad_bytes_ = 0, rewritten_ = 0;
  std::string first_bad_;
  PlacementFault fault_;
  uint64_t writes_ = 0;
};

}  // namespace metaroce::fabric
