#include "tools/ctl/capture.h"

#include <doctest/doctest.h>

namespace metaroce::ctl {
namespace {

std::vector<uint8_t> udp4_frame(uint16_t dport, size_t payload) {
  std::vector<uint8_t> f(14 + 20 + 8 + payload, 0);
  f[12] = 0x08;  // IPv4
  f[14] = 0x45;
  f[14 + 9] = 17;  // UDP
  f[34 + 2] = static_cast<uint8_t>(dport >> 8);
  f[34 + 3] = static_cast<uint8_t>(dport);
  return f;
}

TEST_CASE("capture__only_udp_4796_frames_and_short_ones_are_refused") {
  CHECK(is_metaroce_frame(udp4_frame(4796, 40)));
  CHECK_FALSE(is_metaroce_frame(udp4_frame(4791, 40)));
  std::vector<uint8_t> f = udp4_frame(4796, 0);
  for (size_t n = 0; n < f.size(); n++) CHECK_FALSE(is_metaroce_frame({f.data(), n}));
  f[14] = 0x4f;  // IHL 15: the UDP header would lie past the frame
  CHECK_FALSE(is_metaroce_frame(f));
  std::vector<uint8_t> v6(14 + 40 + 8, 0);
  v6[12] = 0x86;
  v6[13] = 0xdd;
  v6[14 + 6] = 17;
  v6[54 + 2] = 0x12;
  v6[54 + 3] = 0xbc;  // 4796
  CHECK(is_metaroce_frame(v6));
}

TEST_CASE("capture__pcap_header_and_records") {
  std::vector<uint8_t> h = pcap_file_header(9216);
  REQUIRE(h.size() == 24);
  CHECK((h[0] == 0xd4 && h[1] == 0xc3 && h[2] == 0xb2 && h[3] == 0xa1));
  CHECK(h[20] == 1);  // Ethernet
  std::vector<uint8_t> frame(100, 0xab);
  std::vector<uint8_t> r = pcap_record(3'000'005, frame, 64);
  REQUIRE(r.size() == 16 + 64);
  CHECK(r[0] == 3);   // seconds
  CHECK(r[4] == 5);   // microseconds
  CHECK(r[8] == 64);  // captured
  CHECK(r[12] == 100);  // on the wire
}

}  // namespace
}  // namespace metaroce::ctl
