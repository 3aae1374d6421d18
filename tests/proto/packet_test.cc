// Tests of proto/packet.cc: build/parse of transport packets and frames.
// Golden byte vectors are in vectors_test.cc; this file checks properties.
#include "proto/packet.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "proto/opcode.h"

using namespace metaroce::proto;

namespace {

using Bytes = std::vector<uint8_t>;

// Every CMH field random within its width (reserved bits 0).
Cmh random_cmh(std::mt19937_64& rng) {
  Cmh c;
  c.local_comm_id = static_cast<uint32_t>(rng());
  c.remote_comm_id = static_cast<uint32_t>(rng());
  c.service_id = rng();
  c.qp_type = static_cast<uint8_t>(rng());
  c.qpn = static_cast<uint32_t>(rng() & 0xFFFFFF);
  c.start_psn = static_cast<uint32_t>(rng());
  c.qkey = static_cast<uint32_t>(rng());
  c.src_port = static_cast<uint16_t>(rng());
  c.responder_resources = static_cast<uint8_t>(rng());
  c.initiator_depth = static_cast<uint8_t>(rng());
  c.cm_timeout = rng() & 0x1F;
  c.max_cm_retries = rng() & 0x0F;
  c.path_mtu = rng() & 0x0F;
  c.retry_count = rng() & 7;
  c.rnr_retry = rng() & 7;
  c.srq = rng() & 1;
  c.reason = static_cast<uint16_t>(rng());
  c.message = static_cast<uint8_t>(rng());
  return c;
}

// A packet with every field of its opcode's headers randomized (reserved
// bits left 0, because the parser reports them as 0).
Packet random_packet(Opcode op, std::mt19937_64& rng, Bytes& payload_store) {
  Packet p;
  p.mbth.opcode = op;
  p.mbth.flags = static_cast<uint16_t>(rng() & 0xF);
  p.mbth.path_id = static_cast<uint8_t>(rng());
  p.mbth.dest_qpn = static_cast<uint32_t>(rng() & 0xFFFFFF);
  p.mbth.psn = static_cast<uint32_t>(rng());
  p.mbth.msn = static_cast<uint32_t>(rng());
  p.mbth.offset = static_cast<uint32_t>(rng());
  p.mbth.timestamp = static_cast<uint32_t>(rng());
  const OpcodeInfo* info = find_opcode(op);
  for (size_t i = 0; i < info->ext_count(); ++i) {
    switch (info->exts[i]) {
      case Ext::kReth: p.reth = {rng(), static_cast<uint32_t>(rng()), static_cast<uint32_t>(rng())}; break;
      case Ext::kSeth: p.seth.length = static_cast<uint32_t>(rng()); break;
      case Ext::kImm: p.imm = static_cast<uint32_t>(rng()); break;
      case Ext::kAtomicEth: p.atomic = {rng(), static_cast<uint32_t>(rng()), rng(), rng()}; break;
      case Ext::kAtomicAckEth: p.atomic_ack.original = rng(); break;
      case Ext::kAckh:
        p.ack = {static_cast<uint32_t>(rng()), rng(), static_cast<uint32_t>(rng()),
                 static_cast<uint32_t>(rng()), static_cast<uint16_t>(rng()),
                 static_cast<uint8_t>(rng()), static_cast<uint8_t>(rng() & 3),
                 static_cast<uint32_t>(rng())};
        break;
      case Ext::kNackh:
        p.nack = {static_cast<NackReason>(1 + rng() % 6), static_cast<uint8_t>(rng() & 0x1F),
                  static_cast<uint32_t>(rng())};
        break;
      case Ext::kProbeh: p.probe = {static_cast<uint32_t>(rng()), static_cast<uint32_t>(rng())}; break;
      case Ext::kCmh: p.cm = random_cmh(rng); break;
      case Ext::kDeth: p.deth = {static_cast<uint32_t>(rng()), static_cast<uint32_t>(rng() & 0xFFFFFF)}; break;
      case Ext::kIeth: p.ieth.rkey = static_cast<uint32_t>(rng()); break;
      case Ext::kNone: break;
    }
  }
  payload_store.clear();
  if (info->payload) {
    payload_store.resize(rng() % 5 == 0 ? 0 : rng() % (std::min<size_t>(1499, info->max_payload) + 1));
    for (auto& b : payload_store) b = static_cast<uint8_t>(rng());
  }
  p.payload = payload_store;
  return p;
}

Bytes build(const Packet& p) {
  Bytes out(transport_length(p));
  REQUIRE(build_transport(p, out) == out.size());
  return out;
}

FrameHeaders v4_headers() {
  FrameHeaders h;
  h.dst_mac = {0x02, 0, 0, 0, 0, 0x02};
  h.src_mac = {0x02, 0, 0, 0, 0, 0x01};
  h.src_ip = IpAddr::v4(0x0A000001);
  h.dst_ip = IpAddr::v4(0x0A000002);
  h.src_port = 0xC123;
  h.dscp = 26;
  return h;
}

FrameHeaders v6_headers() {
  FrameHeaders h = v4_headers();
  h.src_ip = IpAddr{};
  h.dst_ip = IpAddr{};
  h.src_ip.bytes = {0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  h.dst_ip.bytes = {0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2};
  return h;
}

Bytes build_frame_bytes(const FrameHeaders& h, const Packet& p) {
  Bytes out(encap_length(h) + transport_length(p));
  REQUIRE(build_frame(h, p, out) == out.size());
  return out;
}

void refresh_icrc(Bytes& tp) {
  uint32_t c = crc32c(std::span<const uint8_t>(tp).first(tp.size() - 4));
  for (int i = 0; i < 4; ++i) tp[tp.size() - 4 + i] = static_cast<uint8_t>(c >> (24 - 8 * i));
}

Packet sample_write(Bytes& store) {
  store = {'h', 'e', 'l', 'l', 'o'};
  Packet p;
  p.mbth.opcode = Opcode::kWrite;
  p.mbth.psn = 7;
  p.reth = {0x1000, 0x42, 5};
  p.payload = store;
  return p;
}

}  // namespace

TEST_CASE("build_transport__write_layout") {
  Bytes store;
  Packet p = sample_write(store);
  p.mbth.dest_qpn = 0xABCDEF;
  p.mbth.flags = kFlagLast | kFlagAckReq;
  Bytes b = build(p);
  REQUIRE(b.size() == 24 + 16 + 5 + 4);
  CHECK(b[0] == 0x10);  // version 1, reserved nibble 0
  CHECK(b[1] == 0x03);
  CHECK(b[3] == 0x0A);
  CHECK(b[5] == 0xAB);
  CHECK(b[7] == 0xEF);
  CHECK(b[11] == 7);
  CHECK(b[24 + 6] == 0x10);  // RETH.va low bytes 0x1000
  CHECK(b[24 + 11] == 0x42);
  CHECK(b[40] == 'h');
  uint32_t icrc = crc32c(std::span<const uint8_t>(b).first(45));
  CHECK(b[45] == (icrc >> 24));
  CHECK(b[48] == (icrc & 0xFF));
}

TEST_CASE("build_transport__reserved_bits_written_zero") {
  Packet p;
  p.mbth.opcode = Opcode::kAck;
  p.mbth.flags = 0xFFFF;
  p.mbth.dest_qpn = 0xFFFFFFFF;
  p.ack.ack_flags = 0xFF;
  Bytes b = build(p);
  CHECK(b[0] == 0x10);
  CHECK(b[2] == 0x00);
  CHECK(b[3] == 0x0F);
  CHECK(b[4] == 0x00);  // path_id, not qpn overflow
  CHECK(b[24 + 23] == 0x03);  // CE and DUP; bits 2-7 reserved
  auto parsed = parse_transport(b);
  REQUIRE(parsed.ok());
  CHECK(parsed.value().mbth.flags == 0x0F);
  CHECK(parsed.value().mbth.dest_qpn == 0xFFFFFF);
}

TEST_CASE("parse_transport__reserved_bits_ignored") {
  Packet p;
  p.mbth.opcode = Opcode::kNack;
  p.nack = {NackReason::kRnr, 14, 99};
  Bytes b = build(p);
  b[0] |= 0x0F;      // MBTH reserved nibble
  b[2] |= 0xF0;      // reserved flag bits
  b[24 + 1] |= 0xE0; // rnr_timer high bits
  b[24 + 2] = 0xFF;  // NACKH reserved
  refresh_icrc(b);
  auto parsed = parse_transport(b);
  REQUIRE(parsed.ok());
  CHECK(parsed.value() == p);
}

TEST_CASE("build_transport__refuses_payload_on_payloadless_opcode_and_small_buffers") {
  Bytes store{1, 2, 3};
  Packet p;
  p.mbth.opcode = Opcode::kReadReq;
  p.payload = store;
  Bytes out(100);
  CHECK(build_transport(p, out) == 0);
  p.payload = {};
  CHECK(build_transport(p, std::span<uint8_t>(out).first(43)) == 0);
  CHECK(build_transport(p, std::span<uint8_t>(out).first(44)) == 44);
  p.mbth.opcode = static_cast<Opcode>(0x7F);
  CHECK(build_transport(p, out) == 0);
  CHECK(transport_length(p) == 0);
}

TEST_CASE("parse_transport__round_trip_randomized_every_opcode") {
  std::mt19937_64 rng(0x5EED);
  Bytes store;
  for (int iter = 0; iter < 5000; ++iter) {
    const Opcode op = kOpcodeTable[rng() % kOpcodeTable.size()].op;
    Packet p = random_packet(op, rng, store);
    Bytes b = build(p);
    auto parsed = parse_transport(b);
    REQUIRE_MESSAGE(parsed.ok(), parsed.error().message());
    REQUIRE_MESSAGE(parsed.value() == p, to_string(p));
    // and building what was parsed gives the same bytes
    REQUIRE(build(parsed.value()) == b);
  }
}

TEST_CASE("parse_frame__round_trip_randomized_v4_and_v6") {
  std::mt19937_64 rng(0xF00D);
  Bytes store;
  for (int iter = 0; iter < 3000; ++iter) {
    const Opcode op = kOpcodeTable[rng() % kOpcodeTable.size()].op;
    Packet p = random_packet(op, rng, store);
    FrameHeaders h = (iter % 2) ? v4_headers() : v6_headers();
    h.src_port = static_cast<uint16_t>(0xC000 | (rng() & 0x3FFF));
    h.dscp = rng() & 0x3F;
    h.ecn = rng() & 3;
    h.ttl = static_cast<uint8_t>(rng());
    for (auto& b : h.src_mac) b = static_cast<uint8_t>(rng());
    Bytes f = build_frame_bytes(h, p);
    auto parsed = parse_frame(f);
    REQUIRE_MESSAGE(parsed.ok(), parsed.error().message());
    REQUIRE(parsed.value().headers == h);
    REQUIRE(parsed.value().packet == p);
  }
}

TEST_CASE("parse_transport__every_prefix_of_every_opcode_is_a_precise_error") {
  std::mt19937_64 rng(1);
  Bytes store;
  for (const auto& row : kOpcodeTable) {
    Packet p = random_packet(row.op, rng, store);
    if (row.payload) {
      store.assign(10, 0xAB);
      p.payload = store;
    }
    Bytes b = build(p);
    CAPTURE(row.name);
    for (size_t n = 0; n < b.size(); ++n) {
      CAPTURE(n);
      auto r = parse_transport(std::span<const uint8_t>(b).first(n));
      REQUIRE_FALSE(r.ok());
      const ParseError& e = r.error();
      // Where the cut falls decides the expected error.
      size_t at = kMbthLen;
      std::string where = "MBTH";
      if (n >= kMbthLen) {
        for (size_t k = 0; k < row.ext_count() && n >= at; ++k) {
          where = ext_info(row.exts[k]).name;
          at += ext_info(row.exts[k]).length;
        }
      }
      if (n < row.header_len) {
        CHECK(e == ParseError{ParseErrorCode::kTruncated, n, where.c_str()});
      } else if (n < row.header_len + kIcrcLen) {
        CHECK(e == ParseError{ParseErrorCode::kTruncated, n, "ICRC"});
      } else {  // cut inside the payload: the last 4 bytes are not the ICRC
        CHECK(e == ParseError{ParseErrorCode::kBadIcrc, n - 4, "ICRC"});
      }
    }
  }
}

TEST_CASE("parse_error__message") {
  CHECK(ParseError{ParseErrorCode::kTruncated, 28, "RETH"}.message() == "truncated RETH at byte 28");
  CHECK(ParseError{ParseErrorCode::kBadIcrc, 60, "ICRC"}.message() == "bad ICRC: ICRC at byte 60");
}

TEST_CASE("parse_transport__bad_icrc_every_bit") {
  Bytes store;
  Bytes b = build(sample_write(store));
  for (size_t bit = 0; bit < b.size() * 8; ++bit) {
    Bytes c = b;
    c[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
    auto r = parse_transport(c);
    REQUIRE_FALSE(r.ok());
    if (bit / 8 == 0 && bit % 8 >= 4) {
      CHECK(r.error().code == ParseErrorCode::kBadVersion);
    } else if (bit / 8 == 1) {
      // 0x03 with one bit flipped is another opcode or an unknown one
      CHECK((r.error().code == ParseErrorCode::kUnknownOpcode ||
             r.error().code == ParseErrorCode::kBadIcrc ||
             r.error().code == ParseErrorCode::kTruncated ||
             r.error().code == ParseErrorCode::kBadLength));
    } else {
      CHECK(r.error() == ParseError{ParseErrorCode::kBadIcrc, b.size() - 4, "ICRC"});
    }
  }
}

TEST_CASE("parse_transport__bad_version_and_unknown_opcode") {
  Bytes store;
  Bytes b = build(sample_write(store));
  for (uint8_t v : {0, 2, 15}) {
    Bytes c = b;
    c[0] = static_cast<uint8_t>(v << 4);
    refresh_icrc(c);
    CHECK(parse_transport(c).error() == ParseError{ParseErrorCode::kBadVersion, 0, "MBTH.version"});
  }
  for (int op : {0x00, 0x0B, 0x0F, 0x14, 0x80, 0xFF}) {  // 0x0B: reserved (§15.2)
    Bytes c = b;
    c[1] = static_cast<uint8_t>(op);
    refresh_icrc(c);
    CHECK(parse_transport(c).error() ==
          ParseError{ParseErrorCode::kUnknownOpcode, 1, "MBTH.opcode"});
  }
  // Checked as soon as the byte is there, before the MBTH is complete.
  CHECK(parse_transport(std::span<const uint8_t>(Bytes{0x20})).error().code ==
        ParseErrorCode::kBadVersion);
  CHECK(parse_transport(std::span<const uint8_t>(Bytes{0x10, 0xEE})).error().code ==
        ParseErrorCode::kUnknownOpcode);
}

TEST_CASE("parse_transport__payload_on_payloadless_opcode_is_bad_length") {
  Packet p;
  p.mbth.opcode = Opcode::kAck;
  Bytes b = build(p);
  b.insert(b.end() - 4, {1, 2, 3});
  refresh_icrc(b);
  CHECK(parse_transport(b).error() == ParseError{ParseErrorCode::kBadLength, 52, "payload"});
}

TEST_CASE("parse_transport__zero_length_send_and_read_resp") {
  for (Opcode op : {Opcode::kSend, Opcode::kReadResp, Opcode::kWriteImm}) {
    Packet p;
    p.mbth.opcode = op;
    auto r = parse_transport(build(p));
    REQUIRE(r.ok());
    CHECK(r.value().payload.empty());
  }
}

TEST_CASE("parse_transport__unknown_nack_reason_passes_through") {
  Packet p;
  p.mbth.opcode = Opcode::kNack;
  p.nack.reason = static_cast<NackReason>(0x77);
  auto r = parse_transport(build(p));
  REQUIRE(r.ok());
  CHECK(static_cast<int>(r.value().nack.reason) == 0x77);
  CHECK(std::string(to_string(r.value().nack.reason)) == "UNKNOWN");
}

// ---- frames ----

TEST_CASE("build_frame__ipv4_header") {
  Bytes store;
  Packet p = sample_write(store);
  FrameHeaders h = v4_headers();
  h.ecn = 0b10;
  Bytes f = build_frame_bytes(h, p);
  REQUIRE(f.size() == 14 + 20 + 8 + 49);
  CHECK(f[12] == 0x08);
  CHECK(f[13] == 0x00);
  CHECK(f[14] == 0x45);
  CHECK(f[15] == (26 << 2 | 2));
  CHECK((f[16] << 8 | f[17]) == 20 + 8 + 49);
  CHECK(f[20] == 0x40);  // DF
  CHECK(f[22] == 64);
  CHECK(f[23] == 17);
  CHECK((f[36] << 8 | f[37]) == kUdpPort);
  CHECK((f[38] << 8 | f[39]) == 8 + 49);
  CHECK(f[40] == 0);  // UDP checksum 0 over IPv4
  CHECK(f[41] == 0);
  // The IPv4 header sums to 0xFFFF with its checksum.
  uint32_t sum = 0;
  for (int i = 14; i < 34; i += 2) sum += f[i] << 8 | f[i + 1];
  while (sum >> 16) sum = (sum & 0xFFFF) + (sum >> 16);
  CHECK(sum == 0xFFFF);
}

TEST_CASE("build_frame__ipv6_header_and_udp_checksum") {
  Bytes store;
  Packet p = sample_write(store);
  FrameHeaders h = v6_headers();
  h.dscp = 46;
  h.ecn = 1;
  h.ttl = 9;
  Bytes f = build_frame_bytes(h, p);
  REQUIRE(f.size() == 14 + 40 + 8 + 49);
  CHECK(f[12] == 0x86);
  CHECK(f[13] == 0xDD);
  uint32_t first = uint32_t{f[14]} << 24 | f[15] << 16 | f[16] << 8 | f[17];
  CHECK(first == (6u << 28 | (46u << 2 | 1) << 20));
  CHECK((f[18] << 8 | f[19]) == 8 + 49);
  CHECK(f[20] == 17);
  CHECK(f[21] == 9);
  CHECK((f[62] << 8 | f[63]) != 0);
}

TEST_CASE("build_frame__mixed_families_and_small_buffer_refused") {
  Bytes store;
  Packet p = sample_write(store);
  FrameHeaders h = v4_headers();
  h.dst_ip = v6_headers().dst_ip;
  Bytes out(200);
  CHECK(build_frame(h, p, out) == 0);
  h = v4_headers();
  CHECK(build_frame(h, p, std::span<uint8_t>(out).first(90)) == 0);
  CHECK(build_frame(h, p, std::span<uint8_t>(out).first(91)) == 91);
}

TEST_CASE("parse_frame__ethernet_padding_and_trailing_fcs_ignored") {
  Bytes store;
  Packet p = sample_write(store);
  for (const FrameHeaders& h : {v4_headers(), v6_headers()}) {
    Bytes f = build_frame_bytes(h, p);
    f.insert(f.end(), {0xDE, 0xAD, 0xBE, 0xEF, 0, 0, 0});
    auto r = parse_frame(f);
    REQUIRE_MESSAGE(r.ok(), r.error().message());
    CHECK(r.value().packet == p);
  }
}

TEST_CASE("parse_frame__one_vlan_tag_skipped_two_refused") {
  Bytes store;
  Packet p = sample_write(store);
  Bytes f = build_frame_bytes(v4_headers(), p);
  Bytes tagged = f;
  tagged.insert(tagged.begin() + 12, {0x81, 0x00, 0x20, 0x05});
  auto r = parse_frame(tagged);
  REQUIRE_MESSAGE(r.ok(), r.error().message());
  CHECK(r.value().packet == p);
  CHECK(r.value().headers == v4_headers());
  Bytes twice = tagged;
  twice.insert(twice.begin() + 12, {0x81, 0x00, 0x20, 0x05});
  CHECK(parse_frame(twice).error() == ParseError{ParseErrorCode::kNotIp, 16, "Ethernet.ethertype"});
  CHECK(parse_frame(std::span<const uint8_t>(tagged).first(15)).error() ==
        ParseError{ParseErrorCode::kTruncated, 15, "VLAN"});
}

TEST_CASE("parse_frame__udp_checksum_rules") {
  Bytes store;
  Packet p = sample_write(store);
  // IPv4: zero accepted (built that way); a correct nonzero one accepted; a wrong one refused.
  Bytes f4 = build_frame_bytes(v4_headers(), p);
  REQUIRE(parse_frame(f4).ok());
  // Compute the correct v4 checksum by hand.
  uint32_t sum = 0x0A00 + 0x0001 + 0x0A00 + 0x0002 + 17 + (f4.size() - 34);
  for (size_t i = 34; i < f4.size(); i += 2) sum += f4[i] << 8 | (i + 1 < f4.size() ? f4[i + 1] : 0);
  while (sum >> 16) sum = (sum & 0xFFFF) + (sum >> 16);
  uint16_t cs = static_cast<uint16_t>(~sum);
  Bytes good = f4;
  good[40] = static_cast<uint8_t>(cs >> 8);
  good[41] = static_cast<uint8_t>(cs);
  CHECK(parse_frame(good).ok());
  good[41] ^= 1;
  CHECK(parse_frame(good).error() == ParseError{ParseErrorCode::kBadUdpChecksum, 40, "UDP.checksum"});
  // IPv6: correct accepted (built), zero refused, wrong refused.
  Bytes f6 = build_frame_bytes(v6_headers(), p);
  REQUIRE(parse_frame(f6).ok());
  Bytes zero = f6;
  zero[60] = zero[61] = 0;
  CHECK(parse_frame(zero).error() == ParseError{ParseErrorCode::kBadUdpChecksum, 60, "UDP.checksum"});
  Bytes flipped = f6;
  flipped[70] ^= 0x40;  // inside the MBTH: the UDP checksum catches it first
  CHECK(parse_frame(flipped).error().code == ParseErrorCode::kBadUdpChecksum);
}

TEST_CASE("parse_frame__header_errors") {
  Bytes store;
  Packet p = sample_write(store);
  Bytes f = build_frame_bytes(v4_headers(), p);
  auto fix_ip_checksum = [](Bytes& b) {
    b[24] = b[25] = 0;
    uint32_t sum = 0;
    for (int i = 14; i < 34; i += 2) sum += b[i] << 8 | b[i + 1];
    while (sum >> 16) sum = (sum & 0xFFFF) + (sum >> 16);
    b[24] = static_cast<uint8_t>(~sum >> 8);
    b[25] = static_cast<uint8_t>(~sum);
  };
  Bytes c = f;
  c[12] = 0x88;
  CHECK(parse_frame(c).error() == ParseError{ParseErrorCode::kNotIp, 12, "Ethernet.ethertype"});
  c = f;
  c[15] ^= 1;
  CHECK(parse_frame(c).error() == ParseError{ParseErrorCode::kBadIpHeader, 24, "IPv4.checksum"});
  c = f;
  c[14] = 0x55;
  CHECK(parse_frame(c).error() == ParseError{ParseErrorCode::kBadIpHeader, 14, "IPv4.version"});
  c = f;
  c[14] = 0x44;
  fix_ip_checksum(c);
  CHECK(parse_frame(c).error() == ParseError{ParseErrorCode::kBadIpHeader, 14, "IPv4.ihl"});
  c = f;
  c[23] = 6;
  fix_ip_checksum(c);
  CHECK(parse_frame(c).error() == ParseError{ParseErrorCode::kNotUdp, 23, "IPv4.protocol"});
  c = f;
  c[20] = 0x20;  // MF
  fix_ip_checksum(c);
  CHECK(parse_frame(c).error() == ParseError{ParseErrorCode::kBadIpHeader, 20, "IPv4.fragment"});
  c = f;
  c[17] = 10;
  c[16] = 0;
  fix_ip_checksum(c);
  CHECK(parse_frame(c).error() == ParseError{ParseErrorCode::kBadIpHeader, 16, "IPv4.total_length"});
  c = f;
  c[37] = 0xBB;
  CHECK(parse_frame(c).error() == ParseError{ParseErrorCode::kWrongPort, 36, "UDP.dst_port"});
  c = f;
  c[39] += 1;  // UDP length beyond the IP packet
  CHECK(parse_frame(c).error() == ParseError{ParseErrorCode::kBadUdpLength, 38, "UDP.length"});
  c = f;
  c[38] = 0;
  c[39] = 7;
  CHECK(parse_frame(c).error() == ParseError{ParseErrorCode::kBadUdpLength, 38, "UDP.length"});
  Bytes f6 = build_frame_bytes(v6_headers(), p);
  c = f6;
  c[20] = 0;  // hop-by-hop extension header: not walked
  CHECK(parse_frame(c).error() == ParseError{ParseErrorCode::kNotUdp, 20, "IPv6.next_header"});
  c = f6;
  c[14] = 0x45;
  CHECK(parse_frame(c).error() == ParseError{ParseErrorCode::kBadIpHeader, 14, "IPv6.version"});
}

TEST_CASE("parse_frame__ipv4_options_skipped") {
  Bytes store;
  Packet p = sample_write(store);
  Bytes f = build_frame_bytes(v4_headers(), p);
  f.insert(f.begin() + 34, {1, 1, 1, 0});  // NOP NOP NOP EOL
  f[14] = 0x46;
  uint16_t total = static_cast<uint16_t>((f[16] << 8 | f[17]) + 4);
  f[16] = static_cast<uint8_t>(total >> 8);
  f[17] = static_cast<uint8_t>(total);
  f[24] = f[25] = 0;
  uint32_t sum = 0;
  for (int i = 14; i < 38; i += 2) sum += f[i] << 8 | f[i + 1];
  while (sum >> 16) sum = (sum & 0xFFFF) + (sum >> 16);
  f[24] = static_cast<uint8_t>(~sum >> 8);
  f[25] = static_cast<uint8_t>(~sum);
  auto r = parse_frame(f);
  REQUIRE_MESSAGE(r.ok(), r.error().message());
  CHECK(r.value().packet == p);
}

TEST_CASE("ip_addr__v4_mapped") {
  IpAddr a = IpAddr::v4(0xC0A80101);
  CHECK(a.is_v4());
  CHECK(a.v4_host_order() == 0xC0A80101);
  CHECK(a.bytes[10] == 0xFF);
  CHECK(a.bytes[12] == 192);
  CHECK_FALSE(IpAddr{}.is_v4());
}

TEST_CASE("to_string__packet_names_opcode_and_fields") {
  Bytes store;
  Packet p = sample_write(store);
  std::string s = to_string(p);
  CHECK(s.find("RDMA_WRITE ") == 0);
  CHECK(s.find("psn=7") != std::string::npos);
  CHECK(s.find("reth.rkey=0x42") != std::string::npos);
  CHECK(s.find("payload=5B") != std::string::npos);
}

TEST_CASE("seq_arithmetic__wraps") {
  CHECK(seq_lt(0xFFFFFFFF, 0));
  CHECK(seq_lt(5, 6));
  CHECK_FALSE(seq_lt(6, 6));
  CHECK(seq_le(6, 6));
  CHECK(seq_lt(0x7FFFFFFF, 0xFFFFFFFE));
}

TEST_CASE("checksum_helpers__match_what_build_frame_writes") {
  Packet p;
  p.mbth.opcode = Opcode::kAck;
  for (bool v4 : {true, false}) {
    FrameHeaders h;
    if (v4) {
      h.src_ip = IpAddr::v4(0x0a000001);
      h.dst_ip = IpAddr::v4(0x0a000002);
    } else {
      h.src_ip.bytes = {0xfd, 0x77, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
      h.dst_ip.bytes = {0xfd, 0x77, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2};
    }
    Bytes f(256);
    f.resize(build_frame(h, p, f));
    const size_t udp = kEthLen + (v4 ? kIpv4Len : kIpv6Len);
    if (v4) {
      CHECK(ipv4_header_checksum(std::span(f).subspan(kEthLen, kIpv4Len)) ==
            (f[kEthLen + 10] << 8 | f[kEthLen + 11]));
    } else {
      CHECK(udp_checksum(h.src_ip, h.dst_ip, std::span(f).subspan(udp)) ==
            (f[udp + 6] << 8 | f[udp + 7]));
    }
    // A nonzero IPv4 UDP checksum computed here is one the parser accepts.
    if (v4) {
      uint16_t c = udp_checksum(h.src_ip, h.dst_ip, std::span(f).subspan(udp));
      f[udp + 6] = static_cast<uint8_t>(c >> 8);
      f[udp + 7] = static_cast<uint8_t>(c);
      CHECK(parse_frame(f).ok());
      f[udp + 7] ^= 1;
      CHECK(parse_frame(f).error().code == ParseErrorCode::kBadUdpChecksum);
    }
  }
  CHECK(ipv4_header_checksum(Bytes(10)) == 0);
  CHECK(udp_checksum(IpAddr::v4(1), IpAddr::v4(2), Bytes(4)) == 0);
}

// parse_trimmed_frame (docs/protocol.md §3.8): a WRITE cut after its MBTH
// by a switch that set the trim DSCP yields its headers; every other shape
// is refused with the reason.
namespace {
constexpr uint8_t kTrimDscp = 46;
const size_t kEncap = kEthLen + kIpv4Len + kUdpLen;
Bytes write_frame(uint8_t dscp, Opcode op = Opcode::kWrite) {
  FrameHeaders h;
  h.src_ip = IpAddr::v4(0x0A000001);
  h.dst_ip = IpAddr::v4(0x0A000002);
  h.dscp = dscp;
  Packet p;
  p.mbth.opcode = op;
  p.mbth.dest_qpn = 0x1234;
  p.mbth.psn = 77;
  p.mbth.path_id = 3;
  p.reth = {0x1000, 5, 1024};
  Bytes payload(1024, 0xAB);
  if (op != Opcode::kReadReq) p.payload = payload;
  Bytes f(kEncap + transport_length(p));
  REQUIRE(build_frame(h, p, f) == f.size());
  return f;
}
}  // namespace

TEST_CASE("parse_trimmed_frame__cut_write_with_the_trim_dscp_yields_its_mbth") {
  Bytes f = write_frame(kTrimDscp);
  f.resize(kEncap + kMbthLen);  // the switch kept the MBTH only
  auto t = parse_trimmed_frame(f, kTrimDscp);
  REQUIRE(t);
  CHECK(t.value().mbth.psn == 77);
  CHECK(t.value().mbth.dest_qpn == 0x1234);
  CHECK(t.value().mbth.opcode == Opcode::kWrite);
  CHECK(t.value().headers.src_ip == IpAddr::v4(0x0A000001));
  CHECK(parse_frame(f).error().code == ParseErrorCode::kTruncated);  // not a packet any more
}

TEST_CASE("parse_trimmed_frame__refuses_what_a_switch_did_not_trim") {
  Bytes whole = write_frame(kTrimDscp);
  CHECK(parse_trimmed_frame(whole, kTrimDscp).error() ==
        ParseError{ParseErrorCode::kNotTrimmed, whole.size(), "UDP.length"});
  Bytes other = write_frame(0);
  other.resize(kEncap + kMbthLen);
  CHECK(parse_trimmed_frame(other, kTrimDscp).error().code == ParseErrorCode::kNotTrimmed);
  Bytes read = write_frame(kTrimDscp, Opcode::kReadReq);
  read.resize(kEncap + kMbthLen);
  CHECK(parse_trimmed_frame(read, kTrimDscp).error() ==
        ParseError{ParseErrorCode::kNotTrimmed, kEncap + 1, "MBTH.opcode"});
  Bytes cut = write_frame(kTrimDscp);
  cut.resize(kEncap + kMbthLen - 1);  // not even a whole MBTH
  CHECK(parse_trimmed_frame(cut, kTrimDscp).error() ==
        ParseError{ParseErrorCode::kTruncated, cut.size(), "MBTH"});
}
