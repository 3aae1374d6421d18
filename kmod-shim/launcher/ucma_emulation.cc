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

#include "firmware-model/uapi/metaroce_abi.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <unistd.h>

#include <algorithm>
#include <vector>
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
bool find_daemon_socket(const std::string& sysfs_root, std::string* path) {
  const std::string dir = sysfs_root + "/class/infiniband";
  DIR* d = opendir(dir.c_str());
  if (!d) return false;
  std::vector<std::string> names;
  while (dirent* e = readdir(d))
    if (std::strncmp(e->d_name, "metaroce", 8) == 0) names.emplace_back(e->d_name);
  closedir(d);
  std::sort(names.begin(), names.end());
  for (const std::string& n : names) {
    const std::string p = read_line(dir + "/" + n + "/metaroce_socket");
    if (!p.empty() && p[0] == '/') return *path = p, true;
  }
  return false;
}

UcmaFile::UcmaFile(int event_fd, UcmaTransport transport, uint64_t token)
    : event_fd_(event_fd), transport_(std::move(transport)), token_(token) {}

thread_local std::string t_error;

const std::string& UcmaFile::last_error() { return t_error; }

ssize_t UcmaFile::fail(int err, const std::string& why) {
  t_error = why;
  return -err;
}

ssize_t UcmaFile::write(const void* buf, size_t len) {
  static_assert(sizeof(rdma_ucm_cmd_hdr_view) == kHdr);
  if (len < kHdr) return fail(EINVAL, "shorter than struct rdma_ucm_cmd_hdr");
  rdma_ucm_cmd_hdr_view hdr;
  std::memcpy(&hdr, buf, kHdr);
  if (size_t{hdr.in} + kHdr > len) return fail(EINVAL, "hdr.in runs past the write");
  const auto* in = static_cast<const uint8_t*>(buf) + kHdr;
  const ssize_t r = command(hdr, in);
  return r < 0 ? r : static_cast<ssize_t>(len);
}

namespace {

// The struct each command must carry, and where its response pointer is
// (-1: it writes none). The daemon checks the sizes again.
struct Shape {
  size_t in;
  int response_at;
};
Shape shape_of(uint32_t cmd) {
  switch (cmd) {
    case RDMA_USER_CM_CMD_CREATE_ID: return {sizeof(rdma_ucm_create_id), offsetof(rdma_ucm_create_id, response)};
    case RDMA_USER_CM_CMD_DESTROY_ID: return {sizeof(rdma_ucm_destroy_id), 0};
    case RDMA_USER_CM_CMD_BIND_IP: return {sizeof(rdma_ucm_bind_ip), -1};
    case RDMA_USER_CM_CMD_BIND: return {sizeof(rdma_ucm_bind), -1};
    case RDMA_USER_CM_CMD_RESOLVE_IP: return {sizeof(rdma_ucm_resolve_ip), -1};
    case RDMA_USER_CM_CMD_RESOLVE_ADDR: return {sizeof(rdma_ucm_resolve_addr), -1};
    case RDMA_USER_CM_CMD_RESOLVE_ROUTE: return {sizeof(rdma_ucm_resolve_route), -1};
    case RDMA_USER_CM_CMD_QUERY_ROUTE: return {sizeof(rdma_ucm_query), 0};
    case RDMA_USER_CM_CMD_QUERY: return {sizeof(rdma_ucm_query), 0};
    case RDMA_USER_CM_CMD_CONNECT: return {offsetof(rdma_ucm_connect, reserved), -1};
    case RDMA_USER_CM_CMD_LISTEN: return {sizeof(rdma_ucm_listen), -1};
    case RDMA_USER_CM_CMD_ACCEPT: return {offsetof(rdma_ucm_accept, reserved), -1};
    case RDMA_USER_CM_CMD_REJECT: return {sizeof(rdma_ucm_reject), -1};
    case RDMA_USER_CM_CMD_DISCONNECT: return {sizeof(rdma_ucm_disconnect), -1};
    case RDMA_USER_CM_CMD_INIT_QP_ATTR: return {sizeof(rdma_ucm_init_qp_attr), 0};
    case RDMA_USER_CM_CMD_SET_OPTION: return {sizeof(rdma_ucm_set_option), -1};
    case RDMA_USER_CM_CMD_NOTIFY: return {sizeof(rdma_ucm_notify), -1};
    case RDMA_USER_CM_CMD_MIGRATE_ID: return {sizeof(rdma_ucm_migrate_id), 0};
    case RDMA_USER_CM_CMD_GET_EVENT: return {sizeof(rdma_ucm_get_event), 0};
    case RDMA_USER_CM_CMD_JOIN_IP_MCAST: return {sizeof(rdma_ucm_join_ip_mcast), 0};
    case RDMA_USER_CM_CMD_JOIN_MCAST: return {sizeof(rdma_ucm_join_mcast), 0};
    case RDMA_USER_CM_CMD_LEAVE_MCAST: return {sizeof(rdma_ucm_destroy_id), 0};
    default: return {0, -1};
  }
}

void* response_of(const uint8_t* in, int at) {
  uint64_t p;
  std::memcpy(&p, in + at, sizeof p);
  return reinterpret_cast<void*>(static_cast<uintptr_t>(p));
}

}  // namespace

ssize_t UcmaFile::command(const rdma_ucm_cmd_hdr_view& hdr, const uint8_t* in) {
  if (hdr.cmd == RDMA_USER_CM_CMD_GET_OPTION) return fail(ENOSYS, "not served: GET_OPTION is not in the ABI");
  const Shape s = shape_of(hdr.cmd);
  if (s.in == 0) return fail(EINVAL, "unknown rdma_cm command");
  if (hdr.in < s.in) return fail(EINVAL, "command shorter than its struct");
  switch (hdr.cmd) {
    case RDMA_USER_CM_CMD_GET_EVENT: return get_event(in, hdr.out);  // may block: no lock
    case RDMA_USER_CM_CMD_DESTROY_ID: return destroy_id(hdr, in);
    case RDMA_USER_CM_CMD_SET_OPTION: return set_option(hdr, in);
    case RDMA_USER_CM_CMD_MIGRATE_ID: return migrate_id(hdr, in);
    case RDMA_USER_CM_CMD_LEAVE_MCAST: return leave_mcast(hdr, in);
  }
  std::vector<uint8_t> reply;
  const ssize_t r = forward(hdr, in, {}, &reply);
  if (r < 0) return r;
  if (s.response_at >= 0 && !reply.empty())
    std::memcpy(response_of(in, s.response_at), reply.data(), std::min<size_t>(reply.size(), hdr.out));
  return 0;
}

// hdr + command (+ extra) to the daemon; its reply body back.
ssize_t UcmaFile::forward(const rdma_ucm_cmd_hdr_view& hdr, const uint8_t* in,
                          std::span<const uint8_t> extra, std::vector<uint8_t>* reply) {
  std::vector<uint8_t> body(kHdr + hdr.in + extra.size());
  std::memcpy(body.data(), &hdr, kHdr);
  std::memcpy(body.data() + kHdr, in, hdr.in);
  if (!extra.empty()) std::memcpy(body.data() + kHdr + hdr.in, extra.data(), extra.size());
  std::string reason;
  const int err = transport_(MROCE_OP_UCMA_CMD, body, -1, reply, &reason);
  if (err) return fail(err, reason);
  if (reply->size() > hdr.out) return fail(EIO, "daemon answered more than hdr.out");
  return 0;
}

uint32_t UcmaFile::take_reported(uint32_t id) {
  std::lock_guard<std::mutex> hold(mu_);
  destroyed_.insert(id);
  auto it = reported_.find(id);
  const uint32_t n = it == reported_.end() ? 0 : it->second;
  if (it != reported_.end()) reported_.erase(it);
  return n;
}

// The daemon forgets the ID; its events this file handed out are what
// librdmacm waits to see acknowledged, the unread ones are dropped.
ssize_t UcmaFile::destroy_id(const rdma_ucm_cmd_hdr_view& hdr, const uint8_t* in) {
  rdma_ucm_destroy_id cmd;
  std::memcpy(&cmd, in, sizeof cmd);
  if (hdr.out < sizeof(rdma_ucm_destroy_id_resp)) return fail(ENOSPC, "DESTROY_ID response too small");
  std::vector<uint8_t> reply;
  if (ssize_t r = forward(hdr, in, {}, &reply); r < 0) return r;
  rdma_ucm_destroy_id_resp resp{take_reported(cmd.id)};
  std::memcpy(response_of(in, 0), &resp, sizeof resp);
  return 0;
}

// LEAVE_MCAST (its `id` names the group): the group's events this file
// handed out, what rdma_leave_multicast waits to see acknowledged; its
// unread ones are dropped (the kernel's ucma_cleanup_mc_events).
ssize_t UcmaFile::leave_mcast(const rdma_ucm_cmd_hdr_view& hdr, const uint8_t* in) {
  rdma_ucm_destroy_id cmd;
  std::memcpy(&cmd, in, sizeof cmd);
  if (hdr.out < sizeof(rdma_ucm_destroy_id_resp)) return fail(ENOSPC, "LEAVE_MCAST response too small");
  std::vector<uint8_t> reply;
  if (ssize_t r = forward(hdr, in, {}, &reply); r < 0) return r;
  rdma_ucm_destroy_id_resp resp{};
  {
    std::lock_guard<std::mutex> hold(mu_);
    left_groups_.insert(cmd.id);
    resp.events_reported = group_reported_[cmd.id];
    group_reported_.erase(cmd.id);
  }
  std::memcpy(response_of(in, 0), &resp, sizeof resp);
  return 0;
}

// The option value is the caller's memory: carried after the command.
ssize_t UcmaFile::set_option(const rdma_ucm_cmd_hdr_view& hdr, const uint8_t* in) {
  rdma_ucm_set_option cmd;
  std::memcpy(&cmd, in, sizeof cmd);
  if (cmd.optlen > kMaxOption) return fail(EINVAL, "option value longer than any option");
  std::vector<uint8_t> value(cmd.optlen);
  if (cmd.optlen) std::memcpy(value.data(), reinterpret_cast<const void*>(static_cast<uintptr_t>(cmd.optval)), cmd.optlen);
  std::vector<uint8_t> reply;
  return forward(hdr, in, value, &reply);
}

// Written to the new channel; `fd` is the old one's descriptor, which means
// nothing to the daemon: its token is sent instead.
ssize_t UcmaFile::migrate_id(const rdma_ucm_cmd_hdr_view& hdr, const uint8_t* in) {
  rdma_ucm_migrate_id cmd;
  std::memcpy(&cmd, in, sizeof cmd);
  if (hdr.out < sizeof(rdma_ucm_migrate_resp)) return fail(ENOSPC, "MIGRATE_ID response too small");
  UcmaFile* old = find_file_ ? find_file_(static_cast<int>(cmd.fd)) : nullptr;
  if (!old) return fail(EBADF, "MIGRATE_ID: fd is not an rdma_cm channel");
  const uint64_t token = old->token();
  std::vector<uint8_t> reply;
  const auto* t = reinterpret_cast<const uint8_t*>(&token);
  if (ssize_t r = forward(hdr, in, {t, sizeof token}, &reply); r < 0) return r;
  rdma_ucm_migrate_resp resp{old == this ? 0u : old->take_reported(cmd.id)};
  if (old != this) {
    std::lock_guard<std::mutex> hold(old->mu_);
    old->destroyed_.insert(cmd.id);  // its unread events there are stale now
  }
  std::memcpy(response_of(in, 0), &resp, sizeof resp);
  return 0;
}

// One event record from the channel socket: blocks, or EAGAIN when the
// application made the descriptor non-blocking, exactly like the kernel.
// Records of destroyed IDs are dropped here (a CONNECT_REQUEST's new ID is
// destroyed in the daemon too).
ssize_t UcmaFile::get_event(const uint8_t* in, uint16_t out_len) {
  rdma_ucm_get_event cmd;
  std::memcpy(&cmd, in, sizeof cmd);
  if (out_len < sizeof(rdma_ucm_event_resp)) return fail(ENOSPC, "GET_EVENT response too small");
  for (;;) {
    struct {
      mroce_ucma_event_hdr hdr;
      rdma_ucm_event_resp resp;
    } rec;
    const ssize_t n = recv(event_fd_, &rec, sizeof rec, 0);
    if (n < 0) return fail(errno, errno == EAGAIN ? "no event (non-blocking channel)" : "event socket");
    if (n == 0 && closed_.load(std::memory_order_acquire)) {
      for (;;) pause();  // the kernel's read of a closed file: until the process exits
    }
    if (n == 0) return fail(ENODEV, "metaroced closed the channel (daemon gone)");
    if (n != static_cast<ssize_t>(sizeof rec)) return fail(EIO, "malformed event record");
    bool stale;
    {
      std::lock_guard<std::mutex> hold(mu_);
      // MULTICAST_JOIN/ERROR name their group: counted for LEAVE_MCAST too.
      const bool group = rec.resp.event == 17 || rec.resp.event == 18;
      stale = destroyed_.count(rec.hdr.counted_id) != 0 || (group && left_groups_.count(rec.resp.id) != 0);
      if (!stale) reported_[rec.hdr.counted_id]++;
      if (!stale && group) group_reported_[rec.resp.id]++;
    }
    if (stale) {
      if (rec.resp.event == 4 /* RDMA_CM_EVENT_CONNECT_REQUEST */ && rec.resp.id != rec.hdr.counted_id) {
        rdma_ucm_destroy_id d{};
        d.id = rec.resp.id;
        rdma_ucm_cmd_hdr_view h{RDMA_USER_CM_CMD_DESTROY_ID, sizeof d, sizeof(rdma_ucm_destroy_id_resp)};
        std::vector<uint8_t> reply;
        forward(h, reinterpret_cast<const uint8_t*>(&d), {}, &reply);
      }
      continue;
    }
    std::memcpy(reinterpret_cast<void*>(static_cast<uintptr_t>(cmd.response)), &rec.resp, sizeof rec.resp);
    return 0;
  }
}

}  // namespace metaroce::launcher
