// Helpers shared by the packet I/O backends.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "firmware-model/daemon/io/packet_io.h"

namespace metaroce::daemon::io::detail {

struct IfInfo {
  int ifindex = 0;
  uint32_t mtu = 0;
  std::array<uint8_t, 6> mac{};
};

// Looks the interface up by name (ifindex, MTU, MAC). False with *why set.
bool get_if_info(const std::string& ifname, IfInfo* out, std::string* why);

// Largest frame to carry: options.max_frame, or MTU + Ethernet + one VLAN tag.
uint32_t frame_limit(const IoOptions& options, const IfInfo& info);

// "what: strerror (errno N)".
std::string errno_message(const char* what, int err);

inline void log(const IoOptions& o, LogLevel level, const std::string& msg) {
  if (o.log) o.log(level, msg);
}

inline void set_why(std::string* why, std::string msg) {
  if (why) *why = std::move(msg);
}

// A kernel UDP socket bound to the port (IPv6 dual-stack, or IPv4), with a
// socket filter that drops every datagram. Holding it stops the kernel stack
// from answering frames that AF_PACKET also sees with ICMP port unreachable.
// Returns the fd, or -errno.
int reserve_udp_port(uint16_t port, const std::string& ifname);

}  // namespace metaroce::daemon::io::detail
