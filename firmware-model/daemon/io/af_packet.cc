// AF_PACKET backend: TPACKET_V2/V3 rx ring behind a classic BPF filter that
// passes only UDP to our port, sendmmsg from a private buffer pool for tx;
// optionally UDP GSO super-frames both ways (IoOptions::gso).
// docs/packet-io.md "AF_PACKET" and "UDP GSO".
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
#include "proto/packet.h"

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

// ---- UDP GSO (docs/packet-io.md "UDP GSO") ----

constexpr uint32_t kV4Headers = 14 + 20 + 8;  // Ethernet, IPv4 without options, UDP
constexpr uint32_t kV6Headers = 14 + 40 + 8;  // Ethernet, IPv6 without extensions, UDP
constexpr uint32_t kMaxGsoSegments = 64;      // at most the kernel's UDP_MAX_SEGMENTS
// struct virtio_net_hdr of linux/virtio_net.h, which C++ cannot include (a
// field there is named `class`); native byte order on a packet socket.
struct VnetHdr {
  uint8_t flags;
  uint8_t gso_type;
  uint16_t hdr_len, gso_size, csum_start, csum_offset;
};
static_assert(sizeof(VnetHdr) == 10);
constexpr uint8_t kVnetNeedsCsum = 1;  // kVnetNeedsCsum
constexpr uint8_t kGsoNone = 0;        // kGsoNone
constexpr uint8_t kGsoUdpL4 = 5;       // kGsoUdpL4 (uapi of Linux 6.2; a
                                       // kernel that refuses it: tx_flush sends single frames)
constexpr uint8_t kGsoEcn = 0x80;      // kGsoEcn
constexpr size_t kVnetLen = sizeof(VnetHdr);

inline uint16_t get16(const uint8_t* p) { return static_cast<uint16_t>(p[0] << 8 | p[1]); }
inline void put16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v >> 8);
  p[1] = static_cast<uint8_t>(v);
}

// Length of the Ethernet + IP + UDP headers of a frame that can share a
// super-frame (IPv4 without options or fragmentation, or IPv6 with UDP as
// its next header, UDP lengths consistent with the frame), else 0.
uint32_t gso_headers(const uint8_t* f, uint32_t len) {
  if (len < kV4Headers) return 0;
  const uint16_t type = get16(f + 12);
  if (type == ETH_P_IP) {
    const uint8_t* ip = f + 14;
    if (ip[0] != 0x45 || ip[9] != IPPROTO_UDP || (get16(ip + 6) & 0x3fff)) return 0;
    if (get16(ip + 2) != len - 14 || get16(ip + 20 + 4) != len - 14 - 20) return 0;
    return kV4Headers;
  }
  if (type == ETH_P_IPV6 && len >= kV6Headers) {
    const uint8_t* ip = f + 14;
    if ((ip[0] >> 4) != 6 || ip[6] != IPPROTO_UDP) return 0;
    if (get16(ip + 4) != len - kV6Headers + 8 || get16(ip + 40 + 4) != len - kV6Headers + 8) return 0;
    return kV6Headers;
  }
  return 0;
}

// Frames a and b (headers of length hl) differ at most in the fields a
// super-frame's segments get from the kernel: IP length, IPv4 identification
// and checksum, UDP length and checksum.
bool same_headers(const uint8_t* a, const uint8_t* b, uint32_t hl) {
  if (std::memcmp(a, b, 14) != 0) return false;
  const uint8_t *x = a + 14, *y = b + 14;
  if (hl == kV4Headers)
    return std::memcmp(x, y, 2) == 0 && std::memcmp(x + 6, y + 6, 4) == 0 &&
           std::memcmp(x + 12, y + 12, 8) == 0 && std::memcmp(x + 20, y + 20, 4) == 0;
  return std::memcmp(x, y, 4) == 0 && std::memcmp(x + 6, y + 6, 34) == 0 &&
         std::memcmp(x + 40, y + 40, 4) == 0;
}

// The UDP pseudo-header sum (not complemented) that kVnetNeedsCsum
// expects in the checksum field: the kernel or NIC completes it per segment.
uint16_t pseudo_header_sum(const uint8_t* ip, bool v4, uint32_t udp_len) {
  uint32_t sum = IPPROTO_UDP + udp_len;
  const uint8_t* addrs = v4 ? ip + 12 : ip + 8;
  const uint32_t addr_bytes = v4 ? 8 : 32;
  for (uint32_t i = 0; i < addr_bytes; i += 2) sum += get16(addrs + i);
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return static_cast<uint16_t>(sum);
}

proto::IpAddr ip6_at(const uint8_t* p) {
  proto::IpAddr a;
  std::memcpy(a.bytes.data(), p, 16);
  return a;
}

// Makes the headers of a frame of `len` bytes (headers hl, copied from a
// super-frame or received with a checksum left to complete) its own: IP and
// UDP lengths, IPv4 header checksum, UDP checksum (IPv4: none, as MetaRoCE
// sends it; IPv6: computed, as IPv6 requires).
void finish_headers(uint8_t* f, uint32_t hl, uint32_t len) {
  uint8_t* ip = f + 14;
  uint8_t* udp = f + hl - 8;
  put16(udp + 4, static_cast<uint16_t>(len - hl + 8));
  put16(udp + 6, 0);
  if (hl == kV4Headers) {
    put16(ip + 2, static_cast<uint16_t>(len - 14));
    put16(ip + 10, 0);
    put16(ip + 10, proto::ipv4_header_checksum({ip, 20}));
    return;
  }
  put16(ip + 4, static_cast<uint16_t>(len - kV6Headers + 8));
  put16(udp + 6, proto::udp_checksum(ip6_at(ip + 8), ip6_at(ip + 24), {udp, len - hl + 8}));
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
    // Before the ring: the kernel refuses PACKET_VNET_HDR on a socket with one.
    gso_ = o.gso;
    if (gso_ && setsockopt(fd_, SOL_PACKET, PACKET_VNET_HDR, &one, sizeof(one)) < 0)
      return fail(why, "PACKET_VNET_HDR", "--gso needs it");
    gso_tx_ = gso_;
    if (!setup_ring(o, why)) return false;
    sockaddr_ll sll{};
    sll.sll_family = AF_PACKET;
    sll.sll_protocol = htons(ETH_P_ALL);
    sll.sll_ifindex = info.ifindex;
    if (bind(fd_, reinterpret_cast<sockaddr*>(&sll), sizeof(sll)) < 0)
      return fail(why, "bind(AF_PACKET)", nullptr);
    tx_pool_.resize(static_cast<size_t>(kTxBuffers) * max_frame_);
    tx_len_.assign(kTxBuffers, 0);
    if (gso_) rx_arena_.resize(static_cast<size_t>(kArenaFrames) * max_frame_);
    if (o.reserve_udp_port) {
      port_fd_ = detail::reserve_udp_port(o.udp_port, o.ifname);
      if (port_fd_ < 0) {
        detail::log(o, LogLevel::kWarn,
                    errno_message("reserving kernel UDP port", -port_fd_) +
                        ": the kernel may answer received frames with ICMP port unreachable");
      }
    }
    snprintf(name_, sizeof(name_), "af_packet(%s%s)", v3_ ? "tpacket_v3" : "tpacket_v2",
             gso_ ? ",gso" : "");
    detail::log(o, LogLevel::kInfo,
                std::string(name_) + " on " + o.ifname + ", max frame " + std::to_string(max_frame_));
    return true;
  }

  int rx_burst(std::span<RxFrame> out) override {
    rx_release();
    arena_used_ = 0;
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
    held_ = tx_count_;
    return {tx_pool_.data() + static_cast<size_t>(held_) * max_frame_, max_frame_};
  }

  void tx_commit(uint32_t len) override {
    const uint32_t held = held_;
    held_ = kNone;
    if (held == kNone || len == 0 || len > max_frame_ || tx_count_ == kTxBuffers) return;
    // A flush while the buffer was held sent the frames before it and moved
    // the rest to the front: the held slot stayed where it was handed out
    // (its holder may still be writing it), so the frame moves now, whole.
    if (held != tx_count_) {
      std::memmove(tx_pool_.data() + static_cast<size_t>(tx_count_) * max_frame_,
                   tx_pool_.data() + static_cast<size_t>(held) * max_frame_, len);
      stats_.tx_held_moved++;
    }
    tx_len_[tx_count_++] = len;
  }

  int tx_flush() override { return gso_tx_ ? flush_gso() : flush_single(); }

  int flush_single() {
    int sent_total = 0;
    uint32_t first = 0;
    while (first < tx_count_) {
      uint32_t n = tx_count_ - first;
      // A socket with PACKET_VNET_HDR (gso_) takes a virtio_net_hdr first.
      static const VnetHdr kNoOffload{};
      const uint32_t per = gso_ ? 2 : 1;
      for (uint32_t i = 0; i < n; ++i) {
        iovec* v = &iov_[i * per];
        if (gso_) v[0] = {const_cast<VnetHdr*>(&kNoOffload), kVnetLen};
        v[per - 1] = {tx_pool_.data() + static_cast<size_t>(first + i) * max_frame_, tx_len_[first + i]};
        msgs_[i] = {};
        msgs_[i].msg_hdr.msg_iov = v;
        msgs_[i].msg_hdr.msg_iovlen = per;
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

  // With gso: queued frames grouped into super-frames, each the frames with
  // the same headers and length (the last may be shorter) in their order;
  // a group is one message, sent in the order of its first frame. Frames of
  // other groups may overtake (a super-frame is one path, as each frame in it
  // is: same entropy); the receiver's reordering tolerance covers that, as
  // it does spraying. What the kernel does not take stays queued, in order.
  int flush_gso() {
    if (tx_count_ == 0) return 0;
    group_frames();
    int sent_total = 0;
    uint32_t m = 0;
    while (m < groups_) {
      stats_.tx_kicks++;
      int rc = sendmmsg(fd_, msgs_ + m, groups_ - m, MSG_DONTWAIT);
      if (rc < 0) {
        if (errno == EAGAIN || errno == ENOBUFS || errno == EINTR) break;
        if (errno == EINVAL && group_[m].frames > 1) {
          // This kernel's packet sockets take no UDP GSO: single frames from now.
          detail::log(opts_, LogLevel::kWarn,
                      errno_message("UDP GSO super-frame", errno) + ": sending single frames");
          gso_tx_ = false;
          break;
        }
        for (uint32_t f = group_[m].first; f != kNone; f = next_[f]) {
          stats_.tx_errors++;
          tx_len_[f] = 0;  // refused: dropped
        }
        m++;
        continue;
      }
      for (int k = 0; k < rc; ++k, ++m) {
        const Group& g = group_[m];
        for (uint32_t f = g.first; f != kNone; f = next_[f]) {
          stats_.tx_bytes += tx_len_[f];
          tx_len_[f] = 0;
        }
        stats_.tx_frames += g.frames;
        stats_.tx_gso_super += g.frames > 1;
        sent_total += static_cast<int>(g.frames);
      }
    }
    // Keep the frames not sent (tx_len_ still set), in order, at the front.
    uint32_t left = 0;
    for (uint32_t f = 0; f < tx_count_; ++f) {
      if (tx_len_[f] == 0) continue;
      if (f != left) {
        std::memmove(tx_pool_.data() + static_cast<size_t>(left) * max_frame_,
                     tx_pool_.data() + static_cast<size_t>(f) * max_frame_, tx_len_[f]);
        tx_len_[left] = tx_len_[f];
      }
      left++;
    }
    tx_count_ = left;
    if (!gso_tx_ && left) sent_total += flush_single();
    return sent_total;
  }

  // Builds group_[0..groups_) and their messages from the queued frames.
  void group_frames() {
    groups_ = 0;
    uint32_t open[kOpenGroups];
    uint32_t n_open = 0;
    for (uint32_t f = 0; f < tx_count_; ++f) {
      uint8_t* frame = tx_pool_.data() + static_cast<size_t>(f) * max_frame_;
      const uint32_t len = tx_len_[f];
      const uint32_t hl = gso_headers(frame, len);
      next_[f] = kNone;
      Group* join = nullptr;
      for (uint32_t k = 0; hl && k < n_open && !join; ++k) {
        Group& g = group_[open[k]];
        const uint8_t* head = tx_pool_.data() + static_cast<size_t>(g.first) * max_frame_;
        const uint32_t limit = 0xffff - (hl == kV4Headers ? 28 : 8);  // IP/UDP length fields
        if (g.hl == hl && !g.closed && len - hl <= g.seg && g.frames < kMaxGsoSegments &&
            g.payload + (len - hl) <= limit && same_headers(head, frame, hl))
          join = &g;
      }
      if (join) {
        next_[join->last] = f;
        join->last = f;
        join->frames++;
        join->payload += len - hl;
        join->closed = len - hl < join->seg;  // a shorter frame ends a super-frame
        continue;
      }
      Group& g = group_[groups_];
      g = Group{f, f, 1, hl, hl ? len - hl : 0, hl ? len - hl : 0, hl == 0};
      if (hl) {
        if (n_open == kOpenGroups) std::memmove(open, open + 1, --n_open * sizeof(open[0]));
        open[n_open++] = groups_;
      }
      groups_++;
    }
    // Messages: [virtio_net_hdr][frame] alone, or [virtio_net_hdr + the first
    // frame's headers, lengths for the whole][each frame's UDP payload].
    uint32_t iov = 0;
    for (uint32_t m = 0; m < groups_; ++m) {
      Group& g = group_[m];
      uint8_t* hdr = super_hdr_[m];
      VnetHdr v{};
      msgs_[m] = {};
      msgs_[m].msg_hdr.msg_iov = &iov_[iov];
      const uint8_t* first = tx_pool_.data() + static_cast<size_t>(g.first) * max_frame_;
      if (g.frames == 1) {
        std::memcpy(hdr, &v, kVnetLen);
        iov_[iov++] = {hdr, kVnetLen};
        iov_[iov++] = {const_cast<uint8_t*>(first), tx_len_[g.first]};
        msgs_[m].msg_hdr.msg_iovlen = 2;
        continue;
      }
      v.flags = kVnetNeedsCsum;
      v.gso_type = kGsoUdpL4;
      v.gso_size = static_cast<uint16_t>(g.seg);
      v.hdr_len = static_cast<uint16_t>(g.hl);
      v.csum_start = static_cast<uint16_t>(g.hl - 8);
      v.csum_offset = 6;
      std::memcpy(hdr, &v, kVnetLen);
      uint8_t* h = hdr + kVnetLen;
      std::memcpy(h, first, g.hl);
      const bool v4 = g.hl == kV4Headers;
      const uint32_t udp_len = 8 + g.payload;
      uint8_t* udp = h + g.hl - 8;
      put16(udp + 4, static_cast<uint16_t>(udp_len));
      if (v4) {
        put16(h + 14 + 2, static_cast<uint16_t>(20 + udp_len));
        put16(h + 14 + 10, 0);
        put16(h + 14 + 10, proto::ipv4_header_checksum({h + 14, 20}));
      } else {
        put16(h + 14 + 4, static_cast<uint16_t>(udp_len));
      }
      put16(udp + 6, pseudo_header_sum(h + 14, v4, udp_len));
      iov_[iov++] = {hdr, kVnetLen + g.hl};
      for (uint32_t f = g.first; f != kNone; f = next_[f]) {
        uint8_t* frame = tx_pool_.data() + static_cast<size_t>(f) * max_frame_;
        iov_[iov++] = {frame + g.hl, tx_len_[f] - g.hl};
      }
      msgs_[m].msg_hdr.msg_iovlen = g.frames + 1;
    }
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
  // With gso: rx ring slots that hold a 64 KiB super-frame (4 per block),
  // and room to cut this many frames out of super-frames per burst.
  static constexpr uint32_t kGsoFrameSize = 1u << 16;
  static constexpr uint32_t kGsoRingBytes = 16u << 20;
  static constexpr uint32_t kArenaFrames = 256;
  static constexpr uint32_t kOpenGroups = 8;  // super-frames a frame may join

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
    frame_size_ = gso_ ? kGsoFrameSize : TPACKET_ALIGN(hdr + 16 + max_frame_);
    uint32_t ring_bytes = gso_ ? std::max(o.packet_ring_bytes, kGsoRingBytes) : o.packet_ring_bytes;
    block_nr_ = std::max<uint32_t>(2, ring_bytes / kBlockSize);
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
    uint32_t i = v2_release_, held = 0;
    while (n < static_cast<int>(out.size())) {
      tpacket2_hdr* h = frame_v2(i);
      if (!(load_status(&h->tp_status) & TP_STATUS_USER)) break;
      uint8_t* mac = reinterpret_cast<uint8_t*>(h) + h->tp_mac;
      if (gso_) {
        int k = take(mac, h->tp_snaplen, h->tp_len, out.subspan(n));
        if (k < 0) break;  // no room for its frames in this burst: the next one
        n += k;
      } else {
        out[n++] = {mac, h->tp_snaplen};
      }
      stats_.rx_bytes += h->tp_snaplen;
      i = (i + 1) % frame_nr_;
      held++;
    }
    v2_held_ = held;
    stats_.rx_frames += n;
    return n;
  }

  // With gso: one received frame into out. A super-frame is cut into its
  // frames (copies in rx_arena_, valid as long as ring frames are); a frame
  // whose checksum the sender left to offload gets it completed in place
  // (the slot is ours until rx_release). Returns the frames delivered, 0 if
  // it was dropped (counted), -1 if out or the arena has no room now.
  int take(uint8_t* mac, uint32_t snaplen, uint32_t wire_len, std::span<RxFrame> out) {
    if (out.empty()) return -1;
    if (snaplen < wire_len) {  // larger than a ring slot: the vnet header is not written
      stats_.rx_gso_invalid++;
      stats_.rx_invalid++;
      return 0;
    }
    VnetHdr v;
    std::memcpy(&v, mac - kVnetLen, kVnetLen);
    const uint8_t type = v.gso_type & ~kGsoEcn;
    if (type == kGsoNone) {
      if (v.flags & kVnetNeedsCsum) {
        if (uint32_t hl = gso_headers(mac, snaplen)) finish_headers(mac, hl, snaplen);
      }
      out[0] = {mac, snaplen};
      return 1;
    }
    return cut(mac, snaplen, type, v.gso_size, out);
  }

  int cut(const uint8_t* f, uint32_t len, uint8_t type, uint32_t seg, std::span<RxFrame> out) {
    const uint32_t hl = type == kGsoUdpL4 ? gso_headers(f, len) : 0;
    const uint32_t payload = len - hl;
    if (hl == 0 || seg == 0 || hl + seg > max_frame_ || payload == 0 ||
        (payload + seg - 1) / seg > kMaxGsoSegments) {
      stats_.rx_gso_invalid++;
      stats_.rx_invalid++;
      return 0;
    }
    const uint32_t segs = (payload + seg - 1) / seg;
    if (segs > out.size() || arena_used_ + static_cast<size_t>(segs) * (hl + seg) > rx_arena_.size())
      return -1;
    for (uint32_t k = 0; k < segs; ++k) {
      const uint32_t part = std::min(seg, payload - k * seg);
      uint8_t* d = rx_arena_.data() + arena_used_;
      std::memcpy(d, f, hl);
      std::memcpy(d + hl, f + hl + static_cast<size_t>(k) * seg, part);
      finish_headers(d, hl, hl + part);
      out[k] = {d, hl + part};
      arena_used_ += hl + part;
    }
    stats_.rx_gso_super++;
    return static_cast<int>(segs);
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
        if (gso_) {
          int k = take(v3_next_ + h->tp_mac, h->tp_snaplen, h->tp_len, out.subspan(n));
          if (k < 0) break;
          n += k;
        } else {
          out[n++] = {v3_next_ + h->tp_mac, h->tp_snaplen};
        }
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
  // The slot tx_alloc() handed out until tx_commit() (kNone: none). Flushes
  // only move queued frames to lower slots, so a held slot is never written.
  uint32_t held_ = kNone;
  iovec iov_[2 * kTxBuffers];
  mmsghdr msgs_[kTxBuffers];
  // UDP GSO state (gso_: options; gso_tx_: cleared if the kernel refuses it).
  struct Group {
    uint32_t first, last, frames;
    uint32_t hl;       // header length (0: cannot share a super-frame)
    uint32_t seg;      // UDP payload length of its frames
    uint32_t payload;  // sum of its frames' UDP payloads
    bool closed;       // a shorter frame ended it
  };
  static constexpr uint32_t kNone = ~0u;
  bool gso_ = false, gso_tx_ = false;
  Group group_[kTxBuffers];
  uint32_t groups_ = 0;
  uint32_t next_[kTxBuffers];
  uint8_t super_hdr_[kTxBuffers][kVnetLen + kV6Headers];
  std::vector<uint8_t> rx_arena_;
  size_t arena_used_ = 0;
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
