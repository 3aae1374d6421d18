// Helpers the conformance cases share: frame surgery (one field wrong,
// every other one valid, through the codec's own checksums) and the
// tester's moves as requester and as responder.
#pragma once

#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "proto/packet.h"
#include "tools/conformance/suite.h"

namespace metaroce::conform::cases {

using proto::Opcode;
using Frame = std::vector<uint8_t>;

// Byte offsets in a frame without a VLAN tag.
struct Layout {
  size_t ip = proto::kEthLen, udp, tp;  // IP header, UDP header, MBTH
  bool v4;
  explicit Layout(const Ctx& ctx)
      : udp(proto::kEthLen + (ctx.setup().ipv6 ? proto::kIpv6Len : proto::kIpv4Len)),
        tp(udp + proto::kUdpLen),
        v4(!ctx.setup().ipv6) {}
};

inline uint16_t get16(const Frame& f, size_t at) { return static_cast<uint16_t>(f[at] << 8 | f[at + 1]); }
inline void put16(Frame& f, size_t at, uint16_t v) {
  f[at] = static_cast<uint8_t>(v >> 8);
  f[at + 1] = static_cast<uint8_t>(v);
}

// Recomputes what an edit invalidated: the ICRC over the UDP payload (per
// the UDP length), the IPv4 header checksum, the IPv6 UDP checksum.
inline void fix_icrc(Frame& f, const Layout& l) {
  size_t udp_len = get16(f, l.udp + 4);
  proto::seal_icrc(std::span<uint8_t>(f.data() + l.tp, udp_len - proto::kUdpLen));
}
inline void fix_ip(Frame& f, const Layout& l) {
  if (!l.v4) return;
  size_t ihl = (f[l.ip] & 0x0F) * 4u;
  put16(f, l.ip + 10, 0);
  put16(f, l.ip + 10, proto::ipv4_header_checksum(std::span<const uint8_t>(f.data() + l.ip, ihl)));
}
inline void fix_udp(Frame& f, const Layout& l, const Ctx& ctx) {
  if (l.v4) return;
  size_t udp_len = get16(f, l.udp + 4);
  put16(f, l.udp + 6, 0);
  put16(f, l.udp + 6, proto::udp_checksum(ctx.setup().peer_ip, ctx.setup().dut_ip,
                                          std::span<const uint8_t>(f.data() + l.udp, udp_len)));
}
inline void fix_all(Frame& f, const Layout& l, const Ctx& ctx) {
  fix_icrc(f, l);
  fix_ip(f, l);
  fix_udp(f, l, ctx);
}
// Grows the IP packet and the UDP datagram by n bytes inserted before the
// ICRC (a payload on an opcode that allows none), checksums fixed.
inline void grow_payload(Frame& f, const Layout& l, const Ctx& ctx, size_t n) {
  f.insert(f.end() - proto::kIcrcLen, n, 0x5a);
  put16(f, l.udp + 4, static_cast<uint16_t>(get16(f, l.udp + 4) + n));
  put16(f, l.ip + (l.v4 ? 2 : 4), static_cast<uint16_t>(get16(f, l.ip + (l.v4 ? 2 : 4)) + n));
  fix_all(f, l, ctx);
}
inline void set_ecn(Frame& f, const Layout& l, const Ctx& ctx, uint8_t ecn) {
  if (l.v4) {
    f[l.ip + 1] = static_cast<uint8_t>((f[l.ip + 1] & 0xFC) | ecn);
  } else {
    f[l.ip + 1] = static_cast<uint8_t>((f[l.ip + 1] & 0xCF) | (ecn << 4));
  }
  fix_ip(f, l);
  (void)ctx;
}

// A WRITE of `data` into the tester's MR at `off`, next PSN, flags A|L.
inline proto::Packet write_req(Ctx& ctx, Conn& c, uint64_t off, std::span<const uint8_t> data) {
  proto::Packet p = ctx.request(c, Opcode::kWrite);
  p.reth = {ctx.va(off), ctx.rkey(), static_cast<uint32_t>(data.size())};
  p.payload = data;
  return p;
}

inline std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed + i * 7);
  return v;
}
inline bool is_op(const Rx& r, Opcode op) { return r.p().mbth.opcode == op; }
inline bool is_request(const Rx& r) {
  switch (r.p().mbth.opcode) {
    case Opcode::kSend: case Opcode::kSendImm: case Opcode::kWrite: case Opcode::kWriteImm:
    case Opcode::kReadReq: case Opcode::kAtomicCmpSwap: case Opcode::kAtomicFetchAdd: return true;
    default: return false;
  }
}

// An ACK from the tester (the DUT's requests' responder) on c.
inline proto::Packet ack_pkt(Conn& c, uint32_t cum, uint64_t sack = 0, uint32_t echo = 0) {
  proto::Packet p;
  p.mbth.opcode = Opcode::kAck;
  p.mbth.dest_qpn = c.dut_qpn();
  p.ack.cum_psn = cum;
  p.ack.sack = sack;
  p.ack.echo_ts = echo;
  return p;
}
inline proto::Packet nack_pkt(Conn& c, proto::NackReason reason, uint32_t psn) {
  proto::Packet p;
  p.mbth.opcode = Opcode::kNack;
  p.mbth.dest_qpn = c.dut_qpn();
  p.nack = {reason, 0, psn};
  return p;
}

// The next `n` first transmissions of requests the DUT sends on c.
inline std::vector<const Rx*> dut_requests(Ctx& ctx, Conn& c, size_t n, const std::string& what) {
  std::vector<const Rx*> v;
  while (v.size() < n) {
    v.push_back(&ctx.expect(c, what, [](const Rx& r) {
      return is_request(r) && !(r.p().mbth.flags & proto::kFlagRetransmit);
    }));
  }
  return v;
}

// The DUT's send completion, or a failure naming what was expected.
inline ibv_wc send_completion(Ctx& ctx, Conn& c, const std::string& what, double seconds = 30) {
  auto wc = c.qp->send_wc(seconds);
  if (!wc) ctx.fail("no send completion within " + std::to_string(static_cast<int>(seconds)) + " s", what);
  return *wc;
}
inline ibv_wc recv_completion(Ctx& ctx, Conn& c, const std::string& what, double seconds = 30) {
  auto wc = c.qp->recv_wc(seconds);
  if (!wc) ctx.fail("no receive completion within " + std::to_string(static_cast<int>(seconds)) + " s", what);
  return *wc;
}
// Plays a well-behaved responder on c until the DUT's next send completion
// (within `seconds`): every request PSN seen from `high` on is acknowledged
// (first transmissions, retransmissions, READ re-issues: the DUT's timers may
// be faster than this tester), READ_REQs are answered from read_data (by
// message offset), atomics with `original`.
struct Serve {
  std::span<const uint8_t> read_data;
  uint64_t original = 0;
};
inline ibv_wc serve(Ctx& ctx, Conn& c, uint32_t high, const std::string& what, const Serve& s = {},
                    double seconds = 30) {
  const uint32_t mtu = ctx.setup().mtu_bytes;
  for (double end = now_s() + seconds; now_s() < end;) {
    if (auto wc = c.qp->send_wc(0)) return *wc;
    const Rx* r = ctx.await(c, [](const Rx& x) { return is_request(x); }, 0.05);
    proto::Packet a = ack_pkt(c, high);
    if (r) {
      const proto::Packet& q = r->p();
      if (proto::seq_le(high, q.mbth.psn)) high = q.mbth.psn + 1;
      if (q.mbth.opcode == Opcode::kReadReq) {
        for (uint32_t done = 0; done < q.reth.length || (q.reth.length == 0 && done == 0);) {
          uint32_t off = q.mbth.offset + done, n = std::min(mtu, q.reth.length - done);
          proto::Packet rr;
          rr.mbth = {proto::kVersion, Opcode::kReadResp, 0, q.mbth.path_id, c.dut_qpn(), q.mbth.psn, q.mbth.msn, off, 0};
          if (done + n >= q.reth.length) rr.mbth.flags = proto::kFlagLast;
          if (off + n <= s.read_data.size()) rr.payload = s.read_data.subspan(off, n);
          ctx.send(rr);
          done += n;
          if (n == 0) break;
        }
      } else if (q.mbth.opcode == Opcode::kAtomicCmpSwap || q.mbth.opcode == Opcode::kAtomicFetchAdd) {
        proto::Packet ar;
        ar.mbth = {proto::kVersion, Opcode::kAtomicResp, proto::kFlagLast, q.mbth.path_id, c.dut_qpn(),
                   q.mbth.psn, q.mbth.msn, 0, 0};
        ar.atomic_ack.original = s.original;
        ctx.send(ar);
      }
      a = ack_pkt(c, high, 0, q.mbth.timestamp);
      a.mbth.path_id = q.mbth.path_id;
    }
    ctx.send(a);
  }
  ctx.fail("no send completion within " + std::to_string(static_cast<int>(seconds)) + " s", what);
}

inline void need_status(Ctx& ctx, const ibv_wc& wc, ibv_wc_status want, const std::string& what) {
  if (wc.status != want)
    ctx.fail(what + ": completion status " + ibv_wc_status_str(wc.status), ibv_wc_status_str(want));
}

}  // namespace metaroce::conform::cases
