// A small client of the device's control protocol (docs/device-abi.md
// §Control protocol): one SOCK_SEQPACKET connection, one request and one
// reply at a time, matched by seq. Enough for observation (counters, QP
// list); the provider is the full client.
//
// It does not link the daemon (whose library pulls in AF_XDP and Asio):
// the framing is small and tools/ctl/client_test.cc checks it against the
// daemon's own send_message()/recv_message().
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "firmware-model/uapi/metaroce_abi.h"
#include "tools/ctl/format.h"

namespace metaroce::ctl {

class ControlClient {
 public:
  ControlClient() = default;
  ~ControlClient();
  ControlClient(const ControlClient&) = delete;
  ControlClient& operator=(const ControlClient&) = delete;

  // Connects to `path`, the socket of device `dev`. A dead daemon
  // (ECONNREFUSED, or no socket file) gives "metaroced for DEV is not
  // running (no one listens on PATH)".
  int connect(const std::string& path, const std::string& dev, std::string* why);
  // For tests: use an already connected socket (taken over).
  void adopt(int fd) { fd_ = fd; }
  void set_timeout_ms(int ms) { timeout_ms_ = ms; }

  // One request/reply. On a non-zero err in the reply returns it with
  // *why = "<OP>: <strerror>: <reason>"; *body gets the op's reply body
  // (after struct mroce_reply_status). File descriptors in the reply are
  // closed: this client maps nothing.
  int call(uint16_t op, const void* req, size_t len, std::vector<uint8_t>* body, std::string* why,
           std::vector<int>* fds = nullptr);  // given: the reply's fds are handed over, not closed

  int open_context(std::string* why);
  // The same, keeping the context's async event socket, which the daemon
  // writes port (and own QP/CQ) events to: a long-lived client (monitor)
  // must read them, or each event it is sent counts as
  // async_event_write_failed once the socket is full or closed.
  int open_context_keeping_events(std::string* why);
  // Reads and discards the async events waiting; returns how many.
  size_t drain_async_events();
  // qpn 0xffffffff: device counters.
  int query_counters(uint32_t qpn, std::vector<Counter>* out, std::string* why);
  int list_qps(std::vector<uint32_t>* out, std::string* why);
  // RTT, window, pacing, paths of one QP (QUERY_QP_TRANSPORT).
  int query_qp_transport(uint32_t qpn, mroce_qp_transport_resp* out, std::string* why);

 private:
  int fd_ = -1;
  int async_fd_ = -1;
  uint32_t seq_ = 0;
  int timeout_ms_ = 10000;
};

// "QUERY_COUNTERS" for MROCE_OP_QUERY_COUNTERS; "op 99" for unknown ones.
std::string op_name(uint16_t op);

}  // namespace metaroce::ctl
