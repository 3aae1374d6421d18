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
// "manual", with proto/fuzz_replay_main.cc), it replays the files named on
// the command line, so a crash found by tools/fuzz can be debugged with GCC
// and Bazel.
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
  std::vector<uint8_t> fixed(in.begin(), in.end());
  if (mp::seal_icrc(fixed)) check_transport(fixed);
  return 0;
}

