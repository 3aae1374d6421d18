// udp_pingpong: kernel UDP socket round-trip latency, the reference that
// tools/bench puts beside perftest ib_*_lat.
//
//   udp_pingpong --server --port=P [--timeout=S] [--ready-file=PATH]
//   udp_pingpong --client --dst=IP --port=P [--count=N] [--warmup=N] [--size=B]
//
// Both sides spin on non-blocking recv (as perftest spins on its CQ): a
// blocking wait costs ~75 us per round trip on these VMs (vCPU wake-up), which
// would measure the scheduler, not the path. The client prints one line:
//   udp_rtt: count N lost L size B min X p50 X p90 X p99 X p999 X max X mean X (us, round trip)
// The server echoes every datagram until it has been idle --timeout seconds.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

std::map<std::string, std::string> g_args;

std::string arg(const std::string& k, const std::string& def = "") {
  auto it = g_args.find(k);
  return it == g_args.end() ? def : it->second;
}
long num(const std::string& k, long def) { return g_args.count(k) ? std::stol(g_args[k]) : def; }
double secs(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

int open_socket(int port) {
  int fd = socket(AF_INET, SOCK_DGRAM, 0);
  if (fd < 0) {
    perror("socket");
    exit(1);
  }
  if (port) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
      perror("bind");
      exit(1);
    }
  }
  return fd;
}

int run_server() {
  int fd = open_socket(static_cast<int>(num("port", 9000)));
  if (!arg("ready-file").empty()) std::ofstream(arg("ready-file")) << "ready\n";
  double timeout = static_cast<double>(num("timeout", 10));
  char buf[65536];
  long echoed = 0;
  auto last = Clock::now();
  while (secs(Clock::now() - last) < timeout) {
    sockaddr_in from{};
    socklen_t fl = sizeof(from);
    ssize_t n = recvfrom(fd, buf, sizeof(buf), MSG_DONTWAIT, reinterpret_cast<sockaddr*>(&from), &fl);
    if (n < 0) continue;  // EAGAIN: spin
    sendto(fd, buf, static_cast<size_t>(n), 0, reinterpret_cast<sockaddr*>(&from), fl);
    echoed++;
    last = Clock::now();
  }
  printf("udp_server: %ld datagrams echoed\n", echoed);
  return 0;
}

double pct(const std::vector<double>& v, double p) {
  size_t i = static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

int run_client() {
  int fd = open_socket(0);
  sockaddr_in dst{};
  dst.sin_family = AF_INET;
  dst.sin_port = htons(static_cast<uint16_t>(num("port", 9000)));
  if (inet_pton(AF_INET, arg("dst").c_str(), &dst.sin_addr) != 1) {
    fprintf(stderr, "--dst must be an IPv4 address\n");
    return 2;
  }
  long count = num("count", 20000), warmup = num("warmup", 1000);
  size_t size = static_cast<size_t>(std::max(8L, num("size", 8)));
  std::vector<char> msg(size, 0), buf(65536);
  std::vector<double> rtt;
  rtt.reserve(static_cast<size_t>(count));
  long lost = 0;
  for (long i = 0; i < warmup + count; ++i) {
    std::memcpy(msg.data(), &i, sizeof(i));
    auto t0 = Clock::now();
    if (sendto(fd, msg.data(), size, 0, reinterpret_cast<sockaddr*>(&dst), sizeof(dst)) < 0) {
      perror("sendto");
      return 1;
    }
    bool got = false;
    while (!got && secs(Clock::now() - t0) < 0.2) {
      ssize_t n = recv(fd, buf.data(), buf.size(), MSG_DONTWAIT);
      long seq = -1;
      if (n >= 8) std::memcpy(&seq, buf.data(), sizeof(seq));
      got = seq == i;  // stale echoes of a lost round are skipped
    }
    double us = secs(Clock::now() - t0) * 1e6;
    if (i < warmup) continue;
    if (got) rtt.push_back(us);
    else lost++;
  }
  if (rtt.empty()) {
    printf("udp_rtt: no replies (%ld lost)\n", lost);
    return 1;
  }
  std::sort(rtt.begin(), rtt.end());
  double sum = 0;
  for (double r : rtt) sum += r;
  printf("udp_rtt: count %zu lost %ld size %zu min %.2f p50 %.2f p90 %.2f p99 %.2f p999 %.2f max %.2f mean %.2f"
         " (us, round trip)\n",
         rtt.size(), lost, size, rtt.front(), pct(rtt, 0.5), pct(rtt, 0.9), pct(rtt, 0.99), pct(rtt, 0.999),
         rtt.back(), sum / static_cast<double>(rtt.size()));
  return lost * 100 > count ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--", 0) != 0) {
      fprintf(stderr, "unexpected argument '%s'\n", argv[i]);
      return 2;
    }
    size_t eq = a.find('=');
    g_args[a.substr(2, eq == std::string::npos ? std::string::npos : eq - 2)] =
        eq == std::string::npos ? "1" : a.substr(eq + 1);
  }
  if (g_args.count("server")) return run_server();
  if (g_args.count("client")) return run_client();
  fprintf(stderr, "usage: udp_pingpong --server --port=P [--timeout=S] | --client --dst=IP --port=P [--count=N]\n");
  return 2;
}
