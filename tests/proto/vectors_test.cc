// Golden vectors (tests/vectors/*.txt) checked both ways against the codec:
// build(fields) == bytes and parse(bytes) == fields; then every truncated
// prefix of every vector, and corrupted copies, give the precise error.
#include <doctest/doctest.h>

#include <set>
#include <string>

#include "proto/opcode.h"
#include "proto/packet.h"
#include "tests/proto/vector_file.h"

using namespace metaroce::proto;
using metaroce::test::load_vectors;
using metaroce::test::Vector;

namespace {

using Bytes = std::vector<uint8_t>;

const std::vector<Vector>& vectors() {
  static const std::vector<Vector> v = load_vectors();
  return v;
}

size_t ip_len(const Vector& v) { return v.headers.src_ip.is_v4() ? kIpv4Len : kIpv6Len; }
size_t transport_at(const Vector& v) { return kEthLen + ip_len(v) + kUdpLen; }

// The header a prefix of n bytes of the UDP payload ends inside, per the
// opcode table: what parse_* must name in its kTruncated error.
const char* transport_cut(const OpcodeInfo& row, size_t payload_len, size_t n) {
  if (n < kMbthLen) return "MBTH";
  size_t at = kMbthLen;
  for (size_t k = 0; k < row.ext_count(); ++k) {
    at += ext_info(row.exts[k]).length;
    if (n < at) return ext_info(row.exts[k]).name;
  }
  return n < at + payload_len ? "payload" : "ICRC";
}

uint32_t be32(const uint8_t* p) { return uint32_t{p[0]} << 24 | p[1] << 16 | p[2] << 8 | p[3]; }

}  // namespace

TEST_CASE("vectors__files_load_and_cover_every_opcode_and_both_ip_versions") {
  REQUIRE(vectors().size() >= kOpcodeTable.size());
  std::set<std::string> opcodes;
  int v4 = 0, v6 = 0;
  for (const Vector& v : vectors()) {
    CAPTURE(v.path);
    REQUIRE_MESSAGE(v.error.empty(), v.error);
    CHECK(v.name + ".txt" == v.path.substr(v.path.rfind('/') + 1));
    opcodes.insert(to_string(v.packet().mbth.opcode));
    (v.headers.src_ip.is_v4() ? v4 : v6)++;
  }
  for (const auto& row : kOpcodeTable) CHECK_MESSAGE(opcodes.count(row.name), row.name);
  CHECK(v4 > 0);
  CHECK(v6 > 0);
}

TEST_CASE("vectors__build_frame_equals_golden_bytes") {
  for (const Vector& v : vectors()) {
    CAPTURE(v.name);
    Bytes out(v.frame.size() + 16);
    size_t n = build_frame(v.headers, v.packet(), out);
    out.resize(n);
    CHECK(out == v.frame);
    CHECK(encap_length(v.headers) == transport_at(v));
    CHECK(transport_length(v.packet()) == v.frame.size() - transport_at(v));
    Bytes tp(transport_length(v.packet()));
    REQUIRE(build_transport(v.packet(), tp) == tp.size());
    CHECK(Bytes(v.frame.begin() + transport_at(v), v.frame.end()) == tp);
  }
}

TEST_CASE("vectors__parse_frame_equals_golden_fields") {
  for (const Vector& v : vectors()) {
    CAPTURE(v.name);
    auto r = parse_frame(v.frame);
    REQUIRE_MESSAGE(r.ok(), r.error().message());
    CHECK(r.value().headers == v.headers);
    CHECK_MESSAGE(r.value().packet == v.packet(), to_string(r.value().packet));
    CHECK(be32(&v.frame[v.frame.size() - 4]) == v.icrc);
    auto t = parse_transport(std::span<const uint8_t>(v.frame).subspan(transport_at(v)));
    REQUIRE_MESSAGE(t.ok(), t.error().message());
    CHECK(t.value() == v.packet());
  }
}

TEST_CASE("vectors__every_prefix_of_every_frame_is_a_precise_truncation") {
  for (const Vector& v : vectors()) {
    CAPTURE(v.name);
    const OpcodeInfo& row = *find_opcode(v.packet().mbth.opcode);
    const size_t ip_end = kEthLen + ip_len(v), tp = transport_at(v);
    const char* ip_name = v.headers.src_ip.is_v4() ? "IPv4" : "IPv6";
    for (size_t n = 0; n < v.frame.size(); ++n) {
      CAPTURE(n);
      auto r = parse_frame(std::span<const uint8_t>(v.frame).first(n));
      REQUIRE_FALSE(r.ok());
      const char* where = n < kEthLen ? "Ethernet"
                          : n < ip_end ? ip_name
                          : n < tp     ? "UDP"
                                       : transport_cut(row, v.payload.size(), n - tp);
      CHECK(r.error() == ParseError{ParseErrorCode::kTruncated, n, where});
    }
  }
}

TEST_CASE("vectors__every_prefix_of_every_udp_payload_is_a_precise_error") {
  for (const Vector& v : vectors()) {
    CAPTURE(v.name);
    const OpcodeInfo& row = *find_opcode(v.packet().mbth.opcode);
    const auto tp = std::span<const uint8_t>(v.frame).subspan(transport_at(v));
    for (size_t n = 0; n < tp.size(); ++n) {
      CAPTURE(n);
      auto r = parse_transport(tp.first(n));
      REQUIRE_FALSE(r.ok());
      if (n < row.header_len + kIcrcLen) {
        const char* where = n < row.header_len ? transport_cut(row, 0, n) : "ICRC";
        CHECK(r.error() == ParseError{ParseErrorCode::kTruncated, n, where});
      } else {  // the parser has no length: it takes the last 4 bytes as the ICRC
        CHECK(r.error() == ParseError{ParseErrorCode::kBadIcrc, n - 4, "ICRC"});
      }
    }
  }
}

TEST_CASE("vectors__bad_icrc_bad_version_unknown_opcode") {
  for (const Vector& v : vectors()) {
    CAPTURE(v.name);
    const size_t at = transport_at(v);
    Bytes tp(v.frame.begin() + at, v.frame.end());
    Bytes c = tp;
    c.back() ^= 0x01;
    CHECK(parse_transport(c).error() == ParseError{ParseErrorCode::kBadIcrc, c.size() - 4, "ICRC"});
    c = tp;
    c[0] = 0x20;
    CHECK(parse_transport(c).error() == ParseError{ParseErrorCode::kBadVersion, 0, "MBTH.version"});
    c = tp;
    c[1] = 0x3F;
    CHECK(parse_transport(c).error() == ParseError{ParseErrorCode::kUnknownOpcode, 1, "MBTH.opcode"});
    if (v.headers.src_ip.is_v4()) {  // no UDP checksum: the ICRC is what catches it
      Bytes f = v.frame;
      f[at + 20] ^= 0x80;  // MBTH.timestamp
      CHECK(parse_frame(f).error() == ParseError{ParseErrorCode::kBadIcrc, f.size() - 4, "ICRC"});
      f = v.frame;
      f[at] = 0x00;
      CHECK(parse_frame(f).error() == ParseError{ParseErrorCode::kBadVersion, at, "MBTH.version"});
    } else {  // IPv6: the mandatory UDP checksum catches it first
      Bytes f = v.frame;
      f[at + 20] ^= 0x80;
      CHECK(parse_frame(f).error() ==
            ParseError{ParseErrorCode::kBadUdpChecksum, at - 2, "UDP.checksum"});
    }
  }
}

TEST_CASE("vectors__padded_to_minimum_and_with_fcs_still_parse") {
  for (const Vector& v : vectors()) {
    CAPTURE(v.name);
    Bytes f = v.frame;
    f.resize(std::max<size_t>(f.size(), 60) + 4, 0);  // pad, then a 4-byte "FCS"
    auto r = parse_frame(f);
    REQUIRE_MESSAGE(r.ok(), r.error().message());
    CHECK(r.value().packet == v.packet());
  }
}

// A UD receive's GRH (docs/protocol.md §13.5) is the frame's own IP header:
// for IPv6 the 40 bytes as sent, for IPv4 20 zero bytes and then the 20.
TEST_CASE("vectors__grh_is_the_frames_ip_header") {
  for (const Vector& v : vectors()) {
    CAPTURE(v.name);
    const auto grh = build_grh(v.headers, v.frame.size() - transport_at(v));
    const size_t ip = ip_len(v);
    Bytes want(kGrhLen - ip, 0);
    want.insert(want.end(), v.frame.begin() + kEthLen, v.frame.begin() + kEthLen + ip);
    CHECK(Bytes(grh.begin(), grh.end()) == want);
  }
}
