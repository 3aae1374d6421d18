// cm_bench [N]: CPU cost of the CM state machine and codec per connection.
// Two managers on one thread run N full cycles (REQ, REP, RTU, DREQ, DREP,
// timewait), every message built and parsed by the real codec, and print
// connections set up and torn down per second. No network, no clock inside
// the managers: time is virtual; only the loop is timed, with
// CLOCK_MONOTONIC, by this binary.
//   bazel run -c opt //firmware-model/cm:cm_bench -- 100000
#include <time.h>

#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "firmware-model/cm/connection_manager.h"

using namespace metaroce;

namespace {

uint32_t draw(void* ctx) { return static_cast<uint32_t>((*static_cast<std::mt19937_64*>(ctx))()); }

const proto::IpAddr kA = proto::IpAddr::v4(0x0A000001);
const proto::IpAddr kB = proto::IpAddr::v4(0x0A000002);

struct Pair {
  std::mt19937_64 ra{1}, rb{2};
  cm::ConnectionManager a{{}, draw, &ra};
  cm::ConnectionManager b{{}, draw, &rb};
  std::vector<uint8_t> bytes;
  uint64_t now = 0;

  // Delivers `out`'s messages to the other side through the codec, until quiet.
  void pump(cm::ConnectionManager& from, cm::Output out, std::vector<cm::Event>* events) {
    cm::ConnectionManager* to = &from == &a ? &b : &a;
    while (!out.messages.empty()) {
      cm::Output next;
      for (const cm::Outgoing& m : out.messages) {
        const proto::Packet p = m.packet();
        bytes.resize(proto::transport_length(p));
        proto::build_transport(p, bytes);
        auto parsed = proto::parse_transport(bytes);
        if (!parsed) std::abort();
        to->on_packet(m.from, m.to, parsed.value(), now, next);
      }
      for (auto& e : next.events) events->push_back(e);
      out = std::move(next);
      to = to == &a ? &b : &a;
    }
  }
};

double seconds() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

}  // namespace

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 100000;
  Pair w;
  cm::ListenId l;
  w.b.listen(proto::PortSpace::kTcp, {proto::IpAddr{}, 7174}, 1024, &l);
  cm::ConnParam p;
  p.qpn = 0x100;
  p.path_mtu = 5;
  std::vector<cm::Event> ev;
  const double t0 = seconds();
  for (int i = 0; i < n; ++i) {
    cm::Output out;
    cm::ConnId ca = 0;
    w.a.connect(proto::PortSpace::kTcp, proto::kCmQpRc, {kA, 40000}, {kB, 7174}, p, w.now, out, &ca);
    ev.clear();
    w.pump(w.a, std::move(out), &ev);  // REQ -> CONNECT_REQUEST
    out = {};
    w.b.accept(ev.at(0).conn, p, w.now, out);
    w.pump(w.b, std::move(out), &ev);  // REP -> CONNECT_RESPONSE
    out = {};
    w.a.establish(ca, w.now, out);
    w.pump(w.a, std::move(out), &ev);  // RTU -> ESTABLISHED
    out = {};
    w.a.disconnect(ca, {}, w.now, out);
    w.pump(w.a, std::move(out), &ev);  // DREQ, DREP
    w.now += 1'000'000'000'000ull;     // past timewait
    cm::Output ta, tb;
    w.a.on_timer(w.now, ta);
    w.b.on_timer(w.now, tb);
  }
  const double dt = seconds() - t0;
  if (w.a.connection_count() != 0 || w.b.connection_count() != 0) {
    std::fprintf(stderr, "cm_bench: connections left over\n");
    return 1;
  }
  std::printf("cm_bench: %d connect+disconnect cycles (7 messages each, through the codec) in %.3f s: "
              "%.0f connections/s on one core\n", n, dt, n / dt);
  return 0;
}
