// HostMemory (firmware-model/ns3/host_memory.h): the two modes behind one
// DMA interface. Each check compares the exact report, so a verifying mode
// that stopped comparing, stopped recording coverage or let a stray write
// pass would fail here.
#include "firmware-model/ns3/host_memory.h"

#include <cstdint>
#include <string>
#include <vector>

#include "doctest/doctest.h"

namespace fab = metaroce::fabric;
using fab::HostMemory;
using fab::MemoryMode;

namespace {

constexpr uint32_t kSrc = 5;
constexpr uint64_t kSeed = 9;
constexpr uint64_t kSink = 0x2000, kLen = 10000;  // a receive buffer, offsets from base

std::vector<uint8_t> pattern_bytes(uint64_t first, uint64_t len, uint32_t src = kSrc) {
  std::vector<uint8_t> v(len);
  fab::fill_pattern(v, src, first, kSeed);
  return v;
}

// Places [first, first+len) of the sink's pattern as a NIC would.
void place(HostMemory& m, uint64_t first, uint64_t len) {
  REQUIRE(m.write(HostMemory::kBase + kSink + first, pattern_bytes(first, len)));
}

HostMemory with_layout(MemoryMode mode) {
  HostMemory m(kSink + kLen + 100, mode);
  m.fill(0, 4096, kSrc, kSeed);
  m.expect(kSink, kLen, kSrc, kSeed);
  return m;
}

std::string hex(uint8_t b) {
  const char* d = "0123456789abcdef";
  return b < 16 ? std::string("0x") + d[b] : std::string("0x") + d[b >> 4] + d[b & 15];
}

}  // namespace

TEST_CASE("host_memory__reads_of_a_source_are_its_pattern_in_both_modes") {
  for (MemoryMode mode : {MemoryMode::kStore, MemoryMode::kVerify}) {
    HostMemory m = with_layout(mode);
    std::vector<uint8_t> got(37);
    REQUIRE(m.read(HostMemory::kBase + 5, got));
    CHECK(got == pattern_bytes(5, 37));
    REQUIRE(m.read(HostMemory::kBase + 4096, got));  // undeclared: zeros, as stored memory is
    CHECK(got == std::vector<uint8_t>(37, 0));
  }
}

TEST_CASE("host_memory__dma_outside_the_region_is_refused_in_both_modes") {
  for (MemoryMode mode : {MemoryMode::kStore, MemoryMode::kVerify}) {
    HostMemory m = with_layout(mode);
    std::vector<uint8_t> b(8);
    CHECK_FALSE(m.read(HostMemory::kBase - 1, b));
    CHECK_FALSE(m.write(HostMemory::kBase + m.size() - 7, b));
    CHECK(m.write(HostMemory::kBase + kSink, std::span<const uint8_t>()));  // empty: nothing to do
  }
}

TEST_CASE("host_memory__placement_in_any_order_and_twice_verifies") {
  for (MemoryMode mode : {MemoryMode::kStore, MemoryMode::kVerify}) {
    HostMemory m = with_layout(mode);
    place(m, 8192, kLen - 8192);
    place(m, 0, 4096);
    place(m, 4096, 4096);
    place(m, 4096, 4096);  // a retransmission placed again
    CHECK(m.check(kSink, kLen, kSrc, kSeed) == "");
    if (mode == MemoryMode::kVerify) CHECK(m.rewritten_bytes() == 4096);
  }
}

TEST_CASE("host_memory__verify_reports_a_wrong_byte_with_its_address") {
  HostMemory m = with_layout(MemoryMode::kVerify);
  auto bytes = pattern_bytes(4096, 4096);
  const uint8_t want = bytes[10];
  bytes[10] ^= 0x80;
  place(m, 0, 4096);
  REQUIRE(m.write(HostMemory::kBase + kSink + 4096, bytes));
  place(m, 8192, kLen - 8192);
  CHECK(m.check(kSink, kLen, kSrc, kSeed) == "1 writes placed 1 wrong bytes, first byte " +
                                                 std::to_string(kSink + 4106) + ": " +
                                                 hex(bytes[10]) + " expected " + hex(want));
}

TEST_CASE("host_memory__verify_reports_bytes_another_source_wrote") {
  HostMemory m = with_layout(MemoryMode::kVerify);
  REQUIRE(m.write(HostMemory::kBase + kSink, pattern_bytes(0, kLen, kSrc + 1)));
  CHECK(m.check(kSink, kLen, kSrc, kSeed).find("1 writes placed ") == 0);
}

TEST_CASE("host_memory__verify_reports_a_range_never_written") {
  HostMemory m = with_layout(MemoryMode::kVerify);
  place(m, 0, 4096);
  place(m, 8192, kLen - 8192);
  CHECK(m.check(kSink, kLen, kSrc, kSeed) == "bytes " + std::to_string(kSink + 4096) + ".." +
                                                 std::to_string(kSink + 8192) +
                                                 " never written (4096 of 10000 missing)");
  place(m, 4096, 4095);  // all but the last byte of the gap
  CHECK(m.check(kSink, kLen, kSrc, kSeed) == "bytes " + std::to_string(kSink + 8191) + ".." +
                                                 std::to_string(kSink + 8192) +
                                                 " never written (1 of 10000 missing)");
}

TEST_CASE("host_memory__verify_reports_a_write_shifted_by_one_byte") {
  HostMemory m = with_layout(MemoryMode::kVerify);
  REQUIRE(m.write(HostMemory::kBase + kSink + 1, pattern_bytes(0, 4096)));
  CHECK(m.check(kSink, kLen, kSrc, kSeed).find("1 writes placed ") == 0);
}

TEST_CASE("host_memory__verify_reports_a_write_outside_every_receive_buffer") {
  HostMemory m = with_layout(MemoryMode::kVerify);
  place(m, 0, kLen);
  std::vector<uint8_t> b(16, 0);
  REQUIRE(m.write(HostMemory::kBase + 100, b));  // into the source buffer
  CHECK(m.check(kSink, kLen, kSrc, kSeed) ==
        "1 writes placed 16 wrong bytes, first write of 16 bytes at byte 100: bytes 100..116 "
        "outside every receive buffer");
}

TEST_CASE("host_memory__verify_names_a_check_of_an_undeclared_buffer") {
  HostMemory m = with_layout(MemoryMode::kVerify);
  CHECK(m.check(kSink, kLen, kSrc + 1, kSeed) ==
        "bytes 8192..18192 were not declared as a receive buffer of host 6");
}

TEST_CASE("host_memory__store_reports_the_first_wrong_byte") {
  HostMemory m = with_layout(MemoryMode::kStore);
  place(m, 0, kLen);
  CHECK(m.check(kSink, kLen, kSrc, kSeed) == "");
  const uint8_t b = static_cast<uint8_t>(fab::pattern(kSrc, 5000, kSeed) ^ 1);
  REQUIRE(m.write(HostMemory::kBase + kSink + 5000, std::span(&b, 1)));
  CHECK(m.check(kSink, kLen, kSrc, kSeed) == "byte " + std::to_string(kSink + 5000) + ": " +
                                                 hex(b) + " expected " +
                                                 hex(fab::pattern(kSrc, 5000, kSeed)));
}

// The test hook the end-to-end tests use: each fault hits exactly the nth
// write, and each mode reports it.
TEST_CASE("host_memory__injected_faults_hit_the_nth_write_and_are_reported") {
  using Kind = fab::PlacementFault::Kind;
  for (MemoryMode mode : {MemoryMode::kStore, MemoryMode::kVerify}) {
    for (Kind k : {Kind::kFlipByte, Kind::kShift, Kind::kSkip}) {
      CAPTURE(static_cast<int>(mode));
      CAPTURE(static_cast<int>(k));
      HostMemory m = with_layout(mode);
      m.inject({k, 1});
      place(m, 0, 4096);
      place(m, 4096, 4096);  // the faulty one
      place(m, 8192, kLen - 8192);
      CHECK(m.writes() == 3);
      const std::string e = m.check(kSink, kLen, kSrc, kSeed);
      INFO(e);
      if (mode == MemoryMode::kStore) {
        CHECK(e.find("byte ") == 0);
      } else if (k == Kind::kSkip) {
        CHECK(e.find(" never written (4096 of 10000 missing)") != std::string::npos);
      } else {
        CHECK(e.find("1 writes placed ") == 0);
      }
    }
  }
}
