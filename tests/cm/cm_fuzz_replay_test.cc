// Runs the CM fuzz target (tests/cm/cm_fuzz.cc) over the CM seeds of the
// corpus with every scenario selector, and over seeded random mutations, so
// the invariants it asserts (sent messages valid, forged messages change
// nothing, timers run out) are checked by every plain `bazel test` and
// under ASan. The target aborts on a broken invariant.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <vector>

#include "proto/cm.h"
#include "tests/proto/vector_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

// The UDP payload seeds of the CM opcodes (tests/vectors/cm_*.txt).
std::vector<std::vector<uint8_t>> cm_seeds() {
  std::vector<std::vector<uint8_t>> out;
  std::error_code ec;
  for (const auto& e :
       std::filesystem::directory_iterator(metaroce::test::runfiles_path("tests/fuzz-corpus"), ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("cm_", 0) != 0 || e.path().extension() != ".udp") continue;
    std::ifstream in(e.path(), std::ios::binary);
    out.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  return out;
}

bool valid_cm(const std::vector<uint8_t>& udp) {
  auto p = metaroce::proto::parse_transport(udp);
  return p && metaroce::proto::is_cm(p.value().mbth.opcode) &&
         metaroce::proto::check_cm(p.value()) == metaroce::proto::CmCheck::kOk;
}

}  // namespace

TEST_CASE("cm_fuzz__every_seed_in_every_scenario") {
  const auto seeds = cm_seeds();
  REQUIRE(seeds.size() == 7);  // one per CM opcode
  for (const auto& s : seeds) {
    CHECK(valid_cm(s));
    for (int sel = 0; sel < 64; ++sel) {
      std::vector<uint8_t> in{static_cast<uint8_t>(sel)};
      in.insert(in.end(), s.begin(), s.end());
      LLVMFuzzerTestOneInput(in.data(), in.size());
    }
  }
}

TEST_CASE("cm_fuzz__seeded_mutations_do_not_break_invariants") {
  const auto seeds = cm_seeds();
  REQUIRE_FALSE(seeds.empty());
  std::mt19937 rng(20261201);
  int valid = 0;
  for (int i = 0; i < 5000; ++i) {
    std::vector<uint8_t> b = seeds[rng() % seeds.size()];
    for (int k = 1 + rng() % 3; k > 0 && !b.empty(); --k) {
      switch (rng() % 3) {
        case 0: b[rng() % b.size()] ^= static_cast<uint8_t>(1u << (rng() % 8)); break;
        case 1: b[rng() % b.size()] = static_cast<uint8_t>(rng()); break;
        case 2: b.resize(rng() % (b.size() + 1)); break;
      }
    }
    if (b.size() >= 4) {  // ICRC made right so the bytes reach the CM
      uint32_t c = metaroce::proto::crc32c(std::span<const uint8_t>(b).first(b.size() - 4));
      for (int j = 0; j < 4; ++j) b[b.size() - 4 + j] = static_cast<uint8_t>(c >> (24 - 8 * j));
    }
    valid += valid_cm(b);
    std::vector<uint8_t> in{static_cast<uint8_t>(rng())};
    in.insert(in.end(), b.begin(), b.end());
    LLVMFuzzerTestOneInput(in.data(), in.size());
  }
  CHECK(valid > 500);  // the mutations do reach the state machine
}
