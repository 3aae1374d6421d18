// libFuzzer target for the MetaRoCE v1 parsers (tools/fuzz runs it).
//
// Every input is handed to parse_frame and to parse_transport (the latter
// also with its ICRC made right). Whatever
// parses is built again and re-parsed; the result must be equal to the
// first parse (fields and payload bytes), and the rebuilt bytes must be
// stable (build(parse(build(x))) == build(x)). Any difference aborts, which
// libFuzzer reports as a crash.
//
// Built without -fsanitize=fuzzer (Bazel target //proto:parse_fuzz, tag
// "manual"), a small main() replays the files named on the command line,
// so a crash found by tools/fuzz can be debugged with GCC and Bazel.
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "proto/packet.h"

namespace {

using metaroce::proto::Frame;
using metaroce::proto::Packet;
namespace mp = metaroce::proto;

[[noreturn]] void fail(const char* what, const Packet& p) {
  std::fprintf(stderr, "parse_fuzz: %s\n  packet: %s\n", what, mp::to_string(p).c_str());
  std::abort();
}

void check_transport(std::span<const uint8_t> in) {
  auto first = mp::parse_transport(in);
  if (!first) {
    (void)first.error().message();
    return;
  }
  const Packet& p = first.value();
  std::vector<uint8_t> out(mp::transport_length(p));
  if (out.empty() || mp::build_transport(p, out) != out.size()) fail("transport: rebuild failed", p);
  auto second = mp::parse_transport(out);
  if (!second) fail(("transport: re-parse failed: " + second.error().message()).c_str(), p);
  if (!(second.value() == p)) fail("transport: re-parse differs", p);
  std::vector<uint8_t> again(out.size());
  if (mp::build_transport(second.value(), again) != out.size() || again != out)
    fail("transport: rebuild not stable", p);
}

void check_frame(std::span<const uint8_t> in) {
  auto first = mp::parse_frame(in);
  if (!first) {
    (void)first.error().message();
    return;
  }
  const Frame& f = first.value();
  std::vector<uint8_t> out(mp::encap_length(f.headers) + mp::transport_length(f.packet));
  if (mp::build_frame(f.headers, f.packet, out) != out.size()) fail("frame: rebuild failed", f.packet);
  auto second = mp::parse_frame(out);
  if (!second) fail(("frame: re-parse failed: " + second.error().message()).c_str(), f.packet);
  if (!(second.value().headers == f.headers)) fail("frame: headers differ", f.packet);
  if (!(second.value().packet == f.packet)) fail("frame: packet differs", f.packet);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> in(data, size);
  check_frame(in);
  check_transport(in);
  // Random bytes almost never carry a right ICRC, which would keep the
  // fuzzer in front of the CRC check. Also try the input with its last four
  // bytes replaced by the right ICRC, so mutations reach the header logic.
  if (size >= mp::kIcrcLen) {
    std::vector<uint8_t> fixed(in.begin(), in.end());
    const uint32_t c = mp::crc32c(in.first(size - mp::kIcrcLen));
    for (size_t i = 0; i < mp::kIcrcLen; ++i)
      fixed[size - mp::kIcrcLen + i] = static_cast<uint8_t>(c >> (24 - 8 * i));
    check_transport(fixed);
  }
  return 0;
}

#ifndef METAROCE_FUZZ_NO_MAIN
// Replay driver: parse_fuzz FILE... (exit 0 if none aborts). libFuzzer builds
// and the replay test define METAROCE_FUZZ_NO_MAIN and bring their own main.
int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::FILE* f = std::fopen(argv[i], "rb");
    if (f == nullptr) {
      std::fprintf(stderr, "parse_fuzz: cannot open %s\n", argv[i]);
      return 2;
    }
    std::vector<uint8_t> buf;
    for (int c; (c = std::fgetc(f)) != EOF;) buf.push_back(static_cast<uint8_t>(c));
    std::fclose(f);
    LLVMFuzzerTestOneInput(buf.data(), buf.size());
  }
  std::printf("parse_fuzz: replayed %d inputs, no failure\n", argc - 1);
  return 0;
}
#endif
