// Batched raw-frame I/O for the soft NIC (docs/packet-io.md).
//
// The daemon moves whole Ethernet frames (Ethernet/IP/UDP/MetaRoCE) between
// the transport engine and one network interface. Two backends implement it:
//   - AF_XDP (af_xdp.cc): our own XDP program (firmware-model/daemon/bpf/)
//     redirects only UDP destination port `udp_port` into an XSK socket; all
//     other traffic goes on to the kernel stack. The engine writes frames
//     straight into UMEM (tx_alloc) and reads received frames in place.
//   - AF_PACKET (af_packet.cc): a TPACKET rx ring behind a classic BPF
//     filter for the same port, sendmmsg for tx. Faster on veth (copy mode
//     AF_XDP has no zero-copy advantage there, see docs/packet-io.md).
//
// Threading: one PacketIo is used by one thread (the daemon's I/O loop).
// Nothing here blocks except open_packet_io(); the loop sleeps in
// poll/epoll on wait_fd() when rx_burst() returns 0 for a while.
//
// Typical loop:
//   RxFrame f[64];
//   int n = io->rx_burst(f);            // frames valid until rx_release()
//   for (i < n) engine.on_frame({f[i].data, f[i].len});
//   io->rx_release();
//   ... engine sends:  auto buf = io->tx_alloc(max_len);   // empty: ring full
//                      size_t len = proto::build_frame(h, p, buf);
//                      io->tx_commit(len);
//   io->tx_flush();                     // once per batch: one kernel kick
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>

namespace metaroce::daemon::io {

// One received frame, starting at the Ethernet header (a VLAN tag, if any,
// is kept in the frame for AF_XDP; AF_PACKET re-inserts none: the kernel
// strips it into metadata, see docs/packet-io.md). Valid until rx_release()
// or the next rx_burst(), whichever comes first.
struct RxFrame {
  const uint8_t* data = nullptr;
  uint32_t len = 0;
};

// Counters since open. Every frame the backend drops is counted here, by
// reason, never silently.
struct IoStats {
  uint64_t rx_frames = 0;
  uint64_t rx_bytes = 0;
  uint64_t rx_gathered = 0;      // multi-buffer frames copied to be contiguous
  uint64_t rx_kernel_drops = 0;  // dropped by the kernel: ring full, frame too big
                                 // (XDP_STATISTICS rx_dropped+rx_ring_full /
                                 // PACKET_STATISTICS tp_drops)
  uint64_t rx_invalid = 0;       // malformed descriptors / oversize multi-buffer
  uint64_t tx_frames = 0;
  uint64_t tx_bytes = 0;
  uint64_t tx_ring_full = 0;     // tx_alloc() found no free buffer
  uint64_t tx_held_moved = 0;    // AF_PACKET: frames moved at tx_commit() because a
                                 // tx_flush() ran while their buffer was held
  uint64_t tx_errors = 0;        // frames the kernel refused (sendmmsg error,
                                 // XDP_STATISTICS tx_invalid_descs)
  uint64_t tx_kicks = 0;         // syscalls issued to push tx
  uint64_t rx_wakeups = 0;       // syscalls issued to refill / wake rx
  // UDP GSO (AF_PACKET with IoOptions::gso). tx_frames/rx_frames count the
  // frames inside super-frames, one each, as if they had been sent alone.
  uint64_t tx_gso_super = 0;     // super-frames sent (two or more frames each)
  uint64_t rx_gso_super = 0;     // super-frames received and cut into frames
  uint64_t rx_gso_invalid = 0;   // super-frames dropped: not UDP GSO of a frame we
                                 // can cut, segment over max_frame, truncated
};

enum class LogLevel { kDebug, kInfo, kWarn, kError };
// Libraries never print: the host installs a sink (nullptr: discard).
using LogSink = std::function<void(LogLevel, std::string_view)>;

enum class Backend { kAuto, kXdp, kPacket };
// kAuto: try native (driver) XDP, then generic (skb) XDP.
enum class XdpMode { kAuto, kNative, kGeneric };
// kAuto: try zero-copy, fall back to copy mode (veth: always copy).
enum class XdpCopy { kAuto, kZeroCopy, kCopy };
// AF_PACKET rx ring: V2 hands each frame to user space at once (lowest
// latency); V3 hands over whole blocks when full or after block_timeout_ms
// (fewer wakeups, more throughput, up to block_timeout_ms extra latency).
enum class PacketRing { kV2, kV3 };

struct IoOptions {
  std::string ifname;          // required
  Backend backend = Backend::kAuto;
  uint16_t udp_port = 4796;    // proto::kUdpPort
  uint32_t queue_id = 0;       // veth: only queue 0 is active

  // AF_XDP.
  XdpMode xdp_mode = XdpMode::kAuto;
  XdpCopy xdp_copy = XdpCopy::kAuto;
  uint32_t chunk_size = 4096;  // UMEM chunk; frames above chunk_size - 256
                               // need multi-buffer (XDP_USE_SG, xdp.frags)
  uint32_t umem_bytes = 0;     // 0: as much as fits (RLIMIT_MEMLOCK unless
                               // CAP_IPC_LOCK), at most 16 MiB
  uint32_t ring_size = 2048;   // rx/tx/fill/completion ring entries
  uint32_t tx_budget = 1024;   // XDP_MAX_TX_SKB_BUDGET (kernel default 32)
  bool need_wakeup = true;     // XDP_USE_NEED_WAKEUP: skip kicks when the
                               // kernel is already busy

  // AF_PACKET.
  PacketRing packet_ring = PacketRing::kV2;
  uint32_t packet_ring_bytes = 4u << 20;
  uint32_t block_timeout_ms = 1;  // TPACKET_V3 only
  // UDP GSO super-frames (PACKET_VNET_HDR, VIRTIO_NET_HDR_GSO_UDP_L4): at
  // tx_flush() queued frames with the same Ethernet, IP and UDP headers
  // (path entropy included) and the same length go to the kernel as one
  // super-frame, which a NIC (or the kernel's software GSO) cuts back into
  // the same frames; over veth it reaches the peer whole, and rx cuts such
  // super-frames into frames. Both ends of a veth link need it (a peer
  // without it drops what it cannot receive whole: counted, never placed).
  // docs/packet-io.md "UDP GSO".
  bool gso = false;
  bool reserve_udp_port = true;   // bind a filtered kernel UDP socket to
                                  // udp_port so the stack does not answer our
                                  // frames with ICMP port unreachable

  // Largest frame (Ethernet header .. payload, no FCS) to carry. 0: the
  // device MTU + 14 (+4 for one VLAN tag).
  uint32_t max_frame = 0;

  LogSink log;
};

class PacketIo {
 public:
  virtual ~PacketIo() = default;
  PacketIo() = default;
  PacketIo(const PacketIo&) = delete;
  PacketIo& operator=(const PacketIo&) = delete;

  // Non-blocking. Fills out[0..n) with received frames and returns n (0 when
  // none are pending), or -errno on a fatal socket error. Frames stay valid
  // until rx_release() or the next rx_burst() (which releases implicitly).
  virtual int rx_burst(std::span<RxFrame> out) = 0;
  // Gives the buffers of the last burst back to the kernel.
  virtual void rx_release() = 0;

  // Reserves a tx buffer of at least len bytes (len <= max_frame()) and
  // returns it; the caller writes the whole frame into it (zero-copy: for
  // AF_XDP this is UMEM). Returns an empty span when no buffer is free (call
  // tx_flush() and retry later) or len is too big. At most one buffer is
  // outstanding: tx_alloc() again without tx_commit() abandons the previous.
  // The buffer stays the caller's until tx_commit(), across tx_flush(),
  // tx_room() and tx_pending() calls in between (a port may flush while the
  // engine reads a payload into it): what is committed is what was written.
  virtual std::span<uint8_t> tx_alloc(uint32_t len) = 0;
  // Queues the buffer from the last tx_alloc() with its final length
  // (<= the length allocated). len 0 abandons it.
  virtual void tx_commit(uint32_t len) = 0;
  // Hands queued frames to the kernel (one syscall per batch) and reclaims
  // completed buffers. Returns frames handed over, or -errno.
  virtual int tx_flush() = 0;
  // Frames queued by tx_commit() not yet handed to the kernel.
  virtual uint32_t tx_pending() const = 0;
  // Buffers tx_alloc() can hand out now, completed ones reclaimed first
  // (AF_XDP: the completion ring). The soft NIC answers the engine's
  // tx_ready() from it, so a full ring holds packets in the engine instead
  // of dropping them (docs/daemon.md §Transmit backpressure).
  virtual uint32_t tx_room() = 0;
  // tx_room() with nothing queued or in flight: the ring's size in frames.
  virtual uint32_t tx_capacity() const = 0;

  // Readable (poll POLLIN) when rx_burst() would return frames. Owned by
  // the PacketIo.
  virtual int wait_fd() const = 0;
  // Largest frame tx_alloc() accepts and rx can deliver whole.
  virtual uint32_t max_frame() const = 0;
  // "af_xdp(native,copy)" or "af_packet(tpacket_v2)".
  virtual const char* name() const = 0;
  virtual IoStats stats() const = 0;
};

// Opens the backend options.backend names. With Backend::kAuto tries AF_XDP
// and falls back to AF_PACKET, logging why through options.log. On failure
// returns nullptr and sets *why to a message saying what to do.
std::unique_ptr<PacketIo> open_packet_io(const IoOptions& options, std::string* why);

// The two backends, for callers (tests, benchmarks) that want one exactly.
std::unique_ptr<PacketIo> open_af_xdp(const IoOptions& options, std::string* why);
std::unique_ptr<PacketIo> open_af_packet(const IoOptions& options, std::string* why);

// Parses "xdp", "packet", "auto" (the daemon's --io flag).
bool parse_backend(std::string_view s, Backend* out);
const char* to_string(Backend b);

}  // namespace metaroce::daemon::io
