// Just enough raw-frame access for switches and links: where a frame goes,
// its path entropy, its ECN bits. Reads bytes directly (no codec) so the
// network stays independent of the engine's parser.
#pragma once

#include <cstdint>
#include <optional>
#include <span>

#include "proto/packet.h"

namespace metaroce::simnet {

struct FrameInfo {
  proto::IpAddr src_ip;
  proto::IpAddr dst_ip;
  uint16_t src_port = 0;
  uint8_t ecn = 0;
  size_t l4_offset = 0;  // first byte of the UDP header
};

std::optional<FrameInfo> inspect_frame(std::span<const uint8_t> f);
// Sets ECN to CE (0b11) if the packet is ECN-capable; fixes the IPv4 header
// checksum. Returns true if it marked.
bool mark_ce(std::span<uint8_t> f);
// One's-complement IPv4 header checksum over `hdr` (checksum field included
// as stored).
uint16_t ipv4_checksum(std::span<const uint8_t> hdr);

}  // namespace metaroce::simnet
