#include "tools/pcap-compare/rules.h"

namespace metaroce::pcapcmp {
namespace {

constexpr Rule kRules[] = {
    {"ack.cum_psn", "§3.7, §6.4",
     "cum_psn is the first request PSN the responder has not received; every PSN before it was received"},
    {"ack.sack", "§3.7, §6.4",
     "SACK bit i is set exactly when PSN cum_psn + 1 + i has been received"},
    {"ack.rcv_msn", "§3.7, §6.2",
     "rcv_msn counts the receive-consuming messages completed in order (MSN of the next one)"},
    {"ack.ack_flags.D", "§3.7, §6.8", "D is set when the triggering packet was a duplicate"},
    {"ack.ack_flags.C", "§3.7, §2.3", "C is set when the triggering packet was CE-marked"},
    {"ack.echo_ts", "§3.7, §6.6",
     "echo_ts is the MBTH timestamp of the packet that triggered the ACK (the newest received)"},
    {"ack.echo_path", "§3.7, §7.3", "echo_path is the MBTH path_id of the triggering packet"},
    {"ack.ce_count", "§3.7, §7.3",
     "ce_count counts CE-marked request packets received since the previous ACK"},
    {"ack", "§6.6", "every request packet that is delivered is acknowledged"},
    {"mbth.dest_qpn", "§3.1", "a response is addressed to the requester's QPN"},
    {"nack.psn", "§3.8, §6.4", "a NACK names the PSN of the request packet it is about"},
    {"nack.reason", "§3.8, §6.4",
     "the NACK reason is the one §3.8's table gives for the failed check (RNR, access, invalid, "
     "operation, sequence)"},
    {"nack.rnr_timer", "§3.8", "an RNR NACK carries the QP's min_rnr_timer (IB encoding)"},
    {"nack", "§6.4", "a request that fails validation is answered with a NACK; one that passes is not"},
    {"read_resp.mbth.psn", "§6.5", "READ_RESP packets carry the READ_REQ's PSN"},
    {"read_resp.mbth.msn", "§6.2, §6.5", "READ_RESP packets carry the READ_REQ's MSN"},
    {"read_resp.mbth.offset", "§6.3, §6.5",
     "READ_RESP offset is the offset within the READ message; packet k of a range starts k MTUs in"},
    {"read_resp.mbth.flags.L", "§3.1, §6.5", "L is set on the READ_RESP with the highest offset of the range"},
    {"read_resp.payload.length", "§6.3, §6.5",
     "every READ_RESP but the last of its range carries exactly MTU bytes"},
    {"read_resp.payload", "§6.5", "READ_RESP carries the bytes of the requested range"},
    {"read_resp", "§6.5", "the responder answers a READ_REQ with READ_RESP packets for its whole range"},
    {"atomic_resp.mbth.msn", "§6.7", "ATOMIC_RESP carries the request's MSN"},
    {"atomic_resp.original", "§3.6, §6.7",
     "ATOMIC_RESP carries the value before the operation; a duplicate replays the cached one"},
    {"atomic_resp", "§6.7", "each atomic request is executed once and answered"},
    {"probe_reply.echo_ts", "§3.9, §8", "PROBE_REPLY echoes the PROBE's timestamp"},
    {"probe_reply", "§8", "a receiver answers PROBEs for QPs in RTR/RTS"},
    {"icrc", "§5", "the ICRC is the CRC32C of the transport packet"},
    {"udp.checksum", "§2.4", "the UDP checksum is valid (IPv4: zero or valid)"},
    {"mbth.version", "§3.1, §9", "the version is 1"},
    {"mbth.opcode", "§4", "the opcode is one of §4's table"},
    {"length", "§3.0", "the packet is as long as its opcode's header chain requires"},
};

constexpr Rule kWhole = {"packet", "§6", "the DUT's packet matches the reference's"};

}  // namespace

const Rule& rule_for(std::string_view field) {
  for (const Rule& r : kRules)
    if (field == r.field) return r;
  return kWhole;
}

}  // namespace metaroce::pcapcmp
