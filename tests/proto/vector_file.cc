#include "tests/proto/vector_file.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "proto/opcode.h"

namespace metaroce::test {
namespace {

using proto::Packet;

bool parse_hex(const std::string& text, std::vector<uint8_t>& out) {
  std::string digits;
  for (char c : text)
    if (!std::isspace(static_cast<unsigned char>(c))) digits += c;
  if (digits.size() % 2) return false;
  for (size_t i = 0; i < digits.size(); i += 2) {
    char* end = nullptr;
    std::string two = digits.substr(i, 2);
    unsigned long v = std::strtoul(two.c_str(), &end, 16);
    if (*end != '\0') return false;
    out.push_back(static_cast<uint8_t>(v));
  }
  return true;
}

bool parse_num(const std::string& s, uint64_t& v) {
  if (s.empty()) return false;
  char* end = nullptr;
  v = std::strtoull(s.c_str(), &end, 0);
  return *end == '\0';
}

bool parse_mac(const std::string& s, proto::MacAddr& mac) {
  std::string hex = s;
  hex.erase(std::remove(hex.begin(), hex.end(), ':'), hex.end());
  std::vector<uint8_t> b;
  if (!parse_hex(hex, b) || b.size() != 6) return false;
  std::copy(b.begin(), b.end(), mac.begin());
  return true;
}

bool parse_ip(const std::string& s, proto::IpAddr& ip) {
  in_addr a4;
  if (inet_pton(AF_INET, s.c_str(), &a4) == 1) {
    ip = proto::IpAddr::v4(ntohl(a4.s_addr));
    return true;
  }
  return inet_pton(AF_INET6, s.c_str(), ip.bytes.data()) == 1;
}

bool opcode_by_name(const std::string& s, proto::Opcode& op) {
  for (const auto& row : proto::kOpcodeTable)
    if (s == row.name) {
      op = row.op;
      return true;
    }
  return false;
}

bool nack_reason_by_name(const std::string& s, proto::NackReason& r) {
  for (int v = 0; v < 256; ++v) {
    auto reason = static_cast<proto::NackReason>(v);
    if (s == proto::to_string(reason)) {
      r = reason;
      return true;
    }
  }
  return false;
}

// Numeric fields: key -> setter.
template <class T>
void set(T& dst, uint64_t v) { dst = static_cast<T>(v); }

using Setter = void (*)(Vector&, Packet&, uint64_t);
const std::map<std::string, Setter>& numeric_fields() {
  static const std::map<std::string, Setter> m = {
      {"ip.dscp", [](Vector& v, Packet&, uint64_t x) { set(v.headers.dscp, x); }},
      {"ip.ecn", [](Vector& v, Packet&, uint64_t x) { set(v.headers.ecn, x); }},
      {"ip.ttl", [](Vector& v, Packet&, uint64_t x) { set(v.headers.ttl, x); }},
      {"udp.src_port", [](Vector& v, Packet&, uint64_t x) { set(v.headers.src_port, x); }},
      {"mbth.version", [](Vector&, Packet& p, uint64_t x) { set(p.mbth.version, x); }},
      {"mbth.flags", [](Vector&, Packet& p, uint64_t x) { set(p.mbth.flags, x); }},
      {"mbth.path_id", [](Vector&, Packet& p, uint64_t x) { set(p.mbth.path_id, x); }},
      {"mbth.dest_qpn", [](Vector&, Packet& p, uint64_t x) { set(p.mbth.dest_qpn, x); }},
      {"mbth.psn", [](Vector&, Packet& p, uint64_t x) { set(p.mbth.psn, x); }},
      {"mbth.msn", [](Vector&, Packet& p, uint64_t x) { set(p.mbth.msn, x); }},
      {"mbth.offset", [](Vector&, Packet& p, uint64_t x) { set(p.mbth.offset, x); }},
      {"mbth.timestamp", [](Vector&, Packet& p, uint64_t x) { set(p.mbth.timestamp, x); }},
      {"reth.va", [](Vector&, Packet& p, uint64_t x) { set(p.reth.va, x); }},
      {"reth.rkey", [](Vector&, Packet& p, uint64_t x) { set(p.reth.rkey, x); }},
      {"reth.length", [](Vector&, Packet& p, uint64_t x) { set(p.reth.length, x); }},
      {"seth.length", [](Vector&, Packet& p, uint64_t x) { set(p.seth.length, x); }},
      {"imm", [](Vector&, Packet& p, uint64_t x) { set(p.imm, x); }},
      {"ieth.rkey", [](Vector&, Packet& p, uint64_t x) { set(p.ieth.rkey, x); }},
      {"atomic.va", [](Vector&, Packet& p, uint64_t x) { set(p.atomic.va, x); }},
      {"atomic.rkey", [](Vector&, Packet& p, uint64_t x) { set(p.atomic.rkey, x); }},
      {"atomic.swap_add", [](Vector&, Packet& p, uint64_t x) { set(p.atomic.swap_add, x); }},
      {"atomic.compare", [](Vector&, Packet& p, uint64_t x) { set(p.atomic.compare, x); }},
      {"atomic_ack.original", [](Vector&, Packet& p, uint64_t x) { set(p.atomic_ack.original, x); }},
      {"ack.cum_psn", [](Vector&, Packet& p, uint64_t x) { set(p.ack.cum_psn, x); }},
      {"ack.sack", [](Vector&, Packet& p, uint64_t x) { set(p.ack.sack, x); }},
      {"ack.echo_ts", [](Vector&, Packet& p, uint64_t x) { set(p.ack.echo_ts, x); }},
      {"ack.credit", [](Vector&, Packet& p, uint64_t x) { set(p.ack.credit, x); }},
      {"ack.ce_count", [](Vector&, Packet& p, uint64_t x) { set(p.ack.ce_count, x); }},
      {"ack.echo_path", [](Vector&, Packet& p, uint64_t x) { set(p.ack.echo_path, x); }},
      {"ack.ack_flags", [](Vector&, Packet& p, uint64_t x) { set(p.ack.ack_flags, x); }},
      {"ack.rcv_msn", [](Vector&, Packet& p, uint64_t x) { set(p.ack.rcv_msn, x); }},
      {"nack.rnr_timer", [](Vector&, Packet& p, uint64_t x) { set(p.nack.rnr_timer, x); }},
      {"nack.psn", [](Vector&, Packet& p, uint64_t x) { set(p.nack.psn, x); }},
      {"probe.nonce", [](Vector&, Packet& p, uint64_t x) { set(p.probe.nonce, x); }},
      {"probe.echo_ts", [](Vector&, Packet& p, uint64_t x) { set(p.probe.echo_ts, x); }},
      {"deth.qkey", [](Vector&, Packet& p, uint64_t x) { set(p.deth.qkey, x); }},
      {"deth.src_qpn", [](Vector&, Packet& p, uint64_t x) { set(p.deth.src_qpn, x); }},
      {"cm.local_comm_id", [](Vector&, Packet& p, uint64_t x) { set(p.cm.local_comm_id, x); }},
      {"cm.remote_comm_id", [](Vector&, Packet& p, uint64_t x) { set(p.cm.remote_comm_id, x); }},
      {"cm.service_id", [](Vector&, Packet& p, uint64_t x) { set(p.cm.service_id, x); }},
      {"cm.qp_type", [](Vector&, Packet& p, uint64_t x) { set(p.cm.qp_type, x); }},
      {"cm.qpn", [](Vector&, Packet& p, uint64_t x) { set(p.cm.qpn, x); }},
      {"cm.start_psn", [](Vector&, Packet& p, uint64_t x) { set(p.cm.start_psn, x); }},
      {"cm.qkey", [](Vector&, Packet& p, uint64_t x) { set(p.cm.qkey, x); }},
      {"cm.src_port", [](Vector&, Packet& p, uint64_t x) { set(p.cm.src_port, x); }},
      {"cm.responder_resources", [](Vector&, Packet& p, uint64_t x) { set(p.cm.responder_resources, x); }},
      {"cm.initiator_depth", [](Vector&, Packet& p, uint64_t x) { set(p.cm.initiator_depth, x); }},
      {"cm.cm_timeout", [](Vector&, Packet& p, uint64_t x) { set(p.cm.cm_timeout, x); }},
      {"cm.max_cm_retries", [](Vector&, Packet& p, uint64_t x) { set(p.cm.max_cm_retries, x); }},
      {"cm.path_mtu", [](Vector&, Packet& p, uint64_t x) { set(p.cm.path_mtu, x); }},
      {"cm.retry_count", [](Vector&, Packet& p, uint64_t x) { set(p.cm.retry_count, x); }},
      {"cm.rnr_retry", [](Vector&, Packet& p, uint64_t x) { set(p.cm.rnr_retry, x); }},
      {"cm.srq", [](Vector&, Packet& p, uint64_t x) { set(p.cm.srq, x); }},
      {"cm.reason", [](Vector&, Packet& p, uint64_t x) { set(p.cm.reason, x); }},
      {"cm.message", [](Vector&, Packet& p, uint64_t x) { set(p.cm.message, x); }},
      {"icrc", [](Vector& v, Packet&, uint64_t x) { set(v.icrc, x); }},
  };
  return m;
}

// Applies one `key: value`; returns "" or what was wrong.
std::string apply(Vector& v, Packet& p, const std::string& key, const std::string& value) {
  bool ok = true;
  if (key == "name") {
    v.name = value;
  } else if (key == "eth.dst") {
    ok = parse_mac(value, v.headers.dst_mac);
  } else if (key == "eth.src") {
    ok = parse_mac(value, v.headers.src_mac);
  } else if (key == "ip.src") {
    ok = parse_ip(value, v.headers.src_ip);
  } else if (key == "ip.dst") {
    ok = parse_ip(value, v.headers.dst_ip);
  } else if (key == "mbth.opcode") {
    ok = opcode_by_name(value, p.mbth.opcode);
  } else if (key == "nack.reason") {
    ok = nack_reason_by_name(value, p.nack.reason);
  } else if (key == "payload") {
    ok = parse_hex(value, v.payload);
  } else if (auto it = numeric_fields().find(key); it != numeric_fields().end()) {
    uint64_t x = 0;
    ok = parse_num(value, x);
    if (ok) it->second(v, p, x);
  } else {
    return "unknown key '" + key + "'";
  }
  return ok ? "" : "bad value '" + value + "' for " + key;
}

}  // namespace

proto::Packet Vector::packet() const {
  proto::Packet p = packet_;
  p.payload = payload;
  return p;
}

std::string Vector::field(const std::string& key) const {
  for (const auto& [k, val] : fields)
    if (k == key) return val;
  return "";
}

Vector read_vector(const std::string& path) {
  Vector v;
  v.path = path;
  std::ifstream in(path);
  if (!in) {
    v.error = path + ": cannot open";
    return v;
  }
  std::string line, hex;
  bool in_frame = false;
  for (int lineno = 1; std::getline(in, line); ++lineno) {
    if (in_frame) {
      hex += line + " ";
      continue;
    }
    if (line.empty() || line[0] == '#') continue;
    if (line == "frame:") {
      in_frame = true;
      continue;
    }
    size_t colon = line.find(':');
    if (colon == std::string::npos) {
      v.error = path + ":" + std::to_string(lineno) + ": expected 'key: value'";
      return v;
    }
    std::string key = line.substr(0, colon), value = line.substr(colon + 1);
    value.erase(0, value.find_first_not_of(" \t"));
    value.erase(value.find_last_not_of(" \t\r") + 1);
    v.fields.emplace_back(key, value);
    if (std::string why = apply(v, v.packet_, key, value); !why.empty()) {
      v.error = path + ":" + std::to_string(lineno) + ": " + why;
      return v;
    }
  }
  if (!parse_hex(hex, v.frame) || v.frame.empty()) v.error = path + ": missing or bad frame: hex";
  return v;
}

std::string runfiles_path(const std::string& rel) {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* ws = std::getenv("TEST_WORKSPACE");
  if (srcdir == nullptr) return rel;
  return std::string(srcdir) + "/" + (ws ? ws : "metaroce") + "/" + rel;
}

std::vector<Vector> load_vectors() {
  std::vector<Vector> out;
  const std::string dir = runfiles_path("tests/vectors");
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec))
    if (entry.path().extension() == ".txt") out.push_back(read_vector(entry.path().string()));
  std::sort(out.begin(), out.end(), [](const Vector& a, const Vector& b) { return a.name < b.name; });
  return out;
}

}  // namespace metaroce::test
