// pcap-compare's core: take a capture of a device under test (DUT) talking
// MetaRoCE to a peer, replay the peer's request packets through the
// reference engine configured as the DUT's QP, and compare what the DUT
// answered with what the reference answers, field by field, through the
// one codec (proto/packet.h). docs/vendor-guide.md §Capture and compare.
//
// What is compared: every response the DUT sent to the peer's requests
// (ACK, NACK, READ_RESP, ATOMIC_RESP, PROBE_REPLY) and whether each frame
// the DUT sent passes the codec. What is not: timing, how ACKs are
// coalesced, the ACK credit, the DUT's own requests (its application drives
// them). An ACK is compared at a matching point: against the reference's
// state after some prefix of the peer packets that the capture shows before
// it (one that is consistent with the ACKs before it), so a DUT that ACKs
// every packet and one that ACKs every eighth compare the same.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "proto/packet.h"
#include "tools/pcap-compare/pcap_reader.h"

namespace metaroce::pcapcmp {

struct Options {
  std::optional<proto::IpAddr> dut_ip;    // which side is the DUT: its IP ...
  std::optional<proto::MacAddr> dut_mac;  // ... or its MAC
  std::vector<std::pair<uint32_t, uint32_t>> pairs;  // DUT QPN, peer QPN (else learned)
  size_t max_pages = size_t{1} << 18;     // simulated memory bound (4 KiB pages: 1 GiB)
};

struct Divergence {
  uint64_t dut_packet = 0;   // frame number of the DUT's packet; 0: a response it never sent
  uint64_t peer_packet = 0;  // the peer packet the reference's answer follows (0: none)
  std::string what;          // "ACK to QPN 0x000012"
  std::string field;         // "ack.sack"; its rule: rules.h rule_for()
  std::string expected, actual;
  std::string context;       // the reference state compared with
};

struct Report {
  uint64_t frames = 0, metaroce = 0, other = 0;
  uint64_t peer_replayed = 0;  // peer requests and probes fed to the reference
  uint64_t peer_not_replayed = 0;  // the peer's ACKs, responses, CM and frames the codec rejects
  uint64_t dut_compared = 0, dut_matched = 0;  // DUT responses (and malformed DUT frames)
  uint64_t dut_requests = 0, dut_cm = 0, dut_ud = 0;  // not compared
  uint64_t dut_unpaired = 0;  // DUT responses to a QPN of no pair (not compared)
  uint64_t divergences = 0;
  std::vector<std::string> qps;  // "DUT QPN 0x000012 <-> peer QPN 0x000034 (10.0.0.2) ..."
  std::optional<Divergence> first;
};

// 0 (the report says whether it diverged), or EINVAL with *why when the
// capture cannot be compared (no DUT side given, QPs cannot be paired,
// frames cut by the snaplen, memory bound).
int compare_capture(const pcap::Capture& cap, const Options& opt, Report* out, std::string* why);

// The report for people: counts, the first divergence with its rule, and
// what was not compared.
std::string format_report(const Report& r);

// "10.0.0.1" / "fd77::1" and "02:00:00:00:00:01"; false if malformed.
bool parse_ip(const std::string& s, proto::IpAddr* out);
bool parse_mac(const std::string& s, proto::MacAddr* out);

}  // namespace metaroce::pcapcmp
