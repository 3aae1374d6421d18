// TransportBackend: what the daemon needs from "the transport", whoever
// runs it. Two implementations:
//   - SoftBackend (soft_backend.h): the transport engine fw::Engine, run by
//     the daemon's own loop (it also needs packets and timers, which stay
//     outside this interface: the soft backend's host feeds them).
//   - HwOffloadBackend (hw_offload_backend.h): partner silicon runs the
//     transport; every call here becomes register writes and admin
//     commands (docs/hardware-offload.md).
//
// The daemon holds one TransportBackend and reaches the transport only
// through it (docs/daemon.md §Roles): which backend runs is decided where
// the daemon constructs it, nowhere else.
//
// Conventions are the engine's: 0 or a positive errno, nothing blocks for
// long, nothing throws. Completions and asynchronous events come out
// through the EventSink given to the backend at construction: the soft
// engine pushes them as they happen; the hardware backend finds them in its
// event and completion rings when service() runs.
#pragma once

#include <cerrno>
#include <cstdint>
#include <string>
#include <vector>

#include "firmware-model/engine/engine.h"
#include "firmware-model/engine/types.h"
#include "firmware-model/uapi/convert.h"

namespace metaroce::hw {

using NamedCounter = uapi::NamedCounter;

inline constexpr uint32_t kDeviceCounters = 0xffffffffu;

// Where a backend delivers completions and asynchronous events. complete()
// stages a CQE; publish() makes every staged CQE visible to the
// application. A backend calls publish() only once the data of those
// completions is in place (soft NIC: after its DMA writes are flushed;
// silicon: its CQEs follow their data), so a completion is never visible
// before its data (docs/device-abi.md §3.3).
class EventSink : public fw::EventSinkInterface {
 public:
  virtual void publish() = 0;
};

class TransportBackend {
 public:
  virtual ~TransportBackend() = default;
  virtual const char* name() const = 0;  // "soft", "hw"

  // ---- device and port ----
  virtual const fw::DeviceCaps& caps() const = 0;
  virtual int set_port(const fw::PortInfo& port) = 0;

  // ---- objects (control path) ----
  virtual int create_pd(fw::OwnerId owner, uint32_t* pdn) = 0;
  virtual int destroy_pd(fw::OwnerId owner, uint32_t pdn) = 0;
  virtual int reg_mr(fw::OwnerId owner, uint32_t pdn, uint64_t addr, uint64_t length,
                     uint32_t access, fw::MrKeys* keys) = 0;
  virtual int dereg_mr(fw::OwnerId owner, uint32_t lkey) = 0;
  virtual int create_cq(fw::OwnerId owner, uint32_t entries, uint32_t* cqn) = 0;
  virtual int destroy_cq(fw::OwnerId owner, uint32_t cqn) = 0;
  virtual int create_qp(fw::OwnerId owner, const fw::QpInitAttr& init, uint32_t* qpn,
                        fw::QpCap* actual) = 0;
  virtual int modify_qp(fw::OwnerId owner, uint32_t qpn, const fw::QpAttr& attr,
                        uint32_t attr_mask) = 0;
  virtual int query_qp(fw::OwnerId owner, uint32_t qpn, fw::QpAttr* attr,
                       fw::QpInitAttr* init) = 0;
  virtual int destroy_qp(fw::OwnerId owner, uint32_t qpn) = 0;
  // WRs the QP holds and has not completed (fw::Engine::queue_depths).
  // EOPNOTSUPP: the host then treats a WQE as freed once the backend took it.
  virtual int queue_depths(fw::OwnerId, uint32_t /*qpn*/, uint32_t* /*sq*/, uint32_t* /*rq*/) {
    return EOPNOTSUPP;
  }
  virtual void destroy_owner(fw::OwnerId owner) = 0;
  // Address handles for UD sends (fw::Engine::create_ah). EOPNOTSUPP from a
  // backend without a datagram service.
  virtual int create_ah(fw::OwnerId owner, uint32_t pdn, const fw::AddressVector& av,
                        uint32_t* ahn) {
    return EOPNOTSUPP;
  }
  virtual int destroy_ah(fw::OwnerId owner, uint32_t ahn) { return EOPNOTSUPP; }
  // UD multicast (fw::Engine::attach_mcast).
  virtual int attach_mcast(fw::OwnerId owner, uint32_t qpn, const proto::IpAddr& group) {
    return EOPNOTSUPP;
  }
  virtual int detach_mcast(fw::OwnerId owner, uint32_t qpn, const proto::IpAddr& group) {
    return EOPNOTSUPP;
  }
  // Shared receive queues (fw::Engine's, docs/engine.md §Shared receive
  // queues). A backend without them refuses with EOPNOTSUPP; *why names
  // the broken rule of an EINVAL/EBUSY.
  virtual int create_srq(fw::OwnerId, uint32_t /*pdn*/, const fw::SrqAttr&, uint32_t* /*srqn*/,
                         fw::SrqAttr* /*actual*/, const char** /*why*/) {
    return EOPNOTSUPP;
  }
  virtual int modify_srq(fw::OwnerId, uint32_t /*srqn*/, const fw::SrqAttr&, uint32_t /*mask*/,
                         const char** /*why*/) {
    return EOPNOTSUPP;
  }
  // taken: receives consumed by messages (the NIC's consumer index of the ring).
  virtual int query_srq(fw::OwnerId, uint32_t /*srqn*/, fw::SrqAttr*, uint32_t* /*taken*/) {
    return EOPNOTSUPP;
  }
  virtual int destroy_srq(fw::OwnerId, uint32_t /*srqn*/, const char** /*why*/) {
    return EOPNOTSUPP;
  }
  virtual int post_srq_recv(fw::OwnerId, uint32_t /*srqn*/, const fw::RecvWr&) {
    return EOPNOTSUPP;
  }
  // Memory windows (fw::Engine::alloc_mw). EOPNOTSUPP from a backend without them.
  virtual int alloc_mw(fw::OwnerId, uint32_t /*pdn*/, fw::MwType, uint32_t* /*handle*/,
                       uint32_t* /*rkey*/) {
    return EOPNOTSUPP;
  }
  virtual int dealloc_mw(fw::OwnerId, uint32_t /*handle*/) { return EOPNOTSUPP; }

  // ---- doorbells (data path) ----
  // ENOMEM: the queue is full; the caller keeps the WR and retries.
  virtual int post_send(fw::OwnerId owner, uint32_t qpn, const fw::SendWr& wr) = 0;
  virtual int post_recv(fw::OwnerId owner, uint32_t qpn, const fw::RecvWr& wr) = 0;
  // A send WQE the host refused (it cannot return EINVAL to an application
  // that posted through a ring): queued so that it completes with `status`
  // in posting order, after the work before it, and moves the QP to ERR
  // (fw::Engine::post_send_error). 0, EINVAL (SQ not open, or kSuccess),
  // ENOMEM (SQ full).
  virtual int post_send_error(fw::OwnerId owner, uint32_t qpn, uint64_t wr_id,
                              fw::WcStatus status) = 0;
  // Ask for one notification (EventType-less: the sink's async_event is
  // not used for it) when the next (solicited) CQE lands on cqn.
  virtual int request_notify(uint32_t cqn, bool solicited_only) = 0;

  // ---- completion harvesting and events ----
  // Does the backend's periodic work (soft: due timers and transmission;
  // hw: drain the event queue and the completion rings into the sink).
  // Returns how much work was done; 0 means idle.
  virtual int service(fw::Time now) = 0;
  // When service() must run next at the latest (fw::kNever: on events only).
  virtual fw::Time next_deadline() const = 0;
  // An fd that turns readable when service() has input (soft NIC: its
  // packet socket; silicon: the event interrupt's eventfd); -1: none.
  virtual int wait_fd() const { return -1; }

  // ---- observability ----
  virtual int query_counters(uint32_t qpn, std::vector<NamedCounter>* out) = 0;
  // Counters of what hosts the transport around it (soft NIC: DMA and
  // packet I/O), reported after the daemon's own; none by default.
  virtual void host_counters(std::vector<NamedCounter>*) const {}
  virtual std::vector<uint32_t> qp_numbers() = 0;
  // A QP's transport state for operators (QUERY_QP_TRANSPORT). ENOENT: no
  // such QP; EOPNOTSUPP: the backend cannot tell.
  virtual int qp_transport(uint32_t qpn, fw::Time now, fw::QpTransportStats* out) = 0;
  // One line about a QP for the log ("" if no such QP).
  virtual std::string describe_qp(uint32_t qpn) = 0;
  // Why the last failed call failed, once (then ""): what the daemon tells
  // the application beside the errno. "": the backend has no reason to add.
  virtual std::string take_error() { return {}; }
};

// fw::Counters as name/value pairs, in the order of its fields (the names
// the control protocol's QUERY_COUNTERS uses).
using uapi::named_counters;

}  // namespace metaroce::hw
