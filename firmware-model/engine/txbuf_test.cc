// Payload straight into the port's frames (hal.h §tx_buffer,
// docs/firmware-hal.md §Transmit buffers): every payload packet of RC
// (requests, retransmissions, READ responses), UC and UD is read into a
// frame the port reserved, built around it in place; without a frame the
// copy path carries it as before; a DMA read that fails after the frame was
// reserved gives the frame back unsent.
#include <doctest/doctest.h>

#include <cstring>
#include <string>
#include <vector>

#include "firmware-model/engine/testing/fakes.h"

namespace metaroce::fw::test {
namespace {

constexpr uint32_t kAll =
    kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead | kAccessRemoteAtomic;

void fill(Node& n, uint64_t off, uint32_t len, uint8_t seed) {
  for (uint32_t i = 0; i < len; ++i) n.mem[off + i] = static_cast<uint8_t>(seed + i * 13);
}

void frames_on(Bench& t) {
  t.a.port.frame_buffers = true;
  t.b.port.frame_buffers = true;
}

// No contract broken, nothing reserved any more.
void check_clean(const Node& n) {
  CHECK(n.port.contract_violations == 0);
  CHECK_FALSE(n.port.held());
  CHECK(n.engine->counters().rx_drop_bad_icrc == 0);
  CHECK(n.engine->counters().rx_drop_parse == 0);
}

// A's send completions, polled until n arrived; exactly n (REQUIREd).
std::vector<Completion> send_completions(Bench& t, size_t n) {
  std::vector<Completion> sc;
  REQUIRE(t.run([&] {
    for (auto& c : t.a.send_cq()) sc.push_back(c);
    return sc.size() >= n;
  }));
  REQUIRE(sc.size() == n);
  return sc;
}

size_t count_sent(const Node& n, const std::string& what) {
  size_t k = 0;
  for (const std::string& s : n.port.log) k += s.find(what) != std::string::npos;
  return k;
}

}  // namespace

TEST_CASE("txbuf__frame_built_around_payload_in_place_equals_the_copied_frame") {
  // proto: build_frame leaves a payload at its place and seals the same
  // ICRC and checksums as when it copies it (IPv4 and IPv6).
  for (bool v6 : {false, true}) {
    proto::FrameHeaders h;
    if (v6) {
      h.src_ip.bytes = {0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
      h.dst_ip.bytes = {0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2};
    } else {
      h.src_ip = proto::IpAddr::v4(0x0a000001);
      h.dst_ip = proto::IpAddr::v4(0x0a000002);
    }
    std::vector<uint8_t> payload(1000);
    for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<uint8_t>(i * 31 + 7);
    proto::Packet p;
    p.mbth.opcode = proto::Opcode::kWrite;
    p.mbth.psn = 77;
    p.reth = {0x1000, 0x42, 1000};
    p.payload = payload;
    std::vector<uint8_t> copied(proto::encap_length(h) + proto::transport_length(p));
    REQUIRE(proto::build_frame(h, p, copied) == copied.size());

    std::vector<uint8_t> frame(copied.size(), 0xEE);
    const size_t at = proto::payload_offset(h, p.mbth.opcode);
    REQUIRE(at == proto::encap_length(h) + proto::header_length(p.mbth.opcode));
    std::memcpy(frame.data() + at, payload.data(), payload.size());
    p.payload = std::span<const uint8_t>(frame.data() + at, payload.size());
    REQUIRE(proto::build_frame(h, p, frame) == frame.size());
    CHECK(frame == copied);
    auto parsed = proto::parse_frame(frame);
    REQUIRE(parsed.ok());
    CHECK(std::equal(payload.begin(), payload.end(), parsed.value().packet.payload.begin()));
  }
  CHECK(proto::payload_offset(proto::FrameHeaders{}, static_cast<proto::Opcode>(0xEE)) == 0);
}

TEST_CASE("txbuf__write_send_and_read_responses_are_read_straight_into_frames") {
  Bench t;
  frames_on(t);
  t.connect_pair(1 << 16);
  fill(t.a, 0, 5000, 3);
  fill(t.b, 40000, 6000, 9);
  REQUIRE(t.b.post_recv(1, 20000, 8000) == 0);
  SendWr w = t.a.wr(WrOpcode::kRdmaWrite, 1, 0, 5000);
  w.remote_addr = t.b.base() + 30000;
  w.rkey = t.b.mr.rkey;
  REQUIRE(t.a.post_send(w) == 0);
  SendWr s = t.a.wr(WrOpcode::kSend, 2, 0, 3000);  // three SGEs
  s.num_sge = 3;
  s.sg[0] = {t.a.base() + 0, 1000, t.a.mr.lkey};
  s.sg[1] = {t.a.base() + 2000, 1500, t.a.mr.lkey};
  s.sg[2] = {t.a.base() + 4000, 500, t.a.mr.lkey};
  REQUIRE(t.a.post_send(s) == 0);
  SendWr r = t.a.wr(WrOpcode::kRdmaRead, 3, 10000, 6000);
  r.remote_addr = t.b.base() + 40000;
  r.rkey = t.b.mr.rkey;
  REQUIRE(t.a.post_send(r) == 0);
  std::vector<Completion> sc = send_completions(t, 3);
  for (const Completion& c : sc) CHECK(std::string(status_name(c.status)) == "SUCCESS");
  CHECK(std::memcmp(t.b.mem.data() + 30000, t.a.mem.data(), 5000) == 0);
  CHECK(std::memcmp(t.b.mem.data() + 20000, t.a.mem.data() + 0, 1000) == 0);
  CHECK(std::memcmp(t.b.mem.data() + 21000, t.a.mem.data() + 2000, 1500) == 0);
  CHECK(std::memcmp(t.b.mem.data() + 22500, t.a.mem.data() + 4000, 500) == 0);
  CHECK(std::memcmp(t.a.mem.data() + 10000, t.b.mem.data() + 40000, 6000) == 0);

  // 5 WRITE + 3 SEND packets from a, 6 READ responses from b (1 KiB MTU),
  // each in a frame of its own; nothing through the scratch.
  const Counters& ca = t.a.engine->counters();
  const Counters& cb = t.b.engine->counters();
  CHECK(ca.tx_payload_in_frame == 8 + ca.tx_retransmits);
  CHECK(ca.tx_payload_copied == 0);
  CHECK(cb.tx_payload_in_frame >= 6);
  CHECK(cb.tx_payload_copied == 0);
  CHECK(t.a.port.frames_in_place == t.a.port.frames_given);
  CHECK(t.b.port.frames_in_place == t.b.port.frames_given);
  CHECK(ca.tx_frames_abandoned + cb.tx_frames_abandoned == 0);
  check_clean(t.a);
  check_clean(t.b);
}

TEST_CASE("txbuf__inline_and_retransmitted_packets_use_frames_too") {
  Bench t;
  frames_on(t);
  t.connect_pair(1 << 16);
  fill(t.a, 0, 4096, 5);
  bool dropped = false;
  t.filter = [&](const std::string& what, bool from_a) {  // the first WRITE packet, once
    if (!from_a || dropped || what.find("RDMA_WRITE") == std::string::npos) return true;
    dropped = true;
    return false;
  };
  SendWr w = t.a.wr(WrOpcode::kRdmaWrite, 1, 0, 4096);
  w.remote_addr = t.b.base() + 8192;
  w.rkey = t.b.mr.rkey;
  REQUIRE(t.a.post_send(w) == 0);
  REQUIRE(t.b.post_recv(2, 30000, 100) == 0);
  SendWr in = t.a.wr(WrOpcode::kSend, 2, 0, 0, kSendSignaled | kSendInline);
  in.num_sge = 0;
  in.inline_data = {'h', 'e', 'l', 'l', 'o'};
  REQUIRE(t.a.post_send(in) == 0);
  std::vector<Completion> sc, rc;
  REQUIRE(t.run([&] {
    for (auto& c : t.a.send_cq()) sc.push_back(c);
    for (auto& c : t.b.recv_cq()) rc.push_back(c);
    return sc.size() == 2 && rc.size() == 1;
  }));
  CHECK(dropped);
  CHECK(t.a.engine->counters().tx_retransmits >= 1);
  CHECK(std::memcmp(t.b.mem.data() + 8192, t.a.mem.data(), 4096) == 0);
  CHECK(std::memcmp(t.b.mem.data() + 30000, "hello", 5) == 0);
  const Counters& ca = t.a.engine->counters();
  CHECK(ca.tx_payload_in_frame == 5 + ca.tx_retransmits);
  CHECK(ca.tx_payload_copied == 0);
  check_clean(t.a);
  check_clean(t.b);
}

TEST_CASE("txbuf__without_a_free_frame_the_copy_path_carries_the_packet") {
  Bench t;
  frames_on(t);
  t.a.port.frames_free = 2;  // two frames, then "no buffer"
  t.connect_pair(1 << 16);
  fill(t.a, 0, 5000, 11);
  SendWr w = t.a.wr(WrOpcode::kRdmaWrite, 1, 0, 5000);
  w.remote_addr = t.b.base() + 30000;
  w.rkey = t.b.mr.rkey;
  REQUIRE(t.a.post_send(w) == 0);
  std::vector<Completion> sc = send_completions(t, 1);
  CHECK(std::string(status_name(sc[0].status)) == "SUCCESS");
  CHECK(std::memcmp(t.b.mem.data() + 30000, t.a.mem.data(), 5000) == 0);
  const Counters& ca = t.a.engine->counters();
  CHECK(ca.tx_payload_in_frame == 2);
  CHECK(ca.tx_payload_copied == 3 + ca.tx_retransmits);
  CHECK(t.a.port.frames_refused == ca.tx_payload_copied);
  check_clean(t.a);
}

TEST_CASE("txbuf__dma_failure_after_the_frame_was_reserved_sends_nothing_and_gives_it_back") {
  Bench t;
  frames_on(t);
  t.connect_pair(1 << 16);
  fill(t.a, 0, 4096, 1);
  t.a.dma.bad_reads.push_back({t.a.base() + 1024, 1024});  // the second packet's payload
  SendWr w = t.a.wr(WrOpcode::kRdmaWrite, 1, 0, 4096);
  w.remote_addr = t.b.base() + 8192;
  w.rkey = t.b.mr.rkey;
  REQUIRE(t.a.post_send(w) == 0);
  std::vector<Completion> sc = send_completions(t, 1);
  // The same error as the copy path reports.
  CHECK(std::string(status_name(sc[0].status)) == "LOC_QP_OP_ERR");
  CHECK(t.a.dma.failed_reads >= 1);
  // Only the first packet left; the frame of the second went back unsent.
  CHECK(count_sent(t.a, "RDMA_WRITE psn") == 1);
  CHECK(t.a.port.frames_abandoned == 1);
  CHECK(t.a.engine->counters().tx_frames_abandoned == 1);
  CHECK(t.a.port.frames_given == t.a.port.frames_in_place + t.a.port.frames_abandoned);
  // No poisoned or partly read frame reached the peer.
  t.run_idle(100'000'000);  // the first packet is still on the wire
  CHECK(std::memcmp(t.b.mem.data() + 8192, t.a.mem.data(), 1024) == 0);
  for (size_t i = 8192 + 1024; i < 8192 + 4096; ++i) REQUIRE(t.b.mem[i] == 0);
  check_clean(t.a);
  check_clean(t.b);
}

TEST_CASE("txbuf__read_response_dma_failure_gives_the_frame_back_and_the_qp_fails") {
  Bench t;
  frames_on(t);
  t.connect_pair(1 << 16, /*timeout=*/10, /*retry_cnt=*/2);
  t.b.dma.bad_reads.push_back({t.b.base() + 40000, 6000});
  SendWr r = t.a.wr(WrOpcode::kRdmaRead, 1, 0, 2000);
  r.remote_addr = t.b.base() + 40000;
  r.rkey = t.b.mr.rkey;
  REQUIRE(t.a.post_send(r) == 0);
  std::vector<Completion> sc = send_completions(t, 1);
  CHECK(std::string(status_name(sc[0].status)) != "SUCCESS");
  CHECK(t.b.events.has_event(EventType::kQpFatal, t.b.qpn));
  CHECK(count_sent(t.b, "RDMA_READ_RESP") == 0);
  CHECK(t.b.port.frames_abandoned == 1);
  CHECK(t.b.engine->counters().tx_frames_abandoned == 1);
  CHECK(t.b.port.frames_given == t.b.port.frames_in_place + t.b.port.frames_abandoned);
  check_clean(t.a);
  check_clean(t.b);
}
}  // namespace metaroce::fw::test
