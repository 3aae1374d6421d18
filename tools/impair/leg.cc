#include "tools/impair/leg.h"

#include <arpa/inet.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace metaroce::impair {

// Leg::kPrefix is sizeof(struct virtio_net_hdr) (linux/virtio_net.h, which
// does not compile as C++: a field is named `class`). The hop never reads it.

namespace {

bool sockopt(int fd, int level, int name, int value, const char* what, std::string* why) {
  if (setsockopt(fd, level, name, &value, sizeof value) == 0) return true;
  *why = std::string(what) + ": " + strerror(errno);
  return false;
}

bool join_promisc(int fd, int ifindex, std::string* why) {
  packet_mreq mr{};
  mr.mr_ifindex = ifindex;
  mr.mr_type = PACKET_MR_PROMISC;
  if (setsockopt(fd, SOL_PACKET, PACKET_ADD_MEMBERSHIP, &mr, sizeof mr) == 0) return true;
  *why = std::string("PACKET_MR_PROMISC: ") + strerror(errno);
  return false;
}

}  // namespace

std::unique_ptr<Leg> Leg::open(const std::string& ifname, std::string* why) {
  std::unique_ptr<Leg> l(new Leg);
  l->name_ = ifname;
  unsigned idx = if_nametoindex(ifname.c_str());
  if (idx == 0) {
    *why = "no interface '" + ifname + "' in this network namespace";
    return nullptr;
  }
  l->fd_ = socket(AF_PACKET, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (l->fd_ < 0) {
    *why = std::string("socket(AF_PACKET): ") + strerror(errno) + " (needs CAP_NET_RAW)";
    return nullptr;
  }
  std::string e;
  bool ok = sockopt(l->fd_, SOL_PACKET, PACKET_VNET_HDR, 1, "PACKET_VNET_HDR", &e) &&
            sockopt(l->fd_, SOL_PACKET, PACKET_IGNORE_OUTGOING, 1, "PACKET_IGNORE_OUTGOING", &e) &&
            sockopt(l->fd_, SOL_PACKET, PACKET_QDISC_BYPASS, 1, "PACKET_QDISC_BYPASS", &e) &&
            sockopt(l->fd_, SOL_SOCKET, SO_RCVBUFFORCE, 32 << 20, "SO_RCVBUFFORCE", &e) &&
            sockopt(l->fd_, SOL_SOCKET, SO_SNDBUFFORCE, 16 << 20, "SO_SNDBUFFORCE", &e);
  sockaddr_ll sa{};
  sa.sll_family = AF_PACKET;
  sa.sll_protocol = htons(ETH_P_ALL);
  sa.sll_ifindex = static_cast<int>(idx);
  if (ok && bind(l->fd_, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
    e = std::string("bind: ") + strerror(errno);
    ok = false;
  }
  if (!ok || !join_promisc(l->fd_, static_cast<int>(idx), &e)) {
    *why = ifname + ": " + e;
    return nullptr;
  }
  l->bufs_.resize(kBatch * kBufSize);
  l->rx_msgs_.resize(kBatch);
  l->rx_iovs_.resize(kBatch);
  l->tx_msgs_.resize(kBatch);
  return l;
}

Leg::~Leg() {
  if (fd_ >= 0) close(fd_);
}

int Leg::rx(std::vector<std::span<const uint8_t>>* out, uint64_t* truncated) {
  out->clear();
  for (size_t i = 0; i < kBatch; ++i) {
    rx_iovs_[i] = {bufs_.data() + i * kBufSize, kBufSize};
    rx_msgs_[i] = {};
    rx_msgs_[i].msg_hdr.msg_iov = &rx_iovs_[i];
    rx_msgs_[i].msg_hdr.msg_iovlen = 1;
  }
  int n = recvmmsg(fd_, rx_msgs_.data(), kBatch, MSG_DONTWAIT, nullptr);
  if (n < 0) return errno == EAGAIN || errno == EINTR ? 0 : -errno;
  for (int i = 0; i < n; ++i) {
    size_t len = rx_msgs_[i].msg_len;
    if ((rx_msgs_[i].msg_hdr.msg_flags & MSG_TRUNC) || len <= kPrefix) {
      ++*truncated;
      continue;
    }
    out->emplace_back(bufs_.data() + i * kBufSize, len);
  }
  return n;
}

int Leg::tx(std::span<iovec> frames) {
  size_t n = std::min(frames.size(), kBatch);
  for (size_t i = 0; i < n; ++i) {
    tx_msgs_[i] = {};
    tx_msgs_[i].msg_hdr.msg_iov = &frames[i];
    tx_msgs_[i].msg_hdr.msg_iovlen = 1;
  }
  int r = sendmmsg(fd_, tx_msgs_.data(), static_cast<unsigned>(n), MSG_DONTWAIT);
  return r < 0 ? -errno : r;
}

uint64_t Leg::kernel_drops() {
  tpacket_stats st{};
  socklen_t len = sizeof st;
  if (getsockopt(fd_, SOL_PACKET, PACKET_STATISTICS, &st, &len) != 0) return 0;
  return st.tp_drops;
}

}  // namespace metaroce::impair
