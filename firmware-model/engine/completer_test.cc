// completer.{h,cc}: completion order and signalling, every error status,
// flushes, READ recovery by range re-issue.
#include <doctest/doctest.h>

#include <cstring>

#include "firmware-model/engine/completer.h"
#include "firmware-model/engine/testing/fakes.h"

namespace metaroce::fw::test {

namespace {
std::string st(const Completion& c) { return status_name(c.status); }
SendWr write_to(Bench& t, uint64_t id, uint64_t src, uint64_t dst, uint32_t len,
                uint32_t flags = kSendSignaled) {
  SendWr w = t.a.wr(WrOpcode::kRdmaWrite, id, src, len, flags);
  w.remote_addr = t.b.base() + dst;
  w.rkey = t.b.mr.rkey;
  return w;
}
// RTS -> SQD -> RTS: max_rd_atomic may change only through SQD.
void set_max_rd_atomic(Bench& t, uint8_t n) {
  QpAttr a;
  a.qp_state = QpState::kSqd;
  REQUIRE(t.a.engine->modify_qp(Node::kOwner, t.a.qpn, a, kAttrState) == 0);
  a.max_rd_atomic = n;
  REQUIRE(t.a.engine->modify_qp(Node::kOwner, t.a.qpn, a, kAttrState | kAttrMaxQpRdAtomic) == 0);
  a.qp_state = QpState::kRts;
  REQUIRE(t.a.engine->modify_qp(Node::kOwner, t.a.qpn, a, kAttrState) == 0);
}
std::vector<Completion> drain(Bench& t, size_t n, Time limit = 10'000'000'000ull) {
  std::vector<Completion> sc;
  t.run([&] {
    for (auto& c : t.a.send_cq()) sc.push_back(c);
    return sc.size() >= n;
  }, limit);
  return sc;
}
}  // namespace

TEST_CASE("nack_action__maps_reasons_to_statuses") {
  WcStatus s = WcStatus::kSuccess;
  CHECK(completer::action_for(proto::NackReason::kRnr, &s) == completer::NackAction::kRnrWait);
  CHECK(completer::action_for(proto::NackReason::kTrimmed, &s) == completer::NackAction::kRetransmit);
  CHECK(completer::action_for(proto::NackReason::kRemoteAccessError, &s) == completer::NackAction::kFail);
  CHECK(s == WcStatus::kRemAccessErr);
  completer::action_for(proto::NackReason::kInvalidRequest, &s);
  CHECK(s == WcStatus::kRemInvReqErr);
  completer::action_for(proto::NackReason::kRemoteOperationError, &s);
  CHECK(s == WcStatus::kRemOpErr);
  CHECK(completer::action_for(proto::NackReason::kSequenceError, &s) == completer::NackAction::kIgnore);
  // docs/protocol.md §3.8 [R3.8-6]: unknown reasons are REMOTE_OPERATION_ERROR.
  s = WcStatus::kSuccess;
  CHECK(completer::action_for(static_cast<proto::NackReason>(0x42), &s) == completer::NackAction::kFail);
  CHECK(s == WcStatus::kRemOpErr);
}

TEST_CASE("completer__completions_in_posting_order") {
  Bench t;
  t.path_delay = {50'000, 5'000, 5'000, 5'000};  // the big WRITE's first packet is slow
  t.connect_pair(1 << 20);
  REQUIRE(t.a.post_send(write_to(t, 1, 0, 0, 100'000)) == 0);
  REQUIRE(t.a.post_send(write_to(t, 2, 0, 200'000, 10)) == 0);
  REQUIRE(t.a.post_send(write_to(t, 3, 0, 300'000, 10)) == 0);
  auto sc = drain(t, 3);
  REQUIRE(sc.size() == 3);
  CHECK(sc[0].wr_id == 1);
  CHECK(sc[1].wr_id == 2);
  CHECK(sc[2].wr_id == 3);
  CHECK(sc[0].opcode == WcOpcode::kRdmaWrite);
  CHECK(sc[0].qp_num == t.a.qpn);
}

TEST_CASE("completer__unsignaled_wrs_complete_silently_unless_sq_sig_all") {
  Bench t;
  t.connect_pair();
  REQUIRE(t.a.post_send(write_to(t, 1, 0, 0, 10, 0)) == 0);
  REQUIRE(t.a.post_send(write_to(t, 2, 0, 0, 10, kSendSignaled)) == 0);
  REQUIRE(t.a.post_send(write_to(t, 3, 0, 0, 10, 0)) == 0);
  t.run_idle(100'000'000);
  auto sc = t.a.send_cq();
  REQUIRE(sc.size() == 1);
  CHECK(sc[0].wr_id == 2);
}

// A placement the responder's host could not perform is a remote access
// error (hal.h §Placement), as an unmapped page is on a hardware NIC.
TEST_CASE("completer__remote_access_error_when_responder_dma_fails") {
  Bench t;
  t.connect_pair();
  t.b.dma.dead.insert(Node::kOwner);
  REQUIRE(t.a.post_send(write_to(t, 1, 0, 0, 10)) == 0);
  auto sc = drain(t, 1);
  REQUIRE(sc.size() == 1);
  CHECK(st(sc[0]) == "REM_ACCESS_ERR");
  CHECK(t.b.events.has_event(EventType::kQpAccessErr, t.b.qpn));
}

// A responder whose owner process is gone behaves as a destroyed QP: no
// NACK (the data was not placed, and no access error is the peer's fault),
// so the requester runs into its retry limit, as with a hardware NIC whose
// driver tears down a dead process's QPs.
TEST_CASE("completer__retry_exceeded_when_the_responder_owner_is_gone") {
  Bench t;
  t.connect_pair();
  t.b.dma.gone.insert(Node::kOwner);
  REQUIRE(t.a.post_send(write_to(t, 1, 0, 0, 10)) == 0);
  auto sc = drain(t, 1);
  REQUIRE(sc.size() == 1);
  CHECK(st(sc[0]) == "RETRY_EXC_ERR");
  CHECK(t.b.engine->counters().rx_drop_owner_gone > 0);
  CHECK(t.b.engine->counters().rx_nak_access == 0);
  CHECK_FALSE(t.b.events.has_event(EventType::kQpAccessErr, t.b.qpn));
}

TEST_CASE("completer__modify_to_err_flushes_send_and_receive_queues") {
  Bench t;
  t.connect_pair();
  t.filter = [](const std::string&, bool) { return false; };  // nothing gets through
  REQUIRE(t.a.post_recv(10, 0, 10) == 0);
  REQUIRE(t.a.post_recv(11, 0, 10) == 0);
  REQUIRE(t.a.post_send(write_to(t, 1, 0, 0, 10, 0)) == 0);  // unsignaled: flushed anyway
  REQUIRE(t.a.post_send(write_to(t, 2, 0, 0, 10)) == 0);
  t.a.engine->pump();
  QpAttr err;
  err.qp_state = QpState::kErr;
  REQUIRE(t.a.engine->modify_qp(Node::kOwner, t.a.qpn, err, kAttrState) == 0);
  auto sc = t.a.send_cq();
  auto rc = t.a.recv_cq();
  REQUIRE(sc.size() == 2);
  REQUIRE(rc.size() == 2);
  for (auto& c : sc) CHECK(st(c) == "WR_FLUSH_ERR");
  for (auto& c : rc) CHECK(st(c) == "WR_FLUSH_ERR");
  CHECK(rc[0].wr_id == 10);
  // Posting to an errored QP completes at once with a flush.
  REQUIRE(t.a.post_send(write_to(t, 3, 0, 0, 10)) == 0);
  REQUIRE(t.a.post_recv(12, 0, 10) == 0);
  CHECK(t.a.send_cq().size() == 1);
  CHECK(t.a.recv_cq().size() == 1);
  CHECK(t.a.engine->next_deadline() == kNever);
}

TEST_CASE("completer__read_recovers_lost_responses_by_range_reissue") {
  Bench t;
  t.connect_pair(1 << 20);
  for (uint32_t i = 0; i < 20000; ++i) t.b.mem[i] = static_cast<uint8_t>(i * 31);
  int n = 0;
  t.filter = [&](const std::string& what, bool from_a) {
    if (!from_a && what.rfind("RDMA_READ_RESP", 0) == 0) {
      ++n;
      return n != 3 && n != 4 && n != 12;  // lose three segments of the first answer
    }
    return true;
  };
  SendWr r = t.a.wr(WrOpcode::kRdmaRead, 1, 100'000, 20000);
  r.remote_addr = t.b.base();
  r.rkey = t.b.mr.rkey;
  REQUIRE(t.a.post_send(r) == 0);
  auto sc = drain(t, 1);
  REQUIRE(sc.size() == 1);
  CHECK(st(sc[0]) == "SUCCESS");
  CHECK(sc[0].opcode == WcOpcode::kRdmaRead);
  CHECK(sc[0].byte_len == 20000);
  CHECK(std::memcmp(t.a.mem.data() + 100'000, t.b.mem.data(), 20000) == 0);
  int reissues = 0;
  for (auto& s : t.a.port.log)
    if (s.find("RDMA_READ_REQ") != std::string::npos && s.find("RETX") != std::string::npos) {
      ++reissues;
      CHECK(s.find("msn 0") != std::string::npos);  // same MSN, new PSN
    }
  CHECK(reissues == 2);  // two missing ranges: [2048, 4096) and [11264, 12288)
  bool range = false;
  for (auto& s : t.a.port.log)
    if (s.find("RDMA_READ_REQ psn 1001 msn 0 off 2048") != std::string::npos) range = true;
  CHECK(range);
}

TEST_CASE("completer__read_and_atomic_completions_write_local_memory") {
  Bench t;
  t.connect_pair();
  uint64_t v = 7;
  std::memcpy(t.b.mem.data() + 8, &v, 8);
  SendWr cs = t.a.wr(WrOpcode::kAtomicCmpSwap, 1, 16, 8);
  cs.remote_addr = t.b.base() + 8;
  cs.rkey = t.b.mr.rkey;
  cs.compare_add = 8;  // does not match: no swap
  cs.swap = 99;
  REQUIRE(t.a.post_send(cs) == 0);
  auto sc = drain(t, 1);
  REQUIRE(sc.size() == 1);
  CHECK(sc[0].opcode == WcOpcode::kCompSwap);
  std::memcpy(&v, t.a.mem.data() + 16, 8);
  CHECK(v == 7);
  std::memcpy(&v, t.b.mem.data() + 8, 8);
  CHECK(v == 7);
}

TEST_CASE("completer__max_rd_atomic_limits_outstanding_reads") {
  Bench t;
  t.a.setup(1 << 16, kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead);
  t.b.setup(1 << 16, kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead);
  t.b.connect(t.a.ip, t.a.qpn, kAccessRemoteRead);
  t.a.connect(t.b.ip, t.b.qpn, kAccessRemoteRead);
  QpAttr lim;
  lim.max_rd_atomic = 1;
  // RTS->RTS does not allow max_rd_atomic; go through SQD.
  QpAttr sqd;
  sqd.qp_state = QpState::kSqd;
  REQUIRE(t.a.engine->modify_qp(Node::kOwner, t.a.qpn, sqd, kAttrState) == 0);
  lim.qp_state = QpState::kSqd;
  REQUIRE(t.a.engine->modify_qp(Node::kOwner, t.a.qpn, lim, kAttrState | kAttrMaxQpRdAtomic) == 0);
  QpAttr rts;
  rts.qp_state = QpState::kRts;
  REQUIRE(t.a.engine->modify_qp(Node::kOwner, t.a.qpn, rts, kAttrState) == 0);
  for (int i = 0; i < 3; ++i) {
    SendWr r = t.a.wr(WrOpcode::kRdmaRead, i, 1000 * i, 100);
    r.remote_addr = t.b.base();
    r.rkey = t.b.mr.rkey;
    REQUIRE(t.a.post_send(r) == 0);
  }
  t.a.engine->pump();
  CHECK(t.a.port.log.size() == 1);
  auto sc = drain(t, 3);
  CHECK(sc.size() == 3);
}

// max_rd_atomic counts READs still waiting for data, not READs not yet
// completed: a READ whose data is all in gives its slot back at once, even
// while an earlier READ recovers a lost response (completions still follow
// posting order). Released only in order, the first READ's lost LAST
// response held the next READ back until the first was repaired.
TEST_CASE("completer__read_slot_released_when_its_data_is_in_not_in_order") {
  Bench t;
  t.connect_pair(1 << 20);
  set_max_rd_atomic(t, 2);
  for (uint32_t i = 0; i < 6144; ++i) t.b.mem[i] = static_cast<uint8_t>(i * 13);
  bool lost = false;
  t.filter = [&](const std::string& what, bool from_a) {
    if (!lost && !from_a && what.rfind("RDMA_READ_RESP psn 1000 msn 0 off 1024", 0) == 0)
      return !(lost = true);  // the first READ's LAST response
    return true;
  };
  for (uint32_t i = 0; i < 3; ++i) {
    SendWr r = t.a.wr(WrOpcode::kRdmaRead, i, 100'000 + 2048 * i, 2048);
    r.remote_addr = t.b.base() + 2048 * i;
    r.rkey = t.b.mr.rkey;
    REQUIRE(t.a.post_send(r) == 0);
  }
  auto sc = drain(t, 3);
  REQUIRE(sc.size() == 3);
  CHECK(lost);
  for (uint32_t i = 0; i < 3; ++i) {
    CHECK(sc[i].wr_id == i);
    CHECK(st(sc[i]) == "SUCCESS");
  }
  CHECK(std::memcmp(t.a.mem.data() + 100'000, t.b.mem.data(), 6144) == 0);
  // The third READ left before the first was asked for again.
  std::vector<std::string> reads;
  for (auto& s : t.a.port.log)
    if (s.find("RDMA_READ_REQ") != std::string::npos) reads.push_back(s.substr(0, s.find(" off")));
  REQUIRE(reads.size() >= 4);
  CHECK(reads[0] == "tx RDMA_READ_REQ psn 1000 msn 0");
  CHECK(reads[1] == "tx RDMA_READ_REQ psn 1001 msn 1");
  CHECK(reads[2] == "tx RDMA_READ_REQ psn 1002 msn 2");
  CHECK(reads[3] == "tx RDMA_READ_REQ psn 1003 msn 0");
}

// A READ's LAST response is lost: no hole check sees that. A response of
// a later READ shows the READ was answered in full (the responder answers
// in read MSN order), so its missing data is asked again at once; the
// last READ's lost tail is asked again by the probe timer once responses
// stop. Either way before the RTO (which restarted with every response).
TEST_CASE("completer__lost_last_read_response_is_asked_again_before_the_rto") {
  for (uint32_t reads : {2u, 1u}) {
    INFO(reads << " READs");
    Bench t;
    t.connect_pair(1 << 20);
    for (uint32_t i = 0; i < 8192; ++i) t.b.mem[i] = static_cast<uint8_t>(i * 11);
    bool lost = false;
    t.filter = [&](const std::string& what, bool from_a) {
      if (!lost && !from_a && what.rfind("RDMA_READ_RESP psn 1000 msn 0 off 3072 len 1024 LAST", 0) == 0)
        return !(lost = true);
      return true;
    };
    for (uint32_t i = 0; i < reads; ++i) {
      SendWr r = t.a.wr(WrOpcode::kRdmaRead, i, 100'000 + 4096 * i, 4096);
      r.remote_addr = t.b.base() + 4096 * i;
      r.rkey = t.b.mr.rkey;
      REQUIRE(t.a.post_send(r) == 0);
    }
    auto sc = drain(t, reads);
    REQUIRE(sc.size() == reads);
    CHECK(lost);
    for (auto& c : sc) CHECK(st(c) == "SUCCESS");
    CHECK(std::memcmp(t.a.mem.data() + 100'000, t.b.mem.data(), 4096 * reads) == 0);
    const Counters& k = t.a.engine->counters();
    CHECK(k.timeouts == 0);
    CHECK(k.read_holes_by_order == (reads == 2 ? 1u : 0u));
    CHECK(k.read_tail_probes == (reads == 1 ? 1u : 0u));
  }
}

// A READ that waits for data keeps its read MSN's entry (rd_slot, 32 of
// them): READs after it that complete give their max_rd_atomic slots back,
// but the READ whose MSN would take the waiting one's entry does not start
// until that READ is in. Otherwise the waiting READ's responses matched
// nothing (rx_drop_unexpected) and it ended in RETRY_EXC_ERR.
TEST_CASE("completer__read_waiting_for_data_keeps_its_msn_entry") {
  Bench t;
  t.connect_pair(1 << 20);
  for (uint32_t i = 0; i < 40 * 256; ++i) t.b.mem[i] = static_cast<uint8_t>(i * 7 + 1);
  bool hold = true;  // the first READ's responses are lost until the others are in
  t.filter = [&](const std::string& what, bool from_a) {
    return !(hold && !from_a && what.rfind("RDMA_READ_RESP", 0) == 0 &&
             what.find(" msn 0 ") != std::string::npos);
  };
  for (uint32_t i = 0; i < 40; ++i) {
    SendWr r = t.a.wr(WrOpcode::kRdmaRead, i, 100'000 + 256 * i, 256);
    r.remote_addr = t.b.base() + 256 * i;
    r.rkey = t.b.mr.rkey;
    REQUIRE(t.a.post_send(r) == 0);
  }
  auto has = [&](const char* s) {
    for (auto& l : t.a.port.log)
      if (l.find(s) != std::string::npos) return true;
    return false;
  };
  REQUIRE(t.run([&] { return has("msn 31 off 0"); }));  // READs 1..31 were sent ...
  t.run_idle(200'000);  // ... and answered
  CHECK_FALSE(has("msn 32 off 0"));  // the entry of READ 0 is still taken
  hold = false;
  auto sc = drain(t, 40);
  REQUIRE(sc.size() == 40);
  for (uint32_t i = 0; i < 40; ++i) {
    CHECK(sc[i].wr_id == i);
    CHECK(st(sc[i]) == "SUCCESS");
  }
  CHECK(std::memcmp(t.a.mem.data() + 100'000, t.b.mem.data(), 40 * 256) == 0);
  CHECK(t.a.engine->counters().rx_drop_unexpected == 0);
}

}  // namespace metaroce::fw::test

namespace metaroce::fw::test {
// READ data and atomic results are local placements: a write that does not
// land completes the WQE kLocAccessErr (the WRITE before it, done, succeeds)
// and is never reported as success.
TEST_CASE("completer__read_or_atomic_result_that_did_not_land_is_loc_access_err") {
  for (bool at_commit : {false, true}) {
    for (WrOpcode op : {WrOpcode::kRdmaRead, WrOpcode::kAtomicFetchAdd}) {
      INFO("fail at commit: " << at_commit << " opcode " << static_cast<int>(op));
      Bench t;
      t.connect_pair();
      t.a.dma.fail_on_commit = at_commit;
      t.a.dma.bad_writes.push_back({t.a.base() + 8192 + 600, 16});
      REQUIRE(t.a.post_send(write_to(t, 1, 0, 0, 100)) == 0);
      bool read = op == WrOpcode::kRdmaRead;
      SendWr r = t.a.wr(op, 2, read ? 8192 : 8192 + 600, read ? 2000 : 8);
      r.remote_addr = t.b.base() + 4096;
      r.rkey = t.b.mr.rkey;
      REQUIRE(t.a.post_send(r) == 0);
      REQUIRE(t.a.post_send(write_to(t, 3, 0, 0, 100)) == 0);
      auto sc = drain(t, 3);
      REQUIRE(sc.size() == 3);
      CHECK(st(sc[0]) == "SUCCESS");
      CHECK(st(sc[1]) == "LOC_ACCESS_ERR");
      CHECK(st(sc[2]) == "WR_FLUSH_ERR");
      CHECK(t.a.dma.failed_writes >= 1);
      CHECK(t.a.engine->counters().local_errors == 1);
    }
  }
}
}  // namespace metaroce::fw::test

namespace metaroce::fw::test {
// A host that reads WRs from a ring cannot return EINVAL for a malformed
// one; it used to complete it at once, ahead of the WRs before it, and the
// QP stayed in RTS. Queued as an error it completes in order and the QP
// goes to ERR, flushing what follows.
TEST_CASE("completer__rejected_wr_completes_in_order_and_moves_qp_to_err") {
  Bench t;
  t.connect_pair(1 << 20);
  REQUIRE(t.a.post_send(write_to(t, 1, 0, 0, 100'000)) == 0);
  REQUIRE(t.a.engine->post_send_error(Node::kOwner, t.a.qpn, 2, WcStatus::kLocQpOpErr) == 0);
  REQUIRE(t.a.post_send(write_to(t, 3, 0, 200'000, 10)) == 0);
  CHECK(t.a.engine->post_send_error(Node::kOwner, t.a.qpn, 4, WcStatus::kSuccess) == EINVAL);
  CHECK(t.a.send_cq().empty());  // nothing completes before WRITE 1
  auto sc = drain(t, 3);
  REQUIRE(sc.size() == 3);
  CHECK(sc[0].wr_id == 1);
  CHECK(st(sc[0]) == "SUCCESS");
  CHECK(sc[1].wr_id == 2);
  CHECK(st(sc[1]) == "LOC_QP_OP_ERR");
  CHECK(sc[2].wr_id == 3);
  CHECK(st(sc[2]) == "WR_FLUSH_ERR");
  QpAttr a;
  REQUIRE(t.a.engine->query_qp(Node::kOwner, t.a.qpn, &a, nullptr) == 0);
  CHECK(a.qp_state == QpState::kErr);
  CHECK(t.a.engine->counters().local_errors == 1);
}

// Found at post or when the WR starts, a key error is a completion in order.
TEST_CASE("completer__bad_lkey_behind_work_in_flight_completes_after_it") {
  Bench t;
  t.connect_pair(1 << 20);
  REQUIRE(t.a.post_send(write_to(t, 1, 0, 0, 100'000)) == 0);
  SendWr bad = write_to(t, 2, 0, 0, 10);
  bad.sg[0].lkey ^= 0x100;
  REQUIRE(t.a.post_send(bad) == 0);
  REQUIRE(t.a.post_send(write_to(t, 3, 0, 0, 10)) == 0);
  auto sc = drain(t, 3);
  REQUIRE(sc.size() == 3);
  CHECK(st(sc[0]) == "SUCCESS");
  CHECK(st(sc[1]) == "LOC_PROT_ERR");
  CHECK(st(sc[2]) == "WR_FLUSH_ERR");
  QpAttr a;
  REQUIRE(t.a.engine->query_qp(Node::kOwner, t.a.qpn, &a, nullptr) == 0);
  CHECK(a.qp_state == QpState::kErr);
}
}  // namespace metaroce::fw::test
