#include "firmware-model/hw/device_model.h"

#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>

#include "firmware-model/uapi/convert.h"

namespace metaroce::hw {

namespace {

constexpr uint32_t kMaxQueueDepth = 4096;     // admin and event rings
constexpr uint32_t kIndexMask = 0x7fffffffu;  // EQ_HEAD carries 31 index bits
constexpr fw::Time kBusyHorizon = 2'000'000;  // as the daemon's loop (daemon_loop.h)

bool pow2_within(uint32_t v, uint32_t max) { return v && (v & (v - 1)) == 0 && v <= max; }

// The phase a valid entry at free-running index i carries (§4, §6).
uint8_t phase_of(uint32_t i, uint32_t depth) { return ((i / depth) & 1) == 0 ? 1 : 0; }

// Writes an admin completion or an event: every byte but `phase`, then
// `phase` with a release store, so the driver's acquire load of the phase
// makes the rest visible (docs/hardware-offload.md §8).
template <class T>
void write_entry(T* slot, T value, uint8_t phase) {
  constexpr size_t at = offsetof(T, phase);
  auto* dst = reinterpret_cast<uint8_t*>(slot);
  auto* src = reinterpret_cast<const uint8_t*>(&value);
  std::memcpy(dst, src, at);
  std::memcpy(dst + at + 1, src + at + 1, sizeof(T) - at - 1);
  std::atomic_ref<uint8_t>(slot->phase).store(phase, std::memory_order_release);
}

}  // namespace

DeviceModel::DeviceModel(const fw::EngineConfig& config, const DeviceModelOptions& options)
    : config_(config), options_(options) {
  // Doorbell pages exist for 4096 QP slots and CQs 0..4095 (hw_abi.h).
  config_.caps.max_qp = std::min(config_.caps.max_qp, MROCE_HW_DB_PAGES);
  config_.caps.max_cq = std::min(config_.caps.max_cq, MROCE_HW_DB_PAGES - 1);
  daemon::SoftNicEnv env;
  env.clock = &clock_;
  env.events = this;
  env.memory_of = [this](fw::OwnerId pasid) -> daemon::ClientMemory* {
    auto it = pasids_.find(pasid);
    return it == pasids_.end() ? nullptr : it->second.get();
  };
  env.counters = &nic_counters_;
  env.io = options.io;
  env.link = options.link;
  nic_ = std::make_unique<daemon::SoftNic>(config_, env);
}

DeviceModel::~DeviceModel() {
  stop();
  if (wake_fd_ >= 0) close(wake_fd_);
}

int DeviceModel::start(std::string* why) {
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0) {
    *why = std::string("device model: eventfd: ") + std::strerror(errno);
    return errno;
  }
  thread_ = std::thread([this] { run(); });
  return 0;
}

void DeviceModel::stop() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard g(mu_);
    stop_ = true;
  }
  uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof(one));
  thread_.join();
}

// ---------------- the driver's side ----------------

uint32_t DeviceModel::read32(uint64_t off) {
  std::lock_guard g(mu_);
  switch (off) {
    case MROCE_REG_DEV_ID: return MROCE_HW_PCI_VENDOR | MROCE_HW_PCI_DEVICE << 16;
    case MROCE_REG_FW_VERSION: return MROCE_HW_IF_MAJOR << 16 | MROCE_HW_IF_MINOR;
    case MROCE_REG_DEV_CTRL: return regs_.ctrl;
    case MROCE_REG_DEV_STATUS: return regs_.status;
    case MROCE_REG_FATAL_CODE: return regs_.fatal_code;
    case MROCE_REG_AQ_DEPTH: return regs_.aq_depth;
    case MROCE_REG_ACQ_DEPTH: return regs_.acq_depth;
    case MROCE_REG_EQ_DEPTH: return regs_.eq_depth;
    case MROCE_REG_INTR_MASK: return regs_.intr_mask;
  }
  return 0;  // write-only registers and doorbells read as 0
}

void DeviceModel::write32(uint64_t off, uint32_t v) {
  {
    std::lock_guard g(mu_);
    Registers& r = regs_;
    auto qp_page = (off - MROCE_REG_QP_DB_BASE) / MROCE_HW_DB_STRIDE;
    auto cq_page = (off - MROCE_REG_CQ_DB_BASE) / MROCE_HW_DB_STRIDE;
    if (off == MROCE_REG_DEV_CTRL && (v & MROCE_CTRL_RESET)) {
      r.reset = true;  // self-clearing: the model thread resets, then READY
      r.status = 0;
      r.ctrl = 0;
    } else if (r.reset) {
      r.bad_offset++;  // registers are programmed after READY only
    } else if (off == MROCE_REG_DEV_CTRL) {
      r.ctrl = v;
    } else if (off == MROCE_REG_DRV_VERSION) {
      r.drv_version = v;
    } else if (off == MROCE_REG_AQ_DEPTH) {
      r.aq_depth = v;
    } else if (off == MROCE_REG_AQ_TAIL) {
      r.aq_tail = v;
    } else if (off == MROCE_REG_ACQ_DEPTH) {
      r.acq_depth = v;
    } else if (off == MROCE_REG_ACQ_HEAD) {
      r.acq_head = v;
    } else if (off == MROCE_REG_EQ_DEPTH) {
      r.eq_depth = v;
    } else if (off == MROCE_REG_EQ_HEAD) {
      r.eq_head = v & kIndexMask;
      if (v & ~kIndexMask) r.eq_armed = true;
    } else if (off == MROCE_REG_INTR_MASK) {
      r.intr_mask = v;
    } else if (off >= MROCE_REG_QP_DB_BASE && qp_page < MROCE_HW_DB_PAGES &&
               off % MROCE_HW_DB_STRIDE <= MROCE_DB_RQ_PI && off % 4 == 0) {
      (off % MROCE_HW_DB_STRIDE == MROCE_DB_SQ_PI ? r.sq_pi : r.rq_pi)[qp_page] = v;
      r.doorbell_writes++;
    } else if (off >= MROCE_REG_CQ_DB_BASE && cq_page < MROCE_HW_DB_PAGES &&
               off % MROCE_HW_DB_STRIDE <= MROCE_DB_CQ_ARM && off % 4 == 0) {
      (off % MROCE_HW_DB_STRIDE == MROCE_DB_CQ_CI ? r.cq_ci : r.cq_arm)[cq_page] = v;
      r.cq_doorbell_writes++;
    } else {
      r.bad_offset++;
    }
  }
  uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof(one));
}

void DeviceModel::write64(uint64_t off, uint64_t v) {
  {
    std::lock_guard g(mu_);
    if (regs_.reset) {
      regs_.bad_offset++;
    } else if (off == MROCE_REG_AQ_BASE) {
      regs_.aq_base = v;
    } else if (off == MROCE_REG_ACQ_BASE) {
      regs_.acq_base = v;
    } else if (off == MROCE_REG_EQ_BASE) {
      regs_.eq_base = v;
    } else {
      regs_.bad_offset++;
    }
  }
  uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof(one));
}

int DeviceModel::map_dma(uint64_t iova, void* host, size_t len) {
  std::lock_guard g(mu_);
  if (len == 0 || iova + len < iova) return EINVAL;
  auto next = windows_.lower_bound(iova);
  if (next != windows_.end() && next->first < iova + len) return EEXIST;
  if (next != windows_.begin() && std::prev(next)->first + std::prev(next)->second.len > iova)
    return EEXIST;
  windows_[iova] = {static_cast<uint8_t*>(host), len};
  return 0;
}

void DeviceModel::unmap_dma(uint64_t iova) {
  std::lock_guard g(mu_);
  windows_.erase(iova);
}

int DeviceModel::set_irq(int eventfd) {
  std::lock_guard g(mu_);
  irq_fd_ = eventfd;
  return 0;
}

int DeviceModel::bind_pasid(uint32_t pasid, std::unique_ptr<daemon::ClientMemory> memory,
                            std::string* why) {
  if (!memory) {
    *why = "PASID " + std::to_string(pasid) + ": no address space to bind";
    return EINVAL;
  }
  {
    std::lock_guard g(mu_);
    if (!bound_.insert(pasid).second) {
      *why = "PASID " + std::to_string(pasid) + " is already bound";
      return EEXIST;
    }
    bindings_.push_back({pasid, std::move(memory)});
  }
  uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof(one));
  return 0;
}

void DeviceModel::unbind_pasid(uint32_t pasid) {
  {
    std::lock_guard g(mu_);
    if (!bound_.erase(pasid)) return;
    bindings_.push_back({pasid, nullptr});
  }
  uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof(one));
}

// An IOVA range inside one map_dma window, or nullptr (counted).
uint8_t* DeviceModel::translate(uint64_t iova, uint64_t len) {
  std::lock_guard g(mu_);
  auto it = windows_.upper_bound(iova);
  if (it != windows_.begin()) {
    --it;
    uint64_t off = iova - it->first;
    if (off <= it->second.len && len <= it->second.len - off) return it->second.host + off;
  }
  dma_unmapped_++;
  return nullptr;
}

// ---------------- the model's thread ----------------

void DeviceModel::run() {
  if (options_.rt_priority) {  // as the daemon's loop: a NIC must not wait behind applications
    sched_param sp{};
    sp.sched_priority = static_cast<int>(options_.rt_priority);
    pthread_setschedparam(pthread_self(), SCHED_FIFO, &sp);  // refused: normal priority
  }
  for (;;) {
    {
      std::lock_guard g(mu_);
      if (stop_) return;
    }
    if (pass() == 0) wait_for_work();
  }
}

// The wake-up is consumed before the registers are read, so a write after
// the snapshot wakes the next wait.
DeviceModel::Snapshot DeviceModel::take_snapshot() {
  uint64_t v;
  while (::read(wake_fd_, &v, sizeof(v)) == sizeof(v)) {
  }
  std::lock_guard g(mu_);
  Snapshot s;
  s.regs = regs_;
  s.bindings = std::move(bindings_);
  bindings_.clear();
  regs_.sq_pi.clear();
  regs_.rq_pi.clear();
  regs_.cq_ci.clear();
  regs_.cq_arm.clear();
  return s;
}

// One pass: bindings, reset, queues, doorbells before admin commands (work
// the driver posted before a MODIFY_QP reaches the engine first), then the
// engine's own work (frames, timers, transmission, completions).
int DeviceModel::pass() {
  Snapshot s = take_snapshot();
  int work = static_cast<int>(s.bindings.size());
  apply_bindings(s.bindings);
  if (s.regs.reset) {
    do_reset();
    return 1;
  }
  acq_head_ = s.regs.acq_head;
  eq_head_ = s.regs.eq_head;
  if (!fatal_) {
    enable_queues(s.regs);
    work += run_doorbells(s.regs);
    work += run_admin(s.regs);
  }
  work += nic_->service(clock_.read());
  raise_interrupt();
  return work;
}

void DeviceModel::wait_for_work() {
  fw::Time now = clock_.read();
  fw::Time deadline = nic_->next_deadline();
  if (deadline != fw::kNever && deadline <= now + kBusyHorizon) {
    sched_yield();  // traffic in flight: stay awake, as the daemon's loop does
    return;
  }
  pollfd fds[2] = {{wake_fd_, POLLIN, 0}, {nic_->wait_fd(), POLLIN, 0}};
  fw::Time wait = deadline == fw::kNever ? 100'000'000 : std::min<fw::Time>(deadline - now, 100'000'000);
  timespec ts{static_cast<time_t>(wait / 1'000'000'000), static_cast<long>(wait % 1'000'000'000)};
  ppoll(fds, fds[1].fd >= 0 ? 2 : 1, &ts, nullptr);
}

// Everything the device holds goes; the PASID table (the IOMMU's) stays.
// The driver frees the memory it shared only after READY.
void DeviceModel::do_reset() {
  for (fw::OwnerId o : owners_) nic_->destroy_owner(o);
  owners_.clear();
  qps_.clear();
  cqs_.clear();
  aq_ = nullptr;
  acq_ = nullptr;
  eq_ = nullptr;
  admin_on_ = eq_on_ = fatal_ = false;
  aq_head_ = eq_prod_ = acq_head_ = eq_head_ = 0;
  counters_.model_resets++;
  std::lock_guard g(mu_);
  Registers fresh;  // counters survive a reset
  fresh.bad_offset = regs_.bad_offset;
  fresh.doorbell_writes = regs_.doorbell_writes;
  fresh.cq_doorbell_writes = regs_.cq_doorbell_writes;
  regs_ = fresh;
}

void DeviceModel::apply_bindings(std::vector<Binding>& bindings) {
  for (Binding& b : bindings) {
    if (b.memory) {
      pasids_[b.pasid] = std::move(b.memory);
      continue;
    }
    if (owners_.erase(b.pasid)) {
      nic_->destroy_owner(b.pasid);
      std::erase_if(qps_, [&](const auto& kv) { return kv.second.owner == b.pasid; });
      std::erase_if(cqs_, [&](const auto& kv) { return kv.second.owner == b.pasid; });
    }
    pasids_.erase(b.pasid);
  }
}

// DEV_CTRL.ENABLE / EQ_ENABLE: the queues the registers describe must lie
// in DMA windows, aligned, with power-of-two depths; else the device stops.
void DeviceModel::enable_queues(const Registers& r) {
  if (!admin_on_ && (r.ctrl & MROCE_CTRL_ENABLE)) {
    bool ok = pow2_within(r.aq_depth, kMaxQueueDepth) && pow2_within(r.acq_depth, kMaxQueueDepth) &&
              r.acq_depth >= r.aq_depth && (r.aq_base & 0xfff) == 0 && (r.acq_base & 0xf) == 0;
    aq_ = ok ? reinterpret_cast<mroce_hw_admin_cmd*>(
                   translate(r.aq_base, uint64_t{r.aq_depth} * sizeof(mroce_hw_admin_cmd)))
             : nullptr;
    acq_ = ok ? reinterpret_cast<mroce_hw_admin_cpl*>(
                    translate(r.acq_base, uint64_t{r.acq_depth} * sizeof(mroce_hw_admin_cpl)))
              : nullptr;
    if (!aq_ || !acq_) return go_fatal(MROCE_FATAL_AQ_UNMAPPED);
    aq_depth_ = r.aq_depth;
    acq_depth_ = r.acq_depth;
    admin_on_ = true;
    std::lock_guard g(mu_);
    regs_.status |= MROCE_STATUS_ENABLED;
  }
  if (!eq_on_ && (r.ctrl & MROCE_CTRL_EQ_ENABLE)) {
    bool ok = pow2_within(r.eq_depth, kMaxQueueDepth) && (r.eq_base & 0xf) == 0;
    eq_ = ok ? reinterpret_cast<mroce_hw_eqe*>(
                   translate(r.eq_base, uint64_t{r.eq_depth} * sizeof(mroce_hw_eqe)))
             : nullptr;
    if (!eq_) return go_fatal(MROCE_FATAL_EQ_UNMAPPED);
    eq_depth_ = r.eq_depth;
    eq_on_ = true;
  }
}

void DeviceModel::go_fatal(uint32_t code) {
  fatal_ = true;
  counters_.model_fatal++;
  std::lock_guard g(mu_);
  regs_.status |= MROCE_STATUS_FATAL;
  regs_.fatal_code = code;
}

// Commands between our head and AQ_TAIL, in order, while the completion
// ring has room (ACQ_HEAD). A tail more than a ring ahead is fatal.
int DeviceModel::run_admin(const Registers& r) {
  if (!admin_on_) return 0;
  if (r.aq_tail - aq_head_ > aq_depth_) {
    go_fatal(MROCE_FATAL_AQ_TAIL);
    return 1;
  }
  int n = 0;
  while (aq_head_ != r.aq_tail && aq_head_ - acq_head_ < acq_depth_) {
    Admin a;
    std::memcpy(&a.cmd, &aq_[aq_head_ & (aq_depth_ - 1)], sizeof(a.cmd));  // copied before use
    a.cpl.cmd_id = a.cmd.cmd_id;
    counters_.model_admin_commands++;
    execute(a);
    if (a.cpl.status) counters_.model_admin_errors++;
    write_entry(&acq_[aq_head_ & (acq_depth_ - 1)], a.cpl, phase_of(aq_head_, acq_depth_));
    aq_head_++;
    n++;
  }
  return n;
}

// Doorbell values since the last pass, then every QP's queues (RQ first:
// a receive posted before its SEND arrives must be in the engine).
int DeviceModel::run_doorbells(const Registers& r) {
  for (auto [page, pi] : r.sq_pi) {
    auto it = qps_.find(page);
    if (it == qps_.end()) {
      counters_.model_doorbell_no_queue++;
      continue;
    }
    it->second.sq_pi = pi;
  }
  for (auto [page, pi] : r.rq_pi) {
    auto it = qps_.find(page);
    if (it == qps_.end()) {
      counters_.model_doorbell_no_queue++;
      continue;
    }
    it->second.rq_pi = pi;
  }
  for (auto [cqn, ci] : r.cq_ci) {
    auto it = cqs_.find(cqn);
    if (it == cqs_.end()) {
      counters_.model_doorbell_no_queue++;
      continue;
    }
    Cq& cq = it->second;
    if (cq.producer - ci > cq.ring.entries) {
      counters_.model_doorbell_beyond_depth++;  // a CI we never produced: ignored
      continue;
    }
    cq.ci = ci;
  }
  for (auto [cqn, how] : r.cq_arm) {
    auto it = cqs_.find(cqn);
    if (it == cqs_.end()) {
      counters_.model_doorbell_no_queue++;
      continue;
    }
    Cq& cq = it->second;
    cq.arm = how == MROCE_CQ_ARM_SOLICITED ? MROCE_CQ_ARM_SOLICITED : MROCE_CQ_ARM_ANY;
    if (cq.producer != cq.ci) {  // CQEs the driver has not consumed: notify at once
      cq.arm = 0;
      post_eqe(MROCE_EQE_COMPLETION, cqn);
    }
  }
  int work = 0;
  for (auto& [page, qp] : qps_) work += drain_rq(qp) + drain_sq(qp);
  return work;
}

// ---------------- rings ----------------

int DeviceModel::drain_sq(Qp& qp) {
  uint32_t pending = qp.sq_pi - qp.sq_cons;
  if (pending == 0) return 0;
  if (pending > qp.sq.entries) {
    counters_.model_doorbell_beyond_depth++;  // ignored: WQEs we would read twice
    qp.sq_pi = qp.sq_cons;
    return 0;
  }
  int n = 0;
  while (qp.sq_cons != qp.sq_pi) {
    mroce_send_wqe w;
    std::memcpy(&w, mroce_ring_slot(&qp.sq, qp.sq_cons), sizeof(w));  // copied before use
    int err = 0;
    fw::SendWr wr;
    if (w.opcode == MROCE_HW_WQE_OP_ERROR) {
      uint32_t st = w.imm;
      bool known = st != 0 && st <= static_cast<uint32_t>(fw::WcStatus::kGeneralErr);
      err = nic_->post_send_error(qp.owner, qp.qpn, w.wr_id,
                                  known ? static_cast<fw::WcStatus>(st) : fw::WcStatus::kLocQpOpErr);
    } else if (uapi::to_fw(w, &wr) != uapi::WqeDefect::kNone ||
               (err = nic_->post_send(qp.owner, qp.qpn, wr)) == EINVAL) {
      counters_.model_wqe_defects++;  // completed in order with an error, QP to ERR
      err = nic_->post_send_error(qp.owner, qp.qpn, w.wr_id, fw::WcStatus::kLocQpOpErr);
    }
    if (err == ENOMEM) break;  // the engine's SQ is full: the rest waits for the next pass
    qp.sq_cons++;
    n++;
  }
  if (n) mroce_ring_publish_consumer(&qp.sq, qp.sq_cons);
  counters_.model_wqes_sq += n;
  return n;
}

int DeviceModel::drain_rq(Qp& qp) {
  uint32_t pending = qp.rq_pi - qp.rq_cons;
  if (pending == 0) return 0;
  if (pending > qp.rq.entries) {
    counters_.model_doorbell_beyond_depth++;
    qp.rq_pi = qp.rq_cons;
    return 0;
  }
  int n = 0;
  while (qp.rq_cons != qp.rq_pi) {
    mroce_recv_wqe w;
    std::memcpy(&w, mroce_ring_slot(&qp.rq, qp.rq_cons), sizeof(w));
    fw::RecvWr wr;
    int err = EINVAL;
    if (uapi::to_fw(w, &wr) == uapi::WqeDefect::kNone) err = nic_->post_recv(qp.owner, qp.qpn, wr);
    if (err == ENOMEM) break;
    if (err) counters_.model_wqe_defects++;  // as the queue pump: refused receives are dropped
    qp.rq_cons++;
    n++;
  }
  if (n) mroce_ring_publish_consumer(&qp.rq, qp.rq_cons);
  counters_.model_wqes_rq += n;
  return n;
}

// ---------------- completions and events, into host memory ----------------

bool DeviceModel::complete(uint32_t cqn, const fw::Completion& wc) {
  auto it = cqs_.find(cqn);
  if (it == cqs_.end()) return true;  // destroyed: nothing to deliver to
  Cq& cq = it->second;
  if (cq.producer - cq.ci >= cq.ring.entries) {
    counters_.model_cq_overflows++;
    if (!cq.overflowed) {
      cq.overflowed = true;
      mroce_ring_set_overflow(&cq.ring);
      post_eqe(static_cast<uint32_t>(fw::EventType::kCqErr), cqn);
    }
    return false;
  }
  mroce_cqe e = uapi::to_abi(wc);
  std::memcpy(mroce_ring_slot(&cq.ring, cq.producer), &e, sizeof(e));
  cq.producer++;
  cq.dirty = true;
  counters_.model_cqes++;
  return true;
}

void DeviceModel::async_event(fw::EventType type, uint32_t element) {
  post_eqe(static_cast<uint32_t>(type), element);
}

// The soft NIC calls this once the data of the staged CQEs is in memory:
// producers are store-released after their CQEs, then armed CQs notified.
// The engine's completions carry no solicited flag, so a SOLICITED arm
// fires on the next CQE, as ANY does (docs/hardware-offload.md §8).
void DeviceModel::publish() {
  for (auto& [cqn, cq] : cqs_) {
    if (!cq.dirty) continue;
    cq.dirty = false;
    mroce_ring_publish_producer(&cq.ring, cq.producer);
    if (cq.arm) {
      cq.arm = 0;
      post_eqe(MROCE_EQE_COMPLETION, cqn);
    }
  }
}

void DeviceModel::post_eqe(uint32_t type, uint32_t element) {
  if (!eq_on_ || ((eq_prod_ - eq_head_) & kIndexMask) >= eq_depth_) {
    counters_.model_eq_overflows++;  // no event ring, or the driver is a ring behind
    return;
  }
  mroce_hw_eqe e{};
  e.type = type;
  e.element = element;
  write_entry(&eq_[eq_prod_ & (eq_depth_ - 1)], e, phase_of(eq_prod_, eq_depth_));
  eq_prod_++;
  counters_.model_eqes++;
}

// MSI-X vector 0: one interrupt per arm (EQ_HEAD bit 31) while events wait
// past the driver's head and the vector is unmasked.
void DeviceModel::raise_interrupt() {
  std::lock_guard g(mu_);
  if (!regs_.eq_armed || (regs_.intr_mask & 1) || irq_fd_ < 0) return;
  if ((eq_prod_ & kIndexMask) == regs_.eq_head) return;
  regs_.eq_armed = false;
  counters_.model_interrupts++;
  uint64_t one = 1;
  (void)!::write(irq_fd_, &one, sizeof(one));
}

}  // namespace metaroce::hw
