#include "tools/ctl/capture.h"

#include <arpa/inet.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>

namespace metaroce::ctl {

namespace {

constexpr uint16_t kMetaRocePort = 4796;  // proto/packet.h kUdpPort

void put32(std::vector<uint8_t>* v, uint32_t x) {
  for (int i = 0; i < 4; i++) v->push_back(static_cast<uint8_t>(x >> (8 * i)));
}
void put16(std::vector<uint8_t>* v, uint16_t x) {
  v->push_back(static_cast<uint8_t>(x));
  v->push_back(static_cast<uint8_t>(x >> 8));
}
uint16_t be16(std::span<const uint8_t> f, size_t at) {
  return static_cast<uint16_t>(f[at] << 8 | f[at + 1]);
}

volatile sig_atomic_t g_capture_stop = 0;

}  // namespace

std::vector<uint8_t> pcap_file_header(uint32_t snaplen) {
  std::vector<uint8_t> h;
  put32(&h, 0xa1b2c3d4);  // magic, microseconds
  put16(&h, 2);
  put16(&h, 4);
  put32(&h, 0);  // thiszone
  put32(&h, 0);  // sigfigs
  put32(&h, snaplen);
  put32(&h, 1);  // LINKTYPE_ETHERNET
  return h;
}

std::vector<uint8_t> pcap_record(uint64_t time_us, std::span<const uint8_t> frame,
                                 uint32_t snaplen) {
  uint32_t cap = static_cast<uint32_t>(std::min<size_t>(frame.size(), snaplen));
  std::vector<uint8_t> r;
  put32(&r, static_cast<uint32_t>(time_us / 1000000));
  put32(&r, static_cast<uint32_t>(time_us % 1000000));
  put32(&r, cap);
  put32(&r, static_cast<uint32_t>(frame.size()));
  r.insert(r.end(), frame.begin(), frame.begin() + cap);
  return r;
}

bool is_metaroce_frame(std::span<const uint8_t> f) {
  size_t l3 = 14;
  if (f.size() < l3) return false;
  uint16_t type = be16(f, 12);
  if (type == 0x8100) {  // one VLAN tag
    if (f.size() < 18) return false;
    type = be16(f, 16);
    l3 = 18;
  }
  size_t l4 = 0;
  if (type == 0x0800) {
    if (f.size() < l3 + 20 || (f[l3] >> 4) != 4 || f[l3 + 9] != 17) return false;
    l4 = l3 + (f[l3] & 0x0f) * 4u;
  } else if (type == 0x86dd) {
    if (f.size() < l3 + 40 || f[l3 + 6] != 17) return false;  // no extension headers
    l4 = l3 + 40;
  } else {
    return false;
  }
  return f.size() >= l4 + 8 && be16(f, l4 + 2) == kMetaRocePort;
}

int capture(const CaptureRequest& r, uint64_t* frames, std::string* why) {
  *frames = 0;
  unsigned ifindex = if_nametoindex(r.netdev.c_str());
  if (!ifindex) {
    *why = "no interface " + r.netdev + " in this network namespace";
    return ENODEV;
  }
  int fd = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, htons(ETH_P_ALL));
  if (fd < 0) return *why = std::string("AF_PACKET socket: ") + std::strerror(errno), errno;
  sockaddr_ll sll{};
  sll.sll_family = AF_PACKET;
  sll.sll_protocol = htons(ETH_P_ALL);
  sll.sll_ifindex = static_cast<int>(ifindex);
  if (bind(fd, reinterpret_cast<sockaddr*>(&sll), sizeof(sll)) != 0) {
    int err = errno;
    close(fd);
    return *why = "bind to " + r.netdev + ": " + std::strerror(err), err;
  }
  std::ofstream out(r.file, std::ios::binary | std::ios::trunc);
  if (!out) {
    close(fd);
    *why = "cannot write " + r.file + ": " + std::strerror(errno);
    return EIO;
  }
  std::vector<uint8_t> h = pcap_file_header(r.snaplen);
  out.write(reinterpret_cast<const char*>(h.data()), static_cast<std::streamsize>(h.size()));
  struct sigaction sa {};
  sa.sa_handler = [](int) { g_capture_stop = 1; };
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  if (r.ready) r.ready();
  auto start = std::chrono::steady_clock::now();
  std::vector<uint8_t> buf(65536);
  while (!g_capture_stop && (!r.count || *frames < r.count)) {
    if (r.duration_s && std::chrono::steady_clock::now() - start >= std::chrono::seconds(r.duration_s))
      break;
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    ssize_t n = recv(fd, buf.data(), buf.size(), MSG_DONTWAIT);
    if (n <= 0) continue;
    std::span<const uint8_t> frame(buf.data(), static_cast<size_t>(n));
    if (!is_metaroce_frame(frame)) continue;
    auto us = std::chrono::duration_cast<std::chrono::microseconds>(
        std::chrono::system_clock::now().time_since_epoch()).count();
    std::vector<uint8_t> rec = pcap_record(static_cast<uint64_t>(us), frame, r.snaplen);
    out.write(reinterpret_cast<const char*>(rec.data()), static_cast<std::streamsize>(rec.size()));
    out.flush();
    ++*frames;
  }
  close(fd);
  if (!out) return *why = "writing " + r.file + " failed", EIO;
  return 0;
}

}  // namespace metaroce::ctl
