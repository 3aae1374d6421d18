// tools/pcap-compare/pcap_reader.h against good and hostile capture files:
// every cut of a file, a wrong link type, lengths that lie, random bytes.
// Each is a clean error with its reason, never a crash (run under ASan too).
#include <doctest/doctest.h>

#include <cstring>
#include <random>
#include <string>

#include "tests/pcap/conversation.h"
#include "tests/pcap/plant.h"
#include "tools/pcap-compare/compare.h"
#include "tools/pcap-compare/pcap_reader.h"

namespace metaroce::pcaptest {
namespace {

using Bytes = std::vector<uint8_t>;

void put32(Bytes& b, uint32_t v, bool be = false) {
  for (int i = 0; i < 4; ++i) b.push_back(static_cast<uint8_t>(be ? v >> (24 - 8 * i) : v >> (8 * i)));
}
void put16(Bytes& b, uint16_t v) {
  b.push_back(static_cast<uint8_t>(v));
  b.push_back(static_cast<uint8_t>(v >> 8));
}
void pad4(Bytes& b) {
  while (b.size() % 4) b.push_back(0);
}

const Bytes kFrame = [] {
  Bytes f(60, 0);
  f[12] = 0x08;  // an IPv4 EtherType, nothing else: not MetaRoCE
  return f;
}();

// Big-endian classic pcap with nanosecond timestamps and one record.
Bytes pcap_be_ns(uint32_t link = 1) {
  Bytes b;
  for (uint32_t v : {0xA1B23C4Du, 0x00020004u, 0u, 0u, 65535u, link}) put32(b, v, true);
  for (uint32_t v : {7u, 123u, static_cast<uint32_t>(kFrame.size()), static_cast<uint32_t>(kFrame.size())})
    put32(b, v, true);
  b.insert(b.end(), kFrame.begin(), kFrame.end());
  return b;
}

void block(Bytes& b, uint32_t type, const Bytes& body) {
  uint32_t len = static_cast<uint32_t>(12 + ((body.size() + 3) & ~size_t{3}));
  put32(b, type);
  put32(b, len);
  b.insert(b.end(), body.begin(), body.end());
  pad4(b);
  put32(b, len);
}

// pcapng: SHB, IDB (Ethernet, if_tsresol 10^-9), EPB, SPB.
Bytes pcapng(uint16_t link = 1) {
  Bytes b, shb, idb, epb, spb;
  put32(shb, 0x1A2B3C4D);
  put16(shb, 1);
  put16(shb, 0);
  put32(shb, 0xFFFFFFFF);
  put32(shb, 0xFFFFFFFF);
  block(b, 0x0A0D0D0A, shb);
  put16(idb, link);
  put16(idb, 0);
  put32(idb, 0);
  put16(idb, 9);  // if_tsresol
  put16(idb, 1);
  idb.push_back(9);
  pad4(idb);
  put32(idb, 0);  // opt_endofopt
  block(b, 1, idb);
  put32(epb, 0);
  put32(epb, 0);
  put32(epb, 5'000'000'000u & 0xFFFFFFFF);
  put32(epb, static_cast<uint32_t>(kFrame.size()));
  put32(epb, static_cast<uint32_t>(kFrame.size()));
  epb.insert(epb.end(), kFrame.begin(), kFrame.end());
  block(b, 6, epb);
  put32(spb, static_cast<uint32_t>(kFrame.size()));
  spb.insert(spb.end(), kFrame.begin(), kFrame.end());
  block(b, 3, spb);
  return b;
}

int parse(const Bytes& b, pcap::Capture* cap, std::string* why) {
  return pcap::parse_capture(b, cap, why);
}

TEST_CASE("read__big_endian_nanosecond_pcap") {
  pcap::Capture cap;
  std::string why;
  REQUIRE_MESSAGE(parse(pcap_be_ns(), &cap, &why) == 0, why);
  REQUIRE(cap.records.size() == 1);
  CHECK(cap.records[0].time_ns == 7'000'000'123ull);
  CHECK(cap.records[0].frame.size() == kFrame.size());
  CHECK(cap.records[0].file_offset == 40);
}

TEST_CASE("read__pcapng_epb_and_spb") {
  pcap::Capture cap;
  std::string why;
  REQUIRE_MESSAGE(parse(pcapng(), &cap, &why) == 0, why);
  REQUIRE(cap.records.size() == 2);
  CHECK(cap.pcapng);
  CHECK(cap.records[0].time_ns == (5'000'000'000ull & 0xFFFFFFFF));
  CHECK(cap.records[1].frame.size() == kFrame.size());
}

TEST_CASE("read__every_cut_is_whole_records_or_a_truncation_error") {
  for (const Bytes& whole : {pcap_be_ns(), pcapng(), run_conversation(false).pcap}) {
    pcap::Capture full;
    std::string why;
    REQUIRE(parse(whole, &full, &why) == 0);
    for (size_t n = 0; n < whole.size(); ++n) {
      CAPTURE(n);
      pcap::Capture cap;
      int e = parse(Bytes(whole.begin(), whole.begin() + static_cast<long>(n)), &cap, &why);
      if (e == 0) {
        CHECK(cap.records.size() < full.records.size() + (n == whole.size()));
      } else {
        CHECK(e == EINVAL);
        CHECK(cap.records.empty());
        bool named = why.find("truncated") != std::string::npos || why.find("shorter") != std::string::npos;
        CHECK_MESSAGE(named, why);
      }
    }
  }
}

TEST_CASE("read__link_type_that_is_not_ethernet_is_refused_by_name") {
  pcap::Capture cap;
  std::string why;
  CHECK(parse(pcap_be_ns(113), &cap, &why) == EINVAL);
  CHECK(why.find("link type 113 (Linux cooked") != std::string::npos);
  CHECK(parse(pcapng(276), &cap, &why) == EINVAL);
  CHECK(why.find("link type 276") != std::string::npos);
}

TEST_CASE("read__lengths_that_lie") {
  pcap::Capture cap;
  std::string why;
  Bytes b = pcap_be_ns();
  b[24 + 11] = 0xFF;  // incl_len 0x..FF > orig_len
  CHECK(parse(b, &cap, &why) == EINVAL);
  CHECK(why.find("captured length") != std::string::npos);
  b = pcapng();
  b[4] = 13;  // the SHB's length: not a multiple of 4
  CHECK(parse(b, &cap, &why) == EINVAL);
  CHECK(why.find("not a multiple of 4") != std::string::npos);
  b = pcapng();
  size_t epb = 28 + 32;  // after SHB (28) and IDB (32)
  b[epb + 8] = 3;        // EPB names interface 3
  CHECK(parse(b, &cap, &why) == EINVAL);
  CHECK(why.find("undeclared interface") != std::string::npos);
  Bytes garbage = {'h', 'e', 'l', 'l', 'o', '!'};
  CHECK(parse(garbage, &cap, &why) == EINVAL);
  CHECK(why.find("not a pcap or pcapng") != std::string::npos);
}

TEST_CASE("read_capture__missing_file") {
  pcap::Capture cap;
  std::string why;
  CHECK(pcap::read_capture("/nonexistent/x.pcap", &cap, &why) == ENOENT);
  CHECK(why.find("cannot open") != std::string::npos);
}

// Random bytes and random corruptions of a real capture, through the reader
// and the whole comparison: errors or reports, never a crash.
TEST_CASE("hostile__mutated_captures_never_crash") {
  std::mt19937_64 rng(7);
  const Bytes base = run_conversation(true).pcap;
  pcapcmp::Options o;
  o.dut_ip = proto::IpAddr::v4(kDutIp);
  int compared = 0, refused = 0;
  for (int i = 0; i < 300; ++i) {
    Bytes b = base;
    int flips = 1 + static_cast<int>(rng() % 8);
    for (int k = 0; k < flips; ++k) b[rng() % b.size()] ^= static_cast<uint8_t>(1 + rng() % 255);
    if (i % 10 == 0) b.resize(rng() % b.size());
    pcap::Capture cap;
    std::string why;
    if (pcap::parse_capture(std::move(b), &cap, &why)) {
      ++refused;
      CHECK(!why.empty());
      continue;
    }
    pcapcmp::Report r;
    if (pcapcmp::compare_capture(cap, o, &r, &why)) CHECK(!why.empty());
    else ++compared;
  }
  for (int i = 0; i < 100; ++i) {
    Bytes b(rng() % 4096);
    for (auto& x : b) x = static_cast<uint8_t>(rng());
    pcap::Capture cap;
    std::string why;
    CHECK(pcap::parse_capture(std::move(b), &cap, &why) != 0);
  }
  CHECK(compared > 20);  // mutations that leave the capture complete get compared
  MESSAGE("compared " << compared << ", refused " << refused);
}

// Garbage frames inside a valid file: a DUT frame the codec refuses is a
// divergence (its field named), other frames are skipped.
TEST_CASE("hostile__garbage_frames_in_a_valid_file") {
  Conversation c = run_conversation(true);
  pcap::Capture cap;
  std::string why;
  REQUIRE(pcap::parse_capture(c.pcap, &cap, &why) == 0);
  // Cut the first DUT frame's MetaRoCE header in the middle of its MBTH:
  // same record length, but the UDP length now claims more than is there.
  Bytes b = c.pcap;
  for (const pcap::Record& r : cap.records) {
    auto f = proto::parse_frame(r.frame);
    if (!f || !(f.value().headers.src_ip == proto::IpAddr::v4(kDutIp))) continue;
    b[r.file_offset + 14 + 20 + 8] = 0x70;  // MBTH version 7
    break;
  }
  REQUIRE(pcap::parse_capture(b, &cap, &why) == 0);
  pcapcmp::Options o;
  o.dut_ip = proto::IpAddr::v4(kDutIp);
  pcapcmp::Report r;
  REQUIRE_MESSAGE(pcapcmp::compare_capture(cap, o, &r, &why) == 0, why);
  REQUIRE(r.first);
  CHECK(r.first->field == "mbth.version");
}

// A READ_REQ that asks for 1 GiB more than the DUT answered: the reference
// would answer it in full. What it records is bounded; the comparison stops
// with the reason instead of growing without end.
TEST_CASE("hostile__a_request_asking_far_more_than_the_capture_shows") {
  Conversation c = run_conversation(false);
  uint64_t at = find_frame(c.pcap, proto::IpAddr::v4(kPeerIp), proto::Opcode::kReadReq, 1);
  REQUIRE(at != 0);
  REQUIRE(plant(&c.pcap, at, "reth.length", uint64_t{1} << 30) == "");
  pcap::Capture cap;
  std::string why;
  REQUIRE(pcap::parse_capture(c.pcap, &cap, &why) == 0);
  pcapcmp::Options o;
  o.dut_ip = proto::IpAddr::v4(kDutIp);
  pcapcmp::Report r;
  CHECK(pcapcmp::compare_capture(cap, o, &r, &why) == EINVAL);
  CHECK_MESSAGE(why.find("outgrew 4 times the capture") != std::string::npos, why);
}

}  // namespace
}  // namespace metaroce::pcaptest
