// Receive validation: frames with one defect must be dropped without a
// trace, frames with an unusual but valid encapsulation must be accepted
// (docs/protocol.md §2, §3, §5, §6.11, §9).
//
// A dropped frame is shown by a marker that follows it (a zero-length
// WRITE asking for an ACK): the DUT processes its link in order, so the
// marker's ACK says whether the spoiled PSN was received (cum_psn), and
// nothing may have answered the spoiled frame before it.
#include "tests/conformance/helpers.h"

namespace metaroce::conform::cases {
namespace {

using Spoil = std::function<void(Frame&, const Layout&, Ctx&)>;

// Sends a 64-byte WRITE spoiled by `spoil` (h: its encapsulation), then the
// marker; the DUT must not have placed, acknowledged or NACKed it.
void expect_dropped(Ctx& ctx, const std::string& what, const Spoil& spoil,
                    const proto::FrameHeaders* h = nullptr) {
  Conn& c = ctx.connect();
  const uint64_t off = 4096;
  std::memset(ctx.mem(off), 0, 64);
  auto data = pattern(64, 0x31);
  proto::Packet p = write_req(ctx, c, off, data);
  Frame f = ctx.frame(p, h);
  Layout l(ctx);
  spoil(f, l, ctx);
  ctx.send(f, what);
  const Rx& m = ctx.marker(c);
  for (const Rx* r : ctx.pending(c)) {
    bool answers = (is_op(*r, Opcode::kAck) && r->p().ack.echo_ts == p.mbth.timestamp) ||
                   (is_op(*r, Opcode::kNack) && r->p().nack.psn == p.mbth.psn);
    if (answers) ctx.fail("the DUT answered a frame it must drop (" + what + ")", "no answer", r);
  }
  if (m.p().ack.cum_psn != p.mbth.psn)
    ctx.fail("the marker's ACK shows the spoiled PSN received (" + what + ")",
             "ACK cum_psn=" + std::to_string(p.mbth.psn), &m);
  for (int i = 0; i < 64; ++i)
    if (*ctx.mem(off + i)) ctx.fail("the spoiled frame's payload was placed (" + what + ")");
}

// Sends a 64-byte WRITE changed by `edit` (still valid); the DUT must place
// it and acknowledge it.
const Rx& expect_accepted(Ctx& ctx, Conn& c, const std::string& what, const Spoil& edit,
                          const proto::FrameHeaders* h = nullptr) {
  const uint64_t off = 8192;
  std::memset(ctx.mem(off), 0, 64);
  auto data = pattern(64, 0x47);
  proto::Packet p = write_req(ctx, c, off, data);
  Frame f = ctx.frame(p, h);
  Layout l(ctx);
  edit(f, l, ctx);
  ctx.send(f, what);
  const Rx& a = ctx.expect_ack(c, p.mbth.timestamp, "ACK of the " + what + " WRITE, cum_psn=" +
                                                        std::to_string(p.mbth.psn + 1));
  ctx.need(a.p().ack.cum_psn == p.mbth.psn + 1, "the " + what + " WRITE was not received", &a);
  ctx.need(std::memcmp(ctx.mem(off), data.data(), 64) == 0, "the " + what + " WRITE was not placed");
  return a;
}
const Rx& expect_accepted(Ctx& ctx, const std::string& what, const Spoil& edit) {
  return expect_accepted(ctx, ctx.connect(), what, edit);
}

void need_v4(Ctx& ctx) {
  if (ctx.setup().ipv6) ctx.skip("an IPv4 rule; this run is over IPv6");
}
void need_v6(Ctx& ctx) {
  if (!ctx.setup().ipv6) ctx.skip("an IPv6 rule; run the suite with --ipv6");
}

}  // namespace

CONFORM_CASE(vlan_tag_accepted, Level::kMust, ({"R2.1-1"}), "a frame with one 802.1Q tag is accepted") {
  expect_accepted(ctx, "802.1Q-tagged", [](Frame& f, const Layout&, Ctx&) {
    const uint8_t tag[4] = {0x81, 0x00, 0x00, 0x05};  // VLAN 5, priority 0
    f.insert(f.begin() + 12, tag, tag + 4);
  });
}

CONFORM_CASE(ipv4_options_skipped, Level::kMust, ({"R2.1-2"}), "IPv4 options are skipped per IHL") {
  need_v4(ctx);
  expect_accepted(ctx, "IPv4-options", [](Frame& f, const Layout& l, Ctx&) {
    const uint8_t nops[4] = {0x01, 0x01, 0x01, 0x00};  // NOP NOP NOP EOL
    f.insert(f.begin() + static_cast<long>(l.udp), nops, nops + 4);
    f[l.ip] = 0x46;
    put16(f, l.ip + 2, static_cast<uint16_t>(get16(f, l.ip + 2) + 4));
    Layout shifted = l;
    shifted.udp += 4;
    shifted.tp += 4;
    fix_ip(f, shifted);
  });
}

CONFORM_CASE(ipv4_bad_header_checksum_dropped, Level::kMust, ({"R2.1-3"}),
             "an IPv4 header with a bad checksum is dropped") {
  need_v4(ctx);
  expect_dropped(ctx, "bad IPv4 header checksum", [](Frame& f, const Layout& l, Ctx&) { f[l.ip + 11] ^= 0x01; });
}

CONFORM_CASE(ipv4_fragment_dropped, Level::kMust, ({"R2.1-3"}), "IPv4 MF or a fragment offset is dropped") {
  need_v4(ctx);
  expect_dropped(ctx, "IPv4 MF set", [](Frame& f, const Layout& l, Ctx& x) {
    f[l.ip + 6] |= 0x20;
    fix_ip(f, l);
    (void)x;
  });
  expect_dropped(ctx, "IPv4 fragment offset 8", [](Frame& f, const Layout& l, Ctx&) {
    f[l.ip + 7] = 0x01;
    fix_ip(f, l);
  });
}

CONFORM_CASE(ethernet_padding_ignored, Level::kMust, ({"R2.1-5"}),
             "bytes after the IP packet (padding, FCS) are not payload") {
  expect_accepted(ctx, "padded", [](Frame& f, const Layout&, Ctx&) { f.insert(f.end(), 24, 0xEE); });
}

CONFORM_CASE(any_source_port_accepted, Level::kMust, ({"R2.2-2"}),
             "packets of one message from different UDP source ports are all accepted") {
  Conn& c = ctx.connect();
  const uint32_t mtu = ctx.setup().mtu_bytes, len = 3 * mtu;
  auto data = pattern(len, 0x55);
  std::memset(ctx.mem(0), 0, len);
  const uint16_t ports[3] = {1, proto::kUdpPort, 0xFFFF};
  uint32_t last_ts = 0, first = c.tx_psn;
  for (int k = 0; k < 3; ++k) {
    proto::Packet p = ctx.request(c, Opcode::kWrite);
    p.reth = {ctx.va(0), ctx.rkey(), len};
    p.mbth.offset = k * mtu;
    p.mbth.path_id = static_cast<uint8_t>(k * 40);
    p.mbth.flags = proto::kFlagAckReq | (k == 2 ? proto::kFlagLast : 0);
    p.payload = std::span<const uint8_t>(data).subspan(k * mtu, mtu);
    proto::FrameHeaders h = ctx.headers();
    h.src_port = ports[k];
    ctx.send(ctx.frame(p, &h), "source port " + std::to_string(ports[k]));
    last_ts = p.mbth.timestamp;
  }
  const Rx& a = ctx.expect_ack(c, last_ts, "ACK of all three packets");
  ctx.need(a.p().ack.cum_psn == first + 3, "not every packet was received", &a);
  ctx.need(std::memcmp(ctx.mem(0), data.data(), len) == 0, "the message was not placed whole");
}

CONFORM_CASE(ect1_treated_as_ect0, Level::kMust, ({"R2.3-1"}), "ECT(1) is treated like ECT(0), not as CE") {
  const Rx& a = expect_accepted(ctx, "ECT(1)", [](Frame& f, const Layout& l, Ctx& x) { set_ecn(f, l, x, 0b01); });
  ctx.need(a.p().ack.ce_count == 0 && !(a.p().ack.ack_flags & proto::kAckFlagCe),
           "ECT(1) was reported as a CE mark", &a);
}

CONFORM_CASE(udp_checksum_ipv4, Level::kMust, ({"R2.4-1"}),
             "IPv4: UDP checksum 0 and a right nonzero one are accepted, a wrong one dropped") {
  need_v4(ctx);
  Conn& c = ctx.connect();
  expect_accepted(ctx, c, "checksum-0", [](Frame&, const Layout&, Ctx&) {});
  auto right = [](Frame& f, const Layout& l, Ctx& x) {
    put16(f, l.udp + 6, proto::udp_checksum(x.setup().peer_ip, x.setup().dut_ip,
                                            std::span<const uint8_t>(f.data() + l.udp, f.size() - l.udp)));
  };
  expect_accepted(ctx, c, "nonzero-checksum", right);
  expect_dropped(ctx, "wrong nonzero UDP checksum", [&](Frame& f, const Layout& l, Ctx& x) {
    right(f, l, x);
    f[l.udp + 7] ^= 0x10;
  });
}

CONFORM_CASE(udp_checksum_ipv6, Level::kMust, ({"R2.4-2"}), "IPv6: UDP checksum 0 or a wrong one is dropped") {
  need_v6(ctx);
  expect_dropped(ctx, "IPv6 UDP checksum 0", [](Frame& f, const Layout& l, Ctx&) { put16(f, l.udp + 6, 0); });
  expect_dropped(ctx, "wrong IPv6 UDP checksum", [](Frame& f, const Layout& l, Ctx&) { f[l.udp + 7] ^= 0x01; });
}

CONFORM_CASE(udp_length_checked, Level::kMust, ({"R2.4-3"}),
             "a UDP length beyond the IP payload is dropped; bytes after the UDP end are ignored") {
  expect_dropped(ctx, "UDP length beyond the IP payload", [](Frame& f, const Layout& l, Ctx& x) {
    put16(f, l.udp + 4, static_cast<uint16_t>(get16(f, l.udp + 4) + 8));
    fix_udp(f, l, x);
  });
  expect_dropped(ctx, "UDP length below 8", [](Frame& f, const Layout& l, Ctx&) { put16(f, l.udp + 4, 4); });
  expect_accepted(ctx, "trailing-bytes-in-IP", [](Frame& f, const Layout& l, Ctx& x) {
    f.insert(f.end(), 8, 0x77);
    put16(f, l.ip + (l.v4 ? 2 : 4), static_cast<uint16_t>(get16(f, l.ip + (l.v4 ? 2 : 4)) + 8));
    fix_ip(f, l);
    (void)x;
  });
}

CONFORM_CASE(reserved_bits_ignored, Level::kMust, ({"R3-1"}), "reserved MBTH bits set do not cause a drop") {
  expect_accepted(ctx, "reserved-bits", [](Frame& f, const Layout& l, Ctx& x) {
    f[l.tp] |= 0x0F;      // version byte, low nibble
    f[l.tp + 2] |= 0xFF;  // flags 0xFFF0
    f[l.tp + 3] |= 0xF0;
    fix_icrc(f, l);
    fix_udp(f, l, x);
  });
}

CONFORM_CASE(payload_on_payloadless_opcode_dropped, Level::kMust, ({"R3.0-1"}),
             "a READ_REQ carrying payload is malformed and dropped") {
  Conn& c = ctx.connect();
  proto::Packet p = ctx.request(c, Opcode::kReadReq);
  p.reth = {ctx.va(0), ctx.rkey(), 64};
  Frame f = ctx.frame(p);
  Layout l(ctx);
  grow_payload(f, l, ctx, 8);
  ctx.send(f, "READ_REQ with 8 payload bytes");
  const Rx& m = ctx.marker(c);
  for (const Rx* r : ctx.pending(c))
    if (is_op(*r, Opcode::kReadResp)) ctx.fail("the malformed READ_REQ was answered", "no READ_RESP", r);
  ctx.need(m.p().ack.cum_psn == p.mbth.psn, "the malformed READ_REQ was received", &m);
}

CONFORM_CASE(bad_version_dropped, Level::kMust, ({"R3.1-1", "R9-1"}), "MBTH version 2 is dropped") {
  expect_dropped(ctx, "version 2", [](Frame& f, const Layout& l, Ctx& x) {
    f[l.tp] = static_cast<uint8_t>(0x20 | (f[l.tp] & 0x0F));
    fix_icrc(f, l);
    fix_udp(f, l, x);
  });
}

CONFORM_CASE(bad_icrc_dropped, Level::kMust, ({"R5-1", "R5-2"}), "a bad ICRC is dropped: not placed, not answered") {
  expect_dropped(ctx, "bad ICRC", [](Frame& f, const Layout& l, Ctx& x) {
    f[f.size() - 1] ^= 0x01;
    fix_udp(f, l, x);
  });
}

CONFORM_CASE(bad_icrc_changes_no_state, Level::kMust, ({"R5-2"}),
             "a CE-marked frame with a bad ICRC changes neither the CE count nor the echoed timestamp") {
  Conn& c = ctx.connect();
  proto::Packet p = write_req(ctx, c, 0, {});
  p.mbth.timestamp = 0xBADC0DE;
  proto::FrameHeaders h = ctx.headers();
  h.ecn = 0b11;
  Frame f = ctx.frame(p, &h);
  Layout l(ctx);
  f[f.size() - 2] ^= 0x40;
  fix_udp(f, l, ctx);
  ctx.send(f, "CE-marked, bad ICRC");
  const Rx& m = ctx.marker(c);
  ctx.need(m.p().ack.ce_count == 0 && !(m.p().ack.ack_flags & proto::kAckFlagCe),
           "the corrupt frame's CE mark was counted", &m);
  for (const Rx* r : ctx.pending(c))
    if (is_op(*r, Opcode::kAck) && r->p().ack.echo_ts == p.mbth.timestamp)
      ctx.fail("the corrupt frame's timestamp was echoed", "", r);
}

CONFORM_CASE(wrong_source_dropped, Level::kMust, ({"R6.11-1"}),
             "a request from an address that is not the QP's peer is dropped") {
  proto::FrameHeaders h = ctx.headers();
  h.src_ip = ctx.setup().other_ip;
  expect_dropped(ctx, "from a third address", [](Frame&, const Layout&, Ctx&) {}, &h);
}

}  // namespace metaroce::conform::cases
