// Just enough Ethernet/IP/UDP parsing for the hop: which frames to impair,
// where their ECN bits and UDP payload are. Bounds-checked reads only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

namespace metaroce::impair {

struct FrameInfo {
  int ip_version = 0;       // 4 or 6
  size_t ip_offset = 0;     // IP header start
  size_t ip_header_len = 0;
  uint16_t udp_dst_port = 0;
  size_t payload_offset = 0;  // UDP payload start
  size_t payload_len = 0;     // UDP payload bytes (per the UDP length, within the frame)
};

// Ethernet, at most one 802.1Q/802.1ad tag, IPv4 (first fragment only, no
// later fragments) or IPv6 with UDP as the next header. nullopt: not UDP.
std::optional<FrameInfo> parse_udp(std::span<const uint8_t> frame);

// ECN field of the IP header: 0 Not-ECT, 1 ECT(1), 2 ECT(0), 3 CE.
uint8_t ecn_bits(std::span<const uint8_t> frame, const FrameInfo& fi);
// Sets CE (and fixes the IPv4 header checksum). Only for ECT frames.
void mark_ce(std::span<uint8_t> frame, const FrameInfo& fi);
// IPv4 header checksum over bytes [off, off+len).
uint16_t ipv4_checksum(std::span<const uint8_t> frame, size_t off, size_t len);

}  // namespace metaroce::impair
