// One leg of the hop: an AF_PACKET socket on an interface that sees every
// frame arriving there (ETH_P_ALL, not the ones it sends itself) and sends
// frames out of it. PACKET_VNET_HDR keeps the kernel's offload state across
// the hop: a received frame carries a virtio_net_hdr (checksum still to be
// completed, GSO segment size) that is handed back unchanged on send, so
// kernel TCP through the hop keeps its offloads and its checksums stay right.
#pragma once

#include <sys/socket.h>
#include <sys/uio.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace metaroce::impair {

class Leg {
 public:
  static constexpr size_t kPrefix = 10;      // sizeof(struct virtio_net_hdr)
  static constexpr size_t kBatch = 64;
  static constexpr size_t kBufSize = 65536 + kPrefix + 64;  // a whole GSO frame

  // nullptr with *why (errno text and what to do) on failure.
  static std::unique_ptr<Leg> open(const std::string& ifname, std::string* why);
  ~Leg();

  int fd() const { return fd_; }
  const std::string& name() const { return name_; }

  // Non-blocking: fills out with up to kBatch received frames (prefix +
  // Ethernet frame), valid until the next rx(). *truncated counts frames
  // larger than a buffer (dropped). Returns the count, or -errno.
  int rx(std::vector<std::span<const uint8_t>>* out, uint64_t* truncated);
  // Sends frames in order (one sendmmsg per call, MSG_DONTWAIT). Returns how
  // many the kernel took (0..n), or -errno for the first frame's refusal.
  int tx(std::span<iovec> frames);
  // Frames the kernel dropped for this socket since the last call.
  uint64_t kernel_drops();

 private:
  Leg() = default;
  int fd_ = -1;
  std::string name_;
  std::vector<uint8_t> bufs_;
  std::vector<mmsghdr> rx_msgs_;
  std::vector<iovec> rx_iovs_;
  std::vector<mmsghdr> tx_msgs_;
};

}  // namespace metaroce::impair
