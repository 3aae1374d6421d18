// The kernel's ucma ABI (/dev/infiniband/rdma_cm, <rdma/rdma_user_cm.h>,
// ABI version 4) emulated in user space for Debian's stock librdmacm.
// Design: docs/connection-manager.md §4, §6. rdma_cm_preload.cc routes
// open(), write(), fstat() and close() of the emulated file here.
//
// The file is a client of metaroced's connection manager (its CmRole): every
// command is checked here (sizes, the kernel's errnos), forwarded as
// MROCE_OP_UCMA_CMD, and the daemon's answer is written to the command's
// `response`. IDs, ports, listeners and connections live in the daemon.
// What stays here: GET_EVENT (a record read from the channel socket the
// daemon writes to), the count of events each ID has handed out (what
// librdmacm waits for in rdma_destroy_id), and dropping the unread events
// of destroyed IDs, as the kernel's ucma_destroy_id does.
#pragma once

#include <sys/socket.h>
#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <span>
#include <string>
#include <vector>

namespace metaroce::launcher {

// struct rdma_ucm_cmd_hdr's fields (the kernel header stays out of this one).
struct rdma_ucm_cmd_hdr_view {
  uint32_t cmd;
  uint16_t in;
  uint16_t out;
};

// A MetaRoCE device that owns an IP address (from the published sysfs tree).
struct DeviceAddress {
  uint64_t node_guid_be = 0;  // as ibv_get_device_guid returns it (big-endian bytes)
  uint8_t port = 1;
};

// Finds the device whose GID table holds `addr` (AF_INET or AF_INET6), in
// the sysfs tree at `sysfs_root` (SYSFS_PATH). False if none does.
bool find_device_address(const std::string& sysfs_root, const sockaddr* addr,
                         DeviceAddress* out);
// The control socket of the first MetaRoCE device published under
// `sysfs_root` (its metaroce_socket file). False if none is.
bool find_daemon_socket(const std::string& sysfs_root, std::string* path);

// One request to the daemon: op, body (and an fd to pass, or -1); fills the
// reply body. Returns 0 or the daemon's errno, with *reason set.
using UcmaTransport = std::function<int(uint16_t op, std::span<const uint8_t> body, int fd,
                                        std::vector<uint8_t>* reply, std::string* reason)>;

// One open emulated rdma_cm file. `event_fd` is the descriptor the
// application holds (one end of a SOCK_SEQPACKET pair whose other end the
// daemon writes event records to): GET_EVENT reads one record from it, so
// poll/epoll and O_NONBLOCK behave as on the kernel's file.
class UcmaFile {
 public:
  // `token` names this channel to the daemon (MROCE_OP_UCMA_OPEN's answer).
  UcmaFile(int event_fd, UcmaTransport transport, uint64_t token);

  // One write() of the ABI. Returns `len` on success, else -errno; the
  // reason is in last_error() (of the calling thread). Thread-safe:
  // GET_EVENT may block in one thread while others issue commands.
  ssize_t write(const void* buf, size_t len);
  static const std::string& last_error();
  uint64_t token() const { return token_; }
  void set_token(uint64_t t) { token_ = t; }
  // The application closed the descriptor: a GET_EVENT still blocked in
  // another thread stays blocked, as on the kernel's file (the daemon's end
  // of the channel closes with the file, which is not the daemon dying).
  void mark_closed() { closed_.store(true, std::memory_order_release); }

  // MIGRATE_ID names the old channel by its fd; the host maps it.
  using FindFile = std::function<UcmaFile*(int fd)>;
  void set_find_file(FindFile f) { find_file_ = std::move(f); }

  static constexpr size_t kMaxOption = 256;  // SET_OPTION values carried

 private:
  static ssize_t fail(int err, const std::string& why);
  ssize_t command(const rdma_ucm_cmd_hdr_view& hdr, const uint8_t* in);
  ssize_t forward(const rdma_ucm_cmd_hdr_view& hdr, const uint8_t* in,
                  std::span<const uint8_t> extra, std::vector<uint8_t>* reply);
  ssize_t destroy_id(const rdma_ucm_cmd_hdr_view& hdr, const uint8_t* in);
  ssize_t set_option(const rdma_ucm_cmd_hdr_view& hdr, const uint8_t* in);
  ssize_t migrate_id(const rdma_ucm_cmd_hdr_view& hdr, const uint8_t* in);
  ssize_t leave_mcast(const rdma_ucm_cmd_hdr_view& hdr, const uint8_t* in);
  ssize_t get_event(const uint8_t* in, uint16_t out_len);
  // Events of an ID this file handed out, and forgetting it (under mu_).
  uint32_t take_reported(uint32_t id);

  int event_fd_;
  UcmaTransport transport_;
  uint64_t token_;
  FindFile find_file_;
  std::mutex mu_;  // reported_, destroyed_, group_reported_, left_groups_
  std::map<uint32_t, uint32_t> reported_;
  std::set<uint32_t> destroyed_;
  std::map<uint32_t, uint32_t> group_reported_;  // multicast groups' events handed out
  std::set<uint32_t> left_groups_;
  std::atomic<bool> closed_{false};
};

}  // namespace metaroce::launcher
