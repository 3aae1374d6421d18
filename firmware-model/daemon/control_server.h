// The device's control plane: a SOCK_SEQPACKET Unix socket speaking the
// versioned protocol of firmware-model/uapi/metaroce_abi.h (docs/device-abi.md).
//
// Boost.Asio drives accept and readiness; messages and their file
// descriptors (SCM_RIGHTS) are moved with recvmsg/sendmsg on the native
// socket, since Asio has no ancillary-data API. Each connection is one
// client context, identified by SO_PEERCRED. When a connection closes for
// any reason (including the client crashing), everything it owned is torn
// down through Device::close_client().
#pragma once

#include <utility>  // before Asio: Boost 1.74 + GCC 12 (docs in shared notes)

#include <boost/asio.hpp>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "firmware-model/daemon/device.h"

namespace metaroce::daemon {

class ControlServer {
 public:
  // Connections at debug, closes at info, refusals and failed requests at
  // warning (they are the client's errors, not the daemon's).
  using Log = io::LogSink;
  ControlServer(boost::asio::io_context& io, Device& device, std::string path, Log log);
  ~ControlServer();
  // Binds and listens; returns 0 or an errno with *why set.
  int start(std::string* why);
  size_t clients() const { return sessions_.size(); }

 private:
  struct Session;
  void accept_next();
  void refuse(const std::shared_ptr<Session>& s, const std::string& why);
  void wait_readable(const std::shared_ptr<Session>& s);
  bool serve_one(Session& s);  // false: close the session
  void close_session(const std::shared_ptr<Session>& s);

  boost::asio::io_context& io_;
  Device& device_;
  std::string path_;
  Log log_;
  std::unique_ptr<boost::asio::basic_socket_acceptor<boost::asio::generic::seq_packet_protocol>> acceptor_;
  std::map<Session*, std::shared_ptr<Session>> sessions_;
  static constexpr size_t kMaxRefusing = 16;
  size_t refusing_ = 0;  // refused connections waiting to be told why
};

// Sends one message with optional fds. Returns 0 or an errno. Shared by the
// client library (tools) and the server.
int send_message(int fd, uint16_t op, uint32_t seq, const void* body, size_t len,
                 const int* fds, size_t nfds);
// Receives one message into buf (header included); fds received go to
// *fds (at most max_fds). Returns bytes received, 0 on orderly close, or -errno.
ssize_t recv_message(int fd, void* buf, size_t cap, int* fds, size_t max_fds, size_t* nfds);

}  // namespace metaroce::daemon
