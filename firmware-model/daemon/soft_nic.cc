#include "firmware-model/daemon/soft_nic.h"

#include "firmware-model/daemon/cm_role.h"

#include <sys/random.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>

namespace metaroce::daemon {

SoftNicHal::SoftNicHal(const SoftNicEnv& env, const fw::PortInfo& port)
    : env_(env), dma_(env.memory_of), gids_(port.gids) {}

uint64_t SoftNicHal::next() {
  if (random_left_ == 0) {
    auto* buf = reinterpret_cast<uint8_t*>(random_.data());
    size_t got = 0;
    while (got < sizeof random_) {
      ssize_t n = getrandom(buf + got, sizeof random_ - got, 0);
      if (n > 0) got += static_cast<size_t>(n);
      else if (errno != EINTR) std::abort();  // no entropy source: refusing weak keys
    }
    random_left_ = random_.size();
  }
  return random_[--random_left_];
}

namespace {
// The Ethernet address of an IP multicast group: 01:00:5e + the low 23
// bits (RFC 1112), or 33:33 + the low 32 bits (RFC 2464).
proto::MacAddr multicast_mac(const proto::IpAddr& g) {
  const auto& b = g.bytes;
  if (g.is_v4()) return {0x01, 0x00, 0x5e, static_cast<uint8_t>(b[13] & 0x7f), b[14], b[15]};
  return {0x33, 0x33, b[12], b[13], b[14], b[15]};
}
}  // namespace

namespace {
proto::FrameHeaders headers_of(const fw::OutPacket& p) {
  proto::FrameHeaders h;
  h.src_ip = p.src_ip;
  h.dst_ip = p.dst_ip;
  h.src_port = p.src_port;
  h.dscp = p.dscp;
  h.ttl = p.ttl;
  return h;
}
}  // namespace

std::span<uint8_t> SoftNicHal::tx_buffer(const fw::OutPacket& p, size_t len) {
  io::PacketIo* io = env_.io;
  LinkInterface* link = env_.link;
  tx_abandon();  // never two (the engine asks once per packet)
  unresolved_ = false;
  if (!io || !link || p.dst_ip.is_multicast() ||
      std::find(gids_.begin(), gids_.end(), p.dst_ip) != gids_.end())
    return {};
  proto::FrameHeaders h = headers_of(p);
  const size_t at = proto::payload_offset(h, p.packet.mbth.opcode);
  const size_t frame = at + len + proto::kIcrcLen;
  if (at == 0 || frame > io->max_frame()) return {};  // send() counts the drop
  if (!link->resolve(p.dst_ip, &frame_mac_)) {
    unresolved_ = true;
    unresolved_ip_ = p.dst_ip;
    return {};
  }
  std::span<uint8_t> buf = io->tx_alloc(static_cast<uint32_t>(frame));
  if (buf.empty()) {
    io->tx_flush();
    buf = io->tx_alloc(static_cast<uint32_t>(frame));
  }
  if (buf.size() < frame) {
    if (!buf.empty()) io->tx_commit(0);
    return {};  // ring full: send() counts tx_drop_ring_full
  }
  frame_ = buf.first(frame);
  frame_payload_at_ = at;
  return frame_.subspan(at, len);
}

void SoftNicHal::tx_abandon() {
  if (frame_.empty()) return;
  frame_ = {};
  env_.io->tx_commit(0);  // the buffer goes back to the ring unsent
}

void SoftNicHal::send(const fw::OutPacket& p) {
  io::PacketIo* io = env_.io;
  LinkInterface* link = env_.link;
  proto::FrameHeaders h = headers_of(p);
  if (!frame_.empty()) {
    if (p.packet.payload.data() == frame_.data() + frame_payload_at_) {
      // The payload is in the frame already (tx_buffer): headers and ICRC
      // around it, nothing copied.
      h.src_mac = link->local_mac();
      h.dst_mac = frame_mac_;
      size_t n = 0;
      if (proto::payload_offset(h, p.packet.mbth.opcode) == frame_payload_at_ &&
          frame_payload_at_ + p.packet.payload.size() + proto::kIcrcLen == frame_.size())
        n = proto::build_frame(h, p.packet, frame_);
      frame_ = {};
      io->tx_commit(static_cast<uint32_t>(n));  // 0: not sent
      if (n == 0) env_.counters->tx_drop_frame_mismatch++;
      if (io->tx_pending() >= 64) io->tx_flush();
      return;
    }
    tx_abandon();  // another packet first: the engine never does this
    env_.counters->tx_drop_frame_mismatch++;
  }
  // A UD multicast datagram goes to this host's attached QPs too
  // (docs/protocol.md §13.8), and to the wire at the group's MAC.
  bool local = std::find(gids_.begin(), gids_.end(), p.dst_ip) != gids_.end();
  bool mcast = p.dst_ip.is_multicast();
  size_t len = proto::encap_length(h) + proto::transport_length(p.packet);
  if (local || mcast) {
    h.src_mac = h.dst_mac = link ? link->local_mac() : proto::MacAddr{};
    std::vector<uint8_t> frame(len);
    if (proto::build_frame(h, p.packet, frame) == 0) return;
    loopback_.push_back(std::move(frame));
    if (local) return;
  }
  if (!io || !link) return;
  const bool known_miss = unresolved_ && unresolved_ip_ == p.dst_ip;
  unresolved_ = false;
  if (mcast) {
    h.dst_mac = multicast_mac(p.dst_ip);
  } else if (known_miss || !link->resolve(p.dst_ip, &h.dst_mac)) {
    env_.counters->tx_drop_no_neighbor++;
    return;
  }
  h.src_mac = link->local_mac();
  if (len > io->max_frame()) {
    env_.counters->tx_drop_too_big++;
    return;
  }
  std::span<uint8_t> buf = io->tx_alloc(static_cast<uint32_t>(len));
  if (buf.empty()) {
    io->tx_flush();
    buf = io->tx_alloc(static_cast<uint32_t>(len));
  }
  if (buf.empty()) {
    env_.counters->tx_drop_ring_full++;  // the engine's retransmission recovers it
    return;
  }
  size_t n = proto::build_frame(h, p.packet, buf);
  io->tx_commit(static_cast<uint32_t>(n));
  if (io->tx_pending() >= 64) io->tx_flush();
}

bool SoftNicHal::tx_ready() {
  io::PacketIo* io = env_.io;
  if (!io) return true;
  // A small ring (AF_XDP with little locked memory: 16 slots) keeps a
  // quarter, so the engine is never held for good.
  const uint32_t reserve = std::min(kTxReserve, io->tx_capacity() / 4);
  if (io->tx_room() > reserve) return true;
  io->tx_flush();  // hand the queued frames over and reclaim the sent ones
  if (io->tx_room() > reserve) return true;
  if (!tx_held_) env_.counters->tx_held_ring_full++;
  tx_held_ = true;
  return false;
}

SoftNic::SoftNic(const fw::EngineConfig& config, const SoftNicEnv& env)
    : SoftNicHal(env, config.port), hw::SoftBackend(config, hal()) {
  rx_batch_.resize(64);
}

int SoftNic::set_port(const fw::PortInfo& port) {
  gids_ = port.gids;
  return SoftBackend::set_port(port);
}

int SoftNic::post_send(fw::OwnerId owner, uint32_t qpn, const fw::SendWr& wr) {
  dma_.invalidate(owner);
  return SoftBackend::post_send(owner, qpn, wr);
}

int SoftNic::create_ah(fw::OwnerId owner, uint32_t pdn, const fw::AddressVector& av,
                       uint32_t* ahn) {
  int err = SoftBackend::create_ah(owner, pdn, av, ahn);
  bool local = std::find(gids_.begin(), gids_.end(), av.dgid) != gids_.end();
  proto::MacAddr mac;
  if (!err && !local && !av.dgid.is_multicast() && env_.link) env_.link->resolve(av.dgid, &mac);  // kPending triggers it
  return err;
}

void SoftNic::destroy_owner(fw::OwnerId owner) {
  // Data the engine already accepted for other clients is unaffected; this
  // client's QPs vanish, so their peers run into retry exhaustion.
  dma_.flush();
  SoftBackend::destroy_owner(owner);
  dma_.forget(owner);
}

// `now` is when the pass began; the engine's timers are checked against
// the clock as it reads after the frames were received.
int SoftNic::service(fw::Time) {
  tx_held_ = false;  // set again by this pass's tx_ready() while the ring is full
  int work = poll_rx();
  work += SoftBackend::service(env_.clock->now());
  dma_.flush();  // data lands in memory before its completion is visible
  env_.events->publish();
  if (env_.io && env_.io->tx_pending()) env_.io->tx_flush();
  // Held packets are work: the loop must not sleep until the ring has room
  // (the kernel frees it without waking us).
  return work + (tx_held_ ? 1 : 0);
}

fw::Time SoftNic::next_deadline() const {
  return loopback_.empty() ? SoftBackend::next_deadline() : 0;
}

int SoftNic::poll_rx() {
  int total = 0;
  // Frames this device sent to its own addresses (loopback QPs). Payload is
  // written to memory straight from the frame, so frames live until the
  // DMA flush below.
  std::vector<std::vector<uint8_t>> done;
  while (!loopback_.empty() && total < 256) {
    done.push_back(std::move(loopback_.front()));
    loopback_.pop_front();
    const std::vector<uint8_t>& frame = done.back();
    total++;
    if (env_.cm && env_.cm->on_frame(frame, env_.clock->now())) continue;
    dma_.set_stable_source(frame.data(), frame.size());
    engine().on_frame(frame);
  }
  io::PacketIo* io = env_.io;
  int n = io ? io->rx_burst(rx_batch_) : 0;
  for (int i = 0; i < n; i++) {
    if (env_.cm && env_.cm->on_frame({rx_batch_[i].data, rx_batch_[i].len}, env_.clock->now()))
      continue;
    dma_.set_stable_source(rx_batch_[i].data, rx_batch_[i].len);
    engine().on_frame({rx_batch_[i].data, rx_batch_[i].len});
  }
  dma_.set_stable_source(nullptr, 0);
  if (total + std::max(n, 0) > 0) dma_.flush();  // before the frames' memory is reused
  if (n > 0) {
    io->rx_release();
    total += n;
  }
  return total;
}

void SoftNic::host_counters(std::vector<hw::NamedCounter>* out) const {
  const DmaStats& s = dma_.stats();
  *out = {
      {"dma_read_calls", s.read_calls},       {"dma_read_bytes", s.read_bytes},
      {"dma_read_cache_hits", s.read_cache_hits}, {"dma_write_calls", s.write_calls},
      {"dma_write_bytes", s.write_bytes},     {"dma_faults", s.faults},
      {"dma_write_faults", s.write_faults},   {"dma_client_gone", s.gone},
      {"dma_write_in_place", s.write_in_place},
  };
  if (!env_.io) return;
  io::IoStats io = env_.io->stats();
  out->insert(out->end(), {
                              {"io_rx_frames", io.rx_frames},
                              {"io_rx_kernel_drops", io.rx_kernel_drops},
                              {"io_rx_invalid", io.rx_invalid},
                              {"io_tx_frames", io.tx_frames},
                              {"io_tx_ring_full", io.tx_ring_full},
                              {"io_tx_held_moved", io.tx_held_moved},
                              {"io_tx_errors", io.tx_errors},
                              {"io_tx_kicks", io.tx_kicks},
                              {"io_tx_gso_super", io.tx_gso_super},
                              {"io_rx_gso_super", io.rx_gso_super},
                              {"io_rx_gso_invalid", io.rx_gso_invalid},
                          });
}

}  // namespace metaroce::daemon
