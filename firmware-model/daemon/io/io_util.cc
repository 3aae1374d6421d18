#include "firmware-model/daemon/io/io_util.h"

#include <arpa/inet.h>
#include <linux/filter.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace metaroce::daemon::io::detail {

std::string errno_message(const char* what, int err) {
  return std::string(what) + ": " + std::strerror(err) + " (errno " + std::to_string(err) + ")";
}

bool get_if_info(const std::string& ifname, IfInfo* out, std::string* why) {
  if (ifname.empty() || ifname.size() >= IFNAMSIZ) {
    set_why(why, "interface name '" + ifname + "' is empty or too long");
    return false;
  }
  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    set_why(why, errno_message("socket(AF_INET)", errno));
    return false;
  }
  struct ifreq ifr {};
  std::memcpy(ifr.ifr_name, ifname.c_str(), ifname.size());
  bool ok = false;
  if (ioctl(fd, SIOCGIFINDEX, &ifr) < 0) {
    set_why(why, "no interface '" + ifname + "' in this network namespace (" +
                     errno_message("SIOCGIFINDEX", errno) + ")");
  } else {
    out->ifindex = ifr.ifr_ifindex;
    if (ioctl(fd, SIOCGIFMTU, &ifr) < 0) {
      set_why(why, errno_message("SIOCGIFMTU", errno));
    } else {
      out->mtu = static_cast<uint32_t>(ifr.ifr_mtu);
      if (ioctl(fd, SIOCGIFHWADDR, &ifr) < 0) {
        set_why(why, errno_message("SIOCGIFHWADDR", errno));
      } else {
        std::memcpy(out->mac.data(), ifr.ifr_hwaddr.sa_data, 6);
        ok = true;
      }
    }
  }
  close(fd);
  return ok;
}

uint32_t frame_limit(const IoOptions& options, const IfInfo& info) {
  if (options.max_frame) return options.max_frame;
  return info.mtu + 14 + 4;
}

int reserve_udp_port(uint16_t port, const std::string& ifname) {
  static struct sock_filter drop_all[] = {BPF_STMT(BPF_RET | BPF_K, 0)};
  struct sock_fprog prog = {1, drop_all};
  int fd = socket(AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  bool v6 = fd >= 0;
  if (!v6) fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -errno;
  int zero = 0, one = 1;
  // Filter first: nothing queues on this socket, ever.
  if (setsockopt(fd, SOL_SOCKET, SO_ATTACH_FILTER, &prog, sizeof(prog)) < 0 ||
      setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
      (!ifname.empty() &&
       setsockopt(fd, SOL_SOCKET, SO_BINDTODEVICE, ifname.c_str(), ifname.size()) < 0) ||
      (v6 && setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero)) < 0)) {
    int err = errno;
    close(fd);
    return -err;
  }
  int rc;
  if (v6) {
    struct sockaddr_in6 a {};
    a.sin6_family = AF_INET6;
    a.sin6_port = htons(port);
    a.sin6_addr = in6addr_any;
    rc = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  } else {
    struct sockaddr_in a {};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    rc = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  }
  if (rc < 0) {
    int err = errno;
    close(fd);
    return -err;
  }
  return fd;
}

}  // namespace metaroce::daemon::io::detail
