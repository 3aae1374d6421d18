#include "tools/conformance/suite.h"

#include <unistd.h>

#include <cstdio>

namespace metaroce::conform {

const char* to_string(Level l) { return l == Level::kMust ? "MUST" : "SHOULD"; }
const char* to_string(Verdict v) {
  switch (v) {
    case Verdict::kPass: return "pass";
    case Verdict::kFail: return "fail";
    case Verdict::kSkip: return "skip";
  }
  return "?";
}

std::vector<Case>& registry() {
  static std::vector<Case> cases;
  return cases;
}

std::vector<PendingSection>& pending_sections() {
  static std::vector<PendingSection> v;
  return v;
}

std::vector<Unobservable>& unobservable() {
  static std::vector<Unobservable> v;
  return v;
}

namespace {

// Peer QPNs: fresh for every connection of the run, so a late frame for an
// earlier case never matches a later one.
uint32_t next_peer_qpn() {
  static uint32_t n = 0x100000 + static_cast<uint32_t>(getpid() % 2048) * 256;
  return (n++) & 0xFFFFFF;
}

std::string describe(const proto::Frame& f) {
  char extra[64];
  std::snprintf(extra, sizeof extra, " [ecn=%u sport=0x%04x]", f.headers.ecn, f.headers.src_port);
  return proto::to_string(f.packet) + extra;
}

}  // namespace

void Ctx::note(const std::string& line) {
  char stamp[24];
  std::snprintf(stamp, sizeof stamp, "%9.3f ms  ", (now_s() - t0_) * 1e3);
  out_.trace.push_back(stamp + line);
}

Conn& Ctx::connect(const QpOptions& opts) {
  auto c = std::make_unique<Conn>();
  QpOptions o = opts;
  o.peer_qpn = next_peer_qpn();
  std::string err;
  c->qp = dut_.connect(s_.peer_ip, s_.mtu, o, &err);
  if (!c->qp && o.type != IBV_QPT_RC)  // a DUT without this service (the device model)
    skip(std::string("the DUT has no ") + (o.type == IBV_QPT_UD ? "UD" : "UC") + " QPs (" + err + ")");
  if (!c->qp) fail("cannot set up a QP on the DUT: " + err);
  c->peer_qpn = o.peer_qpn;
  c->tx_psn = o.rq_psn;
  c->dut_psn = o.sq_psn;
  note("setup: DUT QP " + std::to_string(c->dut_qpn()) + " <-> peer QP " + std::to_string(c->peer_qpn));
  conns_.push_back(std::move(c));
  return *conns_.back();
}

proto::FrameHeaders Ctx::headers() const {
  proto::FrameHeaders h;
  h.dst_mac = s_.dut_mac;
  h.src_mac = s_.peer_mac;
  h.src_ip = s_.peer_ip;
  h.dst_ip = s_.dut_ip;
  h.src_port = 0xC000 | 0x123;
  return h;
}

proto::Packet Ctx::request(Conn& c, proto::Opcode op) {
  proto::Packet p;
  p.mbth.opcode = op;
  p.mbth.dest_qpn = c.dut_qpn();
  p.mbth.psn = c.tx_psn++;
  p.mbth.timestamp = ++ts_;
  p.mbth.flags = proto::kFlagAckReq | proto::kFlagLast;
  return p;
}

std::vector<uint8_t> Ctx::frame(const proto::Packet& p, const proto::FrameHeaders* h) {
  std::vector<uint8_t> f(16384);
  f.resize(proto::build_frame(h ? *h : headers(), p, f));
  if (f.empty()) fail("internal: the codec cannot build " + proto::to_string(p));
  return f;
}

void Ctx::send(const std::vector<uint8_t>& f, const std::string& what) {
  auto parsed = proto::parse_frame(f);
  std::string line = parsed ? describe(parsed.value())
                            : std::to_string(f.size()) + "-byte frame (" + parsed.error().message() + ")";
  note("tx " + line + (what.empty() ? "" : "  <- " + what));
  std::string err;
  if (!link_.send(f, &err)) fail("cannot send on the link: " + err);
}

void Ctx::pull(double deadline) {
  auto bytes = link_.recv(deadline);
  if (!bytes) return;
  auto rx = std::make_unique<Rx>();
  rx->seq = ++rx_seq_;
  rx->bytes = std::move(*bytes);
  auto parsed = proto::parse_frame(rx->bytes);
  if (!parsed) {
    auto code = parsed.error().code;
    bool ours = code != proto::ParseErrorCode::kNotIp && code != proto::ParseErrorCode::kNotUdp &&
                code != proto::ParseErrorCode::kWrongPort;
    if (ours) note("rx unparsable frame from the DUT side: " + parsed.error().message());
    return;
  }
  rx->frame = parsed.value();
  if (!(rx->frame.headers.src_ip == s_.dut_ip)) return;
  queue_.push_back(std::move(rx));
}

const Rx* Ctx::await(Conn& c, const std::function<bool(const Rx&)>& pred, double seconds) {
  double deadline = now_s() + seconds;
  size_t scanned = 0;
  for (;;) {
    for (; scanned < queue_.size(); ++scanned) {
      Rx& r = *queue_[scanned];
      if (r.p().mbth.dest_qpn != c.peer_qpn || !pred(r)) continue;
      std::unique_ptr<Rx> mine = std::move(queue_[scanned]);
      queue_.erase(queue_.begin() + static_cast<long>(scanned));
      note("rx " + describe(mine->frame));
      consumed_.push_back(std::move(mine));
      return consumed_.back().get();
    }
    if (now_s() >= deadline) return nullptr;
    pull(deadline);
  }
}

const Rx& Ctx::expect(Conn& c, const std::string& expected, const std::function<bool(const Rx&)>& pred,
                      double seconds) {
  const Rx* r = await(c, pred, seconds);
  if (!r) fail("no matching frame within " + std::to_string(static_cast<int>(seconds)) + " s", expected);
  return *r;
}

const Rx& Ctx::expect_ack(Conn& c, uint32_t ts, const std::string& expected) {
  return expect(c, expected, [ts](const Rx& r) {
    return r.p().mbth.opcode == proto::Opcode::kAck && r.p().ack.echo_ts == ts;
  });
}

const Rx& Ctx::marker(Conn& c) {
  proto::Packet p = request(c, proto::Opcode::kWrite);
  p.reth = {va(0), rkey(), 0};
  send(frame(p), "marker: a zero-length WRITE asking for an ACK");
  return expect_ack(c, p.mbth.timestamp, "ACK echoing the marker's timestamp " +
                                             std::to_string(p.mbth.timestamp));
}

std::vector<const Rx*> Ctx::pending(Conn& c) {
  std::vector<const Rx*> v;
  for (auto& r : queue_)
    if (r->p().mbth.dest_qpn == c.peer_qpn) v.push_back(r.get());
  return v;
}

void Ctx::fail(const std::string& why, const std::string& expected, const Rx* got) {
  out_.verdict = Verdict::kFail;
  out_.reason = why;
  out_.expected = expected;
  if (got) {
    out_.differ.push_back(describe(got->frame));
  } else {  // what came instead: the case's frames not consumed (at most 20)
    for (auto& r : queue_) {
      bool mine = false;
      for (auto& c : conns_) mine = mine || r->p().mbth.dest_qpn == c->peer_qpn;
      if (mine && out_.differ.size() < 20) out_.differ.push_back(describe(r->frame));
    }
  }
  throw CaseEnd{};
}

void Ctx::skip(const std::string& why) {
  out_.verdict = Verdict::kSkip;
  out_.reason = why;
  throw CaseEnd{};
}

}  // namespace metaroce::conform
