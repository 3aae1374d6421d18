// The kernel's ucma ABI (/dev/infiniband/rdma_cm, <rdma/rdma_user_cm.h>,
// ABI version 4) emulated in user space for Debian's stock librdmacm.
// Design: docs/connection-manager.md §4. rdma_cm_preload.cc routes open(),
// write(), fstat() and close() of the emulated file here.
//
// This is the first part: the commands librdmacm issues before any
// connection (CREATE_ID, DESTROY_ID, BIND_IP, BIND, QUERY_ROUTE, QUERY addr,
// LISTEN, GET_EVENT). Every other command fails ENOSYS with a reason until
// the daemon's CM serves it; IDs, ports and listeners are kept in the file
// for now, not yet in the daemon.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include <sys/socket.h>

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

// One open emulated rdma_cm file. `event_fd` is the descriptor the
// application holds (one end of a SOCK_SEQPACKET pair): GET_EVENT reads one
// event record from it, so poll/epoll and O_NONBLOCK behave as on the
// kernel's file.
class UcmaFile {
 public:
  explicit UcmaFile(int event_fd, std::string sysfs_root);

  // One write() of the ABI. Returns `len` on success, else -errno; the
  // reason is in last_error() (of the calling thread). Thread-safe: the ID
  // table is locked for every command except GET_EVENT, which may block in
  // one thread while others issue commands on the same file, as on the
  // kernel's.
  ssize_t write(const void* buf, size_t len);
  static const std::string& last_error();
  size_t id_count() const { return ids_.size(); }

  static constexpr size_t kMaxIds = 4096;

 private:
  struct Id {
    uint64_t uid = 0;
    uint16_t port_space = 0;
    uint8_t qp_type = 0;
    sockaddr_storage bound{};
    bool is_bound = false;
    bool listening = false;
    int backlog = 0;
    DeviceAddress device;  // node_guid 0: bound to no device (wildcard)
  };

  static ssize_t fail(int err, const char* why);
  ssize_t command(const rdma_ucm_cmd_hdr_view& hdr, const void* in);
  ssize_t create_id(const void* in, uint16_t out_len);
  ssize_t destroy_id(const void* in, uint16_t out_len);
  ssize_t bind_ip(const void* in);
  ssize_t bind(const void* in);
  ssize_t bind_common(uint32_t id, const sockaddr* addr, socklen_t len);
  ssize_t query_route(const void* in, uint16_t out_len);
  ssize_t query(const void* in, uint16_t out_len);
  ssize_t listen(const void* in);
  ssize_t get_event(const void* in, uint16_t out_len);
  Id* find(uint32_t id);
  bool port_taken(uint16_t ps, const sockaddr* addr) const;

  int event_fd_;
  std::string sysfs_root_;
  std::mutex mu_;  // ids_, next_id_
  std::map<uint32_t, Id> ids_;
  uint32_t next_id_ = 1;
};

}  // namespace metaroce::launcher
