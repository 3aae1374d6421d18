#include "tests/simnet/switch.h"

#include "tests/simnet/frame_util.h"
#include "tests/simnet/rng.h"

namespace metaroce::simnet {

void Switch::add_route(const proto::IpAddr& dst, std::vector<Link*> links) {
  routes_.push_back(Route{dst, std::move(links)});
}

void Switch::receive(Frame frame) {
  auto info = inspect_frame(frame);
  if (!info) {
    ++drops_no_route;
    return;
  }
  for (const Route& r : routes_) {
    if (r.dst == info->dst_ip && !r.links.empty()) {
      uint64_t h = info->src_port;
      if (salt_) {
        uint64_t x = h ^ salt_;
        h = Rng::splitmix(x);
      }
      r.links[h % r.links.size()]->send(std::move(frame));
      return;
    }
  }
  ++drops_no_route;
}

}  // namespace metaroce::simnet
