// AF_XDP backend: our own XDP program (firmware-model/daemon/bpf/) steers
// UDP to our port into one XSK socket bound to (ifname, queue_id); the UMEM
// is split into an rx half (handed to the kernel through the fill ring) and
// a tx half of fixed slots the engine builds frames into.
// docs/packet-io.md "AF_XDP".
#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <linux/if_link.h>
#include <linux/if_xdp.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>
#include <xdp/libxdp.h>
#include <xdp/xsk.h>

#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <vector>

#include "firmware-model/daemon/bpf/metaroce_xdp_bytes.h"
#include "firmware-model/daemon/io/io_util.h"
#include "firmware-model/daemon/io/packet_io.h"

#ifndef XDP_USE_SG
#define XDP_USE_SG (1 << 4)  // Linux 6.6 uapi; Debian 12 headers predate it
#endif
#ifndef XDP_PKT_CONTD
#define XDP_PKT_CONTD (1 << 0)
#endif
#ifndef BPF_F_XDP_HAS_FRAGS
#define BPF_F_XDP_HAS_FRAGS (1U << 5)
#endif
#ifndef XDP_MAX_TX_SKB_BUDGET
#define XDP_MAX_TX_SKB_BUDGET 9  // Linux 6.15 uapi
#endif

namespace metaroce::daemon::io {
namespace {

using detail::errno_message;
using detail::set_why;

constexpr uint32_t kXdpHeadroom = 256;  // XDP_PACKET_HEADROOM in every chunk
constexpr uint64_t kDefaultUmem = 16u << 20;
constexpr uint64_t kMinUmem = 1u << 20;

// libbpf/libxdp print through global hooks; route them to the sink of the
// open in progress (open_af_xdp is called from one thread at a time).
const LogSink* g_open_log = nullptr;
int forward_print(LogLevel level, const char* fmt, va_list ap) {
  if (!g_open_log || !*g_open_log) return 0;
  char buf[16384];
  vsnprintf(buf, sizeof(buf), fmt, ap);
  std::string_view s(buf);
  while (!s.empty() && s.back() == '\n') s.remove_suffix(1);
  (*g_open_log)(level, std::string("libbpf: ").append(s));
  return 0;
}
int libbpf_print(enum libbpf_print_level l, const char* fmt, va_list ap) {
  return l == LIBBPF_DEBUG ? 0 : forward_print(l == LIBBPF_WARN ? LogLevel::kWarn : LogLevel::kInfo, fmt, ap);
}
int libxdp_print(enum libxdp_print_level l, const char* fmt, va_list ap) {
  return l == LIBXDP_DEBUG ? 0 : forward_print(l == LIBXDP_WARN ? LogLevel::kWarn : LogLevel::kInfo, fmt, ap);
}
struct PrintScope {
  explicit PrintScope(const LogSink* s) {
    g_open_log = s;
    old_bpf = libbpf_set_print(libbpf_print);
    old_xdp = libxdp_set_print(libxdp_print);
  }
  ~PrintScope() {
    libbpf_set_print(old_bpf);
    libxdp_set_print(old_xdp);
    g_open_log = nullptr;
  }
  libbpf_print_fn_t old_bpf;
  libxdp_print_fn_t old_xdp;
};

bool has_cap_ipc_lock() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("CapEff:", 0) == 0) {
      uint64_t caps = std::strtoull(line.c_str() + 7, nullptr, 16);
      return caps & (1ull << 14);  // CAP_IPC_LOCK
    }
  }
  return false;
}

uint32_t pow2_floor(uint32_t v) {
  uint32_t p = 1;
  while (p * 2 <= v) p *= 2;
  return p;
}
uint32_t pow2_ceil(uint32_t v) {
  uint32_t p = 1;
  while (p < v) p *= 2;
  return p;
}

class AfXdp final : public PacketIo {
 public:
  ~AfXdp() override { close_all(); }

  bool open(const IoOptions& o, std::string* why) {
    opts_ = o;
    PrintScope print(&o.log);
    detail::IfInfo info;
    if (!detail::get_if_info(o.ifname, &info, why)) return false;
    ifindex_ = info.ifindex;
    chunk_ = o.chunk_size;
    if (chunk_ < 2048 || chunk_ > 65536 || (chunk_ & (chunk_ - 1))) {
      set_why(why, "chunk_size " + std::to_string(chunk_) + " must be a power of two in 2048..65536");
      return false;
    }
    max_frame_ = detail::frame_limit(o, info);
    multi_buffer_ = max_frame_ > chunk_ - kXdpHeadroom;
    slot_chunks_ = (max_frame_ + chunk_ - 1) / chunk_;
    if (!alloc_umem(o, why)) return false;
    if (!load_program(o, why)) return false;
    if (!attach_and_bind(o, why)) return false;
    finish_setup(o);
    return true;
  }

  int rx_burst(std::span<RxFrame> out) override {
    rx_release();
    if (out.empty()) return 0;
    uint32_t idx;
    uint32_t want = static_cast<uint32_t>(out.size()) * (multi_buffer_ ? slot_chunks_ : 1);
    uint32_t got = xsk_ring_cons__peek(&rx_, want, &idx);
    if (!got) return 0;
    int n = 0;
    uint32_t used = 0;  // descriptors making up complete frames
    gather_used_ = 0;
    // Sized before any frame points into it: no reallocation mid-burst.
    size_t gather_need = out.size() * static_cast<size_t>(slot_chunks_) * chunk_;
    if (multi_buffer_ && gather_.size() < gather_need) gather_.resize(gather_need);
    while (used < got && n < static_cast<int>(out.size())) {
      uint32_t frags = frame_descs(idx + used, got - used);
      if (!frags) break;  // the rest of this frame is not in the ring yet
      out[n++] = frags == 1 ? single(idx + used) : gather(idx + used, frags);
      used += frags;
    }
    rx_.cached_cons -= got - used;  // un-peek what we leave for next time
    rx_idx_ = idx;
    rx_held_ = used;
    return n;
  }

  void rx_release() override {
    if (!rx_held_) return;
    uint32_t fidx;
    // The fill ring holds every rx chunk, so there is always room.
    uint32_t r = xsk_ring_prod__reserve(&fill_, rx_held_, &fidx);
    for (uint32_t i = 0; i < r; ++i) {
      uint64_t addr = xsk_ring_cons__rx_desc(&rx_, rx_idx_ + i)->addr;
      *xsk_ring_prod__fill_addr(&fill_, fidx + i) = addr & ~static_cast<uint64_t>(chunk_ - 1);
    }
    xsk_ring_prod__submit(&fill_, r);
    xsk_ring_cons__release(&rx_, rx_held_);
    rx_held_ = 0;
    if (xsk_ring_prod__needs_wakeup(&fill_)) {
      stats_.rx_wakeups++;
      recvfrom(xsk_socket__fd(xsk_), nullptr, 0, MSG_DONTWAIT, nullptr, nullptr);
    }
  }

  std::span<uint8_t> tx_alloc(uint32_t len) override {
    if (len > max_frame_) return {};
    if (free_slots_.empty()) reclaim();
    if (free_slots_.empty()) {
      stats_.tx_ring_full++;
      return {};
    }
    cur_slot_ = free_slots_.back();
    return {umem_area_ + slot_addr(cur_slot_), max_frame_};
  }

  void tx_commit(uint32_t len) override {
    if (cur_slot_ < 0) return;
    uint32_t slot = static_cast<uint32_t>(cur_slot_);
    cur_slot_ = -1;
    if (len == 0 || len > max_frame_) return;
    uint32_t ndesc = (len + chunk_ - 1) / chunk_;
    uint32_t idx;
    if (xsk_ring_prod__reserve(&tx_, ndesc, &idx) != ndesc) {  // cannot happen: ring >= tx chunks
      stats_.tx_ring_full++;
      return;
    }
    // reclaim() may have pushed completed slots after the held one.
    auto held = std::find(free_slots_.rbegin(), free_slots_.rend(), slot);
    if (held == free_slots_.rend()) {  // not free: never handed out twice
      stats_.tx_errors++;
      return;
    }
    std::swap(*held, free_slots_.back());
    free_slots_.pop_back();
    slot_descs_[slot] = ndesc;
    uint64_t addr = slot_addr(slot);
    for (uint32_t i = 0; i < ndesc; ++i) {
      xdp_desc* d = xsk_ring_prod__tx_desc(&tx_, idx + i);
      d->addr = addr + static_cast<uint64_t>(i) * chunk_;
      d->len = std::min(len - i * chunk_, chunk_);
      d->options = i + 1 < ndesc ? XDP_PKT_CONTD : 0;
    }
    tx_reserved_ += ndesc;
    tx_queued_frames_++;
    stats_.tx_bytes += len;
  }

  int tx_flush() override {
    int frames = static_cast<int>(tx_queued_frames_);
    if (tx_reserved_) {
      // Release: the descriptors and frame bytes written above become visible
      // to the kernel with the producer store inside submit.
      xsk_ring_prod__submit(&tx_, tx_reserved_);
      tx_reserved_ = 0;
      tx_queued_frames_ = 0;
      stats_.tx_frames += frames;
    }
    if (tx_outstanding() && (!opts_.need_wakeup || xsk_ring_prod__needs_wakeup(&tx_))) kick();
    reclaim();
    return frames;
  }

  uint32_t tx_pending() const override { return tx_queued_frames_; }
  uint32_t tx_room() override {
    // Asked before every packet: peek the completion ring (the kernel's
    // index, a cache miss) only when running low.
    if (free_slots_.size() < kReclaimBelow) reclaim();
    return static_cast<uint32_t>(free_slots_.size());
  }
  uint32_t tx_capacity() const override { return static_cast<uint32_t>(slot_descs_.size()); }
  int wait_fd() const override { return xsk_socket__fd(xsk_); }
  uint32_t max_frame() const override { return max_frame_; }
  const char* name() const override { return name_; }

  IoStats stats() const override {
    IoStats s = stats_;
    xdp_statistics x{};
    socklen_t l = sizeof(x);
    if (getsockopt(xsk_socket__fd(xsk_), SOL_XDP, XDP_STATISTICS, &x, &l) == 0) {
      s.rx_kernel_drops += x.rx_dropped + x.rx_ring_full;
      s.rx_invalid += x.rx_invalid_descs;
      s.tx_errors += x.tx_invalid_descs;
    }
    return s;
  }

 private:
  uint64_t slot_addr(uint32_t slot) const {
    return tx_base_ + static_cast<uint64_t>(slot) * slot_chunks_ * chunk_;
  }

  // Descriptors in the frame starting at ring index idx, or 0 if its last
  // descriptor (options without XDP_PKT_CONTD) is not among the `avail`.
  uint32_t frame_descs(uint32_t idx, uint32_t avail) const {
    for (uint32_t i = 0; i < avail; ++i)
      if (!(xsk_ring_cons__rx_desc(&rx_, idx + i)->options & XDP_PKT_CONTD)) return i + 1;
    return 0;
  }

  RxFrame single(uint32_t idx) {
    const xdp_desc* d = xsk_ring_cons__rx_desc(&rx_, idx);
    stats_.rx_frames++;
    stats_.rx_bytes += d->len;
    return {static_cast<const uint8_t*>(xsk_umem__get_data(umem_area_, d->addr)), d->len};
  }

  // A multi-buffer frame: copied into scratch so the caller sees one span.
  RxFrame gather(uint32_t idx, uint32_t frags) {
    uint8_t* dst = gather_.data() + gather_used_ * static_cast<size_t>(slot_chunks_) * chunk_;
    uint32_t len = 0;
    for (uint32_t i = 0; i < frags; ++i) {
      const xdp_desc* d = xsk_ring_cons__rx_desc(&rx_, idx + i);
      if (len + d->len > slot_chunks_ * chunk_) {
        stats_.rx_invalid++;
        break;
      }
      std::memcpy(dst + len, xsk_umem__get_data(umem_area_, d->addr), d->len);
      len += d->len;
    }
    gather_used_++;
    stats_.rx_gathered++;
    stats_.rx_frames++;
    stats_.rx_bytes += len;
    return {dst, len};
  }

  uint32_t tx_outstanding() const {
    return __atomic_load_n(tx_.producer, __ATOMIC_RELAXED) - __atomic_load_n(tx_.consumer, __ATOMIC_ACQUIRE);
  }

  void kick() {
    stats_.tx_kicks++;
    if (sendto(xsk_socket__fd(xsk_), nullptr, 0, MSG_DONTWAIT, nullptr, 0) < 0) {
      // EAGAIN/EBUSY/ENOBUFS: the kernel is busy; the next flush kicks again.
      if (errno != EAGAIN && errno != EBUSY && errno != ENOBUFS && errno != ENETDOWN) stats_.tx_errors++;
    }
  }

  // Completion ring: every descriptor of a frame comes back; the slot is
  // free once all of them have.
  void reclaim() {
    uint32_t idx;
    uint32_t n = xsk_ring_cons__peek(&comp_, static_cast<uint32_t>(slot_descs_.size()) * slot_chunks_, &idx);
    for (uint32_t i = 0; i < n; ++i) {
      uint64_t addr = *xsk_ring_cons__comp_addr(&comp_, idx + i);
      uint32_t slot = static_cast<uint32_t>((addr - tx_base_) / (static_cast<uint64_t>(slot_chunks_) * chunk_));
      if (slot < slot_descs_.size() && slot_descs_[slot] && --slot_descs_[slot] == 0) free_slots_.push_back(slot);
    }
    if (n) xsk_ring_cons__release(&comp_, n);
  }

  bool alloc_umem(const IoOptions& o, std::string* why) {
    uint64_t want = o.umem_bytes ? o.umem_bytes : kDefaultUmem;
    rlimit rl{};
    getrlimit(RLIMIT_MEMLOCK, &rl);
    if (!o.umem_bytes && rl.rlim_cur != RLIM_INFINITY && !has_cap_ipc_lock()) {
      // The limit is per user and shared by every daemon of that user: take
      // at most half of it.
      uint64_t cap = rl.rlim_cur / 2;
      if (cap < want) {
        want = std::max<uint64_t>(cap, kMinUmem);
        detail::log(o, LogLevel::kInfo,
                    "UMEM limited to " + std::to_string(want >> 10) + " KiB by RLIMIT_MEMLOCK (" +
                        std::to_string(rl.rlim_cur >> 10) + " KiB, no CAP_IPC_LOCK)");
      }
    }
    uint64_t unit = 2ull * slot_chunks_ * chunk_;
    umem_len_ = std::max<uint64_t>(want / unit * unit, unit * 16);
    void* p = mmap(nullptr, umem_len_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (p == MAP_FAILED) {
      set_why(why, errno_message("mmap(UMEM)", errno));
      return false;
    }
    umem_area_ = static_cast<uint8_t*>(p);
    uint32_t chunks = static_cast<uint32_t>(umem_len_ / chunk_);
    rx_chunks_ = chunks / 2;
    tx_base_ = static_cast<uint64_t>(rx_chunks_) * chunk_;
    uint32_t slots = (chunks - rx_chunks_) / slot_chunks_;
    ring_ = pow2_floor(std::min(o.ring_size, rx_chunks_));
    rx_chunks_ = std::min(rx_chunks_, ring_);  // fill ring holds them all
    tx_ring_ = pow2_ceil(std::max(o.ring_size, slots * slot_chunks_));  // never full
    slot_descs_.assign(slots, 0);
    for (uint32_t s = slots; s > 0; --s) free_slots_.push_back(s - 1);
    return true;
  }

  bool load_program(const IoOptions& o, std::string* why) {
    LIBBPF_OPTS(bpf_object_open_opts, oo, .object_name = "metaroce_xdp");
    obj_ = bpf_object__open_mem(kMetaroceXdpObject, kMetaroceXdpObject_len, &oo);
    if (!obj_) {
      set_why(why, errno_message("bpf_object__open_mem(metaroce_xdp)", errno));
      return false;
    }
    bpf_map* m;
    bpf_object__for_each_map(m, obj_) {
      std::string_view name = bpf_map__name(m);
      if (bpf_map__is_internal(m) && name.ends_with(".rodata")) {
        size_t size = 0;
        const void* init = bpf_map__initial_value(m, &size);
        std::vector<uint8_t> v(static_cast<const uint8_t*>(init), static_cast<const uint8_t*>(init) + size);
        uint16_t port_be = htons(o.udp_port);
        std::memcpy(v.data(), &port_be, 2);  // struct metaroce_xdp_config at offset 0
        bpf_map__set_initial_value(m, v.data(), v.size());
      }
    }
    bpf_program* prog = bpf_object__find_program_by_name(obj_, "metaroce_xdp");
    if (multi_buffer_) bpf_program__set_flags(prog, bpf_program__flags(prog) | BPF_F_XDP_HAS_FRAGS);
    if (int err = bpf_object__load(obj_)) {
      set_why(why, errno_message("loading the XDP program", -err) + " (needs CAP_BPF and CAP_NET_ADMIN)");
      return false;
    }
    prog_fd_ = bpf_program__fd(prog);
    map_fd_ = bpf_object__find_map_fd_by_name(obj_, "xsks_map");
    return prog_fd_ >= 0 && map_fd_ >= 0;
  }

  struct Attempt {
    uint32_t link_flags;
    uint16_t bind_flags;
    const char* name;
  };

  std::vector<Attempt> attempts(const IoOptions& o) const {
    std::vector<Attempt> a;
    bool native = o.xdp_mode != XdpMode::kGeneric, generic = o.xdp_mode != XdpMode::kNative;
    bool zc = o.xdp_copy != XdpCopy::kCopy, copy = o.xdp_copy != XdpCopy::kZeroCopy;
    if (native && zc) a.push_back({XDP_FLAGS_DRV_MODE, XDP_ZEROCOPY, "native,zero-copy"});
    if (native && copy) a.push_back({XDP_FLAGS_DRV_MODE, XDP_COPY, "native,copy"});
    if (generic && copy) a.push_back({XDP_FLAGS_SKB_MODE, XDP_COPY, "generic,copy"});
    return a;
  }

  bool attach_and_bind(const IoOptions& o, std::string* why) {
    std::string tried;
    for (const Attempt& a : attempts(o)) {
      std::string step;
      if (attach(a, &step) && bind_socket(o, a, &step)) {
        snprintf(name_, sizeof(name_), "af_xdp(%s%s)", a.name, multi_buffer_ ? ",multi-buffer" : "");
        return true;
      }
      detail::log(o, LogLevel::kDebug, std::string("AF_XDP ") + a.name + " failed: " + step);
      tried += (tried.empty() ? "" : "; ") + std::string(a.name) + ": " + step;
      unbind_and_detach();
    }
    set_why(why, tried.empty() ? "no XDP mode allowed by the options (zero-copy needs native mode)" : tried);
    return false;
  }

  bool attach(const Attempt& a, std::string* why) {
    if (link_fd_ >= 0 && link_flags_ == a.link_flags) return true;
    unbind_and_detach();
    LIBBPF_OPTS(bpf_link_create_opts, lo, .flags = a.link_flags);
    link_fd_ = bpf_link_create(prog_fd_, ifindex_, BPF_XDP, &lo);
    if (link_fd_ < 0) {
      int err = -link_fd_;
      link_fd_ = -1;
      *why = errno_message("bpf_link_create(BPF_XDP)", err);
      if (err == EBUSY || err == EEXIST) *why += ": another XDP program is attached to the interface";
      return false;
    }
    link_flags_ = a.link_flags;
    return true;
  }

  bool bind_socket(const IoOptions& o, const Attempt& a, std::string* why) {
    xsk_umem_config uc{};
    uc.fill_size = ring_;
    uc.comp_size = tx_ring_;
    uc.frame_size = chunk_;
    uc.frame_headroom = 0;
    xsk_socket_config sc{};
    sc.rx_size = ring_;
    sc.tx_size = tx_ring_;
    sc.libxdp_flags = XSK_LIBXDP_FLAGS__INHIBIT_PROG_LOAD;
    sc.bind_flags = a.bind_flags | (o.need_wakeup ? XDP_USE_NEED_WAKEUP : 0) | (multi_buffer_ ? XDP_USE_SG : 0);
    int err = 0;
    const char* step = "xsk_umem__create";
    // A rebind right after another socket on this queue closed can fail
    // with EBUSY for a while: retry for up to a second.
    for (int attempt = 0; attempt < 50; ++attempt) {
      err = xsk_umem__create(&umem_, umem_area_, umem_len_, &fill_, &comp_, &uc);
      if (err) break;
      step = "xsk_socket__create (bind)";
      err = xsk_socket__create(&xsk_, o.ifname.c_str(), o.queue_id, umem_, &rx_, &tx_, &sc);
      if (!err) break;
      xsk_socket__delete(xsk_);
      xsk_ = nullptr;
      xsk_umem__delete(umem_);
      umem_ = nullptr;
      if (err != -EBUSY) break;
      usleep(20000);
    }
    if (err) {
      *why = errno_message(step, -err);
      if (err == -ENOBUFS || err == -ENOMEM || err == -EPERM)
        *why += " (UMEM counts against RLIMIT_MEMLOCK: raise it, grant CAP_IPC_LOCK or lower umem_bytes)";
      if (err == -EOPNOTSUPP && multi_buffer_) *why += " (multi-buffer XDP_USE_SG needs Linux 6.6+)";
      return false;
    }
    if (int e = xsk_socket__update_xskmap(xsk_, map_fd_)) {
      *why = errno_message("xsk_socket__update_xskmap", -e);
      return false;
    }
    return true;
  }

  void finish_setup(const IoOptions& o) {
    int fd = xsk_socket__fd(xsk_);
    int budget = static_cast<int>(o.tx_budget);
    if (budget && setsockopt(fd, SOL_XDP, XDP_MAX_TX_SKB_BUDGET, &budget, sizeof(budget)) < 0)
      detail::log(o, LogLevel::kDebug, errno_message("XDP_MAX_TX_SKB_BUDGET (kernel default 32 stays)", errno));
    uint32_t idx;
    uint32_t r = xsk_ring_prod__reserve(&fill_, rx_chunks_, &idx);
    for (uint32_t i = 0; i < r; ++i) *xsk_ring_prod__fill_addr(&fill_, idx + i) = static_cast<uint64_t>(i) * chunk_;
    xsk_ring_prod__submit(&fill_, r);
    detail::log(o, LogLevel::kInfo,
                std::string(name_) + " on " + o.ifname + " queue " + std::to_string(o.queue_id) + ": UMEM " +
                    std::to_string(umem_len_ >> 10) + " KiB, " + std::to_string(rx_chunks_) + " rx chunks, " +
                    std::to_string(slot_descs_.size()) + " tx slots, max frame " + std::to_string(max_frame_));
  }

  void unbind_and_detach() {
    if (xsk_) xsk_socket__delete(xsk_);
    xsk_ = nullptr;
    if (umem_) xsk_umem__delete(umem_);
    umem_ = nullptr;
    if (link_fd_ >= 0) close(link_fd_);  // not pinned: detaches the program
    link_fd_ = -1;
  }

  void close_all() {
    unbind_and_detach();
    if (obj_) bpf_object__close(obj_);
    obj_ = nullptr;
    if (umem_area_) munmap(umem_area_, umem_len_);
    umem_area_ = nullptr;
  }

  IoOptions opts_;
  int ifindex_ = 0;
  uint32_t chunk_ = 4096, max_frame_ = 0, slot_chunks_ = 1;
  bool multi_buffer_ = false;
  uint8_t* umem_area_ = nullptr;
  uint64_t umem_len_ = 0;
  uint32_t rx_chunks_ = 0, ring_ = 0, tx_ring_ = 0;
  uint64_t tx_base_ = 0;
  bpf_object* obj_ = nullptr;
  int prog_fd_ = -1, map_fd_ = -1, link_fd_ = -1;
  uint32_t link_flags_ = 0;
  xsk_umem* umem_ = nullptr;
  xsk_socket* xsk_ = nullptr;
  xsk_ring_prod fill_{}, tx_{};
  xsk_ring_cons comp_{}, rx_{};
  uint32_t rx_idx_ = 0, rx_held_ = 0;
  std::vector<uint8_t> gather_;
  size_t gather_used_ = 0;
  std::vector<uint32_t> free_slots_;
  static constexpr size_t kReclaimBelow = 64;
  std::vector<uint32_t> slot_descs_;  // per tx slot: descriptors in flight
  int64_t cur_slot_ = -1;
  uint32_t tx_reserved_ = 0, tx_queued_frames_ = 0;
  IoStats stats_;
  char name_[64] = "af_xdp";
};

}  // namespace

std::unique_ptr<PacketIo> open_af_xdp(const IoOptions& options, std::string* why) {
  auto io = std::make_unique<AfXdp>();
  if (!io->open(options, why)) return nullptr;
  return io;
}

}  // namespace metaroce::daemon::io
