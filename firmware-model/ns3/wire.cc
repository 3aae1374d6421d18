#include "firmware-model/ns3/wire.h"

#include <algorithm>

#include "proto/packet.h"

namespace metaroce::fabric {
namespace {
uint16_t be16(std::span<const uint8_t> b, size_t o) {
  return static_cast<uint16_t>(b[o] << 8 | b[o + 1]);
}
uint32_t be32(std::span<const uint8_t> b, size_t o) {
  return uint32_t{b[o]} << 24 | uint32_t{b[o + 1]} << 16 | uint32_t{b[o + 2]} << 8 | b[o + 3];
}
constexpr uint8_t kProtoUdp = 17;
constexpr uint16_t kPfcOpcode = 0x0101;
}  // namespace

uint16_t ether_type(std::span<const uint8_t> f) { return f.size() < kEthLen ? 0 : be16(f, 12); }

uint16_t ipv4_checksum(std::span<const uint8_t> hdr) {
  uint32_t sum = 0;
  for (size_t i = 0; i + 1 < hdr.size(); i += 2) sum += be16(hdr, i);
  while (sum >> 16) sum = (sum & 0xFFFF) + (sum >> 16);
  return static_cast<uint16_t>(~sum);
}

std::optional<FlowKey> parse_ipv4_udp(std::span<const uint8_t> f) {
  if (ether_type(f) != kEtherIpv4 || f.size() < kEthLen + 20) return std::nullopt;
  const size_t ip = kEthLen;
  const size_t ihl = (f[ip] & 0x0F) * 4u;
  if ((f[ip] >> 4) != 4 || ihl < 20 || f.size() < ip + ihl + 8) return std::nullopt;
  if (f[ip + 9] != kProtoUdp) return std::nullopt;
  FlowKey k;
  k.ecn = f[ip + 1] & 3;
  k.protocol = kProtoUdp;
  k.src_ip = be32(f, ip + 12);
  k.dst_ip = be32(f, ip + 16);
  k.src_port = be16(f, ip + ihl);
  k.dst_port = be16(f, ip + ihl + 2);
  return k;
}

bool mark_ce(std::span<uint8_t> f) {
  auto k = parse_ipv4_udp(f);
  if (!k || k->ecn == 0 || k->ecn == 3) return false;
  const size_t ip = kEthLen;
  const size_t ihl = (f[ip] & 0x0F) * 4u;
  f[ip + 1] |= 3;
  f[ip + 10] = 0;
  f[ip + 11] = 0;
  const uint16_t c = ipv4_checksum(f.subspan(ip, ihl));
  f[ip + 10] = static_cast<uint8_t>(c >> 8);
  f[ip + 11] = static_cast<uint8_t>(c);
  return true;
}

std::vector<uint8_t> trim_frame(std::span<const uint8_t> f, size_t keep) {
  auto k = parse_ipv4_udp(f);
  if (!k || k->dst_port != proto::kUdpPort || f.size() < keep) return {};
  std::vector<uint8_t> t(f.begin(), f.begin() + static_cast<std::ptrdiff_t>(keep));
  const size_t ip = kEthLen;
  const size_t ihl = (t[ip] & 0x0F) * 4u;
  t[ip + 1] = static_cast<uint8_t>(kTrimmedDscp << 2 | (t[ip + 1] & 3));
  t[ip + 10] = 0;
  t[ip + 11] = 0;
  const uint16_t c = ipv4_checksum(std::span<const uint8_t>(t).subspan(ip, ihl));
  t[ip + 10] = static_cast<uint8_t>(c >> 8);
  t[ip + 11] = static_cast<uint8_t>(c);
  return t;
}

uint32_t flow_hash(const FlowKey& k, uint32_t salt) {
  // splitmix64 finalizer over the packed tuple: cheap, well mixed.
  uint64_t x =
      (uint64_t{k.src_ip} << 32 | k.dst_ip) ^
      (uint64_t{k.src_port} << 48 | uint64_t{k.dst_port} << 32 | uint64_t{k.protocol} << 24) ^
      (uint64_t{salt} * 0x9E3779B97F4A7C15ull);
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 31;
  return static_cast<uint32_t>(x);
}

void build_ipv4_udp(std::span<uint8_t> f, const FlowKey& k, uint8_t dscp, size_t udp_payload) {
  auto put16 = [&](size_t o, uint32_t v) {
    f[o] = static_cast<uint8_t>(v >> 8);
    f[o + 1] = static_cast<uint8_t>(v);
  };
  auto put32 = [&](size_t o, uint32_t v) {
    put16(o, v >> 16);
    put16(o + 2, v & 0xFFFF);
  };
  std::fill(f.begin(), f.begin() + kIpv4UdpHeaders, 0);
  const uint32_t dst_host = host_of_ip(k.dst_ip), src_host = host_of_ip(k.src_ip);
  f[0] = 0x02;  // locally administered MACs named by host
  put32(2, dst_host);
  f[6] = 0x02;
  put32(8, src_host);
  put16(12, kEtherIpv4);
  const size_t ip = kEthLen;
  f[ip] = 0x45;
  f[ip + 1] = static_cast<uint8_t>(dscp << 2 | (k.ecn & 3));
  put16(ip + 2, static_cast<uint32_t>(20 + 8 + udp_payload));
  f[ip + 6] = 0x40;  // DF
  f[ip + 8] = 64;
  f[ip + 9] = kProtoUdp;
  put32(ip + 12, k.src_ip);
  put32(ip + 16, k.dst_ip);
  put16(ip + 10, ipv4_checksum(f.subspan(ip, 20)));
  put16(ip + 20, k.src_port);
  put16(ip + 22, k.dst_port);
  put16(ip + 24, static_cast<uint32_t>(8 + udp_payload));
}

void build_pfc(std::span<uint8_t, kPfcFrameLen> out, uint16_t quanta) {
  std::fill(out.begin(), out.end(), 0);
  static constexpr uint8_t kDst[6] = {0x01, 0x80, 0xC2, 0x00, 0x00, 0x01};
  std::copy(std::begin(kDst), std::end(kDst), out.begin());
  out[12] = kEtherPfc >> 8;
  out[13] = kEtherPfc & 0xFF;
  out[14] = kPfcOpcode >> 8;
  out[15] = kPfcOpcode & 0xFF;
  out[16] = 0;
  out[17] = 1u << kDataPriority;  // class-enable vector
  const size_t q = 18 + 2 * kDataPriority;
  out[q] = static_cast<uint8_t>(quanta >> 8);
  out[q + 1] = static_cast<uint8_t>(quanta);
}

std::optional<uint16_t> parse_pfc(std::span<const uint8_t> f) {
  if (ether_type(f) != kEtherPfc || f.size() < 34 || be16(f, 14) != kPfcOpcode) return std::nullopt;
  if (!(be16(f, 16) & (1u << kDataPriority))) return std::nullopt;
  return be16(f, 18 + 2 * kDataPriority);
}

}  // namespace metaroce::fabric
