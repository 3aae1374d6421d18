// MetaRoCE v1 codec: transport (MBTH..ICRC) and full frames
// (Ethernet/IPv4|IPv6/UDP). Normative spec: docs/protocol.md.
//
// Both directions are driven by kOpcodeTable (proto/opcode.h): the opcode
// row says which extension headers follow, and kExtCodecs below has one
// read and one write function per extension header, side by side.
#include <algorithm>
#include <cinttypes>
#include <cstdio>

#include "proto/bytes.h"
#include "proto/opcode.h"
#include "proto/packet.h"

namespace metaroce::proto {
namespace {

// Bits of the MBTH flags word and ACKH ack_flags that v1 defines; the rest
// are reserved: written 0, ignored on parse (docs/protocol.md §3, §9).
constexpr uint16_t kMbthFlagsMask = kFlagSolicited | kFlagAckReq | kFlagRetransmit | kFlagLast;
constexpr uint8_t kAckFlagsMask = kAckFlagCe | kAckFlagDup;
constexpr uint8_t kRnrTimerMask = 0x1F;
constexpr uint32_t kQpnMask = 0xFFFFFF;

// ---- extension headers: one read and one write per header ----

void read_reth(Reader& r, Packet& p) {
  p.reth.va = r.u64();
  p.reth.rkey = r.u32();
  p.reth.length = r.u32();
}
void write_reth(Writer& w, const Packet& p) {
  w.u64(p.reth.va);
  w.u32(p.reth.rkey);
  w.u32(p.reth.length);
}

void read_seth(Reader& r, Packet& p) { p.seth.length = r.u32(); }
void write_seth(Writer& w, const Packet& p) { w.u32(p.seth.length); }

void read_imm(Reader& r, Packet& p) { p.imm = r.u32(); }
void write_imm(Writer& w, const Packet& p) { w.u32(p.imm); }

void read_ieth(Reader& r, Packet& p) { p.ieth.rkey = r.u32(); }
void write_ieth(Writer& w, const Packet& p) { w.u32(p.ieth.rkey); }

void read_atomic(Reader& r, Packet& p) {
  p.atomic.va = r.u64();
  p.atomic.rkey = r.u32();
  p.atomic.swap_add = r.u64();
  p.atomic.compare = r.u64();
}
void write_atomic(Writer& w, const Packet& p) {
  w.u64(p.atomic.va);
  w.u32(p.atomic.rkey);
  w.u64(p.atomic.swap_add);
  w.u64(p.atomic.compare);
}

void read_atomic_ack(Reader& r, Packet& p) { p.atomic_ack.original = r.u64(); }
void write_atomic_ack(Writer& w, const Packet& p) { w.u64(p.atomic_ack.original); }

void read_ackh(Reader& r, Packet& p) {
  p.ack.cum_psn = r.u32();
  p.ack.sack = r.u64();
  p.ack.echo_ts = r.u32();
  p.ack.credit = r.u32();
  p.ack.ce_count = r.u16();
  p.ack.echo_path = r.u8();
  p.ack.ack_flags = r.u8() & kAckFlagsMask;
  p.ack.rcv_msn = r.u32();
}
void write_ackh(Writer& w, const Packet& p) {
  w.u32(p.ack.cum_psn);
  w.u64(p.ack.sack);
  w.u32(p.ack.echo_ts);
  w.u32(p.ack.credit);
  w.u16(p.ack.ce_count);
  w.u8(p.ack.echo_path);
  w.u8(p.ack.ack_flags & kAckFlagsMask);
  w.u32(p.ack.rcv_msn);
}

void read_nackh(Reader& r, Packet& p) {
  p.nack.reason = static_cast<NackReason>(r.u8());  // unknown values pass through (§3.8)
  p.nack.rnr_timer = r.u8() & kRnrTimerMask;
  r.skip(2);  // reserved
  p.nack.psn = r.u32();
}
void write_nackh(Writer& w, const Packet& p) {
  w.u8(static_cast<uint8_t>(p.nack.reason));
  w.u8(p.nack.rnr_timer & kRnrTimerMask);
  w.zeros(2);
  w.u32(p.nack.psn);
}

void read_probeh(Reader& r, Packet& p) {
  p.probe.nonce = r.u32();
  p.probe.echo_ts = r.u32();
}
void write_probeh(Writer& w, const Packet& p) {
  w.u32(p.probe.nonce);
  w.u32(p.probe.echo_ts);
}

// CMH (docs/protocol.md §12.2). Reserved bits are written 0 and masked on
// parse, like every header's.
constexpr uint8_t kCmTimeoutMask = 0x1F;
constexpr uint8_t kCmRetriesMask = 0x0F;
constexpr uint8_t kCmMtuMask = 0x0F;
constexpr uint8_t kCmRetryMask = 0x07;
constexpr uint8_t kCmSrqBit = 0x40;

void read_cmh(Reader& r, Packet& p) {
  Cmh& c = p.cm;
  c.local_comm_id = r.u32();
  c.remote_comm_id = r.u32();
  c.service_id = r.u64();
  c.qp_type = r.u8();
  c.qpn = r.u24();
  c.start_psn = r.u32();
  c.qkey = r.u32();
  c.src_port = r.u16();
  c.responder_resources = r.u8();
  c.initiator_depth = r.u8();
  c.cm_timeout = r.u8() & kCmTimeoutMask;
  c.max_cm_retries = r.u8() & kCmRetriesMask;
  c.path_mtu = r.u8() & kCmMtuMask;
  const uint8_t retry = r.u8();
  c.retry_count = retry & kCmRetryMask;
  c.rnr_retry = (retry >> 3) & kCmRetryMask;
  c.srq = (retry & kCmSrqBit) != 0;
  c.reason = r.u16();
  c.message = r.u8();
  r.skip(1);  // reserved
}
void write_cmh(Writer& w, const Packet& p) {
  const Cmh& c = p.cm;
  w.u32(c.local_comm_id);
  w.u32(c.remote_comm_id);
  w.u64(c.service_id);
  w.u8(c.qp_type);
  w.u24(c.qpn & kQpnMask);
  w.u32(c.start_psn);
  w.u32(c.qkey);
  w.u16(c.src_port);
  w.u8(c.responder_resources);
  w.u8(c.initiator_depth);
  w.u8(c.cm_timeout & kCmTimeoutMask);
  w.u8(c.max_cm_retries & kCmRetriesMask);
  w.u8(c.path_mtu & kCmMtuMask);
  w.u8(static_cast<uint8_t>((c.retry_count & kCmRetryMask) | (c.rnr_retry & kCmRetryMask) << 3 |
                            (c.srq ? kCmSrqBit : 0)));
  w.u16(c.reason);
  w.u8(c.message);
  w.zeros(1);
}

// DETH (docs/protocol.md §13.2): the reserved byte is written 0, ignored.
void read_deth(Reader& r, Packet& p) {
  p.deth.qkey = r.u32();
  r.skip(1);
  p.deth.src_qpn = r.u24();
}
void write_deth(Writer& w, const Packet& p) {
  w.u32(p.deth.qkey);
  w.zeros(1);
  w.u24(p.deth.src_qpn & kQpnMask);
}

struct ExtCodec {
  void (*read)(Reader&, Packet&);
  void (*write)(Writer&, const Packet&);
};
// Indexed by Ext, same order as kExtTable.
constexpr std::array<ExtCodec, kExtTable.size()> kExtCodecs = {{
    {nullptr, nullptr},
    {read_reth, write_reth},
    {read_seth, write_seth},
    {read_imm, write_imm},
    {read_atomic, write_atomic},
    {read_atomic_ack, write_atomic_ack},
    {read_ackh, write_ackh},
    {read_nackh, write_nackh},
    {read_probeh, write_probeh},
    {read_cmh, write_cmh},
    {read_deth, write_deth},
    {read_ieth, write_ieth},
}};

// ---- MBTH ----

void write_mbth(Writer& w, const Mbth& m) {
  w.u8(static_cast<uint8_t>((m.version & 0x0F) << 4));  // low nibble reserved
  w.u8(static_cast<uint8_t>(m.opcode));
  w.u16(m.flags & kMbthFlagsMask);
  w.u8(m.path_id);
  w.u24(m.dest_qpn & kQpnMask);
  w.u32(m.psn);
  w.u32(m.msn);
  w.u32(m.offset);
  w.u32(m.timestamp);
}

void read_mbth(Reader& r, Mbth& m) {
  m.version = r.u8() >> 4;
  m.opcode = static_cast<Opcode>(r.u8());
  m.flags = r.u16() & kMbthFlagsMask;
  m.path_id = r.u8();
  m.dest_qpn = r.u24();
  m.psn = r.u32();
  m.msn = r.u32();
  m.offset = r.u32();
  m.timestamp = r.u32();
}

ParseError error(ParseErrorCode code, size_t offset, const char* where) {
  return ParseError{code, offset, where};
}

// Parses the transport bytes that are present (`have`) of a datagram whose
// enclosing length says it has `claimed` bytes (== have.size() when the
// caller has no length). `base` is have[0]'s offset in the caller's buffer,
// so errors point into the buffer the caller passed.
Parsed<Packet> parse_transport_at(std::span<const uint8_t> have, size_t claimed, size_t base) {
  const std::span<const uint8_t> view = have.first(std::min(have.size(), claimed));
  const size_t end = base + view.size();
  if (view.size() >= 1 && (view[0] >> 4) != kVersion)
    return error(ParseErrorCode::kBadVersion, base, "MBTH.version");
  const OpcodeInfo* info = view.size() >= 2 ? find_opcode(view[1]) : nullptr;
  if (view.size() >= 2 && info == nullptr)
    return error(ParseErrorCode::kUnknownOpcode, base + 1, "MBTH.opcode");
  if (view.size() < kMbthLen) return error(ParseErrorCode::kTruncated, end, "MBTH");

  Packet p;
  Reader r(view);
  read_mbth(r, p.mbth);
  for (size_t i = 0; i < info->ext_count(); ++i) {
    const ExtInfo& ext = ext_info(info->exts[i]);
    if (!r.has(ext.length)) return error(ParseErrorCode::kTruncated, end, ext.name);
    kExtCodecs[static_cast<size_t>(ext.ext)].read(r, p);
  }
  const size_t hdr = r.pos();
  if (have.size() < claimed) {  // the datagram was cut after its headers
    const char* where = have.size() + kIcrcLen >= claimed ? "ICRC" : "payload";
    return error(ParseErrorCode::kTruncated, end, where);
  }
  if (view.size() - hdr < kIcrcLen) return error(ParseErrorCode::kTruncated, end, "ICRC");

  const size_t icrc_at = view.size() - kIcrcLen;
  Reader icrc_reader(view, icrc_at);
  if (icrc_reader.u32() != crc32c(view.first(icrc_at)))
    return error(ParseErrorCode::kBadIcrc, base + icrc_at, "ICRC");
  if (!info->payload && icrc_at != hdr)
    return error(ParseErrorCode::kBadLength, base + hdr, "payload");
  if (icrc_at - hdr > info->max_payload)
    return error(ParseErrorCode::kBadLength, base + hdr + info->max_payload, "payload");
  p.payload = view.subspan(hdr, icrc_at - hdr);
  return p;
}

// ---- IP / UDP helpers ----

constexpr uint16_t kEtherIpv4 = 0x0800;
constexpr uint16_t kEtherIpv6 = 0x86DD;
constexpr uint16_t kEtherVlan = 0x8100;
constexpr uint8_t kIpProtoUdp = 17;

// Ones'-complement sum (RFC 1071), not yet folded/inverted.
uint32_t sum16(std::span<const uint8_t> b, uint32_t acc = 0) {
  size_t i = 0;
  for (; i + 1 < b.size(); i += 2) acc += uint32_t{b[i]} << 8 | b[i + 1];
  if (i < b.size()) acc += uint32_t{b[i]} << 8;
  return acc;
}
uint16_t fold(uint32_t acc) {
  while (acc >> 16) acc = (acc & 0xFFFF) + (acc >> 16);
  return static_cast<uint16_t>(~acc & 0xFFFF);
}

// UDP-over-IPv6 checksum (RFC 8200 §8.1) of the datagram `udp` whose
// checksum field may hold anything (it is summed as zero).
uint16_t udp6_checksum(const IpAddr& src, const IpAddr& dst, std::span<const uint8_t> udp) {
  uint32_t acc = sum16(src.bytes) + sum16(dst.bytes);
  acc += static_cast<uint32_t>(udp.size() >> 16) + static_cast<uint32_t>(udp.size() & 0xFFFF);
  acc += kIpProtoUdp;
  acc = sum16(udp.first(6), acc);
  acc = sum16(udp.subspan(8), acc);
  uint16_t c = fold(acc);
  return c == 0 ? 0xFFFF : c;  // 0 means "no checksum"; send all-ones instead
}

// Same for IPv4 (RFC 768): only used to verify a sender's nonzero checksum.
uint16_t udp4_checksum(const IpAddr& src, const IpAddr& dst, std::span<const uint8_t> udp) {
  uint32_t acc = sum16(std::span(src.bytes).subspan(12)) + sum16(std::span(dst.bytes).subspan(12));
  acc += kIpProtoUdp + static_cast<uint32_t>(udp.size());
  acc = sum16(udp.first(6), acc);
  acc = sum16(udp.subspan(8), acc);
  uint16_t c = fold(acc);
  return c == 0 ? 0xFFFF : c;
}

void read_ip(Reader& r, IpAddr& a, bool v4) {
  if (v4) {
    a = IpAddr::v4(r.u32());
  } else {
    r.bytes(a.bytes.data(), a.bytes.size());
  }
}

// What the IP layer told us about the UDP datagram inside it.
struct IpInfo {
  bool v4 = true;
  size_t udp_start = 0;
  size_t ip_end = 0;  // end of the IP packet per its length field
};

Parsed<IpInfo> parse_ipv4(std::span<const uint8_t> bytes, Reader& r, FrameHeaders& h) {
  const size_t size = bytes.size();
  const size_t at = r.pos();
  if (!r.has(kIpv4Len)) return error(ParseErrorCode::kTruncated, size, "IPv4");
  const uint8_t ver_ihl = r.u8();
  if (ver_ihl >> 4 != 4) return error(ParseErrorCode::kBadIpHeader, at, "IPv4.version");
  const size_t ihl = size_t{ver_ihl & 0x0Fu} * 4;
  if (ihl < kIpv4Len) return error(ParseErrorCode::kBadIpHeader, at, "IPv4.ihl");
  const uint8_t tos = r.u8();
  h.dscp = tos >> 2;
  h.ecn = tos & 0x3;
  const uint16_t total = r.u16();
  r.skip(2);  // identification
  const uint16_t frag = r.u16();
  h.ttl = r.u8();
  const uint8_t proto = r.u8();
  r.skip(2);  // checksum, verified below over the whole header
  read_ip(r, h.src_ip, true);
  read_ip(r, h.dst_ip, true);
  if (!r.has(ihl - kIpv4Len)) return error(ParseErrorCode::kTruncated, size, "IPv4");
  r.skip(ihl - kIpv4Len);  // options: allowed, ignored
  if (fold(sum16(bytes.subspan(at, ihl))) != 0)
    return error(ParseErrorCode::kBadIpHeader, at + 10, "IPv4.checksum");
  if (total < ihl) return error(ParseErrorCode::kBadIpHeader, at + 2, "IPv4.total_length");
  if (frag & 0x3FFF) return error(ParseErrorCode::kBadIpHeader, at + 6, "IPv4.fragment");
  if (proto != kIpProtoUdp) return error(ParseErrorCode::kNotUdp, at + 9, "IPv4.protocol");
  return IpInfo{true, at + ihl, at + total};
}

Parsed<IpInfo> parse_ipv6(Reader& r, size_t size, FrameHeaders& h) {
  const size_t at = r.pos();
  if (!r.has(kIpv6Len)) return error(ParseErrorCode::kTruncated, size, "IPv6");
  const uint32_t first = r.u32();
  if (first >> 28 != 6) return error(ParseErrorCode::kBadIpHeader, at, "IPv6.version");
  const uint8_t tc = static_cast<uint8_t>(first >> 20);  // flow label ignored
  h.dscp = tc >> 2;
  h.ecn = tc & 0x3;
  const uint16_t payload_len = r.u16();
  const uint8_t next = r.u8();
  h.ttl = r.u8();
  read_ip(r, h.src_ip, false);
  read_ip(r, h.dst_ip, false);
  // Extension headers are not used by MetaRoCE and not walked (§2.1).
  if (next != kIpProtoUdp) return error(ParseErrorCode::kNotUdp, at + 6, "IPv6.next_header");
  return IpInfo{false, at + kIpv6Len, at + kIpv6Len + payload_len};
}

Parsed<IpInfo> parse_l2_l3(std::span<const uint8_t> bytes, FrameHeaders& h) {
  Reader r(bytes);
  if (!r.has(kEthLen)) return error(ParseErrorCode::kTruncated, bytes.size(), "Ethernet");
  r.bytes(h.dst_mac.data(), 6);
  r.bytes(h.src_mac.data(), 6);
  size_t type_at = r.pos();
  uint16_t type = r.u16();
  if (type == kEtherVlan) {  // one 802.1Q tag is skipped (§2.1)
    if (!r.has(4)) return error(ParseErrorCode::kTruncated, bytes.size(), "VLAN");
    r.skip(2);
    type_at = r.pos();
    type = r.u16();
  }
  if (type == kEtherIpv4) return parse_ipv4(bytes, r, h);
  if (type == kEtherIpv6) return parse_ipv6(r, bytes.size(), h);
  return error(ParseErrorCode::kNotIp, type_at, "Ethernet.ethertype");
}

// The IPv4 (RFC 791) or IPv6 (RFC 8200) header of a UDP datagram of
// udp_len bytes, at the position of w (a writer over out): frames
// (build_frame) and the GRH a UD receive gets (build_grh) share it.
void write_ip_header(std::span<uint8_t> out, Writer& w, const FrameHeaders& h, size_t udp_len) {
  const uint8_t tos = static_cast<uint8_t>((h.dscp & 0x3F) << 2 | (h.ecn & 0x3));
  const size_t at = w.pos();
  if (h.src_ip.is_v4()) {
    w.u8(0x45);
    w.u8(tos);
    w.u16(static_cast<uint16_t>(kIpv4Len + udp_len));
    w.u16(0);       // identification: 0, the datagram is atomic (RFC 6864)
    w.u16(0x4000);  // DF, no fragments
    w.u8(h.ttl);
    w.u8(kIpProtoUdp);
    w.u16(0);  // header checksum, patched below
    w.bytes(std::span(h.src_ip.bytes).subspan(12));
    w.bytes(std::span(h.dst_ip.bytes).subspan(12));
    if (w.ok()) w.patch_u16(at + 10, fold(sum16(out.subspan(at, kIpv4Len))));
  } else {
    w.u32(uint32_t{6} << 28 | uint32_t{tos} << 20);  // flow label 0
    w.u16(static_cast<uint16_t>(udp_len));
    w.u8(kIpProtoUdp);
    w.u8(h.ttl);
    w.bytes(h.src_ip.bytes);
    w.bytes(h.dst_ip.bytes);
  }
}

}  // namespace

// ---- public API ----

bool IpAddr::is_v4() const {
  static constexpr std::array<uint8_t, 12> kPrefix = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF};
  return std::equal(kPrefix.begin(), kPrefix.end(), bytes.begin());
}

bool IpAddr::is_multicast() const {
  return is_v4() ? (bytes[12] & 0xF0) == 0xE0 : bytes[0] == 0xFF;
}

IpAddr IpAddr::v4(uint32_t host_order) {
  IpAddr a;
  a.bytes[10] = a.bytes[11] = 0xFF;
  for (int i = 0; i < 4; ++i) a.bytes[12 + i] = static_cast<uint8_t>(host_order >> (24 - 8 * i));
  return a;
}

uint32_t IpAddr::v4_host_order() const {
  return uint32_t{bytes[12]} << 24 | uint32_t{bytes[13]} << 16 | uint32_t{bytes[14]} << 8 |
         bytes[15];
}

size_t transport_length(const Packet& p) {
  const size_t hdr = header_length(p.mbth.opcode);
  return hdr == 0 ? 0 : hdr + p.payload.size() + kIcrcLen;
}

uint16_t ipv4_header_checksum(std::span<const uint8_t> header) {
  if (header.size() < kIpv4Len) return 0;
  return fold(sum16(header.subspan(12), sum16(header.first(10))));  // options too
}

uint16_t udp_checksum(const IpAddr& src, const IpAddr& dst, std::span<const uint8_t> udp) {
  if (udp.size() < kUdpLen) return 0;
  return src.is_v4() ? udp4_checksum(src, dst, udp) : udp6_checksum(src, dst, udp);
}

bool seal_icrc(std::span<uint8_t> packet) {
  if (packet.size() < kIcrcLen) return false;
  Writer w(packet.last(kIcrcLen));
  w.u32(crc32c(packet.first(packet.size() - kIcrcLen)));
  return w.ok();
}

size_t build_transport(const Packet& p, std::span<uint8_t> out) {
  const OpcodeInfo* info = find_opcode(p.mbth.opcode);
  if (info == nullptr || (!info->payload && !p.payload.empty())) return 0;
  if (p.payload.size() > info->max_payload) return 0;
  Writer w(out);
  write_mbth(w, p.mbth);
  for (size_t i = 0; i < info->ext_count(); ++i)
    kExtCodecs[static_cast<size_t>(info->exts[i])].write(w, p);
  // A payload already at its place in out (a frame the DMA read it into,
  // docs/firmware-hal.md §Transmit buffers) is not copied onto itself.
  if (!p.payload.empty() && p.payload.data() == out.data() + w.pos()) w.skip(p.payload.size());
  else w.bytes(p.payload);
  w.u32(0);  // the ICRC, sealed below
  if (!w.ok()) return 0;
  seal_icrc(out.first(w.pos()));
  return w.pos();
}

std::array<uint8_t, kGrhLen> build_grh(const FrameHeaders& h, size_t transport_len) {
  std::array<uint8_t, kGrhLen> grh{};
  const bool v4 = h.src_ip.is_v4();
  Writer w(grh, v4 ? kGrhLen - kIpv4Len : 0);  // IPv4: 20 zero bytes, then the header
  write_ip_header(grh, w, h, kUdpLen + transport_len);
  return grh;
}

Parsed<Packet> parse_transport(std::span<const uint8_t> bytes) {
  return parse_transport_at(bytes, bytes.size(), 0);
}

size_t encap_length(const FrameHeaders& h) {
  return kEthLen + (h.src_ip.is_v4() ? kIpv4Len : kIpv6Len) + kUdpLen;
}

size_t payload_offset(const FrameHeaders& h, Opcode op) {
  const size_t hdr = header_length(op);
  return hdr == 0 ? 0 : encap_length(h) + hdr;
}

size_t build_frame(const FrameHeaders& h, const Packet& p, std::span<uint8_t> out) {
  const bool v4 = h.src_ip.is_v4();
  const size_t tlen = transport_length(p);
  const size_t udp_len = kUdpLen + tlen;
  const size_t max_udp = v4 ? 0xFFFF - kIpv4Len : 0xFFFF;  // IPv4 total / IPv6 payload length
  if (v4 != h.dst_ip.is_v4() || tlen == 0 || udp_len > max_udp) return 0;
  const size_t encap = encap_length(h);
  if (out.size() < encap + tlen) return 0;
  if (build_transport(p, out.subspan(encap)) != tlen) return 0;

  Writer w(out);
  w.bytes(h.dst_mac);
  w.bytes(h.src_mac);
  w.u16(v4 ? kEtherIpv4 : kEtherIpv6);
  write_ip_header(out, w, h, udp_len);
  const size_t udp_at = w.pos();
  w.u16(h.src_port);
  w.u16(kUdpPort);
  w.u16(static_cast<uint16_t>(udp_len));
  w.u16(0);  // IPv4: no checksum (the ICRC protects the payload); IPv6: patched
  if (!w.ok()) return 0;
  if (!v4) w.patch_u16(udp_at + 6, udp6_checksum(h.src_ip, h.dst_ip, out.subspan(udp_at, udp_len)));
  return w.ok() ? encap + tlen : 0;
}

Parsed<Frame> parse_frame(std::span<const uint8_t> bytes) {
  Frame f;
  auto ip = parse_l2_l3(bytes, f.headers);
  if (!ip) return ip.error();
  const IpInfo info = ip.value();

  Reader r(bytes, info.udp_start);
  if (!r.has(kUdpLen)) return error(ParseErrorCode::kTruncated, bytes.size(), "UDP");
  f.headers.src_port = r.u16();
  if (r.u16() != kUdpPort) return error(ParseErrorCode::kWrongPort, info.udp_start + 2, "UDP.dst_port");
  const size_t udp_len = r.u16();
  const uint16_t checksum = r.u16();
  if (udp_len < kUdpLen || info.udp_start + udp_len > info.ip_end)
    return error(ParseErrorCode::kBadUdpLength, info.udp_start + 4, "UDP.length");

  // Trust the UDP length: bytes past it are Ethernet padding (or an FCS).
  const size_t udp_end = info.udp_start + udp_len;
  const size_t tp_at = info.udp_start + kUdpLen;
  const auto have = bytes.subspan(tp_at, std::min(bytes.size(), udp_end) - tp_at);
  if (bytes.size() >= udp_end && (checksum != 0 || !info.v4)) {
    const auto udp = bytes.subspan(info.udp_start, udp_len);
    const uint16_t want = info.v4 ? udp4_checksum(f.headers.src_ip, f.headers.dst_ip, udp)
                                  : udp6_checksum(f.headers.src_ip, f.headers.dst_ip, udp);
    if (checksum != want)
      return error(ParseErrorCode::kBadUdpChecksum, info.udp_start + 6, "UDP.checksum");
  }
  auto tp = parse_transport_at(have, udp_len - kUdpLen, tp_at);
  if (!tp) return tp.error();
  f.packet = tp.value();
  return f;
}

Parsed<TrimmedFrame> parse_trimmed_frame(std::span<const uint8_t> bytes, uint8_t trimmed_dscp) {
  TrimmedFrame t;
  auto ip = parse_l2_l3(bytes, t.headers);
  if (!ip) return ip.error();
  const IpInfo info = ip.value();
  if (t.headers.dscp != trimmed_dscp)
    return error(ParseErrorCode::kNotTrimmed, info.udp_start, "IP.dscp");
  Reader r(bytes, info.udp_start);
  if (!r.has(kUdpLen)) return error(ParseErrorCode::kTruncated, bytes.size(), "UDP");
  r.skip(2);
  if (r.u16() != kUdpPort) return error(ParseErrorCode::kWrongPort, info.udp_start + 2, "UDP.dst_port");
  const size_t udp_end = info.udp_start + r.u16();
  r.skip(2);  // checksum: it covers the cut bytes
  if (udp_end > info.ip_end || udp_end < r.pos())
    return error(ParseErrorCode::kBadUdpLength, info.udp_start + 4, "UDP.length");
  if (bytes.size() >= udp_end) return error(ParseErrorCode::kNotTrimmed, bytes.size(), "UDP.length");
  if (!r.has(kMbthLen)) return error(ParseErrorCode::kTruncated, bytes.size(), "MBTH");
  const size_t at = r.pos();
  read_mbth(r, t.mbth);
  if (t.mbth.version != kVersion) return error(ParseErrorCode::kBadVersion, at, "MBTH.version");
  const Opcode op = t.mbth.opcode;
  if (op != Opcode::kSend && op != Opcode::kSendImm && op != Opcode::kSendInv && op != Opcode::kWrite &&
      op != Opcode::kWriteImm)
    return error(ParseErrorCode::kNotTrimmed, at + 1, "MBTH.opcode");
  return t;
}

// ---- names and descriptions ----

const char* to_string(ParseErrorCode code) {
  switch (code) {
    case ParseErrorCode::kTruncated: return "truncated";
    case ParseErrorCode::kBadVersion: return "bad version";
    case ParseErrorCode::kUnknownOpcode: return "unknown opcode";
    case ParseErrorCode::kBadIcrc: return "bad ICRC";
    case ParseErrorCode::kBadLength: return "bad length";
    case ParseErrorCode::kNotIp: return "not IP";
    case ParseErrorCode::kBadIpHeader: return "bad IP header";
    case ParseErrorCode::kNotUdp: return "not UDP";
    case ParseErrorCode::kWrongPort: return "wrong port";
    case ParseErrorCode::kBadUdpLength: return "bad UDP length";
    case ParseErrorCode::kBadUdpChecksum: return "bad UDP checksum";
    case ParseErrorCode::kNotTrimmed: return "not trimmed";
  }
  return "unknown error";
}

const char* to_string(NackReason r) {
  switch (r) {
    case NackReason::kRnr: return "RNR";
    case NackReason::kRemoteAccessError: return "REMOTE_ACCESS_ERROR";
    case NackReason::kInvalidRequest: return "INVALID_REQUEST";
    case NackReason::kRemoteOperationError: return "REMOTE_OPERATION_ERROR";
    case NackReason::kSequenceError: return "SEQUENCE_ERROR";
    case NackReason::kTrimmed: return "TRIMMED";
  }
  return "UNKNOWN";
}

std::string ParseError::message() const {
  char buf[128];
  if (code == ParseErrorCode::kTruncated) {
    std::snprintf(buf, sizeof buf, "truncated %s at byte %zu", where, offset);
  } else {
    std::snprintf(buf, sizeof buf, "%s: %s at byte %zu", to_string(code), where, offset);
  }
  return buf;
}

namespace {
void appendf(std::string& s, const char* fmt, auto... args) {
  char buf[96];
  std::snprintf(buf, sizeof buf, fmt, args...);
  s += buf;
}

void describe_cmh(std::string& s, const Cmh& c) {
  appendf(s, " cm.local_comm_id=0x%08" PRIx32 " cm.remote_comm_id=0x%08" PRIx32
             " cm.service_id=0x%016" PRIx64, c.local_comm_id, c.remote_comm_id, c.service_id);
  appendf(s, " cm.qp_type=%u cm.qpn=0x%06" PRIx32 " cm.start_psn=%" PRIu32 " cm.qkey=0x%08" PRIx32,
          unsigned{c.qp_type}, c.qpn, c.start_psn, c.qkey);
  appendf(s, " cm.src_port=%u cm.responder_resources=%u cm.initiator_depth=%u",
          unsigned{c.src_port}, unsigned{c.responder_resources}, unsigned{c.initiator_depth});
  appendf(s, " cm.cm_timeout=%u cm.max_cm_retries=%u cm.path_mtu=%u cm.retry_count=%u",
          unsigned{c.cm_timeout}, unsigned{c.max_cm_retries}, unsigned{c.path_mtu},
          unsigned{c.retry_count});
  appendf(s, " cm.rnr_retry=%u cm.srq=%u cm.reason=%u cm.message=%u", unsigned{c.rnr_retry},
          unsigned{c.srq}, unsigned{c.reason}, unsigned{c.message});
}

void describe_ext(std::string& s, Ext e, const Packet& p) {
  switch (e) {
    case Ext::kNone: break;
    case Ext::kReth:
      appendf(s, " reth.va=0x%" PRIx64 " reth.rkey=0x%" PRIx32 " reth.length=%" PRIu32, p.reth.va,
              p.reth.rkey, p.reth.length);
      break;
    case Ext::kSeth: appendf(s, " seth.length=%" PRIu32, p.seth.length); break;
    case Ext::kImm: appendf(s, " imm=0x%08" PRIx32, p.imm); break;
    case Ext::kAtomicEth:
      appendf(s, " atomic.va=0x%" PRIx64 " atomic.rkey=0x%" PRIx32, p.atomic.va, p.atomic.rkey);
      appendf(s, " atomic.swap_add=0x%" PRIx64 " atomic.compare=0x%" PRIx64, p.atomic.swap_add,
              p.atomic.compare);
      break;
    case Ext::kAtomicAckEth: appendf(s, " atomic_ack.original=0x%" PRIx64, p.atomic_ack.original); break;
    case Ext::kAckh:
      appendf(s, " ack.cum_psn=%" PRIu32 " ack.sack=0x%016" PRIx64 " ack.echo_ts=%" PRIu32,
              p.ack.cum_psn, p.ack.sack, p.ack.echo_ts);
      appendf(s, " ack.credit=%" PRIu32 " ack.ce_count=%u ack.echo_path=%u ack.ack_flags=0x%x",
              p.ack.credit, unsigned{p.ack.ce_count}, unsigned{p.ack.echo_path},
              unsigned{p.ack.ack_flags});
      appendf(s, " ack.rcv_msn=%" PRIu32, p.ack.rcv_msn);
      break;
    case Ext::kNackh:
      appendf(s, " nack.reason=%s nack.rnr_timer=%u nack.psn=%" PRIu32, to_string(p.nack.reason),
              unsigned{p.nack.rnr_timer}, p.nack.psn);
      break;
    case Ext::kProbeh:
      appendf(s, " probe.nonce=0x%08" PRIx32 " probe.echo_ts=%" PRIu32, p.probe.nonce,
              p.probe.echo_ts);
      break;
    case Ext::kCmh: describe_cmh(s, p.cm); break;
    case Ext::kDeth:
      appendf(s, " deth.qkey=0x%08" PRIx32 " deth.src_qpn=0x%06" PRIx32, p.deth.qkey,
              p.deth.src_qpn);
      break;
    case Ext::kIeth: appendf(s, " ieth.rkey=0x%08" PRIx32, p.ieth.rkey); break;
  }
}
}  // namespace

std::string to_string(const Packet& p) {
  const Mbth& m = p.mbth;
  std::string s = to_string(m.opcode);
  appendf(s, " qpn=0x%06" PRIx32 " psn=%" PRIu32 " msn=%" PRIu32 " off=%" PRIu32, m.dest_qpn,
          m.psn, m.msn, m.offset);
  appendf(s, " flags=0x%x path=%u ts=%" PRIu32, unsigned{m.flags}, unsigned{m.path_id},
          m.timestamp);
  if (const OpcodeInfo* info = find_opcode(m.opcode)) {
    for (size_t i = 0; i < info->ext_count(); ++i) describe_ext(s, info->exts[i], p);
    if (info->payload) appendf(s, " payload=%zuB", p.payload.size());
  }
  return s;
}

bool operator==(const Packet& a, const Packet& b) {
  return a.mbth == b.mbth && a.reth == b.reth && a.seth == b.seth && a.imm == b.imm &&
         a.atomic == b.atomic && a.atomic_ack == b.atomic_ack && a.ack == b.ack &&
         a.nack == b.nack && a.probe == b.probe && a.cm == b.cm && a.deth == b.deth && a.ieth == b.ieth &&
         std::equal(a.payload.begin(), a.payload.end(), b.payload.begin(), b.payload.end());
}

}  // namespace metaroce::proto
