#include "tools/pcap-compare/rules.h"

namespace metaroce::pcapcmp {
namespace {

constexpr Rule kRules[] = {
    {"ack.cum_psn", "§3.7, §6.4",
     "cum_psn is the first request PSN the responder has not received; every PSN before it was received", ""},
    {"ack.sack", "§3.7, §6.4",
     "SACK bit i is set exactly when PSN cum_psn + 1 + i has been received", "R3.7-1"},
    {"ack.rcv_msn", "§3.7, §6.2",
     "rcv_msn counts the receive-consuming messages completed in order (MSN of the next one)", ""},
    {"ack.ack_flags.D", "§3.7, §6.8", "D is set when the triggering packet was a duplicate", "R6.8-1"},
    {"ack.ack_flags.C", "§3.7, §2.3", "C is set when the triggering packet was CE-marked", ""},
    {"ack.echo_ts", "§3.7, §6.6",
     "echo_ts is the MBTH timestamp of the packet that triggered the ACK (the newest received)", ""},
    {"ack.echo_path", "§3.7, §7.3", "echo_path is the MBTH path_id of the triggering packet", ""},
    {"ack.ce_count", "§3.7, §7.3",
     "ce_count counts CE-marked request packets received since the previous ACK", ""},
    {"ack", "§6.6", "every request packet that is delivered is acknowledged", ""},
    {"mbth.dest_qpn", "§3.1", "a response is addressed to the requester's QPN", ""},
    {"nack.psn", "§3.8, §6.4", "a NACK names the PSN of the request packet it is about", ""},
    {"nack.reason", "§3.8, §6.4",
     "the NACK reason is the one §3.8's table gives for the failed check (RNR, access, invalid, "
     "operation, sequence)", "R3.8-2 R3.8-3 R3.8-4"},
    {"nack.rnr_timer", "§3.8", "an RNR NACK carries the QP's min_rnr_timer (IB encoding)", "R3.8-4"},
    {"nack", "§6.4", "a request that fails validation is answered with a NACK; one that passes is not", "R3.8-2 R3.8-3 R3.8-4"},
    {"read_resp.mbth.psn", "§6.5", "READ_RESP packets carry the READ_REQ's PSN", "R6.5-1"},
    {"read_resp.mbth.msn", "§6.2, §6.5", "READ_RESP packets carry the READ_REQ's MSN", "R6.5-1"},
    {"read_resp.mbth.offset", "§6.3, §6.5",
     "READ_RESP offset is the offset within the READ message; packet k of a range starts k MTUs in", "R6.5-1 R6.5-5"},
    {"read_resp.mbth.flags.L", "§3.1, §6.5", "L is set on the READ_RESP with the highest offset of the range", "R6.5-1"},
    {"read_resp.payload.length", "§6.3, §6.5",
     "every READ_RESP but the last of its range carries exactly MTU bytes", "R6.5-1 R6.3-1"},
    {"read_resp.payload", "§6.5", "READ_RESP carries the bytes of the requested range", "R6.5-1"},
    {"read_resp", "§6.5", "the responder answers a READ_REQ with READ_RESP packets for its whole range", "R6.5-1"},
    {"atomic_resp.mbth.msn", "§6.7", "ATOMIC_RESP carries the request's MSN", ""},
    {"atomic_resp.original", "§3.6, §6.7",
     "ATOMIC_RESP carries the value before the operation; a duplicate replays the cached one", "R6.7-1"},
    {"atomic_resp", "§6.7", "each atomic request is executed once and answered", "R6.7-1"},
    {"probe_reply.echo_ts", "§3.9, §8", "PROBE_REPLY echoes the PROBE's timestamp", "R8-1"},
    {"probe_reply", "§8", "a receiver answers PROBEs for QPs in RTR/RTS", "R8-1"},
    {"icrc", "§5", "the ICRC is the CRC32C of the transport packet", "R5-1"},
    {"udp.checksum", "§2.4", "the UDP checksum is valid (IPv4: zero or valid)", "R2.4-1"},
    {"mbth.version", "§3.1, §9", "the version is 1", "R3.1-1 R9-1"},
    {"mbth.opcode", "§4", "the opcode is one of §4's table", ""},
    {"length", "§3.0", "the packet is as long as its opcode's header chain requires", ""},
};

constexpr Rule kWhole = {"packet", "§6", "the DUT's packet matches the reference's", ""};

}  // namespace

const Rule& rule_for(std::string_view field) {
  for (const Rule& r : kRules)
    if (field == r.field) return r;
  return kWhole;
}

std::span<const Rule> all_rules() { return kRules; }

}  // namespace metaroce::pcapcmp
