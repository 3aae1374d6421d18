// io_pingpong: exercises a PacketIo backend between two namespaces with real
// MetaRoCE frames (proto::build_frame / parse_frame, ICRC checked).
//
//   io_pingpong --role=sink   --if=IF --io=xdp|packet|auto --count=N [--timeout=S]
//   io_pingpong --role=source --if=IF --io=... --src-ip=A --dst-ip=B --dst-mac=M
//               --count=N --size=BYTES [--pace-us=U]
//   io_pingpong --role=echo   --if=IF --io=...            (reflects frames)
//   io_pingpong --role=ping   --if=IF --io=... --src-ip --dst-ip --dst-mac --count=N
//   io_pingpong --role=hold   --if=IF --io=xdp            (opens, then sleeps)
// Kernel-stack checks (traffic that must NOT be taken by our XDP program):
//   io_pingpong --role=udp-server --port=P [--timeout=S]  (echoes datagrams)
//   io_pingpong --role=udp-client --dst-ip=B --port=P     (expects the echo)
//   io_pingpong --role=icmp-ping  --dst-ip=B              (raw ICMP echo)
//   io_pingpong --role=gso-hostile --if=IF --src-ip --dst-ip --dst-mac --size=BYTES
//               (UDP GSO super-frames the receiver must refuse, from a raw socket)
// Common: --xdp-mode=auto|native|generic --ring=v2|v3 --max-frame=N --gso=1
//         --ready-file=PATH (written once the backend is open).
// Source: --paths=K (UDP source ports 0xC000 + seq % K; default one per
//         frame), --short-every=N (every Nth frame has half the payload),
//         --flush-held=N (every Nth frame: tx_flush() while its buffer is held).
// Prints figures; exits non-zero when frames are missing or damaged.
#include <arpa/inet.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <netinet/ip_icmp.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "firmware-model/daemon/io/packet_io.h"
#include "proto/packet.h"

namespace io = metaroce::daemon::io;
namespace proto = metaroce::proto;
using Clock = std::chrono::steady_clock;

namespace {

std::map<std::string, std::string> g_args;

std::string arg(const std::string& k, const std::string& def = "") {
  auto it = g_args.find(k);
  return it == g_args.end() ? def : it->second;
}
long num(const std::string& k, long def) { return g_args.count(k) ? std::stol(g_args[k]) : def; }

bool parse_ip(const std::string& s, proto::IpAddr* out) {
  in_addr a4;
  if (inet_pton(AF_INET, s.c_str(), &a4) == 1) {
    *out = proto::IpAddr::v4(ntohl(a4.s_addr));
    return true;
  }
  return inet_pton(AF_INET6, s.c_str(), out->bytes.data()) == 1;
}

bool parse_mac(const std::string& s, proto::MacAddr* out) {
  unsigned m[6];
  if (sscanf(s.c_str(), "%x:%x:%x:%x:%x:%x", &m[0], &m[1], &m[2], &m[3], &m[4], &m[5]) != 6) return false;
  for (int i = 0; i < 6; ++i) (*out)[i] = static_cast<uint8_t>(m[i]);
  return true;
}

bool own_mac(const std::string& ifname, proto::MacAddr* out) {
  int fd = socket(AF_INET, SOCK_DGRAM, 0);
  ifreq ifr{};
  snprintf(ifr.ifr_name, IFNAMSIZ, "%s", ifname.c_str());
  bool ok = ioctl(fd, SIOCGIFHWADDR, &ifr) == 0;
  close(fd);
  if (ok) std::memcpy(out->data(), ifr.ifr_hwaddr.sa_data, 6);
  return ok;
}

uint8_t pattern(uint32_t seq, size_t i) { return static_cast<uint8_t>(seq * 7 + i); }

double secs(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

std::unique_ptr<io::PacketIo> open_io() {
  io::IoOptions o;
  o.ifname = arg("if");
  if (!io::parse_backend(arg("io", "auto"), &o.backend)) {
    fprintf(stderr, "--io must be xdp, packet or auto\n");
    exit(2);
  }
  std::string mode = arg("xdp-mode", "auto");
  o.xdp_mode = mode == "native" ? io::XdpMode::kNative : mode == "generic" ? io::XdpMode::kGeneric : io::XdpMode::kAuto;
  o.packet_ring = arg("ring", "v2") == "v3" ? io::PacketRing::kV3 : io::PacketRing::kV2;
  o.max_frame = static_cast<uint32_t>(num("max-frame", 0));
  o.gso = num("gso", 0) != 0;
  o.log = [](io::LogLevel l, std::string_view m) {
    if (l != io::LogLevel::kDebug) fprintf(stderr, "[io] %.*s\n", static_cast<int>(m.size()), m.data());
  };
  std::string why;
  auto p = io::open_packet_io(o, &why);
  if (!p) {
    fprintf(stderr, "cannot open packet I/O on %s: %s\n", o.ifname.c_str(), why.c_str());
    exit(3);
  }
  printf("backend %s, max frame %u\n", p->name(), p->max_frame());
  fflush(stdout);
  if (!arg("ready-file").empty()) std::ofstream(arg("ready-file")) << p->name() << "\n";
  return p;
}

struct Sender {
  proto::FrameHeaders h;
  std::vector<uint8_t> payload;
  size_t payload_len = 0;
  uint32_t frame_len = 0;

  bool init(uint32_t frame_size) {
    frame_len = frame_size;
    if (!parse_ip(arg("src-ip"), &h.src_ip) || !parse_ip(arg("dst-ip"), &h.dst_ip) ||
        !parse_mac(arg("dst-mac"), &h.dst_mac) || !own_mac(arg("if"), &h.src_mac)) {
      fprintf(stderr, "need --src-ip, --dst-ip, --dst-mac and a valid --if\n");
      return false;
    }
    proto::Packet p;
    p.mbth.opcode = proto::Opcode::kSend;
    size_t overhead = proto::encap_length(h) + proto::transport_length(p);
    if (frame_size < overhead + 8) {
      fprintf(stderr, "--size must be at least %zu\n", overhead + 8);
      return false;
    }
    payload_len = frame_size - overhead;
    payload.resize(payload_len);
    return true;
  }

  // Builds frame `seq` into the backend's tx buffer. False: ring full.
  bool send(io::PacketIo& pio, uint32_t seq) {
    auto buf = pio.tx_alloc(frame_len);
    if (buf.empty()) return false;
    // --flush-held=N: every Nth frame, a flush while its buffer is held (a
    // port may flush while the engine reads a payload into the buffer).
    if (const long every = num("flush-held", 0); every && seq % every == every - 1) pio.tx_flush();
    const long short_every = num("short-every", 0), paths = num("paths", 0);
    const size_t len = short_every && seq % short_every == short_every - 1 ? payload_len / 2 : payload_len;
    for (size_t i = 0; i < len; ++i) payload[i] = pattern(seq, i);
    proto::Packet p;
    p.mbth.opcode = proto::Opcode::kSend;
    p.mbth.flags = proto::kFlagLast;
    p.mbth.psn = seq;
    p.mbth.dest_qpn = 0x11;
    p.seth.length = static_cast<uint32_t>(len);
    p.payload = std::span<const uint8_t>(payload.data(), len);
    h.src_port = static_cast<uint16_t>(0xC000 | (paths ? seq % paths : seq & 0x3fff));
    size_t n = proto::build_frame(h, p, buf);
    pio.tx_commit(static_cast<uint32_t>(n));
    return n != 0;
  }
};

// Checks one received frame: parses, ICRC, payload pattern. Returns psn or -1.
long check_frame(const io::RxFrame& f) {
  auto r = proto::parse_frame({f.data, f.len});
  if (!r) {
    fprintf(stderr, "bad frame (%u bytes): %s\n", f.len, r.error().message().c_str());
    return -1;
  }
  const proto::Packet& p = r.value().packet;
  for (size_t i = 0; i < p.payload.size(); ++i) {
    if (p.payload[i] != pattern(p.mbth.psn, i)) {
      fprintf(stderr, "payload mismatch in psn %u at byte %zu\n", p.mbth.psn, i);
      return -1;
    }
  }
  return p.mbth.psn;
}

void print_stats(const char* who, const io::IoStats& s) {
  printf("%s stats: rx %llu frames %llu B (gathered %llu, kernel drops %llu, invalid %llu); "
         "tx %llu frames %llu B (ring full %llu, held moved %llu, errors %llu, kicks %llu); "
         "gso super tx %llu rx %llu invalid %llu\n",
         who, (unsigned long long)s.rx_frames, (unsigned long long)s.rx_bytes, (unsigned long long)s.rx_gathered,
         (unsigned long long)s.rx_kernel_drops, (unsigned long long)s.rx_invalid, (unsigned long long)s.tx_frames,
         (unsigned long long)s.tx_bytes, (unsigned long long)s.tx_ring_full,
         (unsigned long long)s.tx_held_moved, (unsigned long long)s.tx_errors,
         (unsigned long long)s.tx_kicks, (unsigned long long)s.tx_gso_super,
         (unsigned long long)s.rx_gso_super, (unsigned long long)s.rx_gso_invalid);
}

int run_sink() {
  auto pio = open_io();
  long count = num("count", 1000);
  double timeout = static_cast<double>(num("timeout", 10));
  long ok = 0, bad = 0;
  uint64_t bytes = 0;
  std::vector<bool> seen(static_cast<size_t>(count), false);
  long dup = 0;
  io::RxFrame frames[64];
  Clock::time_point start = Clock::now(), first{}, last{};
  while (ok + bad < count) {
    int n = pio->rx_burst(frames);
    if (n < 0) {
      fprintf(stderr, "rx_burst: %d\n", n);
      return 1;
    }
    if (n == 0) {
      auto now = Clock::now();
      double idle = secs(now - (ok + bad ? last : start));
      if (idle > (ok + bad ? 1.0 : timeout)) break;
      continue;
    }
    last = Clock::now();
    if (!ok && !bad) first = last;
    for (int i = 0; i < n; ++i) {
      long psn = check_frame(frames[i]);
      bytes += frames[i].len;
      if (psn < 0) {
        bad++;
      } else {
        if (psn < count && seen[psn]) dup++;
        if (psn < count) seen[psn] = true;
        ok++;
      }
    }
    pio->rx_release();
  }
  double t = secs(last - first);
  printf("sink: %ld/%ld frames intact, %ld damaged, %ld duplicate", ok, count, bad, dup);
  if (t > 0) printf(", %.3f Mpps, %.2f Gbit/s", ok / t / 1e6, bytes * 8 / t / 1e9);
  printf("\n");
  print_stats("sink", pio->stats());
  long expect = num("expect", count);
  return (bad == 0 && dup == 0 && ok >= expect) ? 0 : 1;
}

int run_source() {
  auto pio = open_io();
  long count = num("count", 1000);
  long pace = num("pace-us", 0);
  int batch = static_cast<int>(num("batch", 32));
  Sender s;
  if (!s.init(static_cast<uint32_t>(num("size", 1024)))) return 2;
  if (static_cast<uint32_t>(num("size", 1024)) > pio->max_frame()) {
    fprintf(stderr, "--size exceeds the backend's max frame %u\n", pio->max_frame());
    return 2;
  }
  auto start = Clock::now();
  long seq = 0;
  while (seq < count) {
    int queued = 0;
    while (queued < batch && seq < count && s.send(*pio, static_cast<uint32_t>(seq))) {
      ++seq;
      ++queued;
    }
    pio->tx_flush();
    if (pace) usleep(static_cast<useconds_t>(pace));
  }
  for (int i = 0; i < 1000 && pio->tx_pending(); ++i) pio->tx_flush();
  double t = secs(Clock::now() - start);
  printf("source: %ld frames of %ld B in %.3f s: %.3f Mpps offered\n", count, num("size", 1024), t, count / t / 1e6);
  print_stats("source", pio->stats());
  return 0;
}

// Reflects every frame: swaps MAC and IP addresses (checksums unchanged).
int run_echo() {
  auto pio = open_io();
  io::RxFrame frames[64];
  double timeout = static_cast<double>(num("timeout", 30));
  auto last = Clock::now();
  long echoed = 0;
  while (secs(Clock::now() - last) < timeout) {
    int n = pio->rx_burst(frames);
    if (n <= 0) continue;
    last = Clock::now();
    for (int i = 0; i < n; ++i) {
      const io::RxFrame& f = frames[i];
      auto buf = pio->tx_alloc(f.len);
      if (buf.empty() || f.len < 14 + 40) continue;
      std::memcpy(buf.data(), f.data, f.len);
      std::memcpy(buf.data(), f.data + 6, 6);
      std::memcpy(buf.data() + 6, f.data, 6);
      bool v4 = f.data[12] == 0x08 && f.data[13] == 0x00;
      size_t a = v4 ? 26 : 22, len = v4 ? 4 : 16;
      std::memcpy(buf.data() + a, f.data + a + len, len);
      std::memcpy(buf.data() + a + len, f.data + a, len);
      pio->tx_commit(f.len);
      echoed++;
    }
    pio->rx_release();
    pio->tx_flush();
  }
  printf("echo: %ld frames reflected\n", echoed);
  return 0;
}

int run_ping() {
  auto pio = open_io();
  long count = num("count", 10000);
  Sender s;
  if (!s.init(static_cast<uint32_t>(num("size", 64)))) return 2;
  std::vector<double> rtt;
  io::RxFrame frames[8];
  long lost = 0;
  for (long seq = 0; seq < count; ++seq) {
    auto t0 = Clock::now();
    if (!s.send(*pio, static_cast<uint32_t>(seq))) {
      pio->tx_flush();
      --seq;
      continue;
    }
    pio->tx_flush();
    bool got = false;
    while (!got && secs(Clock::now() - t0) < 0.5) {
      int n = pio->rx_burst(frames);
      for (int i = 0; i < n; ++i)
        if (check_frame(frames[i]) == seq) got = true;
      pio->rx_release();
    }
    if (got) rtt.push_back(secs(Clock::now() - t0) * 1e6);
    else lost++;
  }
  std::sort(rtt.begin(), rtt.end());
  if (rtt.empty()) {
    printf("ping: no replies (%ld lost)\n", lost);
    return 1;
  }
  printf("ping: %zu replies, %ld lost, rtt p50 %.1f us p99 %.1f us\n", rtt.size(), lost, rtt[rtt.size() / 2],
         rtt[rtt.size() * 99 / 100]);
  return lost * 100 > count ? 1 : 0;
}

// Super-frames a receiver with --gso must drop and count (rx_gso_invalid),
// sent from a raw packet socket with PACKET_VNET_HDR (the kernel checks the
// virtio header; what it accepts is what reaches the peer): a segment size
// above the receiver's frame limit, lengths in the IP header that disagree
// with the frame, and a TCP segmentation type on a UDP frame.
int run_gso_hostile() {
  Sender s;
  if (!s.init(static_cast<uint32_t>(num("size", 1024)))) return 2;
  std::vector<uint8_t> frame(70000);
  proto::Packet p;
  p.mbth.opcode = proto::Opcode::kSend;
  p.mbth.flags = proto::kFlagLast;
  p.mbth.dest_qpn = 0x11;
  p.seth.length = static_cast<uint32_t>(s.payload_len);
  p.payload = s.payload;
  size_t n = proto::build_frame(s.h, p, frame);
  const bool v4 = s.h.dst_ip.is_v4();
  const size_t hl = v4 ? 42 : 62;
  if (n == 0) return 2;
  int fd = socket(AF_PACKET, SOCK_RAW, 0);
  int one = 1;
  if (fd < 0 || setsockopt(fd, SOL_PACKET, PACKET_VNET_HDR, &one, sizeof one) != 0) {
    perror("packet socket with PACKET_VNET_HDR");
    return 2;
  }
  sockaddr_ll sll{};
  sll.sll_family = AF_PACKET;
  sll.sll_ifindex = static_cast<int>(if_nametoindex(arg("if").c_str()));
  sll.sll_halen = 6;
  std::memcpy(sll.sll_addr, s.h.dst_mac.data(), 6);
  struct Vnet {
    uint8_t flags, gso_type;
    uint16_t hdr_len, gso_size, csum_start, csum_offset;
  };
  auto put16 = [&](size_t at, size_t v) {
    frame[at] = static_cast<uint8_t>(v >> 8);
    frame[at + 1] = static_cast<uint8_t>(v);
  };
  // A super-frame of `segs` segments of `seg` bytes; IP/UDP lengths for it
  // unless `lie` (then they claim one byte less).
  auto send_super = [&](uint8_t type, size_t seg, size_t segs, bool lie) {
    size_t len = hl + seg * segs;
    for (size_t i = hl; i < len; ++i) frame[i] = static_cast<uint8_t>(i);
    size_t udp = len - hl + 8 - (lie ? 1 : 0);
    put16(hl - 8 + 4, udp);
    if (v4) {
      put16(14 + 2, 20 + udp);
      put16(14 + 10, 0);
      put16(14 + 10, proto::ipv4_header_checksum({frame.data() + 14, 20}));
    } else {
      put16(14 + 4, udp);
    }
    put16(hl - 8 + 6, 0);
    Vnet v{1, type, static_cast<uint16_t>(hl), static_cast<uint16_t>(seg),
           static_cast<uint16_t>(hl - 8), 6};
    iovec iov[2] = {{&v, sizeof v}, {frame.data(), len}};
    msghdr m{};
    m.msg_name = &sll;
    m.msg_namelen = sizeof sll;
    m.msg_iov = iov;
    m.msg_iovlen = 2;
    bool ok = sendmsg(fd, &m, 0) == static_cast<ssize_t>(sizeof v + len);
    printf("gso-hostile: type %u, %zu x %zu B%s: %s\n", type, segs, seg, lie ? ", lengths off by one" : "",
           ok ? "sent" : strerror(errno));
    return ok ? 1 : 0;
  };
  int sent = 0;
  sent += send_super(5, 9200, 2, false);   // a segment over a 9000-MTU receiver's frame limit
  sent += send_super(5, 1000, 3, true);    // IP/UDP lengths disagree with the frame
  sent += send_super(v4 ? 1 : 4, 1000, 3, false);  // TCPV4 / TCPV6 segmentation on UDP
  printf("gso-hostile: sent %d\n", sent);
  close(fd);
  return 0;
}

int run_hold() {
  auto pio = open_io();
  for (;;) pause();
}

// Kernel UDP socket (IPv4/IPv6) echo server for --timeout seconds.
int run_udp_server() {
  int fd = socket(AF_INET6, SOCK_DGRAM, 0);
  int zero = 0;
  setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
  sockaddr_in6 a{};
  a.sin6_family = AF_INET6;
  a.sin6_port = htons(static_cast<uint16_t>(num("port", 9999)));
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) < 0) {
    perror("bind");
    return 1;
  }
  if (!arg("ready-file").empty()) std::ofstream(arg("ready-file")) << "udp\n";
  timeval tv{num("timeout", 10), 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  char buf[2048];
  sockaddr_storage from{};
  socklen_t fl = sizeof(from);
  long n;
  while ((n = recvfrom(fd, buf, sizeof(buf), 0, reinterpret_cast<sockaddr*>(&from), &fl)) > 0) {
    sendto(fd, buf, static_cast<size_t>(n), 0, reinterpret_cast<sockaddr*>(&from), fl);
    fl = sizeof(from);
  }
  return 0;
}

bool to_sockaddr(const std::string& ip, uint16_t port, sockaddr_storage* ss, socklen_t* len) {
  auto* a4 = reinterpret_cast<sockaddr_in*>(ss);
  auto* a6 = reinterpret_cast<sockaddr_in6*>(ss);
  *ss = {};
  if (inet_pton(AF_INET, ip.c_str(), &a4->sin_addr) == 1) {
    a4->sin_family = AF_INET;
    a4->sin_port = htons(port);
    *len = sizeof(*a4);
    return true;
  }
  if (inet_pton(AF_INET6, ip.c_str(), &a6->sin6_addr) == 1) {
    a6->sin6_family = AF_INET6;
    a6->sin6_port = htons(port);
    *len = sizeof(*a6);
    return true;
  }
  return false;
}

int run_udp_client() {
  sockaddr_storage ss;
  socklen_t sl;
  if (!to_sockaddr(arg("dst-ip"), static_cast<uint16_t>(num("port", 9999)), &ss, &sl)) return 2;
  int fd = socket(ss.ss_family, SOCK_DGRAM, 0);
  timeval tv{0, 300000};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  int ok = 0, tries = static_cast<int>(num("count", 5));
  for (int i = 0; i < tries; ++i) {
    std::string msg = "kernel-udp-" + std::to_string(i);
    sendto(fd, msg.data(), msg.size(), 0, reinterpret_cast<sockaddr*>(&ss), sl);
    char buf[64];
    long n = recv(fd, buf, sizeof(buf), 0);
    if (n == static_cast<long>(msg.size()) && std::memcmp(buf, msg.data(), msg.size()) == 0) ok++;
  }
  printf("udp-client: %d/%d kernel UDP echoes from %s port %ld\n", ok, tries, arg("dst-ip").c_str(), num("port", 9999));
  return ok == tries ? 0 : 1;
}

uint16_t inet_csum(const uint8_t* p, size_t n) {
  uint32_t sum = 0;
  for (size_t i = 0; i + 1 < n; i += 2) sum += static_cast<uint32_t>(p[i] << 8 | p[i + 1]);
  if (n & 1) sum += static_cast<uint32_t>(p[n - 1] << 8);
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return static_cast<uint16_t>(~sum);
}

// ICMP echo over a raw IPv4 socket (no ping binary needed).
int run_icmp_ping() {
  sockaddr_storage ss;
  socklen_t sl;
  if (!to_sockaddr(arg("dst-ip"), 0, &ss, &sl) || ss.ss_family != AF_INET) return 2;
  int fd = socket(AF_INET, SOCK_RAW, IPPROTO_ICMP);
  if (fd < 0) {
    perror("socket(SOCK_RAW, IPPROTO_ICMP)");
    return 1;
  }
  timeval tv{0, 300000};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  int ok = 0, tries = static_cast<int>(num("count", 5));
  uint16_t id = static_cast<uint16_t>(getpid());
  for (int i = 0; i < tries; ++i) {
    uint8_t pkt[16] = {8, 0, 0, 0, static_cast<uint8_t>(id >> 8), static_cast<uint8_t>(id), 0, static_cast<uint8_t>(i)};
    uint16_t c = inet_csum(pkt, sizeof(pkt));
    pkt[2] = static_cast<uint8_t>(c >> 8);
    pkt[3] = static_cast<uint8_t>(c);
    sendto(fd, pkt, sizeof(pkt), 0, reinterpret_cast<sockaddr*>(&ss), sl);
    auto t0 = Clock::now();
    while (secs(Clock::now() - t0) < 0.3) {
      uint8_t buf[256];
      long n = recv(fd, buf, sizeof(buf), 0);
      if (n < 0) break;
      size_t ihl = (buf[0] & 0xf) * 4u;
      if (n >= static_cast<long>(ihl + 8) && buf[ihl] == 0 && buf[ihl + 4] == (id >> 8) &&
          buf[ihl + 5] == (id & 0xff) && buf[ihl + 7] == i) {
        ok++;
        break;
      }
    }
  }
  printf("icmp-ping: %d/%d echo replies from %s\n", ok, tries, arg("dst-ip").c_str());
  return ok == tries ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--", 0) != 0) {
      fprintf(stderr, "unexpected argument '%s'\n", argv[i]);
      return 2;
    }
    auto eq = a.find('=');
    g_args[a.substr(2, eq == std::string::npos ? std::string::npos : eq - 2)] =
        eq == std::string::npos ? "1" : a.substr(eq + 1);
  }
  setvbuf(stdout, nullptr, _IOLBF, 0);
  std::string role = arg("role");
  if (role == "sink") return run_sink();
  if (role == "source") return run_source();
  if (role == "echo") return run_echo();
  if (role == "ping") return run_ping();
  if (role == "hold") return run_hold();
  if (role == "gso-hostile") return run_gso_hostile();
  if (role == "udp-server") return run_udp_server();
  if (role == "udp-client") return run_udp_client();
  if (role == "icmp-ping") return run_icmp_ping();
  fprintf(stderr, "--role must be sink, source, echo, ping or hold\n");
  return 2;
}
