#include "firmware-model/ns3/host_memory.h"

#include <algorithm>
#include <cassert>
#include <cstring>
#include <sstream>

namespace metaroce::fabric {

uint64_t mix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

namespace {

uint64_t pattern_word(uint32_t src, uint64_t word, uint64_t seed) {
  return mix(seed * 0x100000001B3ull ^ uint64_t{src} << 40 ^ word);
}

std::string byte_mismatch(uint64_t off, uint8_t got, uint8_t want) {
  std::ostringstream e;
  e << "byte " << off << ": 0x" << std::hex << int{got} << " expected 0x" << int{want};
  return e.str();
}

constexpr uint64_t kChunk = 4096;  // pattern generated per comparison step

}  // namespace

uint8_t pattern(uint32_t src, uint64_t i, uint64_t seed) {
  return static_cast<uint8_t>(pattern_word(src, i >> 3, seed) >> ((i & 7) * 8));
}

void fill_pattern(std::span<uint8_t> dst, uint32_t src, uint64_t first, uint64_t seed) {
  uint64_t i = 0;
  for (; i < dst.size() && ((first + i) & 7); ++i) dst[i] = pattern(src, first + i, seed);
  for (; i + 8 <= dst.size(); i += 8) {  // a whole word of the pattern per mix()
    uint64_t w = pattern_word(src, (first + i) >> 3, seed);
    for (int b = 0; b < 8; ++b, w >>= 8) dst[i + b] = static_cast<uint8_t>(w);
  }
  for (; i < dst.size(); ++i) dst[i] = pattern(src, first + i, seed);
}

HostMemory::HostMemory(uint64_t size, MemoryMode mode)
    : size_(size), mode_(mode), bytes_(mode == MemoryMode::kStore ? size : 0) {}

bool HostMemory::contains(uint64_t addr, uint64_t len) const {
  return addr >= kBase && addr - kBase <= size_ && len <= size_ - (addr - kBase);
}

// ---- DMA ----

bool HostMemory::read(uint64_t addr, std::span<uint8_t> dst) {
  if (dst.empty()) return true;
  if (!contains(addr, dst.size())) return false;
  const uint64_t off = addr - kBase;
  if (mode_ == MemoryMode::kStore) {
    std::memcpy(dst.data(), bytes_.data() + off, dst.size());
    return true;
  }
  for (uint64_t pos = off, end = off + dst.size(); pos < end;) {
    auto out = dst.subspan(pos - off);
    if (const Region* r = region_at(pos)) {
      const uint64_t n = std::min(end, r->off + r->len) - pos;
      fill_pattern(out.first(n), r->src, pos - r->off, r->seed);
      pos += n;
      continue;
    }
    auto next = std::upper_bound(regions_.begin(), regions_.end(), pos,
                                 [](uint64_t p, const Region& r) { return p < r.off; });
    const uint64_t n = std::min(end, next == regions_.end() ? end : next->off) - pos;
    std::memset(out.data(), 0, n);  // undeclared memory reads as zeros, as kStore's does
    pos += n;
  }
  return true;
}

bool HostMemory::write(uint64_t addr, std::span<const uint8_t> src) {
  if (src.empty()) return true;
  if (!contains(addr, src.size())) return false;
  std::vector<uint8_t> flipped;
  if (fault_.kind != PlacementFault::Kind::kNone && writes_ == fault_.nth_write) {
    switch (fault_.kind) {
      case PlacementFault::Kind::kSkip:
        ++writes_;
        return true;
      case PlacementFault::Kind::kShift:
        if (contains(addr + 1, src.size())) ++addr;
        break;
      case PlacementFault::Kind::kFlipByte:
        flipped.assign(src.begin(), src.end());
        flipped[flipped.size() / 2] ^= 0x01;
        src = flipped;
        break;
      case PlacementFault::Kind::kNone:
        break;
    }
  }
  ++writes_;
  const uint64_t off = addr - kBase;
  if (mode_ == MemoryMode::kStore) {
    std::memcpy(bytes_.data() + off, src.data(), src.size());
  } else {
    verify_write(off, src);
  }
  return true;
}

// ---- kVerify: the layout, checks as bytes are placed, coverage ----

const HostMemory::Region* HostMemory::region_at(uint64_t off) const {
  auto it = std::upper_bound(regions_.begin(), regions_.end(), off,
                             [](uint64_t p, const Region& r) { return p < r.off; });
  if (it == regions_.begin()) return nullptr;
  --it;
  return off < it->off + it->len ? &*it : nullptr;
}

void HostMemory::declare(const Region& r) {
  assert(r.len <= size_ && r.off <= size_ - r.len);
  auto it = std::upper_bound(regions_.begin(), regions_.end(), r.off,
                             [](uint64_t p, const Region& x) { return p < x.off; });
  assert(it == regions_.end() || r.off + r.len <= it->off);  // no overlap
  assert(it == regions_.begin() || std::prev(it)->off + std::prev(it)->len <= r.off);
  regions_.insert(it, r);
}

void HostMemory::verify_write(uint64_t off, std::span<const uint8_t> src) {
  const uint64_t end = off + src.size();
  bool bad = false;
  for (uint64_t pos = off; pos < end;) {
    const Region* r = region_at(pos);
    if (!r || !r->sink) {
      auto next = std::upper_bound(regions_.begin(), regions_.end(), pos,
                                   [](uint64_t p, const Region& x) { return p < x.off; });
      const uint64_t stop = std::min(end, r                        ? r->off + r->len
                                          : next == regions_.end() ? end
                                                                   : next->off);
      bad = true;
      bad_write(stop - pos, "write of " + std::to_string(src.size()) + " bytes at byte " +
                                std::to_string(off) + ": bytes " + std::to_string(pos) + ".." +
                                std::to_string(stop) + " outside every receive buffer");
      pos = stop;
      continue;
    }
    const uint64_t stop = std::min(end, r->off + r->len);
    uint8_t want[kChunk];
    for (uint64_t p = pos; p < stop;) {
      const uint64_t n = std::min(kChunk, stop - p);
      fill_pattern(std::span(want, n), r->src, p - r->off, r->seed);
      const uint8_t* got = src.data() + (p - off);
      if (std::memcmp(got, want, n) != 0) {
        uint64_t wrong = 0, first = n;
        for (uint64_t i = 0; i < n; ++i) {
          if (got[i] == want[i]) continue;
          ++wrong;
          first = std::min(first, i);
        }
        bad = true;
        bad_write(wrong, byte_mismatch(p + first, got[first], want[first]));
      }
      p += n;
    }
    cover(pos, stop);
    pos = stop;
  }
  bad_writes_ += bad;
}

void HostMemory::bad_write(uint64_t bytes, const std::string& first) {
  bad_bytes_ += bytes;
  if (first_bad_.empty()) first_bad_ = first;
}

void HostMemory::cover(uint64_t lo, uint64_t hi) {
  auto it = covered_.upper_bound(lo);
  if (it != covered_.begin() && std::prev(it)->second >= lo) --it;
  uint64_t nlo = lo, nhi = hi;
  while (it != covered_.end() && it->first <= nhi) {
    const uint64_t a = std::max(it->first, lo), b = std::min(it->second, hi);
    if (b > a) rewritten_ += b - a;
    nlo = std::min(nlo, it->first);
    nhi = std::max(nhi, it->second);
    it = covered_.erase(it);
  }
  covered_.emplace(nlo, nhi);
}

std::string HostMemory::coverage_gap(uint64_t off, uint64_t len) const {
  const uint64_t end = off + len;
  uint64_t pos = off, covered = 0, gap_lo = 0, gap_hi = 0;
  auto it = covered_.upper_bound(off);
  if (it != covered_.begin() && std::prev(it)->second > off) --it;
  for (; it != covered_.end() && it->first < end; ++it) {
    const uint64_t lo = std::max(it->first, off), hi = std::min(it->second, end);
    if (lo > pos && gap_hi == 0) gap_lo = pos, gap_hi = lo;
    covered += hi - lo;
    pos = hi;
  }
  if (pos < end && gap_hi == 0) gap_lo = pos, gap_hi = end;
  if (covered == len) return "";
  return "bytes " + std::to_string(gap_lo) + ".." + std::to_string(gap_hi) + " never written (" +
         std::to_string(len - covered) + " of " + std::to_string(len) + " missing)";
}

// ---- the layout and the checks ----

void HostMemory::fill(uint64_t off, uint64_t len, uint32_t src, uint64_t seed) {
  if (mode_ == MemoryMode::kStore) {
    fill_pattern(bytes(off, len), src, 0, seed);
  } else {
    declare({off, len, seed, src, false});
  }
}

void HostMemory::expect(uint64_t off, uint64_t len, uint32_t src, uint64_t seed) {
  if (mode_ == MemoryMode::kVerify) declare({off, len, seed, src, true});
}

std::string HostMemory::check(uint64_t off, uint64_t len, uint32_t src, uint64_t seed) const {
  if (mode_ == MemoryMode::kStore) {
    uint8_t want[kChunk];
    for (uint64_t p = 0; p < len; p += kChunk) {
      const uint64_t n = std::min(kChunk, len - p);
      fill_pattern(std::span(want, n), src, p, seed);
      const uint8_t* got = bytes_.data() + off + p;
      auto [a, b] = std::mismatch(got, got + n, want);
      if (a != got + n) return byte_mismatch(off + p + (a - got), *a, *b);
    }
    return "";
  }
  if (bad_writes_ > 0) {
    return std::to_string(bad_writes_) + " writes placed " + std::to_string(bad_bytes_) +
           " wrong bytes, first " + first_bad_;
  }
  const Region* r = region_at(off);
  if (!r || !r->sink || r->off != off || r->len != len || r->src != src || r->seed != seed) {
    return "bytes " + std::to_string(off) + ".." + std::to_string(off + len) +
           " were not declared as a receive buffer of host " + std::to_string(src);
  }
  return coverage_gap(off, len);
}

std::span<uint8_t> HostMemory::bytes(uint64_t off, uint64_t len) {
  if (mode_ != MemoryMode::kStore || off > size_ || len > size_ - off) return {};
  return std::span<uint8_t>(bytes_).subspan(off, len);
}

}  // namespace metaroce::fabric
