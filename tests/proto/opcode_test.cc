#include "proto/opcode.h"

#include <doctest/doctest.h>

#include <set>
#include <string>

using namespace metaroce::proto;

TEST_CASE("opcode_table__header_lengths_follow_the_spec") {
  CHECK(header_length(Opcode::kSend) == 28);
  CHECK(header_length(Opcode::kSendImm) == 32);
  CHECK(header_length(Opcode::kWrite) == 40);
  CHECK(header_length(Opcode::kWriteImm) == 44);
  CHECK(header_length(Opcode::kReadReq) == 40);
  CHECK(header_length(Opcode::kReadResp) == 24);
  CHECK(header_length(Opcode::kAtomicCmpSwap) == 52);
  CHECK(header_length(Opcode::kAtomicFetchAdd) == 52);
  CHECK(header_length(Opcode::kAtomicResp) == 32);
  CHECK(header_length(Opcode::kAck) == 52);
  CHECK(header_length(Opcode::kNack) == 32);
  CHECK(header_length(Opcode::kProbe) == 32);
  CHECK(header_length(Opcode::kProbeReply) == 32);
  CHECK(header_length(Opcode::kSendInv) == 32);  // MBTH + SETH + IETH (§15.2)
  CHECK(header_length(static_cast<Opcode>(0x00)) == 0);
  CHECK(header_length(static_cast<Opcode>(0xFF)) == 0);
}

TEST_CASE("opcode_table__extension_order") {
  auto exts = [](Opcode op) {
    std::string s;
    const OpcodeInfo* i = find_opcode(op);
    for (size_t k = 0; k < i->ext_count(); ++k) s += std::string(ext_info(i->exts[k]).name) + ",";
    return s;
  };
  CHECK(exts(Opcode::kSend) == "SETH,");
  CHECK(exts(Opcode::kSendImm) == "SETH,IMM,");
  CHECK(exts(Opcode::kWrite) == "RETH,");
  CHECK(exts(Opcode::kWriteImm) == "RETH,IMM,");
  CHECK(exts(Opcode::kReadReq) == "RETH,");
  CHECK(exts(Opcode::kReadResp) == "");
  CHECK(exts(Opcode::kAtomicCmpSwap) == "AtomicETH,");
  CHECK(exts(Opcode::kAtomicFetchAdd) == "AtomicETH,");
  CHECK(exts(Opcode::kAtomicResp) == "AtomicAckETH,");
  CHECK(exts(Opcode::kAck) == "ACKH,");
  CHECK(exts(Opcode::kNack) == "NACKH,");
  CHECK(exts(Opcode::kProbe) == "PROBEH,");
  CHECK(exts(Opcode::kProbeReply) == "PROBEH,");
  CHECK(exts(Opcode::kSendInv) == "SETH,IETH,");
  // UC (§14): RC's request layouts.
  CHECK(exts(Opcode::kUcSend) == "SETH,");
  CHECK(exts(Opcode::kUcSendImm) == "SETH,IMM,");
  CHECK(exts(Opcode::kUcWrite) == "RETH,");
  CHECK(exts(Opcode::kUcWriteImm) == "RETH,IMM,");
}

TEST_CASE("opcode_table__payload_and_kind") {
  std::set<std::string> with_payload;
  for (const auto& row : kOpcodeTable)
    if (row.payload) with_payload.insert(row.name);
  CHECK(with_payload ==
        std::set<std::string>{"SEND", "SEND_IMM", "SEND_INV", "RDMA_WRITE", "RDMA_WRITE_IMM", "RDMA_READ_RESP",
                              "CM_REQ", "CM_MRA", "CM_REJ", "CM_REP", "CM_RTU", "CM_DREQ",
                              "CM_DREP", "UD_SEND", "UD_SEND_IMM", "UC_SEND", "UC_SEND_IMM",
                              "UC_RDMA_WRITE", "UC_RDMA_WRITE_IMM"});
  // Only CM private data is bounded by the table (§12.4: IB CM's limits).
  for (const auto& row : kOpcodeTable)
    CHECK((row.max_payload != kUnboundedPayload) == (row.ext_count() == 1 && row.exts[0] == Ext::kCmh));
  CHECK(find_opcode(Opcode::kCmReq)->max_payload == 92);
  CHECK(find_opcode(Opcode::kCmRep)->max_payload == 196);
  CHECK(find_opcode(Opcode::kCmRej)->max_payload == 148);
  CHECK(find_opcode(Opcode::kReadReq)->kind == OpKind::kRequest);
  CHECK(find_opcode(Opcode::kReadResp)->kind == OpKind::kResponse);
  CHECK(find_opcode(Opcode::kAtomicResp)->kind == OpKind::kResponse);
  CHECK(find_opcode(Opcode::kAck)->kind == OpKind::kControl);
  CHECK(find_opcode(Opcode::kUdSend)->kind == OpKind::kDatagram);
  CHECK(find_opcode(Opcode::kUdSendImm)->header_len == kMbthLen + kDethLen + kImmLen);
}

TEST_CASE("opcode_table__every_raw_byte_maps_to_its_row_or_nothing") {
  int known = 0;
  for (int raw = 0; raw < 256; ++raw) {
    const OpcodeInfo* i = find_opcode(static_cast<uint8_t>(raw));
    if (i == nullptr) {
      CHECK(std::string(to_string(static_cast<Opcode>(raw))) == "UNKNOWN");
      continue;
    }
    ++known;
    CHECK(static_cast<int>(i->op) == raw);
    CHECK(std::string(to_string(i->op)) == i->name);
  }
  CHECK(known == static_cast<int>(kOpcodeTable.size()));
}
