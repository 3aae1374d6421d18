#include "firmware-model/ns3/topology.h"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace metaroce::fabric {

using ns3::Ptr;

namespace {
uint32_t fat_tree_k(uint32_t hosts) {
  for (uint32_t k = 2; k <= 64; k += 2) {
    if (k * k * k / 4 == hosts) return k;
  }
  return 0;
}
uint32_t leaf_uplinks(const TopologyConfig& t) {
  const uint32_t hpl = std::min(t.hosts, t.hosts_per_leaf);
  return std::max<uint32_t>(1, static_cast<uint32_t>(std::lround(hpl / t.oversubscription)));
}
uint32_t spine_count(const TopologyConfig& t) {
  return t.spines ? t.spines : std::min<uint32_t>(leaf_uplinks(t), 16);
}
}  // namespace

uint32_t host_links(const TopologyConfig& t, uint32_t a, uint32_t b) {
  if (a == b) return 0;
  if (t.kind == TopologyConfig::Kind::kFatTree) {
    const uint32_t half = fat_tree_k(t.hosts) / 2;
    if (a / half == b / half) return 2;                // same edge switch
    return a / (half * half) == b / (half * half) ? 4  // same pod
                                                   : 6;
  }
  const uint32_t hpl = std::min(t.hosts, t.hosts_per_leaf);
  return a / hpl == b / hpl ? 2 : 4;
}

std::string check(const TopologyConfig& t) {
  std::ostringstream e;
  if (t.hosts < 2) return "need at least 2 hosts";
  if (t.link_bps == 0) return "link speed must be positive";
  if (t.kind == TopologyConfig::Kind::kFatTree) {
    if (!fat_tree_k(t.hosts)) {
      e << "a k-ary fat-tree has k^3/4 hosts (16, 54, 128, 250, 432, 686, 1024, ...), not "
        << t.hosts;
    }
    return e.str();
  }
  const uint32_t hpl = std::min(t.hosts, t.hosts_per_leaf);
  if (hpl == 0 || t.hosts % hpl) {
    e << t.hosts << " hosts do not fill leaves of " << hpl;
  } else if (t.oversubscription < 1.0) {
    e << "oversubscription must be >= 1";
  } else if (leaf_uplinks(t) % spine_count(t)) {
    e << leaf_uplinks(t) << " uplinks per leaf do not divide among " << spine_count(t) << " spines";
  }
  return e.str();
}

Fabric::Fabric(const TopologyConfig& t, const SwitchConfig& s) : cfg_(t), scfg_(s) {
  if (auto err = check(t); !err.empty()) NS_FATAL_ERROR(err);
  for (uint32_t h = 0; h < t.hosts; ++h) host_nodes_.push_back(ns3::CreateObject<ns3::Node>());
  host_devs_.resize(t.hosts);
  if (t.kind == TopologyConfig::Kind::kFatTree) {
    build_fat_tree();
  } else {
    build_leaf_spine();
  }
  compute_routes();
}

Fabric::~Fabric() = default;

Switch* Fabric::add_switch(const std::string& name, int tier) {
  const uint32_t salt = static_cast<uint32_t>(switches_.size()) * 0x9E3779B9u + 1;
  switches_.push_back(
      std::make_unique<Switch>(name, tier, ns3::CreateObject<ns3::Node>(), scfg_, salt));
  return switches_.back().get();
}

void Fabric::connect_host(uint32_t h, Switch* leaf) {
  auto [hd, sd] = make_link(host_nodes_[h], leaf->node(), cfg_.link_bps, cfg_.link_delay_ns);
  host_devs_[h] = hd;
  if (tor_of_host_.size() <= h) {
    tor_of_host_.resize(h + 1);
    host_port_.resize(h + 1);
  }
  tor_of_host_[h] = index_of(leaf);
  host_port_[h] = leaf->add_port(sd, false);
}

int Fabric::index_of(const Switch* s) const {
  for (size_t i = 0; i < switches_.size(); ++i) {
    if (switches_[i].get() == s) return static_cast<int>(i);
  }
  return -1;
}

void Fabric::compute_routes() {
  const size_t n = switches_.size();
  std::vector<std::vector<std::pair<int, int>>> adj(n);  // (port, neighbour) over live links
  for (const Link& l : links_) {
    if (l.a->port(l.port_a).failed() || l.b->port(l.port_b).failed()) continue;
    const int a = index_of(l.a), b = index_of(l.b);
    adj[a].push_back({l.port_a, b});
    adj[b].push_back({l.port_b, a});
  }
  for (auto& s : switches_) s->clear_routes();
  std::vector<std::vector<uint32_t>> hosts_of(n);
  for (uint32_t h = 0; h < tor_of_host_.size(); ++h) {
    Switch* tor = switches_[tor_of_host_[h]].get();
    tor->set_route(h, tor->add_group({host_port_[h]}));
    hosts_of[tor_of_host_[h]].push_back(h);
  }
  for (size_t t = 0; t < n; ++t) {
    if (hosts_of[t].empty()) continue;
    std::vector<int> dist(n, -1);  // BFS from the destination ToR
    std::vector<size_t> q{t};
    dist[t] = 0;
    for (size_t i = 0; i < q.size(); ++i) {
      for (auto [p, nb] : adj[q[i]]) {
        if (dist[nb] < 0) {
          dist[nb] = dist[q[i]] + 1;
          q.push_back(nb);
        }
      }
    }
    for (size_t s = 0; s < n; ++s) {
      if (s == t || dist[s] < 0) continue;  // unreachable: no route, counted drops
      std::vector<int> next;
      for (auto [p, nb] : adj[s]) {
        if (dist[nb] == dist[s] - 1) next.push_back(p);
      }
      std::sort(next.begin(), next.end());
      const int g = switches_[s]->add_group(next);
      for (uint32_t h : hosts_of[t]) switches_[s]->set_route(h, g);
    }
  }
}

Fabric::Link Fabric::connect(Switch* lower, Switch* upper, const std::string& name) {
  auto [ld, ud] = make_link(lower->node(), upper->node(), cfg_.link_bps, cfg_.link_delay_ns);
  Link l{lower, lower->add_port(ld, true), upper, upper->add_port(ud, false), name};
  links_.push_back(l);
  return l;
}

void Fabric::build_leaf_spine() {
  const uint32_t hpl = std::min(cfg_.hosts, cfg_.hosts_per_leaf);
  const uint32_t leaves = cfg_.hosts / hpl, spines = spine_count(cfg_);
  const uint32_t parallel = leaf_uplinks(cfg_) / spines;
  max_hops_ = leaves > 1 ? 3 : 1;
  std::vector<Switch*> leaf(leaves), spine(spines);
  for (uint32_t s = 0; s < spines; ++s) spine[s] = add_switch("spine" + std::to_string(s), 1);
  for (uint32_t l = 0; l < leaves; ++l) {
    leaf[l] = add_switch("leaf" + std::to_string(l), 0);
    for (uint32_t i = 0; i < hpl; ++i) connect_host(l * hpl + i, leaf[l]);
  }
  if (leaves == 1) return;
  for (uint32_t l = 0; l < leaves; ++l) {
    for (uint32_t s = 0; s < spines; ++s) {
      for (uint32_t k = 0; k < parallel; ++k) {
        std::ostringstream n;
        n << "leaf" << l << "-spine" << s << "#" << k;
        connect(leaf[l], spine[s], n.str());
      }
    }
  }
}

void Fabric::build_fat_tree() {
  const uint32_t k = fat_tree_k(cfg_.hosts), half = k / 2;
  max_hops_ = 5;
  std::vector<Switch*> core(half * half);
  for (uint32_t c = 0; c < core.size(); ++c) core[c] = add_switch("core" + std::to_string(c), 2);
  for (uint32_t p = 0; p < k; ++p) {
    std::vector<Switch*> agg(half);
    for (uint32_t a = 0; a < half; ++a) {
      agg[a] = add_switch("pod" + std::to_string(p) + "-agg" + std::to_string(a), 1);
      for (uint32_t j = 0; j < half; ++j) {  // agg a of every pod meets cores a*half..
        Switch* c = core[a * half + j];
        connect(agg[a], c, agg[a]->name() + "-" + c->name());
      }
    }
    for (uint32_t e = 0; e < half; ++e) {
      Switch* edge = add_switch("pod" + std::to_string(p) + "-edge" + std::to_string(e), 0);
      const uint32_t first = (p * half + e) * half;
      for (uint32_t i = 0; i < half; ++i) connect_host(first + i, edge);
      for (uint32_t a = 0; a < half; ++a)
        connect(edge, agg[a], edge->name() + "-" + agg[a]->name());
    }
  }
}

void Fabric::fail_link(size_t i) {
  const Link& l = links_.at(i);
  l.a->port(l.port_a).fail();
  l.b->port(l.port_b).fail();
  ns3::Simulator::Schedule(ns3::NanoSeconds(scfg_.reroute_delay_ns), &Fabric::compute_routes, this);
}

void Fabric::set_link_loss(size_t i, double p, uint64_t seed) {
  const Link& l = links_.at(i);
  l.a->port(l.port_a).set_loss(p, seed);
  l.b->port(l.port_b).set_loss(p, seed ^ 0xABCDEF);
}

}  // namespace metaroce::fabric
