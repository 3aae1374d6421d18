// A reliable-connected QP's complete state, and the engine core the three
// roles share (docs/engine.md). Internal to the engine: the public surface
// is engine.h.
//
//   requester.cc  SQ work requests -> request packets; retransmissions
//   responder.cc  inbound requests -> placement, ACK/NACK, READ/atomic responses
//   completer.cc  inbound ACK/NACK/responses -> scoreboard, completions, errors
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "firmware-model/engine/congestion.h"
#include "firmware-model/engine/engine.h"
#include "firmware-model/engine/mw.h"
#include "firmware-model/engine/objects.h"
#include "firmware-model/engine/reliability.h"
#include "firmware-model/engine/timer_index.h"
#include "firmware-model/engine/srq.h"
#include "firmware-model/engine/uc.h"
#include "firmware-model/engine/types.h"
#include "proto/packet.h"

namespace metaroce::fw {

inline constexpr uint32_t kReadChunk = 256;   // READ data tracked in 256-byte chunks (smallest MTU)
inline constexpr uint32_t kRdSlots = 32;      // > max_qp_rd_atom: READ/atomic msn -> WQE
inline constexpr uint32_t kAtomicCache = 64;  // responder: executed atomics, by PSN
inline constexpr uint32_t kAckEvery = 8;      // ACK at least every this many packets
// READ responses leave at the port's line rate, with at most this much
// time's worth sent back to back after an idle spell (responder::run).
inline constexpr Time kReadPaceBurst = 20'000;  // ns
// Memory bounds (docs/engine.md §Memory bounds). A READ starts only while
// the READs outstanding on the QP total at most kMaxReadBytes (or none is
// outstanding), so their chunk bitmaps hold at most kMaxReadBytes / 2048
// bytes; a finished WQE keeps at most kKeepChunkWords of bitmap capacity.
inline constexpr uint64_t kMaxReadBytes = uint64_t{1} << 31;
inline constexpr uint32_t kKeepChunkWords = 16;  // READs up to 256 KiB reuse it

// A fixed array of N T's that allocates on its first non-const access:
// until then it reads as N default T's, and assigning {} frees it. Per-QP
// state that only READs and atomics use (the responder's READ jobs, held
// requests and atomic results: 19 KB) is kept in these, so a QP that never
// serves one costs a pointer each (docs/engine.md §Memory bounds; a
// 1,024-host all-to-all holds two million QPs).
template <typename T, size_t N>
class LazyArray {
 public:
  static constexpr size_t size() { return N; }
  static constexpr uint64_t kBytes = sizeof(std::array<T, N>);  // once allocated
  bool allocated() const { return a_ != nullptr; }
  uint64_t heap_bytes() const { return a_ ? kBytes : 0; }
  const T& operator[](size_t i) const { return view()[i]; }
  T& operator[](size_t i) { return data()[i]; }
  const T* begin() const { return view().data(); }
  const T* end() const { return begin() + N; }
  T* begin() { return data().data(); }
  T* end() { return begin() + N; }

 private:
  std::array<T, N>& data() {
    if (!a_) a_ = std::make_unique<std::array<T, N>>();
    return *a_;
  }
  const std::array<T, N>& view() const {
    static const std::array<T, N> defaults{};
    return a_ ? *a_ : defaults;
  }
  std::unique_ptr<std::array<T, N>> a_;
};

struct SendWqe {
  SendWr wr;
  uint32_t length = 0;   // message bytes
  uint32_t msn = 0;      // MBTH.msn (docs/engine.md §Message numbering)
  uint32_t sent = 0;     // bytes segmented by first transmissions
  uint32_t first_psn = 0;  // PSN of its first packet
  uint32_t max_psn = 0;    // highest PSN carrying this WQE (READ re-issues raise it)
  bool started = false;
  bool all_sent = false;       // every first transmission is out
  bool response_done = false;  // READ: all data placed; atomic: result written
  // Holds one of max_rd_atomic's slots (Qp::rd_outstanding; a READ also its
  // bytes in Qp::rd_bytes) until Qp::release_rd.
  bool rd_counted = false;
  WcStatus status = WcStatus::kSuccess;
  // READ: which 256-byte chunks of the message arrived.
  std::vector<uint64_t> chunks;
  uint32_t chunks_total = 0, chunks_got = 0;
  // READ: one past the highest chunk any response filled. Responses of a
  // range leave in offset order, so a hole below it is reordered or lost;
  // chunks above it may simply not have been sent yet (requester::on_rto).
  uint32_t chunks_hw = 0;
  Time hw_at = 0;  // READ: when a response of the first issue last raised chunks_hw
  Time read_check = kNever;  // READ: holes remain after a LAST response; re-issue then
  bool is_rd() const {
    return wr.opcode == WrOpcode::kRdmaRead || wr.opcode == WrOpcode::kAtomicCmpSwap ||
           wr.opcode == WrOpcode::kAtomicFetchAdd;
  }
  // The WQE is done: drop READ tracking beyond what a small READ reuses.
  void release_read_state() {
    chunks_total = chunks_got = chunks_hw = 0;
    hw_at = 0;
    if (chunks.capacity() > kKeepChunkWords) std::vector<uint64_t>().swap(chunks);
    else chunks.clear();
  }
};

struct RecvWqe {
  RecvWr wr;
  uint64_t capacity = 0;  // sum of SGE lengths
  bool bound = false;     // a message claimed it
  bool done = false;
  WcStatus status = WcStatus::kSuccess;
  WcOpcode opcode = WcOpcode::kRecv;
  uint32_t total = 0;   // message length
  uint32_t placed = 0;  // unique bytes placed
  bool with_imm = false;
  bool with_inv = false;  // SEND_INV: invalidate inv_rkey as it completes
  uint32_t inv_rkey = 0;
  uint32_t imm = 0;
  // PSN of the message's last packet: its completion waits until every PSN
  // up to it has arrived (an earlier WRITE may still have holes).
  uint32_t last_psn = 0;
  bool have_last = false;
};

// A READ being answered by the responder, drained by pump().
struct ReadJob {
  uint32_t psn = 0, msn = 0;
  uint64_t va = 0;           // remote address of byte `base_offset` of the message
  uint32_t length = 0;       // bytes of this request's range
  uint32_t base_offset = 0;  // MBTH.offset of the request
  uint32_t done = 0;         // bytes already answered
  uint8_t path = 0;
  bool first_issue = false;  // the READ's first request (not a re-issue or a duplicate)
  uint32_t rkey = 0;         // checked again before every read: the MR may be gone
};

// The responder's READ jobs in read MSN order: front is being answered. A
// fixed ring (allocated by the first push and kept, O(1) pop, push O(1) for
// a first issue); at most kReadJobs jobs, and the responder admits at most
// max_dest_rd_atomic first issues (docs/engine.md §Responder). Scans and
// the insertion of a repair are bounded by kReadJobs.
inline constexpr uint32_t kReadJobs = 2 * kRdSlots;

class ReadQueue {
 public:
  bool empty() const { return head_ == tail_; }
  bool full() const { return tail_ - head_ == kReadJobs; }
  uint32_t size() const { return tail_ - head_; }
  uint32_t first_issues() const { return first_issues_; }
  ReadJob& front() { return jobs_[head_ % kReadJobs]; }
  const ReadJob& job(uint32_t k) const { return jobs_[(head_ + k) % kReadJobs]; }  // k < size()
  // A first issue carries the newest read MSN and goes last. A repair (a
  // re-issue, or a READ served again) goes ahead of every job of a later
  // READ, the front too (it resumes where it stopped), and behind the jobs
  // of its own and earlier READs: the requester waits for that data with
  // its completions, and behind a queue of later READs the repair waited
  // for all of them (docs/engine.md §READ recovery).
  void push(const ReadJob& j) {
    uint32_t at = tail_;
    for (uint32_t i = head_; !j.first_issue && i != tail_; ++i) {
      if (proto::seq_lt(j.msn, jobs_[i % kReadJobs].msn)) {
        at = i;
        break;
      }
    }
    for (uint32_t i = tail_; i != at; --i) jobs_[i % kReadJobs] = jobs_[(i - 1) % kReadJobs];
    jobs_[at % kReadJobs] = j;
    ++tail_;
    if (j.first_issue) ++first_issues_;
  }
  void pop() {
    if (front().first_issue) --first_issues_;
    ++head_;
  }
  bool has_psn(uint32_t psn) const {
    for (uint32_t i = head_; i != tail_; ++i)
      if (jobs_[i % kReadJobs].psn == psn) return true;
    return false;
  }
  void clear() { head_ = tail_ = first_issues_ = 0; }
  uint64_t heap_bytes() const { return jobs_.heap_bytes(); }
  static constexpr uint64_t kMaxHeapBytes = LazyArray<ReadJob, kReadJobs>::kBytes;

 private:
  LazyArray<ReadJob, kReadJobs> jobs_;
  uint32_t head_ = 0, tail_ = 0;  // sequence numbers: tail_ - head_ jobs
  uint32_t first_issues_ = 0;
};

// A READ_REQ or atomic that arrived ahead of a missing earlier PSN. It
// must not execute before the requests before it (docs/engine.md
// §Ordering), so the responder holds it, unmarked, and runs it when the
// cumulative point reaches its PSN. Dropping it instead left it to the
// requester's timers: a reordering fabric (the hop's --reorder, jitter
// across paths) then cost an RTO per READ and ended in RETRY_EXC_ERR.
// Those packets carry no payload, so the whole packet is kept.
inline constexpr uint32_t kHeldRequests = kReadJobs;

struct HeldRequest {
  bool used = false;
  bool ce = false;
  proto::Packet p;
};

struct AtomicResult {
  bool valid = false;
  uint32_t psn = 0, msn = 0;
  uint64_t original = 0;
  uint8_t path = 0;
};

struct Qp {
  uint32_t qpn = 0;
  OwnerId owner = 0;
  QpInitAttr init;
  QpAttr attr;
  QpState state = QpState::kReset;
  uint32_t mtu = 1024;  // payload bytes per packet (effective_mtu)
  Counters counters;

  // ---- send queue (ring of sequence numbers head <= next <= tail) ----
  std::vector<SendWqe> sq;
  uint32_t sq_mask = 0;
  uint32_t sq_head = 0;  // oldest WQE not yet completed
  uint32_t sq_next = 0;  // next WQE the requester starts
  uint32_t sq_tail = 0;  // next free slot
  SendWqe& sqe(uint32_t seq) { return sq[seq & sq_mask]; }

  // ---- requester ----
  SendScoreboard sb;
  RttEstimator rtt;
  std::unique_ptr<CongestionControlInterface> cc;
  std::unique_ptr<PathSelectorInterface> paths;
  uint32_t next_recv_msn = 0;  // receive-consuming messages started
  uint32_t next_rd_msn = 0;    // READ/atomic messages started
  uint32_t rd_outstanding = 0;
  uint64_t rd_bytes = 0;  // message bytes of the READs outstanding (<= kMaxReadBytes + one)
  std::array<uint32_t, kRdSlots> rd_slot{};  // rd msn % kRdSlots -> WQE seq
  // w gives its max_rd_atomic slot back: a READ as soon as all its data is
  // placed, whatever READs before it still miss (docs/engine.md §READ
  // recovery), an atomic when it completes. Released only in completion
  // order, one READ with a hole held every later READ's slot through its
  // recovery and the pipeline drained behind it.
  void release_rd(SendWqe& w) {
    if (!w.rd_counted) return;
    w.rd_counted = false;
    --rd_outstanding;
    if (w.wr.opcode == WrOpcode::kRdmaRead) rd_bytes -= std::min<uint64_t>(rd_bytes, w.length);
  }
  uint32_t credit = 0;   // peer's latest grant in packets (0 = no limit)
  uint32_t retries = 0;  // consecutive timeouts without progress
  // When the requester last made progress, or began waiting after being
  // idle. retry_cnt is exhausted only once (retry_cnt + 1) IB local ACK
  // timeouts have passed since then: the adaptive RTO retransmits sooner,
  // but a fast RTO is not an IB timeout (docs/engine.md §Timers).
  Time progress_at = 0;
  uint32_t backoff = 0;
  Time rto_deadline = kNever;
  Time rack_deadline = kNever;
  Time tlp_deadline = kNever;  // tail loss probe (one per flight)
  // A probe (or an RTO retransmission) is out and nothing was delivered
  // since: no further probe until progress (RFC 8985 §7.3, one TLP per
  // flight). Re-arming after every probe sent one per PTO to a stalled
  // peer, thousands a second (docs/engine.md §Timers).
  bool tlp_out = false;
  // An RTO fired at rto_fired_at and no ACK has made progress since. If the
  // first one that does echoes a packet sent before then, the ACKs were
  // only late (a stalled host or hop): the timeout is undone (Eifel, RFC
  // 3522, with the echoed timestamp), instead of leaving the window halved
  // by every scheduling stall.
  bool rto_undo = false;
  Time rto_fired_at = 0;
  Time read_deadline = kNever;  // earliest SendWqe::read_check
  Time pace_deadline = kNever;
  Time read_pace_at = 0;  // responder: when the next READ response may leave
  bool req_error = false;  // a WQE failed: start nothing new
  WcStatus error_status = WcStatus::kSuccess;  // first error completion since RESET (operators)
  bool sq_drained_reported = false;

  UcReceive uc;  // UC responder: the message being received (uc.h)

  // ---- responder ----
  // The SRQ the QP takes receives from (srq.h), or null: then `rq` is a
  // window of receives it took, filled by srq::refill.
  Srq* srq = nullptr;
  RecvWindow rw;
  std::vector<RecvWqe> rq;
  uint32_t rq_mask = 0;
  uint32_t rq_head = 0, rq_tail = 0;
  RecvWqe& rqe(uint32_t seq) { return rq[seq & rq_mask]; }
  ReadQueue reads;
  LazyArray<HeldRequest, kHeldRequests> held;
  uint32_t held_count = 0;
  uint32_t resp_rd_msn = 0;  // read MSN the next first-issue READ/atomic must carry
  LazyArray<AtomicResult, kAtomicCache> atomics;
  uint32_t pending_acks = 0;
  Time ack_deadline = kNever;
  uint32_t ack_echo_ts = 0;
  uint8_t ack_echo_path = 0;
  bool ack_ce = false;
  uint16_t ce_count = 0;
  bool comm_est = false;
  bool has_fatal_nack = false;  // responder error: answer everything with this
  proto::Nackh fatal_nack;
  // The error stopped a READ being answered (its MR died): the requester has
  // seen the request delivered and re-issues missing data under new PSNs,
  // so those requests are NACKed under their own PSN.
  bool fatal_read = false;
  uint32_t fatal_read_msn = 0;

  // ---- host writes not yet committed (hal.h §Placement, Core::commit) ----
  bool placed = false;          // responder: request data or an atomic written
  uint32_t placed_psn = 0;      // the first such request since the last commit
  std::vector<uint32_t> placed_recvs;  // receives (by MSN) those requests filled
  bool rd_placed = false;       // requester: READ data or an atomic result written
  uint32_t rd_placed_seq = 0;   // the first such WQE since the last commit
  bool in_uncommitted = false;  // on Core::uncommitted_

  bool in_active = false;  // on Core::active

  // ---- datagram service (UD QPs, datagram.cc) ----
  uint32_t ud_psn = 0;  // MBTH.psn of the next datagram (sq_psn at RTR -> RTS)
};

class Core {
 public:
  Core(const EngineConfig& config, Hal hal);

  Time now() const { return hal_.clock.now(); }
  Hal& hal() { return hal_; }
  const EngineConfig& config() const { return config_; }
  EngineConfig& config() { return config_; }
  Counters& counters() { return counters_; }
  MrTable& mrs() { return mrs_; }
  MwTable& mws() { return mws_; }
  Table<Ah>& ahs() { return ahs_; }
  // UD multicast groups: group address -> attached QPNs (datagram.cc).
  std::map<std::array<uint8_t, 16>, std::vector<uint32_t>>& groups() { return groups_; }
  ReceiverCreditInterface* credit() { return credit_.get(); }
  std::vector<uint8_t>& lost_paths() { return lost_paths_; }

  // Counts on the device and on the QP (if any).
  void bump(Qp* qp, uint64_t Counters::*field, uint64_t n = 1) {
    counters_.*field += n;
    if (qp) qp->counters.*field += n;
  }
  // Sends a packet of qp on path (fills addresses and entropy), to its
  // peer (send) or to av (send_to: UD datagrams).
  void send(Qp& qp, const proto::Packet& p, uint8_t path) { send_to(qp, qp.attr.av, p, path); }
  OutPacket out_packet(const Qp& qp, const AddressVector& av, const proto::Packet& p,
                       uint8_t path) const;
  void send_to(Qp& qp, const AddressVector& av, const proto::Packet& p, uint8_t path);
  // The place for the len-byte payload of packet p (headers filled, no
  // payload yet) of qp to av on path: len bytes of a frame the port has
  // reserved (hal.h §tx_buffer; counted tx_payload_in_frame), else the
  // scratch buffer (tx_payload_copied; send() copies it into a frame). The
  // caller fills it by DMA and then either sends the packet with that span
  // as its payload, calling nothing of the port before, or gives it back
  // with tx_drop(). Empty for len 0.
  std::span<uint8_t> tx_payload(Qp& qp, const AddressVector& av, const proto::Packet& p,
                                uint8_t path, size_t len);
  // The payload from tx_payload() will not be sent (the DMA read failed):
  // a port frame goes back unsent (tx_frames_abandoned); the scratch needs
  // nothing.
  void tx_drop(Qp* qp, std::span<uint8_t> buf);
  // Posts a completion; a full CQ is counted and its error handled at the
  // end of the current engine entry point (Engine::Impl::settle).
  void complete(Qp& qp, uint32_t cqn, const Completion& wc);
  // Moves qp to ERR: flushes SQ and RQ in order, clears transport state.
  void qp_to_error(Qp& qp);
  // Puts qp on the list pump() serves.
  void activate(Qp& qp);
  // Placement (hal.h §Placement). The responder records each request whose
  // data it wrote (recv: the receive it fills, or null); the requester each
  // READ/atomic WQE whose response it wrote. Nothing is acknowledged or
  // completed on the strength of such a write before commit() says it landed.
  void placed_request(Qp& qp, uint32_t psn, bool recv, uint32_t recv_msn);
  void placed_response(Qp& qp, uint32_t wqe_seq);
  // Commits owner's queued writes (DmaInterface::commit), if any QP of the
  // owner wrote since its last commit. On failure the engine cannot tell
  // whose write failed, so every QP of the owner with uncommitted writes
  // fails them: the responder NACKs the first such request REMOTE_ACCESS_ERROR
  // and goes to ERR, the requester completes the WQE kLocAccessErr. Returns
  // false then. The requester and responder call it before every DMA read
  // too: a host read may flush queued writes and lose their failure.
  bool commit(OwnerId owner);
  void forget(Qp& qp);  // qp is being destroyed
  std::vector<Qp*>& active() { return active_; }
  std::vector<uint32_t>& overflowed_cqs() { return overflowed_cqs_; }
  // qp's deadlines may have changed (timer_index.h).
  void touch(const Qp& qp) const { timers_.mark(qp.qpn); }
  TimerIndex& timers() const { return timers_; }

 private:
  EngineConfig config_;
  Hal hal_;
  Counters counters_;
  MrTable mrs_;
  MwTable mws_;  // mrs_ checks their rkeys too (set_windows)
  Table<Ah> ahs_;
  std::map<std::array<uint8_t, 16>, std::vector<uint32_t>> groups_;
  std::unique_ptr<ReceiverCreditInterface> credit_;
  std::vector<uint8_t> scratch_;
  std::span<uint8_t> tx_held_;  // a port frame's payload between tx_payload() and send/tx_drop
  std::vector<uint8_t> lost_paths_;
  std::vector<Qp*> active_;
  std::vector<uint32_t> overflowed_cqs_;
  std::vector<Qp*> uncommitted_;  // QPs with writes not yet committed
  std::vector<Qp*> failing_;      // commit() failed: their writes are lost
  mutable TimerIndex timers_{0xFFF};  // by QPN index (engine.cc kQpIndexMask)
  void placement_failed(Qp& qp);
};

// Gathers/scatters message bytes [offset, offset+dst.size()) through an SGL.
// sgl_read gathers a posted work request's payload (DmaInterface::read_payload);
// the caller commits the owner's writes first (Core::commit: a host read may
// flush them and lose their failure), before it reserves the destination.
bool sgl_read(Core& c, OwnerId owner, const Sge* sg, uint32_t n, uint64_t offset,
              std::span<uint8_t> dst);
bool sgl_write(Core& c, OwnerId owner, const Sge* sg, uint32_t n, uint64_t offset,
               std::span<const uint8_t> src);

namespace requester {
// Transmits retransmissions and new packets as window, credit and pacing
// allow; at most budget packets. Returns the number sent.
uint32_t run(Core& c, Qp& qp, uint32_t budget);
// Retransmission timeout (also re-issues lost READ/atomic responses).
void on_rto(Core& c, Qp& qp);
// Tail loss probe timer: armed on sends and progress, fires before the RTO.
void arm_tlp(Core& c, Qp& qp);
void on_tlp(Core& c, Qp& qp);
// READs whose last response arrived with holes: re-issue the holes now
// (before the RTO) once responses still in flight on slower paths had time.
void on_read_check(Core& c, Qp& qp);
// (Re)arms the retransmission timer from the current state.
void arm_rto(Core& c, Qp& qp, bool restart);
// Local checks of a WQE (at post and again when it starts: the MR may be
// gone by then): lkeys, bounds and access of its SGEs, message size.
WcStatus check_local(Core& c, const Qp& qp, const SendWqe& w);
bool has_work(const Qp& qp);
// The request packet for [offset, offset+len) of w, payload gathered into
// the scratch buffer (also the UC sender's, uc.cc): kSuccess, kLocProtErr
// (an lkey died) or kLocQpOpErr (the host read failed).
WcStatus build(Core& c, Qp& qp, SendWqe& w, uint32_t psn, uint32_t offset, uint32_t len,
               uint8_t path, bool retransmit, proto::Packet* p);
}  // namespace requester

namespace uc {
// The unreliable connected service (uc.h).
uint32_t run(Core& c, Qp& qp, uint32_t budget);
void on_request(Core& c, Qp& qp, const proto::Frame& f);
void placement_failed(Core& c, Qp& qp);
}  // namespace uc

namespace responder {
void on_request(Core& c, Qp& qp, const proto::Frame& f);
// Every SGE of a receive names a live MR of the receive's PD with local
// write (checked for every packet placed into it: dereg_mr takes effect).
bool recv_keys_ok(Core& c, const Qp& qp, const RecvWqe& rw);
// Forgets the held out-of-order READs/atomics (QP to ERR or RESET).
void drop_held(Qp& qp);
void send_ack(Core& c, Qp& qp, bool dup);
// A request a switch trimmed (proto::parse_trimmed_frame): NACK TRIMMED for
// a PSN not yet received, otherwise a counted drop.
void on_trimmed(Core& c, Qp& qp, const proto::Mbth& m);
// Core::commit failed for qp's placed requests: NACK, receives in error, ERR.
void placement_failed(Core& c, Qp& qp);
// Sends READ responses as pacing allows; returns packets sent.
uint32_t run(Core& c, Qp& qp, uint32_t budget);
}  // namespace responder

namespace completer {
void on_response(Core& c, Qp& qp, const proto::Frame& f);
// Emits completions in posting order for WQEs that are finished.
void drain(Core& c, Qp& qp);
// A WQE failed fatally (NACK, retries exhausted): complete and go to ERR.
void fail(Core& c, Qp& qp, uint32_t wqe_seq, WcStatus status);
// The send completion of one WQE (if signalled, or an error).
void emit(Core& c, Qp& qp, SendWqe& w, WcStatus status);
}  // namespace completer

// The datagram service of UD QPs (docs/protocol.md §13, datagram.cc): every
// message one packet, nothing acknowledged or retransmitted.
namespace datagram {
bool is_datagram(proto::Opcode op);
// Payload bytes a UD message may carry over a link with this IP MTU.
uint32_t mtu(uint32_t link_mtu);
// What post_send refuses at once on a UD QP (EINVAL): RDMA and atomics.
int check_post(const SendWr& wr);
// Sends queued WRs, one packet each, completing each as it leaves; a WR
// that cannot be sent fails the send queue (SQE). Returns packets sent.
uint32_t run(Core& c, Qp& qp, uint32_t budget);
// A frame addressed to a UD QP: checked, placed behind its GRH, completed,
// or dropped and counted by reason.
void on_frame(Core& c, Qp& qp, const proto::Frame& f);
inline constexpr uint32_t kMulticastQpn = 0xFFFFFF;  // MBTH.dest_qpn of a multicast datagram
}  // namespace datagram

}  // namespace metaroce::fw
