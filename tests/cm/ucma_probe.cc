// ucma_probe DEVICE_IP: Debian's stock librdmacm against the emulated
// /dev/infiniband/rdma_cm (kmod-shim/launcher/ucma_emulation.cc), run by
// tests/cm/ucma_e2e_test.sh under metaroce-run. Exercises the commands the
// emulation serves so far (CREATE_ID, BIND_IP/BIND, QUERY_ROUTE, LISTEN,
// GET_EVENT, DESTROY_ID) and checks each result and errno. Prints one line
// per check; exit 0 only if all hold.
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <initializer_list>
#include <string>
#include <thread>

namespace {

int failures = 0;

void check(bool ok, const char* what) {
  printf("%s %s\n", ok ? "ok  " : "FAIL", what);
  failures += !ok;
}

sockaddr_in addr(const char* ip, uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  inet_pton(AF_INET, ip, &a.sin_addr);
  return a;
}

int bind_to(rdma_cm_id* id, const char* ip, uint16_t port) {
  sockaddr_in a = addr(ip, port);
  return rdma_bind_addr(id, reinterpret_cast<sockaddr*>(&a));
}

// True once thread `tid` of this process is blocked in recvfrom (x86_64
// syscall 45): a GET_EVENT waiting on the channel socket.
bool in_recv(pid_t tid) {
  std::ifstream f("/proc/self/task/" + std::to_string(tid) + "/syscall");
  std::string nr;
  return f >> nr && nr == "45";
}

// A thread blocked in rdma_get_cm_event must not stop other threads'
// commands on the same channel (the kernel's GET_EVENT does not).
void concurrent_get_event() {
  rdma_event_channel* ch = rdma_create_event_channel();
  check(ch != nullptr, "a second, blocking channel");
  if (!ch) return;
  std::atomic<pid_t> tid{0};
  std::atomic<int> got{0};
  std::thread getter([&] {
    tid = gettid();
    rdma_cm_event* ev = nullptr;
    got = rdma_get_cm_event(ch, &ev) == 0 ? 1 : -1;
  });
  const time_t deadline = time(nullptr) + 30;
  while (!(tid && in_recv(tid)) && time(nullptr) < deadline) usleep(1000);
  check(tid && in_recv(tid), "the getter thread waits in GET_EVENT");
  rdma_cm_id* id = nullptr;
  check(rdma_create_id(ch, &id, nullptr, RDMA_PS_TCP) == 0,
        "rdma_create_id on that channel meanwhile (no lock held across GET_EVENT)");
  if (id) check(rdma_destroy_id(id) == 0, "rdma_destroy_id meanwhile");
  shutdown(ch->fd, SHUT_RD);  // wakes the getter: no event, an error
  getter.join();
  check(got == -1, "the getter returns an error once the channel is shut down");
  rdma_destroy_event_channel(ch);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: ucma_probe DEVICE_IP\n");
    return 2;
  }
  rdma_event_channel* ch = rdma_create_event_channel();
  if (!ch) {
    printf("FAIL rdma_create_event_channel: %s\n", strerror(errno));
    return 1;
  }
  struct stat st;
  check(fstat(ch->fd, &st) == 0 && S_ISCHR(st.st_mode), "the channel is a character device");

  rdma_cm_id *any = nullptr, *dup = nullptr, *dev = nullptr, *bad = nullptr;
  check(rdma_create_id(ch, &any, nullptr, RDMA_PS_TCP) == 0, "rdma_create_id TCP");
  check(rdma_create_id(ch, &dup, nullptr, RDMA_PS_TCP) == 0, "a second ID");
  check(rdma_create_id(ch, &dev, nullptr, RDMA_PS_TCP) == 0, "a third ID");
  check(rdma_create_id(ch, &bad, nullptr, RDMA_PS_TCP) == 0, "a fourth ID");

  check(bind_to(any, "0.0.0.0", 18515) == 0, "bind 0.0.0.0:18515");
  check(rdma_get_src_port(any) == htons(18515), "the bound port is reported back (QUERY_ROUTE)");
  check(any->verbs == nullptr, "a wildcard bind opens no device");
  check(bind_to(dup, "0.0.0.0", 18515) == -1 && errno == EADDRINUSE, "same port again: EADDRINUSE");

  check(bind_to(dev, argv[1], 0) == 0, "bind DEVICE_IP:0");
  check(ntohs(rdma_get_src_port(dev)) >= 32768, "port 0 gets an ephemeral port");
  check(dev->verbs && strncmp(ibv_get_device_name(dev->verbs->device), "metaroce", 8) == 0,
        "bound to the metaroce device that owns the address (node_guid matched)");
  check(bind_to(bad, "192.0.2.1", 1) == -1 && errno == EADDRNOTAVAIL,
        "an address no device has: EADDRNOTAVAIL");

  check(rdma_listen(any, 8) == 0, "rdma_listen");
  fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK);
  rdma_cm_event* ev = nullptr;
  check(rdma_get_cm_event(ch, &ev) == -1 && errno == EAGAIN, "non-blocking get_cm_event: EAGAIN");
  pollfd p{ch->fd, POLLIN, 0};
  check(poll(&p, 1, 0) == 0, "poll: no event pending");

  // Address resolution by the daemon (its own address: no neighbour
  // needed); the event makes the non-blocking channel readable.
  sockaddr_in dst = addr(argv[1], 1);
  check(rdma_resolve_addr(bad, nullptr, reinterpret_cast<sockaddr*>(&dst), 1000) == 0,
        "rdma_resolve_addr to the device's own address");
  check(poll(&p, 1, 30000) == 1 && (p.revents & POLLIN), "poll: the channel becomes readable");
  check(rdma_get_cm_event(ch, &ev) == 0 && ev->event == RDMA_CM_EVENT_ADDR_RESOLVED && ev->id == bad,
        "non-blocking get_cm_event: ADDR_RESOLVED for that ID");
  if (ev) rdma_ack_cm_event(ev);
  check(bad->verbs != nullptr, "the resolved ID has opened the device (QUERY_ROUTE's node_guid)");

  for (rdma_cm_id* id : {any, dup, dev, bad}) check(rdma_destroy_id(id) == 0, "rdma_destroy_id");
  // A dup of the channel descriptor names the same device file; closing the
  // original leaves the file open through the dup.
  const int copy = ::dup(ch->fd);
  check(copy >= 0 && fstat(copy, &st) == 0 && S_ISCHR(st.st_mode), "a dup of the channel is the device too");
  const int orig = ch->fd;
  ch->fd = copy;
  close(orig);
  rdma_cm_id* later = nullptr;
  check(rdma_create_id(ch, &later, nullptr, RDMA_PS_TCP) == 0 && rdma_destroy_id(later) == 0,
        "commands through the dup once the original is closed");
  rdma_destroy_event_channel(ch);
  concurrent_get_event();
  printf("ucma_probe: %s\n", failures ? "FAILED" : "all checks passed");
  return failures ? 1 : 0;
}
