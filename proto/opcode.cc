#include "proto/opcode.h"

namespace metaroce::proto {
namespace {

// Index from raw opcode byte to table row (-1: unknown), built once at
// compile time from kOpcodeTable so the two can never disagree.
constexpr std::array<int8_t, 256> make_index() {
  std::array<int8_t, 256> idx{};
  for (auto& v : idx) v = -1;
  for (size_t i = 0; i < kOpcodeTable.size(); ++i)
    idx[static_cast<uint8_t>(kOpcodeTable[i].op)] = static_cast<int8_t>(i);
  return idx;
}
constexpr std::array<int8_t, 256> kIndex = make_index();

constexpr bool table_is_consistent() {
  for (size_t i = 0; i < kOpcodeTable.size(); ++i) {
    for (size_t j = i + 1; j < kOpcodeTable.size(); ++j)
      if (kOpcodeTable[i].op == kOpcodeTable[j].op) return false;
    const auto& row = kOpcodeTable[i];
    // Ext::kNone only as trailing padding.
    for (size_t k = row.ext_count(); k < kMaxExts; ++k)
      if (row.exts[k] != Ext::kNone) return false;
  }
  for (size_t i = 0; i < kExtTable.size(); ++i)
    if (static_cast<size_t>(kExtTable[i].ext) != i) return false;
  return true;
}
static_assert(table_is_consistent(), "kOpcodeTable: duplicate opcode or misplaced Ext::kNone");

}  // namespace

const OpcodeInfo* find_opcode(uint8_t raw) {
  int8_t i = kIndex[raw];
  return i < 0 ? nullptr : &kOpcodeTable[static_cast<size_t>(i)];
}

const char* to_string(OpKind k) {
  switch (k) {
    case OpKind::kRequest: return "request";
    case OpKind::kResponse: return "response";
    case OpKind::kControl: return "control";
    case OpKind::kDatagram: return "datagram";
  }
  return "?";
}

const char* to_string(Opcode op) {
  const OpcodeInfo* info = find_opcode(op);
  return info ? info->name : "UNKNOWN";
}

size_t header_length(Opcode op) {
  const OpcodeInfo* info = find_opcode(op);
  return info ? info->header_len : 0;
}

}  // namespace metaroce::proto
