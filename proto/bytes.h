// Bounds-checked big-endian reader and writer over byte spans.
//
// The codec reads and writes every field through these two types; it never
// casts a buffer to a struct (alignment, padding and byte order would all be
// the compiler's choice, not the spec's). A Reader or Writer that runs out of
// room latches into a failed state: later calls do nothing and return zero,
// so a header is read or written field by field and checked once at the end.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

namespace metaroce::proto {

class Reader {
 public:
  explicit Reader(std::span<const uint8_t> bytes, size_t pos = 0) : bytes_(bytes), pos_(pos) {
    if (pos_ > bytes_.size()) ok_ = false;
  }

  bool ok() const { return ok_; }
  size_t pos() const { return pos_; }
  size_t remaining() const { return ok_ ? bytes_.size() - pos_ : 0; }
  bool has(size_t n) const { return ok_ && bytes_.size() - pos_ >= n; }

  uint8_t u8() { return static_cast<uint8_t>(get(1)); }
  uint16_t u16() { return static_cast<uint16_t>(get(2)); }
  uint32_t u24() { return static_cast<uint32_t>(get(3)); }
  uint32_t u32() { return static_cast<uint32_t>(get(4)); }
  uint64_t u64() { return get(8); }

  // Copies n bytes into out (zero-filled on failure).
  void bytes(uint8_t* out, size_t n) {
    if (!take(n)) {
      std::memset(out, 0, n);
      return;
    }
    std::memcpy(out, bytes_.data() + pos_ - n, n);
  }
  // Borrows the next n bytes.
  std::span<const uint8_t> span(size_t n) {
    if (!take(n)) return {};
    return bytes_.subspan(pos_ - n, n);
  }
  void skip(size_t n) { take(n); }

 private:
  bool take(size_t n) {
    if (!has(n)) {
      ok_ = false;
      return false;
    }
    pos_ += n;
    return true;
  }
  uint64_t get(size_t n) {
    if (!take(n)) return 0;
    uint64_t v = 0;
    for (size_t i = pos_ - n; i < pos_; ++i) v = (v << 8) | bytes_[i];
    return v;
  }

  std::span<const uint8_t> bytes_;
  size_t pos_;
  bool ok_ = true;
};

class Writer {
 public:
  explicit Writer(std::span<uint8_t> out, size_t pos = 0) : out_(out), pos_(pos) {
    if (pos_ > out_.size()) ok_ = false;
  }

  bool ok() const { return ok_; }
  size_t pos() const { return pos_; }

  void u8(uint8_t v) { put(v, 1); }
  void u16(uint16_t v) { put(v, 2); }
  void u24(uint32_t v) { put(v & 0xFFFFFFu, 3); }
  void u32(uint32_t v) { put(v, 4); }
  void u64(uint64_t v) { put(v, 8); }
  void zeros(size_t n) {
    if (!room(n)) return;
    std::memset(out_.data() + pos_, 0, n);
    pos_ += n;
  }
  void bytes(std::span<const uint8_t> b) {
    if (!room(b.size())) return;
    if (!b.empty()) std::memcpy(out_.data() + pos_, b.data(), b.size());
    pos_ += b.size();
  }
  // Passes n bytes the caller has already written in place.
  void skip(size_t n) {
    if (room(n)) pos_ += n;
  }
  // Overwrites 2 bytes at an absolute position already written (checksums).
  void patch_u16(size_t at, uint16_t v) {
    if (!ok_ || at + 2 > pos_) {
      ok_ = false;
      return;
    }
    out_[at] = static_cast<uint8_t>(v >> 8);
    out_[at + 1] = static_cast<uint8_t>(v);
  }

 private:
  bool room(size_t n) {
    if (!ok_ || out_.size() - pos_ < n) {
      ok_ = false;
      return false;
    }
    return true;
  }
  void put(uint64_t v, size_t n) {
    if (!room(n)) return;
    for (size_t i = 0; i < n; ++i) out_[pos_ + i] = static_cast<uint8_t>(v >> (8 * (n - 1 - i)));
    pos_ += n;
  }

  std::span<uint8_t> out_;
  size_t pos_;
  bool ok_ = true;
};

}  // namespace metaroce::proto
