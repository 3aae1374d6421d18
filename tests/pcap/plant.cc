#include "tests/pcap/plant.h"

#include <algorithm>
#include <cstring>

#include "tools/pcap-compare/pcap_reader.h"

namespace metaroce::pcaptest {
namespace {

bool set_field(proto::Packet& p, const std::string& field, uint64_t delta,
               std::vector<uint8_t>& payload) {
  auto add32 = [&](uint32_t& v) { v = static_cast<uint32_t>(v + delta); };
  if (field == "mbth.dest_qpn") p.mbth.dest_qpn = (p.mbth.dest_qpn + static_cast<uint32_t>(delta)) & 0xFFFFFF;
  else if (field == "mbth.msn") add32(p.mbth.msn);
  else if (field == "mbth.offset") add32(p.mbth.offset);
  else if (field == "ack.cum_psn") add32(p.ack.cum_psn);
  else if (field == "ack.sack") p.ack.sack ^= delta;
  else if (field == "ack.rcv_msn") add32(p.ack.rcv_msn);
  else if (field == "ack.echo_ts") add32(p.ack.echo_ts);
  else if (field == "nack.psn") add32(p.nack.psn);
  else if (field == "reth.length") add32(p.reth.length);
  else if (field == "nack.reason") p.nack.reason = static_cast<proto::NackReason>(static_cast<uint8_t>(p.nack.reason) + delta);
  else if (field == "atomic_resp.original") p.atomic_ack.original += delta;
  else if (field == "read_resp.payload" && !payload.empty()) payload[0] ^= static_cast<uint8_t>(delta);
  else return false;
  return true;
}

}  // namespace

uint64_t find_frame(const std::vector<uint8_t>& file, const proto::IpAddr& from, proto::Opcode op,
                    int nth, bool (*want)(const proto::Packet&)) {
  pcap::Capture cap;
  std::string why;
  if (pcap::parse_capture(file, &cap, &why)) return 0;
  for (const pcap::Record& r : cap.records) {
    auto f = proto::parse_frame(r.frame);
    if (!f || !(f.value().headers.src_ip == from) || f.value().packet.mbth.opcode != op) continue;
    if (want && !want(f.value().packet)) continue;
    if (--nth == 0) return r.number;
  }
  return 0;
}

std::string plant(std::vector<uint8_t>* file, uint64_t number, const std::string& field,
                  uint64_t delta) {
  pcap::Capture cap;
  std::string why;
  if (pcap::parse_capture(*file, &cap, &why)) return why;
  if (number == 0 || number > cap.records.size()) return "no frame " + std::to_string(number);
  const pcap::Record& r = cap.records[number - 1];
  auto parsed = proto::parse_frame(r.frame);
  if (!parsed) return "frame " + std::to_string(number) + ": " + parsed.error().message();
  proto::Frame f = parsed.value();
  std::vector<uint8_t> payload(f.packet.payload.begin(), f.packet.payload.end());
  if (!set_field(f.packet, field, delta, payload)) return "cannot plant field " + field;
  f.packet.payload = payload;
  std::vector<uint8_t> out(r.frame.size());
  size_t n = proto::build_frame(f.headers, f.packet, out);
  if (n != r.frame.size()) return "rebuilt frame has another length";
  std::copy(out.begin(), out.end(), file->begin() + static_cast<long>(r.file_offset));
  return "";
}

}  // namespace metaroce::pcaptest
