// The client against the daemon's own framing: the server side of each
// case uses firmware-model/daemon's send_message()/recv_message().
#include "tools/ctl/client.h"

#include <doctest/doctest.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <functional>
#include <thread>

#include "firmware-model/daemon/control_server.h"
#include "firmware-model/uapi/metaroce_abi.h"

namespace metaroce::ctl {
namespace {

using daemon::recv_message;
using daemon::send_message;

struct Request {
  mroce_msg_hdr hdr;
  std::vector<uint8_t> body;
};

// Serves `n` requests on fd with `answer` (which sends the reply).
std::thread serve(int fd, int n, std::function<void(int, const Request&)> answer) {
  return std::thread([=] {
    for (int i = 0; i < n; i++) {
      pollfd p{fd, POLLIN, 0};
      if (poll(&p, 1, 30000) != 1) return;
      std::vector<uint8_t> buf(64 * 1024);
      int fds[4];
      size_t nfds = 0;
      ssize_t len = recv_message(fd, buf.data(), buf.size(), fds, 4, &nfds);
      if (len < static_cast<ssize_t>(sizeof(mroce_msg_hdr))) return;
      Request r;
      std::memcpy(&r.hdr, buf.data(), sizeof(r.hdr));
      r.body.assign(buf.begin() + sizeof(r.hdr), buf.begin() + len);
      answer(fd, r);
    }
  });
}

void reply(int fd, const Request& r, int err, const char* reason, const std::vector<uint8_t>& body,
           const int* fds = nullptr, size_t nfds = 0) {
  mroce_reply_status st{};
  st.err = err;
  std::strncpy(st.reason, reason, sizeof(st.reason) - 1);
  std::vector<uint8_t> b(sizeof(st));
  std::memcpy(b.data(), &st, sizeof(st));
  b.insert(b.end(), body.begin(), body.end());
  send_message(fd, r.hdr.op, r.hdr.seq, b.data(), b.size(), fds, nfds);
}

template <class T>
void put(std::vector<uint8_t>* b, const T& v) {
  const auto* p = reinterpret_cast<const uint8_t*>(&v);
  b->insert(b->end(), p, p + sizeof(v));
}

struct Pair {
  Pair() { REQUIRE(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) == 0); }
  ~Pair() { close(sv[1]); }
  int sv[2];
};

TEST_CASE("query_counters__request_encoding_and_reply_decoding") {
  Pair p;
  ControlClient c;
  c.adopt(p.sv[0]);
  uint32_t asked = 0;
  std::thread t = serve(p.sv[1], 1, [&](int fd, const Request& r) {
    CHECK(r.hdr.abi_version == MROCE_ABI_VERSION);
    CHECK(r.hdr.op == MROCE_OP_QUERY_COUNTERS);
    CHECK(r.hdr.length == sizeof(mroce_query_counters_req));
    mroce_query_counters_req q;
    std::memcpy(&q, r.body.data(), sizeof(q));
    asked = q.qpn;
    std::vector<uint8_t> b;
    put(&b, mroce_query_counters_resp{2, 0});
    mroce_counter a{}, z{};
    std::strcpy(a.name, "tx_packets");
    a.value = 42;
    std::strcpy(z.name, "rx_packets");
    put(&b, a);
    put(&b, z);
    reply(fd, r, 0, "", b);
  });
  std::vector<Counter> out;
  std::string why;
  CHECK(c.query_counters(0xffffffffu, &out, &why) == 0);
  t.join();
  CHECK(asked == 0xffffffffu);
  REQUIRE(out.size() == 2);
  CHECK(out[0].name == "tx_packets");
  CHECK(out[0].value == 42);
  CHECK(out[1].name == "rx_packets");
}

TEST_CASE("call__errno_and_reason_from_the_daemon") {
  Pair p;
  ControlClient c;
  c.adopt(p.sv[0]);
  std::thread t = serve(p.sv[1], 1, [](int fd, const Request& r) {
    reply(fd, r, ENOENT, "no such QP", {});
  });
  std::vector<Counter> out;
  std::string why;
  CHECK(c.query_counters(99, &out, &why) == ENOENT);
  t.join();
  CHECK(why == "QUERY_COUNTERS: No such file or directory: no such QP");
}

TEST_CASE("open_context__reply_fds_are_closed_and_list_qps_decodes") {
  Pair p;
  ControlClient c;
  c.adopt(p.sv[0]);
  int pipefd[2];
  REQUIRE(pipe(pipefd) == 0);
  std::thread t = serve(p.sv[1], 2, [&](int fd, const Request& r) {
    if (r.hdr.op == MROCE_OP_OPEN_CONTEXT) {
      CHECK(r.body.size() == sizeof(mroce_open_context_req));
      std::vector<uint8_t> b;
      put(&b, mroce_open_context_resp{});
      reply(fd, r, 0, "", b, pipefd, 2);
      return;
    }
    CHECK(r.hdr.op == MROCE_OP_LIST_QPS);
    CHECK(r.hdr.length == 0);
    std::vector<uint8_t> b;
    put(&b, uint32_t{2});
    put(&b, uint32_t{17});
    put(&b, uint32_t{18});
    reply(fd, r, 0, "", b);
  });
  std::string why;
  CHECK(c.open_context(&why) == 0);
  std::vector<uint32_t> qps;
  CHECK(c.list_qps(&qps, &why) == 0);
  t.join();
  CHECK(qps == std::vector<uint32_t>{17, 18});
  // Our copies are closed: closing the originals leaves the pipe with no
  // writer, so a read sees EOF.
  close(pipefd[1]);
  char ch;
  CHECK(read(pipefd[0], &ch, 1) == 0);
  close(pipefd[0]);
}

TEST_CASE("open_context_keeping_events__keeps_the_async_socket_and_drains_it") {
  Pair p;
  ControlClient c;
  c.adopt(p.sv[0]);
  int doorbell[2], events[2];
  REQUIRE(pipe(doorbell) == 0);
  REQUIRE(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, events) == 0);
  std::thread t = serve(p.sv[1], 1, [&](int fd, const Request& r) {
    CHECK(r.hdr.op == MROCE_OP_OPEN_CONTEXT);
    std::vector<uint8_t> b;
    put(&b, mroce_open_context_resp{});
    int fds[2] = {doorbell[1], events[1]};
    reply(fd, r, 0, "", b, fds, 2);
  });
  std::string why;
  CHECK(c.open_context_keeping_events(&why) == 0);
  t.join();
  close(events[1]);  // the client holds its own copy now
  CHECK(c.drain_async_events() == 0);
  mroce_async_event ev{1, 10, 0};  // IBV_EVENT_PORT_ERR
  REQUIRE(send(events[0], &ev, sizeof(ev), 0) == sizeof(ev));
  REQUIRE(send(events[0], &ev, sizeof(ev), 0) == sizeof(ev));
  CHECK(c.drain_async_events() == 2);
  CHECK(c.drain_async_events() == 0);
  // The doorbell copy is closed: with the original closed too, EOF.
  close(doorbell[1]);
  char ch;
  CHECK(read(doorbell[0], &ch, 1) == 0);
  close(doorbell[0]);
  close(events[0]);
}

TEST_CASE("call__malformed_and_short_replies") {
  Pair p;
  ControlClient c;
  c.adopt(p.sv[0]);
  std::thread t = serve(p.sv[1], 2, [](int fd, const Request& r) {
    if (r.hdr.seq == 1) {
      send_message(fd, r.hdr.op, r.hdr.seq + 5, nullptr, 0, nullptr, 0);  // too short
    } else {
      std::vector<uint8_t> b;
      put(&b, uint32_t{3});  // says 3 QPs, carries none
      reply(fd, r, 0, "", b);
    }
  });
  std::string why;
  std::vector<uint32_t> qps;
  CHECK(c.list_qps(&qps, &why) == EPROTO);
  CHECK(why == "LIST_QPS: reply of 16 bytes is shorter than header + status");
  CHECK(c.list_qps(&qps, &why) == EPROTO);
  CHECK(why == "LIST_QPS: reply says 3 QPs but has 4 bytes");
  t.join();
}

TEST_CASE("call__daemon_closing_the_connection") {
  Pair p;
  ControlClient c;
  c.adopt(p.sv[0]);
  shutdown(p.sv[1], SHUT_RDWR);
  std::string why;
  std::vector<uint32_t> qps;
  CHECK(c.list_qps(&qps, &why) != 0);
}

TEST_CASE("connect__nobody_listening_says_the_daemon_is_not_running") {
  ControlClient c;
  std::string why;
  CHECK(c.connect("/tmp/ctl-test-no-such.sock", "metaroce9", &why) == ENOENT);
  CHECK(why ==
        "metaroced for metaroce9 is not running (no one listens on /tmp/ctl-test-no-such.sock)");
}

TEST_CASE("op_name") {
  CHECK(op_name(MROCE_OP_OPEN_CONTEXT) == "OPEN_CONTEXT");
  CHECK(op_name(MROCE_OP_LIST_QPS) == "LIST_QPS");
  CHECK(op_name(0) == "op 0");
  CHECK(op_name(99) == "op 99");
}

}  // namespace
}  // namespace metaroce::ctl
