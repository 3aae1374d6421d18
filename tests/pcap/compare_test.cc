// tools/pcap-compare against a captured conversation of two reference
// engines: a clean capture shows no divergence; a field planted in one DUT
// response is named, with its frame number and its rule.
#include <doctest/doctest.h>

#include <string>

#include "tests/pcap/conversation.h"
#include "tests/pcap/plant.h"
#include "tools/pcap-compare/compare.h"
#include "tools/pcap-compare/rules.h"

namespace metaroce::pcaptest {
namespace {

using proto::Opcode;

const Conversation& clean() {
  static const Conversation c = run_conversation(true);
  return c;
}

pcapcmp::Report compare(const std::vector<uint8_t>& file, pcapcmp::Options o = {}) {
  if (!o.dut_mac) o.dut_ip = proto::IpAddr::v4(kDutIp);
  pcap::Capture cap;
  std::string why;
  REQUIRE_MESSAGE(pcap::parse_capture(file, &cap, &why) == 0, why);
  pcapcmp::Report r;
  REQUIRE_MESSAGE(pcapcmp::compare_capture(cap, o, &r, &why) == 0, why);
  return r;
}

TEST_CASE("the conversation did what the cases below rely on") {
  const Conversation& c = clean();
  CHECK(c.lost == 1);
  CHECK(c.peer_completions == 8);
  CHECK(c.peer_errors == 1);  // the bad R_Key
  CHECK(find_frame(c.pcap, proto::IpAddr::v4(kDutIp), Opcode::kAck, 1,
                   [](const proto::Packet& p) { return p.ack.sack != 0; }) != 0);
  CHECK(find_frame(c.pcap, proto::IpAddr::v4(kDutIp), Opcode::kNack, 1) != 0);
}

TEST_CASE("compare__clean_conversation_has_no_divergence") {
  pcapcmp::Report r = compare(clean().pcap);
  INFO(pcapcmp::format_report(r));
  CHECK(!r.first);
  CHECK(r.divergences == 0);
  CHECK(r.dut_compared > 10);
  CHECK(r.dut_matched == r.dut_compared);
  CHECK(r.dut_requests == 1);
  CHECK(r.peer_replayed > 15);
  CHECK(pcapcmp::format_report(r).find("result: no divergence") != std::string::npos);
}

TEST_CASE("compare__dut_named_by_mac_finds_the_same") {
  pcapcmp::Options o;
  o.dut_mac = proto::MacAddr{2, 0, 0, 0, 0, 1};
  pcapcmp::Report r = compare(clean().pcap, o);
  INFO(pcapcmp::format_report(r));
  CHECK(!r.first);
  CHECK(r.dut_matched == compare(clean().pcap).dut_matched);
}

struct PlantCase {
  const char* name;
  Opcode op;
  bool (*want)(const proto::Packet&);
  const char* plant_field;
  uint64_t delta;
  const char* reported;  // the field pcap-compare must name
  const char* section;
};

bool with_sack(const proto::Packet& p) { return p.ack.sack != 0; }
bool any(const proto::Packet&) { return true; }
bool placed_read(const proto::Packet& p) { return p.mbth.offset == 0 && p.payload.size() > 0 && p.payload[0] == 1; }

const PlantCase kCases[] = {
    {"SACK bitmap", Opcode::kAck, with_sack, "ack.sack", 1ull << 40, "ack.sack", "§3.7, §6.4"},
    {"cumulative PSN", Opcode::kAck, any, "ack.cum_psn", 1, "ack.cum_psn", "§3.7, §6.4"},
    {"receive MSN", Opcode::kAck, with_sack, "ack.rcv_msn", 3, "ack.rcv_msn", "§3.7, §6.2"},
    {"echoed timestamp", Opcode::kAck, any, "ack.echo_ts", 77, "ack.echo_ts", "§3.7, §6.6"},
    {"ACK addressed to another QP", Opcode::kAck, any, "mbth.dest_qpn", 1, "mbth.dest_qpn", "§3.1"},
    {"NACK code", Opcode::kNack, any, "nack.reason", 1, "nack.reason", "§3.8, §6.4"},
    {"NACKed PSN", Opcode::kNack, any, "nack.psn", 1, "nack.psn", "§3.8, §6.4"},
    {"READ_RESP MSN", Opcode::kReadResp, any, "mbth.msn", 1, "read_resp.mbth.msn", "§6.2, §6.5"},
    {"READ_RESP payload byte", Opcode::kReadResp, placed_read, "read_resp.payload", 0x40, "read_resp.payload", "§6.5"},
    // The second atomic: memory the first one determined (the first one's
    // target was never written in the capture, so it is seeded from the DUT).
    {"atomic original value", Opcode::kAtomicResp, any, "atomic_resp.original", 1, "atomic_resp.original",
     "§3.6, §6.7"},
};

TEST_CASE("compare__planted_divergence_is_named") {
  for (const PlantCase& pc : kCases) {
    std::string name = pc.name;
    CAPTURE(name);
    std::vector<uint8_t> file = clean().pcap;
    int nth = pc.op == Opcode::kAtomicResp ? 2 : 1;
    uint64_t at = find_frame(file, proto::IpAddr::v4(kDutIp), pc.op, nth, pc.want);
    REQUIRE(at != 0);
    REQUIRE(plant(&file, at, pc.plant_field, pc.delta) == "");
    pcapcmp::Report r = compare(file);
    INFO(pcapcmp::format_report(r));
    REQUIRE(r.first);
    CHECK(r.first->field == pc.reported);
    CHECK(r.first->dut_packet == at);
    CHECK(std::string(pcapcmp::rule_for(r.first->field).section) == pc.section);
    CHECK(pcapcmp::format_report(r).find(std::string("field:    ") + pc.reported) != std::string::npos);
  }
}

TEST_CASE("compare__dut_frame_with_a_bad_icrc_is_a_divergence") {
  std::vector<uint8_t> file = clean().pcap;
  uint64_t at = find_frame(file, proto::IpAddr::v4(kDutIp), Opcode::kAck, 2);
  REQUIRE(at != 0);
  pcap::Capture cap;
  std::string why;
  REQUIRE(pcap::parse_capture(file, &cap, &why) == 0);
  const pcap::Record& rec = cap.records[at - 1];
  file[rec.file_offset + rec.frame.size() - 1] ^= 0xFF;  // the ICRC's last byte
  pcapcmp::Report r = compare(file);
  REQUIRE(r.first);
  CHECK(r.first->field == "icrc");
  CHECK(r.first->dut_packet == at);
}

// A capture that lost a frame the DUT then acknowledged cannot be
// compared: each later ACK would look wrong. It is refused, and says why.
TEST_CASE("compare__capture_that_lost_an_acknowledged_frame_is_refused") {
  std::vector<uint8_t> file = clean().pcap;
  uint64_t at = find_frame(file, proto::IpAddr::v4(kPeerIp), Opcode::kSend, 1);
  REQUIRE(at != 0);
  pcap::Capture cap;
  std::string why;
  REQUIRE(pcap::parse_capture(file, &cap, &why) == 0);
  const pcap::Record& rec = cap.records[at - 1];
  auto from = file.begin() + static_cast<long>(rec.file_offset - 16);  // its record header
  file.erase(from, from + 16 + static_cast<long>(rec.frame.size()));
  REQUIRE(pcap::parse_capture(file, &cap, &why) == 0);
  pcapcmp::Options o;
  o.dut_ip = proto::IpAddr::v4(kDutIp);
  pcapcmp::Report r;
  CHECK(pcapcmp::compare_capture(cap, o, &r, &why) == EINVAL);
  CHECK_MESSAGE(why.find("the capture is incomplete: the DUT acknowledged 1 request PSNs") != std::string::npos, why);
  CHECK(why.find("dumpcap -B") != std::string::npos);
}

TEST_CASE("compare__refuses_without_a_dut_side") {
  pcap::Capture cap;
  std::string why;
  REQUIRE(pcap::parse_capture(clean().pcap, &cap, &why) == 0);
  pcapcmp::Report r;
  CHECK(pcapcmp::compare_capture(cap, {}, &r, &why) == EINVAL);
  CHECK(why.find("--dut-ip") != std::string::npos);
  pcapcmp::Options o;
  o.dut_ip = proto::IpAddr::v4(0x0A000009);  // in no frame
  CHECK(pcapcmp::compare_capture(cap, o, &r, &why) == EINVAL);
  CHECK(why.find("cannot pair") != std::string::npos);
}

}  // namespace
}  // namespace metaroce::pcaptest
