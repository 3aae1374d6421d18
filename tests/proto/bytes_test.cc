#include "proto/bytes.h"

#include <doctest/doctest.h>

#include <array>

using namespace metaroce::proto;

TEST_CASE("writer__big_endian_fields") {
  std::array<uint8_t, 19> out{};
  Writer w(out);
  w.u8(0x01);
  w.u16(0x0203);
  w.u24(0xFF040506);  // only the low 24 bits
  w.u32(0x0708090A);
  w.u64(0x0B0C0D0E0F101112);
  w.zeros(1);
  CHECK(w.ok());
  CHECK(w.pos() == 19);
  for (int i = 0; i < 18; ++i) CHECK(out[i] == i + 1);
  CHECK(out[18] == 0);
}

TEST_CASE("writer__overflow_latches_and_writes_nothing_more") {
  std::array<uint8_t, 3> out{};
  Writer w(out);
  w.u16(0xAABB);
  w.u16(0xCCDD);  // does not fit
  CHECK_FALSE(w.ok());
  w.u8(0xEE);  // would fit, but the writer has failed
  CHECK(out == std::array<uint8_t, 3>{0xAA, 0xBB, 0x00});
}

TEST_CASE("writer__patch_u16_only_inside_written_bytes") {
  std::array<uint8_t, 4> out{};
  Writer w(out);
  w.u32(0);
  w.patch_u16(1, 0x1234);
  CHECK(w.ok());
  CHECK(out == std::array<uint8_t, 4>{0, 0x12, 0x34, 0});
  w.patch_u16(3, 0x5678);
  CHECK_FALSE(w.ok());
}

TEST_CASE("reader__big_endian_fields_and_bounds") {
  const std::array<uint8_t, 18> in = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18};
  Reader r(in);
  CHECK(r.u8() == 0x01);
  CHECK(r.u16() == 0x0203);
  CHECK(r.u24() == 0x040506);
  CHECK(r.u32() == 0x0708090A);
  CHECK(r.u64() == 0x0B0C0D0E0F101112);
  CHECK(r.ok());
  CHECK(r.remaining() == 0);
  CHECK(r.u8() == 0);
  CHECK_FALSE(r.ok());
}

TEST_CASE("reader__short_read_returns_zero_and_fails") {
  const std::array<uint8_t, 3> in = {0xFF, 0xFF, 0xFF};
  Reader r(in);
  CHECK(r.u32() == 0);
  CHECK_FALSE(r.ok());
  CHECK(r.span(1).empty());
}

TEST_CASE("reader__start_past_end_is_failed") {
  const std::array<uint8_t, 2> in{};
  Reader r(in, 3);
  CHECK_FALSE(r.ok());
  CHECK(r.remaining() == 0);
}
