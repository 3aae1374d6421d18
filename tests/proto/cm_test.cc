// Tests of proto/cm.cc (check_cm, service IDs, timeouts) and of the CM
// opcodes in the codec: private data bounds, CMH layout, reserved bits.
#include "proto/cm.h"

#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "proto/opcode.h"

using namespace metaroce::proto;

namespace {

using Bytes = std::vector<uint8_t>;

Packet valid_req() {
  Packet p;
  p.mbth.opcode = Opcode::kCmReq;
  p.cm.local_comm_id = 0x11111111;
  p.cm.service_id = service_id(PortSpace::kTcp, 7174);
  p.cm.qp_type = kCmQpRc;
  p.cm.qpn = 0x102;
  p.cm.path_mtu = 3;
  return p;
}

Packet valid(Opcode op) {
  if (op == Opcode::kCmReq) return valid_req();
  Packet p;
  p.mbth.opcode = op;
  p.cm.local_comm_id = 0x22222222;
  p.cm.remote_comm_id = 0x11111111;
  if (op == Opcode::kCmRep) {
    p.cm.qp_type = kCmQpRc;
    p.cm.qpn = 0x203;
    p.cm.path_mtu = 3;
  }
  if (op == Opcode::kCmRej) p.cm.reason = static_cast<uint16_t>(RejReason::kConsumerDefined);
  return p;
}

Bytes build(const Packet& p) {
  Bytes out(transport_length(p));
  REQUIRE(build_transport(p, out) == out.size());
  return out;
}

void refresh_icrc(Bytes& tp) {
  uint32_t c = crc32c(std::span<const uint8_t>(tp).first(tp.size() - 4));
  for (int i = 0; i < 4; ++i) tp[tp.size() - 4 + i] = static_cast<uint8_t>(c >> (24 - 8 * i));
}

}  // namespace

TEST_CASE("is_cm__exactly_the_seven_cm_opcodes") {
  int n = 0;
  for (const auto& row : kOpcodeTable) n += is_cm(row.op);
  CHECK(n == 7);
  CHECK(is_cm(Opcode::kCmReq));
  CHECK(is_cm(Opcode::kCmDrep));
  CHECK_FALSE(is_cm(Opcode::kProbeReply));
}

TEST_CASE("service_id__port_space_and_port") {
  CHECK(service_id(PortSpace::kTcp, 7174) == 0x0000000001061C06ull);
  CHECK(service_id(PortSpace::kUdp, 1) == 0x0000000001110001ull);
  CHECK(service_port(0x0000000001061C06ull) == 7174);
  CHECK(service_space(0x0000000001061C06ull) == 0x0106);
}

TEST_CASE("cm_timeout_ns__ib_encoding") {
  CHECK(cm_timeout_ns(0) == 4096);
  CHECK(cm_timeout_ns(18) == 4096ull << 18);  // 1.07 s
  CHECK(cm_timeout_ns(31) == 4096ull << 31);
  CHECK(cm_timeout_ns(0xFF) == 4096ull << 31);  // masked to 5 bits
}

TEST_CASE("check_cm__valid_messages_pass") {
  for (const auto& row : kOpcodeTable) {
    if (!is_cm(row.op)) continue;
    CAPTURE(row.name);
    CHECK(check_cm(valid(row.op)) == CmCheck::kOk);
  }
  Packet ud = valid_req();
  ud.cm.service_id = service_id(PortSpace::kUdp, 5);
  ud.cm.qp_type = kCmQpUd;
  ud.cm.path_mtu = 0;  // not used by UD
  CHECK(check_cm(ud) == CmCheck::kOk);
  Packet at_once_rej = valid(Opcode::kCmRej);
  at_once_rej.cm.local_comm_id = 0;  // REJ of a REQ that made no connection
  CHECK(check_cm(at_once_rej) == CmCheck::kOk);
  Packet abandon_rej = valid(Opcode::kCmRej);
  abandon_rej.cm.remote_comm_id = 0;  // the initiator gave up before it learnt our id
  CHECK(check_cm(abandon_rej) == CmCheck::kOk);
}

TEST_CASE("check_cm__each_rule_names_its_reason") {
  struct Case {
    const char* what;
    Opcode op;
    void (*breaks)(Cmh&);
    CmCheck want;
  };
  const Case cases[] = {
      {"REQ local 0", Opcode::kCmReq, [](Cmh& c) { c.local_comm_id = 0; }, CmCheck::kZeroLocalCommId},
      {"RTU local 0", Opcode::kCmRtu, [](Cmh& c) { c.local_comm_id = 0; }, CmCheck::kZeroLocalCommId},
      {"REQ names a peer id", Opcode::kCmReq, [](Cmh& c) { c.remote_comm_id = 5; }, CmCheck::kReqRemoteCommId},
      {"REP remote 0", Opcode::kCmRep, [](Cmh& c) { c.remote_comm_id = 0; }, CmCheck::kZeroRemoteCommId},
      {"DREQ remote 0", Opcode::kCmDreq, [](Cmh& c) { c.remote_comm_id = 0; }, CmCheck::kZeroRemoteCommId},
      {"REJ both ids 0", Opcode::kCmRej, [](Cmh& c) { c.local_comm_id = c.remote_comm_id = 0; }, CmCheck::kZeroRemoteCommId},
      {"unknown port space", Opcode::kCmReq, [](Cmh& c) { c.service_id = 0x0000000001990001ull; }, CmCheck::kServiceId},
      {"service id high bits", Opcode::kCmReq, [](Cmh& c) { c.service_id |= 1ull << 40; }, CmCheck::kServiceId},
      {"REQ qp type 3", Opcode::kCmReq, [](Cmh& c) { c.qp_type = 3; }, CmCheck::kQpType},
      {"REP qp type 0", Opcode::kCmRep, [](Cmh& c) { c.qp_type = 0; }, CmCheck::kQpType},
      {"REQ QPN 0", Opcode::kCmReq, [](Cmh& c) { c.qpn = 0; }, CmCheck::kQpn},
      {"REP QPN 0", Opcode::kCmRep, [](Cmh& c) { c.qpn = 0; }, CmCheck::kQpn},
      {"RC MTU 0", Opcode::kCmReq, [](Cmh& c) { c.path_mtu = 0; }, CmCheck::kPathMtu},
      {"RC MTU 6", Opcode::kCmRep, [](Cmh& c) { c.path_mtu = 6; }, CmCheck::kPathMtu},
      {"UD on TCP", Opcode::kCmReq, [](Cmh& c) { c.qp_type = kCmQpUd; }, CmCheck::kTransport},
      {"RC on UDP", Opcode::kCmReq, [](Cmh& c) { c.service_id = service_id(PortSpace::kUdp, 1); }, CmCheck::kTransport},
      {"REJ reason 0", Opcode::kCmRej, [](Cmh& c) { c.reason = 0; }, CmCheck::kRejReason},
      {"REJ message 3", Opcode::kCmRej, [](Cmh& c) { c.message = 3; }, CmCheck::kMessage},
      {"MRA of OTHER", Opcode::kCmMra, [](Cmh& c) { c.message = kCmMsgOther; }, CmCheck::kMessage},
  };
  for (const Case& k : cases) {
    CAPTURE(k.what);
    Packet p = valid(k.op);
    k.breaks(p.cm);
    CHECK(check_cm(p) == k.want);
  }
}

TEST_CASE("check_cm__reason_names_are_the_counter_names") {
  CHECK(std::string(to_string(CmCheck::kZeroLocalCommId)) == "zero_local_comm_id");
  CHECK(std::string(to_string(CmCheck::kMessage)) == "message");
  CHECK(kCmCheckCount == 11);
  CHECK(std::string(to_string(RejReason::kInvalidServiceId)) == "INVALID_SERVICE_ID");
  CHECK(std::string(to_string(static_cast<RejReason>(999))) == "UNKNOWN");
}

TEST_CASE("cm_codec__cmh_layout") {
  Packet p = valid_req();
  p.cm.start_psn = 0x01020304;
  p.cm.qkey = 0x0A0B0C0D;
  p.cm.src_port = 0x9C40;
  p.cm.responder_resources = 16;
  p.cm.initiator_depth = 8;
  p.cm.cm_timeout = 18;
  p.cm.max_cm_retries = 4;
  p.cm.retry_count = 7;
  p.cm.rnr_retry = 5;
  p.cm.srq = true;
  p.cm.reason = 0x1234;
  p.cm.message = 2;
  const Bytes b = build(p);
  REQUIRE(b.size() == kMbthLen + kCmhLen + kIcrcLen);
  const Bytes cmh(b.begin() + kMbthLen, b.begin() + kMbthLen + kCmhLen);
  const Bytes want = {0x11, 0x11, 0x11, 0x11, 0, 0, 0, 0,            // comm ids
                      0, 0, 0, 0, 0x01, 0x06, 0x1C, 0x06,            // service id
                      2, 0x00, 0x01, 0x02, 1, 2, 3, 4,               // qp type, qpn, psn
                      0x0A, 0x0B, 0x0C, 0x0D, 0x9C, 0x40, 16, 8,     // qkey, port, res, depth
                      18, 4, 3, 0x40 | 5 << 3 | 7, 0x12, 0x34, 2, 0};
  CHECK(cmh == want);
}

TEST_CASE("cm_codec__reserved_bits_ignored") {
  Packet p = valid_req();
  Bytes b = build(p);
  const size_t at = kMbthLen;
  b[at + 32] |= 0xE0;  // above the 5-bit timeout
  b[at + 33] |= 0xF0;  // above the 4-bit retries
  b[at + 34] |= 0xF0;  // above the 4-bit MTU
  b[at + 35] |= 0x80;  // reserved bit of the retry byte
  b[at + 39] = 0xFF;   // reserved byte
  refresh_icrc(b);
  auto parsed = parse_transport(b);
  REQUIRE(parsed.ok());
  CHECK(parsed.value() == p);
}

TEST_CASE("cm_codec__private_data_bounded_per_opcode") {
  for (const auto& row : kOpcodeTable) {
    if (!is_cm(row.op)) continue;
    CAPTURE(row.name);
    Packet p = valid(row.op);
    Bytes data(row.max_payload, 0x5A);
    p.payload = data;
    Bytes b = build(p);
    auto at_limit = parse_transport(b);
    REQUIRE(at_limit.ok());
    CHECK(at_limit.value().payload.size() == row.max_payload);

    // One byte more: the builder refuses, and a hand-made one is kBadLength.
    data.push_back(0x5A);
    p.payload = data;
    Bytes out(transport_length(p));
    CHECK(build_transport(p, out) == 0);
    b.insert(b.end() - kIcrcLen, 0x5A);
    refresh_icrc(b);
    auto over = parse_transport(b);
    REQUIRE_FALSE(over.ok());
    CHECK(over.error() == ParseError{ParseErrorCode::kBadLength, row.header_len + row.max_payload, "payload"});
  }
}

TEST_CASE("cm_codec__to_string_names_cm_fields") {
  Packet p = valid_req();
  const std::string s = to_string(p);
  CHECK(s.find("CM_REQ") == 0);
  CHECK(s.find("cm.local_comm_id=0x11111111") != std::string::npos);
  CHECK(s.find("cm.service_id=0x0000000001061c06") != std::string::npos);
}
