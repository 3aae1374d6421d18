// tools/pcap-compare against a captured conversation of two reference
// engines: a clean capture shows no divergence; a field planted in one DUT
// response is named, with its frame number and its rule.
#include <doctest/doctest.h>

#include <string>

#include "tests/pcap/conversation.h"
#include "tests/pcap/plant.h"
#include "tools/ctl/capture.h"
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

// A hand-built capture: four WRITE packets of one burst (one timestamp,
// four paths), then the DUT's ACK of the first two, captured after all
// four (it lags). An ACK whose cum_psn claims one packet more equals the
// state one packet later but for that packet's path: the field named must
// be cum_psn, the trigger says which prefix the ACK belongs to.
std::vector<uint8_t> burst_capture(uint32_t planted_cum, bool with_ud = false) {
  proto::FrameHeaders peer, dut;
  peer.src_ip = dut.dst_ip = proto::IpAddr::v4(kPeerIp);
  peer.dst_ip = dut.src_ip = proto::IpAddr::v4(kDutIp);
  std::vector<uint8_t> file = ctl::pcap_file_header(65535), payload(1024, 7);
  auto add = [&](const proto::FrameHeaders& h, const proto::Packet& p) {
    std::vector<uint8_t> f(proto::encap_length(h) + proto::transport_length(p));
    f.resize(proto::build_frame(h, p, f));
    auto rec = ctl::pcap_record(1000, f, 65535);
    file.insert(file.end(), rec.begin(), rec.end());
  };
  for (uint32_t i = 0; i < 4; ++i) {
    proto::Packet w;
    w.mbth.opcode = Opcode::kWrite;
    w.mbth.dest_qpn = 0x11;
    w.mbth.psn = 100 + i;
    w.mbth.offset = 1024 * i;
    w.mbth.path_id = static_cast<uint8_t>(i);
    w.mbth.timestamp = 5555;
    w.mbth.flags = i == 3 ? proto::kFlagLast | proto::kFlagAckReq : 0;
    w.reth = {0x10000, 0x77, 4096};
    w.payload = payload;
    add(peer, w);
  }
  proto::Packet a;
  a.mbth.opcode = Opcode::kAck;
  a.mbth.dest_qpn = 0x22;
  a.ack.cum_psn = planted_cum;
  a.ack.echo_ts = 5555;
  a.ack.echo_path = 1;  // the second packet's
  add(dut, a);
  a.ack.cum_psn = 104;
  a.ack.echo_path = 3;
  add(dut, a);
  if (with_ud) {  // datagrams of other QPs, both ways (protocol.md §13)
    proto::Packet u;
    u.mbth.opcode = Opcode::kUdSend;
    u.mbth.dest_qpn = 0x99;
    add(dut, u);
    u.mbth.dest_qpn = 0x98;
    add(peer, u);
  }
  return file;
}

TEST_CASE("compare__datagrams_are_counted_not_paired_or_compared") {
  pcapcmp::Report r = compare(burst_capture(102, true));
  INFO(pcapcmp::format_report(r));
  CHECK(!r.first);
  CHECK(r.dut_matched == 2);
  CHECK(r.dut_ud == 1);
  CHECK(r.peer_not_replayed == 1);
  CHECK(pcapcmp::format_report(r).find(", UD: 1,") != std::string::npos);
}

TEST_CASE("compare__a_cum_psn_one_ahead_in_a_burst_is_named_as_the_cum_psn") {
  pcapcmp::Report clean_r = compare(burst_capture(102));
  INFO(pcapcmp::format_report(clean_r));
  CHECK(!clean_r.first);
  CHECK(clean_r.dut_matched == 2);
  pcapcmp::Report r = compare(burst_capture(103));
  INFO(pcapcmp::format_report(r));
  REQUIRE(r.first);
  CHECK(r.first->dut_packet == 5);
  CHECK(r.first->field == "ack.cum_psn");
  CHECK(r.first->expected == "102");
  CHECK(r.first->actual == "103");
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

// A capture that begins after the first SEND: the reference cannot start
// from the DUT's state then (rcv_msn 1). Refused, with the reason.
TEST_CASE("compare__capture_that_starts_mid_conversation_is_refused") {
  std::vector<uint8_t> file = clean().pcap;
  pcap::Capture cap;
  std::string why;
  REQUIRE(pcap::parse_capture(file, &cap, &why) == 0);
  // Cut every record up to and including the last packet of the first SEND.
  uint64_t last = 0;
  for (const pcap::Record& r : cap.records) {
    auto f = proto::parse_frame(r.frame);
    if (f && f.value().packet.mbth.opcode == Opcode::kSend && f.value().packet.mbth.msn == 0) last = r.number;
  }
  REQUIRE(last != 0);
  const pcap::Record& keep = cap.records[last];  // the first record kept
  file.erase(file.begin() + 24, file.begin() + static_cast<long>(keep.file_offset - 16));
  REQUIRE(pcap::parse_capture(file, &cap, &why) == 0);
  pcapcmp::Options o;
  o.dut_ip = proto::IpAddr::v4(kDutIp);
  pcapcmp::Report r;
  CHECK(pcapcmp::compare_capture(cap, o, &r, &why) == EINVAL);
  CHECK_MESSAGE(why.find("start the capture before the QP connects") != std::string::npos, why);
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
