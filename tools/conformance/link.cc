#include "tools/conformance/link.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>

namespace metaroce::conform {

double now_s() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) / 1e9;
}

namespace {

// Runs fn inside network namespace `netns` (empty: here) and comes back.
bool in_netns(const std::string& netns, std::string* error, const std::function<bool()>& fn) {
  if (netns.empty()) return fn();
  std::string path = netns.find('/') == std::string::npos ? "/run/netns/" + netns : netns;
  int target = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  int home = ::open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
  if (target < 0 || home < 0) {
    *error = "cannot open network namespace " + path + ": " + std::strerror(errno);
    if (target >= 0) close(target);
    if (home >= 0) close(home);
    return false;
  }
  bool ok = setns(target, CLONE_NEWNET) == 0;
  if (!ok) *error = "setns into " + path + ": " + std::strerror(errno) + " (needs root)";
  if (ok) ok = fn();
  if (setns(home, CLONE_NEWNET) != 0) {
    *error = std::string("setns back home: ") + std::strerror(errno);
    ok = false;
  }
  close(target);
  close(home);
  return ok;
}

void read_addresses(const std::string& ifname, Link* l) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return;
  for (ifaddrs* a = list; a; a = a->ifa_next) {
    if (!a->ifa_addr || ifname != a->ifa_name) continue;
    if (a->ifa_addr->sa_family == AF_INET) {
      auto* in = reinterpret_cast<sockaddr_in*>(a->ifa_addr);
      l->ipv4 = proto::IpAddr::v4(ntohl(in->sin_addr.s_addr));
    } else if (a->ifa_addr->sa_family == AF_INET6) {
      auto* in6 = reinterpret_cast<sockaddr_in6*>(a->ifa_addr);
      if (IN6_IS_ADDR_LINKLOCAL(&in6->sin6_addr)) continue;
      proto::IpAddr ip;
      std::memcpy(ip.bytes.data(), &in6->sin6_addr, 16);
      l->ipv6 = ip;
    }
  }
  freeifaddrs(list);
}

bool parse_mac(const std::string& s, proto::MacAddr* m) {
  unsigned b[6];
  if (std::sscanf(s.c_str(), "%x:%x:%x:%x:%x:%x", &b[0], &b[1], &b[2], &b[3], &b[4], &b[5]) != 6)
    return false;
  for (int i = 0; i < 6; ++i) (*m)[i] = static_cast<uint8_t>(b[i]);
  return true;
}

// /proc/net/arp of the current namespace: "IP HWtype Flags HWaddress Mask Device".
void read_arp(Link* l) {
  std::ifstream f("/proc/net/arp");
  std::string line;
  std::getline(f, line);
  while (std::getline(f, line)) {
    std::istringstream in(line);
    std::string ip, type, flags, mac;
    in >> ip >> type >> flags >> mac;
    in_addr a;
    proto::MacAddr m;
    if (inet_pton(AF_INET, ip.c_str(), &a) == 1 && parse_mac(mac, &m))
      l->neighbours.push_back({proto::IpAddr::v4(ntohl(a.s_addr)), m});
  }
}

}  // namespace

std::optional<Link> Link::open(const std::string& ifname, const std::string& netns,
                               std::string* error) {
  Link l;
  bool ok = in_netns(netns, error, [&] {
    l.fd_ = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, htons(ETH_P_ALL));
    if (l.fd_ < 0) return *error = std::string("AF_PACKET socket: ") + std::strerror(errno), false;
    l.ifindex_ = static_cast<int>(if_nametoindex(ifname.c_str()));
    if (l.ifindex_ == 0) return *error = "no interface " + ifname + " in that namespace", false;
    ifreq r{};
    std::strncpy(r.ifr_name, ifname.c_str(), IFNAMSIZ - 1);
    if (ioctl(l.fd_, SIOCGIFHWADDR, &r) != 0)
      return *error = "SIOCGIFHWADDR " + ifname + ": " + std::strerror(errno), false;
    std::memcpy(l.mac.data(), r.ifr_hwaddr.sa_data, 6);
    sockaddr_ll sll{};
    sll.sll_family = AF_PACKET;
    sll.sll_protocol = htons(ETH_P_ALL);
    sll.sll_ifindex = l.ifindex_;
    if (bind(l.fd_, reinterpret_cast<sockaddr*>(&sll), sizeof sll) != 0)
      return *error = "bind to " + ifname + ": " + std::strerror(errno), false;
    int big = 8 << 20;
    setsockopt(l.fd_, SOL_SOCKET, SO_RCVBUFFORCE, &big, sizeof big);
    read_addresses(ifname, &l);
    read_arp(&l);
    return true;
  });
  if (!ok) return std::nullopt;
  return l;
}

Link::Link(Link&& o) noexcept
    : mac(o.mac), ipv4(o.ipv4), ipv6(o.ipv6), neighbours(std::move(o.neighbours)),
      fd_(o.fd_), ifindex_(o.ifindex_) {
  o.fd_ = -1;
}

Link::~Link() {
  if (fd_ >= 0) close(fd_);
}

bool Link::send(std::span<const uint8_t> frame, std::string* error) {
  sockaddr_ll to{};
  to.sll_family = AF_PACKET;
  to.sll_ifindex = ifindex_;
  to.sll_halen = 6;
  std::memcpy(to.sll_addr, frame.data(), 6);
  ssize_t n = sendto(fd_, frame.data(), frame.size(), 0, reinterpret_cast<sockaddr*>(&to), sizeof to);
  if (n == static_cast<ssize_t>(frame.size())) return true;
  *error = "sendto (" + std::to_string(frame.size()) + " bytes): " + std::strerror(errno);
  return false;
}

std::optional<std::vector<uint8_t>> Link::recv(double deadline) {
  std::vector<uint8_t> buf(16384);
  for (;;) {
    double left = deadline - now_s();
    if (left <= 0) return std::nullopt;
    pollfd p{fd_, POLLIN, 0};
    int r = poll(&p, 1, static_cast<int>(left * 1000) + 1);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) continue;
    sockaddr_ll from{};
    socklen_t len = sizeof from;
    ssize_t n = recvfrom(fd_, buf.data(), buf.size(), MSG_DONTWAIT, reinterpret_cast<sockaddr*>(&from), &len);
    if (n <= 0) continue;
    if (from.sll_pkttype == PACKET_OUTGOING) continue;  // our own frames
    buf.resize(static_cast<size_t>(n));
    return buf;
  }
}

}  // namespace metaroce::conform
