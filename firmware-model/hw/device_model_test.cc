// The device model, driven by the real driver (HwOffloadBackend) and by a
// raw, hostile one that writes registers and commands itself. The model's
// engine talks to itself over loopback (its only GID is 10.0.0.1); this
// test process is the client whose address space PASIDs are bound to.
#include "firmware-model/hw/device_model.h"

#include <doctest/doctest.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <numeric>
#include <vector>

#include "firmware-model/daemon/queue_pump.h"
#include "firmware-model/daemon/shm_ring.h"
#include "firmware-model/hw/hw_offload_backend.h"

namespace metaroce::hw {
namespace {

using Clock = std::chrono::steady_clock;

// Polls pred until it holds or a generous wall-clock deadline passes.
template <class Pred>
bool wait_until(Pred pred, std::chrono::seconds limit = std::chrono::seconds(60)) {
  auto deadline = Clock::now() + limit;
  while (!pred()) {
    if (Clock::now() > deadline) return pred();
    usleep(200);
  }
  return true;
}

fw::EngineConfig loopback_config() {
  fw::EngineConfig c;
  c.port.gids = {proto::IpAddr::v4(0x0a000001)};
  c.port.link_mtu = 1500;
  c.port.active = true;
  return c;
}

// Binds PASIDs to this process, as the daemon binds its clients.
class SelfBinder final : public PasidBinderInterface {
 public:
  explicit SelfBinder(DeviceModel& m) : model_(m) {}
  int bind(uint32_t pasid, std::string* why) override {
    binds++;
    return model_.bind_pasid(pasid, daemon::ClientMemory::bind_pid(getpid(), why), why);
  }
  void unbind(uint32_t pasid) override {
    unbinds++;
    model_.unbind_pasid(pasid);
  }
  int binds = 0, unbinds = 0;

 private:
  DeviceModel& model_;
};

struct RecordingSink final : EventSink {
  std::vector<fw::Completion> cqes;
  std::vector<std::pair<fw::EventType, uint32_t>> events;
  bool complete(uint32_t, const fw::Completion& wc) override {
    cqes.push_back(wc);
    return true;
  }
  void async_event(fw::EventType t, uint32_t e) override { events.push_back({t, e}); }
  void publish() override {}
};

// The driver over a started model, brought up.
struct Fixture {
  DeviceModel model{loopback_config(), {}};
  SelfBinder binder{model};
  RecordingSink sink;
  HwOffloadBackend hw{model, sink, options(&binder)};
  std::string why;

  static HwOptions options(PasidBinderInterface* b) {
    HwOptions o;
    o.wait_timeout_ns = 30'000'000'000;
    o.binder = b;
    return o;
  }
  Fixture() {
    REQUIRE(model.start(&why) == 0);
    REQUIRE_MESSAGE(hw.bring_up(&why) == 0, why);
    REQUIRE(hw.set_port(loopback_config().port) == 0);
  }
  uint64_t counter(const std::string& name) {
    std::vector<NamedCounter> all;
    REQUIRE(hw.query_counters(kDeviceCounters, &all) == 0);
    for (const auto& c : all)
      if (c.name == name) return c.value;
    FAIL("no counter " << name);
    return 0;
  }
  // Waits for a device counter to reach `at_least` (it is counted on the
  // model's thread, some time after the register write).
  bool counter_reaches(const std::string& name, uint64_t at_least) {
    return wait_until([&] { return counter(name) >= at_least; }, std::chrono::seconds(30));
  }
  void connect(uint32_t qpn, uint32_t dest) {
    fw::QpAttr a;
    a.qp_state = fw::QpState::kInit;
    a.qp_access_flags = fw::kAccessLocalWrite | fw::kAccessRemoteWrite | fw::kAccessRemoteRead;
    REQUIRE(hw.modify_qp(1, qpn, a, fw::kAttrState | fw::kAttrPkeyIndex | fw::kAttrPort |
                                        fw::kAttrAccessFlags) == 0);
    a.qp_state = fw::QpState::kRtr;
    a.av.dgid = proto::IpAddr::v4(0x0a000001);
    a.dest_qp_num = dest;
    a.rq_psn = 100;
    a.min_rnr_timer = 1;
    REQUIRE(hw.modify_qp(1, qpn, a, fw::kAttrState | fw::kAttrAv | fw::kAttrPathMtu |
                                        fw::kAttrDestQpn | fw::kAttrRqPsn |
                                        fw::kAttrMaxDestRdAtomic | fw::kAttrMinRnrTimer) == 0);
    a.qp_state = fw::QpState::kRts;
    a.sq_psn = 100;
    a.timeout = 10;
    a.retry_cnt = 3;
    a.rnr_retry = 3;
    REQUIRE(hw.modify_qp(1, qpn, a, fw::kAttrState | fw::kAttrSqPsn | fw::kAttrTimeout |
                                        fw::kAttrRetryCnt | fw::kAttrRnrRetry |
                                        fw::kAttrMaxQpRdAtomic) == 0);
  }
  uint32_t make_qp(uint32_t pdn, uint32_t cqn) {
    fw::QpInitAttr init;
    init.pdn = pdn;
    init.send_cqn = init.recv_cqn = cqn;
    init.cap = {16, 16, 1, 1, 0};
    uint32_t qpn = 0;
    fw::QpCap cap;
    REQUIRE(hw.create_qp(1, init, &qpn, &cap) == 0);
    return qpn;
  }
};

TEST_CASE("model__brings_up_with_the_engine_caps_and_an_interrupt_fd") {
  Fixture f;
  CHECK(f.hw.up());
  CHECK(f.hw.caps().max_qp == MROCE_HW_DB_PAGES);     // every QP slot has a doorbell page
  CHECK(f.hw.caps().max_cq == MROCE_HW_DB_PAGES - 1);  // CQ 1..4095
  CHECK(f.hw.caps().max_cqe == fw::DeviceCaps{}.max_cqe);
  CHECK(f.hw.wait_fd() >= 0);
  CHECK(f.counter("model_admin_commands") >= 2);  // QUERY_CAPS, SET_PORT, this QUERY_COUNTERS
  CHECK(f.counter("model_resets") == 1);
}

// The whole data path through the ABI: WQEs in the driver's rings,
// doorbells, the engine (loopback), CQEs into the driver's CQ ring, a
// completion event and an interrupt on the eventfd.
TEST_CASE("model__loopback_write_and_send_land_in_memory_with_completions_and_interrupts") {
  Fixture f;
  uint32_t pdn = 0, cqn = 0;
  REQUIRE(f.hw.create_pd(1, &pdn) == 0);
  CHECK(f.binder.binds == 1);
  std::vector<uint8_t> src(100'000), dst(100'000, 0), rbuf(5000, 0);
  std::iota(src.begin(), src.end(), 3);
  fw::MrKeys ms, md, mr;
  uint32_t all = fw::kAccessLocalWrite | fw::kAccessRemoteWrite | fw::kAccessRemoteRead;
  REQUIRE(f.hw.reg_mr(1, pdn, reinterpret_cast<uint64_t>(src.data()), src.size(), all, &ms) == 0);
  REQUIRE(f.hw.reg_mr(1, pdn, reinterpret_cast<uint64_t>(dst.data()), dst.size(), all, &md) == 0);
  REQUIRE(f.hw.reg_mr(1, pdn, reinterpret_cast<uint64_t>(rbuf.data()), rbuf.size(), all, &mr) == 0);
  REQUIRE(f.hw.create_cq(1, 64, &cqn) == 0);
  uint32_t a = f.make_qp(pdn, cqn), b = f.make_qp(pdn, cqn);
  f.connect(a, b);
  f.connect(b, a);

  fw::RecvWr rw;
  rw.wr_id = 77;
  rw.num_sge = 1;
  rw.sg[0] = {reinterpret_cast<uint64_t>(rbuf.data()), 5000, mr.lkey};
  REQUIRE(f.hw.post_recv(1, b, rw) == 0);
  fw::SendWr w;
  w.wr_id = 1;
  w.opcode = fw::WrOpcode::kRdmaWrite;
  w.send_flags = fw::kSendSignaled;
  w.num_sge = 1;
  w.remote_addr = reinterpret_cast<uint64_t>(dst.data());
  w.rkey = md.rkey;
  w.sg[0] = {reinterpret_cast<uint64_t>(src.data()), 100'000, ms.lkey};
  REQUIRE(f.hw.post_send(1, a, w) == 0);
  w.wr_id = 2;
  w.opcode = fw::WrOpcode::kSend;
  w.sg[0] = {reinterpret_cast<uint64_t>(src.data()), 4000, ms.lkey};
  REQUIRE(f.hw.post_send(1, a, w) == 0);

  int interrupts = 0;
  auto deadline = Clock::now() + std::chrono::seconds(60);
  while (f.sink.cqes.size() < 3 && Clock::now() < deadline) {
    pollfd p{f.hw.wait_fd(), POLLIN, 0};
    if (poll(&p, 1, 100) == 1) interrupts++;
    f.hw.service(0);
  }
  REQUIRE(f.sink.cqes.size() == 3);
  CHECK(interrupts >= 1);
  CHECK(std::memcmp(dst.data(), src.data(), dst.size()) == 0);
  CHECK(std::memcmp(rbuf.data(), src.data(), 4000) == 0);
  std::vector<uint64_t> sends;
  for (const auto& c : f.sink.cqes) {
    CHECK(c.status == fw::WcStatus::kSuccess);
    if (c.opcode != fw::WcOpcode::kRecv) sends.push_back(c.wr_id);
  }
  CHECK(sends == std::vector<uint64_t>{1, 2});  // posting order
  CHECK(f.counter("model_doorbells") >= 3);
  CHECK(f.counter("model_wqes_sq") == 2);
  CHECK(f.counter("model_wqes_rq") == 1);
  CHECK(f.counter("model_cqes") == 3);
  CHECK(f.counter("model_eqes") >= 1);
  CHECK(f.counter("model_interrupts") >= 1);
  CHECK(f.counter("dma_faults") == 0);
  // A port event's element is the port, not a QP (the engine raises one
  // on SET_PORT): it reaches the sink as (PORT_ACTIVE, 1).
  CHECK(std::count(f.sink.events.begin(), f.sink.events.end(),
                   std::make_pair(fw::EventType::kPortActive, 1u)) >= 1);

  fw::QpTransportStats t;
  REQUIRE(f.hw.qp_transport(a, 0, &t) == 0);  // QUERY_QP_TRANSPORT, interface 1.1
  CHECK(t.state == fw::QpState::kRts);
  CHECK(t.cc == "default");
  f.hw.destroy_owner(1);
  CHECK(f.binder.unbinds == 1);
  CHECK(f.hw.qp_numbers().empty());
}

TEST_CASE("admin__objects_of_a_pasid_bound_to_no_address_space_are_eperm_with_the_reason") {
  DeviceModel model{loopback_config(), {}};
  RecordingSink sink;
  HwOffloadBackend hw{model, sink, Fixture::options(nullptr)};  // nobody binds PASIDs
  std::string why;
  REQUIRE(model.start(&why) == 0);
  REQUIRE(hw.bring_up(&why) == 0);
  uint32_t pdn = 0;
  CHECK(hw.create_pd(5, &pdn) == EPERM);
  CHECK(hw.last_error() ==
        "CREATE_PD failed in firmware: Operation not permitted (the owner PASID is not bound to "
        "an address space)");
  uint32_t cqn = 0;
  CHECK(hw.create_cq(5, 8, &cqn) == EPERM);
}

TEST_CASE("doorbell__a_producer_index_beyond_the_ring_depth_is_ignored_and_counted") {
  Fixture f;
  uint32_t pdn = 0, cqn = 0;
  REQUIRE(f.hw.create_pd(1, &pdn) == 0);
  REQUIRE(f.hw.create_cq(1, 8, &cqn) == 0);
  uint32_t qpn = f.make_qp(pdn, cqn);  // SQ and RQ of 16
  uint64_t page = MROCE_REG_QP_DB_BASE + uint64_t{qpn & MROCE_HW_DB_INDEX_MASK} * MROCE_HW_DB_STRIDE;
  f.model.write32(page + MROCE_DB_SQ_PI, 1000);
  f.model.write32(page + MROCE_DB_RQ_PI, 17);
  CHECK(f.counter_reaches("model_doorbell_beyond_depth", 2));
  CHECK(f.counter("model_wqes_sq") == 0);  // nothing read from the ring
  CHECK(f.counter("model_wqes_rq") == 0);
  // A doorbell page of no live QP or CQ, and an offset inside a page that
  // is no register.
  f.model.write32(MROCE_REG_QP_DB_BASE + 4000ull * MROCE_HW_DB_STRIDE, 1);
  f.model.write32(MROCE_REG_CQ_DB_BASE + 4000ull * MROCE_HW_DB_STRIDE + MROCE_DB_CQ_ARM, 1);
  f.model.write32(page + 0x40, 1);
  CHECK(f.counter_reaches("model_doorbell_no_queue", 2));
  CHECK(f.counter("model_register_bad_offset") == 1);
  // The QP still works: a receive posted through the driver is taken.
  fw::RecvWr rw;
  rw.num_sge = 0;
  REQUIRE(f.hw.post_recv(1, qpn, rw) == 0);
  CHECK(f.counter_reaches("model_wqes_rq", 1));
}

// A hostile driver of its own: registers, rings and commands by hand.
struct RawDriver {
  DmaBuffer aq{64 * 4}, acq{16 * 4}, eq{16 * 8}, mbox{4096};  // outlive the model's thread
  DeviceModel model{loopback_config(), {}};
  uint32_t tail = 0;

  RawDriver() {
    std::string why;
    REQUIRE(model.start(&why) == 0);
    model.write32(MROCE_REG_DEV_CTRL, MROCE_CTRL_RESET);
    REQUIRE(wait_until([&] { return model.read32(MROCE_REG_DEV_STATUS) & MROCE_STATUS_READY; }));
  }
  void enable(bool map_rings = true) {
    if (map_rings) {
      REQUIRE(model.map_dma(aq.iova(), aq.data(), aq.size()) == 0);
      REQUIRE(model.map_dma(acq.iova(), acq.data(), acq.size()) == 0);
    }
    REQUIRE(model.map_dma(mbox.iova(), mbox.data(), mbox.size()) == 0);
    model.write64(MROCE_REG_AQ_BASE, aq.iova());
    model.write32(MROCE_REG_AQ_DEPTH, 4);
    model.write64(MROCE_REG_ACQ_BASE, acq.iova());
    model.write32(MROCE_REG_ACQ_DEPTH, 4);
    model.write32(MROCE_REG_DEV_CTRL, MROCE_CTRL_ENABLE);
  }
  mroce_hw_admin_cpl submit(mroce_hw_admin_cmd c) {
    c.cmd_id = tail + 100;
    std::memcpy(aq.data() + (tail & 3) * sizeof(c), &c, sizeof(c));
    uint32_t i = tail++;
    model.write32(MROCE_REG_AQ_TAIL, tail);
    auto* slot = reinterpret_cast<mroce_hw_admin_cpl*>(acq.data()) + (i & 3);
    uint8_t phase = ((i / 4) & 1) == 0 ? 1 : 0;
    REQUIRE(wait_until([&] {
      return std::atomic_ref<uint8_t>(slot->phase).load(std::memory_order_acquire) == phase;
    }));
    mroce_hw_admin_cpl cpl;
    std::memcpy(&cpl, slot, sizeof(cpl));
    model.write32(MROCE_REG_ACQ_HEAD, tail);
    CHECK(cpl.cmd_id == c.cmd_id);
    return cpl;
  }
};

TEST_CASE("admin__unknown_opcode_short_and_unmapped_mailboxes_answer_errno_and_syndrome") {
  RawDriver d;
  d.enable();
  mroce_hw_admin_cmd c{};
  c.opcode = 99;
  mroce_hw_admin_cpl cpl = d.submit(c);
  CHECK(cpl.status == EINVAL);
  CHECK(cpl.syndrome == MROCE_SYN_BAD_OPCODE);

  c = {};
  c.opcode = MROCE_ADMIN_SET_PORT;  // no input mailbox
  cpl = d.submit(c);
  CHECK(cpl.status == EINVAL);
  CHECK(cpl.syndrome == MROCE_SYN_NO_INPUT);
  c.flags = MROCE_ADMIN_F_IN;
  c.in_iova = d.mbox.iova();
  c.in_len = sizeof(mroce_hw_port) - 1;  // one byte short
  cpl = d.submit(c);
  CHECK(cpl.syndrome == MROCE_SYN_NO_INPUT);
  c.in_len = sizeof(mroce_hw_port);
  c.in_iova = d.mbox.iova() + d.mbox.size() - 8;  // runs past the window
  cpl = d.submit(c);
  CHECK(cpl.status == EFAULT);
  CHECK(cpl.syndrome == MROCE_SYN_MAILBOX_UNMAPPED);
  uint64_t stack_word = 0;
  c.in_iova = reinterpret_cast<uint64_t>(&stack_word);  // memory never mapped for DMA
  cpl = d.submit(c);  // the fifth command: the ring wrapped, phase 0
  CHECK(cpl.syndrome == MROCE_SYN_MAILBOX_UNMAPPED);
  mroce_hw_port port{};
  port.num_gids = 17;
  std::memcpy(d.mbox.data(), &port, sizeof(port));
  c.in_iova = d.mbox.iova();
  cpl = d.submit(c);
  CHECK(cpl.status == EINVAL);
  CHECK(cpl.syndrome == MROCE_SYN_BAD_PORT);
  c = {};
  c.opcode = MROCE_ADMIN_QUERY_CAPS;
  c.flags = MROCE_ADMIN_F_OUT;
  c.out_iova = d.mbox.iova();
  c.out_len = sizeof(mroce_device_attr);
  cpl = d.submit(c);
  CHECK(cpl.status == 0);  // the device still answers
  CHECK((d.model.read32(MROCE_REG_DEV_STATUS) & MROCE_STATUS_FATAL) == 0);
}

TEST_CASE("admin__create_qp_with_a_ring_outside_every_window_is_efault") {
  RawDriver d;
  d.enable();
  DmaBuffer ring(sizeof(mroce_ring_hdr) + 4 * sizeof(mroce_cqe));  // never mapped
  mroce_hw_create_cq q{ring.iova(), 4, 0};
  std::memcpy(d.mbox.data(), &q, sizeof(q));
  mroce_hw_admin_cmd c{};
  c.opcode = MROCE_ADMIN_CREATE_CQ;
  c.owner = 0;  // bound to nothing
  c.flags = MROCE_ADMIN_F_IN;
  c.in_iova = d.mbox.iova();
  c.in_len = sizeof(q);
  CHECK(d.submit(c).syndrome == MROCE_SYN_PASID_UNBOUND);
  std::string why;
  REQUIRE(d.model.bind_pasid(3, daemon::ClientMemory::bind_pid(getpid(), &why), &why) == 0);
  CHECK(d.model.bind_pasid(3, daemon::ClientMemory::bind_pid(getpid(), &why), &why) == EEXIST);
  CHECK(why == "PASID 3 is already bound");
  c.owner = 3;
  mroce_hw_admin_cpl cpl = d.submit(c);
  CHECK(cpl.status == EFAULT);
  CHECK(cpl.syndrome == MROCE_SYN_RING_UNMAPPED);
  q.entries = 3;  // not a power of two
  std::memcpy(d.mbox.data(), &q, sizeof(q));
  CHECK(d.submit(c).syndrome == MROCE_SYN_RING_GEOMETRY);
}

TEST_CASE("admin__queues_outside_dma_windows_stop_the_device_with_a_fatal_code") {
  RawDriver d;
  d.enable(/*map_rings=*/false);
  REQUIRE(wait_until([&] { return d.model.read32(MROCE_REG_DEV_STATUS) & MROCE_STATUS_FATAL; }));
  CHECK(d.model.read32(MROCE_REG_FATAL_CODE) == MROCE_FATAL_AQ_UNMAPPED);
  // Reset recovers.
  d.model.write32(MROCE_REG_DEV_CTRL, MROCE_CTRL_RESET);
  REQUIRE(wait_until([&] { return d.model.read32(MROCE_REG_DEV_STATUS) == MROCE_STATUS_READY; }));
}

TEST_CASE("admin__a_tail_more_than_a_ring_ahead_is_fatal") {
  RawDriver d;
  d.enable();
  d.model.write32(MROCE_REG_AQ_TAIL, 5);  // a ring of 4
  REQUIRE(wait_until([&] { return d.model.read32(MROCE_REG_DEV_STATUS) & MROCE_STATUS_FATAL; }));
  CHECK(d.model.read32(MROCE_REG_FATAL_CODE) == MROCE_FATAL_AQ_TAIL);
  auto* first = reinterpret_cast<mroce_hw_admin_cpl*>(d.acq.data());
  CHECK(std::atomic_ref<uint8_t>(first->phase).load() == 0);  // nothing executed
}

TEST_CASE("admin__an_engine_refusal_comes_back_with_its_errno_and_the_reason") {
  Fixture f;
  uint32_t pdn = 0, cqn = 0;
  REQUIRE(f.hw.create_pd(1, &pdn) == 0);
  REQUIRE(f.hw.create_cq(1, 8, &cqn) == 0);
  fw::QpInitAttr init;
  init.pdn = pdn;
  init.send_cqn = init.recv_cqn = 999;  // no such CQ
  init.cap = {4, 4, 1, 1, 0};
  uint32_t qpn = 0;
  fw::QpCap cap;
  CHECK(f.hw.create_qp(1, init, &qpn, &cap) == ENOENT);  // the engine's errno, unchanged
  CHECK(f.hw.last_error() ==
        "CREATE_QP failed in firmware: No such file or directory (the transport refused the "
        "request)");
}

// The hw backend relays the device's EQEs, among them the engine's
// (PORT_ACTIVE, port 1) after SET_PORT. The queue pump must not take the
// port number for a QP number: the owner of QP 1 would get the event with
// its QP's handle (the control plane already sends port events to every
// client, from netlink).
TEST_CASE("queue_pump__a_port_event_is_not_delivered_as_an_event_of_qp_1") {
  int sv[2];
  REQUIRE(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv) == 0);
  daemon::DaemonCounters counters;
  daemon::QueuePump pump(counters, [&](fw::OwnerId) { return sv[0]; });
  int fd = -1;
  size_t size = 0;
  size_t sq = daemon::ring_bytes(4, sizeof(mroce_send_wqe)), rq = daemon::ring_bytes(4, sizeof(mroce_recv_wqe));
  REQUIRE(pump.add_qp(1, 7, 0xabc, 1, 4, sq, 4, rq, &fd, &size) == 0);
  close(fd);
  pump.async_event(fw::EventType::kPortActive, 1);
  pump.async_event(fw::EventType::kPortErr, 1);
  mroce_async_event ev{};
  CHECK(recv(sv[1], &ev, sizeof(ev), MSG_DONTWAIT) == -1);  // nothing for QP 1's owner
  CHECK(counters.async_events == 0);
  pump.async_event(fw::EventType::kQpFatal, 1);  // a QP event still reaches it
  REQUIRE(recv(sv[1], &ev, sizeof(ev), MSG_DONTWAIT) == sizeof(ev));
  CHECK(ev.element == 0xabc);
  CHECK(counters.async_events == 1);
  pump.remove_qp(1);
  close(sv[0]);
  close(sv[1]);
}

}  // namespace
}  // namespace metaroce::hw
