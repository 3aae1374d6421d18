// impair_probe: numbered, timestamped MetaRoCE frames through mroce-impair,
// and a receiver that tells what happened to them (tests/impair).
//
//   impair_probe send --if IF --src-ip A --dst-ip B --dst-mac M --count N
//                [--size BYTES] [--pace-us U] [--ecn 0..3]
//   impair_probe recv --if IF --count N [--idle S] [--timeout S] [--ready-file F]
//
// Frames are real MetaRoCE SENDs (proto::build_frame, ICRC): PSN = sequence
// number, payload = send time (CLOCK_MONOTONIC ns, 8 B; one clock for every
// namespace) then a pattern of the PSN. The receiver (AF_PACKET, through the
// daemon's PacketIo) ends after N distinct frames, or --idle seconds without
// one after the first, or --timeout without any, and prints one JSON line:
//   received, unique, duplicates, corrupt (ICRC or pattern wrong), reordered
//   (a PSN below the highest seen), ce (ECN CE), lost (N - unique),
//   loss_runs (runs of consecutive missing PSNs), longest_run,
//   delay_min_us, delay_avg_us, delay_max_us, kernel_drops (receiver socket).
#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>

#include <algorithm>
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

namespace {

std::map<std::string, std::string> g_args;

std::string arg(const std::string& k, const std::string& def = "") {
  auto it = g_args.find(k);
  return it == g_args.end() ? def : it->second;
}
long num(const std::string& k, long def) { return g_args.count(k) ? std::stol(g_args[k]) : def; }

uint64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

uint8_t pattern(uint32_t seq, size_t i) { return static_cast<uint8_t>(seq * 13 + i); }

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

std::unique_ptr<io::PacketIo> open_io() {
  io::IoOptions o;
  o.ifname = arg("if");
  o.backend = io::Backend::kPacket;
  o.packet_ring_bytes = 16u << 20;
  o.log = [](io::LogLevel l, std::string_view m) {
    if (l >= io::LogLevel::kWarn) fprintf(stderr, "[io] %.*s\n", static_cast<int>(m.size()), m.data());
  };
  std::string why;
  auto p = io::open_packet_io(o, &why);
  if (!p) {
    fprintf(stderr, "impair_probe: cannot open %s: %s\n", o.ifname.c_str(), why.c_str());
    exit(3);
  }
  return p;
}

int run_send() {
  proto::FrameHeaders h;
  if (!parse_ip(arg("src-ip"), &h.src_ip) || !parse_ip(arg("dst-ip"), &h.dst_ip) ||
      !parse_mac(arg("dst-mac"), &h.dst_mac) || !own_mac(arg("if"), &h.src_mac)) {
    fprintf(stderr, "impair_probe send: needs --src-ip, --dst-ip, --dst-mac and a valid --if\n");
    return 2;
  }
  h.ecn = static_cast<uint8_t>(num("ecn", 2) & 3);
  auto pio = open_io();
  long count = num("count", 1000), pace_us = num("pace-us", 0);
  proto::Packet p;
  p.mbth.opcode = proto::Opcode::kSend;
  p.mbth.flags = proto::kFlagLast;
  p.mbth.dest_qpn = 0x11;
  size_t overhead = proto::encap_length(h) + proto::transport_length(p);
  size_t size = static_cast<size_t>(num("size", 1024));
  if (size < overhead + 8 || size > pio->max_frame()) {
    fprintf(stderr, "impair_probe send: --size must be %zu..%u\n", overhead + 8, pio->max_frame());
    return 2;
  }
  std::vector<uint8_t> payload(size - overhead);
  uint64_t next = now_ns();
  for (long seq = 0; seq < count;) {
    if (pace_us && now_ns() < next) continue;
    auto buf = pio->tx_alloc(static_cast<uint32_t>(size));
    if (buf.empty()) {
      pio->tx_flush();
      continue;
    }
    uint64_t t = now_ns();
    std::memcpy(payload.data(), &t, 8);
    for (size_t i = 8; i < payload.size(); ++i) payload[i] = pattern(static_cast<uint32_t>(seq), i);
    p.mbth.psn = static_cast<uint32_t>(seq);
    p.seth.length = static_cast<uint32_t>(payload.size());
    p.payload = payload;
    pio->tx_commit(static_cast<uint32_t>(proto::build_frame(h, p, buf)));
    ++seq;
    if (pace_us) {
      pio->tx_flush();
      next += static_cast<uint64_t>(pace_us) * 1000;
    } else if (seq % 32 == 0) {
      pio->tx_flush();
    }
  }
  while (pio->tx_pending()) pio->tx_flush();
  const io::IoStats& s = pio->stats();
  printf("{\"sent\": %ld, \"tx_errors\": %llu}\n", count, static_cast<unsigned long long>(s.tx_errors));
  return s.tx_errors ? 1 : 0;
}

struct Tally {
  std::vector<uint8_t> seen;
  long received = 0, unique = 0, duplicates = 0, corrupt = 0, reordered = 0, ce = 0;
  long highest = -1;
  uint64_t dmin = UINT64_MAX, dmax = 0, dsum = 0;

  // A received frame: counted under exactly one of corrupt, duplicate, unique.
  void add(const io::RxFrame& f, uint64_t t) {
    ++received;
    auto r = proto::parse_frame({f.data, f.len});
    if (!r || r.value().packet.payload.size() < 8) {
      ++corrupt;
      return;
    }
    const proto::Packet& p = r.value().packet;
    for (size_t i = 8; i < p.payload.size(); ++i) {
      if (p.payload[i] != pattern(p.mbth.psn, i)) {
        ++corrupt;
        return;
      }
    }
    uint32_t psn = p.mbth.psn;
    if (psn >= seen.size()) {
      ++corrupt;  // never sent
      return;
    }
    if (seen[psn]) {
      ++duplicates;
      return;
    }
    seen[psn] = 1;
    ++unique;
    if (static_cast<long>(psn) < highest) ++reordered;
    highest = std::max(highest, static_cast<long>(psn));
    if (r.value().headers.ecn == 3) ++ce;
    uint64_t sent;
    std::memcpy(&sent, p.payload.data(), 8);
    uint64_t d = t > sent ? t - sent : 0;
    dmin = std::min(dmin, d);
    dmax = std::max(dmax, d);
    dsum += d;
  }

  void print(long count, uint64_t kernel_drops) const {
    long runs = 0, longest = 0, cur = 0;
    for (long i = 0; i < count; ++i) {
      if (!seen[static_cast<size_t>(i)]) {
        if (cur++ == 0) ++runs;
        longest = std::max(longest, cur);
      } else {
        cur = 0;
      }
    }
    printf("{\"received\": %ld, \"unique\": %ld, \"duplicates\": %ld, \"corrupt\": %ld, \"reordered\": %ld, "
           "\"ce\": %ld, \"lost\": %ld, \"loss_runs\": %ld, \"longest_run\": %ld, \"delay_min_us\": %.1f, "
           "\"delay_avg_us\": %.1f, \"delay_max_us\": %.1f, \"kernel_drops\": %llu}\n",
           received, unique, duplicates, corrupt, reordered, ce, count - unique, runs, longest,
           unique ? dmin / 1e3 : 0.0, unique ? static_cast<double>(dsum) / unique / 1e3 : 0.0, dmax / 1e3,
           static_cast<unsigned long long>(kernel_drops));
  }
};

int run_recv() {
  auto pio = open_io();
  long count = num("count", 1000);
  uint64_t idle = static_cast<uint64_t>(num("idle", 2)) * 1'000'000'000ull;
  uint64_t timeout = static_cast<uint64_t>(num("timeout", 30)) * 1'000'000'000ull;
  if (!arg("ready-file").empty()) std::ofstream(arg("ready-file")) << "ready\n";
  Tally t;
  t.seen.assign(static_cast<size_t>(count), 0);
  io::RxFrame frames[64];
  uint64_t start = now_ns(), last = 0;
  while (t.unique < count) {
    int n = pio->rx_burst(frames);
    uint64_t now = now_ns();
    for (int i = 0; i < n; ++i) t.add(frames[i], now);
    pio->rx_release();
    if (n > 0) last = now;
    if (last ? now - last > idle : now - start > timeout) break;
  }
  t.print(count, pio->stats().rx_kernel_drops);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: impair_probe send|recv --if IF ... (see the file's header)\n");
    return 2;
  }
  for (int i = 2; i + 1 < argc; i += 2) {
    if (strncmp(argv[i], "--", 2) != 0) {
      fprintf(stderr, "impair_probe: expected --option value, got %s\n", argv[i]);
      return 2;
    }
    g_args[argv[i] + 2] = argv[i + 1];
  }
  std::string role = argv[1];
  if (role == "send") return run_send();
  if (role == "recv") return run_recv();
  fprintf(stderr, "impair_probe: role must be send or recv\n");
  return 2;
}
