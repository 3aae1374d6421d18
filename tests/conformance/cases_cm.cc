// Connection management (docs/protocol.md §12): what a DUT's CM must drop.
// A DUT answers a REQ for a port nobody listens on with REJ
// INVALID_SERVICE_ID; that answer is both the sign that the DUT speaks CM
// (the cases skip without it) and the marker that follows each bad message.
#include <unistd.h>

#include "proto/cm.h"
#include "tests/conformance/helpers.h"

namespace metaroce::conform::cases {
namespace {

uint32_t comm_id() {
  static uint32_t n = 0x5000000u + static_cast<uint32_t>(getpid() % 4096) * 1024;
  return ++n;
}

// A well-formed REQ for an RC connection to TCP port `port`.
proto::Packet cm_req(uint32_t local_id, uint16_t port) {
  proto::Packet p;
  p.mbth.opcode = Opcode::kCmReq;
  p.mbth.dest_qpn = 0;
  proto::Cmh& m = p.cm;
  m.local_comm_id = local_id;
  m.service_id = proto::service_id(proto::PortSpace::kTcp, port);
  m.qp_type = proto::kCmQpRc;
  m.qpn = 0x123456;
  m.start_psn = 77;
  m.responder_resources = m.initiator_depth = 1;
  m.cm_timeout = 18;
  m.max_cm_retries = 1;
  m.path_mtu = 3;
  m.retry_count = m.rnr_retry = 7;
  return p;
}

// Sends a REQ for a port with no listener; the REJ answering it, or
// nullptr when the DUT does not answer within 10 s.
const Rx* unlistened_req(Ctx& ctx, Conn& cm) {
  uint32_t id = comm_id();
  ctx.send(ctx.frame(cm_req(id, 1)), "REQ for TCP port 1 (nobody listens)");
  return ctx.await(cm, [id](const Rx& r) { return is_op(r, Opcode::kCmRej) && r.p().cm.remote_comm_id == id; }, 10);
}

// `bad` must be dropped: nothing answers it before the marker's REJ.
void expect_cm_dropped(Ctx& ctx, const proto::Packet& bad, const std::string& what) {
  Conn cm;  // CM messages go to and come from QP 0
  cm.peer_qpn = 0;
  if (!unlistened_req(ctx, cm)) ctx.skip("the DUT answers no CM REQ (no connection manager on the wire)");
  ctx.send(ctx.frame(bad), what);
  if (!unlistened_req(ctx, cm)) ctx.fail("the DUT stopped answering CM after " + what);
  for (const Rx* r : ctx.pending(cm))
    if (r->p().cm.remote_comm_id == bad.cm.local_comm_id)
      ctx.fail("the DUT answered a CM message it must drop (" + what + ")", "no answer", r);
}

}  // namespace

CONFORM_CASE(cm_malformed_dropped, Level::kMust, ({"R12.3-1"}),
             "CM REQs breaking §12.3's field rules are dropped unanswered") {
  proto::Packet p = cm_req(comm_id(), 1);
  p.cm.remote_comm_id = 99;  // a REQ names no peer id
  expect_cm_dropped(ctx, p, "REQ with a remote comm ID");
  p = cm_req(comm_id(), 1);
  p.cm.path_mtu = 9;
  expect_cm_dropped(ctx, p, "RC REQ with MTU 9");
}

CONFORM_CASE(cm_unknown_connection_dropped, Level::kMust, ({"R12.4-1"}),
             "a DREQ naming no connection of the DUT is dropped unanswered") {
  proto::Packet p;
  p.mbth.opcode = Opcode::kCmDreq;
  p.cm.local_comm_id = comm_id();
  p.cm.remote_comm_id = 0x0BADC0DE;
  expect_cm_dropped(ctx, p, "DREQ for an unknown connection");
}

}  // namespace metaroce::conform::cases
