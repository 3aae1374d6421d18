#include "proto/crc32c.h"

#include <doctest/doctest.h>

#include <cstring>
#include <random>
#include <vector>

#include "proto/packet.h"

using namespace metaroce::proto;

namespace {
std::span<const uint8_t> str(const char* s) {
  return {reinterpret_cast<const uint8_t*>(s), std::strlen(s)};
}
// Bit-at-a-time reference, straight from the definition.
uint32_t crc32c_bitwise(std::span<const uint8_t> b) {
  uint32_t c = 0xFFFFFFFF;
  for (uint8_t byte : b) {
    c ^= byte;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
  }
  return ~c;
}
}  // namespace

TEST_CASE("crc32c__check_value") {
  CHECK(crc32c(str("123456789")) == 0xE3069283u);
  CHECK(detail::crc32c_sw(str("123456789")) == 0xE3069283u);
  CHECK(detail::crc32c_hw(str("123456789")) == 0xE3069283u);
}

TEST_CASE("crc32c__empty_is_zero") { CHECK(crc32c({}) == 0u); }

TEST_CASE("crc32c__rfc3720_vectors") {
  // RFC 3720 B.4: 32 bytes of zeros, of ones, ascending, descending.
  std::vector<uint8_t> b(32, 0);
  CHECK(crc32c(b) == 0x8A9136AAu);
  std::fill(b.begin(), b.end(), 0xFF);
  CHECK(crc32c(b) == 0x62A8AB43u);
  for (int i = 0; i < 32; ++i) b[i] = static_cast<uint8_t>(i);
  CHECK(crc32c(b) == 0x46DD794Eu);
  for (int i = 0; i < 32; ++i) b[i] = static_cast<uint8_t>(31 - i);
  CHECK(crc32c(b) == 0x113FDB5Cu);
}

TEST_CASE("crc32c__sw_hw_bitwise_agree_on_random_lengths_and_alignments") {
  std::mt19937 rng(42);
  std::vector<uint8_t> buf(4200);
  for (auto& x : buf) x = static_cast<uint8_t>(rng());
  for (int i = 0; i < 2000; ++i) {
    size_t at = rng() % 16, len = rng() % 4096;
    auto s = std::span<const uint8_t>(buf).subspan(at, len);
    uint32_t ref = crc32c_bitwise(s);
    REQUIRE(detail::crc32c_sw(s) == ref);
    REQUIRE(detail::crc32c_hw(s) == ref);
    REQUIRE(crc32c(s) == ref);
  }
}

TEST_CASE("crc32c__incremental_equals_one_shot") {
  auto s = str("The quick brown fox jumps over the lazy dog");
  for (size_t cut = 0; cut <= s.size(); ++cut)
    CHECK(crc32c(s.subspan(cut), crc32c(s.first(cut))) == crc32c(s));
}

TEST_CASE("crc32c__interleaved_hardware_path_matches_tables_at_every_length") {
  // The hardware path splits long buffers into three interleaved blocks of
  // 1024, 256 or 64 bytes; every split point and tail must agree with the
  // table-driven path, at every alignment.
  std::vector<uint8_t> buf(12'008);  // lengths up to 11,999 at offsets up to 3
  uint32_t x = 12345;
  for (auto& b : buf) b = static_cast<uint8_t>((x = x * 1103515245u + 12345u) >> 16);
  for (size_t len : {0u, 1u, 7u, 8u, 63u, 191u, 192u, 193u, 767u, 768u, 769u, 1000u, 3071u,
                     3072u, 3073u, 4120u, 6144u, 9000u, 11'999u}) {
    for (size_t off : {0u, 1u, 3u}) {
      std::span<const uint8_t> s(buf.data() + off, len);
      CHECK(metaroce::proto::detail::crc32c_hw(s) == metaroce::proto::detail::crc32c_sw(s));
      CHECK(metaroce::proto::detail::crc32c_hw(s, 0xDEADBEEF) ==
            metaroce::proto::detail::crc32c_sw(s, 0xDEADBEEF));
    }
  }
}
