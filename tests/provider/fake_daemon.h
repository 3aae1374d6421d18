// A fake metaroced for unit tests: a thread that speaks the control protocol
// on one end of a SOCK_SEQPACKET socketpair, hands out memfd rings the test
// can fill or inspect, records each request as a short string, and can
// inject an error into the next request or hang up.
#pragma once

#include <stdint.h>

#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "firmware-model/uapi/metaroce_abi.h"

namespace mroce_test {

class FakeDaemon {
 public:
  FakeDaemon();
  explicit FakeDaemon(int server_fd);  // serve an accepted connection
  ~FakeDaemon();

  int client_fd() const { return client_fd_; }   // hand to mroce_context_open
  std::vector<std::string> log();                // "CREATE_CQ cqe=4 channel=1", ...
  void fail_next(int err, const char *reason);   // next request fails
  void hang_up();                                // close the daemon's end
  int doorbells();                               // eventfd reads so far (drains)
  void send_async(uint64_t element, uint32_t event_type);

  // Rings the fake created, mapped in this process too.
  mroce_ring_hdr *cq_ring(int i) { return cq_rings_.at(i); }
  mroce_ring_hdr *sq_ring(int i) { return sq_rings_.at(i); }
  mroce_ring_hdr *rq_ring(int i) { return rq_rings_.at(i); }
  int channel_fd() const { return channel_fd_; }  // fd received with CREATE_CQ

  static constexpr uint32_t kQueueEntries = 8;

 private:
  void serve();
  void reply(const mroce_msg_hdr &h, int err, const void *body, size_t len,
             std::vector<int> fds = {});
  void handle(const mroce_msg_hdr &h, const uint8_t *body, size_t len, std::vector<int> &fds);
  int make_ring_memfd(size_t bytes);
  void note(std::string s);

  int client_fd_ = -1, server_fd_ = -1, doorbell_fd_ = -1, async_peer_fd_ = -1;
  int channel_fd_ = -1;
  int fail_err_ = 0;
  std::string fail_reason_;
  std::string line_;  // the request being handled, as logged
  std::mutex mu_;
  std::vector<std::string> log_;
  std::vector<mroce_ring_hdr *> cq_rings_, sq_rings_, rq_rings_;
  std::vector<std::pair<void *, size_t>> maps_;
  uint32_t next_handle_ = 1;
  std::thread thread_;
};

}  // namespace mroce_test
