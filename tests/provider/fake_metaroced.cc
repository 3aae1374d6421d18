// fake_metaroced SOCKET: serves the control protocol of tests/provider's
// FakeDaemon on a listening socket, one FakeDaemon per connection. With a
// published device tree it lets stock tools (ibv_devices, ibv_devinfo) load
// the provider through the real libibverbs without the real daemon.
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <memory>
#include <vector>

#include "tests/provider/fake_daemon.h"

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: fake_metaroced SOCKET\n");
    return 2;
  }
  signal(SIGPIPE, SIG_IGN);
  int l = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", argv[1]);
  unlink(argv[1]);
  if (bind(l, reinterpret_cast<sockaddr *>(&sa), sizeof(sa)) || listen(l, 16)) {
    perror("fake_metaroced: bind/listen");
    return 1;
  }
  std::vector<std::unique_ptr<mroce_test::FakeDaemon>> clients;
  for (;;) {
    int fd = accept4(l, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    clients.push_back(std::make_unique<mroce_test::FakeDaemon>(fd));
  }
}
