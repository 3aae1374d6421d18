#include "tools/impair/frame.h"

namespace metaroce::impair {

namespace {

uint16_t be16(std::span<const uint8_t> b, size_t off) {
  return static_cast<uint16_t>(b[off] << 8 | b[off + 1]);
}

constexpr uint16_t kEthIpv4 = 0x0800, kEthIpv6 = 0x86DD, kEthVlan = 0x8100, kEthQinQ = 0x88A8;
constexpr uint8_t kIpProtoUdp = 17;

// Returns the UDP header offset and fills ip fields, or 0.
size_t ip_to_udp(std::span<const uint8_t> f, size_t ip, uint16_t type, FrameInfo* fi) {
  if (type == kEthIpv4) {
    if (f.size() < ip + 20 || (f[ip] >> 4) != 4) return 0;
    size_t ihl = (f[ip] & 0x0f) * 4u;
    uint16_t frag = be16(f, ip + 6);
    if (ihl < 20 || f.size() < ip + ihl || f[ip + 9] != kIpProtoUdp || (frag & 0x1fff) != 0) return 0;
    fi->ip_version = 4;
    fi->ip_header_len = ihl;
  } else if (type == kEthIpv6) {
    if (f.size() < ip + 40 || (f[ip] >> 4) != 6 || f[ip + 6] != kIpProtoUdp) return 0;
    fi->ip_version = 6;
    fi->ip_header_len = 40;
  } else {
    return 0;
  }
  fi->ip_offset = ip;
  return ip + fi->ip_header_len;
}

}  // namespace

std::optional<FrameInfo> parse_udp(std::span<const uint8_t> f) {
  if (f.size() < 14) return std::nullopt;
  size_t off = 12;
  uint16_t type = be16(f, off);
  if (type == kEthVlan || type == kEthQinQ) {
    if (f.size() < 18) return std::nullopt;
    off += 4;
    type = be16(f, off);
  }
  FrameInfo fi;
  size_t udp = ip_to_udp(f, off + 2, type, &fi);
  if (udp == 0 || f.size() < udp + 8) return std::nullopt;
  fi.udp_dst_port = be16(f, udp + 2);
  size_t udp_len = be16(f, udp + 4);
  fi.payload_offset = udp + 8;
  size_t avail = f.size() - fi.payload_offset;
  fi.payload_len = udp_len >= 8 && udp_len - 8 <= avail ? udp_len - 8 : avail;
  return fi;
}

uint8_t ecn_bits(std::span<const uint8_t> f, const FrameInfo& fi) {
  if (fi.ip_version == 4) return f[fi.ip_offset + 1] & 3;
  return (f[fi.ip_offset + 1] >> 4) & 3;
}

uint16_t ipv4_checksum(std::span<const uint8_t> f, size_t off, size_t len) {
  uint32_t sum = 0;
  for (size_t i = 0; i + 1 < len; i += 2) sum += be16(f, off + i);
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return static_cast<uint16_t>(~sum);
}

void mark_ce(std::span<uint8_t> f, const FrameInfo& fi) {
  size_t ip = fi.ip_offset;
  if (fi.ip_version == 6) {
    f[ip + 1] |= 0x30;  // traffic class bits 1..0 sit in byte 1 bits 5..4
    return;
  }
  f[ip + 1] |= 3;
  f[ip + 10] = f[ip + 11] = 0;
  uint16_t c = ipv4_checksum(f, ip, fi.ip_header_len);
  f[ip + 10] = static_cast<uint8_t>(c >> 8);
  f[ip + 11] = static_cast<uint8_t>(c);
}

}  // namespace metaroce::impair
