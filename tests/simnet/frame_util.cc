#include "tests/simnet/frame_util.h"

#include <algorithm>

namespace metaroce::simnet {
namespace {
constexpr uint16_t kEtherIpv4 = 0x0800;
constexpr uint16_t kEtherIpv6 = 0x86DD;
uint16_t be16(std::span<const uint8_t> b, size_t o) {
  return static_cast<uint16_t>(b[o] << 8 | b[o + 1]);
}
}  // namespace

uint16_t ipv4_checksum(std::span<const uint8_t> hdr) {
  uint32_t sum = 0;
  for (size_t i = 0; i + 1 < hdr.size(); i += 2) sum += be16(hdr, i);
  while (sum >> 16) sum = (sum & 0xFFFF) + (sum >> 16);
  return static_cast<uint16_t>(~sum);
}

std::optional<FrameInfo> inspect_frame(std::span<const uint8_t> f) {
  if (f.size() < proto::kEthLen) return std::nullopt;
  FrameInfo info;
  const uint16_t type = be16(f, 12);
  const size_t ip = proto::kEthLen;
  if (type == kEtherIpv4) {
    if (f.size() < ip + proto::kIpv4Len) return std::nullopt;
    const size_t ihl = (f[ip] & 0x0F) * 4u;
    info.ecn = f[ip + 1] & 3;
    uint32_t src = 0, dst = 0;
    for (int i = 0; i < 4; ++i) {
      src = src << 8 | f[ip + 12 + i];
      dst = dst << 8 | f[ip + 16 + i];
    }
    info.src_ip = proto::IpAddr::v4(src);
    info.dst_ip = proto::IpAddr::v4(dst);
    info.l4_offset = ip + std::max<size_t>(ihl, proto::kIpv4Len);
  } else if (type == kEtherIpv6) {
    if (f.size() < ip + proto::kIpv6Len) return std::nullopt;
    info.ecn = (f[ip + 1] >> 4) & 3;
    std::copy_n(f.begin() + ip + 8, 16, info.src_ip.bytes.begin());
    std::copy_n(f.begin() + ip + 24, 16, info.dst_ip.bytes.begin());
    info.l4_offset = ip + proto::kIpv6Len;
  } else {
    return std::nullopt;
  }
  if (f.size() < info.l4_offset + proto::kUdpLen) return std::nullopt;
  info.src_port = be16(f, info.l4_offset);
  return info;
}

bool mark_ce(std::span<uint8_t> f) {
  auto info = inspect_frame(f);
  if (!info || info->ecn == 0 || info->ecn == 3) return false;
  const size_t ip = proto::kEthLen;
  if (be16(f, 12) == kEtherIpv4) {
    const size_t ihl = std::max<size_t>((f[ip] & 0x0F) * 4u, proto::kIpv4Len);
    f[ip + 1] |= 3;
    f[ip + 10] = 0;
    f[ip + 11] = 0;
    const uint16_t c = ipv4_checksum(f.subspan(ip, ihl));
    f[ip + 10] = static_cast<uint8_t>(c >> 8);
    f[ip + 11] = static_cast<uint8_t>(c);
  } else {
    f[ip + 1] |= 0x30;
  }
  return true;
}

}  // namespace metaroce::simnet
