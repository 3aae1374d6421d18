// A switch: routes by destination IP; among parallel links to the same
// destination it picks by the UDP source port (path entropy).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "proto/packet.h"
#include "tests/simnet/link.h"

namespace metaroce::simnet {

class Switch final : public Node {
 public:
  explicit Switch(std::string name) : name_(std::move(name)) {}
  // Frames to `dst` leave through one of `links`, chosen by the UDP source
  // port: links[(src_port ^ salt) % n] (modulo keeps consecutive path
  // entropies on distinct links; a nonzero salt mixes them like an ECMP hash).
  void add_route(const proto::IpAddr& dst, std::vector<Link*> links);
  void set_hash_salt(uint64_t salt) { salt_ = salt; }
  void receive(Frame frame) override;
  uint64_t drops_no_route = 0;

 private:
  struct Route {
    proto::IpAddr dst;
    std::vector<Link*> links;
  };
  std::string name_;
  std::vector<Route> routes_;
  uint64_t salt_ = 0;
};

}  // namespace metaroce::simnet
