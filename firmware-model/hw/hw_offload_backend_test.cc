// HwOffloadBackend driven through TransportBackend against a recording
// fake BAR0 whose "firmware" answers admin commands from host memory, the
// way silicon would.
#include "firmware-model/hw/hw_offload_backend.h"

#include <doctest/doctest.h>
#include <stdlib.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "firmware-model/hw/probe.h"
#include "firmware-model/hw/soft_backend.h"

namespace metaroce::hw {
namespace {

std::string hex(uint64_t v) {
  char b[24];
  std::snprintf(b, sizeof(b), "0x%llx", static_cast<unsigned long long>(v));
  return b;
}

template <class T>
T* at(uint64_t iova) {
  return reinterpret_cast<T*>(iova);  // the stub's IOVA is the address
}

// Records "w32 0x10 = 0x1", "w64 0x100 = iova", "r32 0x14"; plays firmware.
class FakeBar0 final : public RegisterSpaceInterface {
 public:
  uint32_t fw_version = MROCE_HW_IF_MAJOR << 16;
  bool answer_admin = true;
  std::map<uint16_t, uint16_t> fail_op;  // opcode -> status
  std::vector<std::string> log;
  std::vector<mroce_hw_admin_cmd> commands;
  std::vector<std::vector<uint8_t>> inputs;  // input mailbox of each command
  uint64_t cq_ring = 0, sq_ring = 0, rq_ring = 0;

  uint32_t read32(uint64_t off) override {
    log.push_back("r32 " + hex(off));
    switch (off) {
      case MROCE_REG_DEV_ID: return MROCE_HW_PCI_VENDOR | MROCE_HW_PCI_DEVICE << 16;
      case MROCE_REG_DEV_STATUS: return reset_ ? uint32_t{MROCE_STATUS_READY} : 0u;
      case MROCE_REG_FW_VERSION: return fw_version;
    }
    return 0;
  }
  void write32(uint64_t off, uint32_t v) override {
    log.push_back("w32 " + hex(off) + " = " + hex(v));
    if (off == MROCE_REG_DEV_CTRL && (v & MROCE_CTRL_RESET)) reset_ = true;
    if (off == MROCE_REG_AQ_DEPTH) depth_ = v;
    if (off == MROCE_REG_EQ_DEPTH) eq_depth_ = v;
    if (off == MROCE_REG_AQ_TAIL && answer_admin) run_admin(v);
  }
  void write64(uint64_t off, uint64_t v) override {
    log.push_back("w64 " + hex(off) + " = iova");
    if (off == MROCE_REG_AQ_BASE) aq_ = v;
    if (off == MROCE_REG_ACQ_BASE) acq_ = v;
    if (off == MROCE_REG_EQ_BASE) eq_ = v;
  }

  // Silicon side of the data path.
  void post_cqe(const mroce_cqe& e) {
    auto* hdr = at<mroce_ring_hdr>(cq_ring);
    std::memcpy(at<uint8_t>(cq_ring) + sizeof(*hdr) + (hdr->producer & (hdr->entries - 1)) * 64,
                &e, sizeof(e));
    hdr->producer++;
  }
  void post_event(uint32_t type, uint32_t element) {
    auto* e = at<mroce_hw_eqe>(eq_) + (eq_tail_ & (eq_depth_ - 1));
    e->type = type;
    e->element = element;
    e->phase = ((eq_tail_ / eq_depth_) & 1) == 0 ? 1 : 0;
    eq_tail_++;
  }

 private:
  void run_admin(uint32_t tail) {
    for (; head_ != tail; head_++) {
      mroce_hw_admin_cmd c = at<mroce_hw_admin_cmd>(aq_)[head_ & (depth_ - 1)];
      commands.push_back(c);
      std::vector<uint8_t> in;
      if (c.flags & MROCE_ADMIN_F_IN) in.assign(at<uint8_t>(c.in_iova), at<uint8_t>(c.in_iova) + c.in_len);
      inputs.push_back(in);
      mroce_hw_admin_cpl cpl{};
      cpl.cmd_id = c.cmd_id;
      cpl.status = fail_op.count(c.opcode) ? fail_op[c.opcode] : 0;
      execute(c, in, &cpl);
      cpl.phase = ((head_ / depth_) & 1) == 0 ? 1 : 0;
      at<mroce_hw_admin_cpl>(acq_)[head_ & (depth_ - 1)] = cpl;
    }
  }
  void execute(const mroce_hw_admin_cmd& c, const std::vector<uint8_t>& in, mroce_hw_admin_cpl* cpl) {
    switch (c.opcode) {
      case MROCE_ADMIN_QUERY_CAPS: {
        mroce_device_attr a{};
        a.max_qp = 1024;
        a.max_cq = 2048;
        a.max_cqe = 4096;
        a.max_qp_wr = 512;
        std::memcpy(at<void>(c.out_iova), &a, sizeof(a));
        break;
      }
      case MROCE_ADMIN_CREATE_PD: cpl->result = 7; break;
      case MROCE_ADMIN_REG_MR: cpl->result = 0x100; cpl->result2 = 0x200; break;
      case MROCE_ADMIN_CREATE_CQ: {
        mroce_hw_create_cq q;
        std::memcpy(&q, in.data(), sizeof(q));
        cq_ring = q.ring_iova;
        cpl->result = 3;
        break;
      }
      case MROCE_ADMIN_CREATE_QP: {
        mroce_hw_create_qp q;
        std::memcpy(&q, in.data(), sizeof(q));
        sq_ring = q.sq_ring_iova;
        rq_ring = q.rq_ring_iova;
        std::memcpy(at<void>(c.out_iova), &q.cap, sizeof(q.cap));
        cpl->result = 100;
        break;
      }
    }
  }

  bool reset_ = false;
  uint32_t depth_ = 0, eq_depth_ = 0, head_ = 0, eq_tail_ = 0;
  uint64_t aq_ = 0, acq_ = 0, eq_ = 0;
};

struct RecordingSink final : EventSink {
  std::vector<std::string> log;
  bool complete(uint32_t cqn, const fw::Completion& wc) override {
    log.push_back("cqe cq " + std::to_string(cqn) + " wr " + std::to_string(wc.wr_id) + " status " +
                  std::to_string(static_cast<int>(wc.status)) + " len " + std::to_string(wc.byte_len));
    return true;
  }
  void async_event(fw::EventType t, uint32_t element) override {
    log.push_back("event " + std::to_string(static_cast<int>(t)) + " element " + std::to_string(element));
  }
  void publish() override { log.push_back("publish"); }
};

struct Fixture {
  FakeBar0 bar0;
  RecordingSink sink;
  HwOffloadBackend hw{bar0, sink, HwOptions{4, 8, 50}};
  TransportBackend& backend = hw;
  std::string why;

  void up() {
    REQUIRE(hw.bring_up(&why) == 0);
    bar0.log.clear();
  }
  uint32_t make_qp() {
    uint32_t cqn = 0, qpn = 0;
    REQUIRE(backend.create_cq(1, 8, &cqn) == 0);
    fw::QpInitAttr init;
    init.pdn = 7;
    init.send_cqn = init.recv_cqn = cqn;
    init.cap = {2, 4, 1, 1, 0};
    fw::QpCap cap;
    REQUIRE(backend.create_qp(1, init, &qpn, &cap) == 0);
    bar0.log.clear();
    return qpn;
  }
};

TEST_CASE("bring_up__reset_handshake_admin_and_event_queues_then_caps") {
  Fixture f;
  REQUIRE(f.hw.bring_up(&f.why) == 0);
  CHECK(f.bar0.log == std::vector<std::string>{
                          "r32 0x0",            // DEV_ID
                          "w32 0x10 = 0x1",     // DEV_CTRL = RESET
                          "r32 0x14",           // DEV_STATUS: READY
                          "r32 0x4",            // FW_VERSION
                          "w32 0x8 = 0x10001",  // DRV_VERSION 1.1
                          "w64 0x100 = iova",   // AQ_BASE
                          "w32 0x108 = 0x4",    // AQ_DEPTH
                          "w64 0x110 = iova",   // ACQ_BASE
                          "w32 0x118 = 0x4",    // ACQ_DEPTH
                          "w32 0x10 = 0x2",     // DEV_CTRL = ENABLE
                          "w64 0x200 = iova",   // EQ_BASE
                          "w32 0x208 = 0x8",    // EQ_DEPTH
                          "w32 0x10 = 0x6",     // DEV_CTRL = ENABLE | EQ_ENABLE
                          "w32 0x20c = 0x80000000",  // EQ_HEAD armed at 0
                          "w32 0x210 = 0x0",    // INTR_MASK: unmasked
                          "w32 0x10c = 0x1",    // AQ_TAIL: QUERY_CAPS
                          "w32 0x11c = 0x1",    // ACQ_HEAD
                      });
  REQUIRE(f.bar0.commands.size() == 1);
  CHECK(f.bar0.commands[0].opcode == MROCE_ADMIN_QUERY_CAPS);
  CHECK(f.bar0.commands[0].flags == MROCE_ADMIN_F_OUT);
  CHECK(f.bar0.commands[0].out_len == sizeof(mroce_device_attr));
  CHECK(f.hw.caps().max_qp == 1024);
  CHECK(f.hw.caps().max_cqe == 4096);
}

TEST_CASE("bring_up__absent_device_fails_cleanly_and_calls_return_enodev") {
  AbsentRegisterSpace bar0;
  RecordingSink sink;
  HwOffloadBackend hw(bar0, sink);
  std::string why;
  CHECK(hw.bring_up(&why) == ENODEV);
  CHECK(why == "hw backend bring-up: no MetaRoCE device answers on BAR0 (DEV_ID reads 0xffffffff)");
  uint32_t pdn = 0;
  CHECK(hw.create_pd(1, &pdn) == ENODEV);
  CHECK(hw.last_error() == "CREATE_PD: the device is not up");
  CHECK(hw.post_send(1, 5, fw::SendWr{}) == ENODEV);
  CHECK(hw.service(0) == 0);
}

TEST_CASE("bring_up__firmware_interface_major_mismatch") {
  Fixture f;
  f.bar0.fw_version = 2 << 16 | 3;
  CHECK(f.hw.bring_up(&f.why) == EPROTO);
  CHECK(f.why == "hw backend bring-up: firmware interface 2.3, this driver speaks 1.x: update one of them");
}

TEST_CASE("bring_up__no_admin_completion_times_out_and_resets") {
  Fixture f;
  f.bar0.answer_admin = false;
  CHECK(f.hw.bring_up(&f.why) == ETIMEDOUT);
  CHECK(f.why == "hw backend bring-up: QUERY_CAPS (command 1) timed out: no firmware completed it");
  CHECK_FALSE(f.hw.up());
  CHECK(f.bar0.log.back() == "w32 0x10 = 0x1");  // left in reset
}

TEST_CASE("admin__create_qp_encoding_and_mailboxes") {
  Fixture f;
  f.up();
  uint32_t cqn = 0;
  REQUIRE(f.backend.create_cq(9, 5, &cqn) == 0);
  CHECK(cqn == 3);
  fw::QpInitAttr init;
  init.pdn = 7;
  init.send_cqn = init.recv_cqn = 3;
  init.sq_sig_all = true;
  init.cap = {3, 5, 2, 1, 64};
  uint32_t qpn = 0;
  fw::QpCap cap;
  REQUIRE(f.backend.create_qp(9, init, &qpn, &cap) == 0);
  CHECK(qpn == 100);
  CHECK(cap.max_inline_data == 64);
  CHECK(f.bar0.log == std::vector<std::string>{"w32 0x10c = 0x2", "w32 0x11c = 0x2",
                                               "w32 0x10c = 0x3", "w32 0x11c = 0x3"});
  const mroce_hw_admin_cmd& cq = f.bar0.commands[1];
  CHECK(cq.opcode == MROCE_ADMIN_CREATE_CQ);
  CHECK(cq.owner == 9);
  mroce_hw_create_cq cq_in;
  std::memcpy(&cq_in, f.bar0.inputs[1].data(), sizeof(cq_in));
  CHECK(cq_in.entries == 8);  // rounded up to a power of two
  CHECK(at<mroce_ring_hdr>(cq_in.ring_iova)->entry_size == sizeof(mroce_cqe));
  const mroce_hw_admin_cmd& qp = f.bar0.commands[2];
  CHECK(qp.opcode == MROCE_ADMIN_CREATE_QP);
  CHECK(qp.cmd_id == 3);
  CHECK(qp.flags == (MROCE_ADMIN_F_IN | MROCE_ADMIN_F_OUT));
  CHECK(qp.in_len == sizeof(mroce_hw_create_qp));
  CHECK(qp.out_len == sizeof(mroce_qp_cap));
  mroce_hw_create_qp in;
  std::memcpy(&in, f.bar0.inputs[2].data(), sizeof(in));
  CHECK(in.pdn == 7);
  CHECK(in.send_cqn == 3);
  CHECK(in.sq_sig_all == 1);
  CHECK(in.cap.max_send_sge == 2);
  CHECK(in.sq_entries == 4);
  CHECK(in.rq_entries == 8);
  CHECK(at<mroce_ring_hdr>(in.sq_ring_iova)->entry_size == sizeof(mroce_send_wqe));
  CHECK(at<mroce_ring_hdr>(in.rq_ring_iova)->entries == 8);
}

TEST_CASE("admin__modify_qp_carries_the_abi_attr_and_firmware_errno_comes_back") {
  Fixture f;
  f.up();
  fw::QpAttr attr;
  attr.qp_state = fw::QpState::kRtr;
  attr.path_mtu = 4096;
  attr.dest_qp_num = 0x55;
  f.bar0.fail_op[MROCE_ADMIN_MODIFY_QP] = EINVAL;
  CHECK(f.backend.modify_qp(2, 100, attr, fw::kAttrState | fw::kAttrPathMtu) == EINVAL);
  CHECK(f.hw.last_error() == "MODIFY_QP failed in firmware: Invalid argument");
  const mroce_hw_admin_cmd& c = f.bar0.commands.back();
  CHECK(c.handle == 100);
  CHECK(c.owner == 2);
  mroce_qp_attr a;
  REQUIRE(f.bar0.inputs.back().size() == sizeof(a));
  std::memcpy(&a, f.bar0.inputs.back().data(), sizeof(a));
  CHECK(a.attr_mask == (fw::kAttrState | fw::kAttrPathMtu));
  CHECK(a.qp_state == 2);
  CHECK(a.path_mtu == 5);  // IBV_MTU_4096
  CHECK(a.dest_qp_num == 0x55);
}

TEST_CASE("admin__reg_mr_keys_and_ring_wraps_with_phase") {
  Fixture f;
  f.up();
  for (int i = 0; i < 9; i++) {  // admin ring of 4: two full wraps
    fw::MrKeys keys;
    REQUIRE(f.backend.reg_mr(1, 7, 0x1000, 4096, 1, &keys) == 0);
    CHECK(keys.lkey == 0x100);
    CHECK(keys.rkey == 0x200);
  }
  mroce_reg_mr_req in;
  std::memcpy(&in, f.bar0.inputs.back().data(), sizeof(in));
  CHECK(in.addr == 0x1000);
  CHECK(in.length == 4096);
  CHECK(in.pdn == 7);
}

TEST_CASE("post_send__wqe_in_the_sq_ring_then_sq_doorbell") {
  Fixture f;
  f.up();
  uint32_t qpn = f.make_qp();
  fw::SendWr wr;
  wr.wr_id = 42;
  wr.opcode = fw::WrOpcode::kRdmaWrite;
  wr.send_flags = fw::kSendSignaled;
  wr.remote_addr = 0xabc000;
  wr.rkey = 0x77;
  wr.num_sge = 1;
  wr.sg[0] = {0x5000, 128, 0x100};
  REQUIRE(f.backend.post_send(1, qpn, wr) == 0);
  CHECK(f.bar0.log == std::vector<std::string>{"w32 0x74000 = 0x1"});  // QP 100's page, SQ_PI
  auto* hdr = at<mroce_ring_hdr>(f.bar0.sq_ring);
  CHECK(hdr->producer == 1);
  mroce_send_wqe w;
  std::memcpy(&w, at<uint8_t>(f.bar0.sq_ring) + sizeof(mroce_ring_hdr), sizeof(w));
  CHECK(w.wr_id == 42);
  CHECK(w.opcode == 0);  // IBV_WR_RDMA_WRITE
  CHECK(w.send_flags == fw::kSendSignaled);
  CHECK(w.remote_addr == 0xabc000);
  CHECK(w.num_sge == 1);
  CHECK(w.u.sg[0].lkey == 0x100);
  CHECK(f.backend.post_send(1, qpn, wr) == 0);
  CHECK(f.backend.post_send(1, qpn, wr) == ENOMEM);  // SQ of 2 full: silicon consumed nothing
  CHECK(f.bar0.log.back() == "w32 0x74000 = 0x2");
  CHECK(f.backend.post_send(2, qpn, wr) == EINVAL);  // not the owner
}

TEST_CASE("post_recv__wqe_then_rq_doorbell") {
  Fixture f;
  f.up();
  uint32_t qpn = f.make_qp();
  fw::RecvWr wr;
  wr.wr_id = 9;
  wr.num_sge = 1;
  wr.sg[0] = {0x9000, 4096, 0x100};
  REQUIRE(f.backend.post_recv(1, qpn, wr) == 0);
  CHECK(f.bar0.log == std::vector<std::string>{"w32 0x74004 = 0x1"});
  mroce_recv_wqe w;
  std::memcpy(&w, at<uint8_t>(f.bar0.rq_ring) + sizeof(mroce_ring_hdr), sizeof(w));
  CHECK(w.wr_id == 9);
  CHECK(w.sg[0].length == 4096);
}

TEST_CASE("service__harvests_cqes_and_events_and_returns_consumer_index") {
  Fixture f;
  f.up();
  f.make_qp();
  CHECK(f.backend.request_notify(3, true) == 0);
  CHECK(f.bar0.log == std::vector<std::string>{"w32 0x1013004 = 0x2"});  // CQ 3 ARM solicited
  f.bar0.log.clear();
  mroce_cqe e{};
  e.wr_id = 42;
  e.byte_len = 128;
  f.bar0.post_cqe(e);
  e.wr_id = 43;
  e.status = 12;  // RETRY_EXC_ERR
  f.bar0.post_cqe(e);
  f.bar0.post_event(MROCE_EQE_COMPLETION, 3);
  f.bar0.post_event(1 /* IBV_EVENT_QP_FATAL */, 100);
  CHECK(f.backend.service(0) == 4);
  CHECK(f.sink.log == std::vector<std::string>{"event 1 element 100",
                                               "cqe cq 3 wr 42 status 0 len 128",
                                               "cqe cq 3 wr 43 status 12 len 128",
                                               "publish"});  // after the CQEs it harvested
  CHECK(f.bar0.log == std::vector<std::string>{"w32 0x20c = 0x80000002",  // EQ consumed 2, re-armed
                                               "w32 0x1013000 = 0x2"});   // CQ 3 CI
  CHECK(f.backend.service(0) == 0);
  CHECK(f.sink.log.size() == 4);  // nothing harvested: no publish either
}

TEST_CASE("post_send_error__an_error_wqe_in_posting_order_then_sq_doorbell") {
  Fixture f;
  f.up();
  uint32_t qpn = f.make_qp();
  fw::SendWr wr;
  wr.wr_id = 1;
  wr.opcode = fw::WrOpcode::kSend;
  REQUIRE(f.backend.post_send(1, qpn, wr) == 0);
  REQUIRE(f.backend.post_send_error(1, qpn, 2, fw::WcStatus::kLocQpOpErr) == 0);
  CHECK(f.bar0.log == std::vector<std::string>{"w32 0x74000 = 0x1", "w32 0x74000 = 0x2"});
  mroce_send_wqe w;
  std::memcpy(&w, at<uint8_t>(f.bar0.sq_ring) + sizeof(mroce_ring_hdr) + sizeof(w), sizeof(w));
  CHECK(w.wr_id == 2);
  CHECK(w.opcode == MROCE_HW_WQE_OP_ERROR);
  CHECK(w.imm == static_cast<uint32_t>(fw::WcStatus::kLocQpOpErr));
  CHECK(f.backend.post_send_error(1, qpn, 3, fw::WcStatus::kLocQpOpErr) == ENOMEM);  // SQ of 2
  CHECK(f.backend.post_send_error(1, qpn, 3, fw::WcStatus::kSuccess) == EINVAL);
  CHECK(f.hw.last_error() == "post_send_error: status is success");
  CHECK(f.backend.post_send_error(2, qpn, 3, fw::WcStatus::kLocQpOpErr) == EINVAL);  // not the owner
}

TEST_CASE("qp_transport__not_in_interface_1_and_describe_qp_names_the_rings") {
  Fixture f;
  f.up();
  uint32_t qpn = f.make_qp();
  fw::QpTransportStats t;
  CHECK(f.backend.qp_transport(qpn, 0, &t) == EOPNOTSUPP);
  CHECK(f.backend.qp_transport(qpn + 1, 0, &t) == ENOENT);
  CHECK(f.backend.describe_qp(qpn) == "qp 100 (hw) owner 1 sq 0/0 rq 0/0");
  CHECK(f.backend.describe_qp(qpn + 1).empty());
}

TEST_CASE("destroy_owner__one_admin_command_and_its_rings_forgotten") {
  Fixture f;
  f.up();
  f.make_qp();
  CHECK(f.backend.qp_numbers() == std::vector<uint32_t>{100});
  f.backend.destroy_owner(1);
  CHECK(f.bar0.commands.back().opcode == MROCE_ADMIN_DESTROY_OWNER);
  CHECK(f.bar0.commands.back().owner == 1);
  CHECK(f.backend.qp_numbers().empty());
}

struct TempSysfs {
  TempSysfs() {
    char t[] = "/tmp/hw-probe-XXXXXX";
    root = mkdtemp(t);
  }
  ~TempSysfs() { std::filesystem::remove_all(root); }
  void nic(const std::string& netdev, const std::string& vendor, const std::string& device) {
    std::string d = root + "/class/net/" + netdev + "/device";
    std::filesystem::create_directories(d);
    std::ofstream(d + "/vendor") << vendor << "\n";
    std::ofstream(d + "/device") << device << "\n";
  }
  std::string root;
};

TEST_CASE("probe__no_hardware_is_enodev_with_the_way_out") {
  TempSysfs s;
  std::string why;
  CHECK(probe_at(s.root, "veth0", &why) == ENODEV);
  CHECK(why == "no MetaRoCE offload hardware on veth0 (PCI vendor/device not found; the hw "
               "backend needs partner silicon — use --backend soft)");
  s.nic("eth0", "0x8086", "0x1572");
  CHECK(probe_at(s.root, "eth0", &why) == ENODEV);
  CHECK(why.find("; eth0 is PCI 0x8086:0x1572") != std::string::npos);
  s.nic("eth1", "0x4d52", "0x0001");
  CHECK(probe_at(s.root, "eth1", &why) == EOPNOTSUPP);
  CHECK(why == "MetaRoCE offload hardware found on eth1, but this build has no BAR0 mapping "
               "(vfio-pci) for it yet; use --backend soft");
  CHECK(probe("mroce-no-such-if", &why) == ENODEV);
  CHECK(probe("../x", &why) == ENODEV);
}

// The soft engine is the other TransportBackend.
struct NullHal final : fw::ClockInterface, fw::PacketPortInterface, fw::DmaInterface,
                       fw::EventSinkInterface, fw::RandomInterface {
  fw::Time now() const override { return 0; }
  void send(const fw::OutPacket&) override {}
  bool read(fw::OwnerId, uint64_t, std::span<uint8_t>) override { return false; }
  bool write(fw::OwnerId, uint64_t, std::span<const uint8_t>) override { return false; }
  bool complete(uint32_t, const fw::Completion&) override { return true; }
  void async_event(fw::EventType, uint32_t) override {}
  uint64_t next() override { return 4; }
};

TEST_CASE("soft_backend__objects_and_named_counters_through_the_interface") {
  NullHal h;
  SoftBackend soft(fw::EngineConfig{}, fw::Hal{h, h, h, h, h});
  TransportBackend& b = soft;
  CHECK(std::string(b.name()) == "soft");
  uint32_t pdn = 0, cqn = 0;
  CHECK(b.create_pd(1, &pdn) == 0);
  CHECK(b.create_cq(1, 16, &cqn) == 0);
  std::vector<NamedCounter> c;
  CHECK(b.query_counters(kDeviceCounters, &c) == 0);
  REQUIRE(c.size() == uapi::kEngineCounters);  // every fw::Counters field
  CHECK(c.front().name == "tx_packets");
  bool named = false;  // counters are appended in blocks; look it up by name
  for (const NamedCounter& x : c) named = named || x.name == "spurious_timeouts";
  CHECK(named);
  CHECK(b.query_counters(12345, &c) != 0);
  fw::QpTransportStats t;
  CHECK(b.qp_transport(12345, 0, &t) == ENOENT);
  CHECK(b.describe_qp(12345).empty());
  CHECK(b.post_send_error(1, 12345, 7, fw::WcStatus::kLocQpOpErr) != 0);
  CHECK(b.destroy_cq(1, cqn) == 0);
  CHECK(b.destroy_pd(1, pdn) == 0);
}

}  // namespace
}  // namespace metaroce::hw
