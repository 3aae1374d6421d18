// Runs the fuzz target (proto/parse_fuzz.cc) over the seed corpus and over
// seeded random mutations of it, so the round-trip invariants the fuzzer
// asserts are also checked by every plain `bazel test` (and under ASan).
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <vector>

#include "proto/packet.h"
#include "tests/proto/vector_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {
std::vector<std::vector<uint8_t>> corpus() {
  std::vector<std::vector<uint8_t>> out;
  std::error_code ec;
  for (const auto& e :
       std::filesystem::directory_iterator(metaroce::test::runfiles_path("tests/fuzz-corpus"), ec)) {
    if (e.path().extension() == ".bazel") continue;
    std::ifstream in(e.path(), std::ios::binary);
    out.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  return out;
}
}  // namespace

TEST_CASE("parse_fuzz__seed_corpus_parses_and_round_trips") {
  auto seeds = corpus();
  REQUIRE(seeds.size() >= 39);  // 13 opcodes x (frame, udp, vlan)
  int frames = 0, transports = 0;
  for (const auto& s : seeds) {
    LLVMFuzzerTestOneInput(s.data(), s.size());
    frames += metaroce::proto::parse_frame(s).ok();
    transports += metaroce::proto::parse_transport(s).ok();
  }
  // Every seed is a valid frame (.frame, .vlan) or a valid UDP payload (.udp).
  CHECK(frames + transports == static_cast<int>(seeds.size()));
}

TEST_CASE("parse_fuzz__seeded_mutations_do_not_break_invariants") {
  auto seeds = corpus();
  REQUIRE_FALSE(seeds.empty());
  std::mt19937 rng(20240601);
  int parsed = 0;
  for (int i = 0; i < 20000; ++i) {
    std::vector<uint8_t> b = seeds[rng() % seeds.size()];
    for (int k = 1 + rng() % 4; k > 0 && !b.empty(); --k) {
      switch (rng() % 4) {
        case 0: b[rng() % b.size()] ^= static_cast<uint8_t>(1u << (rng() % 8)); break;
        case 1: b[rng() % b.size()] = static_cast<uint8_t>(rng()); break;
        case 2: b.resize(rng() % (b.size() + 1)); break;
        case 3: b.insert(b.begin() + rng() % b.size(), static_cast<uint8_t>(rng())); break;
      }
    }
    if (b.size() >= 4 && rng() % 2) {  // make the ICRC right so the parser gets past it
      uint32_t c = metaroce::proto::crc32c(std::span<const uint8_t>(b).first(b.size() - 4));
      for (int j = 0; j < 4; ++j) b[b.size() - 4 + j] = static_cast<uint8_t>(c >> (24 - 8 * j));
    }
    parsed += metaroce::proto::parse_transport(b).ok();
    LLVMFuzzerTestOneInput(b.data(), b.size());
  }
  CHECK(parsed > 1000);  // the mutations do reach the round-trip checks
}
