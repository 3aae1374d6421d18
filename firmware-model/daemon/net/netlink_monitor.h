// Interface monitor over rtnetlink (libnl-route-3): the daemon's view of its
// network interface (ifindex, MAC, MTU, oper state, addresses -> RoCE v2 GID
// table) and next-hop MAC resolution for outgoing frames.
// docs/packet-io.md "Netlink monitor".
//
// Event-loop integration: poll fd() for POLLIN (non-blocking socket) and call
// process(); changes to the watched interface are delivered to the visitor
// synchronously from process(). Single-threaded.
//
// Neighbour resolution: resolve(ip) asks the kernel for the route to ip
// (RTM_GETROUTE: output interface and gateway), then looks the next hop up in
// the neighbour cache. When the entry is missing or not valid it returns
// kPending and makes the kernel resolve it the ordinary way: an empty UDP
// datagram to the discard port (9) of the destination through a kernel
// socket. That works for ARP and ND alike, needs no privilege, and follows
// the kernel's own routing; the datagram itself is harmless (discard, or an
// ICMP port unreachable that nobody reads). The result arrives as an
// RTM_NEWNEIGH notification: on_neighbour() with the MAC, or valid=false
// when resolution failed (NUD_FAILED). Triggers are rate-limited to one per
// destination per 200 ms, so a neighbour that becomes resolvable later (a
// peer still in DAD, a host that comes up) is asked for again while frames
// keep wanting it, and picked up once the kernel resolves it. The table of
// last triggers is bounded (kMaxPendingTriggers destinations; clients choose
// destinations, so it must be): a full table first forgets entries whose
// 200 ms passed, then the oldest. Every outcome is counted
// (NeighbourCounters).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "proto/packet.h"

namespace metaroce::daemon::net {

struct LinkState {
  int ifindex = 0;
  std::string name;
  proto::MacAddr mac{};
  uint32_t mtu = 0;
  bool admin_up = false;  // IFF_UP
  bool oper_up = false;   // IF_OPER_UP (or IFF_RUNNING|IFF_LOWER_UP)
  bool operator==(const LinkState&) const = default;
};

struct IfAddress {
  proto::IpAddr ip;     // IPv4 stored IPv4-mapped, as a RoCE v2 GID
  uint8_t prefix_len = 0;
  bool operator==(const IfAddress&) const = default;
};

class NetlinkMonitorVisitor {
 public:
  virtual ~NetlinkMonitorVisitor() = default;
  // Link attributes changed (state, MTU, MAC...). old is the previous state.
  virtual void on_link(const LinkState& now, const LinkState& old) {}
  virtual void on_address(const IfAddress& a, bool added) {}
  // A next hop the daemon asked about (or any on the interface) changed.
  virtual void on_neighbour(const proto::IpAddr& ip, const proto::MacAddr& mac, bool valid) {}
  // The interface went away (deleted or moved to another namespace).
  virtual void on_link_removed() {}
};

// Neighbour resolution counters, one per outcome; the daemon dumps them with
// its own (SIGUSR1).
#define MROCE_NEIGH_COUNTERS(X)                                                    \
  X(neigh_resolve_triggers)       /* discovery asked of the kernel (datagram) */ \
  X(neigh_resolve_rate_limited)   /* asked again within 200 ms: not sent */      \
  X(neigh_resolve_send_errors)    /* the datagram could not be sent */           \
  X(neigh_resolve_evictions)      /* trigger table full: oldest entry dropped */ \
  X(neigh_resolve_unreachable)    /* no route through this interface */

struct NeighbourCounters {
#define MROCE_NEIGH_FIELD(n) uint64_t n = 0;
  MROCE_NEIGH_COUNTERS(MROCE_NEIGH_FIELD)
#undef MROCE_NEIGH_FIELD
};
// " name=value" for every non-zero counter.
std::string format_counters(const NeighbourCounters& c);

inline constexpr size_t kMaxPendingTriggers = 256;

enum class Resolve {
  kResolved,     // *mac is the next hop's MAC
  kPending,      // resolution triggered; on_neighbour() follows
  kUnreachable,  // no route, or the route leaves through another interface
};

class NetlinkMonitor {
 public:
  // Opens rtnetlink, loads the link, address and neighbour caches and finds
  // ifname. nullptr with *why set on failure. visitor may be nullptr.
  static std::unique_ptr<NetlinkMonitor> open(const std::string& ifname, NetlinkMonitorVisitor* visitor,
                                              std::string* why);
  virtual ~NetlinkMonitor() = default;

  virtual int fd() const = 0;
  // Reads pending notifications (non-blocking), updates state, calls the
  // visitor. Returns 0 or -errno.
  virtual int process() = 0;

  virtual LinkState link() const = 0;
  // Addresses on the interface, IPv4 first, in kernel order.
  virtual std::vector<IfAddress> addresses() const = 0;
  // RoCE v2 GID table: [0] fe80::/64 from the MAC (EUI-64, as rxe), then the
  // IPv4-mapped addresses, then IPv6 addresses other than link-local.
  virtual std::vector<proto::IpAddr> gid_table() const = 0;

  // Next-hop MAC for dst (see the header comment).
  virtual Resolve resolve(const proto::IpAddr& dst, proto::MacAddr* mac) = 0;
  virtual const NeighbourCounters& neighbour_counters() const = 0;
  // Destinations in the trigger table (at most kMaxPendingTriggers).
  virtual size_t pending_triggers() const = 0;
};

// fe80::/64 + EUI-64 of mac.
proto::IpAddr link_local_gid(const proto::MacAddr& mac);
// The inverse: the MAC inside an EUI-64 link-local address (fe80::/64 with
// ff:fe in the middle), false for any other address. resolve() answers such
// destinations from the address itself, as the kernel's RoCE stack does
// (rdma_get_ll_mac): no neighbour discovery, so GID 0 works from the first
// packet, even while the local link-local address is still tentative (DAD).
bool mac_from_link_local(const proto::IpAddr& ip, proto::MacAddr* mac);

}  // namespace metaroce::daemon::net
