// DeviceModel: a simulated MetaRoCE offload NIC. It implements the BAR0,
// admin-queue, event-queue, doorbell and ring ABI of hw_abi.h exactly as
// docs/hardware-offload.md specifies it, in its own thread, with the
// reference engine behind it: the engine is hosted by the daemon's SoftNic
// (engine + HAL + packet I/O), so the model is "silicon" whose transport is
// fw::Engine and whose MAC is the daemon's AF_XDP / AF_PACKET port.
// HwOffloadBackend (the driver) runs against it unchanged, as it would
// against a vfio-mapped BAR0; `metaroced --backend hw --hw-device model`
// runs the whole stack through this ABI (docs/hardware-offload.md §8).
//
// Host memory (the driver's rings and mailboxes) is reached only through
// the IOMMU the model implements: map_dma() windows, bounds-checked on every
// access. Applications' memory (MRs) is reached through PASIDs bound with
// bind_pasid() (shared virtual addressing), served by the daemon's
// ClientMemory. Every value the model reads from host memory or a register
// is checked; what is refused is counted (MROCE_MODEL_COUNTERS) and answered
// with an errno and a syndrome, a fatal code, or an ignored doorbell.
//
// Threads: the register interface, map_dma, set_irq and bind_pasid are
// called on the driver's thread; everything else runs on the model's own
// thread. The two share only the register file (under one mutex: a register
// write is a release, the model's snapshot of the registers an acquire) and
// host memory, ordered as docs/hardware-offload.md §8 states.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "firmware-model/daemon/client_memory.h"
#include "firmware-model/daemon/soft_nic.h"
#include "firmware-model/hw/hw_abi.h"
#include "firmware-model/hw/register_space.h"
#include "firmware-model/hw/transport_backend.h"
#include "firmware-model/uapi/ring.h"

namespace metaroce::hw {

// What the model counts, by reason (reported by QUERY_COUNTERS with the
// engine's, so `metaroce-ctl stat` shows them).
#define MROCE_MODEL_COUNTERS(X)                                                            \
  X(model_admin_commands)                                                                  \
  X(model_admin_errors)          /* commands completed with a non-zero status */           \
  X(model_admin_bad_opcode)                                                                \
  X(model_admin_bad_mailbox)     /* mailbox missing, short, or outside every DMA window */ \
  X(model_admin_unbound_pasid)   /* an object for a PASID bound to no address space */     \
  X(model_doorbells)             /* SQ_PI / RQ_PI writes */                                \
  X(model_cq_doorbells)          /* CQ_CI / CQ_ARM writes */                               \
  X(model_doorbell_no_queue)     /* a doorbell page of no live QP or CQ */                 \
  X(model_doorbell_beyond_depth) /* a PI/CI more than the ring's depth away: ignored */    \
  X(model_register_bad_offset)   /* a write to no register, or a read-only one */          \
  X(model_wqes_sq)                                                                         \
  X(model_wqes_rq)                                                                         \
  X(model_wqe_defects)           /* WQEs the converter or engine refused */                \
  X(model_cqes)                                                                            \
  X(model_cq_overflows)          /* CQEs with no room: overflow set, CQ_ERR raised */      \
  X(model_eqes)                                                                            \
  X(model_eq_overflows)          /* events with no room in the event ring: dropped */      \
  X(model_interrupts)                                                                      \
  X(model_dma_unmapped)          /* host accesses outside every map_dma window */          \
  X(model_fatal)                 /* the device stopped (FATAL_CODE says why) */            \
  X(model_resets)

struct DeviceModelCounters {
#define MROCE_X(name) uint64_t name = 0;
  MROCE_MODEL_COUNTERS(MROCE_X)
#undef MROCE_X
};

struct DeviceModelOptions {
  daemon::io::PacketIo* io = nullptr;     // the model's MAC (nullptr: loopback only)
  daemon::LinkInterface* link = nullptr;  // neighbour resolution; must be thread-safe
  uint32_t rt_priority = 0;               // SCHED_FIFO for the model's thread (0: normal)
};

class DeviceModel final : public RegisterSpaceInterface, private EventSink {
 public:
  DeviceModel(const fw::EngineConfig& config, const DeviceModelOptions& options);
  ~DeviceModel() override;  // stops the thread
  DeviceModel(const DeviceModel&) = delete;
  DeviceModel& operator=(const DeviceModel&) = delete;

  // Powers the device on: its thread starts. 0, or an errno with *why.
  int start(std::string* why);
  void stop();

  // ---- the driver's side (any thread) ----
  uint32_t read32(uint64_t offset) override;
  void write32(uint64_t offset, uint32_t value) override;
  void write64(uint64_t offset, uint64_t value) override;
  int map_dma(uint64_t iova, void* host, size_t len) override;
  void unmap_dma(uint64_t iova) override;
  int set_irq(int eventfd) override;
  // The IOMMU's shared-virtual-addressing table: from now on DMA for
  // `pasid` reaches `memory`'s address space (iommu_sva_bind_device). A
  // PASID bound twice is EEXIST. unbind: the device tears down whatever
  // objects the PASID still has before the binding goes (an IOMMU fault
  // would stop them anyway).
  int bind_pasid(uint32_t pasid, std::unique_ptr<daemon::ClientMemory> memory, std::string* why);
  void unbind_pasid(uint32_t pasid);

 private:
  // The register file and what the driver handed over; guarded by mu_.
  struct Registers {
    uint32_t ctrl = 0, status = MROCE_STATUS_READY, fatal_code = 0, drv_version = 0;
    uint64_t aq_base = 0, acq_base = 0, eq_base = 0;
    uint32_t aq_depth = 0, acq_depth = 0, eq_depth = 0;
    uint32_t aq_tail = 0, acq_head = 0, eq_head = 0, intr_mask = 1;
    bool eq_armed = false, reset = false;
    std::map<uint32_t, uint32_t> sq_pi, rq_pi, cq_ci, cq_arm;  // doorbell page -> value, unseen
    uint64_t bad_offset = 0;
    uint64_t doorbell_writes = 0, cq_doorbell_writes = 0;  // every write, coalesced or not
  };
  struct Window {
    uint8_t* host;
    uint64_t len;
  };
  struct Binding {
    uint32_t pasid;
    std::unique_ptr<daemon::ClientMemory> memory;  // nullptr: unbind
  };
  // The model thread's copy of one pass's registers.
  struct Snapshot {
    Registers regs;
    std::vector<Binding> bindings;
  };
  struct Qp {
    uint32_t qpn = 0;
    fw::OwnerId owner = 0;
    mroce_ring sq{}, rq{};
    uint32_t sq_pi = 0, rq_pi = 0;      // as the driver last rang
    uint32_t sq_cons = 0, rq_cons = 0;  // ours, published to the ring header
  };
  struct Cq {
    fw::OwnerId owner = 0;
    mroce_ring ring{};
    uint32_t producer = 0, ci = 0, arm = 0;
    bool dirty = false, overflowed = false;
  };
  struct Admin {  // one command being executed
    mroce_hw_admin_cmd cmd{};  // copied out of the ring before use
    mroce_hw_admin_cpl cpl{};
  };

  void run();
  int pass();
  Snapshot take_snapshot();
  void wait_for_work();
  void do_reset();
  void apply_bindings(std::vector<Binding>& bindings);
  void enable_queues(const Registers& r);
  void go_fatal(uint32_t code);
  int run_admin(const Registers& r);
  int run_doorbells(const Registers& r);
  void raise_interrupt();
  uint8_t* translate(uint64_t iova, uint64_t len);

  // admin commands (device_model_admin.cc)
  void execute(Admin& a);
  static void refuse(Admin& a, int err, mroce_hw_syndrome why);
  bool read_input(Admin& a, void* dst, size_t len);
  bool write_output(Admin& a, const void* src, size_t len);
  bool owner_bound(Admin& a);
  void admin_reg_mr(Admin& a);
  void admin_query_caps(Admin& a);
  void admin_set_port(Admin& a);
  void admin_create_cq(Admin& a);
  void admin_destroy_cq(Admin& a);
  void admin_create_qp(Admin& a);
  void admin_modify_qp(Admin& a);
  void admin_query_qp(Admin& a);
  void admin_destroy_qp(Admin& a);
  void admin_destroy_owner(Admin& a);
  void admin_query_counters(Admin& a);
  void admin_query_qp_transport(Admin& a);
  bool bind_ring(Admin& a, uint64_t iova, uint32_t entries, uint32_t entry_size, mroce_ring* r);
  std::vector<NamedCounter> device_counters() const;

  // the data path
  int drain_sq(Qp& qp);
  int drain_rq(Qp& qp);
  void post_eqe(uint32_t type, uint32_t element);

  // EventSink: the engine's completions and events, into host memory.
  bool complete(uint32_t cqn, const fw::Completion& wc) override;
  void async_event(fw::EventType type, uint32_t element) override;
  void publish() override;

  // ---- shared between the threads ----
  mutable std::mutex mu_;
  Registers regs_;
  std::map<uint64_t, Window> windows_;  // iova -> window
  std::vector<Binding> bindings_;       // handed to the model thread
  std::set<uint32_t> bound_;            // PASIDs bound, as the driver sees them
  int irq_fd_ = -1;
  uint64_t dma_unmapped_ = 0;           // counted under mu_ (translate)
  int wake_fd_ = -1;                    // eventfd: a register write happened
  bool stop_ = false;

  // ---- the model thread's ----
  fw::EngineConfig config_;
  DeviceModelOptions options_;
  daemon::MonotonicClock clock_;
  daemon::DaemonCounters nic_counters_;  // the soft NIC's tx drops
  DeviceModelCounters counters_;
  std::map<uint32_t, std::unique_ptr<daemon::ClientMemory>> pasids_;
  std::unique_ptr<daemon::SoftNic> nic_;
  bool admin_on_ = false, eq_on_ = false, fatal_ = false;
  mroce_hw_admin_cmd* aq_ = nullptr;
  mroce_hw_admin_cpl* acq_ = nullptr;
  mroce_hw_eqe* eq_ = nullptr;
  uint32_t aq_depth_ = 0, acq_depth_ = 0, eq_depth_ = 0, aq_head_ = 0, eq_prod_ = 0;
  uint32_t acq_head_ = 0, eq_head_ = 0;  // the driver's, from the last snapshot
  std::map<uint32_t, Qp> qps_;        // by doorbell page (qpn & MROCE_HW_DB_INDEX_MASK)
  std::map<uint32_t, Cq> cqs_;        // by cqn (= its doorbell page)
  std::set<fw::OwnerId> owners_;      // owners with objects (reset tears them down)
  std::thread thread_;
};

}  // namespace metaroce::hw
