#include "tests/pcap/conversation.h"

#include <algorithm>

#include "firmware-model/engine/testing/fakes.h"
#include "tools/ctl/capture.h"

namespace metaroce::pcaptest {
namespace {

using fw::test::Node;
constexpr uint32_t kSnap = 65535;
constexpr uint32_t kAll = fw::kAccessLocalWrite | fw::kAccessRemoteWrite | fw::kAccessRemoteRead |
                          fw::kAccessRemoteAtomic;

struct Wire {
  fw::test::FakeClock clock;
  Node dut{clock, kDutIp, 11}, peer{clock, kPeerIp, 12};
  Conversation out;
  bool dropped_one = false;

  Wire() {
    out.pcap = ctl::pcap_file_header(kSnap);
    dut.setup(1 << 16, kAll);
    peer.setup(1 << 16, kAll);
    dut.connect(peer.ip, peer.qpn, kAll & ~fw::kAccessLocalWrite);
    peer.connect(dut.ip, dut.qpn, kAll & ~fw::kAccessLocalWrite);
  }
  void record(std::vector<uint8_t>& f, bool from_dut) {
    for (int i = 0; i < 6; ++i) {  // MACs 02:..:01 (DUT) and 02:..:02 (peer)
      f[i] = static_cast<uint8_t>(i == 0 ? 2 : i == 5 ? (from_dut ? 2 : 1) : 0);
      f[6 + i] = static_cast<uint8_t>(i == 0 ? 2 : i == 5 ? (from_dut ? 1 : 2) : 0);
    }
    auto rec = ctl::pcap_record(clock.t / 1000, f, kSnap);
    out.pcap.insert(out.pcap.end(), rec.begin(), rec.end());
    ++out.frames;
  }
  // The third WRITE packet is lost once, before the DUT (not captured).
  bool lose(const std::vector<uint8_t>& f) {
    auto p = proto::parse_frame(f);
    if (dropped_one || !p || p.value().packet.mbth.opcode != proto::Opcode::kWrite ||
        p.value().packet.mbth.offset != 2048)
      return false;
    dropped_one = true;
    ++out.lost;
    return true;
  }
  bool move(Node& from, Node& to, bool from_dut) {
    auto frames = std::move(from.port.outbox);
    from.port.outbox.clear();
    for (auto& f : frames) {
      if (!from_dut && lose(f.bytes)) continue;
      record(f.bytes, from_dut);
      to.engine->on_frame(f.bytes);
    }
    return !frames.empty();
  }
  void timers() {
    for (Node* n : {&dut, &peer})
      if (n->engine->next_deadline() <= clock.t) n->engine->on_timer();
  }
  void run(uint64_t want) {
    for (int step = 0; step < 1'000'000 && out.peer_completions < want; ++step) {
      dut.engine->pump();
      peer.engine->pump();
      bool moved = move(peer, dut, false);
      moved |= move(dut, peer, true);
      for (auto& wc : peer.send_cq()) {
        ++out.peer_completions;
        if (wc.status != fw::WcStatus::kSuccess) ++out.peer_errors;
      }
      clock.t += 1000;  // 1 us a step on the wire
      fw::Time next = std::min(dut.engine->next_deadline(), peer.engine->next_deadline());
      if (!moved && next != fw::kNever) clock.t = std::max(clock.t, next);
      timers();
    }
  }
  fw::SendWr remote(fw::WrOpcode op, uint64_t id, uint64_t local, uint64_t remote_off, uint32_t len) {
    fw::SendWr w = peer.wr(op, id, local, len);
    w.remote_addr = dut.base() + remote_off;
    w.rkey = dut.mr.rkey;
    return w;
  }
};

}  // namespace

Conversation run_conversation(bool bad_key) {
  Wire w;
  for (uint32_t i = 0; i < 64; ++i) w.peer.mem[i] = static_cast<uint8_t>(i * 7 + 1);
  for (uint32_t i = 0; i < 4096; ++i) w.dut.mem[0x4000 + i] = static_cast<uint8_t>(i * 13);
  for (int i = 0; i < 2; ++i) w.dut.post_recv(100 + i, 0x8000 + 0x2000 * i, 0x2000);
  uint64_t n = 0;
  w.peer.post_send(w.remote(fw::WrOpcode::kRdmaWrite, ++n, 0, 0, 8192));   // 8 packets, one lost
  w.peer.post_send(w.peer.wr(fw::WrOpcode::kSend, ++n, 0, 3000));          // 3 packets
  w.peer.post_send(w.peer.wr(fw::WrOpcode::kSendImm, ++n, 0, 100));
  w.peer.post_send(w.remote(fw::WrOpcode::kRdmaRead, ++n, 0x2000, 0, 4096));       // written above
  w.peer.post_send(w.remote(fw::WrOpcode::kRdmaRead, ++n, 0x3000, 0x4000, 3000));  // DUT's own data
  fw::SendWr fa = w.remote(fw::WrOpcode::kAtomicFetchAdd, ++n, 0x5000, 0x6000, 8);
  fa.compare_add = 5;
  w.peer.post_send(fa);
  fw::SendWr cs = w.remote(fw::WrOpcode::kAtomicCmpSwap, ++n, 0x5008, 0x6000, 8);
  cs.compare_add = 5;
  cs.swap = 99;
  w.peer.post_send(cs);
  w.dut.post_send(w.dut.wr(fw::WrOpcode::kSend, 900, 0, 0));  // the DUT's own request: not compared
  w.peer.post_recv(900, 0x9000, 64);
  w.run(n);
  if (bad_key) {
    fw::SendWr bad = w.remote(fw::WrOpcode::kRdmaWrite, ++n, 0, 0, 512);
    bad.rkey ^= 0x5A5A;
    w.peer.post_send(bad);
    w.run(n);
  }
  return std::move(w.out);
}

}  // namespace metaroce::pcaptest
