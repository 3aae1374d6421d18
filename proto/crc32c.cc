// CRC32C (Castagnoli, reflected polynomial 0x82F63B78), init and final XOR
// 0xFFFFFFFF: the CRC of iSCSI, SCTP, ext4 and the MetaRoCE ICRC
// (docs/protocol.md §5). crc32c("123456789") == 0xE3069283.
//
// Portable path: slicing-by-8 over tables computed at compile time. On x86-64
// the SSE4.2 crc32 instruction is used when the CPU reports it at run time.
// Both produce the same value; tests/proto/crc32c_test.cc checks them against
// each other.
#include <array>
#include <cstring>

#include "proto/crc32c.h"
#include "proto/packet.h"

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace metaroce::proto {
namespace {

constexpr uint32_t kPoly = 0x82F63B78u;

using Tables = std::array<std::array<uint32_t, 256>, 8>;

constexpr Tables make_tables() {
  Tables t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ kPoly : c >> 1;
    t[0][i] = c;
  }
  for (size_t s = 1; s < 8; ++s)
    for (uint32_t i = 0; i < 256; ++i) t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xFF];
  return t;
}
constexpr Tables kTables = make_tables();

// Raw (non-inverted) register update, slicing-by-8.
uint32_t update_sw(uint32_t c, const uint8_t* p, size_t n) {
  while (n >= 8) {
    uint32_t lo = c ^ (uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 |
                       uint32_t{p[3]} << 24);
    c = kTables[7][lo & 0xFF] ^ kTables[6][(lo >> 8) & 0xFF] ^ kTables[5][(lo >> 16) & 0xFF] ^
        kTables[4][lo >> 24] ^ kTables[3][p[4]] ^ kTables[2][p[5]] ^ kTables[1][p[6]] ^
        kTables[0][p[7]];
    p += 8;
    n -= 8;
  }
  while (n--) c = (c >> 8) ^ kTables[0][(c ^ *p++) & 0xFF];
  return c;
}

#if defined(__x86_64__)
// The crc32 instruction has a latency of 3 cycles and a throughput of one
// per cycle: one dependent chain uses a third of the unit. Long buffers are
// cut into three blocks of L bytes whose CRCs run as independent chains and
// are then combined: for the raw (non-inverted) register,
//   crc(c, A|B|C) = shift(crc(c, A), 2L) ^ shift(crc(0, B), L) ^ crc(0, C)
// where shift(x, L) is x advanced over L zero bytes, a linear map on 32 bits
// evaluated with four byte-indexed tables (as Linux's crc32c-pcl and
// Intel's ISA-L do with PCLMUL).
struct ShiftTables {
  std::array<std::array<uint32_t, 256>, 4> t{};
  uint32_t operator()(uint32_t x) const {
    return t[0][x & 0xFF] ^ t[1][(x >> 8) & 0xFF] ^ t[2][(x >> 16) & 0xFF] ^ t[3][x >> 24];
  }
};

uint32_t shift_zeros_slow(uint32_t c, size_t len) {
  for (size_t i = 0; i < len; ++i) c = (c >> 8) ^ kTables[0][c & 0xFF];
  return c;
}

ShiftTables make_shift(size_t len) {
  ShiftTables s;
  uint32_t col[32];
  for (int b = 0; b < 32; ++b) col[b] = shift_zeros_slow(1u << b, len);
  for (int byte = 0; byte < 4; ++byte) {
    for (uint32_t v = 0; v < 256; ++v) {
      uint32_t r = 0;
      for (int b = 0; b < 8; ++b)
        if (v & (1u << b)) r ^= col[byte * 8 + b];
      s.t[byte][v] = r;
    }
  }
  return s;
}

template <size_t L>
struct Interleave {
  static const ShiftTables& once() {
    static const ShiftTables t = make_shift(L);
    return t;
  }
  static const ShiftTables& twice() {
    static const ShiftTables t = make_shift(2 * L);
    return t;
  }
  __attribute__((target("sse4.2"))) static uint32_t run(uint32_t c, const uint8_t*& p, size_t& n) {
    const ShiftTables& s1 = once();
    const ShiftTables& s2 = twice();
    while (n >= 3 * L) {
      uint64_t a = c, b = 0, d = 0;
      for (size_t i = 0; i < L; i += 8) {
        uint64_t va, vb, vd;
        std::memcpy(&va, p + i, 8);
        std::memcpy(&vb, p + L + i, 8);
        std::memcpy(&vd, p + 2 * L + i, 8);
        a = _mm_crc32_u64(a, va);
        b = _mm_crc32_u64(b, vb);
        d = _mm_crc32_u64(d, vd);
      }
      c = s2(static_cast<uint32_t>(a)) ^ s1(static_cast<uint32_t>(b)) ^ static_cast<uint32_t>(d);
      p += 3 * L;
      n -= 3 * L;
    }
    return c;
  }
};

__attribute__((target("sse4.2"))) uint32_t update_hw(uint32_t c, const uint8_t* p, size_t n) {
  c = Interleave<1024>::run(c, p, n);
  c = Interleave<256>::run(c, p, n);
  c = Interleave<64>::run(c, p, n);
  uint64_t c64 = c;
  while (n >= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);  // little-endian load, as the instruction expects
    c64 = _mm_crc32_u64(c64, v);
    p += 8;
    n -= 8;
  }
  c = static_cast<uint32_t>(c64);
  while (n--) c = _mm_crc32_u8(c, *p++);
  return c;
}
bool have_sse42() {
  static const bool have = __builtin_cpu_supports("sse4.2");
  return have;
}
#endif

}  // namespace

namespace detail {
// Exposed for tests: force one implementation.
uint32_t crc32c_sw(std::span<const uint8_t> b, uint32_t crc) {
  return ~update_sw(~crc, b.data(), b.size());
}
uint32_t crc32c_hw(std::span<const uint8_t> b, uint32_t crc) {
#if defined(__x86_64__)
  if (have_sse42()) return ~update_hw(~crc, b.data(), b.size());
#endif
  return crc32c_sw(b, crc);
}
}  // namespace detail

uint32_t crc32c(std::span<const uint8_t> bytes, uint32_t crc) {
#if defined(__x86_64__)
  if (have_sse42()) return ~update_hw(~crc, bytes.data(), bytes.size());
#endif
  return ~update_sw(~crc, bytes.data(), bytes.size());
}

}  // namespace metaroce::proto
