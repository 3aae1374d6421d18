// metaroced as a service: config files, sd_notify readiness datagrams,
// one daemon per interface (firmware-model/daemon/service.h).
#include "firmware-model/daemon/service.h"

#include <doctest/doctest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>

#include "firmware-model/daemon/options.h"
#include "firmware-model/engine/engine.h"

namespace metaroce::daemon {
namespace {

std::string write_file(const std::string& text) {
  char path[] = "/tmp/metaroce-conf-XXXXXX";
  int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  REQUIRE(write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()));
  close(fd);
  return path;
}

TEST_CASE("a config file becomes options the command line overrides") {
  std::string p = write_file("# metaroced on eth1\nibdev metaroce3\npaths 8  # spray wider\n\n"
                             "io packet\nv\nmetrics 127.0.0.1:9464\n");
  std::vector<std::string> args;
  std::string err;
  REQUIRE(expand_config_option({"--config", p, "--netdev", "eth1", "--paths", "2"}, &args, &err));
  Options o;
  bool help = false;
  REQUIRE(parse_options(args, &o, &err, &help));
  CHECK(o.ibdev == "metaroce3");
  CHECK(o.paths == 2);
  CHECK(o.io == io::Backend::kPacket);
  CHECK(o.verbose);
  CHECK(o.metrics_port == 9464);
  CHECK(o.metrics_addr == "127.0.0.1");
  unlink(p.c_str());
}

TEST_CASE("a bad config line names the file, the line and what is wrong") {
  struct Case {
    const char* text;
    const char* error;
  } cases[] = {
      {"paths 8\nfrobnicate 3\n", ":2: unknown argument '--frobnicate' (see --help)"},
      {"paths 0\n", ":1: --paths expects a number from 1 to 64, got '0'"},
      {"--paths 4\n", ":1: write 'paths 4' without the leading dashes"},
      {"netdev eth0\n", ":1: 'netdev' cannot be set in a config file"},
      {"paths 4 5\n", ":1: 'paths' takes one value, got more"},
      {"metrics 10.0.0.300:80\n", ":1: --metrics expects [ADDR:]PORT"},
      {"violate ack-without-sack\n", ":1: 'violate' cannot be set in a config file"},
  };
  for (const Case& c : cases) {
    std::string text = c.text;
    CAPTURE(text);
    std::string p = write_file(c.text);
    std::vector<std::string> args;
    std::string err;
    CAPTURE(err);
    CHECK_FALSE(expand_config_option({"--config", p, "--netdev", "eth1"}, &args, &err));
    CHECK(err.rfind(p, 0) == 0);
    CHECK(err.find(c.error) != std::string::npos);
    unlink(p.c_str());
  }
  std::vector<std::string> args;
  std::string err;
  CHECK_FALSE(expand_config_option({"--config", "/nonexistent/eth9.conf"}, &args, &err));
  CHECK(err == "cannot read config file /nonexistent/eth9.conf: No such file or directory");
}

TEST_CASE("--violate takes known rules on the command line only") {
  Options o;
  std::string err;
  bool help = false;
  REQUIRE(parse_options({"--netdev", "eth0", "--violate", "wrong-nack-code,no-probe-reply"}, &o,
                        &err, &help));
  CHECK(o.violate == (fw::kViolateWrongNackCode | fw::kViolateNoProbeReply));
  Options plain;
  REQUIRE(parse_options({"--netdev", "eth0"}, &plain, &err, &help));
  CHECK(plain.violate == 0);
  CHECK_FALSE(parse_options({"--netdev", "eth0", "--violate", "ack-wihtout-sack"}, &o, &err, &help));
  CHECK(err.rfind("--violate: unknown rule 'ack-wihtout-sack' (known: ack-without-sack,", 0) == 0);
}

TEST_CASE("--metrics takes a port, an IPv4 or a bracketed IPv6 address") {
  std::string a, err;
  uint16_t port = 0;
  REQUIRE(parse_listen_address("9464", &a, &port, &err));
  CHECK((a == "127.0.0.1" && port == 9464));
  REQUIRE(parse_listen_address("[::1]:80", &a, &port, &err));
  CHECK((a == "::1" && port == 80));
  CHECK_FALSE(parse_listen_address("0", &a, &port, &err));
  CHECK_FALSE(parse_listen_address("localhost:80", &a, &port, &err));
  CHECK_FALSE(parse_listen_address("127.0.0.1:65536", &a, &port, &err));
}

TEST_CASE("readiness is one datagram to NOTIFY_SOCKET, and nothing without it") {
  unsetenv("NOTIFY_SOCKET");
  std::string why;
  CHECK(notify_service_manager("READY=1", &why) == 0);

  std::string path = "/tmp/metaroce-notify-" + std::to_string(getpid());
  int fd = socket(AF_UNIX, SOCK_DGRAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strcpy(addr.sun_path, path.c_str());
  unlink(path.c_str());
  REQUIRE(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  setenv("NOTIFY_SOCKET", path.c_str(), 1);
  CHECK(notify_service_manager("READY=1\nSTATUS=up", &why) == 0);
  char buf[64] = {};
  CHECK(recv(fd, buf, sizeof(buf) - 1, MSG_DONTWAIT) == 17);
  CHECK(std::string(buf) == "READY=1\nSTATUS=up");

  setenv("NOTIFY_SOCKET", "relative/path", 1);
  CHECK(notify_service_manager("READY=1", &why) == EINVAL);
  CHECK(why == "NOTIFY_SOCKET is not a socket path or @name: 'relative/path'");
  unsetenv("NOTIFY_SOCKET");
  close(fd);
  unlink(path.c_str());
}

TEST_CASE("a second claim of an interface names the daemon that holds it") {
  std::string ifname = "mroce-t" + std::to_string(getpid() % 100000);
  std::string why;
  int fd = claim_interface(ifname, &why);
  REQUIRE(fd >= 0);
  CHECK(claim_interface(ifname, &why) < 0);
  CHECK(why == "metaroced pid " + std::to_string(getpid()) + " already serves " + ifname +
                   " in this network namespace (one daemon per interface)");
  close(fd);  // released with the socket, as when the daemon dies
  int again = claim_interface(ifname, &why);
  CHECK(again >= 0);
  close(again);
}

}  // namespace
}  // namespace metaroce::daemon
