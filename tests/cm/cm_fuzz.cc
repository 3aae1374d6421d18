// libFuzzer target for the CM receive path: hostile bytes through the codec
// (parse_transport), the field checks (check_cm) and the state machine
// (firmware-model/cm), against a manager holding a connection in each state.
//
// Input: byte 0 picks the scenario (bits 0-2: which state the connection
// under attack is in; bit 3: the bytes come from the peer's address, else
// from a third host; bit 4: the message's remote comm ID is replaced by the
// victim's real one, bit 5: its local comm ID by the peer's, so mutations
// reach every state's handling instead of all dying as unknown
// connections), the rest is a UDP payload (its ICRC is also tried made
// right, as in proto/parse_fuzz.cc, so mutations reach the CM logic).
//
// Aborts (a crash for libFuzzer) if:
//   - a message the manager sends does not build, re-parse and pass check_cm
//     (the CM never emits what it would itself refuse);
//   - a non-REQ message from the third host raises an event or sends
//     anything (forged messages change nothing);
//   - the timers do not run out: after at most 1000 deadlines nothing is
//     pending, and every connection left waits for its application.
//
// Without -fsanitize=fuzzer (Bazel //tests/cm:cm_fuzz, "manual", with
// proto/fuzz_replay_main.cc) it replays files; tests/cm:cm_fuzz_replay_test runs the seeds and mutations.
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "firmware-model/cm/connection_manager.h"
#include "proto/cm.h"

namespace {

using namespace metaroce;
using cm::ConnectionManager;

const proto::IpAddr kA = proto::IpAddr::v4(0x0A000001);
const proto::IpAddr kB = proto::IpAddr::v4(0x0A000002);
const proto::IpAddr kForger = proto::IpAddr::v4(0x0A000063);

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "cm_fuzz: %s\n", what);
  std::abort();
}

uint32_t draw(void* ctx) { return static_cast<uint32_t>((*static_cast<std::mt19937_64*>(ctx))()); }

void check_sent(const cm::Output& out) {
  for (const cm::Outgoing& m : out.messages) {
    const proto::Packet p = m.packet();
    std::vector<uint8_t> b(proto::transport_length(p));
    if (b.empty() || proto::build_transport(p, b) != b.size()) fail("sent message does not build");
    auto back = proto::parse_transport(b);
    if (!back) fail("sent message does not parse");
    if (proto::check_cm(back.value()) != proto::CmCheck::kOk) fail("sent message fails check_cm");
  }
}

// B with a listener, and one connection from A driven to `stage`:
// 0 none, 1 REQ_RCVD, 2 REP_SENT, 3 ESTABLISHED, 4 TIMEWAIT.
struct World {
  std::mt19937_64 ra{1}, rb{2};
  ConnectionManager a{{}, draw, &ra};
  ConnectionManager b{{}, draw, &rb};
  uint64_t now = 0;
  cm::ConnId ca = 0, cb = 0;  // the connection's id on A and on B

  void pass(ConnectionManager& to, const proto::IpAddr& from, cm::Output& out) {
    cm::Output next;
    for (const cm::Outgoing& m : out.messages) to.on_packet(from, m.to, m.packet(), now, next);
    out = std::move(next);
  }
  explicit World(int stage) {
    cm::ListenId l;
    b.listen(proto::PortSpace::kTcp, {proto::IpAddr{}, 1}, 4, &l);
    if (stage == 0) return;
    cm::ConnParam p;
    p.qpn = 5;
    p.path_mtu = 3;
    cm::Output out;
    a.connect(proto::PortSpace::kTcp, proto::kCmQpRc, {kA, 9}, {kB, 1}, p, now, out, &ca);
    pass(b, kA, out);  // REQ -> CONNECT_REQUEST
    cb = out.events.empty() ? 0 : out.events[0].conn;
    if (stage == 1) return;
    out = {};
    b.accept(cb, p, now, out);
    pass(a, kB, out);  // REP -> CONNECT_RESPONSE
    if (stage == 2) return;
    out = {};
    a.establish(ca, now, out);
    pass(b, kA, out);  // RTU
    if (stage == 3) return;
    out = {};
    a.disconnect(ca, {}, now, out);
    pass(b, kA, out);  // DREQ -> DREP
    pass(a, kB, out);
  }
};

void run_timers(World& w) {
  for (int i = 0; i < 1000; ++i) {
    const uint64_t t = std::min(w.a.next_deadline(), w.b.next_deadline());
    if (t == cm::kNever) return;
    w.now = t;
    cm::Output oa, ob;
    w.a.on_timer(w.now, oa);
    w.b.on_timer(w.now, ob);
    check_sent(oa);
    check_sent(ob);
  }
  fail("timers never run out");
}

void attack(int stage, uint8_t sel, const proto::Packet& original) {
  World w(stage);
  const bool from_peer = (sel & 8) != 0;
  for (ConnectionManager* victim : {&w.b, &w.a}) {
    const bool on_b = victim == &w.b;
    proto::Packet p = original;
    if (sel & 16) p.cm.remote_comm_id = on_b ? w.cb : w.ca;
    if (sel & 32) p.cm.local_comm_id = on_b ? w.ca : w.cb;
    const proto::IpAddr from = from_peer ? (on_b ? kA : kB) : kForger;
    cm::Output out;
    victim->on_packet(from, on_b ? kB : kA, p, w.now, out);
    check_sent(out);
    const bool forged = !from_peer && p.mbth.opcode != proto::Opcode::kCmReq;
    if (forged && (!out.events.empty() || !out.messages.empty()))
      fail("a forged message changed something");
  }
  run_timers(w);
}

void one(std::span<const uint8_t> udp, uint8_t sel) {
  auto parsed = proto::parse_transport(udp);
  if (!parsed || !proto::is_cm(parsed.value().mbth.opcode)) return;
  attack(sel % 8 % 5, sel, parsed.value());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t sel = data[0];
  const std::span<const uint8_t> udp(data + 1, size - 1);
  one(udp, sel);
  std::vector<uint8_t> fixed(udp.begin(), udp.end());
  if (proto::seal_icrc(fixed)) one(fixed, sel);
  return 0;
}

