// `metaroce-ctl capture DEV -w FILE [--count N] [--duration S]`: a pcap of
// the device's MetaRoCE traffic (UDP destination port 4796) on its
// interface, ready for tshark/Wireshark with tools/wireshark/metaroce.lua.
//
// It reads an AF_PACKET socket bound to the interface, as tcpdump does; run
// it in the interface's network namespace. Frames that AF_XDP redirects
// past the kernel stack (metaroced --io xdp) are not seen there: capture a
// daemon running --io packet, or the peer's side.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

namespace metaroce::ctl {

// The pcap file header (LINKTYPE_ETHERNET, microsecond timestamps).
std::vector<uint8_t> pcap_file_header(uint32_t snaplen);
// One record: header (time, captured and original length) then the frame,
// cut at snaplen.
std::vector<uint8_t> pcap_record(uint64_t time_us, std::span<const uint8_t> frame,
                                 uint32_t snaplen);
// Is this Ethernet frame IPv4 or IPv6 UDP to port 4796 (optionally behind
// one 802.1Q tag)? Bounds-checked; false for anything short or odd.
bool is_metaroce_frame(std::span<const uint8_t> frame);

struct CaptureRequest {
  std::string netdev, file;
  uint64_t count = 0;        // stop after this many frames; 0 = no limit
  uint32_t duration_s = 0;   // stop after this long; 0 = no limit
  uint32_t snaplen = 9216;
  std::function<void()> ready;  // called once the socket is bound and the file open
};
// Captures until count, duration or SIGINT/SIGTERM. 0 with *frames set, or
// an errno with *why.
int capture(const CaptureRequest& r, uint64_t* frames, std::string* why);

}  // namespace metaroce::ctl
