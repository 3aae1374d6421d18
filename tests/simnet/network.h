// The deterministic, seeded, virtual-time test network (tests/simnet):
// hosts running the engine, switches that route by destination IP and pick
// among parallel links by the UDP source port (so per-packet spraying uses
// every path), and one-way links. Every random choice comes from one Rng
// seeded by the network's seed, so a seed reproduces a run exactly.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "tests/simnet/host.h"
#include "tests/simnet/link.h"
#include "tests/simnet/rng.h"
#include "tests/simnet/scheduler.h"
#include "tests/simnet/switch.h"

namespace metaroce::simnet {

class Network {
 public:
  explicit Network(uint64_t seed) : seed_(seed), rng_(seed) {}
  Scheduler& sched() { return sched_; }
  Rng& rng() { return rng_; }
  uint64_t seed() const { return seed_; }

  Host& add_host(const std::string& name, proto::IpAddr ip, const fw::EngineConfig& cfg = {});
  Switch& add_switch(const std::string& name);
  Link& add_link(const std::string& name, Node& to, const LinkConfig& cfg);
  const std::deque<std::unique_ptr<Link>>& links() const { return links_; }
  Link* link(const std::string& name);

  // Runs until `done()` or until virtual time reaches `limit_ns`.
  bool run_until(Time limit_ns, const std::function<bool()>& done = nullptr) {
    return sched_.run_until(limit_ns, done);
  }
  // Records every link transmission/drop (determinism tests).
  void trace_into(std::vector<std::string>* t);

 private:
  uint64_t seed_;
  Scheduler sched_;
  Rng rng_;
  std::deque<std::unique_ptr<Host>> hosts_;
  std::deque<std::unique_ptr<Switch>> switches_;
  std::deque<std::unique_ptr<Link>> links_;
};

inline proto::IpAddr host_ip(uint32_t i) { return proto::IpAddr::v4(0x0A000001u + i); }

// "N senders -> 1 switch -> 1 receiver": senders[i] and receiver each have an
// uplink into the switch and a downlink from it. `bottleneck` configures the
// switch's link to the receiver (the incast point).
struct Incast {
  std::vector<Host*> senders;
  Host* receiver = nullptr;
  Switch* sw = nullptr;
  Link* bottleneck = nullptr;
};
Incast make_incast(Network& net, uint32_t n, const LinkConfig& edge, const LinkConfig& bottleneck,
                   const fw::EngineConfig& cfg = {});

// "2 hosts over K parallel paths": a -> swA ={K links}=> swB -> b and back.
// core[i] configures parallel link i (same in both directions).
struct Parallel {
  Host* a = nullptr;
  Host* b = nullptr;
  std::vector<Link*> a_to_b, b_to_a;  // the K core links each way
  std::vector<Link*> all;             // every link, edges included
};
Parallel make_parallel(Network& net, const LinkConfig& edge, const std::vector<LinkConfig>& core,
                       const fw::EngineConfig& cfg = {});

}  // namespace metaroce::simnet
