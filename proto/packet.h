// MetaRoCE wire protocol v1: in-memory packet model, codec entry points.
//
// Normative specification: docs/protocol.md. Every field below is specified
// there once; the section is named next to each struct. The codec never
// casts buffers to structs: it reads and writes through the bounds-checked
// Reader/Writer in proto/bytes.h, driven by the opcode table in
// proto/opcode.h.
//
// Layout of a MetaRoCE packet inside UDP (destination port kUdpPort):
//
//   MBTH (24 B) | extension headers per opcode | payload | ICRC (4 B)
//
// All multi-byte fields are big-endian (network order).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <variant>

namespace metaroce::proto {

// docs/protocol.md §2: UDP destination port. Not 4791 (RoCEv2) nor 4793 (UET).
inline constexpr uint16_t kUdpPort = 4796;
inline constexpr uint8_t kVersion = 1;
inline constexpr size_t kMbthLen = 24;
inline constexpr size_t kIcrcLen = 4;

// docs/protocol.md §4. Adding an opcode: see the checklist in proto/opcode.h.
enum class Opcode : uint8_t {
  kSend = 0x01,
  kSendImm = 0x02,
  kWrite = 0x03,
  kWriteImm = 0x04,
  kReadReq = 0x05,
  kReadResp = 0x06,
  kAtomicCmpSwap = 0x07,
  kAtomicFetchAdd = 0x08,
  kAtomicResp = 0x09,
  // Memory windows (docs/protocol.md §15): a SEND that invalidates the
  // responder's window named by its IETH. 0x0B is reserved for it too.
  kSendInv = 0x0A,
  kAck = 0x10,
  kNack = 0x11,
  kProbe = 0x12,
  kProbeReply = 0x13,
  // Connection management (docs/protocol.md §12; proto/cm.h).
  kCmReq = 0x18,
  kCmMra = 0x19,
  kCmRej = 0x1A,
  kCmRep = 0x1B,
  kCmRtu = 0x1C,
  kCmDreq = 0x1D,
  kCmDrep = 0x1E,
  // Datagram service (docs/protocol.md §13): unreliable, one packet per
  // message, never acknowledged.
  kUdSend = 0x20,
  kUdSendImm = 0x21,
  // Unreliable connected service (docs/protocol.md §14): the RC request
  // layouts, never acknowledged, a PSN gap drops the message.
  kUcSend = 0x24,
  kUcSendImm = 0x25,
  kUcWrite = 0x26,
  kUcWriteImm = 0x27,
};

// MBTH flags (docs/protocol.md §3.1).
enum MbthFlag : uint16_t {
  kFlagSolicited = 1u << 0,   // SE: raise a solicited completion event
  kFlagAckReq = 1u << 1,      // receiver should acknowledge immediately
  kFlagRetransmit = 1u << 2,  // this packet is a retransmission
  kFlagLast = 1u << 3,        // last packet (highest offset) of its message
};

// docs/protocol.md §3.1: MetaRoCE Base Transport Header, 24 bytes.
//   0: version(4) | reserved(4)     1: opcode     2-3: flags
//   4: path_id                       5-7: dest_qpn (24 bits)
//   8-11: psn   12-15: msn   16-19: offset   20-23: timestamp
struct Mbth {
  uint8_t version = kVersion;
  Opcode opcode = Opcode::kSend;
  uint16_t flags = 0;
  uint8_t path_id = 0;     // entropy index the sender used; echoed in ACKs
  uint32_t dest_qpn = 0;   // 24 bits
  uint32_t psn = 0;        // packet sequence number (32-bit serial arithmetic)
  uint32_t msn = 0;        // message sequence number of the request
  uint32_t offset = 0;     // byte offset of this payload within the message
  uint32_t timestamp = 0;  // sender's clock, ns, truncated (echoed for RTT)
  bool operator==(const Mbth&) const = default;
};

// docs/protocol.md §3.2: RDMA Extended Transport Header (WRITE*, READ_REQ).
struct Reth {
  uint64_t va = 0;      // start of the message's remote buffer
  uint32_t rkey = 0;
  uint32_t length = 0;  // total message length in bytes
  bool operator==(const Reth&) const = default;
};
inline constexpr size_t kRethLen = 16;

// docs/protocol.md §3.3: SEND Extended Transport Header (SEND*).
struct Seth {
  uint32_t length = 0;  // total message length in bytes
  bool operator==(const Seth&) const = default;
};
inline constexpr size_t kSethLen = 4;

inline constexpr size_t kImmLen = 4;  // §3.4 immediate data, network order

// docs/protocol.md §15.2: Invalidate Extended Transport Header (SEND_INV):
// the responder's rkey to invalidate, in every packet of the message.
struct Ieth {
  uint32_t rkey = 0;
  bool operator==(const Ieth&) const = default;
};
inline constexpr size_t kIethLen = 4;

// docs/protocol.md §3.5: Atomic Extended Transport Header.
struct AtomicEth {
  uint64_t va = 0;
  uint32_t rkey = 0;
  uint64_t swap_add = 0;  // swap value (CMP_SWAP) or addend (FETCH_ADD)
  uint64_t compare = 0;   // compare value (CMP_SWAP), 0 for FETCH_ADD
  bool operator==(const AtomicEth&) const = default;
};
inline constexpr size_t kAtomicEthLen = 28;

// docs/protocol.md §3.6: Atomic response: the value before the operation.
struct AtomicAckEth {
  uint64_t original = 0;
  bool operator==(const AtomicAckEth&) const = default;
};
inline constexpr size_t kAtomicAckEthLen = 8;

// docs/protocol.md §3.7: Acknowledgement header (ACK). Selective ack:
// bit i of sack (LSB = bit 0) set means PSN cum_psn + 1 + i was received.
// cum_psn itself is the first PSN NOT yet received (all before it were).
struct Ackh {
  uint32_t cum_psn = 0;
  uint64_t sack = 0;
  uint32_t echo_ts = 0;    // timestamp of the packet that triggered this ACK
  uint32_t credit = 0;     // receiver grant: packets the sender may have in flight
  uint16_t ce_count = 0;   // ECN CE-marked packets since the previous ACK
  uint8_t echo_path = 0;   // path_id of the triggering packet
  uint8_t ack_flags = 0;   // kAckFlag* below; other bits reserved
  uint32_t rcv_msn = 0;    // messages completed in order at the responder
  bool operator==(const Ackh&) const = default;
};
inline constexpr size_t kAckhLen = 28;
// Ackh.ack_flags bits (docs/protocol.md §3.7).
inline constexpr uint8_t kAckFlagCe = 1u << 0;   // triggering packet was CE-marked
inline constexpr uint8_t kAckFlagDup = 1u << 1;  // triggering packet was a duplicate

// docs/protocol.md §3.8: NACK reason codes.
enum class NackReason : uint8_t {
  kRnr = 1,                  // receiver not ready (no receive WQE)
  kRemoteAccessError = 2,    // key, bounds, PD or access-flag check failed
  kInvalidRequest = 3,       // malformed or unsupported request
  kRemoteOperationError = 4, // responder could not perform the operation
  kSequenceError = 5,        // PSN outside the receive window
  kTrimmed = 6,              // payload trimmed by the fabric; header intact
};

struct Nackh {
  NackReason reason = NackReason::kInvalidRequest;
  uint8_t rnr_timer = 0;  // RNR: IB-encoded minimum RNR delay (0..31)
  uint32_t psn = 0;       // the PSN being negatively acknowledged
  bool operator==(const Nackh&) const = default;
};
inline constexpr size_t kNackhLen = 8;  // reason, rnr_timer, 2 reserved, psn

// docs/protocol.md §3.9: keepalive / path probe.
struct Probeh {
  uint32_t nonce = 0;
  uint32_t echo_ts = 0;  // PROBE_REPLY: the probe's timestamp
  bool operator==(const Probeh&) const = default;
};
inline constexpr size_t kProbehLen = 8;

// docs/protocol.md §13.2: Datagram Extended Transport Header (UD_SEND*).
//   0-3: qkey   4: reserved   5-7: src_qpn (24 bits)
struct Deth {
  uint32_t qkey = 0;     // must equal the destination QP's Q_Key (§13.4)
  uint32_t src_qpn = 0;  // 24 bits: the sending QP (ibv_wc.src_qp at the receiver)
  bool operator==(const Deth&) const = default;
};
inline constexpr size_t kDethLen = 8;

// docs/protocol.md §12.2: Connection Management Header, on every CM_*
// opcode. One layout for all seven messages; which fields a message uses is
// §12.3's table, and proto/cm.h checks them (check_cm). The private data is
// the packet's payload.
struct Cmh {
  uint32_t local_comm_id = 0;   // the sender's connection id (random, nonzero)
  uint32_t remote_comm_id = 0;  // the receiver's connection id (0 in REQ)
  uint64_t service_id = 0;      // port space << 16 | port (IBA Annex A11)
  uint8_t qp_type = 0;          // verbs IBV_QPT_RC (2) or IBV_QPT_UD (4)
  uint32_t qpn = 0;             // 24 bits: the sender's QP
  uint32_t start_psn = 0;       // first PSN the sender's QP will send
  uint32_t qkey = 0;            // UD: the sender's Q_Key
  uint16_t src_port = 0;        // REQ: the initiator's rdma_cm port
  uint8_t responder_resources = 0;
  uint8_t initiator_depth = 0;
  uint8_t cm_timeout = 0;       // 5 bits, 4.096 us * 2^x: REQ response / MRA service timeout
  uint8_t max_cm_retries = 0;   // 4 bits
  uint8_t path_mtu = 0;         // 4 bits, verbs enum ibv_mtu (1 = 256 .. 5 = 4096)
  uint8_t retry_count = 0;      // 3 bits
  uint8_t rnr_retry = 0;        // 3 bits
  bool srq = false;
  uint16_t reason = 0;          // REJ: reject reason (IB CM values, proto/cm.h)
  uint8_t message = 0;          // REJ, MRA: which message is rejected / delayed
  bool operator==(const Cmh&) const = default;
};
inline constexpr size_t kCmhLen = 40;

// A parsed or to-be-built transport packet. Which members are meaningful is
// decided by the opcode table (proto/opcode.h); the others stay defaulted.
struct Packet {
  Mbth mbth;
  Reth reth;
  Seth seth;
  uint32_t imm = 0;  // host order here; network order on the wire
  AtomicEth atomic;
  AtomicAckEth atomic_ack;
  Ackh ack;
  Nackh nack;
  Probeh probe;
  Cmh cm;
  Deth deth;
  Ieth ieth;
  std::span<const uint8_t> payload;  // borrowed from the parsed buffer
};

// What went wrong in a parse, and where (byte offset from the start of the
// buffer handed to the parser).
enum class ParseErrorCode : uint8_t {
  kTruncated,       // buffer ends inside the named header
  kBadVersion,      // MBTH version is not kVersion
  kUnknownOpcode,   // opcode not in the table
  kBadIcrc,         // CRC32C mismatch
  kBadLength,       // payload length not allowed for this opcode
  kNotIp,           // EtherType is neither IPv4 nor IPv6 (frame parser)
  kBadIpHeader,     // IP version/IHL/length inconsistent
  kNotUdp,          // IP protocol is not UDP
  kWrongPort,       // UDP destination port is not kUdpPort
  kBadUdpLength,    // UDP length inconsistent with the IP payload
  kBadUdpChecksum,  // UDP checksum wrong (IPv4: nonzero and wrong; IPv6: zero or wrong)
  kNotTrimmed,      // parse_trimmed_frame: not the trim DSCP, not cut, or not a payload request
};

// For kTruncated, offset is the first byte that is missing (the buffer's or
// the UDP datagram's length) and where names the header it falls in:
// "Ethernet", "VLAN", "IPv4", "IPv6", "UDP", "MBTH", an extension header
// ("RETH", ...), "payload" or "ICRC".
struct ParseError {
  ParseErrorCode code;
  size_t offset;       // byte where the problem was found
  const char* where;   // header or field name, e.g. "RETH", "MBTH.version"
  std::string message() const;  // "truncated RETH at byte 28"
  bool operator==(const ParseError& o) const {
    return code == o.code && offset == o.offset && std::string(where) == o.where;
  }
};

const char* to_string(ParseErrorCode code);
const char* to_string(Opcode op);       // "SEND", "RDMA_WRITE_IMM", ...
const char* to_string(NackReason r);

// Result of a parse: a value or the precise error.
template <class T>
class Parsed {
 public:
  Parsed(T v) : v_(std::move(v)) {}                 // NOLINT: implicit by design
  Parsed(ParseError e) : v_(e) {}                   // NOLINT
  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }
  const T& value() const { return std::get<0>(v_); }
  T& value() { return std::get<0>(v_); }
  const ParseError& error() const { return std::get<1>(v_); }
 private:
  std::variant<T, ParseError> v_;
};

// ---- transport layer: MBTH .. ICRC (the UDP payload) ----

// Header bytes (MBTH + extension headers) for this opcode.
size_t header_length(Opcode op);
// Total UDP payload length: headers + payload + ICRC.
size_t transport_length(const Packet& p);
// Writes the UDP payload of p into out (computes the ICRC). Returns bytes
// written, or 0 if out is too small or the opcode is unknown. A payload
// that already sits at its place in out (p.payload.data() ==
// out.data() + header_length) is left there, not copied: a transmitter
// reads the payload into the frame first and builds the headers around it
// (payload_offset, docs/firmware-hal.md §Transmit buffers).
size_t build_transport(const Packet& p, std::span<uint8_t> out);
// Parses a UDP payload. The ICRC is verified. payload borrows from bytes.
Parsed<Packet> parse_transport(std::span<const uint8_t> bytes);

// ---- full frames: Ethernet / IPv4 or IPv6 / UDP / MetaRoCE ----

using MacAddr = std::array<uint8_t, 6>;

// An IPv4 address is stored IPv4-mapped (::ffff:a.b.c.d), as in a RoCE v2
// GID; is_v4() tells which IP header a frame carries.
struct IpAddr {
  std::array<uint8_t, 16> bytes{};
  bool is_v4() const;
  bool is_multicast() const;  // 224.0.0.0/4 (IPv4-mapped) or ff00::/8
  static IpAddr v4(uint32_t host_order);
  uint32_t v4_host_order() const;
  bool operator==(const IpAddr&) const = default;
};

// docs/protocol.md §2: encapsulation fields the sender chooses.
struct FrameHeaders {
  MacAddr dst_mac{};
  MacAddr src_mac{};
  IpAddr src_ip;
  IpAddr dst_ip;
  uint16_t src_port = 0xC000;  // path entropy (§2.2)
  uint8_t dscp = 0;
  uint8_t ecn = 0b10;          // ECT(0) (§2.3)
  uint8_t ttl = 64;
  bool operator==(const FrameHeaders&) const = default;
};

inline constexpr size_t kEthLen = 14;
inline constexpr size_t kIpv4Len = 20;
inline constexpr size_t kIpv6Len = 40;
inline constexpr size_t kUdpLen = 8;

// Bytes before the MetaRoCE MBTH for these headers (Ethernet+IP+UDP).
size_t encap_length(const FrameHeaders& h);
// Where the payload of a packet with opcode op starts in a frame with these
// headers (encap_length + header_length); 0 for an unknown opcode.
size_t payload_offset(const FrameHeaders& h, Opcode op);
// Builds a whole frame. Returns bytes written, or 0 if out is too small. A
// payload already at payload_offset in out stays in place (build_transport).
size_t build_frame(const FrameHeaders& h, const Packet& p, std::span<uint8_t> out);

struct Frame {
  FrameHeaders headers;  // ecn: the IP header's ECN bits as received
  Packet packet;
};
Parsed<Frame> parse_frame(std::span<const uint8_t> bytes);

// docs/protocol.md §13.5: the 40-byte Global Route Header a UD receive
// finds before the payload, as RoCE v2 fills it: the IPv6 header of the
// datagram, or 20 zero bytes and then its IPv4 header (checksum included).
// transport_len: the UDP payload's length (transport_length of the packet).
inline constexpr size_t kGrhLen = 40;
std::array<uint8_t, kGrhLen> build_grh(const FrameHeaders& h, size_t transport_len);

// A request a switch trimmed to its headers (docs/protocol.md §3.8): the
// switch set the IP DSCP to `trimmed_dscp` and cut the frame after the
// MBTH, while the IP and UDP lengths still claim the whole packet. Yields
// the addresses and the MBTH of a SEND/WRITE (with or without IMM) packet;
// there is no ICRC to check (it covered the cut bytes), so a receiver may
// only answer it with NACK TRIMMED, never act on it otherwise.
struct TrimmedFrame {
  FrameHeaders headers;
  Mbth mbth;
};
Parsed<TrimmedFrame> parse_trimmed_frame(std::span<const uint8_t> bytes, uint8_t trimmed_dscp);

// One line naming the opcode and the fields its headers carry, e.g.
// "RDMA_WRITE qpn=0x000012 psn=5 msn=2 off=0 flags=0x8 path=3 ts=0
// reth.va=0x1000 reth.rkey=0x42 reth.length=4096 payload=4096B".
std::string to_string(const Packet& p);
// True if both packets carry the same header fields and payload bytes
// (payload compared by content, not by address).
bool operator==(const Packet& a, const Packet& b);

// CRC32C (Castagnoli), as used for the ICRC (§5).
uint32_t crc32c(std::span<const uint8_t> bytes, uint32_t crc = 0);
// Writes the ICRC of everything before the last kIcrcLen bytes of a
// transport packet into those bytes. False, and nothing written, if the
// packet is shorter than an ICRC.
bool seal_icrc(std::span<uint8_t> packet);

// Checksums of the encapsulation (docs/protocol.md §2.1, §2.4), for tools
// that edit a built frame (tools/conformance crafts malformed ones) and must
// keep every other field valid. ipv4_header_checksum: of the 20-byte header
// (IHL * 4 bytes, options too) with its checksum field summed as zero. udp_checksum: of a UDP datagram
// (header + payload, its checksum field summed as zero) between src and dst,
// IPv4 or IPv6 by src; a computed 0 is returned as 0xFFFF.
uint16_t ipv4_header_checksum(std::span<const uint8_t> header);
uint16_t udp_checksum(const IpAddr& src, const IpAddr& dst, std::span<const uint8_t> udp);

// 32-bit serial-number arithmetic for PSNs and MSNs (RFC 1982 style).
inline bool seq_lt(uint32_t a, uint32_t b) { return static_cast<int32_t>(a - b) < 0; }
inline bool seq_le(uint32_t a, uint32_t b) { return static_cast<int32_t>(a - b) <= 0; }

}  // namespace metaroce::proto
