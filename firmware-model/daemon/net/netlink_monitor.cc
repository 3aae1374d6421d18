#include "firmware-model/daemon/net/netlink_monitor.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/if.h>
#include <linux/neighbour.h>
#include <linux/rtnetlink.h>
#include <netinet/in.h>
#include <netlink/cache.h>
#include <netlink/netlink.h>
#include <netlink/route/addr.h>
#include <netlink/route/link.h>
#include <netlink/route/neighbour.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>

namespace metaroce::daemon::net {
namespace {

constexpr int kNudValid = NUD_PERMANENT | NUD_NOARP | NUD_REACHABLE | NUD_PROBE | NUD_STALE | NUD_DELAY;
constexpr uint8_t kIfOperUp = 6;  // IF_OPER_UP (RFC 2863)

proto::IpAddr from_nl(const nl_addr* a) {
  proto::IpAddr ip;
  const auto* b = static_cast<const uint8_t*>(nl_addr_get_binary_addr(a));
  if (nl_addr_get_family(a) == AF_INET && nl_addr_get_len(a) == 4) {
    ip = proto::IpAddr::v4(static_cast<uint32_t>(b[0]) << 24 | b[1] << 16 | b[2] << 8 | b[3]);
  } else if (nl_addr_get_len(a) == 16) {
    std::memcpy(ip.bytes.data(), b, 16);
  }
  return ip;
}

// A libnl address for ip (caller puts it).
nl_addr* to_nl(const proto::IpAddr& ip) {
  if (ip.is_v4()) return nl_addr_build(AF_INET, ip.bytes.data() + 12, 4);
  return nl_addr_build(AF_INET6, ip.bytes.data(), 16);
}

bool is_link_local(const proto::IpAddr& ip) { return !ip.is_v4() && ip.bytes[0] == 0xfe && (ip.bytes[1] & 0xc0) == 0x80; }

class Monitor final : public NetlinkMonitor {
 public:
  ~Monitor() override {
    if (mngr_) nl_cache_mngr_free(mngr_);  // frees the caches it manages
    if (sync_) nl_socket_free(sync_);
    if (udp4_ >= 0) close(udp4_);
    if (udp6_ >= 0) close(udp6_);
  }

  bool open(const std::string& ifname, NetlinkMonitorVisitor* v, std::string* why) {
    visitor_ = v;
    int err = nl_cache_mngr_alloc(nullptr, NETLINK_ROUTE, 0, &mngr_);
    if (err < 0) return fail(why, "nl_cache_mngr_alloc", err);
    if ((err = nl_cache_mngr_add(mngr_, "route/link", &Monitor::on_change, this, &links_)) < 0)
      return fail(why, "link cache", err);
    if ((err = nl_cache_mngr_add(mngr_, "route/addr", &Monitor::on_change, this, &addrs_)) < 0)
      return fail(why, "address cache", err);
    if ((err = nl_cache_mngr_add(mngr_, "route/neigh", &Monitor::on_change, this, &neighs_)) < 0)
      return fail(why, "neighbour cache", err);
    int fd = nl_cache_mngr_get_fd(mngr_);
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    ifindex_ = rtnl_link_name2i(links_, ifname.c_str());
    if (ifindex_ <= 0) {
      if (why) *why = "no interface '" + ifname + "' in this network namespace";
      return false;
    }
    sync_ = nl_socket_alloc();
    if (!sync_ || (err = nl_connect(sync_, NETLINK_ROUTE)) < 0) return fail(why, "rtnetlink socket", err ? err : -NLE_NOMEM);
    // RTM_GETROUTE answers with the route itself; an extra ACK would be
    // left queued and read as the next query's reply.
    nl_socket_disable_auto_ack(sync_);
    udp4_ = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    udp6_ = socket(AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    link_ = read_link();
    return true;
  }

  int fd() const override { return nl_cache_mngr_get_fd(mngr_); }

  int process() override {
    int err = nl_cache_mngr_data_ready(mngr_);
    return err < 0 ? -EIO : 0;
  }

  LinkState link() const override { return link_; }

  std::vector<IfAddress> addresses() const override {
    std::vector<IfAddress> v4, v6;
    for (nl_object* o = nl_cache_get_first(addrs_); o; o = nl_cache_get_next(o)) {
      auto* a = reinterpret_cast<rtnl_addr*>(o);
      if (rtnl_addr_get_ifindex(a) != ifindex_ || !rtnl_addr_get_local(a)) continue;
      IfAddress x{from_nl(rtnl_addr_get_local(a)), static_cast<uint8_t>(rtnl_addr_get_prefixlen(a))};
      (x.ip.is_v4() ? v4 : v6).push_back(x);
    }
    v4.insert(v4.end(), v6.begin(), v6.end());
    return v4;
  }

  std::vector<proto::IpAddr> gid_table() const override {
    std::vector<proto::IpAddr> g{link_local_gid(link_.mac)};
    for (const IfAddress& a : addresses())
      if (!is_link_local(a.ip) && std::find(g.begin(), g.end(), a.ip) == g.end()) g.push_back(a.ip);
    return g;
  }

  Resolve resolve(const proto::IpAddr& dst, proto::MacAddr* mac) override {
    if (mac_from_link_local(dst, mac)) return Resolve::kResolved;
    proto::IpAddr nexthop;
    int oif = 0;
    if (!route_get(dst, &nexthop, &oif) || oif != ifindex_) {
      counters_.neigh_resolve_unreachable++;
      return Resolve::kUnreachable;
    }
    nl_addr* a = to_nl(nexthop);
    rtnl_neigh* n = rtnl_neigh_get(neighs_, ifindex_, a);
    nl_addr_put(a);
    if (n) {
      bool valid = (rtnl_neigh_get_state(n) & kNudValid) && rtnl_neigh_get_lladdr(n) &&
                   nl_addr_get_len(rtnl_neigh_get_lladdr(n)) == 6;
      if (valid) std::memcpy(mac->data(), nl_addr_get_binary_addr(rtnl_neigh_get_lladdr(n)), 6);
      rtnl_neigh_put(n);
      if (valid) return Resolve::kResolved;
    }
    trigger(dst);
    return Resolve::kPending;
  }

 private:
  static bool fail(std::string* why, const char* what, int nlerr) {
    if (why) *why = std::string(what) + ": " + nl_geterror(nlerr);
    return false;
  }

  LinkState read_link() const {
    LinkState s;
    rtnl_link* l = rtnl_link_get(links_, ifindex_);
    if (!l) return s;
    s.ifindex = ifindex_;
    s.name = rtnl_link_get_name(l) ? rtnl_link_get_name(l) : "";
    if (nl_addr* a = rtnl_link_get_addr(l); a && nl_addr_get_len(a) == 6)
      std::memcpy(s.mac.data(), nl_addr_get_binary_addr(a), 6);
    s.mtu = rtnl_link_get_mtu(l);
    unsigned flags = rtnl_link_get_flags(l);
    s.admin_up = flags & IFF_UP;
    s.oper_up = rtnl_link_get_operstate(l) == kIfOperUp ||
                (s.admin_up && (flags & IFF_LOWER_UP) && rtnl_link_get_operstate(l) == 0);
    rtnl_link_put(l);
    return s;
  }

  static void on_change(nl_cache*, nl_object* obj, int action, void* arg) {
    static_cast<Monitor*>(arg)->changed(obj, action);
  }

  void changed(nl_object* obj, int action) {
    std::string type = nl_object_get_type(obj);
    if (type == "route/link") {
      if (rtnl_link_get_ifindex(reinterpret_cast<rtnl_link*>(obj)) != ifindex_) return;
      if (action == NL_ACT_DEL) {
        if (visitor_) visitor_->on_link_removed();
        return;
      }
      LinkState now = read_link(), old = link_;
      link_ = now;
      if (now != old && visitor_) visitor_->on_link(now, old);
    } else if (type == "route/addr") {
      auto* a = reinterpret_cast<rtnl_addr*>(obj);
      if (rtnl_addr_get_ifindex(a) != ifindex_ || !rtnl_addr_get_local(a)) return;
      if (action != NL_ACT_NEW && action != NL_ACT_DEL) return;
      IfAddress x{from_nl(rtnl_addr_get_local(a)), static_cast<uint8_t>(rtnl_addr_get_prefixlen(a))};
      if (visitor_) visitor_->on_address(x, action == NL_ACT_NEW);
    } else if (type == "route/neigh") {
      auto* n = reinterpret_cast<rtnl_neigh*>(obj);
      if (rtnl_neigh_get_ifindex(n) != ifindex_ || !rtnl_neigh_get_dst(n)) return;
      int state = rtnl_neigh_get_state(n);
      nl_addr* ll = rtnl_neigh_get_lladdr(n);
      proto::MacAddr mac{};
      bool valid = action != NL_ACT_DEL && (state & kNudValid) && ll && nl_addr_get_len(ll) == 6;
      if (valid) std::memcpy(mac.data(), nl_addr_get_binary_addr(ll), 6);
      else if (action != NL_ACT_DEL && !(state & NUD_FAILED)) return;  // still resolving
      if (visitor_) visitor_->on_neighbour(from_nl(rtnl_neigh_get_dst(n)), mac, valid);
    }
  }

  struct RouteReply {
    proto::IpAddr gateway;
    bool has_gateway = false;
    int oif = 0;
    bool got = false;
    bool v4 = true;
  };

  static int on_route(nl_msg* msg, void* arg) {
    auto* r = static_cast<RouteReply*>(arg);
    nlmsghdr* h = nlmsg_hdr(msg);
    if (h->nlmsg_type != RTM_NEWROUTE) return NL_SKIP;
    nlattr* tb[RTA_MAX + 1];
    if (nlmsg_parse(h, sizeof(rtmsg), tb, RTA_MAX, nullptr) < 0) return NL_SKIP;
    if (tb[RTA_OIF]) r->oif = static_cast<int>(nla_get_u32(tb[RTA_OIF]));
    if (tb[RTA_GATEWAY]) {
      const auto* b = static_cast<const uint8_t*>(nla_data(tb[RTA_GATEWAY]));
      if (nla_len(tb[RTA_GATEWAY]) == 4) r->gateway = proto::IpAddr::v4(static_cast<uint32_t>(b[0]) << 24 | b[1] << 16 | b[2] << 8 | b[3]);
      else if (nla_len(tb[RTA_GATEWAY]) == 16) std::memcpy(r->gateway.bytes.data(), b, 16);
      r->has_gateway = true;
    }
    r->got = true;
    return NL_OK;
  }

  // RTM_GETROUTE dst: the output interface and the next hop.
  bool route_get(const proto::IpAddr& dst, proto::IpAddr* nexthop, int* oif) {
    bool v4 = dst.is_v4();
    nl_msg* msg = nlmsg_alloc_simple(RTM_GETROUTE, NLM_F_REQUEST);
    if (!msg) return false;
    rtmsg rtm{};
    rtm.rtm_family = v4 ? AF_INET : AF_INET6;
    rtm.rtm_dst_len = v4 ? 32 : 128;
    bool ok = nlmsg_append(msg, &rtm, sizeof(rtm), NLMSG_ALIGNTO) == 0 &&
              nla_put(msg, RTA_DST, v4 ? 4 : 16, v4 ? dst.bytes.data() + 12 : dst.bytes.data()) == 0 &&
              nl_send_auto(sync_, msg) >= 0;
    nlmsg_free(msg);
    if (!ok) return false;
    RouteReply r;
    nl_socket_modify_cb(sync_, NL_CB_VALID, NL_CB_CUSTOM, &Monitor::on_route, &r);
    if (nl_recvmsgs_default(sync_) < 0 || !r.got) return false;  // e.g. ENETUNREACH
    *oif = r.oif;
    *nexthop = r.has_gateway ? r.gateway : dst;
    return true;
  }

  // An empty datagram to the discard port: the kernel resolves the next hop
  // (ARP/ND) to send it. At most once per destination per 200 ms.
  void trigger(const proto::IpAddr& dst) {
    auto now = std::chrono::steady_clock::now();
    auto it = last_trigger_.find(dst.bytes);
    if (it != last_trigger_.end() && now - it->second < kRetrigger) {
      counters_.neigh_resolve_rate_limited++;
      return;
    }
    if (it == last_trigger_.end()) {
      make_room(now);
      it = last_trigger_.emplace(dst.bytes, now).first;
    }
    it->second = now;
    if (send_trigger(dst)) counters_.neigh_resolve_triggers++;
    else counters_.neigh_resolve_send_errors++;
  }

  // Keeps the table below kMaxPendingTriggers: forgets the entries that no
  // longer rate-limit anything, else the oldest one.
  void make_room(std::chrono::steady_clock::time_point now) {
    if (last_trigger_.size() < kMaxPendingTriggers) return;
    std::erase_if(last_trigger_, [&](const auto& e) { return now - e.second >= kRetrigger; });
    if (last_trigger_.size() < kMaxPendingTriggers) return;
    auto oldest = std::min_element(last_trigger_.begin(), last_trigger_.end(),
                                   [](const auto& a, const auto& b) { return a.second < b.second; });
    last_trigger_.erase(oldest);
    counters_.neigh_resolve_evictions++;
  }

  bool send_trigger(const proto::IpAddr& dst) {
    if (dst.is_v4()) {
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_port = htons(9);
      std::memcpy(&a.sin_addr, dst.bytes.data() + 12, 4);
      return sendto(udp4_, nullptr, 0, 0, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
    }
    sockaddr_in6 a{};
    a.sin6_family = AF_INET6;
    a.sin6_port = htons(9);
    std::memcpy(&a.sin6_addr, dst.bytes.data(), 16);
    if (is_link_local(dst)) a.sin6_scope_id = static_cast<uint32_t>(ifindex_);
    return sendto(udp6_, nullptr, 0, 0, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  }

  const NeighbourCounters& neighbour_counters() const override { return counters_; }
  size_t pending_triggers() const override { return last_trigger_.size(); }

  static constexpr std::chrono::milliseconds kRetrigger{200};

  NetlinkMonitorVisitor* visitor_ = nullptr;
  nl_cache_mngr* mngr_ = nullptr;
  nl_cache *links_ = nullptr, *addrs_ = nullptr, *neighs_ = nullptr;
  nl_sock* sync_ = nullptr;
  int ifindex_ = 0;
  int udp4_ = -1, udp6_ = -1;
  LinkState link_;
  std::map<std::array<uint8_t, 16>, std::chrono::steady_clock::time_point> last_trigger_;
  NeighbourCounters counters_;
};

}  // namespace

std::string format_counters(const NeighbourCounters& c) {
  std::string out;
#define MROCE_NEIGH_FORMAT(n) \
  if (c.n) out += " " #n "=" + std::to_string(c.n);
  MROCE_NEIGH_COUNTERS(MROCE_NEIGH_FORMAT)
#undef MROCE_NEIGH_FORMAT
  return out;
}

proto::IpAddr link_local_gid(const proto::MacAddr& m) {
  proto::IpAddr g;
  g.bytes = {0xfe, 0x80, 0, 0, 0, 0, 0, 0, static_cast<uint8_t>(m[0] ^ 0x02), m[1], m[2], 0xff, 0xfe, m[3], m[4], m[5]};
  return g;
}

bool mac_from_link_local(const proto::IpAddr& ip, proto::MacAddr* mac) {
  const auto& b = ip.bytes;
  bool prefix = b[0] == 0xfe && b[1] == 0x80 && std::all_of(b.begin() + 2, b.begin() + 8, [](uint8_t x) { return x == 0; });
  if (!prefix || b[11] != 0xff || b[12] != 0xfe) return false;
  *mac = {static_cast<uint8_t>(b[8] ^ 0x02), b[9], b[10], b[13], b[14], b[15]};
  return true;
}

std::unique_ptr<NetlinkMonitor> NetlinkMonitor::open(const std::string& ifname, NetlinkMonitorVisitor* visitor,
                                                     std::string* why) {
  auto m = std::make_unique<Monitor>();
  if (!m->open(ifname, visitor, why)) return nullptr;
  return m;
}

}  // namespace metaroce::daemon::net
