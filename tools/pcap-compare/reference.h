// The reference side of a comparison: the real transport engine
// (firmware-model/engine) behind a HAL of simulated parts, so that it can
// stand in for the device under test. It is given the DUT's QP as the
// capture shows it (peer address and QPN, PSNs, MTU, the R_Keys the peer
// used), is fed the peer's packets and records every packet it sends.
//
// Memory is simulated: sparse 4 KiB pages that remember which bytes are
// known (written by a replayed request, or seeded from what the DUT
// answered when the capture holds nothing better), so READ responses and
// atomics are compared where the capture determines memory.
#pragma once

#include <bitset>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "firmware-model/engine/engine.h"
#include "proto/packet.h"

namespace metaroce::pcapcmp {

class SparseMemory : public fw::DmaInterface {
 public:
  static constexpr size_t kPage = 4096;
  explicit SparseMemory(size_t max_pages) : max_pages_(max_pages) {}
  bool read(fw::OwnerId, uint64_t addr, std::span<uint8_t> dst) override;
  bool write(fw::OwnerId, uint64_t addr, std::span<const uint8_t> src) override;
  // Writes only the bytes nothing has written yet.
  void seed(uint64_t addr, std::span<const uint8_t> src);
  bool exhausted() const { return exhausted_; }  // a write needed more than max_pages

 private:
  struct Page {
    std::array<uint8_t, kPage> data{};
    std::bitset<kPage> known;
  };
  Page* page(uint64_t addr, bool create);
  bool put(uint64_t addr, std::span<const uint8_t> src, bool only_unknown);
  std::map<uint64_t, std::unique_ptr<Page>> pages_;
  size_t max_pages_;
  bool exhausted_ = false;
};

// One packet the reference sent, with its own copy of the payload.
struct RefPacket {
  proto::Packet packet;          // payload is empty; see bytes
  std::vector<uint8_t> payload;
  uint64_t after_fed = 0;        // how many peer packets had been fed when it left
};

// The QP the reference mirrors, learned from the capture.
struct QpMirror {
  proto::IpAddr dut_ip, peer_ip;
  uint32_t peer_qpn = 0;
  uint32_t rq_psn = 0, sq_psn = 0;
  uint32_t path_mtu = 4096;
  uint8_t min_rnr_timer = 12;
  struct Key {
    uint32_t rkey;
    uint64_t addr, length;
    uint32_t access;  // fw::AccessFlag bits the peer used
  };
  std::vector<Key> keys;
};

class Reference {
 public:
  // max_pages bounds the simulated memory; max_sent_bytes what it records
  // of its own packets (a capture can ask for far more than it shows: one
  // READ_REQ of 2 GiB). Past it, recording and timers stop: overflowed().
  Reference(size_t max_pages, uint64_t max_sent_bytes);
  ~Reference();
  // Creates and connects the QP. 0, or an errno with *why.
  int setup(const QpMirror& m, uint32_t* ref_qpn, std::string* why);
  // Posts the receive WQE of the next receive-consuming message (len bytes).
  int post_recv(uint32_t len);
  // Runs timers due before t (ns, virtual), then feeds one frame.
  void feed(uint64_t t, std::span<const uint8_t> frame);
  // Runs timers until none is due before `horizon` (bounded by max_steps).
  void drain(uint64_t horizon, uint64_t max_steps);
  void advance(uint64_t t);
  SparseMemory& memory() { return *mem_; }
  const std::vector<RefPacket>& sent() const;
  uint64_t fed() const { return fed_; }
  const fw::Counters& counters() const;
  bool overflowed() const;

 private:
  struct Hal;
  std::unique_ptr<Hal> hal_;
  std::unique_ptr<SparseMemory> mem_;
  std::unique_ptr<fw::Engine> engine_;
  uint32_t pd_ = 0, cq_ = 0, qpn_ = 0, recv_lkey_ = 0;
  uint64_t recv_next_ = 0;
  uint64_t fed_ = 0;
};

}  // namespace metaroce::pcapcmp
