#include "tests/lib/verbs_setup.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

namespace mroce_test {

namespace {

timespec now() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t;
}

int64_t ms_between(const timespec &a, const timespec &b) {
  return (b.tv_sec - a.tv_sec) * 1000 + (b.tv_nsec - a.tv_nsec) / 1000000;
}

const char *state_name(ibv_qp_state s) {
  switch (s) {
    case IBV_QPS_INIT: return "INIT";
    case IBV_QPS_RTR: return "RTR";
    case IBV_QPS_RTS: return "RTS";
    default: return "?";
  }
}

int modify(ibv_qp *qp, ibv_qp_attr *a, int mask) {
  int err = ibv_modify_qp(qp, a, mask);
  if (err)
    fprintf(stderr, "ibv_modify_qp(QP 0x%x -> %s) failed: errno %d (%s)\n", qp->qp_num,
            state_name(a->qp_state), err, strerror(err));
  return err;
}

}  // namespace

Deadline::Deadline(double seconds) : end_(now()) {
  int64_t ns = static_cast<int64_t>(seconds * 1e9) + end_.tv_nsec;
  end_.tv_sec += ns / 1000000000;
  end_.tv_nsec = ns % 1000000000;
}

bool Deadline::passed() const { return remaining_ms() == 0; }

int Deadline::remaining_ms() const {
  int64_t ms = ms_between(now(), end_);
  return ms > 0 ? static_cast<int>(ms) : 0;
}

// ---- device ----

ibv_context *try_open_device(const char *name) {
  int n = 0;
  ibv_device **list = ibv_get_device_list(&n);
  ibv_context *ctx = nullptr;
  for (int i = 0; list && i < n && !ctx; i++)
    if (strcmp(ibv_get_device_name(list[i]), name) == 0) ctx = ibv_open_device(list[i]);
  if (list) ibv_free_device_list(list);
  return ctx;
}

ibv_context *open_device(const char *name) {
  errno = 0;
  ibv_context *ctx = try_open_device(name);
  if (ctx) return ctx;
  int err = errno;
  std::string seen;
  int n = 0;
  ibv_device **list = ibv_get_device_list(&n);
  for (int i = 0; list && i < n; i++) seen += std::string(" ") + ibv_get_device_name(list[i]);
  if (list) ibv_free_device_list(list);
  fprintf(stderr, "cannot open device %s (errno %d: %s); devices:%s\n", name, err,
          strerror(err), seen.empty() ? " none" : seen.c_str());
  errno = err ? err : ENODEV;
  return nullptr;
}

int roce_v2_ipv4_gid(ibv_context *ctx, ibv_gid *gid) {
  ibv_port_attr pa;
  if (ibv_query_port(ctx, 1, &pa)) return -1;
  static const uint8_t v4[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  for (int i = 0; i < pa.gid_tbl_len; i++) {
    ibv_gid_entry e;
    if (ibv_query_gid_ex(ctx, 1, i, &e, 0)) continue;
    if (e.gid_type == IBV_GID_TYPE_ROCE_V2 && memcmp(e.gid.raw, v4, 12) == 0) {
      *gid = e.gid;
      return i;
    }
  }
  return -1;
}

int local_path(ibv_context *ctx, LocalPath *path) {
  ibv_port_attr pa;
  if (int err = ibv_query_port(ctx, 1, &pa)) {
    fprintf(stderr, "ibv_query_port(1) failed: errno %d (%s)\n", err, strerror(err));
    return err;
  }
  path->active_mtu = pa.active_mtu;
  path->gid_index = roce_v2_ipv4_gid(ctx, &path->gid);
  if (path->gid_index < 0) {
    fprintf(stderr, "port 1 has no RoCE v2 IPv4-mapped GID (%d GIDs)\n", pa.gid_tbl_len);
    return ENOENT;
  }
  return 0;
}

// ---- queues and memory ----

ibv_cq *create_cq(ibv_context *ctx, int cqe) {
  ibv_cq *cq = ibv_create_cq(ctx, cqe, nullptr, nullptr, 0);
  if (!cq) fprintf(stderr, "ibv_create_cq(%d) failed: %s\n", cqe, strerror(errno));
  return cq;
}

ibv_qp *create_qp(ibv_pd *pd, ibv_cq *cq, ibv_qp_type type, ibv_qp_cap cap, ibv_srq *srq,
                  ibv_qp_cap *granted) {
  ibv_qp_init_attr ia{};
  ia.send_cq = ia.recv_cq = cq;
  ia.srq = srq;
  ia.qp_type = type;
  ia.cap = cap;
  ibv_qp *qp = ibv_create_qp(pd, &ia);
  if (!qp)
    fprintf(stderr, "ibv_create_qp(type %d, wr %u/%u, sge %u/%u, inline %u%s) failed: %s\n",
            type, cap.max_send_wr, cap.max_recv_wr, cap.max_send_sge, cap.max_recv_sge,
            cap.max_inline_data, srq ? ", on an SRQ" : "", strerror(errno));
  else if (granted)
    *granted = ia.cap;
  return qp;
}

ibv_mr *reg_mr(ibv_pd *pd, void *addr, size_t len, int access) {
  ibv_mr *mr = ibv_reg_mr(pd, addr, len, access);
  if (!mr)
    fprintf(stderr, "ibv_reg_mr(%zu bytes, access 0x%x) failed: %s\n", len, access,
            strerror(errno));
  return mr;
}

// ---- connecting ----

int modify_to_init(ibv_qp *qp, int access) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qp_access_flags = static_cast<unsigned>(access);
  return modify(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
}

int modify_to_rtr(ibv_qp *qp, const RcPeer &peer, const RcOptions &o) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = o.mtu;
  a.dest_qp_num = peer.qpn;
  a.rq_psn = 100;
  a.max_dest_rd_atomic = o.rd_atomic;
  a.min_rnr_timer = o.min_rnr_timer;
  a.ah_attr.is_global = 1;
  a.ah_attr.grh.dgid = peer.gid;
  a.ah_attr.grh.sgid_index = static_cast<uint8_t>(peer.sgid_index);
  a.ah_attr.grh.hop_limit = 64;
  a.ah_attr.port_num = 1;
  int mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
  if (qp->qp_type != IBV_QPT_UC) mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
  return modify(qp, &a, mask);
}

int modify_to_rts(ibv_qp *qp, const RcOptions &o) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTS;
  a.sq_psn = 100;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.max_rd_atomic = o.rd_atomic;
  int mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
  if (qp->qp_type != IBV_QPT_UC)
    mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
  return modify(qp, &a, mask);
}

int connect_rc(ibv_qp *qp, const RcPeer &peer, const RcOptions &o) {
  if (int err = modify_to_init(qp, o.access)) return err;
  if (int err = modify_to_rtr(qp, peer, o)) return err;
  return modify_to_rts(qp, o);
}

int connect_loopback(ibv_qp *a, ibv_qp *b, RcOptions o, bool use_port_mtu) {
  LocalPath path;
  if (int err = local_path(a->context, &path)) return err;
  if (use_port_mtu) o.mtu = path.active_mtu;
  if (int err = connect_rc(a, {b->qp_num, path.gid, path.gid_index}, o)) return err;
  return connect_rc(b, {a->qp_num, path.gid, path.gid_index}, o);
}

int ud_to_rts(ibv_qp *qp, uint32_t qkey) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qkey = qkey;
  if (int err = modify(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY))
    return err;
  a.qp_state = IBV_QPS_RTR;
  if (int err = modify(qp, &a, IBV_QP_STATE)) return err;
  a.qp_state = IBV_QPS_RTS;
  a.sq_psn = 1;
  return modify(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN);
}

ibv_ah *create_ah(ibv_pd *pd, const ibv_gid &dgid, int sgid_index) {
  ibv_ah_attr aa{};
  aa.is_global = 1;
  aa.port_num = 1;
  aa.grh.dgid = dgid;
  aa.grh.sgid_index = static_cast<uint8_t>(sgid_index);
  aa.grh.hop_limit = 64;
  ibv_ah *ah = ibv_create_ah(pd, &aa);
  if (!ah) fprintf(stderr, "ibv_create_ah(sgid %d) failed: %s\n", sgid_index, strerror(errno));
  return ah;
}

// ---- completions and events ----

bool poll_one(ibv_cq *cq, ibv_wc *wc, double seconds) {
  Deadline deadline(seconds);
  for (;;) {
    int n = ibv_poll_cq(cq, 1, wc);
    if (n == 1) return true;
    if (n < 0) {
      fprintf(stderr, "ibv_poll_cq failed: %d\n", n);
      return false;
    }
    if (deadline.passed()) {
      fprintf(stderr, "no completion within %.0f s\n", seconds);
      return false;
    }
  }
}

bool wait_async_event(ibv_context *ctx, ibv_event_type want, double seconds,
                      const std::function<bool(const ibv_async_event &)> &mine) {
  Deadline deadline(seconds);
  pollfd pf = {ctx->async_fd, POLLIN, 0};
  while (poll(&pf, 1, deadline.remaining_ms()) == 1) {
    ibv_async_event ev;
    if (ibv_get_async_event(ctx, &ev)) {
      fprintf(stderr, "ibv_get_async_event failed: %s\n", strerror(errno));
      return false;
    }
    bool match = ev.event_type == want && (!mine || mine(ev));
    ibv_ack_async_event(&ev);
    printf("  async event: %s\n", ibv_event_type_str(ev.event_type));
    if (match) return true;
  }
  fprintf(stderr, "no %s within %.0f s\n", ibv_event_type_str(want), seconds);
  return false;
}

// ---- data ----

uint32_t checksum(const uint8_t *p, size_t n) {
  uint32_t h = 2166136261u;
  for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 16777619u;
  return h;
}

void fill_random(uint8_t *p, size_t n, uint32_t seed) {
  for (size_t i = 0; i < n; i++) {
    seed = seed * 1103515245u + 12345u;
    p[i] = static_cast<uint8_t>(seed >> 16);
  }
}

// ---- side channel ----

SideChannel SideChannel::listen_on(int port, double seconds) {
  int s = socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(s >= 0);
  int one = 1;
  setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  REQUIRE(bind(s, reinterpret_cast<sockaddr *>(&a), sizeof a) == 0);
  REQUIRE(listen(s, 1) == 0);
  pollfd pf = {s, POLLIN, 0};
  if (poll(&pf, 1, Deadline(seconds).remaining_ms()) != 1) {
    fprintf(stderr, "no peer connected to port %d within %.0f s\n", port, seconds);
    exit(1);
  }
  int fd = accept(s, nullptr, nullptr);
  REQUIRE(fd >= 0);
  close(s);
  return SideChannel(fd);
}

SideChannel SideChannel::connect_to(const char *ipv4, int port, double seconds) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  REQUIRE(inet_pton(AF_INET, ipv4, &a.sin_addr) == 1);
  Deadline deadline(seconds);
  do {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(fd >= 0);
    if (connect(fd, reinterpret_cast<sockaddr *>(&a), sizeof a) == 0) return SideChannel(fd);
    close(fd);
    usleep(100000);
  } while (!deadline.passed());
  fprintf(stderr, "cannot connect to %s:%d within %.0f s: %s\n", ipv4, port, seconds,
          strerror(errno));
  exit(1);
}

void SideChannel::put(const void *p, size_t n) {
  const char *c = static_cast<const char *>(p);
  while (n) {
    ssize_t k = write(fd_, c, n);
    REQUIRE(k > 0);  // the peer went away
    c += k, n -= static_cast<size_t>(k);
  }
}

void SideChannel::get(void *p, size_t n) {
  char *c = static_cast<char *>(p);
  while (n) {
    ssize_t k = read(fd_, c, n);
    REQUIRE(k > 0);  // the peer went away
    c += k, n -= static_cast<size_t>(k);
  }
}

void SideChannel::sync(char tag) {
  send(tag);
  char got = recv<char>();
  if (got != tag) {
    fprintf(stderr, "side channel out of step: sent '%c', the peer sent '%c'\n", tag, got);
    exit(1);
  }
}

int exchange_and_connect(SideChannel &ch, ibv_qp *qp, const LocalPath &local,
                         const RcOptions &o) {
  ch.send(QpInfo{qp->qp_num, local.gid});
  QpInfo peer = ch.recv<QpInfo>();
  if (int err = connect_rc(qp, {peer.qpn, peer.gid, local.gid_index}, o)) return err;
  ch.sync('c');
  return 0;
}

// ---- refusal reasons ----

StderrCapture::StderrCapture() {
  fflush(stderr);
  f_ = tmpfile();
  REQUIRE(f_);
  saved_ = dup(2);
  dup2(fileno(f_), 2);
}

StderrCapture::~StderrCapture() {
  if (f_) text();
}

std::string StderrCapture::text() {
  if (!f_) return {};
  fflush(stderr);
  dup2(saved_, 2);
  close(saved_);
  std::string s;
  rewind(f_);
  char buf[512];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), f_)) > 0) s.append(buf, n);
  fclose(f_);
  f_ = nullptr;
  fprintf(stderr, "  reason: %s", s.c_str());
  return s;
}

}  // namespace mroce_test
