// A real conversation between two reference engines (the DUT and its
// peer) on a virtual-time wire, captured at the DUT's side as a pcap file
// (the frames the DUT sent, and the peer's frames that reached it). The
// peer writes, sends, reads and runs atomics against the DUT, with one
// packet lost on the way so ACKs carry SACK bitmaps, and ends with a
// WRITE under a bad R_Key the DUT NACKs.
#pragma once

#include <cstdint>
#include <vector>

#include "proto/packet.h"

namespace metaroce::pcaptest {

inline constexpr uint32_t kDutIp = 0x0A000001, kPeerIp = 0x0A000002;

struct Conversation {
  std::vector<uint8_t> pcap;  // the capture file
  uint64_t frames = 0;
  uint64_t peer_completions = 0, peer_errors = 0;  // on the peer's send CQ
  uint64_t lost = 0;                              // peer packets dropped before the DUT
};

// bad_key: end with the WRITE the DUT NACKs (REMOTE_ACCESS_ERROR).
Conversation run_conversation(bool bad_key);

}  // namespace metaroce::pcaptest
