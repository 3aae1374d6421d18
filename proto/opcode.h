// The MetaRoCE opcode table: the one place that says, per opcode, which
// extension headers follow the MBTH (in wire order), how long the headers
// are, whether a payload may follow, and what role the packet plays. Both
// the parser and the builder (proto/packet.cc) and the Wireshark dissector's
// test are driven by it. Normative text: docs/protocol.md §4.
//
// Adding an opcode (docs/protocol.md §10 has the same list):
//   1. Pick an unused value in Opcode (proto/packet.h); never reuse a retired
//      one. Requests 0x01-0x0F, responses/control 0x10-0x1F, datagrams
//      0x20-0x23 (§13), 0x80-0xFF are
//      reserved for vendor experiments.
//   2. If it needs a new extension header: add its struct + k...Len to
//      packet.h, a member to Packet, an Ext value and a kExtTable row here,
//      and its read/write functions in packet.cc (kExtCodecs).
//   3. Add one row to kOpcodeTable below (name, kind, payload, exts, and
//      max_payload if the payload has a bound, as CM private data does).
//   4. docs/protocol.md: opcode list (§4), header diagram (§3), semantics.
//   5. tools/wireshark/metaroce.lua: opcode name and any new header fields.
//   6. A golden vector tests/vectors/<name>_ipv4|ipv6.txt and the opcode in
//      tests/vectors/gen.py (it fills in the hex), then refresh the seeds
//      (tests/vectors/gen.py --corpus tests/fuzz-corpus) and run tools/fuzz.
//   7. The engine (firmware-model/) must handle or count-and-drop it; old
//      receivers drop it as kUnknownOpcode (counted), which is the v1
//      extension rule (§9).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

#include "proto/packet.h"

namespace metaroce::proto {

// Extension headers (docs/protocol.md §3.2-§3.9).
enum class Ext : uint8_t { kNone, kReth, kSeth, kImm, kAtomicEth, kAtomicAckEth, kAckh, kNackh, kProbeh, kCmh, kDeth, kIeth };

struct ExtInfo {
  Ext ext;
  const char* name;  // as in ParseError::where and the dissector: "RETH"
  size_t length;
};

inline constexpr std::array<ExtInfo, 12> kExtTable = {{
    {Ext::kNone, "", 0},
    {Ext::kReth, "RETH", kRethLen},
    {Ext::kSeth, "SETH", kSethLen},
    {Ext::kImm, "IMM", kImmLen},
    {Ext::kAtomicEth, "AtomicETH", kAtomicEthLen},
    {Ext::kAtomicAckEth, "AtomicAckETH", kAtomicAckEthLen},
    {Ext::kAckh, "ACKH", kAckhLen},
    {Ext::kNackh, "NACKH", kNackhLen},
    {Ext::kProbeh, "PROBEH", kProbehLen},
    {Ext::kCmh, "CMH", kCmhLen},
    {Ext::kDeth, "DETH", kDethLen},
    {Ext::kIeth, "IETH", kIethLen},
}};

constexpr const ExtInfo& ext_info(Ext e) { return kExtTable[static_cast<size_t>(e)]; }

// What a packet is for (docs/protocol.md §4).
enum class OpKind : uint8_t {
  kRequest,   // requester -> responder, consumes one PSN
  kResponse,  // responder -> requester data/result (READ_RESP, ATOMIC_RESP)
  kControl,   // ACK, NACK, PROBE, PROBE_REPLY: no PSN of their own
  kDatagram,  // UD_SEND*: unreliable, one packet, never acknowledged (§13)
};

inline constexpr size_t kMaxExts = 2;
// max_payload of opcodes whose payload is bounded only by the MTU.
inline constexpr size_t kUnboundedPayload = SIZE_MAX;

struct OpcodeInfo {
  Opcode op;
  const char* name;  // to_string(Opcode), dissector name
  OpKind kind;
  bool payload;                      // payload bytes may follow the headers
  std::array<Ext, kMaxExts> exts;    // in wire order; Ext::kNone pads
  size_t max_payload = kUnboundedPayload;  // more is kBadLength (CM private data, §12.4)
  size_t header_len = 0;             // MBTH + exts; filled in by make_table

  constexpr size_t ext_count() const {
    size_t n = 0;
    while (n < kMaxExts && exts[n] != Ext::kNone) ++n;
    return n;
  }
};

namespace detail {
constexpr std::array<OpcodeInfo, 27> make_table(std::array<OpcodeInfo, 27> t) {
  for (auto& row : t) {
    row.header_len = kMbthLen;
    for (Ext e : row.exts) row.header_len += ext_info(e).length;
  }
  return t;
}
}  // namespace detail

// THE opcode table. One row per opcode; see the checklist at the top.
inline constexpr std::array<OpcodeInfo, 27> kOpcodeTable = detail::make_table({{
    // opcode                  name                kind               payload exts
    {Opcode::kSend,           "SEND",             OpKind::kRequest,  true,  {Ext::kSeth, Ext::kNone}},
    {Opcode::kSendImm,        "SEND_IMM",         OpKind::kRequest,  true,  {Ext::kSeth, Ext::kImm}},
    {Opcode::kWrite,          "RDMA_WRITE",       OpKind::kRequest,  true,  {Ext::kReth, Ext::kNone}},
    {Opcode::kWriteImm,       "RDMA_WRITE_IMM",   OpKind::kRequest,  true,  {Ext::kReth, Ext::kImm}},
    {Opcode::kReadReq,        "RDMA_READ_REQ",    OpKind::kRequest,  false, {Ext::kReth, Ext::kNone}},
    {Opcode::kReadResp,       "RDMA_READ_RESP",   OpKind::kResponse, true,  {Ext::kNone, Ext::kNone}},
    {Opcode::kAtomicCmpSwap,  "ATOMIC_CMP_SWAP",  OpKind::kRequest,  false, {Ext::kAtomicEth, Ext::kNone}},
    {Opcode::kAtomicFetchAdd, "ATOMIC_FETCH_ADD", OpKind::kRequest,  false, {Ext::kAtomicEth, Ext::kNone}},
    {Opcode::kAtomicResp,     "ATOMIC_RESP",      OpKind::kResponse, false, {Ext::kAtomicAckEth, Ext::kNone}},
    // Memory windows (§15): SEND that invalidates the responder's rkey.
    {Opcode::kSendInv,        "SEND_INV",         OpKind::kRequest,  true,  {Ext::kSeth, Ext::kIeth}},
    {Opcode::kAck,            "ACK",              OpKind::kControl,  false, {Ext::kAckh, Ext::kNone}},
    {Opcode::kNack,           "NACK",             OpKind::kControl,  false, {Ext::kNackh, Ext::kNone}},
    {Opcode::kProbe,          "PROBE",            OpKind::kControl,  false, {Ext::kProbeh, Ext::kNone}},
    {Opcode::kProbeReply,     "PROBE_REPLY",      OpKind::kControl,  false, {Ext::kProbeh, Ext::kNone}},
    // Connection management (§12): control, private data as payload, bounded.
    {Opcode::kCmReq,          "CM_REQ",           OpKind::kControl,  true,  {Ext::kCmh, Ext::kNone}, 92},
    {Opcode::kCmMra,          "CM_MRA",           OpKind::kControl,  true,  {Ext::kCmh, Ext::kNone}, 222},
    {Opcode::kCmRej,          "CM_REJ",           OpKind::kControl,  true,  {Ext::kCmh, Ext::kNone}, 148},
    {Opcode::kCmRep,          "CM_REP",           OpKind::kControl,  true,  {Ext::kCmh, Ext::kNone}, 196},
    {Opcode::kCmRtu,          "CM_RTU",           OpKind::kControl,  true,  {Ext::kCmh, Ext::kNone}, 224},
    {Opcode::kCmDreq,         "CM_DREQ",          OpKind::kControl,  true,  {Ext::kCmh, Ext::kNone}, 220},
    {Opcode::kCmDrep,         "CM_DREP",          OpKind::kControl,  true,  {Ext::kCmh, Ext::kNone}, 224},
    // Datagram service (§13): one packet per message.
    {Opcode::kUdSend,         "UD_SEND",          OpKind::kDatagram, true,  {Ext::kDeth, Ext::kNone}},
    {Opcode::kUdSendImm,      "UD_SEND_IMM",      OpKind::kDatagram, true,  {Ext::kDeth, Ext::kImm}},
    // Unreliable connected service (§14): RC's request layouts, no responses.
    {Opcode::kUcSend,         "UC_SEND",          OpKind::kRequest,  true,  {Ext::kSeth, Ext::kNone}},
    {Opcode::kUcSendImm,      "UC_SEND_IMM",      OpKind::kRequest,  true,  {Ext::kSeth, Ext::kImm}},
    {Opcode::kUcWrite,        "UC_RDMA_WRITE",    OpKind::kRequest,  true,  {Ext::kReth, Ext::kNone}},
    {Opcode::kUcWriteImm,     "UC_RDMA_WRITE_IMM", OpKind::kRequest, true,  {Ext::kReth, Ext::kImm}},
}});

// The table row for a raw opcode byte, or nullptr if it is not in the table.
const OpcodeInfo* find_opcode(uint8_t raw);
inline const OpcodeInfo* find_opcode(Opcode op) { return find_opcode(static_cast<uint8_t>(op)); }

const char* to_string(OpKind k);

}  // namespace metaroce::proto
