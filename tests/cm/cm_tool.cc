// A small librdmacm program for the paths no stock tool covers alone
// (cm_e2e_test.sh): rdma_getaddrinfo and rdma_create_ep (synchronous IDs,
// whose events librdmacm reads with blocking GET_EVENT), rdma_migrate_id to
// an asynchronous channel, and non-blocking rdma_get_cm_event under epoll.
//
//   cm_tool listen IP PORT   accept one connection, print "accepted", then
//                            wait (the test kills it: a crashed listener)
//   cm_tool connect IP PORT  connect, print "connected", migrate the ID to a
//                            new channel, then wait under epoll (60 s at
//                            most) for the next event and print its name
#include <errno.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <fcntl.h>
#include <time.h>
#include <unistd.h>

namespace {

int die(const char* what) {
  printf("FAIL %s: %s\n", what, strerror(errno));
  fflush(stdout);
  return 1;
}

rdma_addrinfo* resolve(const char* ip, const char* port, bool passive) {
  rdma_addrinfo hints{};
  hints.ai_port_space = RDMA_PS_TCP;
  if (passive) hints.ai_flags = RAI_PASSIVE;
  rdma_addrinfo* res = nullptr;
  return rdma_getaddrinfo(ip, port, &hints, &res) == 0 ? res : nullptr;
}

ibv_qp_init_attr qp_attr() {
  ibv_qp_init_attr a{};
  a.cap.max_send_wr = a.cap.max_recv_wr = 4;
  a.cap.max_send_sge = a.cap.max_recv_sge = 1;
  a.qp_type = IBV_QPT_RC;
  a.sq_sig_all = 1;
  return a;
}

int listen_one(const char* ip, const char* port) {
  rdma_addrinfo* ai = resolve(ip, port, true);
  if (!ai) return die("rdma_getaddrinfo");
  rdma_cm_id* listener = nullptr;
  ibv_qp_init_attr attr = qp_attr();
  if (rdma_create_ep(&listener, ai, nullptr, &attr)) return die("rdma_create_ep");
  if (rdma_listen(listener, 4)) return die("rdma_listen");
  rdma_cm_id* id = nullptr;
  // Blocking GET_EVENT; librdmacm gives the new ID a QP (the ep's attributes).
  if (rdma_get_request(listener, &id)) return die("rdma_get_request");
  if (!id->qp) return die("rdma_get_request made no QP");
  if (rdma_accept(id, nullptr)) return die("rdma_accept");
  printf("accepted\n");
  fflush(stdout);
  for (;;) pause();
}

// Waits under epoll for the channel to become readable, then reads the
// event without blocking.
int wait_event(rdma_event_channel* ch, int seconds) {
  int ep = epoll_create1(EPOLL_CLOEXEC);
  epoll_event want{};
  want.events = EPOLLIN;
  if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, ch->fd, &want)) return die("epoll");
  fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK);
  rdma_cm_event* ev = nullptr;
  if (rdma_get_cm_event(ch, &ev) == 0 || errno != EAGAIN) return die("non-blocking get_cm_event before any event");
  printf("idle: EAGAIN\n");
  epoll_event got{};
  const int n = epoll_wait(ep, &got, 1, seconds * 1000);
  if (n != 1) {
    printf("FAIL no event within %d s\n", seconds);
    return 1;
  }
  if (rdma_get_cm_event(ch, &ev)) return die("rdma_get_cm_event");
  printf("event %s status %d\n", rdma_event_str(ev->event), ev->status);
  rdma_ack_cm_event(ev);
  return 0;
}

int connect_and_wait(const char* ip, const char* port) {
  rdma_addrinfo* ai = resolve(ip, port, false);
  if (!ai) return die("rdma_getaddrinfo");
  rdma_cm_id* id = nullptr;
  ibv_qp_init_attr attr = qp_attr();
  if (rdma_create_ep(&id, ai, nullptr, &attr)) return die("rdma_create_ep");
  if (rdma_connect(id, nullptr)) return die("rdma_connect");
  printf("connected\n");
  rdma_event_channel* ch = rdma_create_event_channel();
  if (!ch) return die("rdma_create_event_channel");
  if (rdma_migrate_id(id, ch)) return die("rdma_migrate_id");
  printf("migrated\n");
  fflush(stdout);
  return wait_event(ch, 60);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: cm_tool listen|connect IP PORT\n");
    return 2;
  }
  setvbuf(stdout, nullptr, _IOLBF, 0);
  if (strcmp(argv[1], "listen") == 0) return listen_one(argv[2], argv[3]);
  if (strcmp(argv[1], "connect") == 0) return connect_and_wait(argv[2], argv[3]);
  return 2;
}
