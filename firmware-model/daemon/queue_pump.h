// The queue pump: the device ABI's shared rings <-> the transport backend
// (docs/daemon.md §Roles, docs/device-abi.md §3). It owns every CQ and QP
// ring the control plane created, drains SQ/RQ entries into the backend
// (each WQE copied out of the ring before it is checked), and is the
// backend's EventSink: CQEs into the CQ rings, published with channel
// events once the backend says their data has landed, and asynchronous
// events to the owning client's socket. It never reads back an index the
// NIC owns. Single-threaded: every method runs on the daemon's loop thread.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <vector>

#include "firmware-model/daemon/daemon_counters.h"
#include "firmware-model/daemon/shm_ring.h"
#include "firmware-model/hw/transport_backend.h"
#include "firmware-model/uapi/metaroce_abi.h"

namespace metaroce::daemon {

class QueuePump final : public hw::EventSink {
 public:
  // async_fd_of: the async event socket of a client, -1 if none.
  QueuePump(DaemonCounters& counters, std::function<int(fw::OwnerId)> async_fd_of);
  void set_backend(hw::TransportBackend* backend) { backend_ = backend; }

  // ---- rings, created and removed by the control plane ----
  // A CQ ring of `entries` slots in a sealed memfd of `bytes`; *client_fd
  // is a dup for the client. channel_fd (checked by the caller) is dup'd;
  // -1 for none. 0 or an errno (the memory could not be made).
  int add_cq(uint32_t cqn, fw::OwnerId owner, uint64_t user_handle, uint32_t entries,
             size_t bytes, int channel_fd, int* client_fd, size_t* size);
  // The SQ ring at offset 0, the RQ ring at sq_bytes, in one memfd.
  int add_qp(uint32_t qpn, fw::OwnerId owner, uint64_t user_handle, uint32_t send_cqn,
             uint32_t sq_entries, size_t sq_bytes, uint32_t rq_entries, size_t rq_bytes,
             int* client_fd, size_t* size);
  // Unmap (and close the CQ's channel); the ring memory's size, 0 if none.
  size_t remove_cq(uint32_t cqn);
  size_t remove_qp(uint32_t qpn);
  // An SRQ's receive ring (queue_pump_srq.cc): entries = its max_wr.
  int add_srq(uint32_t srqn, fw::OwnerId owner, uint64_t user_handle, uint32_t entries,
              size_t bytes, int* client_fd, size_t* size);
  size_t remove_srq(uint32_t srqn);
  // What the application posted on an SRQ's ring, into the backend.
  void drain_srq(uint32_t srqn);
  // Everything already posted on a QP's rings into the backend (before a
  // state change, so work posted earlier is ordered before it).
  void drain(uint32_t qpn);
  // Where the application and the NIC are in each of a QP's queues.
  void ring_counters(uint32_t qpn, std::vector<hw::NamedCounter>* out) const;

  // ---- data path ----
  int poll_rings();  // every QP's RQ, then SQ; returns the entries taken
  // Announce sleep on every ring (nic_sleeping, seq_cst), then re-check:
  // false if work arrived meanwhile.
  bool prepare_sleep();
  void end_sleep();

  // One record to a client's channel or async socket; never waits.
  void send_async(int async_fd, uint64_t element, fw::EventType type);

  // ---- EventSink ----
  bool complete(uint32_t cqn, const fw::Completion& wc) override;
  void async_event(fw::EventType type, uint32_t element) override;
  void publish() override;  // CQ producer indices, then channel events

 private:
  struct CqState {
    fw::OwnerId owner = 0;
    uint64_t user_handle = 0;
    int channel_fd = -1;
    ShmRegion shm;
    RingView ring;
    uint32_t producer = 0;  // local copy; store-released in publish()
    bool dirty = false;
  };
  struct QpState {
    fw::OwnerId owner = 0;
    uint64_t user_handle = 0;
    uint32_t send_cqn = 0;
    ShmRegion shm;
    RingView sq, rq;
    // Entries read out of each ring (posted to the backend or refused).
    // The shared header's copies are only published: the client can write
    // them too, so they are never read back.
    uint32_t sq_cons = 0, rq_cons = 0;
    // The published consumer indices: entries read minus those the backend
    // still holds (its queue_depths), so the application's ring is full at
    // exactly max_send_wr / max_recv_wr outstanding WRs.
    uint32_t sq_freed = 0, rq_freed = 0;
    bool ring_broken = false;  // a corrupted index: QP fatal, rings no longer read
    bool dirty = false;        // completed WRs since its consumers were stored
  };

  struct SrqState {
    fw::OwnerId owner = 0;
    uint64_t user_handle = 0;
    ShmRegion shm;
    RingView ring;
    uint32_t read = 0;     // entries copied out of the ring (posted to the backend or refused)
    uint32_t refused = 0;  // of those, refused by the backend
    uint32_t freed = 0;    // published consumer: taken by messages + refused
    bool broken = false;   // a corrupted producer: IBV_EVENT_SRQ_ERR, no longer read
  };
  int poll_srqs();
  int drain_srq(uint32_t srqn, SrqState& s);
  int read_srq(uint32_t srqn, SrqState& s);
  void store_srq_consumer(uint32_t srqn, SrqState& s);
  void store_srq_consumers();
  bool srq_has_work(const SrqState& s) const;
  void srq_async_event(fw::EventType type, uint32_t srqn);

  int drain_sq(uint32_t qpn, QpState& qp);
  void store_qp_consumers(uint32_t qpn, QpState& qp);
  bool over_bound(uint32_t qpn, const QpState& qp, uint64_t* counter);
  int drain_rq(uint32_t qpn, QpState& qp);
  bool ring_index_ok(uint32_t qpn, QpState& qp, uint32_t cons, uint32_t prod, uint32_t entries);
  int to_send_wr(const mroce_send_wqe& w, fw::SendWr* wr, uint64_t** defect);
  int reject_send(uint32_t qpn, QpState& qp, uint64_t wr_id);
  void count_recv_refusal(uint32_t qpn, const QpState& qp, uint32_t num_sge);
  bool qp_has_work(const QpState& qp) const;
  void send_to_owner(fw::OwnerId owner, uint64_t element, fw::EventType type);

  DaemonCounters& counters_;
  std::function<int(fw::OwnerId)> async_fd_of_;
  hw::TransportBackend* backend_ = nullptr;
  std::map<uint32_t, CqState> cqs_;
  std::map<uint32_t, QpState> qps_;
  std::map<uint32_t, SrqState> srqs_;
  std::vector<uint32_t> dirty_cqs_;
  std::vector<uint32_t> dirty_qps_;  // QPs with completions since the last publish()
};

// One record to a client's channel or async socket, MSG_DONTWAIT; true if
// it was sent whole.
bool send_record(int fd, const void* rec, size_t len);

}  // namespace metaroce::daemon
