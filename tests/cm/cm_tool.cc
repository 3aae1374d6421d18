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
//   cm_tool hold IP PORT     listen with a backlog of 4 and never accept
//                            (the REQs stay pending): print "listening"
//   cm_tool flood IP PORT ENDED  20 connects at once from one channel;
//                            once ENDED of them have ended (or after 60 s),
//                            print how ("rejected R established E other O
//                            pending P")
#include <errno.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <vector>

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


int hold(const char* ip, const char* port) {
  rdma_addrinfo* ai = resolve(ip, port, true);
  if (!ai) return die("rdma_getaddrinfo");
  rdma_event_channel* ch = rdma_create_event_channel();
  rdma_cm_id* listener = nullptr;
  if (!ch || rdma_create_id(ch, &listener, nullptr, RDMA_PS_TCP)) return die("rdma_create_id");
  if (rdma_bind_addr(listener, ai->ai_src_addr)) return die("rdma_bind_addr");
  if (rdma_listen(listener, 4)) return die("rdma_listen");
  printf("listening\n");
  for (;;) pause();  // never reads a CONNECT_REQUEST: each stays pending
}

// One connect's progress: resolve the address, the route, then connect
// with a QP of its own.
int advance(rdma_cm_event* ev) {
  rdma_cm_id* id = ev->id;
  switch (ev->event) {
    case RDMA_CM_EVENT_ADDR_RESOLVED:
      return rdma_resolve_route(id, 2000) ? die("rdma_resolve_route") : 0;
    case RDMA_CM_EVENT_ROUTE_RESOLVED: {
      ibv_qp_init_attr attr = qp_attr();
      if (rdma_create_qp(id, nullptr, &attr)) return die("rdma_create_qp");
      rdma_conn_param p{};
      p.retry_count = 7;
      return rdma_connect(id, &p) ? die("rdma_connect") : 0;
    }
    default:
      return 0;
  }
}

int flood(const char* ip, const char* port, int ended) {
  constexpr int kConnects = 20;
  rdma_addrinfo* ai = resolve(ip, port, false);
  rdma_event_channel* ch = rdma_create_event_channel();
  if (!ai || !ch) return die("rdma_getaddrinfo or channel");
  std::vector<rdma_cm_id*> ids(kConnects);
  for (auto& id : ids) {
    if (rdma_create_id(ch, &id, nullptr, RDMA_PS_TCP)) return die("rdma_create_id");
    if (rdma_resolve_addr(id, nullptr, ai->ai_dst_addr, 2000)) return die("rdma_resolve_addr");
  }
  int rejected = 0, established = 0, other = 0;
  const time_t end = time(nullptr) + 60;
  fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK);
  while (rejected + established + other < ended && time(nullptr) < end) {
    rdma_cm_event* ev = nullptr;
    if (rdma_get_cm_event(ch, &ev)) {
      if (errno != EAGAIN) return die("rdma_get_cm_event");
      usleep(10000);
      continue;
    }
    if (advance(ev)) return 1;
    if (ev->event == RDMA_CM_EVENT_REJECTED) ++rejected;
    else if (ev->event == RDMA_CM_EVENT_ESTABLISHED) ++established;
    else if (ev->event != RDMA_CM_EVENT_ADDR_RESOLVED && ev->event != RDMA_CM_EVENT_ROUTE_RESOLVED) {
      printf("event %s status %d\n", rdma_event_str(ev->event), ev->status);
      ++other;
    }
    rdma_ack_cm_event(ev);
  }
  printf("rejected %d established %d other %d pending %d\n", rejected, established, other,
         kConnects - rejected - established - other);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4 && !(argc == 5 && strcmp(argv[1], "flood") == 0)) {
    fprintf(stderr, "usage: cm_tool listen|connect|hold IP PORT | flood IP PORT ENDED\n");
    return 2;
  }
  setvbuf(stdout, nullptr, _IOLBF, 0);
  if (strcmp(argv[1], "listen") == 0) return listen_one(argv[2], argv[3]);
  if (strcmp(argv[1], "connect") == 0) return connect_and_wait(argv[2], argv[3]);
  if (strcmp(argv[1], "hold") == 0) return hold(argv[2], argv[3]);
  if (strcmp(argv[1], "flood") == 0) return flood(argv[2], argv[3], atoi(argv[4]));
  return 2;
}
