// Raw frame access for the simulated fabric: what a switch or MAC reads and
// rewrites in the bytes of a frame (addresses, UDP ports, ECN, PFC). Reads
// the real Ethernet/IPv4/UDP headers that proto::build_frame wrote; no codec
// of the transport, so switches stay independent of MetaRoCE and RoCEv2.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace metaroce::fabric {

inline constexpr uint16_t kEtherIpv4 = 0x0800;
inline constexpr uint16_t kEtherPfc = 0x8808;  // MAC control (IEEE 802.1Qbb)
inline constexpr size_t kEthLen = 14;
inline constexpr size_t kHeaderPeek = 64;    // bytes a switch needs to look at
inline constexpr uint8_t kDataPriority = 3;  // the lossless class under PFC

// Hosts are numbered 0..N-1; host h has IPv4 10.0.0.0 + h + 1.
inline uint32_t host_ip(uint32_t host) { return 0x0A000000u + host + 1; }
inline uint32_t host_of_ip(uint32_t ip) { return (ip & 0x00FFFFFFu) - 1; }

struct FlowKey {  // the 5-tuple of an IPv4/UDP frame
  uint32_t src_ip = 0, dst_ip = 0;
  uint16_t src_port = 0, dst_port = 0;
  uint8_t protocol = 0;
  uint8_t ecn = 0;
};

uint16_t ether_type(std::span<const uint8_t> f);
// The 5-tuple and ECN bits of an IPv4/UDP frame; nullopt for anything else.
std::optional<FlowKey> parse_ipv4_udp(std::span<const uint8_t> f);
// Sets CE on an ECN-capable IPv4 frame and fixes the header checksum.
// Returns false (frame unchanged) when the frame is not ECT.
bool mark_ce(std::span<uint8_t> f);
// Packet trimming (docs/protocol.md §3.8, NDP): the first `keep` bytes of a
// MetaRoCE IPv4 frame (f: at least its first keep bytes) with the IP DSCP
// set to kTrimmedDscp (ECN kept, the header checksum fixed) and the IP/UDP
// lengths left claiming the whole packet. Empty for anything else.
inline constexpr uint8_t kTrimmedDscp = 1;
std::vector<uint8_t> trim_frame(std::span<const uint8_t> f, size_t keep);
// ECMP hash of the 5-tuple, salted per switch so tiers do not polarize.
uint32_t flow_hash(const FlowKey& k, uint32_t salt);

// PFC: a 64-byte MAC control frame pausing (quanta > 0) or resuming
// (quanta 0) priority kDataPriority.
inline constexpr size_t kPfcFrameLen = 64;
void build_pfc(std::span<uint8_t, kPfcFrameLen> out, uint16_t quanta);
// The quanta for kDataPriority, or nullopt if this is not a PFC frame.
std::optional<uint16_t> parse_pfc(std::span<const uint8_t> f);

uint16_t ipv4_checksum(std::span<const uint8_t> hdr);

// Writes Ethernet + IPv4 + UDP headers for a UDP payload of udp_payload
// bytes into out[0, kIpv4UdpHeaders) (no UDP checksum, as RoCEv2 allows).
inline constexpr size_t kIpv4UdpHeaders = kEthLen + 20 + 8;
void build_ipv4_udp(std::span<uint8_t> out, const FlowKey& k, uint8_t dscp, size_t udp_payload);

}  // namespace metaroce::fabric
