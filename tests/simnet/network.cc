#include "tests/simnet/network.h"

#include "tests/simnet/frame_util.h"

namespace metaroce::simnet {

Host& Network::add_host(const std::string& name, proto::IpAddr ip, const fw::EngineConfig& cfg) {
  uint64_t s = seed_ ^ (0xA5A5A5A5ull * (hosts_.size() + 1));
  hosts_.push_back(std::make_unique<Host>(name, sched_, Rng::splitmix(s), ip, cfg));
  return *hosts_.back();
}

Switch& Network::add_switch(const std::string& name) {
  switches_.push_back(std::make_unique<Switch>(name));
  return *switches_.back();
}

Link& Network::add_link(const std::string& name, Node& to, const LinkConfig& cfg) {
  links_.push_back(std::make_unique<Link>(name, sched_, rng_, to, cfg));
  return *links_.back();
}

Link* Network::link(const std::string& name) {
  for (auto& l : links_) {
    if (l->name() == name) return l.get();
  }
  return nullptr;
}

void Network::trace_into(std::vector<std::string>* t) {
  for (auto& l : links_) l->set_trace(t);
}

Incast make_incast(Network& net, uint32_t n, const LinkConfig& edge, const LinkConfig& bottleneck,
                   const fw::EngineConfig& cfg) {
  Incast topo;
  topo.sw = &net.add_switch("sw");
  topo.receiver = &net.add_host("rx", host_ip(0), cfg);
  Link& up = net.add_link("rx>sw", *topo.sw, edge);
  topo.receiver->set_uplink(&up);
  topo.bottleneck = &net.add_link("sw>rx", *topo.receiver, bottleneck);
  topo.sw->add_route(topo.receiver->ip(), {topo.bottleneck});
  for (uint32_t i = 0; i < n; ++i) {
    const std::string name = "tx" + std::to_string(i);
    Host& h = net.add_host(name, host_ip(i + 1), cfg);
    h.set_uplink(&net.add_link(name + ">sw", *topo.sw, edge));
    topo.sw->add_route(h.ip(), {&net.add_link("sw>" + name, h, edge)});
    topo.senders.push_back(&h);
  }
  return topo;
}

Parallel make_parallel(Network& net, const LinkConfig& edge, const std::vector<LinkConfig>& core,
                       const fw::EngineConfig& cfg) {
  Parallel topo;
  Switch& sa = net.add_switch("swA");
  Switch& sb = net.add_switch("swB");
  topo.a = &net.add_host("a", host_ip(0), cfg);
  topo.b = &net.add_host("b", host_ip(1), cfg);
  Link& a_up = net.add_link("a>swA", sa, edge);
  Link& a_down = net.add_link("swA>a", *topo.a, edge);
  Link& b_up = net.add_link("b>swB", sb, edge);
  Link& b_down = net.add_link("swB>b", *topo.b, edge);
  topo.a->set_uplink(&a_up);
  topo.b->set_uplink(&b_up);
  topo.all = {&a_up, &a_down, &b_up, &b_down};
  for (size_t i = 0; i < core.size(); ++i) {
    topo.a_to_b.push_back(&net.add_link("swA>swB#" + std::to_string(i), sb, core[i]));
    topo.b_to_a.push_back(&net.add_link("swB>swA#" + std::to_string(i), sa, core[i]));
    topo.all.push_back(topo.a_to_b.back());
    topo.all.push_back(topo.b_to_a.back());
  }
  sa.add_route(topo.b->ip(), topo.a_to_b);
  sa.add_route(topo.a->ip(), {&a_down});
  sb.add_route(topo.a->ip(), topo.b_to_a);
  sb.add_route(topo.b->ip(), {&b_down});
  return topo;
}

}  // namespace metaroce::simnet
