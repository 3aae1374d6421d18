// The soft backend: TransportBackend over the transport engine. The engine
// keeps its own HAL (clock, packets, DMA, events, random). Its host (the
// daemon's SoftNic) completes the contract: it feeds frames
// (engine().on_frame), since packets are not part of the TransportBackend
// boundary (silicon owns its wire), and publishes completions once their
// DMA has landed (EventSink::publish).
#pragma once

#include <memory>

#include "firmware-model/hw/transport_backend.h"

namespace metaroce::hw {

class SoftBackend : public TransportBackend {
 public:
  SoftBackend(const fw::EngineConfig& config, fw::Hal hal);
  fw::Engine& engine() { return engine_; }

  const char* name() const override { return "soft"; }
  const fw::DeviceCaps& caps() const override { return engine_.caps(); }
  int set_port(const fw::PortInfo& port) override;
  int create_pd(fw::OwnerId o, uint32_t* pdn) override { return engine_.create_pd(o, pdn); }
  int destroy_pd(fw::OwnerId o, uint32_t pdn) override { return engine_.destroy_pd(o, pdn); }
  int reg_mr(fw::OwnerId o, uint32_t pdn, uint64_t addr, uint64_t length, uint32_t access,
             fw::MrKeys* keys) override {
    return engine_.reg_mr(o, pdn, addr, length, access, keys);
  }
  int dereg_mr(fw::OwnerId o, uint32_t lkey) override { return engine_.dereg_mr(o, lkey); }
  int create_cq(fw::OwnerId o, uint32_t entries, uint32_t* cqn) override {
    return engine_.create_cq(o, entries, cqn);
  }
  int destroy_cq(fw::OwnerId o, uint32_t cqn) override { return engine_.destroy_cq(o, cqn); }
  int create_qp(fw::OwnerId o, const fw::QpInitAttr& init, uint32_t* qpn,
                fw::QpCap* actual) override {
    return engine_.create_qp(o, init, qpn, actual);
  }
  int modify_qp(fw::OwnerId o, uint32_t qpn, const fw::QpAttr& attr, uint32_t mask) override {
    return engine_.modify_qp(o, qpn, attr, mask);
  }
  int query_qp(fw::OwnerId o, uint32_t qpn, fw::QpAttr* attr, fw::QpInitAttr* init) override {
    return engine_.query_qp(o, qpn, attr, init);
  }
  int destroy_qp(fw::OwnerId o, uint32_t qpn) override { return engine_.destroy_qp(o, qpn); }
  int queue_depths(fw::OwnerId o, uint32_t qpn, uint32_t* sq, uint32_t* rq) override {
    return engine_.queue_depths(o, qpn, sq, rq);
  }
  void destroy_owner(fw::OwnerId o) override { engine_.destroy_owner(o); }
  int create_ah(fw::OwnerId o, uint32_t pdn, const fw::AddressVector& av, uint32_t* ahn) override {
    return engine_.create_ah(o, pdn, av, ahn);
  }
  int destroy_ah(fw::OwnerId o, uint32_t ahn) override { return engine_.destroy_ah(o, ahn); }
  int attach_mcast(fw::OwnerId o, uint32_t qpn, const proto::IpAddr& g) override {
    return engine_.attach_mcast(o, qpn, g);
  }
  int detach_mcast(fw::OwnerId o, uint32_t qpn, const proto::IpAddr& g) override {
    return engine_.detach_mcast(o, qpn, g);
  }
  int create_srq(fw::OwnerId o, uint32_t pdn, const fw::SrqAttr& want, uint32_t* srqn,
                 fw::SrqAttr* actual, const char** why) override {
    return engine_.create_srq(o, pdn, want, srqn, actual, why);
  }
  int modify_srq(fw::OwnerId o, uint32_t srqn, const fw::SrqAttr& attr, uint32_t mask,
                 const char** why) override {
    return engine_.modify_srq(o, srqn, attr, mask, why);
  }
  int query_srq(fw::OwnerId o, uint32_t srqn, fw::SrqAttr* attr, uint32_t* taken) override {
    return engine_.query_srq(o, srqn, attr, taken);
  }
  int destroy_srq(fw::OwnerId o, uint32_t srqn, const char** why) override {
    return engine_.destroy_srq(o, srqn, why);
  }
  int post_srq_recv(fw::OwnerId o, uint32_t srqn, const fw::RecvWr& wr) override {
    return engine_.post_srq_recv(o, srqn, wr);
  }
  int alloc_mw(fw::OwnerId o, uint32_t pdn, fw::MwType type, uint32_t* handle,
               uint32_t* rkey) override {
    return engine_.alloc_mw(o, pdn, type, handle, rkey);
  }
  int dealloc_mw(fw::OwnerId o, uint32_t handle) override { return engine_.dealloc_mw(o, handle); }
  int post_send(fw::OwnerId o, uint32_t qpn, const fw::SendWr& wr) override {
    return engine_.post_send(o, qpn, wr);
  }
  int post_recv(fw::OwnerId o, uint32_t qpn, const fw::RecvWr& wr) override {
    return engine_.post_recv(o, qpn, wr);
  }
  int post_send_error(fw::OwnerId o, uint32_t qpn, uint64_t wr_id, fw::WcStatus st) override {
    return engine_.post_send_error(o, qpn, wr_id, st);
  }
  // The soft engine's host arms CQs on its own rings (docs/device-abi.md
  // §Completion notification); the engine itself has nothing to do.
  int request_notify(uint32_t, bool) override { return 0; }
  int service(fw::Time now) override;
  fw::Time next_deadline() const override { return engine_.next_deadline(); }
  int query_counters(uint32_t qpn, std::vector<NamedCounter>* out) override;
  std::vector<uint32_t> qp_numbers() override { return engine_.qp_numbers(); }
  int qp_transport(uint32_t qpn, fw::Time now, fw::QpTransportStats* out) override {
    return engine_.qp_transport(qpn, now, out);
  }
  std::string describe_qp(uint32_t qpn) override { return engine_.describe_qp(qpn); }

 private:
  fw::Engine engine_;
};

}  // namespace metaroce::hw
