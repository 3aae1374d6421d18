// HwOffloadBackend: TransportBackend on partner silicon. A documented stub
// that runs: every call performs what a driver does on real hardware
// (register writes, admin commands, ring writes; firmware-model/hw/hw_abi.h,
// docs/hardware-offload.md) against a RegisterSpaceInterface. With no
// silicon answering, bring_up() fails cleanly and every later call returns
// ENODEV.
//
// Host memory shared with the device (admin rings, mailboxes, event ring,
// work and completion rings) is allocated here, page aligned, and mapped
// for the device's DMA with map_dma() (VFIO_IOMMU_MAP_DMA) at the IOVA that
// is its virtual address. Memory registered by applications (MRs) is
// addressed by the device in the owner's address space through PCIe PASID
// + IOMMU shared virtual addressing: `owner` in each admin command is that
// PASID, bound (HwOptions::binder) before the owner's first object, so MRs
// need no page lists.
//
// Single-threaded, like the daemon's loop: the driver's calls run on one
// thread; the device runs on its own (silicon, or the device model).
#pragma once

#include <cstdlib>
#include <map>
#include <set>
#include <memory>
#include <string>
#include <utility>

#include "firmware-model/hw/hw_abi.h"
#include "firmware-model/hw/register_space.h"
#include "firmware-model/hw/transport_backend.h"
#include "firmware-model/uapi/ring.h"

namespace metaroce::hw {

// Zeroed, page-aligned host memory the device may DMA.
class DmaBuffer {
 public:
  DmaBuffer() = default;
  explicit DmaBuffer(size_t bytes);
  uint8_t* data() const { return mem_.get(); }
  size_t size() const { return size_; }
  uint64_t iova() const { return reinterpret_cast<uint64_t>(mem_.get()); }

 private:
  struct Free {
    void operator()(uint8_t* p) const { std::free(p); }
  };
  std::unique_ptr<uint8_t, Free> mem_;
  size_t size_ = 0;
};

struct HwOptions {
  uint32_t admin_depth = 64;   // admin ring entries (power of two)
  uint32_t event_depth = 256;  // event ring entries (power of two)
  // Status-register reads while waiting for reset or an admin completion
  // before giving up. Real hardware: ~1 us each, plus a sleep between.
  uint32_t poll_budget = 1000;
  // Then, if not 0, keep waiting up to this long (wall clock), sleeping
  // briefly between reads: a device model in another thread on a busy
  // machine answers in milliseconds, not microseconds.
  uint64_t wait_timeout_ns = 0;
  // Binds an owner's address space to its PASID before its first object
  // (nullptr: the platform binds them itself).
  PasidBinderInterface* binder = nullptr;
};

class HwOffloadBackend final : public TransportBackend {
 public:
  HwOffloadBackend(RegisterSpaceInterface& bar0, EventSink& events,
                   const HwOptions& options = {});
  // Quiesces the device (reset, READY) before the memory it DMAs is freed.
  ~HwOffloadBackend() override;
  HwOffloadBackend(const HwOffloadBackend&) = delete;
  HwOffloadBackend& operator=(const HwOffloadBackend&) = delete;

  // Firmware bring-up: reset, version handshake, admin queue, event
  // queue, capability query. 0, or an errno with *why.
  int bring_up(std::string* why);
  bool up() const { return up_; }
  // Reason of the last failed call ("" after a success).
  const std::string& last_error() const { return last_error_; }
  std::string take_error() override { return std::exchange(last_error_, {}); }

  const char* name() const override { return "hw"; }
  const fw::DeviceCaps& caps() const override { return caps_; }
  int set_port(const fw::PortInfo& port) override;
  int create_pd(fw::OwnerId owner, uint32_t* pdn) override;
  int destroy_pd(fw::OwnerId owner, uint32_t pdn) override;
  int reg_mr(fw::OwnerId owner, uint32_t pdn, uint64_t addr, uint64_t length, uint32_t access,
             fw::MrKeys* keys) override;
  int dereg_mr(fw::OwnerId owner, uint32_t lkey) override;
  int create_cq(fw::OwnerId owner, uint32_t entries, uint32_t* cqn) override;
  int destroy_cq(fw::OwnerId owner, uint32_t cqn) override;
  int create_qp(fw::OwnerId owner, const fw::QpInitAttr& init, uint32_t* qpn,
                fw::QpCap* actual) override;
  int modify_qp(fw::OwnerId owner, uint32_t qpn, const fw::QpAttr& attr,
                uint32_t attr_mask) override;
  int query_qp(fw::OwnerId owner, uint32_t qpn, fw::QpAttr* attr, fw::QpInitAttr* init) override;
  int destroy_qp(fw::OwnerId owner, uint32_t qpn) override;
  void destroy_owner(fw::OwnerId owner) override;
  int post_send(fw::OwnerId owner, uint32_t qpn, const fw::SendWr& wr) override;
  int post_recv(fw::OwnerId owner, uint32_t qpn, const fw::RecvWr& wr) override;
  int post_send_error(fw::OwnerId owner, uint32_t qpn, uint64_t wr_id,
                      fw::WcStatus status) override;
  int request_notify(uint32_t cqn, bool solicited_only) override;
  int service(fw::Time now) override;
  fw::Time next_deadline() const override { return fw::kNever; }  // interrupt driven
  // The event interrupt's eventfd (VFIO_DEVICE_SET_IRQS); -1 when the
  // device offers none (the event ring is then found on polling passes).
  int wait_fd() const override { return irq_fd_; }
  int query_counters(uint32_t qpn, std::vector<NamedCounter>* out) override;
  std::vector<uint32_t> qp_numbers() override;
  // QUERY_QP_TRANSPORT (interface 1.1); EOPNOTSUPP on 1.0 firmware.
  int qp_transport(uint32_t qpn, fw::Time now, fw::QpTransportStats* out) override;
  std::string describe_qp(uint32_t qpn) override;

 private:
  struct Ring {  // one device-ABI ring (firmware-model/uapi/ring.h) in a DmaBuffer
    DmaBuffer mem;
    mroce_ring view{};  // into mem: stays valid when the Ring moves
  };
  static Ring make_ring(uint32_t entries, uint32_t entry_size);
  struct Cq {
    fw::OwnerId owner = 0;
    Ring ring;
  };
  struct Qp {
    fw::OwnerId owner = 0;
    uint32_t send_cqn = 0, recv_cqn = 0;
    Ring sq, rq;
  };
  struct Admin {
    uint16_t op = 0;
    fw::OwnerId owner = 0;
    uint32_t handle = 0;
    const void* in = nullptr;
    size_t in_len = 0;
    void* out = nullptr;
    size_t out_len = 0;
    uint32_t result = 0, result2 = 0;  // from the completion
  };

  int fail(int err, std::string why);
  int wait_ready(uint32_t* status);
  bool keep_waiting(uint32_t i, uint64_t start_ns) const;
  int reset_and_handshake();
  void program_queues();
  void setup_interrupt();
  int map(const DmaBuffer& b);
  void unmap(const DmaBuffer& b) { bar0_.unmap_dma(b.iova()); }
  int bind_owner(fw::OwnerId owner);
  void arm_for_interrupt(uint32_t cqn);
  int admin(Admin& cmd);
  int wait_admin_completion(const Admin& cmd, uint32_t cmd_id, mroce_hw_admin_cpl* cpl);
  int harvest_cq(uint32_t cqn, Cq& cq);
  int post_wqe(fw::OwnerId owner, uint32_t qpn, const mroce_send_wqe& w, const char* what);
  static uint64_t qp_db(uint32_t qpn) {
    return MROCE_REG_QP_DB_BASE + uint64_t{qpn & MROCE_HW_DB_INDEX_MASK} * MROCE_HW_DB_STRIDE;
  }
  static uint64_t cq_db(uint32_t cqn) { return MROCE_REG_CQ_DB_BASE + uint64_t{cqn} * MROCE_HW_DB_STRIDE; }

  RegisterSpaceInterface& bar0_;
  EventSink& events_;
  HwOptions options_;
  bool up_ = false;
  std::string last_error_;
  fw::DeviceCaps caps_;
  DmaBuffer aq_, acq_, eq_, in_, out_;  // rings and the two mailboxes
  int irq_fd_ = -1;
  uint32_t fw_minor_ = 0;
  std::set<fw::OwnerId> bound_;  // owners whose PASID is bound
  uint32_t aq_tail_ = 0, acq_head_ = 0, eq_head_ = 0, next_cmd_id_ = 1;
  std::map<uint32_t, Cq> cqs_;
  std::map<uint32_t, Qp> qps_;
};

}  // namespace metaroce::hw
