// Tests of the CM state machine (connection_manager.cc): two managers, A
// (10.0.0.1) and B (10.0.0.2), joined by a virtual-time wire that carries
// every message through the real codec (build_transport, parse_transport).
// The wire can drop by predicate; a trace of short strings records what
// crossed it and which events each side raised, and tests compare traces.
#include "firmware-model/cm/connection_manager.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cerrno>
#include <deque>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "proto/cm.h"
#include "proto/opcode.h"

using namespace metaroce;
using cm::ConnectionManager;
using cm::ConnId;
using cm::ConnParam;
using cm::Endpoint;
using cm::EventType;
using cm::Output;
using cm::Time;
using proto::IpAddr;
using proto::Opcode;
using proto::PortSpace;

namespace {

const IpAddr kIpA = IpAddr::v4(0x0A000001);
const IpAddr kIpB = IpAddr::v4(0x0A000002);
const IpAddr kIpForger = IpAddr::v4(0x0A000063);
constexpr uint16_t kPort = 7174;
const Time kT = proto::cm_timeout_ns(cm::Config{}.response_timeout);
// The default timewait outlasts a peer's whole resend sequence.
const Time kTimewait = kT * (cm::Config{}.max_retries + 1);

uint32_t draw(void* ctx) { return static_cast<uint32_t>((*static_cast<std::mt19937_64*>(ctx))()); }

ConnParam param(uint32_t qpn, uint8_t mtu = 5) {
  ConnParam p;
  p.qpn = qpn;
  p.start_psn = qpn * 1000;
  p.path_mtu = mtu;
  p.responder_resources = 16;
  p.initiator_depth = 16;
  p.retry_count = 7;
  p.rnr_retry = 7;
  return p;
}

struct Side {
  char name;
  IpAddr ip;
  std::mt19937_64 rng;
  ConnectionManager cm;
  std::vector<cm::Event> events;
  Side(char n, IpAddr a, uint64_t seed, cm::Config c = {})
      : name(n), ip(a), rng(seed), cm(c, draw, &rng) {}
  Side(const Side&) = delete;  // cm holds &rng
};

class Net {
 public:
  explicit Net(cm::Config ca = {}, cm::Config cb = {}) : a('a', kIpA, 1, ca), b('b', kIpB, 2, cb) {}

  Side a;
  Side b;
  Time now = 0;
  std::vector<std::string> trace;
  std::function<bool(char from, const proto::Packet&)> drop = [](char, const proto::Packet&) {
    return false;
  };

  Side& other(Side& s) { return &s == &a ? b : a; }

  // Queues what a command or input produced on side `s`.
  void take(Side& s, Output& out) {
    for (auto& e : out.events) {
      trace.push_back(std::string(1, s.name) + " " + cm::to_string(e.type) +
                      (e.status ? " " + std::to_string(e.status) : ""));
      s.events.push_back(e);
    }
    for (auto& m : out.messages) wire_.push_back({&s, std::move(m)});
    out = {};
  }

  // Delivers until the wire is empty (each delivery may answer).
  void run() {
    for (int guard = 0; !wire_.empty() && guard < 10000; ++guard) {
      auto [from, m] = std::move(wire_.front());
      wire_.pop_front();
      deliver(*from, m);
    }
    REQUIRE(wire_.empty());
  }

  // Runs both sides' timers, one deadline at a time, until `until`.
  void advance(Time until) {
    for (int guard = 0; guard < 10000; ++guard) {
      const Time next = std::min(a.cm.next_deadline(), b.cm.next_deadline());
      if (next > until) break;
      now = std::max(now, next);
      for (Side* s : {&a, &b}) {
        Output out;
        s->cm.on_timer(now, out);
        take(*s, out);
      }
      run();
    }
    now = std::max(now, until);
  }

  // Hands side `to` a packet as if it came from `src` (forgery tests).
  void inject(Side& to, const IpAddr& src, const proto::Packet& p) {
    Output out;
    to.cm.on_packet(src, to.ip, reparse(p), now, out);
    take(to, out);
    run();
  }

  ConnId connect(uint8_t qp_type = proto::kCmQpRc, PortSpace ps = PortSpace::kTcp,
                 std::vector<uint8_t> data = {}) {
    ConnParam p = param(0x102);
    p.private_data = std::move(data);
    ConnId id = 0;
    Output out;
    const cm::Status s = a.cm.connect(ps, qp_type, {kIpA, 40000}, {kIpB, kPort}, p, now, out, &id);
    REQUIRE_MESSAGE(s.ok(), s.reason);
    take(a, out);
    run();
    return id;
  }
  cm::ListenId listen(int backlog = 16, PortSpace ps = PortSpace::kTcp) {
    cm::ListenId id = 0;
    REQUIRE(b.cm.listen(ps, {IpAddr{}, kPort}, backlog, &id).ok());
    return id;
  }
  template <class F>
  cm::Status cmd(Side& s, F&& f) {
    Output out;
    cm::Status st = f(s.cm, out);
    take(s, out);
    run();
    return st;
  }
  ConnId last_conn(Side& s) { return s.events.back().conn; }

  // A through REQ, REP, RTU: returns (A's id, B's id).
  std::pair<ConnId, ConnId> establish() {
    listen();
    const ConnId ca = connect();
    const ConnId cb = last_conn(b);
    REQUIRE(cmd(b, [&](auto& m, auto& o) { return m.accept(cb, param(0x203, 3), now, o); }).ok());
    REQUIRE(cmd(a, [&](auto& m, auto& o) { return m.establish(ca, now, o); }).ok());
    trace.clear();
    return {ca, cb};
  }

 private:
  // Through the codec and back: what goes on the wire is what arrives.
  static proto::Packet reparse(const proto::Packet& p) {
    static std::vector<uint8_t> bytes;
    bytes.assign(proto::transport_length(p), 0);
    REQUIRE(proto::build_transport(p, bytes) == bytes.size());
    auto parsed = proto::parse_transport(bytes);
    REQUIRE_MESSAGE(parsed.ok(), parsed.error().message());
    return parsed.value();
  }

  void deliver(Side& from, const cm::Outgoing& m) {
    const proto::Packet p = m.packet();
    const bool lost = drop(from.name, p);
    trace.push_back(std::string(1, from.name) + ">" + (&from == &a ? "b " : "a ") +
                    proto::to_string(p.mbth.opcode) + (lost ? " lost" : ""));
    CHECK(m.from == from.ip);
    CHECK(m.to == other(from).ip);
    if (lost) return;
    Side& to = other(from);
    Output out;
    to.cm.on_packet(from.ip, to.ip, reparse(p), now, out);
    take(to, out);
  }

  std::deque<std::pair<Side*, cm::Outgoing>> wire_;
};

using Trace = std::vector<std::string>;

proto::Packet cm_packet(Opcode op, uint32_t local, uint32_t remote) {
  proto::Packet p;
  p.mbth.opcode = op;
  p.cm.local_comm_id = local;
  p.cm.remote_comm_id = remote;
  return p;
}

}  // namespace

// ---------------------------------------------------------------- connect

TEST_CASE("connect__req_rep_rtu_establishes_both_sides") {
  Net n;
  n.listen();
  const ConnId ca = n.connect(proto::kCmQpRc, PortSpace::kTcp, {1, 2, 3});
  CHECK(n.trace == Trace{"a>b CM_REQ", "b CONNECT_REQUEST"});
  const cm::Event req = n.b.events.back();
  CHECK(req.remote.qpn == 0x102);
  CHECK(req.remote.private_data == std::vector<uint8_t>{1, 2, 3});
  CHECK(req.listener == 1);

  REQUIRE(n.cmd(n.b, [&](auto& m, auto& o) { return m.accept(req.conn, param(0x203, 3), n.now, o); }).ok());
  CHECK(n.a.events.back().type == EventType::kConnectResponse);
  CHECK(n.a.events.back().remote.qpn == 0x203);
  REQUIRE(n.cmd(n.a, [&](auto& m, auto& o) { return m.establish(ca, n.now, o); }).ok());
  CHECK(n.trace == Trace{"a>b CM_REQ", "b CONNECT_REQUEST", "b>a CM_REP", "a CONNECT_RESPONSE",
                         "a>b CM_RTU", "b ESTABLISHED"});
  // Both sides agree on the QPs, PSNs and the smaller MTU.
  const auto ia = n.a.cm.info(ca), ib = n.b.cm.info(req.conn);
  REQUIRE(ia);
  REQUIRE(ib);
  CHECK(ia->theirs.qpn == 0x203);
  CHECK(ib->theirs.qpn == 0x102);
  CHECK(ia->theirs.start_psn == ib->mine.start_psn);
  CHECK(ia->path_mtu == 3);
  CHECK(ib->path_mtu == 3);
  CHECK(ib->peer == Endpoint{kIpA, 40000});
  CHECK(n.a.cm.counters().established == 1);
  CHECK(n.b.cm.counters().established == 1);
  CHECK(n.a.cm.next_deadline() == cm::kNever);
  CHECK(n.b.cm.next_deadline() == cm::kNever);
}

TEST_CASE("connect__to_a_port_nobody_listens_on_is_rejected_at_once") {
  Net n;
  n.connect();
  CHECK(n.trace == Trace{"a>b CM_REQ", "b>a CM_REJ", "a REJECTED 8"});
  CHECK(n.now == 0);  // no timer was needed
  CHECK(n.b.cm.counters().rej_no_listener == 1);
  CHECK(n.a.cm.connection_count() == 0);
  CHECK(n.b.cm.connection_count() == 0);
}

TEST_CASE("connect__to_another_port_space_is_rejected_at_once") {
  Net n;
  n.listen(16, PortSpace::kUdp);  // same port, UDP space: a TCP REQ finds no listener
  n.connect();
  CHECK(n.a.events.back().type == EventType::kRejected);
  CHECK(n.a.events.back().status == static_cast<int>(proto::RejReason::kInvalidServiceId));
}

TEST_CASE("connect__peer_dead_gives_unreachable_after_the_retries_never_a_hang") {
  Net n;
  n.drop = [](char from, const proto::Packet&) { return from == 'a'; };
  n.connect();
  const Time fail_at = kT * (cm::Config{}.max_retries + 1);
  n.advance(fail_at - 1);
  CHECK(n.a.events.empty());
  n.advance(fail_at);
  REQUIRE(n.a.events.size() == 1);
  CHECK(n.a.events[0].type == EventType::kUnreachable);
  CHECK(n.a.events[0].status == ETIMEDOUT);
  CHECK(n.a.cm.counters().req_resent == cm::Config{}.max_retries);
  CHECK(n.a.cm.counters().connect_timeouts == 1);
  CHECK(n.a.cm.connection_count() == 0);
  CHECK(n.a.cm.next_deadline() == cm::kNever);  // nothing left to wait for
  // It tells the peer it gave up (REJ TIMEOUT), in case only the answers were lost.
  CHECK(n.trace[n.trace.size() - 2] == "a UNREACHABLE 110");
  CHECK(n.trace.back() == "a>b CM_REJ lost");
}

TEST_CASE("connect__lost_rep_is_resent_on_the_duplicate_req") {
  Net n;
  n.listen();
  int reps = 0;
  n.drop = [&](char, const proto::Packet& p) { return p.mbth.opcode == Opcode::kCmRep && reps++ == 0; };
  const ConnId ca = n.connect();
  REQUIRE(n.cmd(n.b, [&](auto& m, auto& o) { return m.accept(n.last_conn(n.b), param(0x203), n.now, o); }).ok());
  n.advance(kT);  // A resends its REQ; B answers with the same REP
  CHECK(n.a.events.back().type == EventType::kConnectResponse);
  CHECK(n.b.cm.counters().rx_duplicate == 1);
  REQUIRE(n.cmd(n.a, [&](auto& m, auto& o) { return m.establish(ca, n.now, o); }).ok());
  CHECK(n.b.events.back().type == EventType::kEstablished);
}

TEST_CASE("connect__lost_rtu_is_resent_on_the_duplicate_rep") {
  Net n;
  int rtus = 0;
  n.drop = [&](char, const proto::Packet& p) { return p.mbth.opcode == Opcode::kCmRtu && rtus++ == 0; };
  n.listen();
  const ConnId ca = n.connect();
  REQUIRE(n.cmd(n.b, [&](auto& m, auto& o) { return m.accept(n.last_conn(n.b), param(0x203), n.now, o); }).ok());
  REQUIRE(n.cmd(n.a, [&](auto& m, auto& o) { return m.establish(ca, n.now, o); }).ok());
  CHECK(n.b.events.back().type == EventType::kConnectRequest);
  n.advance(kT);  // B resends REP; A, established, resends RTU
  CHECK(n.b.events.back().type == EventType::kEstablished);
  CHECK(n.b.cm.counters().rep_resent == 1);
  CHECK(n.a.cm.counters().rx_duplicate == 1);
}

TEST_CASE("connect__first_data_establishes_the_passive_side_without_rtu") {
  Net n;
  n.drop = [](char, const proto::Packet& p) { return p.mbth.opcode == Opcode::kCmRtu; };
  n.listen();
  const ConnId ca = n.connect();
  const ConnId cb = n.last_conn(n.b);
  REQUIRE(n.cmd(n.b, [&](auto& m, auto& o) { return m.accept(cb, param(0x203), n.now, o); }).ok());
  REQUIRE(n.cmd(n.a, [&](auto& m, auto& o) { return m.establish(ca, n.now, o); }).ok());
  REQUIRE(n.cmd(n.b, [&](auto& m, auto& o) { return m.establish(cb, n.now, o); }).ok());
  CHECK(n.b.events.back().type == EventType::kEstablished);
  CHECK(n.b.cm.next_deadline() == cm::kNever);  // no more REP resends
}

TEST_CASE("accept__rep_never_answered_gives_unreachable_to_the_passive_side") {
  Net n;
  n.listen();
  n.connect();
  n.drop = [](char from, const proto::Packet&) { return from == 'b'; };
  REQUIRE(n.cmd(n.b, [&](auto& m, auto& o) { return m.accept(n.last_conn(n.b), param(0x203), n.now, o); }).ok());
  n.drop = [](char, const proto::Packet&) { return true; };  // and A is gone
  n.advance(kT * 20);
  CHECK(n.b.events.back().type == EventType::kUnreachable);
  CHECK(n.b.events.back().status == ETIMEDOUT);
  CHECK(n.b.cm.counters().accept_timeouts == 1);
  CHECK(n.b.cm.counters().rep_resent == cm::Config{}.max_retries);
  CHECK(n.b.cm.connection_count() == 0);
}

// -------------------------------------------------------------- MRA, backlog

TEST_CASE("mra__a_slow_application_keeps_the_initiator_waiting") {
  Net n;
  n.listen();
  const ConnId ca = n.connect();
  n.advance(kT);  // A resends REQ; B's app has not answered: MRA
  CHECK(n.trace.back() == "b>a CM_MRA");
  CHECK(n.b.cm.counters().mra_sent == 1);
  CHECK(n.a.cm.counters().mra_received == 1);
  // Without the MRA A would give up after (retries+1) timeouts; it does not.
  n.advance(kT * (cm::Config{}.max_retries + 2));
  CHECK(n.a.events.empty());
  REQUIRE(n.cmd(n.b, [&](auto& m, auto& o) { return m.accept(n.b.events.back().conn, param(0x203), n.now, o); }).ok());
  CHECK(n.a.events.back().type == EventType::kConnectResponse);
  CHECK(n.a.events.back().conn == ca);
}

TEST_CASE("listen__backlog_full_rejects_with_no_resources_and_counts") {
  Net n;
  n.listen(2);
  n.connect();
  n.connect();
  n.connect();
  CHECK(n.b.cm.counters().rej_backlog_full == 1);
  CHECK(n.a.events.back().type == EventType::kRejected);
  CHECK(n.a.events.back().status == static_cast<int>(proto::RejReason::kNoResources));
  CHECK(n.b.events.size() == 2);
  // Accepting one frees a slot.
  REQUIRE(n.cmd(n.b, [&](auto& m, auto& o) { return m.accept(n.b.events[0].conn, param(0x203), n.now, o); }).ok());
  n.connect();
  CHECK(n.b.events.back().type == EventType::kConnectRequest);
}

TEST_CASE("listen__a_req_flood_is_bounded_by_the_backlog") {
  Net n;
  n.listen(8);
  for (int i = 0; i < 100; ++i) n.connect();
  CHECK(n.b.cm.connection_count() == 8);
  CHECK(n.b.cm.counters().rej_backlog_full == 92);
  CHECK(n.a.cm.connection_count() == 8);  // the 92 rejected are gone on A too
}

TEST_CASE("listen__connection_table_full_rejects_with_no_resources") {
  cm::Config small;
  small.max_connections = 1;
  Net n({}, small);
  n.listen();
  n.connect();
  n.connect();
  CHECK(n.b.cm.counters().rej_table_full == 1);
  CHECK(n.a.events.back().status == static_cast<int>(proto::RejReason::kNoResources));
}

TEST_CASE("listen__address_in_use_and_bad_ids") {
  Net n;
  cm::ListenId l1 = 0, l2 = 0;
  REQUIRE(n.b.cm.listen(PortSpace::kTcp, {kIpB, kPort}, 4, &l1).ok());
  const cm::Status dup = n.b.cm.listen(PortSpace::kTcp, {IpAddr{}, kPort}, 4, &l2);
  CHECK(dup.err == EADDRINUSE);
  CHECK(std::string(dup.reason).find("port") != std::string::npos);
  CHECK(n.b.cm.listen(PortSpace::kUdp, {kIpB, kPort}, 4, &l2).ok());  // other space
  CHECK(n.b.cm.unlisten(l1).ok());
  CHECK(n.b.cm.unlisten(l1).err == ENOENT);
  Output out;
  CHECK(n.b.cm.accept(1234, param(1), 0, out).err == ENOENT);
  CHECK(n.b.cm.disconnect(1234, {}, 0, out).err == ENOENT);
  CHECK(n.b.cm.destroy(1234, 0, out).err == ENOENT);
  CHECK(out.messages.empty());
}

// ----------------------------------------------------------------- reject

TEST_CASE("reject__by_the_application_reaches_the_initiator_with_its_data") {
  Net n;
  n.listen();
  n.connect();
  REQUIRE(n.cmd(n.b, [&](auto& m, auto& o) { return m.reject(n.last_conn(n.b), {9, 9}, n.now, o); }).ok());
  CHECK(n.a.events.back().type == EventType::kRejected);
  CHECK(n.a.events.back().status == 28);
  CHECK(n.a.events.back().remote.private_data == std::vector<uint8_t>{9, 9});
  CHECK(n.a.cm.connection_count() == 0);
  CHECK(n.b.cm.connection_count() == 0);
}

TEST_CASE("reject__of_the_rep_by_the_initiator") {
  Net n;
  n.listen();
  const ConnId ca = n.connect();
  REQUIRE(n.cmd(n.b, [&](auto& m, auto& o) { return m.accept(n.last_conn(n.b), param(0x203), n.now, o); }).ok());
  REQUIRE(n.cmd(n.a, [&](auto& m, auto& o) { return m.reject(ca, {}, n.now, o); }).ok());
  CHECK(n.b.events.back().type == EventType::kRejected);
  CHECK(n.b.cm.connection_count() == 0);
}

TEST_CASE("commands__refused_in_the_wrong_state_with_a_reason") {
  Net n;
  n.listen();
  const ConnId ca = n.connect();
  Output out;
  cm::Status s = n.a.cm.accept(ca, param(1), 0, out);
  CHECK(s.err == EINVAL);
  CHECK(std::string(s.reason) == "accept: no connect request is waiting");
  CHECK(n.a.cm.disconnect(ca, {}, 0, out).err == EINVAL);
  CHECK(n.a.cm.establish(ca, 0, out).err == EINVAL);
  CHECK(n.a.cm.reject(ca, {}, 0, out).err == EINVAL);
  ConnParam big = param(0x300);
  big.private_data.resize(93);
  ConnId id = 0;
  s = n.a.cm.connect(PortSpace::kTcp, proto::kCmQpRc, {kIpA, 1}, {kIpB, kPort}, big, 0, out, &id);
  CHECK(s.err == EINVAL);
  CHECK(std::string(s.reason).find("private data") != std::string::npos);
  s = n.a.cm.connect(PortSpace::kTcp, proto::kCmQpUd, {kIpA, 1}, {kIpB, kPort}, param(1), 0, out, &id);
  CHECK(s.err == EINVAL);
  s = n.a.cm.connect(PortSpace::kTcp, proto::kCmQpRc, {kIpA, 1}, {kIpB, kPort}, param(1, 0), 0, out, &id);
  CHECK(std::string(s.reason).find("path_mtu") != std::string::npos);
  CHECK(out.messages.empty());
}

// ------------------------------------------------------------- disconnect

TEST_CASE("disconnect__dreq_drep_then_timewait_on_both_sides") {
  Net n;
  auto [ca, cb] = n.establish();
  REQUIRE(n.cmd(n.a, [&](auto& m, auto& o) { return m.disconnect(ca, {7}, n.now, o); }).ok());
  CHECK(n.trace == Trace{"a>b CM_DREQ", "b DISCONNECTED", "b>a CM_DREP", "a DISCONNECTED"});
  CHECK(n.b.events.back().remote.private_data == std::vector<uint8_t>{7});
  n.trace.clear();
  n.advance(kTimewait);
  CHECK(n.trace == Trace{"a TIMEWAIT_EXIT", "b TIMEWAIT_EXIT"});
  CHECK(n.a.cm.connection_count() == 0);
  CHECK(n.b.cm.connection_count() == 0);
}

TEST_CASE("disconnect__peer_dead_still_disconnects_after_the_retries") {
  Net n;
  auto [ca, cb] = n.establish();
  n.drop = [](char, const proto::Packet&) { return true; };
  REQUIRE(n.cmd(n.a, [&](auto& m, auto& o) { return m.disconnect(ca, {}, n.now, o); }).ok());
  n.advance(kT * (cm::Config{}.max_retries + 1));
  CHECK(n.a.events.back().type == EventType::kDisconnected);
  CHECK(n.a.cm.counters().dreq_resent == cm::Config{}.max_retries);
  CHECK(n.a.cm.counters().disconnect_timeouts == 1);
  n.advance(n.now + kTimewait);
  CHECK(n.a.events.back().type == EventType::kTimewaitExit);
  CHECK(n.a.cm.connection_count() == 0);
}

TEST_CASE("disconnect__both_sides_at_once_each_disconnects_once") {
  Net n;
  auto [ca, cb] = n.establish();
  Output oa, ob;
  REQUIRE(n.a.cm.disconnect(ca, {}, n.now, oa).ok());
  REQUIRE(n.b.cm.disconnect(cb, {}, n.now, ob).ok());
  n.take(n.a, oa);
  n.take(n.b, ob);
  n.run();
  int disc_a = 0, disc_b = 0;
  for (auto& e : n.a.events) disc_a += e.type == EventType::kDisconnected;
  for (auto& e : n.b.events) disc_b += e.type == EventType::kDisconnected;
  CHECK(disc_a == 1);
  CHECK(disc_b == 1);
  n.advance(n.now + kTimewait * 2);
  CHECK(n.a.cm.connection_count() == 0);
  CHECK(n.b.cm.connection_count() == 0);
}

TEST_CASE("disconnect__lost_drep_is_resent_from_timewait") {
  Net n;
  auto [ca, cb] = n.establish();
  int dreps = 0;
  n.drop = [&](char, const proto::Packet& p) { return p.mbth.opcode == Opcode::kCmDrep && dreps++ == 0; };
  REQUIRE(n.cmd(n.a, [&](auto& m, auto& o) { return m.disconnect(ca, {}, n.now, o); }).ok());
  n.advance(kT);
  CHECK(n.b.cm.counters().rx_duplicate == 1);
  CHECK(n.a.events.back().type == EventType::kDisconnected);
  CHECK(n.a.cm.counters().disconnect_timeouts == 0);
}

// ---------------------------------------------------------------- destroy

TEST_CASE("destroy__established_tells_the_peer_and_raises_nothing_locally") {
  Net n;
  auto [ca, cb] = n.establish();
  const size_t before = n.a.events.size();
  REQUIRE(n.cmd(n.a, [&](auto& m, auto& o) { return m.destroy(ca, n.now, o); }).ok());
  CHECK(n.b.events.back().type == EventType::kDisconnected);
  n.advance(kTimewait * 2);
  CHECK(n.a.events.size() == before);  // an orphan raises no event
  CHECK(n.a.cm.connection_count() == 0);
  CHECK(n.b.cm.connection_count() == 0);
}

TEST_CASE("destroy__a_listener_app_that_crashed_rejects_its_pending_requests") {
  Net n;
  n.listen();
  n.connect();
  REQUIRE(n.cmd(n.b, [&](auto& m, auto& o) { return m.destroy(n.last_conn(n.b), n.now, o); }).ok());
  CHECK(n.a.events.back().type == EventType::kRejected);
  CHECK(n.a.events.back().status == 28);
  CHECK(n.b.cm.connection_count() == 0);
}

TEST_CASE("destroy__an_initiator_that_gave_up_rejects_the_pending_request") {
  Net n;
  n.listen();
  const ConnId ca = n.connect();
  REQUIRE(n.cmd(n.a, [&](auto& m, auto& o) { return m.destroy(ca, n.now, o); }).ok());
  CHECK(n.b.events.back().type == EventType::kRejected);  // matched by (address, A's id)
  CHECK(n.b.events.back().status == static_cast<int>(proto::RejReason::kTimeout));
  CHECK(n.b.cm.connection_count() == 0);
  CHECK(n.a.cm.connection_count() == 0);
}

// --------------------------------------------------------------------- UD

TEST_CASE("ud__req_rep_gives_the_initiator_the_qp_and_qkey") {
  Net n;
  n.listen(16, PortSpace::kUdp);
  n.connect(proto::kCmQpUd, PortSpace::kUdp);
  ConnParam mine = param(0x444, 0);
  mine.qkey = 0x11111111;
  const ConnId cb = n.last_conn(n.b);
  REQUIRE(n.cmd(n.b, [&](auto& m, auto& o) { return m.accept(cb, mine, n.now, o); }).ok());
  CHECK(n.trace == Trace{"a>b CM_REQ", "b CONNECT_REQUEST", "b>a CM_REP", "a ESTABLISHED"});
  CHECK(n.a.events.back().remote.qpn == 0x444);
  CHECK(n.a.events.back().remote.qkey == 0x11111111);
  CHECK(n.a.cm.connection_count() == 0);  // UD keeps no connection
  n.advance(kTimewait);
  CHECK(n.b.cm.connection_count() == 0);
  CHECK(n.b.events.back().type == EventType::kConnectRequest);  // and raises nothing more
}

TEST_CASE("ud__lost_rep_is_resent_on_the_duplicate_req") {
  Net n;
  n.listen(16, PortSpace::kUdp);
  int reps = 0;
  n.drop = [&](char, const proto::Packet& p) { return p.mbth.opcode == Opcode::kCmRep && reps++ == 0; };
  n.connect(proto::kCmQpUd, PortSpace::kUdp);
  REQUIRE(n.cmd(n.b, [&](auto& m, auto& o) { return m.accept(n.last_conn(n.b), param(0x444, 0), n.now, o); }).ok());
  n.advance(kT);
  CHECK(n.a.events.back().type == EventType::kEstablished);
}

// ------------------------------------------------- forged and malformed input

TEST_CASE("hostile__rep_naming_no_connection_is_dropped_and_changes_nothing") {
  Net n;
  n.listen();
  const ConnId ca = n.connect();
  proto::Packet rep = cm_packet(Opcode::kCmRep, 0x5555, ca ^ 1);
  rep.cm.qp_type = proto::kCmQpRc;
  rep.cm.qpn = 9;
  rep.cm.path_mtu = 3;
  n.inject(n.a, kIpB, rep);
  CHECK(n.a.cm.counters().rx_drop_unknown_conn == 1);
  CHECK(n.a.events.empty());
  // The real REP still connects.
  REQUIRE(n.cmd(n.b, [&](auto& m, auto& o) { return m.accept(n.last_conn(n.b), param(0x203), n.now, o); }).ok());
  CHECK(n.a.events.back().type == EventType::kConnectResponse);
  CHECK(n.a.events.back().remote.qpn == 0x203);
}

TEST_CASE("hostile__right_comm_id_from_another_address_is_dropped") {
  Net n;
  auto [ca, cb] = n.establish();
  const auto info = n.a.cm.info(ca);
  REQUIRE(info);
  // A third host that learnt both IDs still cannot disconnect A from B.
  proto::Packet dreq = cm_packet(Opcode::kCmDreq, cb, ca);
  n.inject(n.a, kIpForger, dreq);
  CHECK(n.a.cm.counters().rx_drop_wrong_peer == 1);
  // Nor can B's address with a wrong peer ID.
  n.inject(n.a, kIpB, cm_packet(Opcode::kCmDreq, cb + 1, ca));
  CHECK(n.a.cm.counters().rx_drop_wrong_peer == 2);
  CHECK(n.a.events.back().type == EventType::kConnectResponse);  // still connected
  CHECK(n.trace.empty());  // nothing was sent in answer
}

TEST_CASE("hostile__message_not_valid_in_the_state_is_dropped") {
  Net n;
  n.listen();
  const ConnId ca = n.connect();
  const ConnId cb = n.last_conn(n.b);
  n.trace.clear();
  n.inject(n.a, kIpB, cm_packet(Opcode::kCmDreq, cb, ca));  // DREQ before any REP
  n.inject(n.b, kIpA, cm_packet(Opcode::kCmRtu, ca, cb));   // RTU before the accept
  n.inject(n.b, kIpA, cm_packet(Opcode::kCmDrep, ca, cb));  // DREP nobody asked for
  CHECK(n.a.cm.counters().rx_drop_bad_state == 1);
  CHECK(n.b.cm.counters().rx_drop_bad_state == 2);
  CHECK(n.trace.empty());
  REQUIRE(n.cmd(n.b, [&](auto& m, auto& o) { return m.accept(cb, param(0x203), n.now, o); }).ok());
  CHECK(n.a.events.back().type == EventType::kConnectResponse);
}

TEST_CASE("hostile__invalid_fields_are_counted_by_reason_and_change_nothing") {
  Net n;
  n.listen();
  proto::Packet req = cm_packet(Opcode::kCmReq, 0x77, 0);
  req.cm.service_id = proto::service_id(PortSpace::kTcp, kPort);
  req.cm.qp_type = proto::kCmQpRc;
  req.cm.qpn = 0;  // no QP
  req.cm.path_mtu = 3;
  n.inject(n.b, kIpA, req);
  req.cm.qpn = 5;
  req.cm.path_mtu = 9;
  n.inject(n.b, kIpA, req);
  n.inject(n.b, kIpA, cm_packet(Opcode::kCmRtu, 0, 5));
  const auto& c = n.b.cm.counters();
  CHECK(c.rx_invalid == 3);
  CHECK(c.rx_invalid_by_reason[static_cast<size_t>(proto::CmCheck::kQpn)] == 1);
  CHECK(c.rx_invalid_by_reason[static_cast<size_t>(proto::CmCheck::kPathMtu)] == 1);
  CHECK(c.rx_invalid_by_reason[static_cast<size_t>(proto::CmCheck::kZeroLocalCommId)] == 1);
  CHECK(n.b.events.empty());
  CHECK(n.b.cm.connection_count() == 0);
  CHECK(n.trace.empty());  // not even a REJ: malformed input gets no answer
}

TEST_CASE("hostile__forged_rej_cannot_end_a_connection_attempt") {
  Net n;
  n.listen();
  const ConnId ca = n.connect();
  proto::Packet rej = cm_packet(Opcode::kCmRej, 0, ca);
  rej.cm.reason = 28;
  n.inject(n.a, kIpForger, rej);
  CHECK(n.a.cm.counters().rx_drop_wrong_peer == 1);
  CHECK(n.a.cm.connection_count() == 1);
  CHECK(n.a.events.empty());
}

TEST_CASE("counters__every_name_is_listed_once") {
  Net n;
  std::vector<std::string> names;
  n.a.cm.for_each_counter([&](const std::string& name, uint64_t) { names.push_back(name); });
  CHECK(std::find(names.begin(), names.end(), "rej_no_listener") != names.end());
  CHECK(std::find(names.begin(), names.end(), "rx_invalid_qpn") != names.end());
  CHECK(std::find(names.begin(), names.end(), "rx_invalid_ok") == names.end());
  std::vector<std::string> sorted = names;
  std::sort(sorted.begin(), sorted.end());
  CHECK(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end());
}

TEST_CASE("config__default_timewait_outlasts_the_peers_resends") {
  Net n;
  auto [ca, cb] = n.establish();
  REQUIRE(n.cmd(n.a, [&](auto& m, auto& o) { return m.disconnect(ca, {}, n.now, o); }).ok());
  n.advance(kTimewait - 1);
  CHECK(n.b.cm.connection_count() == 1);
  n.advance(kTimewait);
  CHECK(n.b.cm.connection_count() == 0);
}

TEST_CASE("timers__a_hundred_connections_each_fire_at_their_own_deadline") {
  Net n;
  n.drop = [](char, const proto::Packet&) { return true; };
  constexpr Time kMs = 1'000'000;
  for (int i = 0; i < 100; ++i) {
    n.now = i * kMs;
    n.connect();
  }
  CHECK(n.a.cm.next_deadline() == kT);  // the first connection's first resend
  const Time fail0 = kT * (cm::Config{}.max_retries + 1);
  auto unreachable = [&] {
    int k = 0;
    for (auto& e : n.a.events) k += e.type == EventType::kUnreachable;
    return k;
  };
  n.advance(fail0 + 50 * kMs);
  CHECK(unreachable() == 51);  // connections 0..50
  n.advance(fail0 + 99 * kMs);
  CHECK(unreachable() == 100);
  CHECK(n.a.cm.connection_count() == 0);
  CHECK(n.a.cm.next_deadline() == cm::kNever);
}

TEST_CASE("state__names") {
  CHECK(std::string(ConnectionManager::to_string(ConnectionManager::State::kTimewait)) == "TIMEWAIT");
  CHECK(std::string(cm::to_string(EventType::kConnectRequest)) == "CONNECT_REQUEST");
}
