// Daemon core without a network: the control plane, the rings and the DMA
// engine, driving a real transport engine over loopback (two QPs on one
// device, as a real NIC supports). The client is this test process.
#include "firmware-model/daemon/device.h"

#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <random>
#include <doctest/doctest.h>
#include <numeric>
#include <thread>
#include <vector>

#include "firmware-model/daemon/daemon_loop.h"
#include "firmware-model/daemon/dma.h"
#include "firmware-model/daemon/options.h"
#include "firmware-model/hw/hw_offload_backend.h"
#include "firmware-model/hw/register_space.h"

namespace metaroce::daemon {
namespace {

template <class T>
std::span<const uint8_t> bytes_of(const T& v) {
  return {reinterpret_cast<const uint8_t*>(&v), sizeof(T)};
}

// This process's own address space, as a client's would be bound.
ClientMemory* self_memory() {
  std::string why;
  static std::unique_ptr<ClientMemory> m = ClientMemory::bind_pid(getpid(), &why);
  REQUIRE(m);
  return m.get();
}

template <class T>
T reply_as(const Device::Reply& r) {
  T v{};
  REQUIRE(r.body.size() >= sizeof(T));
  std::memcpy(&v, r.body.data(), sizeof(T));
  return v;
}

// A device with no packet I/O whose only GID is 10.0.0.1: every QP talks
// to another QP on the same device.
struct Fixture {
  int doorbell = eventfd(0, EFD_NONBLOCK);
  Device device{config(), nullptr, nullptr, doorbell};
  Device::Client* client = nullptr;
  std::vector<std::pair<void*, size_t>> maps;

  static DeviceConfig config() {
    DeviceConfig c;
    c.engine.port.gids = {proto::IpAddr::v4(0x0a000001)};
    c.engine.port.link_mtu = 1500;
    c.limits.max_pd = 2;
    return c;
  }
  explicit Fixture(const DeviceConfig& cfg = config()) : device(cfg, nullptr, nullptr, doorbell) {
    client = open(getuid());
  }
  // On a packet I/O (tests of the soft NIC's port side).
  Fixture(const DeviceConfig& cfg, io::PacketIo* io, LinkInterface* link)
      : device(cfg, io, link, doorbell) {
    client = open(getuid());
  }
  // A further connection of `uid`, its context open.
  Device::Client* open(uid_t uid) {
    Device::Client* c = device.open_client(getpid(), uid, -1);
    REQUIRE(c != nullptr);
    mroce_open_context_req req{MROCE_ABI_VERSION, 0};
    Device::Reply r = call_as(*c, MROCE_OP_OPEN_CONTEXT, bytes_of(req));
    REQUIRE(r.err == 0);
    for (int fd : r.fds) close(fd);
    return c;
  }
  Device::Reply call_as(Device::Client& c, uint16_t op, std::span<const uint8_t> body,
                        std::vector<int> fds = {}) {
    Device::Request req;
    req.op = op;
    req.body = body;
    req.fds = std::move(fds);
    Device::Reply r;
    device.handle(c, req, &r);
    return r;
  }
  ~Fixture() {
    for (auto [m, len] : maps) munmap(m, len);
    close(doorbell);
  }
  Device::Reply call(uint16_t op, std::span<const uint8_t> body, std::vector<int> fds = {}) {
    return call_as(*client, op, body, std::move(fds));
  }
  uint8_t* map(const Device::Reply& r, size_t bytes) {
    REQUIRE(r.fds.size() == 1);
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, r.fds[0], 0);
    close(r.fds[0]);
    REQUIRE(p != MAP_FAILED);
    maps.push_back({p, bytes});
    return static_cast<uint8_t*>(p);
  }
  // Runs the loop until done() or a generous wall-clock deadline: the
  // engine paces, acknowledges and retransmits by the real clock, so a
  // fixed number of passes is not a fixed amount of progress (it failed on
  // a loaded CI machine with a fixed 2,000). Returns done().
  template <class Pred>
  bool run_until(Pred done, std::chrono::seconds limit = std::chrono::seconds(60)) {
    auto deadline = std::chrono::steady_clock::now() + limit;
    while (!done()) {
      if (std::chrono::steady_clock::now() > deadline) return done();
      device.poll_once();
    }
    return true;
  }
};

TEST_CASE("control__object_ops_before_open_context_are_refused") {
  int db = eventfd(0, EFD_NONBLOCK);
  Device device(Fixture::config(), nullptr, nullptr, db);
  Device::Client* c = device.open_client(getpid(), getuid(), -1);
  Device::Request req;
  req.op = MROCE_OP_ALLOC_PD;
  Device::Reply r;
  device.handle(*c, req, &r);
  CHECK(r.err == EPROTO);
  CHECK(r.reason.find("open a context") != std::string::npos);
  close(db);
}

TEST_CASE("control__malformed_bodies_unknown_ops_and_limits_answer_with_errno") {
  Fixture f;
  uint8_t junk[3] = {1, 2, 3};
  Device::Reply r = f.call(MROCE_OP_REG_MR, junk);
  CHECK(r.err == EINVAL);
  CHECK(r.reason.find("malformed") != std::string::npos);
  r = f.call(999, {});
  CHECK(r.err == EOPNOTSUPP);
  CHECK(r.reason == "unknown control operation 999");
  CHECK(f.device.counters().ctrl_malformed == 2);
  // Per-client PD limit (2 in this fixture).
  CHECK(f.call(MROCE_OP_ALLOC_PD, {}).err == 0);
  CHECK(f.call(MROCE_OP_ALLOC_PD, {}).err == 0);
  r = f.call(MROCE_OP_ALLOC_PD, {});
  CHECK(r.err == ENOMEM);
  CHECK(r.reason == "per-client PD limit reached (2)");
  // A second OPEN_CONTEXT on one connection.
  mroce_open_context_req o{MROCE_ABI_VERSION, 0};
  r = f.call(MROCE_OP_OPEN_CONTEXT, bytes_of(o));
  CHECK(r.err == EBUSY);
  CHECK(r.reason == "context already open on this connection");
  // Wrong client ABI.
  o.client_abi = 77;
  r = f.call(MROCE_OP_OPEN_CONTEXT, bytes_of(o));
  CHECK(r.err == EPROTO);
  CHECK(r.reason.find("client device-ABI 77") == 0);
}

TEST_CASE("control__query_port_reports_active_mtu_from_link_and_published_gid_count") {
  Fixture f;
  auto port = reply_as<mroce_port_attr>(f.call(MROCE_OP_QUERY_PORT, {}));
  CHECK(port.state == 4);        // ACTIVE
  CHECK(port.active_mtu == 3);   // 1500-byte link: 1024-byte RDMA MTU
  CHECK(port.gid_tbl_len == 16);
}

struct Qp {
  uint32_t qpn = 0;
  RingView sq, rq;
};
struct Cq {
  uint32_t cqn = 0;
  RingView ring;
};

Cq make_cq(Fixture& f) {
  mroce_create_cq_req req{0x1234, 64, 0};
  Device::Reply r = f.call(MROCE_OP_CREATE_CQ, bytes_of(req));
  REQUIRE(r.err == 0);
  auto resp = reply_as<mroce_create_cq_resp>(r);
  Cq cq;
  cq.cqn = resp.cqn;
  cq.ring = RingView::attach(f.map(r, resp.ring_bytes));
  return cq;
}

Qp make_qp(Fixture& f, uint32_t pdn, const Cq& cq, uint32_t depth = 64) {
  mroce_create_qp_req req{};
  req.pdn = pdn;
  req.send_cqn = req.recv_cqn = cq.cqn;
  req.cap = {depth, depth, 4, 4, 64};
  req.qp_type = 2;
  Device::Reply r = f.call(MROCE_OP_CREATE_QP, bytes_of(req));
  REQUIRE(r.err == 0);
  auto resp = reply_as<mroce_create_qp_resp>(r);
  uint8_t* base = f.map(r, resp.ring_bytes);
  Qp qp;
  qp.qpn = resp.qpn;
  qp.sq = RingView::attach(base);
  qp.rq = RingView::attach(base + resp.rq_offset);
  return qp;
}

void connect(Fixture& f, const Qp& qp, uint32_t dest, uint32_t dgid_v4 = 0x0a000001) {
  auto modify = [&](uint32_t state, uint32_t mask, auto fill) {
    mroce_modify_qp_req m{};
    m.qpn = qp.qpn;
    m.attr.attr_mask = mask;
    m.attr.qp_state = state;
    fill(m.attr);
    Device::Reply r = f.call(MROCE_OP_MODIFY_QP, bytes_of(m));
    REQUIRE_MESSAGE(r.err == 0, r.reason);
  };
  modify(1, 1 | 16 | 32 | 8, [](mroce_qp_attr& a) {
    a.port_num = 1;
    a.qp_access_flags = 1 | 2 | 4 | 8;
  });
  modify(2, 1 | 128 | 256 | 4096 | 32768 | 131072 | 1048576, [&](mroce_qp_attr& a) {
    proto::IpAddr g = proto::IpAddr::v4(dgid_v4);
    std::memcpy(a.dgid, g.bytes.data(), 16);
    a.is_global = 1;
    a.path_mtu = 3;
    a.dest_qp_num = dest;
    a.rq_psn = 100;
    a.max_dest_rd_atomic = 4;
    a.min_rnr_timer = 1;
  });
  modify(3, 1 | 512 | 1024 | 2048 | 65536 | 8192, [](mroce_qp_attr& a) {
    a.sq_psn = 100;
    a.timeout = 10;
    a.retry_cnt = 3;
    a.rnr_retry = 3;
    a.max_rd_atomic = 4;
  });
}

TEST_CASE("loopback__write_and_send_through_rings_land_in_memory_with_completions_in_order") {
  Fixture f;
  uint32_t pdn = reply_as<mroce_alloc_pd_resp>(f.call(MROCE_OP_ALLOC_PD, {})).pdn;
  std::vector<uint8_t> src(200'000), dst(200'000, 0), rbuf(5000, 0);
  std::iota(src.begin(), src.end(), 7);
  auto reg = [&](std::vector<uint8_t>& b) {
    mroce_reg_mr_req req{reinterpret_cast<uint64_t>(b.data()), b.size(), pdn, 1 | 2 | 4 | 8};
    Device::Reply r = f.call(MROCE_OP_REG_MR, bytes_of(req));
    REQUIRE(r.err == 0);
    return reply_as<mroce_reg_mr_resp>(r);
  };
  auto mr_src = reg(src), mr_dst = reg(dst), mr_r = reg(rbuf);
  Cq cq = make_cq(f);
  Qp a = make_qp(f, pdn, cq), b = make_qp(f, pdn, cq);
  connect(f, a, b.qpn);
  connect(f, b, a.qpn);

  // B posts one receive; A posts a 200 KB WRITE, then a 4000-byte SEND.
  auto* rw = static_cast<mroce_recv_wqe*>(b.rq.slot(0));
  *rw = {};
  rw->wr_id = 77;
  rw->num_sge = 1;
  rw->sg[0] = {reinterpret_cast<uint64_t>(rbuf.data()), 5000, mr_r.lkey};
  b.rq.store_producer(1);
  auto* w = static_cast<mroce_send_wqe*>(a.sq.slot(0));
  *w = {};
  w->wr_id = 1;
  w->opcode = 0;  // RDMA_WRITE
  w->send_flags = 2;
  w->num_sge = 1;
  w->remote_addr = reinterpret_cast<uint64_t>(dst.data());
  w->rkey = mr_dst.rkey;
  w->u.sg[0] = {reinterpret_cast<uint64_t>(src.data()), 200'000, mr_src.lkey};
  w = static_cast<mroce_send_wqe*>(a.sq.slot(1));
  *w = {};
  w->wr_id = 2;
  w->opcode = 2;  // SEND
  w->send_flags = 2;
  w->num_sge = 1;
  w->u.sg[0] = {reinterpret_cast<uint64_t>(src.data()), 4000, mr_src.lkey};
  a.sq.store_producer(2);
  REQUIRE(f.run_until([&] { return cq.ring.load_producer() >= 3; }));

  CHECK(std::memcmp(dst.data(), src.data(), dst.size()) == 0);
  CHECK(std::memcmp(rbuf.data(), src.data(), 4000) == 0);
  REQUIRE(cq.ring.load_producer() == 3);
  std::vector<uint64_t> ids;
  uint64_t recv_len = 0;
  for (uint32_t i = 0; i < 3; i++) {
    auto* e = static_cast<mroce_cqe*>(cq.ring.slot(i));
    CHECK(e->status == 0);
    if (e->opcode == 128) recv_len = e->byte_len;
    else ids.push_back(e->wr_id);
  }
  CHECK(ids == std::vector<uint64_t>{1, 2});  // posting order
  CHECK(recv_len == 4000);
  CHECK(f.device.soft_nic()->dma_stats().faults == 0);
}

TEST_CASE("loopback__wrong_rkey_completes_with_remote_access_error") {
  Fixture f;
  uint32_t pdn = reply_as<mroce_alloc_pd_resp>(f.call(MROCE_OP_ALLOC_PD, {})).pdn;
  std::vector<uint8_t> buf(4096, 1);
  mroce_reg_mr_req req{reinterpret_cast<uint64_t>(buf.data()), buf.size(), pdn, 1 | 2};
  auto mr = reply_as<mroce_reg_mr_resp>(f.call(MROCE_OP_REG_MR, bytes_of(req)));
  Cq cq = make_cq(f);
  Qp a = make_qp(f, pdn, cq), b = make_qp(f, pdn, cq);
  connect(f, a, b.qpn);
  connect(f, b, a.qpn);
  auto* w = static_cast<mroce_send_wqe*>(a.sq.slot(0));
  *w = {};
  w->wr_id = 9;
  w->opcode = 0;
  w->send_flags = 2;
  w->num_sge = 1;
  w->remote_addr = reinterpret_cast<uint64_t>(buf.data());
  w->rkey = mr.rkey ^ 0x55;
  w->u.sg[0] = {reinterpret_cast<uint64_t>(buf.data()), 64, mr.lkey};
  a.sq.store_producer(1);
  REQUIRE(f.run_until([&] { return cq.ring.load_producer() >= 1; }));
  auto* e = static_cast<mroce_cqe*>(cq.ring.slot(0));
  CHECK(e->wr_id == 9);
  CHECK(e->status == 10);  // IBV_WC_REM_ACCESS_ERR
}

TEST_CASE("rings__scribbled_producer_index_makes_the_qp_fatal_and_lets_the_nic_sleep") {
  Fixture f;
  uint32_t pdn = reply_as<mroce_alloc_pd_resp>(f.call(MROCE_OP_ALLOC_PD, {})).pdn;
  Cq cq = make_cq(f);
  Qp a = make_qp(f, pdn, cq);
  a.sq.store_producer(0x7fffffff);  // far beyond the ring: garbage
  REQUIRE(f.run_until([&] { return f.device.counters().ring_bad_producer >= 1; }));
  // Absence cannot be waited for: a further 100 passes must add nothing.
  for (int i = 0; i < 100; i++) f.device.poll_once();
  CHECK(f.device.counters().ring_bad_producer == 1);  // counted once, not per pass
  CHECK(cq.ring.load_producer() == 0);
  // The broken ring no longer counts as work: the NIC may sleep (it spun
  // forever on one scribbled index before).
  CHECK(f.device.prepare_sleep());
  f.device.end_sleep();
  mroce_handle_req q{a.qpn, 0};
  auto st = reply_as<mroce_query_qp_resp>(f.call(MROCE_OP_QUERY_QP, bytes_of(q)));
  CHECK(st.attr.qp_state == 6);  // IBV_QPS_ERR
}

// A connected loopback pair A<->B on one PD and CQ, with one MR.
struct Pair {
  uint32_t pdn = 0;
  Cq cq;
  Qp a, b;
  std::vector<uint8_t> buf = std::vector<uint8_t>(8192, 0);
  mroce_reg_mr_resp mr{};
  uint32_t posted = 0;
  explicit Pair(Fixture& f) {
    pdn = reply_as<mroce_alloc_pd_resp>(f.call(MROCE_OP_ALLOC_PD, {})).pdn;
    mroce_reg_mr_req req{reinterpret_cast<uint64_t>(buf.data()), buf.size(), pdn, 1 | 2 | 4 | 8};
    mr = reply_as<mroce_reg_mr_resp>(f.call(MROCE_OP_REG_MR, bytes_of(req)));
    cq = make_cq(f);
    a = make_qp(f, pdn, cq);
    b = make_qp(f, pdn, cq);
    connect(f, a, b.qpn);
    connect(f, b, a.qpn);
  }
  // A signaled 64-byte inline WRITE from A into buf[4096..] carrying `tag`.
  void post_write(uint8_t tag) {
    auto* w = static_cast<mroce_send_wqe*>(a.sq.slot(posted));
    *w = {};
    w->wr_id = 1000 + posted;
    w->opcode = 0;
    w->send_flags = 2 | 8;  // SIGNALED | INLINE
    w->inline_len = 64;
    std::memset(w->u.inline_data, tag, 64);
    w->remote_addr = reinterpret_cast<uint64_t>(buf.data()) + 4096;
    w->rkey = mr.rkey;
    a.sq.store_producer(++posted);
  }
};

TEST_CASE("rings__memfds_are_sealed_so_a_client_cannot_resize_them") {
  Fixture f;
  uint32_t pdn = reply_as<mroce_alloc_pd_resp>(f.call(MROCE_OP_ALLOC_PD, {})).pdn;
  mroce_create_cq_req creq{0x1234, 64, 0};
  Device::Reply cr = f.call(MROCE_OP_CREATE_CQ, bytes_of(creq));
  REQUIRE(cr.err == 0);
  mroce_create_qp_req qreq{};
  qreq.pdn = pdn;
  qreq.send_cqn = qreq.recv_cqn = reply_as<mroce_create_cq_resp>(cr).cqn;
  qreq.cap = {64, 64, 4, 4, 64};
  qreq.qp_type = 2;
  Device::Reply qr = f.call(MROCE_OP_CREATE_QP, bytes_of(qreq));
  REQUIRE(qr.err == 0);
  for (int fd : {cr.fds.at(0), qr.fds.at(0)}) {
    struct stat st{};
    REQUIRE(fstat(fd, &st) == 0);
    errno = 0;
    CHECK(ftruncate(fd, 0) == -1);  // shrinking would SIGBUS the daemon
    CHECK(errno == EPERM);
    errno = 0;
    CHECK(ftruncate(fd, st.st_size * 2) == -1);
    CHECK(errno == EPERM);
    errno = 0;
    CHECK(fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE) == -1);  // the seals are sealed
    CHECK(errno == EPERM);
    close(fd);
  }
}

TEST_CASE("rings__garbage_wqes_are_counted_by_reason_and_other_qps_keep_working") {
  Fixture f;
  Pair victim(f);
  Pair bad(f);
  std::mt19937 rng(12345);
  // Random bytes in every slot, then entries with out-of-range counts.
  for (uint32_t i = 0; i < bad.a.sq.entries(); i++) {
    auto* p = static_cast<uint8_t*>(bad.a.sq.slot(i));
    for (size_t k = 0; k < sizeof(mroce_send_wqe); k++) p[k] = static_cast<uint8_t>(rng());
  }
  for (uint32_t i = 0; i < bad.b.rq.entries(); i++) {
    auto* p = static_cast<uint8_t*>(bad.b.rq.slot(i));
    for (size_t k = 0; k < sizeof(mroce_recv_wqe); k++) p[k] = static_cast<uint8_t>(rng());
  }
  auto* w = static_cast<mroce_send_wqe*>(bad.a.sq.slot(0));
  w->send_flags = 0;
  w->num_sge = 200;
  w = static_cast<mroce_send_wqe*>(bad.a.sq.slot(1));
  w->send_flags = 8;  // INLINE
  w->inline_len = 0xffff;
  static_cast<mroce_recv_wqe*>(bad.b.rq.slot(0))->num_sge = 0xffffffffu;
  bad.a.sq.store_producer(bad.a.sq.entries());
  bad.b.rq.store_producer(bad.b.rq.entries());
  victim.post_write(0x5a);
  REQUIRE(f.run_until([&] { return victim.cq.ring.load_producer() >= 1; }));
  // Every garbage entry came back as a counted reject, and nothing spins.
  REQUIRE(f.run_until([&] { return f.device.prepare_sleep(); }));
  f.device.end_sleep();
  const DaemonCounters& c = f.device.counters();
  CHECK(c.wqe_bad_sge_count >= 2);
  CHECK(c.wqe_bad_inline_len >= 1);
  CHECK(c.wqe_rejected >= 1);
  for (int i = 0; i < 64; i++) CHECK(victim.buf[4096 + i] == 0x5a);
  // The victim's later traffic is unaffected.
  victim.post_write(0x6b);
  REQUIRE(f.run_until([&] {
    for (uint32_t i = 0; i < victim.cq.ring.load_producer(); i++) {
      auto* e = static_cast<mroce_cqe*>(victim.cq.ring.slot(i));
      if (e->wr_id == 1001 && e->qp_num == victim.a.qpn) return true;
    }
    return false;
  }));
  for (int i = 0; i < 64; i++) CHECK(victim.buf[4096 + i] == 0x6b);
}

TEST_CASE("rings__a_rejected_wqe_completes_in_posting_order_and_moves_the_qp_to_err") {
  Fixture f;
  Pair p(f);
  // A good WRITE (needs B's ACK: cannot complete in this pass), then a WQE
  // with too many SGEs, then another good WRITE.
  p.post_write(1);
  auto* w = static_cast<mroce_send_wqe*>(p.a.sq.slot(p.posted));
  *w = {};
  w->wr_id = 1000 + p.posted;
  w->send_flags = 2;
  w->num_sge = 200;
  p.a.sq.store_producer(++p.posted);
  p.post_write(3);
  REQUIRE(f.run_until([&] { return p.cq.ring.load_producer() >= 3; }));
  REQUIRE(p.cq.ring.load_producer() == 3);
  std::vector<uint64_t> ids;
  std::vector<uint32_t> statuses;
  for (uint32_t i = 0; i < 3; i++) {
    auto* e = static_cast<mroce_cqe*>(p.cq.ring.slot(i));
    ids.push_back(e->wr_id);
    statuses.push_back(e->status);
  }
  CHECK(ids == std::vector<uint64_t>{1000, 1001, 1002});      // posting order
  CHECK(statuses == std::vector<uint32_t>{0, 2, 5});  // SUCCESS, LOC_QP_OP_ERR, WR_FLUSH_ERR
  CHECK(f.device.counters().wqe_bad_sge_count == 1);
  CHECK(f.device.counters().wqe_rejected == 1);
  mroce_handle_req q{p.a.qpn, 0};
  auto st = reply_as<mroce_query_qp_resp>(f.call(MROCE_OP_QUERY_QP, bytes_of(q)));
  CHECK(st.attr.qp_state == 6);  // IBV_QPS_ERR
}

TEST_CASE("rings__a_receive_written_into_the_ring_in_reset_is_counted_by_reason") {
  Fixture f;
  uint32_t pdn = reply_as<mroce_alloc_pd_resp>(f.call(MROCE_OP_ALLOC_PD, {})).pdn;
  Cq cq = make_cq(f);
  Qp a = make_qp(f, pdn, cq);  // never modified: RESET
  auto* rw = static_cast<mroce_recv_wqe*>(a.rq.slot(0));
  *rw = {};
  rw->wr_id = 5;
  a.rq.store_producer(1);
  REQUIRE(f.run_until([&] { return f.device.counters().wqe_recv_in_reset >= 1; },
                      std::chrono::seconds(30)));
  CHECK(f.device.counters().wqe_recv_in_reset == 1);
  CHECK(f.device.counters().wqe_rejected == 1);
  CHECK(f.device.counters().wqe_bad_sge_count == 0);
  CHECK(f.device.counters().wqe_recv_refused_other == 0);
  CHECK(cq.ring.load_producer() == 0);  // consumed, with no completion to carry it
  CHECK(f.device.prepare_sleep());      // and not retried forever
  f.device.end_sleep();
}

TEST_CASE("control__create_cq_takes_exactly_max_cqe_and_refuses_one_more_with_a_reason") {
  Fixture f;
  auto dev = reply_as<mroce_device_attr>(f.call(MROCE_OP_QUERY_DEVICE, {}));
  REQUIRE(dev.max_cqe > 0);
  mroce_create_cq_req req{0x1234, dev.max_cqe, 0};
  Device::Reply r = f.call(MROCE_OP_CREATE_CQ, bytes_of(req));
  REQUIRE_MESSAGE(r.err == 0, r.reason);
  auto resp = reply_as<mroce_create_cq_resp>(r);
  CHECK(resp.entries >= dev.max_cqe + 1);
  for (int fd : r.fds) close(fd);
  req.cqe = dev.max_cqe + 1;
  r = f.call(MROCE_OP_CREATE_CQ, bytes_of(req));
  CHECK(r.err == EINVAL);
  CHECK(r.reason == "cqe must be 1.." + std::to_string(dev.max_cqe));
}

// srqud: the RQ ring's consumer is entries read minus receives the engine
// holds, so the bound is exactly max_recv_wr; entries beyond it are counted.
TEST_CASE("rings__rq_consumer_is_read_minus_held_so_the_bound_is_exactly_max_recv_wr") {
  Fixture f;
  uint32_t pdn = reply_as<mroce_alloc_pd_resp>(f.call(MROCE_OP_ALLOC_PD, {})).pdn;
  std::vector<uint8_t> buf(4096, 3), rbuf(4096, 0);
  mroce_reg_mr_req req{reinterpret_cast<uint64_t>(buf.data()), buf.size(), pdn, 1 | 2};
  auto mr = reply_as<mroce_reg_mr_resp>(f.call(MROCE_OP_REG_MR, bytes_of(req)));
  mroce_reg_mr_req rreq{reinterpret_cast<uint64_t>(rbuf.data()), rbuf.size(), pdn, 1};
  auto rmr = reply_as<mroce_reg_mr_resp>(f.call(MROCE_OP_REG_MR, bytes_of(rreq)));
  Cq cq = make_cq(f);
  Qp a = make_qp(f, pdn, cq), b = make_qp(f, pdn, cq, 3);  // b: max_recv_wr 3, a ring of 4
  REQUIRE(b.rq.entries() == 4);
  connect(f, a, b.qpn);
  connect(f, b, a.qpn);
  // A client ignoring the bound fills the whole ring: 3 held, 1 refused.
  for (uint32_t i = 0; i < 4; i++) {
    auto* w = static_cast<mroce_recv_wqe*>(b.rq.slot(i));
    *w = {};
    w->wr_id = 60 + i;
    w->num_sge = 1;
    w->sg[0] = {reinterpret_cast<uint64_t>(rbuf.data()) + i * 1024, 1024, rmr.lkey};
  }
  b.rq.store_producer(4);
  REQUIRE(f.run_until([&] { return f.device.counters().wqe_recv_over_bound >= 1; }));
  CHECK(f.device.counters().wqe_recv_over_bound == 1);
  CHECK(b.rq.load_consumer() == 1);  // 4 read, 3 held: producer - consumer = max_recv_wr
  auto* w = static_cast<mroce_send_wqe*>(a.sq.slot(0));
  *w = {};
  w->wr_id = 1;
  w->opcode = 2;  // SEND
  w->send_flags = 2;
  w->num_sge = 1;
  w->u.sg[0] = {reinterpret_cast<uint64_t>(buf.data()), 100, mr.lkey};
  a.sq.store_producer(1);
  // The moment the receive's completion is visible, its slot is free.
  auto recv_visible = [&] {
    for (uint32_t i = 0; i < cq.ring.load_producer(); i++)
      if (static_cast<const mroce_cqe*>(cq.ring.slot(i))->opcode == 128) return true;  // RECV
    return false;
  };
  REQUIRE(f.run_until(recv_visible));
  CHECK(b.rq.load_consumer() == 2);
  CHECK(rbuf[0] == 3);
}

// The same on the send side: WRs the engine holds (unacknowledged: the peer
// QP does not exist, so nothing answers) count against max_send_wr, and a
// client that writes past the bound has the extra entry consumed without a
// CQE, counted wqe_send_over_bound.
TEST_CASE("rings__sq_consumer_is_read_minus_held_so_the_bound_is_exactly_max_send_wr") {
  Fixture f;
  uint32_t pdn = reply_as<mroce_alloc_pd_resp>(f.call(MROCE_OP_ALLOC_PD, {})).pdn;
  std::vector<uint8_t> buf(4096, 3);
  mroce_reg_mr_req req{reinterpret_cast<uint64_t>(buf.data()), buf.size(), pdn, 1 | 2};
  auto mr = reply_as<mroce_reg_mr_resp>(f.call(MROCE_OP_REG_MR, bytes_of(req)));
  Cq cq = make_cq(f);
  Qp a = make_qp(f, pdn, cq, 3);  // max_send_wr 3, a ring of 4
  REQUIRE(a.sq.entries() == 4);
  connect(f, a, 0xabcde);  // no such QP: no ACK ever comes, the engine holds every WR
  for (uint32_t i = 0; i < 4; i++) {
    auto* w = static_cast<mroce_send_wqe*>(a.sq.slot(i));
    *w = {};
    w->wr_id = 70 + i;
    w->opcode = 0;  // RDMA WRITE
    w->send_flags = 2;
    w->num_sge = 1;
    w->remote_addr = reinterpret_cast<uint64_t>(buf.data());
    w->rkey = mr.rkey;
    w->u.sg[0] = {reinterpret_cast<uint64_t>(buf.data()), 64, mr.lkey};
  }
  a.sq.store_producer(4);
  REQUIRE(f.run_until([&] { return f.device.counters().wqe_send_over_bound >= 1; }));
  CHECK(f.device.counters().wqe_send_over_bound == 1);
  CHECK(f.device.counters().wqe_rejected == 1);
  CHECK(a.sq.load_consumer() == 1);    // 4 read, 3 held: producer - consumer = max_send_wr
  CHECK(cq.ring.load_producer() == 0);  // the refused entry has no CQE
}

TEST_CASE("rings__a_consumer_index_written_by_the_client_is_never_read_back") {
  Fixture f;
  Pair p(f);
  p.post_write(1);
  REQUIRE(f.run_until([&] { return p.cq.ring.load_producer() >= 1; }));
  // Rewinding the NIC's consumer index must not replay the old WQE.
  p.a.sq.store_consumer(0);
  for (int i = 0; i < 200; i++) f.device.poll_once();  // absence: a fixed look, not a wait
  CHECK(p.cq.ring.load_producer() == 1);
}

TEST_CASE("channel__fds_that_could_block_the_daemon_are_refused_with_a_reason") {
  Fixture f;
  auto create = [&](int fd) {
    mroce_create_cq_req req{0x77, 16, 1};
    return f.call(MROCE_OP_CREATE_CQ, bytes_of(req), {fd});
  };
  std::string dir = std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp";
  std::string fifo = dir + "/channel-fifo-" + std::to_string(getpid());
  REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
  int fifo_fd = open(fifo.c_str(), O_RDWR);
  std::string file = dir + "/channel-file-" + std::to_string(getpid());
  int file_fd = open(file.c_str(), O_CREAT | O_RDWR, 0600);
  int p[2];
  REQUIRE(pipe(p) == 0);
  int st[2];
  REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, st) == 0);
  struct Case {
    int fd;
    const char* reason;
  } cases[] = {{fifo_fd, "pipe/FIFO"}, {p[1], "pipe/FIFO"}, {file_fd, "regular file"},
               {st[0], "SOCK_DGRAM or SOCK_SEQPACKET"}};
  for (const Case& c : cases) {
    Device::Reply r = create(c.fd);
    CHECK(r.err == EINVAL);
    CHECK_MESSAGE(r.reason.find(c.reason) != std::string::npos, r.reason);
  }
  CHECK(f.device.counters().channel_fd_refused == 4);
  for (int fd : {fifo_fd, file_fd, p[0], p[1], st[0], st[1]}) close(fd);
  unlink(fifo.c_str());
  unlink(file.c_str());
}

TEST_CASE("channel__a_blocking_socket_nobody_reads_never_blocks_the_daemon") {
  Fixture f;
  Pair p(f);
  int sv[2];
  REQUIRE(socketpair(AF_UNIX, SOCK_DGRAM, 0, sv) == 0);
  int one = 1;
  setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &one, sizeof(one));  // fills after a few records
  mroce_create_cq_req req{0x77, 64, 1};
  Device::Reply r = f.call(MROCE_OP_CREATE_CQ, bytes_of(req), {sv[0]});
  REQUIRE_MESSAGE(r.err == 0, r.reason);
  auto resp = reply_as<mroce_create_cq_resp>(r);
  RingView ring = RingView::attach(f.map(r, resp.ring_bytes));
  // The hostile client makes the shared file blocking again after CREATE_CQ.
  fcntl(sv[0], F_SETFL, fcntl(sv[0], F_GETFL) & ~O_NONBLOCK);
  // A QP on the channel's CQ: each completion, with the CQ armed, is one
  // record to a socket whose peer never reads.
  Qp q = make_qp(f, p.pdn, Cq{resp.cqn, ring});
  connect(f, q, p.b.qpn);
  for (uint32_t i = 0; i < 40; i++) {
    ring.arm(MROCE_CQ_ARM_ANY);
    auto* w = static_cast<mroce_send_wqe*>(q.sq.slot(i));
    *w = {};
    w->wr_id = i;
    w->send_flags = 2 | 8;
    w->inline_len = 8;
    w->remote_addr = reinterpret_cast<uint64_t>(p.buf.data());
    w->rkey = p.mr.rkey;
    q.sq.store_producer(i + 1);
    REQUIRE(f.run_until([&] { return ring.load_producer() >= i + 1; }));
    ring.store_consumer(i + 1);
  }
  CHECK(f.device.counters().cq_events >= 1);
  CHECK(f.device.counters().cq_event_write_failed >= 1);  // full: dropped, never waited for
  close(sv[0]);
  close(sv[1]);
}

TEST_CASE("control__another_contexts_objects_answer_as_missing_with_a_reason") {
  Fixture f;
  Pair p(f);
  Device::Client* other = f.open(getuid() + 1);
  auto as_other = [&](uint16_t op, uint32_t h) {
    mroce_handle_req req{h, 0};
    return f.call_as(*other, op, bytes_of(req));
  };
  struct Case {
    uint16_t op;
    uint32_t handle;
    std::string what;
  } cases[] = {{MROCE_OP_QUERY_QP, p.a.qpn, "QP"},     {MROCE_OP_DESTROY_QP, p.a.qpn, "QP"},
               {MROCE_OP_DESTROY_CQ, p.cq.cqn, "CQ"},  {MROCE_OP_DEALLOC_PD, p.pdn, "PD"},
               {MROCE_OP_DEREG_MR, p.mr.lkey, "MR with lkey"}};
  for (const Case& c : cases) {
    Device::Reply r = as_other(c.op, c.handle);
    CHECK(r.err == ENOENT);  // not EPERM: existence is not revealed
    CHECK(r.reason == "no " + c.what + " " + std::to_string(c.handle) + " in this context");
    Device::Reply missing = as_other(c.op, 0x7ffffff0);
    CHECK(missing.err == ENOENT);
  }
  mroce_modify_qp_req m{};
  m.qpn = p.a.qpn;
  m.attr.attr_mask = 1;
  m.attr.qp_state = 6;
  Device::Reply r = f.call_as(*other, MROCE_OP_MODIFY_QP, bytes_of(m));
  CHECK(r.err == ENOENT);
  CHECK(r.reason == "no such QP in this context");
  // The owner's objects are untouched: its traffic still runs.
  p.post_write(0x33);
  REQUIRE(f.run_until([&] { return p.cq.ring.load_producer() >= 1; }));
  CHECK(static_cast<mroce_cqe*>(p.cq.ring.slot(0))->status == 0);
}

TEST_CASE("limits__per_uid_limits_span_connections_and_spare_other_users") {
  DeviceConfig cfg = Fixture::config();
  cfg.limits.max_qp = 8;
  cfg.user_limits.max_qp = 3;
  cfg.user_limits.max_connections = 3;
  Fixture f(cfg);
  uid_t me = getuid(), other = getuid() + 4242;
  Device::Client* second = f.open(me);
  auto qp_on = [&](Device::Client* c) {
    uint32_t pdn = reply_as<mroce_alloc_pd_resp>(f.call_as(*c, MROCE_OP_ALLOC_PD, {})).pdn;
    mroce_create_cq_req creq{1, 16, 0};
    Device::Reply cr = f.call_as(*c, MROCE_OP_CREATE_CQ, bytes_of(creq));
    REQUIRE(cr.err == 0);
    for (int fd : cr.fds) close(fd);
    mroce_create_qp_req q{};
    q.pdn = pdn;
    q.send_cqn = q.recv_cqn = reply_as<mroce_create_cq_resp>(cr).cqn;
    q.cap = {16, 16, 1, 1, 0};
    q.qp_type = 2;
    return [&f, c, q] {
      Device::Reply r = f.call_as(*c, MROCE_OP_CREATE_QP, bytes_of(q));
      for (int fd : r.fds) close(fd);
      return r;
    };
  };
  auto create_first = qp_on(f.client);
  auto create_second = qp_on(second);
  CHECK(create_first().err == 0);
  CHECK(create_first().err == 0);
  CHECK(create_second().err == 0);
  Device::Reply r = create_second();  // the 4th QP of this uid, the 2nd of its connection
  CHECK(r.err == ENOMEM);
  CHECK(r.reason == "per-user QP limit 3 reached for uid " + std::to_string(me) +
                        "; raise --uid-max-qp");
  CHECK(f.device.counters().limit_refused_user == 1);
  // Another user is not affected.
  Device::Client* stranger = f.open(other);
  auto create_stranger = qp_on(stranger);
  CHECK(create_stranger().err == 0);
  // Closing a connection returns its share.
  f.device.close_client(f.client->id);
  f.client = f.open(me);
  CHECK(create_second().err == 0);
  // Connections per uid: this uid has 2 open, a 3rd is the limit.
  f.open(me);
  std::string why;
  CHECK(f.device.open_client(getpid(), me, -1, &why) == nullptr);
  CHECK(why == "per-user connection limit 3 reached for uid " + std::to_string(me) +
                   "; raise --uid-max-connections");
  CHECK(f.device.open_client(getpid(), other, -1, &why) != nullptr);
}

TEST_CASE("limits__per_uid_ring_memory") {
  DeviceConfig cfg = Fixture::config();
  cfg.user_limits.max_ring_bytes = 64 * 1024;
  Fixture f(cfg);
  mroce_create_cq_req req{1, 4000, 0};  // 4096 x 64-byte CQEs: 256 KiB of ring
  Device::Reply r = f.call(MROCE_OP_CREATE_CQ, bytes_of(req));
  CHECK(r.err == ENOMEM);
  CHECK(r.reason.find("per-user ring memory limit 0 MiB reached for uid") == 0);
  CHECK(r.reason.find("raise --uid-max-ring-mb") != std::string::npos);
  req.cqe = 16;
  r = f.call(MROCE_OP_CREATE_CQ, bytes_of(req));
  CHECK(r.err == 0);
  for (int fd : r.fds) close(fd);
}

TEST_CASE("client_close__tears_down_everything_it_owned") {
  Fixture f;
  uint32_t pdn = reply_as<mroce_alloc_pd_resp>(f.call(MROCE_OP_ALLOC_PD, {})).pdn;
  Cq cq = make_cq(f);
  make_qp(f, pdn, cq);
  CHECK(f.device.qp_numbers().size() == 1);
  f.device.close_client(f.client->id);
  CHECK(f.device.qp_numbers().empty());
  CHECK(f.device.counters().clients_closed == 1);
}

TEST_CASE("dma__batched_writes_and_read_ahead_on_this_process") {
  ProcessDma dma([](fw::OwnerId) { return self_memory(); });
  std::vector<uint8_t> mem(300'000, 0), src(1000);
  std::iota(src.begin(), src.end(), 1);
  uint64_t base = reinterpret_cast<uint64_t>(mem.data());
  // Contiguous writes coalesce into one segment.
  CHECK(dma.write(1, base, src));
  CHECK(dma.write(1, base + 1000, src));
  CHECK(dma.write(1, base + 5000, src));
  CHECK(mem[0] == 0);  // queued, not yet written
  std::vector<uint8_t> out(1000);
  CHECK(dma.read(1, base + 1000, out));  // a read flushes this client's writes first
  CHECK(out == src);
  CHECK(dma.stats().write_calls == 2);  // one per run contiguous in client memory
  CHECK(dma.stats().write_segments == 2);
  CHECK(dma.read_payload(1, base + 1000, out));  // fills the read-ahead window
  CHECK(dma.read_payload(1, base + 5000, out));  // inside the read-ahead window
  CHECK(out == src);
  CHECK(dma.stats().read_cache_hits == 1);
  // An unknown owner (process gone) fails, never crashes.
  ProcessDma gone([](fw::OwnerId) -> ClientMemory* { return nullptr; });
  CHECK_FALSE(gone.read(1, base, out));
  CHECK_FALSE(gone.write(1, base, src));
}

// A NIC reads host memory when it serves a request: a responder READ or
// atomic must see the owner's latest CPU stores, never a cached window.
TEST_CASE("dma__read_sees_stores_made_after_an_earlier_read") {
  ProcessDma dma([](fw::OwnerId) { return self_memory(); });
  std::vector<uint64_t> mem(4096, 0);
  uint64_t va = reinterpret_cast<uint64_t>(mem.data());
  uint64_t got = 0;
  std::span<uint8_t> out(reinterpret_cast<uint8_t*>(&got), sizeof got);
  for (uint64_t v : {1, 2, 3, 100}) {
    mem[0] = v;  // an ordinary CPU store by the owner
    REQUIRE(dma.read(1, va, out));
    CHECK(got == v);
  }
  // The payload window is dropped on invalidate() (a new post) and serves
  // the new contents afterwards.
  mem[1] = 7;
  REQUIRE(dma.read_payload(1, va + 8, out));
  CHECK(got == 7);
  mem[1] = 8;
  dma.invalidate(1);
  REQUIRE(dma.read_payload(1, va + 8, out));
  CHECK(got == 8);
}

TEST_CASE("dma__commit_reports_a_write_that_did_not_land") {
  ProcessDma dma([](fw::OwnerId) { return self_memory(); });
  std::vector<uint8_t> src(64, 0xab);
  // An address no process maps: the queued write fails at commit().
  CHECK(dma.write(1, 0x10, src));
  CHECK_FALSE(dma.commit(1));
  CHECK(dma.stats().faults == 1);
  std::vector<uint8_t> mem(64, 0);
  CHECK(dma.write(1, reinterpret_cast<uint64_t>(mem.data()), src));
  CHECK(dma.commit(1));
  CHECK(mem == src);
}

TEST_CASE("options__bad_command_lines_say_what_is_wrong") {
  Options o;
  std::string err;
  bool help = false;
  CHECK_FALSE(parse_options({}, &o, &err, &help));
  CHECK(err.find("--netdev") != std::string::npos);
  CHECK_FALSE(parse_options({"--netdev", "eth0", "--ibdev", "mlx5_0"}, &o, &err, &help));
  CHECK(err.find("metaroceN") != std::string::npos);
  CHECK_FALSE(parse_options({"--netdev", "eth0", "--paths", "0"}, &o, &err, &help));
  CHECK(err.find("1 to 64") != std::string::npos);
  CHECK_FALSE(parse_options({"--netdev", "eth0", "--io", "dpdk"}, &o, &err, &help));
  CHECK_FALSE(parse_options({"--netdev"}, &o, &err, &help));
  CHECK(err == "--netdev needs a value");
  CHECK_FALSE(parse_options({"--netdev", "eth0", "--bogus"}, &o, &err, &help));
  Options ok;
  REQUIRE(parse_options({"--netdev", "eth0", "--ibdev", "metaroce3", "--io", "packet"}, &ok, &err,
                        &help));
  CHECK(ok.uverbs_index == 3);
  CHECK(ok.io == io::Backend::kPacket);
  CHECK_FALSE(parse_options({"--netdev", "eth0", "--uid-max-qp", "0"}, &o, &err, &help));
  CHECK(err == "--uid-max-qp expects a number from 1 to 65536, got '0'");
  REQUIRE(parse_options({"--netdev", "eth0", "--uid-max-qp", "7", "--uid-max-connections", "5",
                         "--uid-max-ring-mb", "64"},
                        &ok, &err, &help));
  CHECK(ok.uid_max_qp == 7);
  CHECK(ok.uid_max_connections == 5);
  CHECK(ok.uid_max_ring_mb == 64);
  REQUIRE(parse_options({"--netdev", "eth0", "--max-cm-ids-per-client", "8", "--uid-max-cm-ids", "9"},
                        &ok, &err, &help));
  CHECK(ok.max_cm_ids_per_client == 8);
  CHECK(ok.uid_max_cm_ids == 9);
  CHECK(std::string(usage()).find("--uid-max-qp N") != std::string::npos);
}

// The control plane and the queue pump reach the transport only through the
// TransportBackend the factory builds: here silicon that is not there (an
// empty slot). The device answers every request with the backend's errno
// and idles; nothing in it assumes the soft engine.
TEST_CASE("backend__a_device_on_an_absent_hw_backend_answers_its_errno_and_idles") {
  int db = eventfd(0, EFD_NONBLOCK);
  hw::AbsentRegisterSpace bar0;
  hw::HwOffloadBackend* hw_backend = nullptr;
  BackendFactory absent_silicon = [&](const fw::EngineConfig&, const BackendEnv& env) {
    auto b = std::make_unique<hw::HwOffloadBackend>(bar0, *env.events);
    std::string why;
    CHECK(b->bring_up(&why) == ENODEV);
    hw_backend = b.get();
    return b;
  };
  Device device(Fixture::config(), absent_silicon, db);
  CHECK(device.soft_nic() == nullptr);
  CHECK(std::string(hw_backend->name()) == "hw");
  Device::Client* c = device.open_client(getpid(), getuid(), -1);
  REQUIRE(c != nullptr);
  Device::Request req;
  mroce_open_context_req open{MROCE_ABI_VERSION, 0};
  req.op = MROCE_OP_OPEN_CONTEXT;
  req.body = bytes_of(open);
  Device::Reply r;
  device.handle(*c, req, &r);
  REQUIRE(r.err == 0);
  for (int fd : r.fds) close(fd);
  auto dev = reply_as<mroce_device_attr>(r);
  CHECK(dev.max_qp == 0);  // no QUERY_CAPS answered: nothing to offer
  Device::Reply pd;
  req = {};
  req.op = MROCE_OP_ALLOC_PD;
  device.handle(*c, req, &pd);
  CHECK(pd.err == ENODEV);
  CHECK(pd.reason == "CREATE_PD: the device is not up");  // the backend's reason, not strerror
  CHECK(device.counters().ctrl_errors == 1);
  CHECK(device.poll_once() == 0);
  CHECK(device.next_deadline() == fw::kNever);
  CHECK(device.wait_fd() == -1);
  CHECK(device.prepare_sleep());
  device.end_sleep();
  device.close_client(c->id);
  close(db);
}

}  // namespace
}  // namespace metaroce::daemon

namespace metaroce::daemon {
namespace {

// ---- shared receive queues (docs/device-abi.md §2.7) ----

struct Srq {
  uint32_t srqn = 0;
  RingView ring;
};

Srq make_srq(Fixture& f, uint32_t pdn, uint32_t max_wr) {
  mroce_create_srq_req req{};
  req.user_handle = 0x5151;
  req.pdn = pdn;
  req.attr = {max_wr, 2, 0, 0};
  Device::Reply r = f.call(MROCE_OP_CREATE_SRQ, bytes_of(req));
  REQUIRE_MESSAGE(r.err == 0, r.reason);
  auto resp = reply_as<mroce_create_srq_resp>(r);
  CHECK(resp.entries == resp.attr.max_wr);
  return {resp.srqn, RingView::attach(f.map(r, resp.ring_bytes))};
}

Qp make_srq_qp(Fixture& f, uint32_t pdn, const Cq& cq, uint32_t srqn) {
  mroce_create_qp_req req{};
  req.pdn = pdn;
  req.send_cqn = req.recv_cqn = cq.cqn;
  req.cap = {64, 0, 4, 0, 64};
  req.qp_type = 2;
  req.srqn = srqn;
  Device::Reply r = f.call(MROCE_OP_CREATE_QP, bytes_of(req));
  REQUIRE_MESSAGE(r.err == 0, r.reason);
  auto resp = reply_as<mroce_create_qp_resp>(r);
  uint8_t* base = f.map(r, resp.ring_bytes);
  return {resp.qpn, RingView::attach(base), RingView::attach(base + resp.rq_offset)};
}

void post_srq(Srq& s, uint32_t index, uint64_t wr_id, const std::vector<uint8_t>& buf,
              uint32_t lkey, uint32_t num_sge = 1) {
  auto* w = static_cast<mroce_recv_wqe*>(s.ring.slot(index));
  *w = {};
  w->wr_id = wr_id;
  w->num_sge = num_sge;
  w->sg[0] = {reinterpret_cast<uint64_t>(buf.data()), 1024, lkey};
  s.ring.store_producer(index + 1);
}

TEST_CASE("srq__ring_consumer_counts_what_messages_took_so_the_full_check_is_max_wr") {
  Fixture f;
  uint32_t pdn = reply_as<mroce_alloc_pd_resp>(f.call(MROCE_OP_ALLOC_PD, {})).pdn;
  std::vector<uint8_t> buf(4096, 3), rbuf(1024, 0);
  mroce_reg_mr_req req{reinterpret_cast<uint64_t>(buf.data()), buf.size(), pdn, 1 | 2};
  auto mr = reply_as<mroce_reg_mr_resp>(f.call(MROCE_OP_REG_MR, bytes_of(req)));
  mroce_reg_mr_req rreq{reinterpret_cast<uint64_t>(rbuf.data()), rbuf.size(), pdn, 1};
  auto rmr = reply_as<mroce_reg_mr_resp>(f.call(MROCE_OP_REG_MR, bytes_of(rreq)));
  Cq cq = make_cq(f);
  Srq s = make_srq(f, pdn, 4);
  Qp a = make_qp(f, pdn, cq), b = make_srq_qp(f, pdn, cq, s.srqn);
  connect(f, a, b.qpn);
  connect(f, b, a.qpn);
  for (uint32_t i = 0; i < 4; i++) post_srq(s, i, 50 + i, rbuf, rmr.lkey);
  for (int i = 0; i < 50; i++) f.device.poll_once();
  CHECK(s.ring.load_consumer() == 0);  // read, but not taken: the ring stays full
  auto* w = static_cast<mroce_send_wqe*>(a.sq.slot(0));
  *w = {};
  w->wr_id = 1;
  w->opcode = 2;  // SEND
  w->send_flags = 2;
  w->num_sge = 1;
  w->u.sg[0] = {reinterpret_cast<uint64_t>(buf.data()), 100, mr.lkey};
  a.sq.store_producer(1);
  // The moment the receive's completion is visible, its slot is free: an
  // application reposting on each completion must not find the ring full.
  auto recv_visible = [&] {
    for (uint32_t i = 0; i < cq.ring.load_producer(); i++)
      if (static_cast<const mroce_cqe*>(cq.ring.slot(i))->opcode == 128) return true;  // RECV
    return false;
  };
  REQUIRE(f.run_until(recv_visible));
  CHECK(s.ring.load_consumer() == 1);
  CHECK(rbuf[0] == 3);
  mroce_handle_req q{s.srqn, 0};
  auto attr = reply_as<mroce_srq_attr>(f.call(MROCE_OP_QUERY_SRQ, bytes_of(q)));
  CHECK(attr.max_wr == 4);
}

TEST_CASE("srq__scribbled_producer_is_an_srq_error_counted_once_and_lets_the_nic_sleep") {
  Fixture f;
  uint32_t pdn = reply_as<mroce_alloc_pd_resp>(f.call(MROCE_OP_ALLOC_PD, {})).pdn;
  Srq s = make_srq(f, pdn, 4);
  s.ring.store_producer(0x7fffffff);
  REQUIRE(f.run_until([&] { return f.device.counters().ring_bad_producer >= 1; }));
  for (int i = 0; i < 100; i++) f.device.poll_once();
  CHECK(f.device.counters().ring_bad_producer == 1);
  CHECK(f.device.prepare_sleep());
  f.device.end_sleep();
}

TEST_CASE("srq__entries_with_too_many_sges_are_refused_counted_and_free_their_slot") {
  Fixture f;
  uint32_t pdn = reply_as<mroce_alloc_pd_resp>(f.call(MROCE_OP_ALLOC_PD, {})).pdn;
  std::vector<uint8_t> rbuf(1024);
  Srq s = make_srq(f, pdn, 4);  // max_sge 2
  post_srq(s, 0, 1, rbuf, 0, 3);
  post_srq(s, 1, 2, rbuf, 0, 1000);
  REQUIRE(f.run_until([&] { return f.device.counters().wqe_srq_refused == 2; }));
  CHECK(s.ring.load_consumer() == 2);
  CHECK(f.device.counters().ring_bad_producer == 0);
}

TEST_CASE("srq__control_refusals_say_why") {
  Fixture f;
  uint32_t pdn = reply_as<mroce_alloc_pd_resp>(f.call(MROCE_OP_ALLOC_PD, {})).pdn;
  Cq cq = make_cq(f);
  Srq s = make_srq(f, pdn, 8);
  make_srq_qp(f, pdn, cq, s.srqn);
  mroce_handle_req h{s.srqn, 0};
  Device::Reply r = f.call(MROCE_OP_DESTROY_SRQ, bytes_of(h));
  CHECK(r.err == EBUSY);
  CHECK(r.reason == "SRQ still has QPs attached: destroy them first");
  mroce_modify_srq_req m{};
  m.srqn = s.srqn;
  m.attr_mask = 1;  // IBV_SRQ_MAX_WR
  r = f.call(MROCE_OP_MODIFY_SRQ, bytes_of(m));
  CHECK(r.err == EINVAL);
  CHECK(r.reason == "resizing an SRQ (IBV_SRQ_MAX_WR) is not supported");
  m.attr_mask = 2;  // IBV_SRQ_LIMIT
  m.attr.srq_limit = 9;
  r = f.call(MROCE_OP_MODIFY_SRQ, bytes_of(m));
  CHECK(r.err == EINVAL);
  CHECK(r.reason == "srq_limit above the SRQ's max_wr");
  mroce_create_srq_req bad{};
  bad.pdn = pdn;
  bad.attr = {0, 1, 0, 0};
  r = f.call(MROCE_OP_CREATE_SRQ, bytes_of(bad));
  CHECK(r.err == EINVAL);
  CHECK(r.reason == "SRQ max_wr must be 1..max_srq_wr");
  // Another context sees none of it, and cannot attach a QP to it.
  Device::Client* other = f.open(getuid());
  r = f.call_as(*other, MROCE_OP_QUERY_SRQ, bytes_of(h));
  CHECK(r.err == ENOENT);
  CHECK(r.reason == "no SRQ " + std::to_string(s.srqn) + " in this context");
  bad.attr = {4, 1, 0, 0};
  r = f.call_as(*other, MROCE_OP_CREATE_SRQ, bytes_of(bad));
  CHECK(r.err == ENOENT);  // the PD is the first context's
  uint32_t opd = reply_as<mroce_alloc_pd_resp>(f.call_as(*other, MROCE_OP_ALLOC_PD, {})).pdn;
  mroce_create_cq_req cqr{0, 16, 0};
  Device::Reply cr = f.call_as(*other, MROCE_OP_CREATE_CQ, bytes_of(cqr));
  REQUIRE(cr.err == 0);
  for (int fd : cr.fds) close(fd);
  mroce_create_qp_req qreq{};
  qreq.pdn = opd;
  qreq.send_cqn = qreq.recv_cqn = reply_as<mroce_create_cq_resp>(cr).cqn;
  qreq.cap = {4, 0, 1, 0, 0};
  qreq.qp_type = 2;
  qreq.srqn = s.srqn;
  r = f.call_as(*other, MROCE_OP_CREATE_QP, bytes_of(qreq));
  CHECK(r.err == EINVAL);
  CHECK(r.reason == "SRQ " + std::to_string(s.srqn) + " does not belong to this context");
}

}  // namespace

namespace {

// ud: a UD QP of client c in RESET (its own PD and CQ); the QPN.
uint32_t ud_qp_of(Fixture& f, Device::Client& c) {
  uint32_t pdn = reply_as<mroce_alloc_pd_resp>(f.call_as(c, MROCE_OP_ALLOC_PD, {})).pdn;
  mroce_create_cq_req creq{1, 16, 0};
  Device::Reply cr = f.call_as(c, MROCE_OP_CREATE_CQ, bytes_of(creq));
  REQUIRE(cr.err == 0);
  for (int fd : cr.fds) close(fd);
  mroce_create_qp_req q{};
  q.pdn = pdn;
  q.send_cqn = q.recv_cqn = reply_as<mroce_create_cq_resp>(cr).cqn;
  q.cap = {16, 16, 1, 1, 0};
  q.qp_type = 4;  // IBV_QPT_UD
  Device::Reply r = f.call_as(c, MROCE_OP_CREATE_QP, bytes_of(q));
  REQUIRE(r.err == 0);
  for (int fd : r.fds) close(fd);
  return reply_as<mroce_create_qp_resp>(r).qpn;
}

Device::Reply to_init_with_qkey(Fixture& f, Device::Client& c, uint32_t qpn, uint32_t qkey) {
  mroce_modify_qp_req m{};
  m.qpn = qpn;
  m.attr.attr_mask = fw::kAttrState | fw::kAttrPkeyIndex | fw::kAttrPort | fw::kAttrQkey;
  m.attr.qp_state = 1;
  m.attr.port_num = 1;
  m.attr.qkey = qkey;
  return f.call_as(c, MROCE_OP_MODIFY_QP, bytes_of(m));
}

}  // namespace

TEST_CASE("control__controlled_qkey_needs_root") {
  Fixture f;
  Device::Client* user = f.open(4242);
  Device::Client* root = f.open(0);
  uint32_t uq = ud_qp_of(f, *user), rq = ud_qp_of(f, *root);
  Device::Reply r = to_init_with_qkey(f, *user, uq, 0x80010000);
  CHECK(r.err == EPERM);
  CHECK(r.reason == "Q_Key 0x80010000 is controlled (high bit set): only a privileged user (root) "
                    "may give a QP one");
  CHECK(f.device.counters().qkey_privileged_refused == 1);
  CHECK(to_init_with_qkey(f, *user, uq, 0x11111111).err == 0);
  CHECK(to_init_with_qkey(f, *root, rq, 0x80010000).err == 0);
  CHECK(f.device.counters().qkey_privileged_refused == 1);
}

TEST_CASE("control__create_ah_refusals_have_reasons") {
  Fixture f;
  Device::Client* other = f.open(getuid() + 1);
  uint32_t pdn = reply_as<mroce_alloc_pd_resp>(f.call(MROCE_OP_ALLOC_PD, {})).pdn;
  mroce_create_ah_req req{};
  req.pdn = pdn;
  req.ah.dgid[10] = req.ah.dgid[11] = 0xff;
  req.ah.dgid[12] = 10;
  req.ah.hop_limit = 64;
  Device::Reply r = f.call(MROCE_OP_CREATE_AH, bytes_of(req));
  CHECK(r.err == EINVAL);
  CHECK(r.reason.find("address handle without a GRH") == 0);
  req.ah.is_global = 1;
  r = f.call_as(*other, MROCE_OP_CREATE_AH, bytes_of(req));
  CHECK(r.err == ENOENT);
  CHECK(r.reason == "no PD " + std::to_string(pdn) + " in this context");
  req.ah.sgid_index = 5;  // the fixture's port has one GID
  r = f.call(MROCE_OP_CREATE_AH, bytes_of(req));
  CHECK(r.err == EINVAL);
  CHECK(r.reason == "sgid_index 5 is beyond the port's GID table");
  CHECK(f.device.counters().ah_refused == 3);
  req.ah.sgid_index = 0;
  r = f.call(MROCE_OP_CREATE_AH, bytes_of(req));
  REQUIRE(r.err == 0);
  uint32_t ahn = reply_as<mroce_create_ah_resp>(r).ahn;
  mroce_handle_req h{ahn, 0};
  r = f.call_as(*other, MROCE_OP_DESTROY_AH, bytes_of(h));
  CHECK(r.err == ENOENT);
  CHECK(r.reason == "no AH " + std::to_string(ahn) + " in this context");
  mroce_handle_req pd_req{pdn, 0};
  CHECK(f.call(MROCE_OP_DEALLOC_PD, bytes_of(pd_req)).err == EBUSY);  // the AH holds the PD
  CHECK(f.call(MROCE_OP_DESTROY_AH, bytes_of(h)).err == 0);
  CHECK(f.call(MROCE_OP_DEALLOC_PD, bytes_of(pd_req)).err == 0);
}

// mw: ALLOC_MW / DEALLOC_MW refusals carry their reason; windows are
// bounded per connection; QUERY_DEVICE_EX reports max_mw.
TEST_CASE("mw__alloc_refusals_say_why") {
  DeviceConfig cfg = Fixture::config();
  cfg.limits.max_mw = 3;
  Fixture f(cfg);
  auto x = reply_as<mroce_device_attr_ex>(f.call(MROCE_OP_QUERY_DEVICE_EX, {}));
  CHECK(x.max_mw == 3);  // the per-connection limit, below the device's
  uint32_t pdn = reply_as<mroce_alloc_pd_resp>(f.call(MROCE_OP_ALLOC_PD, {})).pdn;
  mroce_alloc_mw_req req{pdn, 3};
  Device::Reply r = f.call(MROCE_OP_ALLOC_MW, bytes_of(req));
  CHECK(r.err == EINVAL);
  CHECK(r.reason == "memory window type 3 (IBV_MW_TYPE_1 or _2)");
  req = {pdn + 100, 2};
  r = f.call(MROCE_OP_ALLOC_MW, bytes_of(req));
  CHECK(r.err == ENOENT);
  CHECK(r.reason == "no PD " + std::to_string(pdn + 100) + " in this context");
  req = {pdn, 1};
  std::vector<mroce_alloc_mw_resp> mws;
  for (int i = 0; i < 3; ++i) mws.push_back(reply_as<mroce_alloc_mw_resp>(f.call(MROCE_OP_ALLOC_MW, bytes_of(req))));
  CHECK((mws[0].rkey & 0xff) == 0);
  CHECK(mws[0].rkey != mws[1].rkey);
  r = f.call(MROCE_OP_ALLOC_MW, bytes_of(req));
  CHECK(r.err == ENOMEM);
  CHECK(r.reason == "per-client MW limit reached (3)");
  // Another context can neither free nor name them.
  Device::Client* other = f.open(getuid());
  mroce_handle_req h{mws[0].handle, 0};
  r = f.call_as(*other, MROCE_OP_DEALLOC_MW, bytes_of(h));
  CHECK(r.err == ENOENT);
  CHECK(r.reason == "no MW " + std::to_string(mws[0].handle) + " in this context");
  CHECK(f.call(MROCE_OP_DEALLOC_MW, bytes_of(h)).err == 0);
  CHECK(f.call(MROCE_OP_DEALLOC_MW, bytes_of(h)).err == ENOENT);
  CHECK(f.call(MROCE_OP_ALLOC_MW, bytes_of(req)).err == 0);  // room again
}

// mw2: memory windows are bounded per user over all its connections too
// (one client with many connections cannot take the device's windows);
// QUERY_DEVICE_EX reports the smallest bound; closing returns the share.
TEST_CASE("mw__per_user_limit_spans_connections") {
  DeviceConfig cfg = Fixture::config();
  cfg.limits.max_mw = 4;
  cfg.user_limits.max_mw = 3;
  Fixture f(cfg);
  CHECK(reply_as<mroce_device_attr_ex>(f.call(MROCE_OP_QUERY_DEVICE_EX, {})).max_mw == 3);
  Device::Client* second = f.open(getuid());
  auto alloc_on = [&](Device::Client* c) {
    uint32_t pdn = reply_as<mroce_alloc_pd_resp>(f.call_as(*c, MROCE_OP_ALLOC_PD, {})).pdn;
    mroce_alloc_mw_req req{pdn, 2};
    return [&f, c, req] { return f.call_as(*c, MROCE_OP_ALLOC_MW, bytes_of(req)); };
  };
  auto first = alloc_on(f.client), other = alloc_on(second);
  CHECK(first().err == 0);
  CHECK(first().err == 0);
  Device::Reply last = other();
  CHECK(last.err == 0);
  uint32_t refused_before = static_cast<uint32_t>(f.device.counters().limit_refused_user);
  Device::Reply r = other();  // the 4th of this uid, the 2nd of its connection
  CHECK(r.err == ENOMEM);
  CHECK(r.reason == "per-user MW limit 3 reached for uid " + std::to_string(getuid()) +
                        "; raise --uid-max-mw");
  CHECK(f.device.counters().limit_refused_user == refused_before + 1);
  mroce_handle_req h{reply_as<mroce_alloc_mw_resp>(last).handle, 0};
  CHECK(f.call_as(*second, MROCE_OP_DEALLOC_MW, bytes_of(h)).err == 0);
  CHECK(other().err == 0);  // freeing returned its share
  f.device.close_client(f.client->id);  // so does closing (its 2 windows)
  CHECK(other().err == 0);
  CHECK(other().err == 0);
  CHECK(other().err == ENOMEM);
  f.client = f.open(getuid());
  Options o;
  std::string err;
  bool help = false;
  REQUIRE(parse_options({"--netdev", "eth0", "--max-mw-per-client", "2", "--uid-max-mw", "5"}, &o,
                        &err, &help));
  CHECK(o.max_mw_per_client == 2);
  CHECK(o.uid_max_mw == 5);
  CHECK_FALSE(parse_options({"--netdev", "eth0", "--uid-max-mw", "0"}, &o, &err, &help));
}

}  // namespace metaroce::daemon

// ---- transmit backpressure: a full TX ring holds packets in the engine ----

namespace metaroce::daemon {
namespace {

// One end of a wire whose transmit ring frees only as the wire carries
// frames, at the pace the test sets (a NIC's ring frees on completion, not
// when the daemon asks). Frames carried arrive in the peer's inbox.
class RingIo final : public io::PacketIo {
 public:
  RingIo* peer = nullptr;
  uint32_t capacity = 48;  // frames queued or in the "kernel"

  int rx_burst(std::span<io::RxFrame> out) override {
    held_.clear();
    while (held_.size() < out.size() && !inbox_.empty()) {
      held_.push_back(std::move(inbox_.front()));
      inbox_.pop_front();
    }
    for (size_t i = 0; i < held_.size(); i++)
      out[i] = {held_[i].data(), static_cast<uint32_t>(held_[i].size())};
    uint64_t v;  // wake_fd is readable while frames wait, as a socket is
    if (wake_fd >= 0 && inbox_.empty()) while (read(wake_fd, &v, sizeof v) == sizeof v) {}
    return static_cast<int>(held_.size());
  }
  void rx_release() override { held_.clear(); }
  std::span<uint8_t> tx_alloc(uint32_t len) override {
    if (len > max_frame() || tx_room() == 0) {
      stats_.tx_ring_full++;
      return {};
    }
    slot_.assign(max_frame(), 0);
    return slot_;
  }
  void tx_commit(uint32_t len) override {
    if (len == 0 || len > slot_.size()) return;
    slot_.resize(len);
    pending_.push_back(std::move(slot_));
    stats_.tx_frames++;
  }
  int tx_flush() override {
    int n = static_cast<int>(pending_.size());
    for (auto& f : pending_) kernel_.push_back(std::move(f));
    pending_.clear();
    return n;
  }
  uint32_t tx_pending() const override { return static_cast<uint32_t>(pending_.size()); }
  uint32_t tx_room() override {
    return capacity - static_cast<uint32_t>(pending_.size() + kernel_.size());
  }
  uint32_t tx_capacity() const override { return capacity; }
  int wake_fd = -1;  // an eventfd the wire writes when it delivers (the loop's wait_fd)
  // The wire moves up to n frames the "kernel" holds to the peer.
  void carry(size_t n) {
    for (; n > 0 && !kernel_.empty(); --n) {
      peer->inbox_.push_back(std::move(kernel_.front()));
      kernel_.pop_front();
      uint64_t one = 1;
      if (peer->wake_fd >= 0) CHECK(write(peer->wake_fd, &one, sizeof one) == sizeof one);
    }
  }
  size_t in_kernel() const { return kernel_.size(); }
  int wait_fd() const override { return wake_fd; }
  uint32_t max_frame() const override { return 1600; }
  const char* name() const override { return "ring_io(test)"; }
  io::IoStats stats() const override { return stats_; }

 private:
  std::vector<uint8_t> slot_;
  std::deque<std::vector<uint8_t>> pending_, kernel_, inbox_;
  std::vector<std::vector<uint8_t>> held_;
  io::IoStats stats_;
};

class AnyMac final : public LinkInterface {
 public:
  bool resolve(const proto::IpAddr&, proto::MacAddr* mac) override {
    *mac = {2, 0, 0, 0, 0, 2};
    return true;
  }
  proto::MacAddr local_mac() const override { return {2, 0, 0, 0, 0, 1}; }
};

DeviceConfig config_at(uint32_t gid) {
  DeviceConfig c = Fixture::config();
  c.engine.port.gids = {proto::IpAddr::v4(gid)};
  // A window of 25 Gbit/s x 200 us = 625 KB: the whole 200 KB WRITE may go
  // at once, far more than the ring holds.
  c.engine.base_rtt = 200'000;
  return c;
}

// A Fixture on a RingIo, its only GID `gid`.
struct WiredFixture : Fixture {
  WiredFixture(RingIo* io, AnyMac* link, uint32_t gid) : Fixture(config_at(gid), io, link) {}
};

}  // namespace

// docs/daemon.md §Transmit backpressure: a 200 KB WRITE whose window is far
// larger than what the ring has room for. The engine is held while the ring
// is full instead of the port dropping (the drops used to come back as
// retransmissions), and the data lands intact.
void write_through_rings(uint32_t capacity) {
  RingIo io_a, io_b;
  io_a.peer = &io_b;
  io_b.peer = &io_a;
  io_a.capacity = io_b.capacity = capacity;
  AnyMac link;
  WiredFixture fa(&io_a, &link, 0x0a000001), fb(&io_b, &link, 0x0a000002);
  uint32_t pa = reply_as<mroce_alloc_pd_resp>(fa.call(MROCE_OP_ALLOC_PD, {})).pdn;
  uint32_t pb = reply_as<mroce_alloc_pd_resp>(fb.call(MROCE_OP_ALLOC_PD, {})).pdn;
  std::vector<uint8_t> src(200'000), dst(200'000, 0);
  std::iota(src.begin(), src.end(), 3);
  auto reg = [](Fixture& f, uint32_t pdn, std::vector<uint8_t>& b) {
    mroce_reg_mr_req req{reinterpret_cast<uint64_t>(b.data()), b.size(), pdn, 1 | 2 | 4 | 8};
    Device::Reply r = f.call(MROCE_OP_REG_MR, bytes_of(req));
    REQUIRE(r.err == 0);
    return reply_as<mroce_reg_mr_resp>(r);
  };
  auto mr_src = reg(fa, pa, src), mr_dst = reg(fb, pb, dst);
  Cq ca = make_cq(fa), cb = make_cq(fb);
  Qp a = make_qp(fa, pa, ca), b = make_qp(fb, pb, cb);
  connect(fa, a, b.qpn, 0x0a000002);
  connect(fb, b, a.qpn, 0x0a000001);

  auto* w = static_cast<mroce_send_wqe*>(a.sq.slot(0));
  *w = {};
  w->wr_id = 1;
  w->opcode = 0;  // RDMA_WRITE
  w->send_flags = 2;
  w->num_sge = 1;
  w->remote_addr = reinterpret_cast<uint64_t>(dst.data());
  w->rkey = mr_dst.rkey;
  w->u.sg[0] = {reinterpret_cast<uint64_t>(src.data()), 200'000, mr_src.lkey};
  a.sq.store_producer(1);
  // The wire carries 1 frame each way per pass: the ring frees slowly.
  REQUIRE(fa.run_until([&] {
    io_a.carry(1);
    io_b.carry(1);
    fb.device.poll_once();
    return ca.ring.load_producer() >= 1;
  }));
  auto* e = static_cast<mroce_cqe*>(ca.ring.slot(0));
  CHECK(e->status == 0);
  CHECK(std::memcmp(dst.data(), src.data(), dst.size()) == 0);
  CHECK(fa.device.counters().tx_held_ring_full > 0);  // the ring did fill
  CHECK(fa.device.counters().tx_drop_ring_full == 0);
  CHECK(fb.device.counters().tx_drop_ring_full == 0);
  // txf: the payloads were read straight into the ring's frames (hal.h
  // §tx_buffer), none through the engine's scratch, every frame finished
  // as reserved.
  const fw::Counters& ea = fa.device.soft_nic()->engine().counters();
  CHECK(ea.tx_payload_in_frame >= 200'000 / 1024);
  CHECK(ea.tx_payload_copied == 0);
  CHECK(ea.tx_frames_abandoned == 0);
  CHECK(fa.device.counters().tx_drop_frame_mismatch == 0);
}

// txf: a payload the DMA cannot read after its frame was reserved: the
// frame goes back to the ring unsent (nothing queued, no slot lost), the
// WQE completes in error as on the copy path.
TEST_CASE("txbuf__a_dma_failure_after_the_frame_was_reserved_returns_it_to_the_ring") {
  RingIo io_a, io_b;
  io_a.peer = &io_b;
  io_b.peer = &io_a;
  AnyMac link;
  WiredFixture fa(&io_a, &link, 0x0a000001), fb(&io_b, &link, 0x0a000002);
  uint32_t pa = reply_as<mroce_alloc_pd_resp>(fa.call(MROCE_OP_ALLOC_PD, {})).pdn;
  uint32_t pb = reply_as<mroce_alloc_pd_resp>(fb.call(MROCE_OP_ALLOC_PD, {})).pdn;
  // Two pages, the second unmapped after registration: the first packet's
  // payload reads, the fifth's (at 4 KiB) faults.
  const size_t page = 4096;
  auto* src = static_cast<uint8_t*>(
      mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  REQUIRE(src != MAP_FAILED);
  std::memset(src, 0x5A, 2 * page);
  std::vector<uint8_t> dst(2 * page, 0);
  auto reg = [](Fixture& f, uint32_t pdn, uint8_t* b, size_t n) {
    mroce_reg_mr_req req{reinterpret_cast<uint64_t>(b), n, pdn, 1 | 2 | 4 | 8};
    Device::Reply r = f.call(MROCE_OP_REG_MR, bytes_of(req));
    REQUIRE(r.err == 0);
    return reply_as<mroce_reg_mr_resp>(r);
  };
  auto mr_src = reg(fa, pa, src, 2 * page), mr_dst = reg(fb, pb, dst.data(), dst.size());
  REQUIRE(munmap(src + page, page) == 0);
  Cq ca = make_cq(fa), cb = make_cq(fb);
  Qp a = make_qp(fa, pa, ca), b = make_qp(fb, pb, cb);
  connect(fa, a, b.qpn, 0x0a000002);
  connect(fb, b, a.qpn, 0x0a000001);
  auto* w = static_cast<mroce_send_wqe*>(a.sq.slot(0));
  *w = {};
  w->wr_id = 1;
  w->opcode = 0;  // RDMA_WRITE
  w->send_flags = 2;
  w->num_sge = 1;
  w->remote_addr = reinterpret_cast<uint64_t>(dst.data());
  w->rkey = mr_dst.rkey;
  w->u.sg[0] = {reinterpret_cast<uint64_t>(src), 2 * page, mr_src.lkey};
  a.sq.store_producer(1);
  REQUIRE(fa.run_until([&] {
    io_a.carry(64);
    io_b.carry(64);
    fb.device.poll_once();
    return ca.ring.load_producer() >= 1;
  }));
  auto* e = static_cast<mroce_cqe*>(ca.ring.slot(0));
  CHECK(e->status != 0);
  const fw::Counters& ea = fa.device.soft_nic()->engine().counters();
  CHECK(ea.tx_frames_abandoned == 1);
  CHECK(ea.tx_payload_copied == 0);
  CHECK(fa.device.soft_nic()->dma_stats().faults >= 1);
  CHECK(fa.device.counters().tx_drop_frame_mismatch == 0);
  // Every frame reserved was either sent or given back: the ring is whole.
  for (int i = 0; i < 100 && io_a.tx_room() < io_a.capacity; ++i) {
    io_a.tx_flush();
    io_a.carry(64);
  }
  CHECK(io_a.tx_room() == io_a.capacity);
  CHECK(io_a.stats().tx_frames == ea.tx_packets);  // the abandoned frame was not committed
  munmap(src, page);
}

TEST_CASE("backpressure__full_tx_ring_holds_the_engine_instead_of_dropping") {
  write_through_rings(48);
}

// A ring of 16 (AF_XDP with little locked memory) is below the 32-frame
// reserve: the reserve shrinks to a quarter, else the engine would be held
// for good.
TEST_CASE("backpressure__a_ring_smaller_than_the_reserve_still_carries_requests") {
  write_through_rings(16);
}

}  // namespace metaroce::daemon

namespace metaroce::daemon {
namespace {

// docs/daemon.md §No lost wake-up. A DaemonLoop on its own thread, as in
// metaroced, whose sleeps last an hour unless something wakes it: work that
// is not found in time is not found at all, and the waits below (30 s)
// fail instead of passing late.
struct LoopThread {
  boost::asio::io_context io;
  // Outstanding work, as metaroced's control socket is: an io_context
  // without any stops, and a stopped one never sleeps nor runs stop().
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> busy =
      boost::asio::make_work_guard(io);
  DaemonLoop loop;
  std::thread thread;
  LoopThread(Fixture& f, LoopOptions o) : loop(io, f.device, f.doorbell, -1, {}, long_sleeps(o)) {
    thread = std::thread([this] { loop.run(); });
  }
  ~LoopThread() {
    boost::asio::post(io, [this] { loop.stop(); });  // wakes a sleeping loop
    thread.join();
  }
  static LoopOptions long_sleeps(LoopOptions o) {
    o.spin_ns = 0;
    o.busy_horizon_ns = 0;
    o.max_sleep_ns = 3600'000'000'000;
    return o;
  }
};

template <class Pred>
bool wait_for(Pred done, std::chrono::seconds limit = std::chrono::seconds(30)) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return done();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

bool nic_sleeping(const RingView& r) {
  return __atomic_load_n(&r.hdr()->nic_sleeping, __ATOMIC_SEQ_CST) != 0;
}

// Two loopback QPs and a 64-byte RDMA WRITE from a to b, posted by
// post_write() as the provider does: the WQE, the producer, then the
// doorbell only if the NIC announced sleep.
struct LoopbackWrite {
  Fixture& f;
  std::vector<uint8_t> src = std::vector<uint8_t>(64, 0x5a), dst = std::vector<uint8_t>(64, 0);
  mroce_reg_mr_resp mr_src{}, mr_dst{};
  Cq cq;
  Qp a, b;
  explicit LoopbackWrite(Fixture& fx) : f(fx) {
    uint32_t pdn = reply_as<mroce_alloc_pd_resp>(f.call(MROCE_OP_ALLOC_PD, {})).pdn;
    mr_src = reg(pdn, src);
    mr_dst = reg(pdn, dst);
    cq = make_cq(f);
    a = make_qp(f, pdn, cq);
    b = make_qp(f, pdn, cq);
    connect(f, a, b.qpn);
    connect(f, b, a.qpn);
  }
  mroce_reg_mr_resp reg(uint32_t pdn, std::vector<uint8_t>& buf) {
    mroce_reg_mr_req req{reinterpret_cast<uint64_t>(buf.data()), buf.size(), pdn, 1 | 2 | 4 | 8};
    Device::Reply r = f.call(MROCE_OP_REG_MR, bytes_of(req));
    REQUIRE(r.err == 0);
    return reply_as<mroce_reg_mr_resp>(r);
  }
  // Returns whether it rang the doorbell.
  bool post_write() {
    auto* w = static_cast<mroce_send_wqe*>(a.sq.slot(0));
    *w = {};
    w->wr_id = 9;
    w->opcode = 0;  // RDMA_WRITE
    w->send_flags = 2;
    w->num_sge = 1;
    w->remote_addr = reinterpret_cast<uint64_t>(dst.data());
    w->rkey = mr_dst.rkey;
    w->u.sg[0] = {reinterpret_cast<uint64_t>(src.data()), 64, mr_src.lkey};
    a.sq.store_producer(1);
    if (!nic_sleeping(a.sq)) return false;
    uint64_t one = 1;
    CHECK(write(f.doorbell, &one, sizeof one) == sizeof one);
    return true;
  }
  bool completed() const { return cq.ring.load_producer() >= 1; }
};

}  // namespace

// Posted after the loop's last look at the rings but before it announced
// sleep: the application saw nic_sleeping 0 and rang no doorbell, so the
// loop must find the work when it rescans after the announcement.
TEST_CASE("wakeup__work_posted_between_the_last_pass_and_the_sleep_is_served_without_a_doorbell") {
  Fixture f;
  LoopbackWrite t(f);
  std::atomic<int> rang{-1};
  LoopOptions o;
  o.after_idle_pass = [&] {
    if (rang.load() < 0) rang = t.post_write() ? 1 : 0;
  };
  LoopThread loop(f, o);
  REQUIRE_MESSAGE(wait_for([&] { return t.completed(); }),
                  "the loop slept on a posted WRITE without rescanning its rings");
  CHECK(rang.load() == 0);  // no doorbell: only the rescan could find it
  CHECK(std::memcmp(t.dst.data(), t.src.data(), 64) == 0);
}

// Posted while the loop sleeps, as an application that posts and then
// blocks on its CQ: the doorbell must wake it.
TEST_CASE("wakeup__a_doorbell_rung_while_the_nic_sleeps_wakes_it") {
  Fixture f;
  LoopbackWrite t(f);
  LoopThread loop(f, LoopOptions{});
  REQUIRE(wait_for([&] { return nic_sleeping(t.a.sq); }));
  CHECK(t.post_write());  // the NIC announced sleep: the provider rings
  REQUIRE_MESSAGE(wait_for([&] { return t.completed(); }),
                  "a doorbell did not wake the sleeping loop");
  CHECK(std::memcmp(t.dst.data(), t.src.data(), 64) == 0);
}

// Frames that arrive after the pass that found none, even when the control
// plane is polled on every pass (Asio's epoll is edge-triggered: such a
// poll takes the edge, so only arming the wait before the sleep, which
// reports a readable descriptor at once, lets the frame wake the loop).
TEST_CASE("wakeup__a_frame_that_arrives_between_the_last_pass_and_the_sleep_wakes_it") {
  RingIo io_a, io_b;
  io_a.peer = &io_b;
  io_b.peer = &io_a;
  io_a.wake_fd = eventfd(0, EFD_NONBLOCK);
  AnyMac link;
  WiredFixture fa(&io_a, &link, 0x0a000001), fb(&io_b, &link, 0x0a000002);
  uint32_t pa = reply_as<mroce_alloc_pd_resp>(fa.call(MROCE_OP_ALLOC_PD, {})).pdn;
  uint32_t pb = reply_as<mroce_alloc_pd_resp>(fb.call(MROCE_OP_ALLOC_PD, {})).pdn;
  std::vector<uint8_t> src(128, 0x3c), dst(128, 0);
  auto reg = [](Fixture& f, uint32_t pdn, std::vector<uint8_t>& b) {
    mroce_reg_mr_req req{reinterpret_cast<uint64_t>(b.data()), b.size(), pdn, 1 | 2 | 4 | 8};
    Device::Reply r = f.call(MROCE_OP_REG_MR, bytes_of(req));
    REQUIRE(r.err == 0);
    return reply_as<mroce_reg_mr_resp>(r);
  };
  auto mr_src = reg(fb, pb, src), mr_dst = reg(fa, pa, dst);
  Cq ca = make_cq(fa), cb = make_cq(fb);
  Qp a = make_qp(fa, pa, ca), b = make_qp(fb, pb, cb);
  connect(fa, a, b.qpn, 0x0a000002);
  connect(fb, b, a.qpn, 0x0a000001);
  // B writes two 64-byte halves of A's buffer: two frames on B's wire.
  for (uint32_t i = 0; i < 2; i++) {
    auto* w = static_cast<mroce_send_wqe*>(b.sq.slot(i));
    *w = {};
    w->wr_id = i;
    w->opcode = 0;  // RDMA_WRITE
    w->num_sge = 1;
    w->remote_addr = reinterpret_cast<uint64_t>(dst.data() + 64 * i);
    w->rkey = mr_dst.rkey;
    w->u.sg[0] = {reinterpret_cast<uint64_t>(src.data() + 64 * i), 64, mr_src.lkey};
  }
  b.sq.store_producer(2);
  REQUIRE(fb.run_until([&] { return io_b.in_kernel() >= 2; }));
  // One frame reaches A in the window after each pass of A's that found none.
  LoopOptions o;
  o.control_every = 1;
  o.after_idle_pass = [&] { io_b.carry(1); };
  {
    LoopThread loop(fa, o);
    REQUIRE_MESSAGE(wait_for([&] { return std::memcmp(dst.data(), src.data(), 128) == 0; }),
                    "a frame that arrived before the sleep did not wake the loop");
  }
  close(io_a.wake_fd);
}

}  // namespace metaroce::daemon
