// The tester's end of the DUT's link: an AF_PACKET socket on the peer
// interface (a veth end in another network namespace, or a real port).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "proto/packet.h"

namespace metaroce::conform {

class Link {
 public:
  // Opens the socket on `ifname`, inside network namespace `netns` (a name
  // under /run/netns or a path; empty: the current one). The process
  // switches into it only to create the socket (and read the interface's
  // addresses and neighbours) and switches back. nullopt + *error on failure.
  static std::optional<Link> open(const std::string& ifname, const std::string& netns,
                                  std::string* error);
  Link(Link&& o) noexcept;
  Link& operator=(Link&&) = delete;
  ~Link();

  bool send(std::span<const uint8_t> frame, std::string* error);
  // The next frame received (not one this socket sent) before the
  // CLOCK_MONOTONIC deadline (seconds), or nullopt.
  std::optional<std::vector<uint8_t>> recv(double deadline);

  proto::MacAddr mac{};                    // the peer interface's
  std::optional<proto::IpAddr> ipv4, ipv6;  // its addresses (IPv6: global scope)
  // Neighbour MAC for an IPv4 address as the peer namespace knows it
  // (ARP table), read at open.
  std::vector<std::pair<proto::IpAddr, proto::MacAddr>> neighbours;

 private:
  Link() = default;
  int fd_ = -1;
  int ifindex_ = 0;
};

double now_s();  // CLOCK_MONOTONIC

}  // namespace metaroce::conform
