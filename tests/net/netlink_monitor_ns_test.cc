// NetlinkMonitor against a real interface. Run inside a namespace prepared
// by netlink_test.sh (interface $NL_IF with 10.78.0.1/24, peer 10.78.0.2 at
// $NL_PEER_MAC); each case changes the interface with `ip` and waits for the
// callbacks the daemon relies on.
#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <poll.h>

#include <chrono>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "firmware-model/daemon/net/netlink_monitor.h"

using namespace metaroce;
using daemon::net::IfAddress;
using daemon::net::LinkState;
using daemon::net::NetlinkMonitor;
using daemon::net::Resolve;

namespace {

std::string env(const char* k) {
  const char* v = getenv(k);
  return v ? v : "";
}

proto::IpAddr ip(const char* s) {
  proto::IpAddr a;
  in_addr v4;
  if (inet_pton(AF_INET, s, &v4) == 1) return proto::IpAddr::v4(ntohl(v4.s_addr));
  inet_pton(AF_INET6, s, a.bytes.data());
  return a;
}

proto::MacAddr mac(const std::string& s) {
  unsigned m[6] = {};
  sscanf(s.c_str(), "%x:%x:%x:%x:%x:%x", &m[0], &m[1], &m[2], &m[3], &m[4], &m[5]);
  proto::MacAddr r;
  for (int i = 0; i < 6; ++i) r[i] = static_cast<uint8_t>(m[i]);
  return r;
}

void sh(const std::string& cmd) { REQUIRE_MESSAGE(system(cmd.c_str()) == 0, cmd); }

// Records callbacks as short strings.
struct Recorder : daemon::net::NetlinkMonitorVisitor {
  std::vector<LinkState> links;
  std::vector<std::pair<IfAddress, bool>> addrs;
  std::vector<std::tuple<proto::IpAddr, proto::MacAddr, bool>> neighs;
  void on_link(const LinkState& now, const LinkState&) override { links.push_back(now); }
  void on_address(const IfAddress& a, bool added) override { addrs.push_back({a, added}); }
  void on_neighbour(const proto::IpAddr& i, const proto::MacAddr& m, bool valid) override {
    neighs.push_back({i, m, valid});
  }
};

// Polls the monitor's fd until pred() holds or 30 s pass (a generous deadline).
bool wait_for(NetlinkMonitor& m, const std::function<bool()>& pred) {
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!pred()) {
    if (std::chrono::steady_clock::now() > end) return false;
    pollfd p{m.fd(), POLLIN, 0};
    if (poll(&p, 1, 100) > 0) REQUIRE(m.process() == 0);
  }
  return true;
}

struct Fixture {
  Recorder rec;
  std::unique_ptr<NetlinkMonitor> mon;
  std::string ifname = env("NL_IF");
  Fixture() {
    REQUIRE_MESSAGE(!ifname.empty(), "run through tests/net/netlink_test.sh (NL_IF unset)");
    std::string why;
    mon = NetlinkMonitor::open(ifname, &rec, &why);
    REQUIRE_MESSAGE(mon, why);
  }
};

bool has_addr(const std::vector<IfAddress>& v, const proto::IpAddr& a) {
  for (auto& x : v)
    if (x.ip == a) return true;
  return false;
}

}  // namespace

TEST_CASE("initial state: link, addresses and GID table") {
  Fixture f;
  LinkState l = f.mon->link();
  CHECK(l.ifindex > 0);
  CHECK(l.name == f.ifname);
  CHECK(l.mtu == 1500);
  CHECK(l.admin_up);
  CHECK(l.oper_up);
  CHECK(l.mac == mac(env("NL_MAC")));
  CHECK(has_addr(f.mon->addresses(), ip("10.78.0.1")));
  auto gids = f.mon->gid_table();
  REQUIRE(gids.size() >= 2);
  CHECK(gids[0] == daemon::net::link_local_gid(l.mac));
  CHECK(gids[1] == ip("10.78.0.1"));
  CHECK(gids[0].bytes[0] == 0xfe);
}

TEST_CASE("address add and remove produce callbacks") {
  Fixture f;
  sh("ip addr add 10.78.1.5/24 dev " + f.ifname);
  CHECK(wait_for(*f.mon, [&] { return !f.rec.addrs.empty(); }));
  REQUIRE(!f.rec.addrs.empty());
  CHECK(f.rec.addrs.back().first.ip == ip("10.78.1.5"));
  CHECK(f.rec.addrs.back().first.prefix_len == 24);
  CHECK(f.rec.addrs.back().second);
  CHECK(has_addr(f.mon->addresses(), ip("10.78.1.5")));
  sh("ip addr del 10.78.1.5/24 dev " + f.ifname);
  CHECK(wait_for(*f.mon, [&] { return !f.rec.addrs.back().second; }));
  CHECK(f.rec.addrs.back().first.ip == ip("10.78.1.5"));
  CHECK_FALSE(has_addr(f.mon->addresses(), ip("10.78.1.5")));
}

TEST_CASE("IPv6 address add: callback and GID") {
  Fixture f;
  sh("ip addr add fd78::5/64 dev " + f.ifname + " nodad");
  CHECK(wait_for(*f.mon, [&] {
    for (auto& [a, added] : f.rec.addrs)
      if (added && a.ip == ip("fd78::5")) return true;
    return false;
  }));
  auto g = f.mon->gid_table();
  CHECK(std::find(g.begin(), g.end(), ip("fd78::5")) != g.end());
  sh("ip addr del fd78::5/64 dev " + f.ifname);
  CHECK(wait_for(*f.mon, [&] { return !f.rec.addrs.back().second; }));
}

TEST_CASE("link down and up produce callbacks") {
  Fixture f;
  sh("ip link set " + f.ifname + " down");
  CHECK(wait_for(*f.mon, [&] { return !f.rec.links.empty() && !f.rec.links.back().admin_up; }));
  CHECK_FALSE(f.mon->link().oper_up);
  sh("ip link set " + f.ifname + " up");
  CHECK(wait_for(*f.mon, [&] { return f.mon->link().admin_up && f.mon->link().oper_up; }));
  CHECK(f.rec.links.back().oper_up);
}

TEST_CASE("MTU change produces a callback") {
  Fixture f;
  sh("ip link set " + f.ifname + " mtu 4200");
  CHECK(wait_for(*f.mon, [&] { return !f.rec.links.empty() && f.rec.links.back().mtu == 4200; }));
  sh("ip link set " + f.ifname + " mtu 1500");
  CHECK(wait_for(*f.mon, [&] { return f.mon->link().mtu == 1500; }));
}

TEST_CASE("neighbour resolution: pending, then callback, then resolved") {
  Fixture f;
  proto::MacAddr m{};
  proto::IpAddr peer = ip(env("NL_PEER_IP").c_str());
  // Fresh namespace, nothing sent to the peer yet: no entry, so resolution
  // is triggered.
  Resolve first = f.mon->resolve(peer, &m);
  CHECK(first == Resolve::kPending);
  CHECK(wait_for(*f.mon, [&] {
    for (auto& [i, mm, valid] : f.rec.neighs)
      if (i == peer && valid) return true;
    return false;
  }));
  CHECK(f.mon->resolve(peer, &m) == Resolve::kResolved);
  CHECK(m == mac(env("NL_PEER_MAC")));
}

TEST_CASE("neighbour resolution: no route is unreachable") {
  Fixture f;
  proto::MacAddr m{};
  CHECK(f.mon->resolve(ip("192.0.2.77"), &m) == Resolve::kUnreachable);
  // Repeated queries stay in step with their replies.
  CHECK(f.mon->resolve(ip("192.0.2.77"), &m) == Resolve::kUnreachable);
  CHECK(f.mon->resolve(ip("10.78.0.1"), &m) == Resolve::kUnreachable);  // our own address: local route via lo
}

// GID 0 (the EUI-64 link-local GID) resolves from the GID itself, with no
// neighbour entry and no discovery, as kernel RoCE does: a QP using it works
// from its first packet, also while DAD keeps the address tentative.
TEST_CASE("neighbour resolution: an EUI-64 link-local destination resolves from its address") {
  Fixture f;
  proto::MacAddr peer_mac = mac(env("NL_PEER_MAC")), m{};
  proto::IpAddr gid = daemon::net::link_local_gid(peer_mac);
  CHECK(f.mon->resolve(gid, &m) == Resolve::kResolved);
  CHECK(m == peer_mac);
  // Not EUI-64 (no ff:fe) or not fe80::/64: the ordinary path.
  CHECK_FALSE(daemon::net::mac_from_link_local(ip("fe80::1"), &m));
  CHECK_FALSE(daemon::net::mac_from_link_local(ip("fe80:1::200:ff:fe00:1"), &m));
  CHECK_FALSE(daemon::net::mac_from_link_local(ip("2001:db8::200:ff:fe00:1"), &m));
  CHECK_FALSE(daemon::net::mac_from_link_local(ip("10.78.0.2"), &m));
}

// A destination on the link that never answers (no host has 10.78.0.99):
// each resolve() while it is unresolved asks the kernel again at most every
// 200 ms, and says how often it asked and how often it held back.
TEST_CASE("neighbour resolution: an unresolved neighbour is asked for again, rate-limited and counted") {
  Fixture f;
  proto::MacAddr m{};
  proto::IpAddr silent = ip("10.78.0.99");
  CHECK(f.mon->resolve(silent, &m) == Resolve::kPending);
  CHECK(f.mon->neighbour_counters().neigh_resolve_triggers == 1);
  // Calls within 200 ms of the last trigger are held back (polled: no
  // assumption about how fast two calls follow each other).
  CHECK(wait_for(*f.mon, [&] {
    f.mon->resolve(silent, &m);
    return f.mon->neighbour_counters().neigh_resolve_rate_limited >= 1;
  }));
  // Later calls ask again: a neighbour that becomes resolvable is picked up.
  CHECK(wait_for(*f.mon, [&] {
    f.mon->resolve(silent, &m);
    return f.mon->neighbour_counters().neigh_resolve_triggers >= 2;
  }));
  CHECK(f.mon->pending_triggers() == 1);
  CHECK(f.mon->resolve(ip("192.0.2.77"), &m) == Resolve::kUnreachable);
  CHECK(f.mon->neighbour_counters().neigh_resolve_unreachable == 1);
  CHECK(daemon::net::format_counters(f.mon->neighbour_counters()).find(" neigh_resolve_triggers=") !=
        std::string::npos);
}

// Clients choose destinations: however many they name, the trigger table
// stays bounded, and what it forgets is counted.
TEST_CASE("neighbour resolution: the trigger table is bounded") {
  Fixture f;
  proto::MacAddr m{};
  const size_t n = daemon::net::kMaxPendingTriggers + 40;
  for (size_t i = 0; i < n; ++i) {
    proto::IpAddr dst = ip("fe80::1:0:0");  // on the link, not EUI-64: asked of the kernel
    dst.bytes[14] = static_cast<uint8_t>(i >> 8);
    dst.bytes[15] = static_cast<uint8_t>(i);
    REQUIRE(f.mon->resolve(dst, &m) == Resolve::kPending);
    REQUIRE(f.mon->pending_triggers() <= daemon::net::kMaxPendingTriggers);
  }
  const auto& c = f.mon->neighbour_counters();
  MESSAGE("triggers " << c.neigh_resolve_triggers << " send errors " << c.neigh_resolve_send_errors
                      << " evictions " << c.neigh_resolve_evictions);
  // A new destination is never held back by the bound: each was asked for
  // (or, while our own link-local address is tentative, failed to be: counted).
  CHECK(c.neigh_resolve_triggers + c.neigh_resolve_send_errors == n);
  CHECK(f.mon->pending_triggers() <= daemon::net::kMaxPendingTriggers);
}
