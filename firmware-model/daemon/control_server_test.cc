// The control server on a real Unix socket: the socket's mode from the
// moment it exists, and refusals over the per-user connection limit.
#include "firmware-model/daemon/control_server.h"

#include <dlfcn.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <doctest/doctest.h>
#include <string>

namespace {

// bind() interposed: records the socket file's mode the instant bind()
// returns, before the server can do anything else with the path.
mode_t g_mode_at_bind = 0;
std::string g_watch;

}  // namespace

extern "C" int bind(int fd, const struct sockaddr* addr, socklen_t len) {
  using Fn = int (*)(int, const struct sockaddr*, socklen_t);
  static Fn real = reinterpret_cast<Fn>(dlsym(RTLD_NEXT, "bind"));
  int r = real(fd, addr, len);
  struct stat st{};
  if (r == 0 && !g_watch.empty() && lstat(g_watch.c_str(), &st) == 0) {
    g_mode_at_bind = st.st_mode & 07777;
  }
  return r;
}

namespace metaroce::daemon {
namespace {

// /tmp, not TEST_TMPDIR: Bazel's is longer than sun_path allows.
std::string temp_path(const char* name) {
  return std::string("/tmp/mroce-cs-") + name + "-" + std::to_string(getpid()) + ".sock";
}

DeviceConfig config() {
  DeviceConfig c;
  c.engine.port.gids = {proto::IpAddr::v4(0x0a000001)};
  c.engine.port.link_mtu = 1500;
  c.user_limits.max_connections = 1;
  return c;
}

int connect_to(const std::string& path) {
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  std::strncpy(sa.sun_path, path.c_str(), sizeof(sa.sun_path) - 1);
  int fd = socket(AF_UNIX, SOCK_SEQPACKET, 0);
  REQUIRE(connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) == 0);
  return fd;
}

TEST_CASE("start__socket_is_0666_the_moment_bind_creates_it_whatever_the_umask") {
  int db = eventfd(0, EFD_NONBLOCK);
  Device device(config(), nullptr, nullptr, db);
  boost::asio::io_context io;
  std::string path = temp_path("mode");
  ControlServer server(io, device, path, [](io::LogLevel, std::string_view) {});
  mode_t old = umask(077);
  g_watch = path;
  std::string why;
  REQUIRE(server.start(&why) == 0);
  g_watch.clear();
  umask(old);
  // chmod() after bind() left a window in which the path was 0700 (or
  // whatever the umask gave) and could be swapped for a symlink.
  CHECK(g_mode_at_bind == 0666);
  struct stat st{};
  REQUIRE(lstat(path.c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0666);
  CHECK(umask(old) == old);  // the process umask is restored
  close(db);
}

TEST_CASE("accept__a_connection_over_the_uid_limit_is_told_why_then_closed") {
  int db = eventfd(0, EFD_NONBLOCK);
  Device device(config(), nullptr, nullptr, db);
  boost::asio::io_context io;
  std::string path = temp_path("limit");
  ControlServer server(io, device, path, [](io::LogLevel, std::string_view) {});
  std::string why;
  REQUIRE(server.start(&why) == 0);
  int first = connect_to(path), second = connect_to(path);
  mroce_open_context_req req{MROCE_ABI_VERSION, 0};
  REQUIRE(send_message(second, MROCE_OP_OPEN_CONTEXT, 5, &req, sizeof(req), nullptr, 0) == 0);
  std::vector<uint8_t> buf(4096);
  int fds[4];
  size_t nfds = 0;
  ssize_t n = -EAGAIN;
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (n == -EAGAIN && std::chrono::steady_clock::now() < end) {
    io.run_for(std::chrono::milliseconds(1));
    n = recv_message(second, buf.data(), buf.size(), fds, 4, &nfds);
  }
  REQUIRE(n >= static_cast<ssize_t>(sizeof(mroce_msg_hdr) + sizeof(mroce_reply_status)));
  mroce_reply_status st;
  std::memcpy(&st, buf.data() + sizeof(mroce_msg_hdr), sizeof(st));
  CHECK(st.err == ENOMEM);
  CHECK(std::string(st.reason) == "per-user connection limit 1 reached for uid " +
                                      std::to_string(getuid()) + "; raise --uid-max-connections");
  CHECK(device.counters().clients_refused_user_limit == 1);
  close(first);
  close(second);
  close(db);
}

}  // namespace
}  // namespace metaroce::daemon
