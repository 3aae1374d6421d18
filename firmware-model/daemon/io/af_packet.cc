// AF_PACKET backend: TPACKET_V2/V3 rx ring behind a classic BPF filter that
// passes only UDP to our port, sendmmsg from a private buffer pool for tx.
// docs/packet-io.md "AF_PACKET".
#include <arpa/inet.h>
#include <linux/filter.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <vector>

#include "firmware-model/daemon/io/io_util.h"
#include "firmware-model/daemon/io/packet_io.h"

namespace metaroce::daemon::io {
namespace {

using detail::errno_message;
using detail::set_why;

// Classic BPF: accept Ethernet [802.1Q|802.1ad] IPv4 (unfragmented) or IPv6
// (no extension headers) UDP with destination port `port`; drop the rest.
// X holds the VLAN tag length (0 or 4), then for IPv4 the UDP header offset
// minus 14. Jump offsets count from the next instruction.
std::vector<sock_filter> port_filter(uint16_t port) {
  return {
      /*  0 */ BPF_STMT(BPF_LDX | BPF_W | BPF_IMM, 0),
      /*  1 */ BPF_STMT(BPF_LD | BPF_H | BPF_ABS, 12),
      /*  2 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, ETH_P_8021Q, 1, 0),    // -> 4 : 3
      /*  3 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, ETH_P_8021AD, 0, 2),   // -> 4 : 6
      /*  4 */ BPF_STMT(BPF_LDX | BPF_W | BPF_IMM, 4),
      /*  5 */ BPF_STMT(BPF_LD | BPF_H | BPF_ABS, 16),
      /*  6 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, ETH_P_IP, 0, 11),      // -> 7 : 18
      /*  7 */ BPF_STMT(BPF_LD | BPF_B | BPF_IND, 14 + 9),                // protocol
      /*  8 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, IPPROTO_UDP, 0, 15),   // -> 9 : 24
      /*  9 */ BPF_STMT(BPF_LD | BPF_H | BPF_IND, 14 + 6),                // frag_off
      /* 10 */ BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, 0x3fff, 13, 0),       // -> 24 : 11
      /* 11 */ BPF_STMT(BPF_LD | BPF_B | BPF_IND, 14),                    // version/IHL
      /* 12 */ BPF_STMT(BPF_ALU | BPF_AND | BPF_K, 0xf),
      /* 13 */ BPF_STMT(BPF_ALU | BPF_LSH | BPF_K, 2),
      /* 14 */ BPF_STMT(BPF_ALU | BPF_ADD | BPF_X, 0),
      /* 15 */ BPF_STMT(BPF_MISC | BPF_TAX, 0),
      /* 16 */ BPF_STMT(BPF_LD | BPF_H | BPF_IND, 14 + 2),                // UDP dest
      /* 17 */ BPF_STMT(BPF_JMP | BPF_JA, 4),                             // -> 22
      /* 18 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, ETH_P_IPV6, 0, 5),     // -> 19 : 24
      /* 19 */ BPF_STMT(BPF_LD | BPF_B | BPF_IND, 14 + 6),                // next header
      /* 20 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, IPPROTO_UDP, 0, 3),   // -> 21 : 24
      /* 21 */ BPF_STMT(BPF_LD | BPF_H | BPF_IND, 14 + 40 + 2),           // UDP dest
      /* 22 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, port, 0, 1),           // -> 23 : 24
      /* 23 */ BPF_STMT(BPF_RET | BPF_K, 0x40000),
      /* 24 */ BPF_STMT(BPF_RET | BPF_K, 0),
  };
}

// Ring status words are shared with the kernel: the kernel stores
// TP_STATUS_USER (release) after writing the frame; we load it with acquire
// before reading the frame, and store TP_STATUS_KERNEL (release) after we are
// done reading so the kernel may overwrite the slot.
inline uint32_t load_status(const volatile uint32_t* p) {
  return __atomic_load_n(const_cast<const uint32_t*>(p), __ATOMIC_ACQUIRE);
}
inline void store_status(volatile uint32_t* p, uint32_t v) {
  __atomic_store_n(const_cast<uint32_t*>(p), v, __ATOMIC_RELEASE);
}

class AfPacket final : public PacketIo {
 public:
  ~AfPacket() override {
    if (ring_ != MAP_FAILED && ring_) munmap(ring_, ring_len_);
    if (fd_ >= 0) close(fd_);
    if (port_fd_ >= 0) close(port_fd_);
  }

  bool open(const IoOptions& o, std::string* why) {
    opts_ = o;
    detail::IfInfo info;
    if (!detail::get_if_info(o.ifname, &info, why)) return false;
    max_frame_ = detail::frame_limit(o, info);
    v3_ = o.packet_ring == PacketRing::kV3;
    // Protocol 0: nothing is queued before the filter and bind are in place.
    fd_ = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, 0);
    if (fd_ < 0) return fail(why, "socket(AF_PACKET)", "needs CAP_NET_RAW");
    auto filter = port_filter(o.udp_port);
    sock_fprog prog{static_cast<unsigned short>(filter.size()), filter.data()};
    if (setsockopt(fd_, SOL_SOCKET, SO_ATTACH_FILTER, &prog, sizeof(prog)) < 0)
      return fail(why, "SO_ATTACH_FILTER", nullptr);
    int one = 1;
    if (setsockopt(fd_, SOL_PACKET, PACKET_IGNORE_OUTGOING, &one, sizeof(one)) < 0)
      return fail(why, "PACKET_IGNORE_OUTGOING", "needs Linux 4.20+");
    int sndbuf = 4 << 20;
    setsockopt(fd_, SOL_SOCKET, SO_SNDBUFFORCE, &sndbuf, sizeof(sndbuf));
    if (!setup_ring(o, why)) return false;
    sockaddr_ll sll{};
    sll.sll_family = AF_PACKET;
    sll.sll_protocol = htons(ETH_P_ALL);
    sll.sll_ifindex = info.ifindex;
    if (bind(fd_, reinterpret_cast<sockaddr*>(&sll), sizeof(sll)) < 0)
      return fail(why, "bind(AF_PACKET)", nullptr);
    tx_pool_.resize(static_cast<size_t>(kTxBuffers) * max_frame_);
    tx_len_.assign(kTxBuffers, 0);
    if (o.reserve_udp_port) {
      port_fd_ = detail::reserve_udp_port(o.udp_port, o.ifname);
      if (port_fd_ < 0) {
        detail::log(o, LogLevel::kWarn,
                    errno_message("reserving kernel UDP port", -port_fd_) +
                        ": the kernel may answer received frames with ICMP port unreachable");
      }
    }
    snprintf(name_, sizeof(name_), "af_packet(%s)", v3_ ? "tpacket_v3" : "tpacket_v2");
    detail::log(o, LogLevel::kInfo,
                std::string(name_) + " on " + o.ifname + ", max frame " + std::to_string(max_frame_));
    return true;
  }

  int rx_burst(std::span<RxFrame> out) override {
    rx_release();
    return v3_ ? rx_v3(out) : rx_v2(out);
  }

  void rx_release() override {
    if (v3_) {
      for (; v3_release_ != v3_block_; v3_release_ = (v3_release_ + 1) % block_nr_)
        store_status(&block(v3_release_)->hdr.bh1.block_status, TP_STATUS_KERNEL);
      return;
    }
    for (; v2_held_ > 0; --v2_held_) {
      store_status(&frame_v2(v2_release_)->tp_status, TP_STATUS_KERNEL);
      v2_release_ = (v2_release_ + 1) % frame_nr_;
    }
  }

  std::span<uint8_t> tx_alloc(uint32_t len) override {
    if (len > max_frame_) return {};
    if (tx_count_ == kTxBuffers) {
      stats_.tx_ring_full++;
      return {};
    }
    return {tx_pool_.data() + static_cast<size_t>(tx_count_) * max_frame_, max_frame_};
  }

  void tx_commit(uint32_t len) override {
    if (len == 0 || len > max_frame_ || tx_count_ == kTxBuffers) return;
    tx_len_[tx_count_++] = len;
  }

  int tx_flush() override {
    int sent_total = 0;
    uint32_t first = 0;
    while (first < tx_count_) {
      uint32_t n = tx_count_ - first;
      for (uint32_t i = 0; i < n; ++i) {
        iov_[i] = {tx_pool_.data() + static_cast<size_t>(first + i) * max_frame_, tx_len_[first + i]};
        msgs_[i] = {};
        msgs_[i].msg_hdr.msg_iov = &iov_[i];
        msgs_[i].msg_hdr.msg_iovlen = 1;
      }
      stats_.tx_kicks++;
      int rc = sendmmsg(fd_, msgs_, n, MSG_DONTWAIT);
      if (rc < 0) {
        if (errno == EAGAIN || errno == ENOBUFS || errno == EINTR) break;  // retry later
        stats_.tx_errors++;  // this frame is refused (EMSGSIZE...): drop it
        first++;
        continue;
      }
      for (int i = 0; i < rc; ++i) stats_.tx_bytes += tx_len_[first + i];
      stats_.tx_frames += rc;
      sent_total += rc;
      first += rc;
    }
    // Keep what the kernel did not take, in order, at the front.
    uint32_t left = tx_count_ - first;
    if (first && left) {
      std::memmove(tx_pool_.data(), tx_pool_.data() + static_cast<size_t>(first) * max_frame_,
                   static_cast<size_t>(left) * max_frame_);
      std::memmove(tx_len_.data(), tx_len_.data() + first, left * sizeof(uint32_t));
    }
    tx_count_ = left;
    return sent_total;
  }

  uint32_t tx_pending() const override { return tx_count_; }
  uint32_t tx_room() override { return kTxBuffers - tx_count_; }
  uint32_t tx_capacity() const override { return kTxBuffers; }
  int wait_fd() const override { return fd_; }
  uint32_t max_frame() const override { return max_frame_; }
  const char* name() const override { return name_; }

  IoStats stats() const override {
    // PACKET_STATISTICS resets on read: accumulate.
    if (v3_) {
      tpacket_stats_v3 s{};
      socklen_t l = sizeof(s);
      if (getsockopt(fd_, SOL_PACKET, PACKET_STATISTICS, &s, &l) == 0) stats_.rx_kernel_drops += s.tp_drops;
    } else {
      tpacket_stats s{};
      socklen_t l = sizeof(s);
      if (getsockopt(fd_, SOL_PACKET, PACKET_STATISTICS, &s, &l) == 0) stats_.rx_kernel_drops += s.tp_drops;
    }
    return stats_;
  }

 private:
  static constexpr uint32_t kTxBuffers = 256;
  static constexpr uint32_t kBlockSize = 1u << 18;

  bool fail(std::string* why, const char* what, const char* hint) {
    std::string m = errno_message(what, errno);
    if (hint) m += std::string(" (") + hint + ")";
    set_why(why, m);
    return false;
  }

  bool setup_ring(const IoOptions& o, std::string* why) {
    int version = v3_ ? TPACKET_V3 : TPACKET_V2;
    if (setsockopt(fd_, SOL_PACKET, PACKET_VERSION, &version, sizeof(version)) < 0)
      return fail(why, "PACKET_VERSION", nullptr);
    uint32_t hdr = v3_ ? TPACKET3_HDRLEN : TPACKET2_HDRLEN;
    frame_size_ = TPACKET_ALIGN(hdr + 16 + max_frame_);
    block_nr_ = std::max<uint32_t>(2, o.packet_ring_bytes / kBlockSize);
    ring_len_ = static_cast<size_t>(block_nr_) * kBlockSize;
    int rc;
    if (v3_) {
      tpacket_req3 req{};
      req.tp_block_size = kBlockSize;
      req.tp_block_nr = block_nr_;
      req.tp_frame_size = frame_size_;
      req.tp_frame_nr = (kBlockSize / frame_size_) * block_nr_;
      req.tp_retire_blk_tov = o.block_timeout_ms ? o.block_timeout_ms : 1;
      rc = setsockopt(fd_, SOL_PACKET, PACKET_RX_RING, &req, sizeof(req));
    } else {
      tpacket_req req{};
      req.tp_block_size = kBlockSize;
      req.tp_block_nr = block_nr_;
      req.tp_frame_size = frame_size_;
      req.tp_frame_nr = (kBlockSize / frame_size_) * block_nr_;
      frame_nr_ = req.tp_frame_nr;
      rc = setsockopt(fd_, SOL_PACKET, PACKET_RX_RING, &req, sizeof(req));
    }
    if (rc < 0) return fail(why, "PACKET_RX_RING", nullptr);
    ring_ = static_cast<uint8_t*>(
        mmap(nullptr, ring_len_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd_, 0));
    if (ring_ == MAP_FAILED) return fail(why, "mmap(PACKET_RX_RING)", nullptr);
    return true;
  }

  tpacket2_hdr* frame_v2(uint32_t i) {
    uint32_t per_block = kBlockSize / frame_size_;
    return reinterpret_cast<tpacket2_hdr*>(ring_ + static_cast<size_t>(i / per_block) * kBlockSize +
                                           static_cast<size_t>(i % per_block) * frame_size_);
  }
  tpacket_block_desc* block(uint32_t b) {
    return reinterpret_cast<tpacket_block_desc*>(ring_ + static_cast<size_t>(b) * kBlockSize);
  }

  int rx_v2(std::span<RxFrame> out) {
    int n = 0;
    uint32_t i = v2_release_;
    while (n < static_cast<int>(out.size())) {
      tpacket2_hdr* h = frame_v2(i);
      if (!(load_status(&h->tp_status) & TP_STATUS_USER)) break;
      out[n++] = {reinterpret_cast<const uint8_t*>(h) + h->tp_mac, h->tp_snaplen};
      stats_.rx_bytes += h->tp_snaplen;
      i = (i + 1) % frame_nr_;
    }
    v2_held_ = n;
    stats_.rx_frames += n;
    return n;
  }

  // v3_block_: the block being read; v3_next_: its next packet (nullptr:
  // block not opened yet), v3_left_: packets left in it. Blocks before
  // v3_block_ back to v3_release_ are consumed and go back on rx_release().
  int rx_v3(std::span<RxFrame> out) {
    int n = 0;
    while (n < static_cast<int>(out.size())) {
      tpacket_block_desc* b = block(v3_block_);
      if (!v3_next_) {
        if (!(load_status(&b->hdr.bh1.block_status) & TP_STATUS_USER)) break;
        v3_next_ = reinterpret_cast<uint8_t*>(b) + b->hdr.bh1.offset_to_first_pkt;
        v3_left_ = b->hdr.bh1.num_pkts;
      }
      while (v3_left_ && n < static_cast<int>(out.size())) {
        auto* h = reinterpret_cast<tpacket3_hdr*>(v3_next_);
        out[n++] = {v3_next_ + h->tp_mac, h->tp_snaplen};
        stats_.rx_bytes += h->tp_snaplen;
        v3_next_ += h->tp_next_offset;
        --v3_left_;
      }
      if (v3_left_) break;
      v3_next_ = nullptr;
      v3_block_ = (v3_block_ + 1) % block_nr_;  // consumed: released next time
    }
    stats_.rx_frames += n;
    return n;
  }

  IoOptions opts_;
  int fd_ = -1;
  int port_fd_ = -1;
  bool v3_ = false;
  uint8_t* ring_ = nullptr;
  size_t ring_len_ = 0;
  uint32_t frame_size_ = 0, block_nr_ = 0, frame_nr_ = 0;
  uint32_t v2_release_ = 0, v2_held_ = 0;
  uint32_t v3_block_ = 0, v3_release_ = 0, v3_left_ = 0;
  uint8_t* v3_next_ = nullptr;
  uint32_t max_frame_ = 0;
  std::vector<uint8_t> tx_pool_;
  std::vector<uint32_t> tx_len_;
  uint32_t tx_count_ = 0;
  iovec iov_[kTxBuffers];
  mmsghdr msgs_[kTxBuffers];
  mutable IoStats stats_;
  char name_[48] = "af_packet";
};

}  // namespace

std::unique_ptr<PacketIo> open_af_packet(const IoOptions& options, std::string* why) {
  auto io = std::make_unique<AfPacket>();
  if (!io->open(options, why)) return nullptr;
  return io;
}

}  // namespace metaroce::daemon::io
