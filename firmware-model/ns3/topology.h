// Fabric topologies built of ns-3 nodes, point-to-point links and Switch:
// a two-tier leaf-spine (with oversubscription and parallel leaf-spine
// links) and a three-tier k-ary fat-tree (Al-Fares et al., SIGCOMM 2008).
// Every switch gets an O(1) route table: destination host -> ECMP group,
// computed from the live links (shortest paths to the host's ToR switch, as
// a converged routing protocol or an SDN controller would install them),
// and recomputed reroute_delay_ns after a link fails.
// Nothing global survives construction except these objects, and every link
// is a PointToPointChannel, so the fabric can be cut into MPI partitions
// along links (docs/evaluation.md, "Scale").
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "firmware-model/ns3/switch.h"

namespace metaroce::fabric {

struct TopologyConfig {
  enum class Kind { kLeafSpine, kFatTree } kind = Kind::kLeafSpine;
  uint32_t hosts = 16;
  uint32_t hosts_per_leaf = 16;   // leaf-spine; fewer hosts = one leaf's worth
  uint32_t spines = 0;            // leaf-spine; 0 = as many as uplinks, at most 16
  double oversubscription = 1.0;  // leaf-spine: host ports / uplinks per leaf
  uint64_t link_bps = 100'000'000'000;
  int64_t link_delay_ns = 1'000;
};

// Names the error when the parameters do not make a topology ("" = fine).
std::string check(const TopologyConfig& t);
// Links on a shortest path between hosts a and b: 2 under one leaf (edge),
// 4 across the spines (within a fat-tree pod), 6 across fat-tree cores.
uint32_t host_links(const TopologyConfig& t, uint32_t a, uint32_t b);

class Fabric {
 public:
  struct Link {  // a switch-to-switch link
    Switch* a;
    int port_a;
    Switch* b;
    int port_b;
    std::string name;  // "leaf2-spine1#0"
  };
  Fabric(const TopologyConfig& t, const SwitchConfig& s);
  ~Fabric();

  uint32_t hosts() const { return static_cast<uint32_t>(host_devs_.size()); }
  ns3::Ptr<ns3::PointToPointNetDevice> host_device(uint32_t h) const { return host_devs_[h]; }
  std::vector<std::unique_ptr<Switch>>& switches() { return switches_; }
  const std::vector<Link>& links() const { return links_; }
  // Switch hops on the longest shortest path between two hosts.
  int max_switch_hops() const { return max_hops_; }
  // The link goes down now, both directions; routes converge later.
  void fail_link(size_t i);
  // Installs ECMP routes over the links that are up.
  void compute_routes();
  void set_link_loss(size_t i, double p, uint64_t seed);
  const TopologyConfig& config() const { return cfg_; }

 private:
  Switch* add_switch(const std::string& name, int tier);
  int index_of(const Switch* s) const;
  void connect_host(uint32_t h, Switch* leaf);
  Link connect(Switch* lower, Switch* upper, const std::string& name);
  void build_leaf_spine();
  void build_fat_tree();

  TopologyConfig cfg_;
  SwitchConfig scfg_;
  std::vector<std::unique_ptr<Switch>> switches_;
  std::vector<ns3::Ptr<ns3::PointToPointNetDevice>> host_devs_;
  std::vector<ns3::Ptr<ns3::Node>> host_nodes_;
  std::vector<Link> links_;
  std::vector<int> tor_of_host_, host_port_;  // host -> ToR switch index, its port there
  int max_hops_ = 0;
};

}  // namespace metaroce::fabric
