#include "firmware-model/hw/hw_offload_backend.h"

#include <sched.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

namespace metaroce::hw {

namespace {

constexpr size_t kPage = 4096;
constexpr size_t kMailbox = 16384;  // QUERY_COUNTERS: the header and 256 counters
constexpr uint32_t kMaxCounters = 256;

uint64_t mono_ns() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

uint32_t round_up_pow2(uint32_t v) {
  uint32_t p = 1;
  while (p < v) p <<= 1;
  return p;
}

std::string hex(uint64_t v) {
  char b[24];
  std::snprintf(b, sizeof(b), "0x%llx", static_cast<unsigned long long>(v));
  return b;
}

const char* admin_name(uint16_t op) {
  static const char* const kNames[] = {
      "?",          "QUERY_CAPS", "SET_PORT",  "CREATE_PD",     "DESTROY_PD",
      "REG_MR",     "DEREG_MR",   "CREATE_CQ", "DESTROY_CQ",    "CREATE_QP",
      "MODIFY_QP",  "QUERY_QP",   "DESTROY_QP", "DESTROY_OWNER", "QUERY_COUNTERS",
      "QUERY_QP_TRANSPORT",
  };
  return op < std::size(kNames) ? kNames[op] : "?";
}

// The reason a device gives with a failed command (hw_abi.h syndromes).
const char* syndrome_text(uint8_t s) {
  static const char* const kText[] = {
#define MROCE_X(name, text) text,
      MROCE_HW_SYNDROMES(MROCE_X)
#undef MROCE_X
  };
  return s < std::size(kText) ? kText[s] : "unknown syndrome";
}

// Index ownership and ordering as docs/device-abi.md §Rings: the producer
// store-releases its index after the slot; the consumer load-acquires it.
uint8_t load_phase(uint8_t& v) { return std::atomic_ref<uint8_t>(v).load(std::memory_order_acquire); }

// The phase a valid entry at free-running index i carries: 1 on the
// first pass over a ring of `depth`, 0 on the second, ...
uint8_t expected_phase(uint32_t i, uint32_t depth) { return ((i / depth) & 1) == 0 ? 1 : 0; }

using uapi::to_abi;
using uapi::to_fw;

mroce_qp_attr to_abi(const fw::QpAttr& q, uint32_t mask) {
  mroce_qp_attr a = uapi::to_abi(q);
  a.attr_mask = mask;
  return a;
}


}  // namespace

DmaBuffer::DmaBuffer(size_t bytes) : size_((bytes + kPage - 1) / kPage * kPage) {
  if (size_ == 0) return;
  mem_.reset(static_cast<uint8_t*>(std::aligned_alloc(kPage, size_)));
  std::memset(mem_.get(), 0, size_);
}

HwOffloadBackend::Ring HwOffloadBackend::make_ring(uint32_t entries, uint32_t entry_size) {
  Ring r;
  r.mem = DmaBuffer(sizeof(mroce_ring_hdr) + size_t{entries} * entry_size);
  mroce_ring_init(&r.view, r.mem.data(), entries, entry_size);
  return r;
}

HwOffloadBackend::HwOffloadBackend(RegisterSpaceInterface& bar0, EventSink& events,
                                   const HwOptions& options)
    : bar0_(bar0), events_(events), options_(options) {
  caps_ = fw::DeviceCaps{};
  caps_.max_qp = caps_.max_cq = 0;  // nothing until QUERY_CAPS answers
}

HwOffloadBackend::~HwOffloadBackend() {
  if (aq_.data()) {  // the device was programmed: stop its DMA before the memory goes
    bar0_.write32(MROCE_REG_DEV_CTRL, MROCE_CTRL_RESET);
    uint32_t st = 0;
    wait_ready(&st);
    for (const DmaBuffer* b : {&aq_, &acq_, &eq_, &in_, &out_}) unmap(*b);
    for (auto& [cqn, cq] : cqs_) unmap(cq.ring.mem);
    for (auto& [qpn, qp] : qps_) {
      unmap(qp.sq.mem);
      unmap(qp.rq.mem);
    }
  }
  if (irq_fd_ >= 0) {
    bar0_.set_irq(-1);
    close(irq_fd_);
  }
}

int HwOffloadBackend::fail(int err, std::string why) {
  last_error_ = std::move(why);
  return err;
}

// Whether to read a status once more: poll_budget reads back to back,
// then, with a wall-clock timeout, reads spaced by short sleeps until it
// passes (a model thread on a loaded machine; yielding lets it run).
bool HwOffloadBackend::keep_waiting(uint32_t i, uint64_t start_ns) const {
  if (i < options_.poll_budget) {
    if (options_.wait_timeout_ns) sched_yield();
    return true;
  }
  if (!options_.wait_timeout_ns || mono_ns() - start_ns >= options_.wait_timeout_ns) return false;
  std::this_thread::sleep_for(std::chrono::microseconds(20));
  return true;
}

// After DEV_CTRL = RESET: READY, or ETIMEDOUT.
int HwOffloadBackend::wait_ready(uint32_t* st) {
  uint64_t start = mono_ns();
  for (uint32_t i = 0; keep_waiting(i, start); i++) {
    *st = bar0_.read32(MROCE_REG_DEV_STATUS);
    if (*st & MROCE_STATUS_READY) return 0;
  }
  return ETIMEDOUT;
}

int HwOffloadBackend::map(const DmaBuffer& b) {
  if (int err = bar0_.map_dma(b.iova(), b.data(), b.size()))
    return fail(err, "cannot map " + std::to_string(b.size()) + " bytes for device DMA: " +
                         std::strerror(err));
  return 0;
}

// ---------------- bring-up ----------------

// Step 1-3 of docs/hardware-offload.md §Bring-up: identify, reset, agree
// on the interface version.
int HwOffloadBackend::reset_and_handshake() {
  uint32_t id = bar0_.read32(MROCE_REG_DEV_ID);
  if (id == 0xffffffffu || (id & 0xffff) != MROCE_HW_PCI_VENDOR || (id >> 16) != MROCE_HW_PCI_DEVICE)
    return fail(ENODEV, "no MetaRoCE device answers on BAR0 (DEV_ID reads " + hex(id) + ")");
  bar0_.write32(MROCE_REG_DEV_CTRL, MROCE_CTRL_RESET);
  uint32_t st = 0;
  if (wait_ready(&st))
    return fail(ETIMEDOUT, "device did not finish reset (DEV_STATUS " + hex(st) + ")");
  if (st & MROCE_STATUS_FATAL)
    return fail(EIO, "device reports a fatal error after reset (code " +
                         hex(bar0_.read32(MROCE_REG_FATAL_CODE)) + ")");
  uint32_t fw = bar0_.read32(MROCE_REG_FW_VERSION);
  if ((fw >> 16) != MROCE_HW_IF_MAJOR)
    return fail(EPROTO, "firmware interface " + std::to_string(fw >> 16) + "." +
                            std::to_string(fw & 0xffff) + ", this driver speaks " +
                            std::to_string(MROCE_HW_IF_MAJOR) + ".x: update one of them");
  fw_minor_ = fw & 0xffff;
  bar0_.write32(MROCE_REG_DRV_VERSION, MROCE_HW_IF_MAJOR << 16 | MROCE_HW_IF_MINOR);
  return 0;
}

// Step 4-5: admin queue, then event queue, then unmask the interrupt.
void HwOffloadBackend::program_queues() {
  uint32_t ad = round_up_pow2(options_.admin_depth), ed = round_up_pow2(options_.event_depth);
  aq_ = DmaBuffer(size_t{ad} * sizeof(mroce_hw_admin_cmd));
  acq_ = DmaBuffer(size_t{ad} * sizeof(mroce_hw_admin_cpl));
  eq_ = DmaBuffer(size_t{ed} * sizeof(mroce_hw_eqe));
  in_ = DmaBuffer(kMailbox);
  out_ = DmaBuffer(kMailbox);
  for (const DmaBuffer* b : {&aq_, &acq_, &eq_, &in_, &out_}) map(*b);
  options_.admin_depth = ad;
  options_.event_depth = ed;
  aq_tail_ = acq_head_ = eq_head_ = 0;
  bar0_.write64(MROCE_REG_AQ_BASE, aq_.iova());
  bar0_.write32(MROCE_REG_AQ_DEPTH, ad);
  bar0_.write64(MROCE_REG_ACQ_BASE, acq_.iova());
  bar0_.write32(MROCE_REG_ACQ_DEPTH, ad);
  bar0_.write32(MROCE_REG_DEV_CTRL, MROCE_CTRL_ENABLE);
  bar0_.write64(MROCE_REG_EQ_BASE, eq_.iova());
  bar0_.write32(MROCE_REG_EQ_DEPTH, ed);
  bar0_.write32(MROCE_REG_DEV_CTRL, MROCE_CTRL_ENABLE | MROCE_CTRL_EQ_ENABLE);
  bar0_.write32(MROCE_REG_EQ_HEAD, 0x80000000u);  // armed at index 0
  bar0_.write32(MROCE_REG_INTR_MASK, 0);
}

// MSI-X vector 0 to an eventfd the daemon's loop waits on (wait_fd()).
void HwOffloadBackend::setup_interrupt() {
  if (irq_fd_ >= 0) return;
  int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (fd < 0) return;  // no interrupt: the event ring is polled
  if (bar0_.set_irq(fd) == 0) {
    irq_fd_ = fd;
  } else {
    close(fd);
  }
}

int HwOffloadBackend::bring_up(std::string* why) {
  up_ = false;
  int err = reset_and_handshake();
  if (!err) {
    program_queues();
    setup_interrupt();
    up_ = true;
    mroce_device_attr attr{};
    Admin q;
    q.op = MROCE_ADMIN_QUERY_CAPS;
    q.out = &attr;
    q.out_len = sizeof(attr);
    err = admin(q);
    if (!err) {
      caps_.max_qp = attr.max_qp;
      caps_.max_qp_wr = attr.max_qp_wr;
      caps_.max_sge = attr.max_sge;
      caps_.max_cq = attr.max_cq;
      caps_.max_cqe = attr.max_cqe;
      caps_.max_mr = attr.max_mr;
      caps_.max_mr_size = attr.max_mr_size;
      caps_.max_pd = attr.max_pd;
      caps_.max_qp_rd_atom = attr.max_qp_rd_atom;
      caps_.max_inline = attr.max_inline;
      caps_.max_msg_size = attr.max_msg_size;
    } else {
      up_ = false;
      bar0_.write32(MROCE_REG_DEV_CTRL, MROCE_CTRL_RESET);  // leave it quiet
    }
  }
  if (err) *why = "hw backend bring-up: " + last_error_;
  return err;
}

// ---------------- admin queue ----------------

int HwOffloadBackend::admin(Admin& a) {
  if (!up_) return fail(ENODEV, std::string(admin_name(a.op)) + ": the device is not up");
  if (aq_tail_ - acq_head_ >= options_.admin_depth)
    return fail(EBUSY, "admin queue full");  // single-threaded: cannot happen
  if (a.in_len > in_.size() || a.out_len > out_.size())
    return fail(EINVAL, std::string(admin_name(a.op)) + ": mailbox larger than " +
                            std::to_string(kMailbox) + " bytes");
  DmaBuffer &in = in_, &out = out_;
  mroce_hw_admin_cmd c{};
  c.opcode = a.op;
  c.cmd_id = next_cmd_id_++;
  c.owner = a.owner;
  c.handle = a.handle;
  if (a.in_len) {
    std::memcpy(in.data(), a.in, a.in_len);
    c.flags |= MROCE_ADMIN_F_IN;
    c.in_iova = in.iova();
    c.in_len = static_cast<uint32_t>(a.in_len);
  }
  if (a.out_len) {
    c.flags |= MROCE_ADMIN_F_OUT;
    c.out_iova = out.iova();
    c.out_len = static_cast<uint32_t>(a.out_len);
  }
  std::memcpy(aq_.data() + size_t{aq_tail_ & (options_.admin_depth - 1)} * sizeof(c), &c, sizeof(c));
  std::atomic_thread_fence(std::memory_order_release);  // command before doorbell (wmb)
  bar0_.write32(MROCE_REG_AQ_TAIL, ++aq_tail_);
  mroce_hw_admin_cpl cpl{};
  if (int err = wait_admin_completion(a, c.cmd_id, &cpl)) return err;
  if (cpl.status) {
    std::string why = std::string(admin_name(a.op)) + " failed in firmware: " +
                      std::strerror(cpl.status);
    if (cpl.syndrome) why += std::string(" (") + syndrome_text(cpl.syndrome) + ")";
    return fail(cpl.status, why);
  }
  if (a.out_len) std::memcpy(a.out, out.data(), a.out_len);
  a.result = cpl.result;
  a.result2 = cpl.result2;
  last_error_.clear();
  return 0;
}

int HwOffloadBackend::wait_admin_completion(const Admin& a, uint32_t cmd_id,
                                            mroce_hw_admin_cpl* cpl) {
  auto* slot = reinterpret_cast<mroce_hw_admin_cpl*>(acq_.data()) +
               (acq_head_ & (options_.admin_depth - 1));
  uint8_t phase = expected_phase(acq_head_, options_.admin_depth);
  uint64_t start = mono_ns();
  for (uint32_t i = 0; keep_waiting(i, start); i++) {
    if (load_phase(slot->phase) == phase) {
      std::memcpy(cpl, slot, sizeof(*cpl));
      bar0_.write32(MROCE_REG_ACQ_HEAD, ++acq_head_);
      if (cpl->cmd_id != cmd_id) {
        up_ = false;
        return fail(EIO, std::string(admin_name(a.op)) + ": completion for command " +
                             std::to_string(cpl->cmd_id) + ", expected " + std::to_string(cmd_id));
      }
      return 0;
    }
    uint32_t st = bar0_.read32(MROCE_REG_DEV_STATUS);
    if (st & MROCE_STATUS_FATAL) {
      up_ = false;
      return fail(EIO, std::string(admin_name(a.op)) + ": device fatal error (code " +
                           hex(bar0_.read32(MROCE_REG_FATAL_CODE)) + ")");
    }
  }
  up_ = false;  // a device that stops answering must be reset
  return fail(ETIMEDOUT, std::string(admin_name(a.op)) + " (command " + std::to_string(cmd_id) +
                             ") timed out: no firmware completed it");
}

// ---------------- objects ----------------

int HwOffloadBackend::set_port(const fw::PortInfo& port) {
  mroce_hw_port p{};
  p.link_mtu = port.link_mtu;
  p.active = port.active;
  p.num_gids = static_cast<uint32_t>(std::min<size_t>(port.gids.size(), 16));
  for (uint32_t i = 0; i < p.num_gids; i++) std::memcpy(p.gids[i], port.gids[i].bytes.data(), 16);
  Admin a;
  a.op = MROCE_ADMIN_SET_PORT;
  a.in = &p;
  a.in_len = sizeof(p);
  return admin(a);
}

// Shared virtual addressing: the owner's address space is bound to its
// PASID before the device is given any of its objects.
int HwOffloadBackend::bind_owner(fw::OwnerId owner) {
  if (!up_ || !options_.binder || bound_.count(owner)) return 0;  // admin() says why if down
  std::string why;
  if (int err = options_.binder->bind(owner, &why))
    return fail(err, "cannot bind PASID " + std::to_string(owner) + ": " + why);
  bound_.insert(owner);
  return 0;
}

// With an interrupt, every CQ stays armed for ANY: the daemon relays each
// completion to the application's ring, so each must wake it.
void HwOffloadBackend::arm_for_interrupt(uint32_t cqn) {
  if (irq_fd_ >= 0) bar0_.write32(cq_db(cqn) + MROCE_DB_CQ_ARM, MROCE_CQ_ARM_ANY);
}

int HwOffloadBackend::create_pd(fw::OwnerId owner, uint32_t* pdn) {
  if (int err = bind_owner(owner)) return err;
  Admin a;
  a.op = MROCE_ADMIN_CREATE_PD;
  a.owner = owner;
  int err = admin(a);
  if (!err) *pdn = a.result;
  return err;
}

int HwOffloadBackend::destroy_pd(fw::OwnerId owner, uint32_t pdn) {
  Admin a;
  a.op = MROCE_ADMIN_DESTROY_PD;
  a.owner = owner;
  a.handle = pdn;
  return admin(a);
}

int HwOffloadBackend::reg_mr(fw::OwnerId owner, uint32_t pdn, uint64_t addr, uint64_t length,
                             uint32_t access, fw::MrKeys* keys) {
  if (int err = bind_owner(owner)) return err;
  mroce_reg_mr_req in{addr, length, pdn, access};
  Admin a;
  a.op = MROCE_ADMIN_REG_MR;
  a.owner = owner;
  a.in = &in;
  a.in_len = sizeof(in);
  int err = admin(a);
  if (!err) *keys = {a.result, a.result2};
  return err;
}

int HwOffloadBackend::dereg_mr(fw::OwnerId owner, uint32_t lkey) {
  Admin a;
  a.op = MROCE_ADMIN_DEREG_MR;
  a.owner = owner;
  a.handle = lkey;
  return admin(a);
}

int HwOffloadBackend::create_cq(fw::OwnerId owner, uint32_t entries, uint32_t* cqn) {
  if (entries == 0 || (caps_.max_cqe && entries > caps_.max_cqe))
    return fail(EINVAL, "CQ entries must be 1.." + std::to_string(caps_.max_cqe));
  if (int err = bind_owner(owner)) return err;
  Cq cq;
  cq.owner = owner;
  cq.ring = make_ring(round_up_pow2(entries), sizeof(mroce_cqe));
  if (int err = map(cq.ring.mem)) return err;
  mroce_hw_create_cq in{cq.ring.mem.iova(), cq.ring.view.entries, 0};
  Admin a;
  a.op = MROCE_ADMIN_CREATE_CQ;
  a.owner = owner;
  a.in = &in;
  a.in_len = sizeof(in);
  if (int err = admin(a)) {
    unmap(cq.ring.mem);
    return err;
  }
  *cqn = a.result;
  cqs_[a.result] = std::move(cq);
  arm_for_interrupt(a.result);
  return 0;
}

int HwOffloadBackend::destroy_cq(fw::OwnerId owner, uint32_t cqn) {
  Admin a;
  a.op = MROCE_ADMIN_DESTROY_CQ;
  a.owner = owner;
  a.handle = cqn;
  int err = admin(a);
  auto it = cqs_.find(cqn);
  if (!err && it != cqs_.end()) {  // the device no longer writes the ring: free it after
    unmap(it->second.ring.mem);
    cqs_.erase(it);
  }
  return err;
}

int HwOffloadBackend::create_qp(fw::OwnerId owner, const fw::QpInitAttr& init, uint32_t* qpn,
                                fw::QpCap* actual) {
  if (int err = bind_owner(owner)) return err;
  Qp qp;
  qp.owner = owner;
  qp.send_cqn = init.send_cqn;
  qp.recv_cqn = init.recv_cqn;
  qp.sq = make_ring(round_up_pow2(std::max(init.cap.max_send_wr, 1u)), sizeof(mroce_send_wqe));
  qp.rq = make_ring(round_up_pow2(std::max(init.cap.max_recv_wr, 1u)), sizeof(mroce_recv_wqe));
  mroce_hw_create_qp in{};
  in.pdn = init.pdn;
  in.send_cqn = init.send_cqn;
  in.recv_cqn = init.recv_cqn;
  in.sq_sig_all = init.sq_sig_all;
  in.cap = to_abi(init.cap);
  in.sq_entries = qp.sq.view.entries;
  in.rq_entries = qp.rq.view.entries;
  in.sq_ring_iova = qp.sq.mem.iova();
  in.rq_ring_iova = qp.rq.mem.iova();
  if (int err = map(qp.sq.mem)) return err;
  if (int err = map(qp.rq.mem)) {
    unmap(qp.sq.mem);
    return err;
  }
  mroce_qp_cap out{};
  Admin a;
  a.op = MROCE_ADMIN_CREATE_QP;
  a.owner = owner;
  a.in = &in;
  a.in_len = sizeof(in);
  a.out = &out;
  a.out_len = sizeof(out);
  if (int err = admin(a)) {
    unmap(qp.sq.mem);
    unmap(qp.rq.mem);
    return err;
  }
  *qpn = a.result;
  *actual = to_fw(out);
  qps_[a.result] = std::move(qp);
  return 0;
}

int HwOffloadBackend::modify_qp(fw::OwnerId owner, uint32_t qpn, const fw::QpAttr& attr,
                                uint32_t attr_mask) {
  mroce_qp_attr in = to_abi(attr, attr_mask);
  Admin a;
  a.op = MROCE_ADMIN_MODIFY_QP;
  a.owner = owner;
  a.handle = qpn;
  a.in = &in;
  a.in_len = sizeof(in);
  return admin(a);
}

int HwOffloadBackend::query_qp(fw::OwnerId owner, uint32_t qpn, fw::QpAttr* attr,
                               fw::QpInitAttr* init) {
  mroce_query_qp_resp out{};
  Admin a;
  a.op = MROCE_ADMIN_QUERY_QP;
  a.owner = owner;
  a.handle = qpn;
  a.out = &out;
  a.out_len = sizeof(out);
  if (int err = admin(a)) return err;
  *attr = to_fw(out.attr);
  init->sq_sig_all = out.sq_sig_all != 0;
  init->cap = attr->cap;
  auto it = qps_.find(qpn);
  if (it != qps_.end()) {
    init->send_cqn = it->second.send_cqn;
    init->recv_cqn = it->second.recv_cqn;
  }
  return 0;
}

int HwOffloadBackend::destroy_qp(fw::OwnerId owner, uint32_t qpn) {
  Admin a;
  a.op = MROCE_ADMIN_DESTROY_QP;
  a.owner = owner;
  a.handle = qpn;
  int err = admin(a);
  auto it = qps_.find(qpn);
  if (!err && it != qps_.end()) {
    unmap(it->second.sq.mem);
    unmap(it->second.rq.mem);
    qps_.erase(it);
  }
  return err;
}

void HwOffloadBackend::destroy_owner(fw::OwnerId owner) {
  Admin a;
  a.op = MROCE_ADMIN_DESTROY_OWNER;
  a.owner = owner;
  // On failure the device is down (up_ false) and is reset before the
  // memory goes; the binding stays until then.
  bool done = admin(a) == 0;
  std::erase_if(qps_, [&](const auto& kv) {
    if (kv.second.owner != owner) return false;
    unmap(kv.second.sq.mem);
    unmap(kv.second.rq.mem);
    return true;
  });
  std::erase_if(cqs_, [&](const auto& kv) {
    if (kv.second.owner != owner) return false;
    unmap(kv.second.ring.mem);
    return true;
  });
  if (done && bound_.erase(owner)) options_.binder->unbind(owner);
}

// ---------------- data path ----------------

int HwOffloadBackend::post_send(fw::OwnerId owner, uint32_t qpn, const fw::SendWr& wr) {
  if (!up_) return fail(ENODEV, "post_send: the device is not up");
  if (wr.num_sge > MROCE_MAX_SGE || wr.inline_data.size() > MROCE_MAX_INLINE)
    return fail(EINVAL, "post_send: too many SGEs or too much inline data");
  return post_wqe(owner, qpn, to_abi(wr), "post_send");  // the bytes the provider writes
}

// The refused WR travels as a WQE the device only completes: in posting
// order, with the status the host chose (hw_abi.h MROCE_HW_WQE_OP_ERROR).
int HwOffloadBackend::post_send_error(fw::OwnerId owner, uint32_t qpn, uint64_t wr_id,
                                      fw::WcStatus status) {
  if (status == fw::WcStatus::kSuccess) return fail(EINVAL, "post_send_error: status is success");
  mroce_send_wqe w{};
  w.wr_id = wr_id;
  w.opcode = MROCE_HW_WQE_OP_ERROR;
  w.imm = static_cast<uint32_t>(status);
  return post_wqe(owner, qpn, w, "post_send_error");
}

int HwOffloadBackend::post_wqe(fw::OwnerId owner, uint32_t qpn, const mroce_send_wqe& w,
                               const char* what) {
  if (!up_) return fail(ENODEV, std::string(what) + ": the device is not up");
  auto it = qps_.find(qpn);
  if (it == qps_.end() || it->second.owner != owner)
    return fail(EINVAL, std::string(what) + ": no such QP");
  Ring& sq = it->second.sq;
  uint32_t prod = sq.view.hdr->producer;  // we are the only writer
  if (prod - mroce_ring_load_consumer(&sq.view) >= sq.view.entries) return ENOMEM;
  std::memcpy(mroce_ring_slot(&sq.view, prod), &w, sizeof(w));
  mroce_ring_publish_producer(&sq.view, prod + 1);
  bar0_.write32(qp_db(qpn) + MROCE_DB_SQ_PI, prod + 1);  // MMIO: no nic_sleeping check needed
  return 0;
}

int HwOffloadBackend::post_recv(fw::OwnerId owner, uint32_t qpn, const fw::RecvWr& wr) {
  if (!up_) return fail(ENODEV, "post_recv: the device is not up");
  auto it = qps_.find(qpn);
  if (it == qps_.end() || it->second.owner != owner) return fail(EINVAL, "post_recv: no such QP");
  if (wr.num_sge > MROCE_MAX_SGE) return fail(EINVAL, "post_recv: too many SGEs");
  Ring& rq = it->second.rq;
  uint32_t prod = rq.view.hdr->producer;
  if (prod - mroce_ring_load_consumer(&rq.view) >= rq.view.entries) return ENOMEM;
  mroce_recv_wqe w = to_abi(wr);
  std::memcpy(mroce_ring_slot(&rq.view, prod), &w, sizeof(w));
  mroce_ring_publish_producer(&rq.view, prod + 1);
  bar0_.write32(qp_db(qpn) + MROCE_DB_RQ_PI, prod + 1);
  return 0;
}

int HwOffloadBackend::request_notify(uint32_t cqn, bool solicited_only) {
  if (!up_) return fail(ENODEV, "request_notify: the device is not up");
  if (!cqs_.count(cqn)) return fail(EINVAL, "request_notify: no such CQ");
  bar0_.write32(cq_db(cqn) + MROCE_DB_CQ_ARM,
                solicited_only ? MROCE_CQ_ARM_SOLICITED : MROCE_CQ_ARM_ANY);
  return 0;
}

int HwOffloadBackend::harvest_cq(uint32_t cqn, Cq& cq) {
  Ring& r = cq.ring;
  uint32_t cons = r.view.hdr->consumer;
  uint32_t prod = mroce_ring_load_producer(&r.view);
  int n = 0;
  for (; cons != prod; cons++, n++) {
    mroce_cqe e;
    std::memcpy(&e, mroce_ring_slot(&r.view, cons), sizeof(e));
    if (!events_.complete(cqn, to_fw(e))) break;  // the host's CQ is full: keep it for later
  }
  if (n) {
    mroce_ring_publish_consumer(&r.view, cons);
    bar0_.write32(cq_db(cqn) + MROCE_DB_CQ_CI, cons);
  }
  return n;
}

// The interrupt is consumed first, then the event ring drained and the
// interrupt re-armed (EQ_HEAD), so an event after the drain interrupts
// again. Every CQ is harvested (completion events only wake us), and the
// CQs that notified are armed again after their harvest.
int HwOffloadBackend::service(fw::Time) {
  if (!up_) return 0;
  uint64_t irqs;
  if (irq_fd_ >= 0) (void)!::read(irq_fd_, &irqs, sizeof(irqs));
  int work = 0;
  std::vector<uint32_t> notified;
  auto* eqes = reinterpret_cast<mroce_hw_eqe*>(eq_.data());
  for (;;) {
    mroce_hw_eqe& e = eqes[eq_head_ & (options_.event_depth - 1)];
    if (load_phase(e.phase) != expected_phase(eq_head_, options_.event_depth)) break;
    if (e.type == MROCE_EQE_COMPLETION) {
      notified.push_back(e.element);
    } else {
      events_.async_event(static_cast<fw::EventType>(e.type), e.element);
    }
    eq_head_++;
    work++;
  }
  if (work) bar0_.write32(MROCE_REG_EQ_HEAD, (eq_head_ & 0x7fffffffu) | 0x80000000u);
  for (auto& [cqn, cq] : cqs_) work += harvest_cq(cqn, cq);
  if (work) events_.publish();  // the device wrote each CQE after its data
  for (uint32_t cqn : notified)
    if (cqs_.count(cqn)) arm_for_interrupt(cqn);
  return work;
}

int HwOffloadBackend::query_counters(uint32_t qpn, std::vector<NamedCounter>* out) {
  constexpr uint32_t kMax = kMaxCounters;
  std::vector<uint8_t> buf(sizeof(mroce_query_counters_resp) + kMax * sizeof(mroce_counter));
  Admin a;
  a.op = MROCE_ADMIN_QUERY_COUNTERS;
  a.handle = qpn;
  a.out = buf.data();
  a.out_len = buf.size();
  if (int err = admin(a)) return err;
  mroce_query_counters_resp resp;
  std::memcpy(&resp, buf.data(), sizeof(resp));
  out->clear();
  for (uint32_t i = 0; i < std::min(resp.n, kMax); i++) {
    mroce_counter c;
    std::memcpy(&c, buf.data() + sizeof(resp) + i * sizeof(c), sizeof(c));
    c.name[sizeof(c.name) - 1] = 0;
    out->push_back({c.name, c.value});
  }
  return 0;
}

int HwOffloadBackend::qp_transport(uint32_t qpn, fw::Time, fw::QpTransportStats* out) {
  if (!qps_.count(qpn)) return fail(ENOENT, "qp_transport: no such QP");
  if (fw_minor_ < 1)
    return fail(EOPNOTSUPP, "qp_transport: firmware interface 1.0 reports no transport statistics");
  mroce_qp_transport_resp r{};
  Admin a;
  a.op = MROCE_ADMIN_QUERY_QP_TRANSPORT;
  a.handle = qpn;
  a.out = &r;
  a.out_len = sizeof(r);
  if (int err = admin(a)) return err;
  out->srtt = r.srtt_ns;
  out->min_rtt = r.min_rtt_ns;
  out->rttvar = r.rttvar_ns;
  out->rto = r.rto_ns;
  out->cwnd_bytes = r.cwnd_bytes;
  out->pacing_rate_bps = r.pacing_rate_bps;
  out->bytes_in_flight = r.bytes_in_flight;
  out->pkts_in_flight = r.pkts_in_flight;
  out->lost = r.lost;
  out->state = static_cast<fw::QpState>(r.qp_state);
  out->error_status = static_cast<fw::WcStatus>(r.error_status);
  r.cc[sizeof(r.cc) - 1] = 0;
  out->cc = r.cc;
  out->path_weights.clear();
  for (uint32_t i = 0; i < std::min<uint32_t>(r.num_paths, MROCE_MAX_PATHS); i++)
    out->path_weights.push_back(r.path_weight_ppm[i] / 1e6);
  return 0;
}

std::string HwOffloadBackend::describe_qp(uint32_t qpn) {
  auto it = qps_.find(qpn);
  if (it == qps_.end()) return "";
  const Qp& q = it->second;
  return "qp " + std::to_string(qpn) + " (hw) owner " + std::to_string(q.owner) + " sq " +
         std::to_string(q.sq.view.hdr->producer) + "/" + std::to_string(mroce_ring_load_consumer(&q.sq.view)) +
         " rq " + std::to_string(q.rq.view.hdr->producer) + "/" +
         std::to_string(mroce_ring_load_consumer(&q.rq.view));
}

std::vector<uint32_t> HwOffloadBackend::qp_numbers() {
  std::vector<uint32_t> v;
  for (const auto& [qpn, qp] : qps_) v.push_back(qpn);
  return v;
}

}  // namespace metaroce::hw
