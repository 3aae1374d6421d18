// Plants a divergence in a capture file: rewrites one field of one frame
// and rebuilds the frame through the codec (proto/packet.h build_frame), so
// the ICRC and checksums are right again and only that field differs at the
// transport layer. For tests of tools/pcap-compare.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "proto/packet.h"

namespace metaroce::pcaptest {

// The frame number of the nth (1-based) frame sent by `from` with this
// opcode for which `want` holds; 0 if none.
uint64_t find_frame(const std::vector<uint8_t>& file, const proto::IpAddr& from, proto::Opcode op,
                    int nth, bool (*want)(const proto::Packet&) = nullptr);

// Adds `delta` to the field (XORs it for ack.sack and read_resp.payload,
// whose byte 0 it flips) in frame `number`. Fields: mbth.dest_qpn,
// mbth.msn, mbth.offset, ack.cum_psn, ack.sack, ack.rcv_msn, ack.echo_ts,
// nack.psn, nack.reason, reth.length, atomic_resp.original,
// read_resp.payload.
// "" or the reason it cannot.
std::string plant(std::vector<uint8_t>* file, uint64_t number, const std::string& field,
                  uint64_t delta);

}  // namespace metaroce::pcaptest
