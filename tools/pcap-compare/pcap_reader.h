// A bounded reader of capture files: classic pcap (either byte order,
// micro- or nanosecond timestamps) and pcapng (SHB, IDB, EPB, SPB; other
// blocks skipped), as tcpdump, dumpcap/tshark and `metaroce-ctl capture`
// write them. Only Ethernet link types are accepted (LINKTYPE_ETHERNET, 1).
//
// Every length in the file is checked against what is left before it is
// used; a file that breaks a rule is refused with a reason naming the
// record and byte ("pcapng block at byte 172: length 9 is not a multiple of
// 4"), never half-read.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace metaroce::pcap {

inline constexpr uint32_t kLinkEthernet = 1;
inline constexpr uint32_t kMaxSnaplen = 262144;          // tcpdump's maximum
inline constexpr size_t kMaxFileBytes = size_t{1} << 30;  // 1 GiB

struct Record {
  uint64_t number = 0;       // 1-based, as Wireshark's frame number
  uint64_t time_ns = 0;      // capture time, ns since the epoch
  size_t file_offset = 0;    // where the frame's first byte is in the file
  uint32_t orig_len = 0;     // length on the wire (>= frame.size())
  std::span<const uint8_t> frame;  // borrows Capture::bytes
  bool cut() const { return frame.size() < orig_len; }
};

struct Capture {
  std::vector<uint8_t> bytes;  // the whole file; records borrow from it
  bool pcapng = false;
  std::vector<Record> records;
};

// Parses bytes (moved into out->bytes). 0, or EINVAL with *why naming the
// problem; out->records is then empty.
int parse_capture(std::vector<uint8_t> bytes, Capture* out, std::string* why);
// Reads and parses a file (at most kMaxFileBytes). 0, or an errno with *why.
int read_capture(const std::string& path, Capture* out, std::string* why);

}  // namespace metaroce::pcap
