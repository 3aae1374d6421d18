// Daemon core without a network: the control plane, the rings and the DMA
// engine, driving a real transport engine over loopback (two QPs on one
// device, as a real NIC supports). The client is this test process.
#include "firmware-model/daemon/device.h"

#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <doctest/doctest.h>
#include <numeric>
#include <vector>

#include "firmware-model/daemon/dma.h"
#include "firmware-model/daemon/options.h"

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
  Fixture() {
    client = device.open_client(getpid(), getuid(), -1);
    mroce_open_context_req req{MROCE_ABI_VERSION, 0};
    Device::Reply r = call(MROCE_OP_OPEN_CONTEXT, bytes_of(req));
    REQUIRE(r.err == 0);
    for (int fd : r.fds) close(fd);
  }
  ~Fixture() {
    for (auto [m, len] : maps) munmap(m, len);
    close(doorbell);
  }
  Device::Reply call(uint16_t op, std::span<const uint8_t> body, std::vector<int> fds = {}) {
    Device::Request req;
    req.op = op;
    req.body = body;
    req.fds = std::move(fds);
    Device::Reply r;
    device.handle(*client, req, &r);
    return r;
  }
  uint8_t* map(const Device::Reply& r, size_t bytes) {
    REQUIRE(r.fds.size() == 1);
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, r.fds[0], 0);
    close(r.fds[0]);
    REQUIRE(p != MAP_FAILED);
    maps.push_back({p, bytes});
    return static_cast<uint8_t*>(p);
  }
  void run(int passes = 200) {
    for (int i = 0; i < passes; i++) device.poll_once();
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
  CHECK(f.device.counters().ctrl_malformed == 2);
  // Per-client PD limit (2 in this fixture).
  CHECK(f.call(MROCE_OP_ALLOC_PD, {}).err == 0);
  CHECK(f.call(MROCE_OP_ALLOC_PD, {}).err == 0);
  r = f.call(MROCE_OP_ALLOC_PD, {});
  CHECK(r.err == ENOMEM);
  CHECK(r.reason.find("limit") != std::string::npos);
  // A second OPEN_CONTEXT on one connection.
  mroce_open_context_req o{MROCE_ABI_VERSION, 0};
  CHECK(f.call(MROCE_OP_OPEN_CONTEXT, bytes_of(o)).err == EBUSY);
  // Wrong client ABI.
  o.client_abi = 77;
  CHECK(f.call(MROCE_OP_OPEN_CONTEXT, bytes_of(o)).err == EPROTO);
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

Qp make_qp(Fixture& f, uint32_t pdn, const Cq& cq) {
  mroce_create_qp_req req{};
  req.pdn = pdn;
  req.send_cqn = req.recv_cqn = cq.cqn;
  req.cap = {64, 64, 4, 4, 64};
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

void connect(Fixture& f, const Qp& qp, uint32_t dest) {
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
    proto::IpAddr g = proto::IpAddr::v4(0x0a000001);
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
  f.run(2000);

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
  CHECK(f.device.dma_stats().faults == 0);
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
  f.run(500);
  REQUIRE(cq.ring.load_producer() >= 1);
  auto* e = static_cast<mroce_cqe*>(cq.ring.slot(0));
  CHECK(e->wr_id == 9);
  CHECK(e->status == 10);  // IBV_WC_REM_ACCESS_ERR
}

TEST_CASE("rings__scribbled_producer_index_is_refused_not_trusted") {
  Fixture f;
  uint32_t pdn = reply_as<mroce_alloc_pd_resp>(f.call(MROCE_OP_ALLOC_PD, {})).pdn;
  Cq cq = make_cq(f);
  Qp a = make_qp(f, pdn, cq);
  a.sq.store_producer(0x7fffffff);  // far beyond the ring: garbage
  f.run(10);
  CHECK(f.device.counters().wqe_rejected >= 1);
  CHECK(cq.ring.load_producer() == 0);
}

TEST_CASE("client_close__tears_down_everything_it_owned") {
  Fixture f;
  uint32_t pdn = reply_as<mroce_alloc_pd_resp>(f.call(MROCE_OP_ALLOC_PD, {})).pdn;
  Cq cq = make_cq(f);
  make_qp(f, pdn, cq);
  CHECK(f.device.engine().qp_numbers().size() == 1);
  f.device.close_client(f.client->id);
  CHECK(f.device.engine().qp_numbers().empty());
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
}

}  // namespace
}  // namespace metaroce::daemon
