// mroce_inject: writes malformed MetaRoCE frames onto an interface through
// an AF_PACKET socket, for the daemon end-to-end tests: the daemon on the
// far end of the veth must count and drop every one of them.
//
//   mroce_inject IFNAME SRC_IP DST_IP DST_MAC [--seed N] [--random N]
//   mroce_inject IFNAME SRC_IP DST_IP DST_MAC --forge QPN [--rounds N] [--requests 0|1]
//
// Frames are built with proto::build_frame and then damaged. Prints one
// line of what was sent per class, which the test compares with the
// receiving daemon's counters:
//   sent unknown_qp=N bad_icrc=N parse=N random=N
//     unknown_qp  well-formed frames for a QP that does not exist
//     bad_icrc    well-formed but for one ICRC bit
//     parse       other parse failures (truncated headers, bad version,
//                 unknown opcode, wrong UDP length, bad payload length),
//                 ICRC recomputed so only the named defect is wrong
//     random      random UDP payloads to port 4796 (parse failures too)
//
// --forge QPN: instead, well-formed frames with a valid ICRC for a live QP
// (tests/hostile/network_e2e_test.sh): per round an ACK (random cum_psn and
// SACK, credit 1, CE, a random echo), a NACK REMOTE_ACCESS_ERROR for a
// random PSN, a READ_RESP and an ATOMIC_RESP for read MSN round % 64 with a
// random PSN, and with --requests 1 a WRITE and a READ_REQ at random PSNs.
// Sent from a third address every one must be dropped as wrong-source;
// sent with the peer's address, as not matching anything outstanding.
//   sent ack=N nack=N read_resp=N atomic_resp=N write=N read_req=N
#include <arpa/inet.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <random>
#include <string>
#include <vector>

#include "proto/packet.h"

namespace {

namespace proto = metaroce::proto;

int g_sock = -1;
sockaddr_ll g_addr{};
unsigned g_sent = 0;

void send_frame(const std::vector<uint8_t> &f) {
  if (sendto(g_sock, f.data(), f.size(), 0, reinterpret_cast<sockaddr *>(&g_addr), sizeof(g_addr)) !=
      static_cast<ssize_t>(f.size())) {
    fprintf(stderr, "mroce_inject: sendto (%zu bytes): %s\n", f.size(), strerror(errno));
    exit(1);
  }
  // Pace: the receiver's ring must not overflow, or drops would be counted
  // nowhere the test looks.
  if (++g_sent % 16 == 0) usleep(2000);
}

constexpr size_t kIp = proto::kEthLen;             // IPv4 header
constexpr size_t kUdp = kIp + proto::kIpv4Len;     // UDP header
constexpr size_t kTp = kUdp + proto::kUdpLen;      // MBTH

uint16_t ip_checksum(const uint8_t *p) {
  uint32_t s = 0;
  for (int i = 0; i < 20; i += 2) s += (p[i] << 8) | p[i + 1];
  while (s >> 16) s = (s & 0xffff) + (s >> 16);
  return static_cast<uint16_t>(~s);
}
void put16(uint8_t *p, uint16_t v) { p[0] = static_cast<uint8_t>(v >> 8); p[1] = static_cast<uint8_t>(v); }

// Sets IP total length and UDP length for a UDP payload of `tp` bytes and
// truncates the frame to match; fixes the IP header checksum.
void resize_udp(std::vector<uint8_t> *f, size_t tp) {
  f->resize(kTp + tp);
  put16(f->data() + kIp + 2, static_cast<uint16_t>(proto::kIpv4Len + proto::kUdpLen + tp));
  put16(f->data() + kIp + 10, 0);
  put16(f->data() + kIp + 10, ip_checksum(f->data() + kIp));
  put16(f->data() + kUdp + 4, static_cast<uint16_t>(proto::kUdpLen + tp));
}

// Recomputes the ICRC (the last 4 bytes of the UDP payload).
void fix_icrc(std::vector<uint8_t> *f) {
  size_t end = f->size() - proto::kIcrcLen;
  uint32_t c = proto::crc32c(std::span<const uint8_t>(f->data() + kTp, end - kTp));
  for (int i = 0; i < 4; i++) (*f)[end + i] = static_cast<uint8_t>(c >> (24 - 8 * i));
}

struct Injector {
  proto::FrameHeaders h;
  std::vector<uint8_t> payload = std::vector<uint8_t>(1024, 0x3c);

  std::vector<uint8_t> frame(proto::Opcode op, uint32_t qpn, size_t payload_len) {
    proto::Packet p;
    p.mbth.opcode = op;
    p.mbth.dest_qpn = qpn;
    p.mbth.psn = 7;
    p.mbth.flags = proto::kFlagLast;
    p.reth = {0x10000, 0x1234, static_cast<uint32_t>(payload_len)};
    p.seth = {static_cast<uint32_t>(payload_len)};
    p.atomic = {0x10000, 0x1234, 1, 0};
    if (op == proto::Opcode::kSend || op == proto::Opcode::kWrite || op == proto::Opcode::kSendImm ||
        op == proto::Opcode::kWriteImm || op == proto::Opcode::kReadResp)
      p.payload = std::span<const uint8_t>(payload.data(), payload_len);
    std::vector<uint8_t> f(2048);
    size_t n = proto::build_frame(h, p, f);
    if (n == 0) {
      fprintf(stderr, "mroce_inject: build_frame failed for opcode %d\n", static_cast<int>(op));
      exit(1);
    }
    f.resize(n);
    return f;
  }
};

// --forge: responses (and requests) that would complete, fail or throttle
// the QP if the receiver matched them by QPN and MSN alone.
int forge(Injector &in, uint32_t qpn, int rounds, bool requests, uint64_t seed) {
  using Op = proto::Opcode;
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> evil(1024, 0xee);
  unsigned ack = 0, nack = 0, read_resp = 0, atomic_resp = 0, write = 0, read_req = 0;
  auto send = [&](proto::Packet &p, unsigned *n) {
    p.mbth.dest_qpn = qpn;
    p.mbth.timestamp = static_cast<uint32_t>(rng());
    std::vector<uint8_t> f(2048);
    f.resize(proto::build_frame(in.h, p, f));
    send_frame(f);
    usleep(1000);  // ~1,000 frames/s: a steady forger, not a flood that drops the real traffic
    ++*n;
  };
  for (int r = 0; r < rounds; r++) {
    proto::Packet a;
    a.mbth.opcode = Op::kAck;
    a.ack = {static_cast<uint32_t>(rng()), rng(), static_cast<uint32_t>(rng()), 1, 1000, 0,
             proto::kAckFlagCe, 0};
    send(a, &ack);
    proto::Packet n;
    n.mbth.opcode = Op::kNack;
    n.nack = {proto::NackReason::kRemoteAccessError, 0, static_cast<uint32_t>(rng())};
    send(n, &nack);
    proto::Packet rr;
    rr.mbth.opcode = Op::kReadResp;
    rr.mbth.psn = static_cast<uint32_t>(rng());
    rr.mbth.msn = static_cast<uint32_t>(r % 64);
    rr.mbth.flags = proto::kFlagLast;
    rr.payload = evil;
    send(rr, &read_resp);
    proto::Packet ar;
    ar.mbth.opcode = Op::kAtomicResp;
    ar.mbth.psn = static_cast<uint32_t>(rng());
    ar.mbth.msn = static_cast<uint32_t>(r % 64);
    ar.mbth.flags = proto::kFlagLast;
    ar.atomic_ack.original = 0xdead;
    send(ar, &atomic_resp);
    if (!requests) continue;
    proto::Packet w;
    w.mbth.opcode = Op::kWrite;
    w.mbth.psn = static_cast<uint32_t>(rng());
    w.mbth.flags = proto::kFlagLast | proto::kFlagAckReq;
    w.reth = {rng(), static_cast<uint32_t>(rng()), 64};
    w.payload = std::span<const uint8_t>(evil.data(), 64);
    send(w, &write);
    proto::Packet q;
    q.mbth.opcode = Op::kReadReq;
    q.mbth.psn = static_cast<uint32_t>(rng());
    q.mbth.flags = proto::kFlagLast | proto::kFlagAckReq;
    q.reth = {rng(), static_cast<uint32_t>(rng()), 4096};
    send(q, &read_req);
  }
  printf("sent ack=%u nack=%u read_resp=%u atomic_resp=%u write=%u read_req=%u\n", ack, nack,
         read_resp, atomic_resp, write, read_req);
  return 0;
}

proto::MacAddr parse_mac(const char *s) {
  proto::MacAddr m{};
  unsigned v[6];
  if (sscanf(s, "%x:%x:%x:%x:%x:%x", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5]) != 6) {
    fprintf(stderr, "mroce_inject: bad MAC %s\n", s);
    exit(2);
  }
  for (int i = 0; i < 6; i++) m[i] = static_cast<uint8_t>(v[i]);
  return m;
}

proto::IpAddr parse_ip(const char *s) {
  in_addr a;
  if (inet_pton(AF_INET, s, &a) != 1) {
    fprintf(stderr, "mroce_inject: bad IPv4 address %s\n", s);
    exit(2);
  }
  return proto::IpAddr::v4(ntohl(a.s_addr));
}

}  // namespace

int main(int argc, char **argv) {
  if (argc < 5) {
    fprintf(stderr, "usage: mroce_inject IFNAME SRC_IP DST_IP DST_MAC [--seed N] [--random N]\n");
    return 2;
  }
  uint64_t seed = 1;
  int random_count = 2000, rounds = 100;
  long forge_qpn = -1;
  bool requests = false;
  for (int i = 5; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--seed")) seed = strtoull(argv[i + 1], nullptr, 0);
    else if (!strcmp(argv[i], "--random")) random_count = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--forge")) forge_qpn = strtol(argv[i + 1], nullptr, 0);
    else if (!strcmp(argv[i], "--rounds")) rounds = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--requests")) requests = atoi(argv[i + 1]) != 0;
  }
  g_sock = socket(AF_PACKET, SOCK_RAW, htons(ETH_P_ALL));
  if (g_sock < 0) {
    fprintf(stderr, "mroce_inject: AF_PACKET socket: %s\n", strerror(errno));
    return 1;
  }
  ifreq ifr{};
  snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", argv[1]);
  if (ioctl(g_sock, SIOCGIFHWADDR, &ifr) != 0) {
    fprintf(stderr, "mroce_inject: %s: %s\n", argv[1], strerror(errno));
    return 1;
  }
  Injector in;
  memcpy(in.h.src_mac.data(), ifr.ifr_hwaddr.sa_data, 6);
  in.h.dst_mac = parse_mac(argv[4]);
  in.h.src_ip = parse_ip(argv[2]);
  in.h.dst_ip = parse_ip(argv[3]);
  g_addr.sll_family = AF_PACKET;
  g_addr.sll_ifindex = static_cast<int>(if_nametoindex(argv[1]));
  g_addr.sll_halen = 6;
  memcpy(g_addr.sll_addr, in.h.dst_mac.data(), 6);
  if (forge_qpn >= 0) return forge(in, static_cast<uint32_t>(forge_qpn), rounds, requests, seed);

  using Op = proto::Opcode;
  const Op ops[] = {Op::kSend, Op::kSendImm, Op::kWrite, Op::kWriteImm, Op::kReadReq, Op::kReadResp,
                    Op::kAtomicCmpSwap, Op::kAtomicFetchAdd, Op::kAtomicResp, Op::kAck, Op::kNack,
                    Op::kProbe, Op::kProbeReply};
  const uint32_t kNoQp = 0xfffff0;  // far above any QPN the daemon hands out
  unsigned unknown_qp = 0, bad_icrc = 0, parse = 0, random = 0;

  // Well-formed, for a QP that does not exist.
  for (int rep = 0; rep < 4; rep++)
    for (Op op : ops) {
      send_frame(in.frame(op, kNoQp + rep, 100));
      unknown_qp++;
    }
  // One ICRC bit flipped, in each byte of the ICRC and in the payload.
  for (Op op : ops) {
    for (int bit : {0, 9, 17, 31}) {
      std::vector<uint8_t> f = in.frame(op, kNoQp, 64);
      f[f.size() - 4 + bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
      send_frame(f);
      bad_icrc++;
    }
    std::vector<uint8_t> f = in.frame(op, kNoQp, 64);
    f[kTp + proto::kMbthLen - 1] ^= 0x80;  // MBTH.timestamp: only the ICRC notices
    send_frame(f);
    bad_icrc++;
  }
  // Truncated: the UDP payload cut inside MBTH, inside each extension
  // header, and inside the ICRC, with IP/UDP lengths consistent.
  for (Op op : ops) {
    std::vector<uint8_t> full = in.frame(op, kNoQp, 0);
    size_t tp_len = full.size() - kTp;
    for (size_t cut : {size_t{0}, size_t{1}, size_t{12}, proto::kMbthLen - 1, proto::kMbthLen,
                       proto::kMbthLen + 3, tp_len - 5, tp_len - 1}) {
      if (cut >= tp_len) continue;
      std::vector<uint8_t> f = full;
      resize_udp(&f, cut);
      send_frame(f);
      parse++;
    }
  }
  // Bad version, unknown opcodes: ICRC correct for the damaged bytes.
  for (uint8_t v : {0x00, 0x20, 0xf0}) {
    std::vector<uint8_t> f = in.frame(Op::kSend, kNoQp, 32);
    f[kTp] = v;
    fix_icrc(&f);
    send_frame(f);
    parse++;
  }
  for (uint8_t op : {0x00, 0x0b, 0x0f, 0x14, 0x7f, 0xff}) {  // unassigned (0x0a is SEND_INV, §15)
    std::vector<uint8_t> f = in.frame(Op::kSend, kNoQp, 32);
    f[kTp + 1] = op;
    fix_icrc(&f);
    send_frame(f);
    parse++;
  }
  // Payload on opcodes that carry none (READ_REQ, ACK): a bad length.
  for (Op op : {Op::kReadReq, Op::kAck, Op::kAtomicFetchAdd}) {
    std::vector<uint8_t> f = in.frame(op, kNoQp, 0);
    size_t tp = f.size() - kTp;
    std::vector<uint8_t> g(f.begin(), f.end() - proto::kIcrcLen);
    g.insert(g.end(), 40, 0xee);
    g.insert(g.end(), 4, 0);
    f = g;
    resize_udp(&f, tp + 40);
    fix_icrc(&f);
    send_frame(f);
    parse++;
  }
  // UDP length wrong: longer than the IP payload, shorter than a UDP header.
  for (int delta : {+1, +100, -1000}) {
    std::vector<uint8_t> f = in.frame(Op::kWrite, kNoQp, 64);
    int udp_len = static_cast<int>(f.size() - kUdp) + delta;
    if (udp_len < 0) udp_len = 3;
    put16(f.data() + kUdp + 4, static_cast<uint16_t>(udp_len));
    send_frame(f);
    parse++;
  }
  // Random UDP payloads to port 4796.
  std::mt19937_64 rng(seed);
  for (int i = 0; i < random_count; i++) {
    std::vector<uint8_t> f = in.frame(Op::kSend, kNoQp, 0);
    size_t len = rng() % 400;
    resize_udp(&f, len);
    for (size_t j = kTp; j < f.size(); j++) f[j] = static_cast<uint8_t>(rng());
    if (len >= 2 && rng() % 2) f[kTp] = 0x10;  // version 1: get further into the parser
    send_frame(f);
    random++;
  }
  printf("sent unknown_qp=%u bad_icrc=%u parse=%u random=%u\n", unknown_qp, bad_icrc, parse, random);
  return 0;
}
