// The MetaRoCE conformance suite's framework (docs/conformance.md).
//
// The tester is black box: it reaches the device under test (DUT) only
// through verbs (libibverbs and the DUT's own provider: Dut, dut.h) and
// through the DUT's link, where it plays the remote peer itself with a raw
// socket (Link, link.h). Frames are built and parsed with the project's one
// codec (proto/packet.h).
//
// A case is code (tests/conformance/cases_*.cc) registered with
// CONFORM_CASE. It cites the requirement tags of docs/protocol.md it tests
// ([R6.4-2]); tools/conformance joins those citations with the tags to
// write docs/conformance-coverage.md.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "proto/packet.h"
#include "tools/conformance/dut.h"
#include "tools/conformance/link.h"

namespace metaroce::conform {

enum class Level { kMust, kShould };
enum class Verdict { kPass, kFail, kSkip };
const char* to_string(Level l);
const char* to_string(Verdict v);

// Where the tester and the DUT are, as the command line gave them.
struct Setup {
  proto::MacAddr dut_mac{}, peer_mac{};
  proto::IpAddr dut_ip, peer_ip;  // the family the suite runs over
  proto::IpAddr other_ip;         // an address that is not the peer (forgery cases)
  bool ipv6 = false;
  ibv_mtu mtu = IBV_MTU_1024;
  uint32_t mtu_bytes = 1024;
};

// One frame the DUT sent, kept with its bytes (the Frame borrows them).
struct Rx {
  uint64_t seq = 0;  // arrival order on the link
  std::vector<uint8_t> bytes;
  proto::Frame frame;
  const proto::Packet& p() const { return frame.packet; }
};

// The result of one case: a verdict, why, and the traffic that showed it.
struct Outcome {
  Verdict verdict = Verdict::kPass;
  std::string reason;               // failure or skip reason
  std::string expected;             // what the failing check wanted
  std::vector<std::string> differ;  // decoded packets that differed from it
  std::vector<std::string> trace;   // every frame sent and matched, decoded
};

// Thrown by Ctx::fail / Ctx::skip to end a case.
struct CaseEnd {};

// One tester-side connection: a DUT QP connected to a peer QPN the tester
// impersonates. PSNs: the tester sends requests from tx_psn; the DUT's
// requests start at dut_psn.
struct Conn {
  std::unique_ptr<DutQp> qp;
  uint32_t peer_qpn = 0;
  uint32_t tx_psn = 0;       // next request PSN tester -> DUT
  uint32_t dut_psn = 0;      // DUT's sq_psn
  uint32_t recv_msn = 0;     // next receive-consuming MSN tester -> DUT
  uint32_t read_msn = 0;     // next READ/atomic MSN tester -> DUT
  uint32_t dut_qpn() const { return qp->qpn(); }
};

// What a case works with.
class Ctx {
 public:
  Ctx(const Setup& s, Link& link, Dut& dut, Outcome& out) : s_(s), link_(link), dut_(dut), out_(out) {}
  const Setup& setup() const { return s_; }
  Dut& dut() { return dut_; }

  // A fresh DUT QP in RTS towards a fresh peer QPN (opts: its attributes).
  Conn& connect(const QpOptions& opts = {});

  // A request packet to the DUT on c: dest QPN, the next PSN, a unique
  // timestamp (ACKs echo it), flags A|L. The caller fills the rest.
  proto::Packet request(Conn& c, proto::Opcode op);
  // The frame for p from the peer (h: other encapsulation fields).
  std::vector<uint8_t> frame(const proto::Packet& p, const proto::FrameHeaders* h = nullptr);
  proto::FrameHeaders headers() const;
  void send(const std::vector<uint8_t>& frame, const std::string& what = "");
  void send(const proto::Packet& p) { send(frame(p)); }

  // The next frame the DUT sends to c's peer QPN that satisfies pred,
  // within `seconds` (a generous deadline: nothing here depends on speed).
  // Frames that do not match stay queued for later waits.
  const Rx* await(Conn& c, const std::function<bool(const Rx&)>& pred, double seconds = 20);
  // Like await, but fails the case with `expected` when nothing matches.
  const Rx& expect(Conn& c, const std::string& expected, const std::function<bool(const Rx&)>& pred,
                   double seconds = 20);
  // The ACK echoing timestamp ts (the one a packet with the A flag asked for).
  const Rx& expect_ack(Conn& c, uint32_t ts, const std::string& expected);
  // Sends a zero-length WRITE with the A flag (needs no key) and returns the
  // ACK answering it: every frame sent before it has been processed then.
  const Rx& marker(Conn& c);
  // Frames for c already received and not consumed by a wait.
  std::vector<const Rx*> pending(Conn& c);

  // Ends the case.
  [[noreturn]] void fail(const std::string& why, const std::string& expected = "",
                         const Rx* got = nullptr);
  [[noreturn]] void skip(const std::string& why);
  void need(bool ok, const std::string& why, const Rx* got = nullptr) {
    if (!ok) fail(why, "", got);
  }
  // One trace line, stamped with the milliseconds since the case began.
  void note(const std::string& line);

  // Memory: the tester's MR as the DUT sees it.
  uint8_t* mem(uint64_t off) { return dut_.mem() + off; }
  uint64_t va(uint64_t off) { return dut_.va(off); }
  uint32_t rkey() { return dut_.rkey(); }

 private:
  void pull(double deadline);
  const Setup& s_;
  Link& link_;
  Dut& dut_;
  Outcome& out_;
  std::vector<std::unique_ptr<Conn>> conns_;
  std::deque<std::unique_ptr<Rx>> queue_;  // received, not yet consumed
  std::vector<std::unique_ptr<Rx>> consumed_;
  uint32_t ts_ = 0x10000;
  uint64_t rx_seq_ = 0;
  double t0_ = now_s();
};

// A registered case.
struct Case {
  std::string id;     // snake_case, unique
  std::string title;  // one line
  Level level;
  std::vector<std::string> cites;  // requirement tags, "R6.4-2"
  std::function<void(Ctx&)> run;
};
std::vector<Case>& registry();
struct Register {
  Register(Case c) { registry().push_back(std::move(c)); }  // NOLINT: registration by design
};

#define CONFORM_CAT2(a, b) a##b
#define CONFORM_CAT(a, b) CONFORM_CAT2(a, b)
// CONFORM_CASE(id, Level::kMust, ({"R5-1", "R5-2"}), "title") { body using ctx }
#define CONFORM_CASE(id, level, cites, title)                                             \
  static void conform_case_##id(::metaroce::conform::Ctx& ctx);                           \
  static ::metaroce::conform::Register CONFORM_CAT(conform_reg_, id)(                    \
      ::metaroce::conform::Case{#id, title, level, std::vector<std::string> cites,       \
                                conform_case_##id});                                      \
  static void conform_case_##id(::metaroce::conform::Ctx& ctx)

// Tags a MUST that no frame or verb can show (with the reason), so the
// coverage table lists it as such instead of as missing.
struct Unobservable {
  std::string tag, reason;
};
std::vector<Unobservable>& unobservable();
struct RegisterUnobservable {
  RegisterUnobservable(std::string tag, std::string reason) {
    unobservable().push_back({std::move(tag), std::move(reason)});
  }
};

}  // namespace metaroce::conform
