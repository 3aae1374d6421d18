#include "firmware-model/ns3/topology.h"

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
  leaf->set_route(h, leaf->add_group({leaf->add_port(sd, false)}));
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
  // spine_ports[s][l]: the ports of spine s towards leaf l
  std::vector<std::vector<std::vector<int>>> spine_ports(spines,
                                                         std::vector<std::vector<int>>(leaves));
  for (uint32_t l = 0; l < leaves; ++l) {
    std::vector<int> up;
    for (uint32_t s = 0; s < spines; ++s) {
      for (uint32_t k = 0; k < parallel; ++k) {
        std::ostringstream n;
        n << "leaf" << l << "-spine" << s << "#" << k;
        Link link = connect(leaf[l], spine[s], n.str());
        up.push_back(link.port_a);
        spine_ports[s][l].push_back(link.port_b);
      }
    }
    const int g = leaf[l]->add_group(up);
    for (uint32_t h = 0; h < cfg_.hosts; ++h) {
      if (h / hpl != l) leaf[l]->set_route(h, g);
    }
  }
  for (uint32_t s = 0; s < spines; ++s) {
    for (uint32_t l = 0; l < leaves; ++l) {
      const int g = spine[s]->add_group(spine_ports[s][l]);
      for (uint32_t i = 0; i < hpl; ++i) spine[s]->set_route(l * hpl + i, g);
    }
  }
}

void Fabric::build_fat_tree() {
  const uint32_t k = fat_tree_k(cfg_.hosts), half = k / 2;
  max_hops_ = 5;
  std::vector<Switch*> core(half * half);
  for (uint32_t c = 0; c < core.size(); ++c) core[c] = add_switch("core" + std::to_string(c), 2);
  for (uint32_t p = 0; p < k; ++p) {
    std::vector<Switch*> agg(half), edge(half);
    std::vector<std::vector<int>> agg_to_edge(half, std::vector<int>(half));
    for (uint32_t a = 0; a < half; ++a) {
      agg[a] = add_switch("pod" + std::to_string(p) + "-agg" + std::to_string(a), 1);
    }
    for (uint32_t e = 0; e < half; ++e) {
      edge[e] = add_switch("pod" + std::to_string(p) + "-edge" + std::to_string(e), 0);
      const uint32_t first = (p * half + e) * half;
      for (uint32_t i = 0; i < half; ++i) connect_host(first + i, edge[e]);
      std::vector<int> up;
      for (uint32_t a = 0; a < half; ++a) {
        Link l = connect(edge[e], agg[a], edge[e]->name() + "-" + agg[a]->name());
        up.push_back(l.port_a);
        agg_to_edge[a][e] = l.port_b;
      }
      const int g = edge[e]->add_group(up);
      for (uint32_t h = 0; h < cfg_.hosts; ++h) {
        if (h / half != p * half + e) edge[e]->set_route(h, g);
      }
    }
    for (uint32_t a = 0; a < half; ++a) {
      std::vector<int> up;
      for (uint32_t j = 0; j < half; ++j) {
        Switch* c = core[a * half + j];
        Link l = connect(agg[a], c, agg[a]->name() + "-" + c->name());
        up.push_back(l.port_a);
        const int down = c->add_group({l.port_b});
        for (uint32_t i = 0; i < half * half; ++i) c->set_route(p * half * half + i, down);
      }
      const int gup = agg[a]->add_group(up);
      std::vector<int> down(half);
      for (uint32_t e = 0; e < half; ++e) down[e] = agg[a]->add_group({agg_to_edge[a][e]});
      for (uint32_t h = 0; h < cfg_.hosts; ++h) {
        const bool in_pod = h / (half * half) == p;
        agg[a]->set_route(h, in_pod ? down[(h / half) % half] : gup);
      }
    }
  }
}

void Fabric::fail_link(size_t i) {
  const Link& l = links_.at(i);
  l.a->link_failed(l.port_a);
  l.b->link_failed(l.port_b);
}

void Fabric::set_link_loss(size_t i, double p, uint64_t seed) {
  const Link& l = links_.at(i);
  l.a->port(l.port_a).set_loss(p, seed);
  l.b->port(l.port_b).set_loss(p, seed ^ 0xABCDEF);
}

}  // namespace metaroce::fabric
