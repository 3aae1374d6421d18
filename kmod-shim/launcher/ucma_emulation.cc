// The ucma ABI emulation (ucma_emulation.h). Command structs and numbers
// come from the system's <rdma/rdma_user_cm.h> (linux-libc-dev), the
// header librdmacm itself is built against; nothing is redeclared here.
//
// Each command: the header's `in` must cover the command struct, its `out`
// the response struct, as the kernel's ucma_write checks; a response is
// written to the command's `response` address only after the command
// succeeded. That address is the caller's own memory in its own process, as
// for any libc call it passes a buffer to.
// clang-format off
#include <netinet/in.h>  // before the kernel header: glibc owns in6_addr
#include <rdma/rdma_user_cm.h>
// clang-format on
#include "kmod-shim/launcher/ucma_emulation.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <fstream>

namespace metaroce::launcher {
namespace {

constexpr size_t kHdr = sizeof(rdma_ucm_cmd_hdr);

// The 16 bytes of a GID for an address: IPv4-mapped for AF_INET.
bool gid_of(const sockaddr* a, uint8_t gid[16]) {
  std::memset(gid, 0, 16);
  if (a->sa_family == AF_INET) {
    gid[10] = gid[11] = 0xFF;
    std::memcpy(gid + 12, &reinterpret_cast<const sockaddr_in*>(a)->sin_addr, 4);
    return true;
  }
  if (a->sa_family == AF_INET6) {
    std::memcpy(gid, &reinterpret_cast<const sockaddr_in6*>(a)->sin6_addr, 16);
    return true;
  }
  return false;
}

bool is_wildcard(const sockaddr* a) {
  uint8_t gid[16], zero[16] = {};
  if (!gid_of(a, gid)) return false;
  if (a->sa_family == AF_INET) return std::memcmp(gid + 12, zero, 4) == 0;
  return std::memcmp(gid, zero, 16) == 0;
}

uint16_t port_of(const sockaddr* a) {
  return a->sa_family == AF_INET ? ntohs(reinterpret_cast<const sockaddr_in*>(a)->sin_port)
                                 : ntohs(reinterpret_cast<const sockaddr_in6*>(a)->sin6_port);
}

void set_port(sockaddr* a, uint16_t port) {
  if (a->sa_family == AF_INET) reinterpret_cast<sockaddr_in*>(a)->sin_port = htons(port);
  else reinterpret_cast<sockaddr_in6*>(a)->sin6_port = htons(port);
}

socklen_t len_of(const sockaddr* a) {
  return a->sa_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
}

// "fe80:0000:...:0001" (sysfs GID text) -> 16 bytes.
bool parse_gid(const std::string& text, uint8_t out[16]) {
  unsigned v[8];
  if (std::sscanf(text.c_str(), "%4x:%4x:%4x:%4x:%4x:%4x:%4x:%4x", &v[0], &v[1], &v[2], &v[3],
                  &v[4], &v[5], &v[6], &v[7]) != 8)
    return false;
  for (int i = 0; i < 8; ++i) {
    out[2 * i] = static_cast<uint8_t>(v[i] >> 8);
    out[2 * i + 1] = static_cast<uint8_t>(v[i]);
  }
  return true;
}

// "5ca7:e8ff:fec2:25d8" -> the 8 bytes in that order, as a be64 in memory.
bool parse_guid(const std::string& text, uint64_t* be) {
  unsigned v[4];
  if (std::sscanf(text.c_str(), "%4x:%4x:%4x:%4x", &v[0], &v[1], &v[2], &v[3]) != 4) return false;
  uint8_t b[8];
  for (int i = 0; i < 4; ++i) {
    b[2 * i] = static_cast<uint8_t>(v[i] >> 8);
    b[2 * i + 1] = static_cast<uint8_t>(v[i]);
  }
  std::memcpy(be, b, 8);
  return true;
}

std::string read_line(const std::string& path) {
  std::ifstream in(path);
  std::string s;
  std::getline(in, s);
  return s;
}

// Does port 1 of device `dev` hold `gid`? (16 entries, docs/daemon.md.)
bool device_has_gid(const std::string& dev_dir, const uint8_t gid[16]) {
  for (int i = 0; i < 256; ++i) {
    const std::string text = read_line(dev_dir + "/ports/1/gids/" + std::to_string(i));
    if (text.empty()) return false;
    uint8_t g[16];
    if (parse_gid(text, g) && std::memcmp(g, gid, 16) == 0) return true;
  }
  return false;
}

}  // namespace

bool find_device_address(const std::string& sysfs_root, const sockaddr* addr, DeviceAddress* out) {
  uint8_t gid[16];
  if (!gid_of(addr, gid)) return false;
  const std::string dir = sysfs_root + "/class/infiniband";
  DIR* d = opendir(dir.c_str());
  if (!d) return false;
  bool found = false;
  while (dirent* e = readdir(d)) {
    if (std::strncmp(e->d_name, "metaroce", 8) != 0) continue;
    const std::string dev = dir + "/" + e->d_name;
    if (device_has_gid(dev, gid) && parse_guid(read_line(dev + "/node_guid"), &out->node_guid_be)) {
      out->port = 1;
      found = true;
      break;
    }
  }
  closedir(d);
  return found;
}

UcmaFile::UcmaFile(int event_fd, std::string sysfs_root)
    : event_fd_(event_fd), sysfs_root_(std::move(sysfs_root)) {}

thread_local std::string t_error;

const std::string& UcmaFile::last_error() { return t_error; }

ssize_t UcmaFile::fail(int err, const char* why) {
  t_error = why;
  return -err;
}

ssize_t UcmaFile::write(const void* buf, size_t len) {
  static_assert(sizeof(rdma_ucm_cmd_hdr_view) == kHdr);
  if (len < kHdr) return fail(EINVAL, "shorter than struct rdma_ucm_cmd_hdr");
  rdma_ucm_cmd_hdr_view hdr;
  std::memcpy(&hdr, buf, kHdr);
  if (size_t{hdr.in} + kHdr > len) return fail(EINVAL, "hdr.in runs past the write");
  const void* in = static_cast<const uint8_t*>(buf) + kHdr;
  ssize_t r = 0;
  if (hdr.cmd == RDMA_USER_CM_CMD_GET_EVENT) {  // may block: not under the lock
    r = hdr.in >= sizeof(rdma_ucm_get_event) ? get_event(in, hdr.out)
                                            : fail(EINVAL, "GET_EVENT too short");
  } else {
    std::lock_guard<std::mutex> hold(mu_);
    r = command(hdr, in);
  }
  return r < 0 ? r : static_cast<ssize_t>(len);
}

ssize_t UcmaFile::command(const rdma_ucm_cmd_hdr_view& hdr, const void* in) {
  ssize_t r = 0;
  auto need = [&](size_t size) { return hdr.in >= size; };
  switch (hdr.cmd) {
    case RDMA_USER_CM_CMD_CREATE_ID:
      r = need(sizeof(rdma_ucm_create_id)) ? create_id(in, hdr.out) : fail(EINVAL, "CREATE_ID too short");
      break;
    case RDMA_USER_CM_CMD_DESTROY_ID:
      r = need(sizeof(rdma_ucm_destroy_id)) ? destroy_id(in, hdr.out) : fail(EINVAL, "DESTROY_ID too short");
      break;
    case RDMA_USER_CM_CMD_BIND_IP:
      r = need(sizeof(rdma_ucm_bind_ip)) ? bind_ip(in) : fail(EINVAL, "BIND_IP too short");
      break;
    case RDMA_USER_CM_CMD_BIND:
      r = need(sizeof(rdma_ucm_bind)) ? bind(in) : fail(EINVAL, "BIND too short");
      break;
    case RDMA_USER_CM_CMD_QUERY_ROUTE:
      r = need(sizeof(rdma_ucm_query)) ? query_route(in, hdr.out) : fail(EINVAL, "QUERY_ROUTE too short");
      break;
    case RDMA_USER_CM_CMD_QUERY:
      r = need(sizeof(rdma_ucm_query)) ? query(in, hdr.out) : fail(EINVAL, "QUERY too short");
      break;
    case RDMA_USER_CM_CMD_LISTEN:
      r = need(sizeof(rdma_ucm_listen)) ? listen(in) : fail(EINVAL, "LISTEN too short");
      break;
    default:
      return fail(hdr.cmd <= RDMA_USER_CM_CMD_JOIN_MCAST ? ENOSYS : EINVAL,
                  hdr.cmd <= RDMA_USER_CM_CMD_JOIN_MCAST
                      ? "not served yet: needs the daemon's CM (docs/connection-manager.md §6)"
                      : "unknown rdma_cm command");
  }
  return r;
}

UcmaFile::Id* UcmaFile::find(uint32_t id) {
  auto it = ids_.find(id);
  return it == ids_.end() ? nullptr : &it->second;
}

ssize_t UcmaFile::create_id(const void* in, uint16_t out_len) {
  rdma_ucm_create_id cmd;
  std::memcpy(&cmd, in, sizeof cmd);
  if (out_len < sizeof(rdma_ucm_create_id_resp)) return fail(ENOSPC, "CREATE_ID response too small");
  switch (cmd.ps) {
    case RDMA_PS_TCP:
    case RDMA_PS_UDP:
    case RDMA_PS_IB:
    case RDMA_PS_IPOIB: break;
    default: return fail(EINVAL, "unknown port space");
  }
  if (ids_.size() >= kMaxIds) return fail(ENOMEM, "too many rdma_cm IDs on this channel");
  const uint32_t id = next_id_++;
  Id& x = ids_[id];
  x.uid = cmd.uid;
  x.port_space = cmd.ps;
  x.qp_type = cmd.qp_type;
  rdma_ucm_create_id_resp resp{};
  resp.id = id;
  std::memcpy(reinterpret_cast<void*>(static_cast<uintptr_t>(cmd.response)), &resp, sizeof resp);
  return 0;
}

ssize_t UcmaFile::destroy_id(const void* in, uint16_t out_len) {
  rdma_ucm_destroy_id cmd;
  std::memcpy(&cmd, in, sizeof cmd);
  if (out_len < sizeof(rdma_ucm_destroy_id_resp)) return fail(ENOSPC, "DESTROY_ID response too small");
  if (ids_.erase(cmd.id) == 0) return fail(ENOENT, "no such rdma_cm ID");
  rdma_ucm_destroy_id_resp resp{};  // no event of this ID was ever reported
  std::memcpy(reinterpret_cast<void*>(static_cast<uintptr_t>(cmd.response)), &resp, sizeof resp);
  return 0;
}

ssize_t UcmaFile::bind_ip(const void* in) {
  rdma_ucm_bind_ip cmd;
  std::memcpy(&cmd, in, sizeof cmd);
  const auto* a = reinterpret_cast<const sockaddr*>(&cmd.addr);
  return bind_common(cmd.id, a, a->sa_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6));
}

ssize_t UcmaFile::bind(const void* in) {
  rdma_ucm_bind cmd;
  std::memcpy(&cmd, in, sizeof cmd);
  if (cmd.addr_size > sizeof cmd.addr) return fail(EINVAL, "BIND addr_size larger than the address");
  return bind_common(cmd.id, reinterpret_cast<const sockaddr*>(&cmd.addr), cmd.addr_size);
}

ssize_t UcmaFile::bind_common(uint32_t id, const sockaddr* addr, socklen_t len) {
  Id* x = find(id);
  if (!x) return fail(ENOENT, "no such rdma_cm ID");
  if (addr->sa_family != AF_INET && addr->sa_family != AF_INET6)
    return fail(EAFNOSUPPORT, "only AF_INET and AF_INET6 (no AF_IB on MetaRoCE)");
  if (len < len_of(addr)) return fail(EINVAL, "address shorter than its family");
  if (x->is_bound) return fail(EINVAL, "rdma_cm ID already bound");
  DeviceAddress dev;
  if (!is_wildcard(addr) && !find_device_address(sysfs_root_, addr, &dev))
    return fail(EADDRNOTAVAIL, "no MetaRoCE device has this address (is metaroced running on it?)");
  sockaddr_storage bound{};
  std::memcpy(&bound, addr, len_of(addr));
  auto* b = reinterpret_cast<sockaddr*>(&bound);
  if (port_of(b) == 0) {  // an ephemeral port, as the kernel picks one
    for (uint32_t p = 32768; p <= 65535; ++p) {
      set_port(b, static_cast<uint16_t>(p));
      if (!port_taken(x->port_space, b)) break;
    }
  }
  if (port_taken(x->port_space, b)) return fail(EADDRINUSE, "port in use in this port space");
  x->bound = bound;
  x->is_bound = true;
  x->device = dev;
  return 0;
}

bool UcmaFile::port_taken(uint16_t ps, const sockaddr* addr) const {
  for (const auto& [id, x] : ids_) {
    if (!x.is_bound || x.port_space != ps) continue;
    const auto* b = reinterpret_cast<const sockaddr*>(&x.bound);
    if (port_of(b) != port_of(addr)) continue;
    uint8_t g1[16], g2[16];
    gid_of(b, g1);
    gid_of(addr, g2);
    if (is_wildcard(b) || is_wildcard(addr) || std::memcmp(g1, g2, 16) == 0) return true;
  }
  return false;
}

ssize_t UcmaFile::query_route(const void* in, uint16_t out_len) {
  rdma_ucm_query cmd;
  std::memcpy(&cmd, in, sizeof cmd);
  if (out_len < offsetof(rdma_ucm_query_route_resp, ibdev_index))
    return fail(ENOSPC, "QUERY_ROUTE response too small");
  const Id* x = find(cmd.id);
  if (!x) return fail(ENOENT, "no such rdma_cm ID");
  rdma_ucm_query_route_resp resp{};
  resp.node_guid = x->device.node_guid_be;
  resp.port_num = x->device.node_guid_be ? x->device.port : 0;
  if (x->is_bound) {
    const auto* b = reinterpret_cast<const sockaddr*>(&x->bound);
    std::memcpy(&resp.src_addr, b, len_of(b));
    gid_of(b, resp.ib_route[0].sgid);
  }
  // No route yet (RESOLVE_* need the daemon); ibdev_index is left as the
  // caller set it (librdmacm: "unknown"), as an older kernel does.
  const size_t n = std::min<size_t>(out_len, offsetof(rdma_ucm_query_route_resp, ibdev_index));
  std::memcpy(reinterpret_cast<void*>(static_cast<uintptr_t>(cmd.response)), &resp, n);
  return 0;
}

ssize_t UcmaFile::query(const void* in, uint16_t out_len) {
  rdma_ucm_query cmd;
  std::memcpy(&cmd, in, sizeof cmd);
  if (cmd.option != RDMA_USER_CM_QUERY_ADDR)
    return fail(ENOSYS, "QUERY PATH/GID: needs the daemon's CM (docs/connection-manager.md §6)");
  if (out_len < offsetof(rdma_ucm_query_addr_resp, ibdev_index))
    return fail(ENOSPC, "QUERY response too small");
  const Id* x = find(cmd.id);
  if (!x) return fail(ENOENT, "no such rdma_cm ID");
  rdma_ucm_query_addr_resp resp{};
  resp.node_guid = x->device.node_guid_be;
  resp.port_num = x->device.node_guid_be ? x->device.port : 0;
  resp.pkey = 0xFFFF;
  if (x->is_bound) {
    const auto* b = reinterpret_cast<const sockaddr*>(&x->bound);
    resp.src_size = static_cast<uint16_t>(len_of(b));
    std::memcpy(&resp.src_addr, b, len_of(b));
  }
  const size_t n = std::min<size_t>(out_len, offsetof(rdma_ucm_query_addr_resp, ibdev_index));
  std::memcpy(reinterpret_cast<void*>(static_cast<uintptr_t>(cmd.response)), &resp, n);
  return 0;
}

ssize_t UcmaFile::listen(const void* in) {
  rdma_ucm_listen cmd;
  std::memcpy(&cmd, in, sizeof cmd);
  Id* x = find(cmd.id);
  if (!x) return fail(ENOENT, "no such rdma_cm ID");
  if (!x->is_bound) return fail(EINVAL, "listen on an unbound rdma_cm ID (bind it first)");
  x->listening = true;
  x->backlog = static_cast<int>(cmd.backlog);
  return 0;
}

// One event record from the channel socket: blocks, or EAGAIN when the
// application made the descriptor non-blocking, exactly like the kernel.
ssize_t UcmaFile::get_event(const void* in, uint16_t out_len) {
  rdma_ucm_get_event cmd;
  std::memcpy(&cmd, in, sizeof cmd);
  if (out_len < sizeof(rdma_ucm_event_resp)) return fail(ENOSPC, "GET_EVENT response too small");
  rdma_ucm_event_resp resp;
  const ssize_t n = recv(event_fd_, &resp, sizeof resp, 0);
  if (n < 0) return fail(errno, errno == EAGAIN ? "no event (non-blocking channel)" : "event socket");
  if (n != static_cast<ssize_t>(sizeof resp)) return fail(EIO, "malformed event record");
  std::memcpy(reinterpret_cast<void*>(static_cast<uintptr_t>(cmd.response)), &resp, sizeof resp);
  return 0;
}

}  // namespace metaroce::launcher
