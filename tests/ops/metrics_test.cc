// The metrics endpoint against hostile HTTP clients, and its text
// (firmware-model/daemon/metrics.h). A real server on loopback, driven by
// its own io_context thread; the test is the client.
#include "firmware-model/daemon/metrics.h"

#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>

namespace metaroce::daemon {
namespace {

TEST_CASE("exposition text: device and per-QP counters under stable names") {
  std::string t = exposition_text("metaroce0", {{"tx_packets", 5}, {"bad-name", 1}},
                                  {{17, {{"timeouts", 2}}}, {18, {{"timeouts", 0}}}},
                                  {{"qps", 2}});
  CHECK(t ==
        "# TYPE metaroce_qp_timeouts_total counter\n"
        "metaroce_qp_timeouts_total{device=\"metaroce0\",qpn=\"17\"} 2\n"
        "metaroce_qp_timeouts_total{device=\"metaroce0\",qpn=\"18\"} 0\n"
        "# TYPE metaroce_tx_packets_total counter\n"
        "metaroce_tx_packets_total{device=\"metaroce0\"} 5\n"
        "# TYPE metaroce_qps gauge\n"
        "metaroce_qps{device=\"metaroce0\"} 2\n"
        "# EOF\n");
}

struct Fixture {
  explicit Fixture(MetricsLimits l) : server(io, [](const MetricsServerStats&) {
    return std::string("metaroce_up 1\n");
  }, l) {
    std::string why;
    REQUIRE(server.start("127.0.0.1", 0, &why) == 0);
    port = server.port();
    thread = std::thread([this] {
      auto guard = boost::asio::make_work_guard(io);
      io.run();
    });
  }
  ~Fixture() {
    io.stop();
    thread.join();
  }
  int connect_client() const {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0);
    return fd;
  }
  // Everything the server sends until it closes (30 s deadline).
  static std::string read_all(int fd) {
    std::string out;
    char buf[4096];
    for (;;) {
      pollfd p{fd, POLLIN, 0};
      if (poll(&p, 1, 30000) != 1) FAIL("server neither answered nor closed in 30 s");
      ssize_t n = read(fd, buf, sizeof(buf));
      if (n <= 0) return out;
      out.append(buf, static_cast<size_t>(n));
    }
  }
  std::string request(const std::string& req) const {
    int fd = connect_client();
    REQUIRE(write(fd, req.data(), req.size()) == static_cast<ssize_t>(req.size()));
    std::string r = read_all(fd);
    close(fd);
    return r;
  }
  boost::asio::io_context io;
  MetricsServer server;
  uint16_t port = 0;
  std::thread thread;
};

TEST_CASE("only GET /metrics is served; everything else is refused and counted") {
  MetricsLimits l;
  Fixture f(l);
  std::string ok = f.request("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
  CHECK(ok.rfind("HTTP/1.1 200 OK\r\n", 0) == 0);
  CHECK(ok.find("Content-Type: text/plain; version=0.0.4") != std::string::npos);
  CHECK(ok.substr(ok.size() - 14) == "metaroce_up 1\n");
  CHECK(f.request("POST /metrics HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 405 ", 0) == 0);
  CHECK(f.request("GET /../etc/passwd HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 404 ", 0) == 0);
  CHECK(f.request(std::string(8000, 'A')).rfind("HTTP/1.1 431 ", 0) == 0);
  f.io.stop();
  f.thread.join();
  f.thread = std::thread([] {});
  CHECK(f.server.stats().scrapes == 1);
  CHECK(f.server.stats().bad_requests == 3);
}

TEST_CASE("connections over the limit are closed; a silent client is cut off") {
  MetricsLimits l;
  l.max_connections = 2;
  l.request_timeout = std::chrono::milliseconds(500);
  Fixture f(l);
  int a = f.connect_client(), b = f.connect_client();
  // Both idle past the deadline are closed by the server.
  CHECK(Fixture::read_all(a).empty());
  CHECK(Fixture::read_all(b).empty());
  close(a);
  close(b);
  l.request_timeout = std::chrono::milliseconds(60000);
  Fixture g(l);
  int c = g.connect_client(), d = g.connect_client();
  // Wait until the server holds both (it answers no one until then), then
  // a third is closed unread.
  std::string third;
  for (int tries = 0; tries < 300; tries++) {
    int e = g.connect_client();
    third = Fixture::read_all(e);
    close(e);
    if (third.empty()) break;
  }
  CHECK(third.empty());
  CHECK(g.request("GET /metrics HTTP/1.1\r\n\r\n").empty());  // still full
  close(c);
  close(d);
  g.io.stop();
  g.thread.join();
  g.thread = std::thread([] {});
  f.io.stop();
  f.thread.join();
  f.thread = std::thread([] {});
  CHECK(f.server.stats().timeouts == 2);
  CHECK(g.server.stats().refused_busy >= 2);
}

TEST_CASE("a port already in use is a clear error") {
  boost::asio::io_context io;
  MetricsServer first(io, [](const MetricsServerStats&) { return std::string(); });
  std::string why;
  REQUIRE(first.start("127.0.0.1", 0, &why) == 0);
  MetricsServer second(io, [](const MetricsServerStats&) { return std::string(); });
  CHECK(second.start("127.0.0.1", first.port(), &why) == EADDRINUSE);
  CHECK(why == "metrics: cannot listen on 127.0.0.1 port " + std::to_string(first.port()) +
                   ": the port is already in use");
}

}  // namespace
}  // namespace metaroce::daemon
