// The device ABI's ring slots <-> the engine's work requests and
// completions (convert.h), in both directions, and the bounds a WQE from a
// ring is checked against.
#include "firmware-model/uapi/convert.h"

#include <doctest/doctest.h>
#include <set>

namespace metaroce::uapi {
namespace {

fw::SendWr write_wr() {
  fw::SendWr wr;
  wr.wr_id = 42;
  wr.opcode = fw::WrOpcode::kRdmaWriteImm;
  wr.send_flags = fw::kSendSignaled;
  wr.imm = 0x01020304;
  wr.remote_addr = 0xabc000;
  wr.rkey = 0x77;
  wr.num_sge = 2;
  wr.sg[0] = {0x5000, 128, 0x100};
  wr.sg[1] = {0x6000, 64, 0x101};
  return wr;
}

TEST_CASE("send_wqe__round_trip_keeps_every_field") {
  mroce_send_wqe w = to_abi(write_wr());
  CHECK(w.opcode == static_cast<uint8_t>(fw::WrOpcode::kRdmaWriteImm));
  CHECK(w.num_sge == 2);
  fw::SendWr back;
  back.inline_data = {1, 2, 3};  // stale state from an earlier WQE is cleared
  REQUIRE(to_fw(w, &back) == WqeDefect::kNone);
  CHECK(back.wr_id == 42);
  CHECK(back.opcode == fw::WrOpcode::kRdmaWriteImm);
  CHECK(back.imm == 0x01020304);
  CHECK(back.remote_addr == 0xabc000);
  CHECK(back.rkey == 0x77);
  CHECK(back.num_sge == 2);
  CHECK(back.sg[1].addr == 0x6000);
  CHECK(back.sg[1].length == 64);
  CHECK(back.sg[1].lkey == 0x101);
  CHECK(back.inline_data.empty());
}

TEST_CASE("send_wqe__inline_data_round_trip") {
  fw::SendWr wr;
  wr.opcode = fw::WrOpcode::kSend;
  wr.send_flags = fw::kSendInline;
  wr.inline_data = {9, 8, 7};
  mroce_send_wqe w = to_abi(wr);
  CHECK(w.inline_len == 3);
  fw::SendWr back;
  REQUIRE(to_fw(w, &back) == WqeDefect::kNone);
  CHECK(back.inline_data == std::vector<uint8_t>{9, 8, 7});
  CHECK(back.num_sge == 0);
}

TEST_CASE("send_wqe__bounds_of_the_layout_are_named") {
  mroce_send_wqe w = to_abi(write_wr());
  fw::SendWr wr;
  w.num_sge = MROCE_MAX_SGE + 1;
  CHECK(to_fw(w, &wr) == WqeDefect::kBadSgeCount);
  w.num_sge = MROCE_MAX_SGE;
  CHECK(to_fw(w, &wr) == WqeDefect::kNone);
  w.send_flags = fw::kSendInline;
  w.inline_len = MROCE_MAX_INLINE + 1;
  CHECK(to_fw(w, &wr) == WqeDefect::kBadInlineLen);
  CHECK(wr.wr_id == 42);  // still known: a refused WQE completes with its wr_id
  w.inline_len = MROCE_MAX_INLINE;
  CHECK(to_fw(w, &wr) == WqeDefect::kNone);
  CHECK(wr.inline_data.size() == MROCE_MAX_INLINE);
}

TEST_CASE("send_wqe__ud_destination_round_trip_in_reserved") {
  fw::SendWr wr = write_wr();
  wr.opcode = fw::WrOpcode::kSend;
  wr.ah = 5;
  wr.remote_qpn = 0xabcdef;
  wr.remote_qkey = 0x80000001;
  mroce_send_wqe w = to_abi(wr);
  CHECK(w.reserved[0] == (uint64_t{0xabcdef} << 32 | 5));  // COORD.md: {ah, remote_qpn}
  CHECK(static_cast<uint32_t>(w.reserved[1]) == 0x80000001);
  fw::SendWr back;
  REQUIRE(to_fw(w, &back) == WqeDefect::kNone);
  CHECK(back.ah == 5);
  CHECK(back.remote_qpn == 0xabcdef);
  CHECK(back.remote_qkey == 0x80000001);
}

TEST_CASE("cqe__ud_fields_in_reserved_0_and_1") {
  fw::Completion wc;
  wc.wc_flags = fw::kWcGrh;
  wc.slid = 0x1234;
  wc.sl = 3;
  wc.dlid_path_bits = 1;
  wc.pkey_index = 0;
  mroce_cqe e = to_abi(wc);
  CHECK(e.reserved[0] == (0x01u << 24 | 3u << 16 | 0x1234));
  CHECK(e.reserved[2] == 0);  // srq's
  fw::Completion back = to_fw(e);
  CHECK(back.slid == 0x1234);
  CHECK(back.sl == 3);
  CHECK(back.dlid_path_bits == 1);
}

TEST_CASE("qp_attr__qkey_round_trip") {
  fw::QpAttr q;
  q.qkey = 0x11111111;
  CHECK(to_fw(to_abi(q)).qkey == 0x11111111);
}

TEST_CASE("recv_wqe__round_trip_and_sge_bound") {
  fw::RecvWr wr;
  wr.wr_id = 9;
  wr.num_sge = 1;
  wr.sg[0] = {0x9000, 4096, 0x100};
  mroce_recv_wqe w = to_abi(wr);
  fw::RecvWr back;
  REQUIRE(to_fw(w, &back) == WqeDefect::kNone);
  CHECK(back.wr_id == 9);
  CHECK(back.num_sge == 1);
  CHECK(back.sg[0].length == 4096);
  w.num_sge = MROCE_MAX_SGE + 1;
  CHECK(to_fw(w, &back) == WqeDefect::kBadSgeCount);
}

TEST_CASE("cqe__round_trip_keeps_every_field") {
  fw::Completion wc;
  wc.wr_id = 7;
  wc.status = fw::WcStatus::kLocQpOpErr;
  wc.opcode = fw::WcOpcode::kRecvRdmaWithImm;
  wc.vendor_err = 3;
  wc.byte_len = 100;
  wc.imm = 0xdead;
  wc.qp_num = 17;
  wc.src_qp = 18;
  wc.wc_flags = 2;
  mroce_cqe e = to_abi(wc);
  CHECK(e.status == static_cast<uint32_t>(fw::WcStatus::kLocQpOpErr));
  fw::Completion back = to_fw(e);
  CHECK(back.wr_id == 7);
  CHECK(back.status == fw::WcStatus::kLocQpOpErr);
  CHECK(back.opcode == fw::WcOpcode::kRecvRdmaWithImm);
  CHECK(back.vendor_err == 3);
  CHECK(back.byte_len == 100);
  CHECK(back.imm == 0xdead);
  CHECK(back.qp_num == 17);
  CHECK(back.src_qp == 18);
  CHECK(back.wc_flags == 2);
}

TEST_CASE("named_counters__one_name_per_field_each_with_its_own_value") {
  fw::Counters c;
  c.tx_packets = 1;
  c.rx_held_unordered = 2;
  c.spurious_timeouts = 3;
  c.rx_drop_mcast_no_group = 4;
  std::vector<NamedCounter> n = named_counters(c);
  REQUIRE(n.size() == kEngineCounters);
  std::set<std::string> names;
  for (const NamedCounter& x : n) names.insert(x.name);
  CHECK(names.size() == n.size());
  CHECK(n.front().name == "tx_packets");
  CHECK(n.front().value == 1);
  // By name: each helper's block of counters is appended at the end.
  auto value_of = [&](const std::string& name) -> int64_t {
    for (const NamedCounter& x : n)
      if (x.name == name) return static_cast<int64_t>(x.value);
    return -1;
  };
  CHECK(value_of("rx_held_unordered") == 2);
  CHECK(value_of("spurious_timeouts") == 3);
  CHECK(value_of("rx_rnr_srq_empty") == 0);
  CHECK(value_of("rx_drop_mcast_no_group") == 4);
}

}  // namespace
}  // namespace metaroce::uapi
