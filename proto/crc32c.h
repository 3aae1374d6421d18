// CRC32C internals exposed for tests; the codec's entry point is
// metaroce::proto::crc32c() in proto/packet.h.
#pragma once

#include <cstdint>
#include <span>

namespace metaroce::proto::detail {
// Table-driven slicing-by-8, any CPU.
uint32_t crc32c_sw(std::span<const uint8_t> bytes, uint32_t crc = 0);
// SSE4.2 crc32 instruction when the CPU has it, else the same as crc32c_sw.
uint32_t crc32c_hw(std::span<const uint8_t> bytes, uint32_t crc = 0);
}  // namespace metaroce::proto::detail
