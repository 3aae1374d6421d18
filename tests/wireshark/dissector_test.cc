// Runs the Wireshark dissector (tools/wireshark/metaroce.lua) with tshark
// over a pcap of every golden vector (plus one with a corrupted ICRC) and
// checks that each frame is decoded with its opcode name, header names and
// field values. Wireshark's own IPv4/UDP checksum validation is switched on,
// so this is also an independent check of the vectors' checksums.
// If tshark is missing this test fails: tools/setup installs it.
#include <doctest/doctest.h>

#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "proto/cm.h"
#include "proto/opcode.h"
#include "proto/packet.h"
#include "tests/proto/vector_file.h"

using namespace metaroce::proto;
using metaroce::test::Vector;

namespace {

using Bytes = std::vector<uint8_t>;

void put_le32(std::ofstream& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.put(static_cast<char>(v >> (8 * i)));
}
void put_le16(std::ofstream& out, uint16_t v) {
  out.put(static_cast<char>(v));
  out.put(static_cast<char>(v >> 8));
}

// Classic libpcap format, microsecond timestamps, LINKTYPE_ETHERNET.
void write_pcap(const std::string& path, const std::vector<Bytes>& frames) {
  std::ofstream out(path, std::ios::binary);
  put_le32(out, 0xA1B2C3D4);
  put_le16(out, 2);
  put_le16(out, 4);
  put_le32(out, 0);      // thiszone
  put_le32(out, 0);      // sigfigs
  put_le32(out, 65535);  // snaplen
  put_le32(out, 1);      // Ethernet
  for (size_t i = 0; i < frames.size(); ++i) {
    put_le32(out, static_cast<uint32_t>(i));
    put_le32(out, 0);
    put_le32(out, static_cast<uint32_t>(frames[i].size()));
    put_le32(out, static_cast<uint32_t>(frames[i].size()));
    out.write(reinterpret_cast<const char*>(frames[i].data()), static_cast<std::streamsize>(frames[i].size()));
  }
}

std::string run(const std::string& cmd, int& status) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) {
    status = -1;
    return out;
  }
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  status = pclose(p);
  return out;
}

// tshark -V output split at each "Frame N:" line.
std::vector<std::string> split_frames(const std::string& text) {
  std::vector<size_t> starts;
  for (size_t at = 0; at < text.size(); at = text.find('\n', at) + 1) {
    if (text.compare(at, 6, "Frame ") == 0) starts.push_back(at);
    if (text.find('\n', at) == std::string::npos) break;
  }
  std::vector<std::string> frames;
  for (size_t i = 0; i < starts.size(); ++i)
    frames.push_back(text.substr(starts[i], (i + 1 < starts.size() ? starts[i + 1] : text.size()) - starts[i]));
  return frames;
}

std::string fmt(const char* f, auto... args) {
  char buf[160];
  std::snprintf(buf, sizeof buf, f, args...);
  return buf;
}

// The CMH lines (docs/protocol.md §12.2).
void cmh_lines(const Cmh& c, std::vector<std::string>& want) {
  want.push_back(fmt("Local Comm ID: 0x%08" PRIx32, c.local_comm_id));
  want.push_back(fmt("Remote Comm ID: 0x%08" PRIx32, c.remote_comm_id));
  want.push_back(fmt("Service ID: 0x%016" PRIx64, c.service_id));
  want.push_back(fmt("Port: %u", unsigned{service_port(c.service_id)}));
  want.push_back(fmt("QPN: 0x%06" PRIx32, c.qpn));
  want.push_back(fmt("Starting PSN: %" PRIu32, c.start_psn));
  want.push_back(fmt("Q_Key: 0x%08" PRIx32, c.qkey));
  want.push_back(fmt("Source port: %u", unsigned{c.src_port}));
  want.push_back(fmt("Responder resources: %u", unsigned{c.responder_resources}));
  want.push_back(fmt("Initiator depth: %u", unsigned{c.initiator_depth}));
  want.push_back(fmt("CM timeout: %u", unsigned{c.cm_timeout}));
  want.push_back(fmt("Max CM retries: %u", unsigned{c.max_cm_retries}));
  want.push_back(fmt("Path MTU: %u", unsigned{c.path_mtu}));
  want.push_back(fmt("Retry count: %u", unsigned{c.retry_count}));
  want.push_back(fmt("RNR retry count: %u", unsigned{c.rnr_retry}));
  want.push_back(fmt("SRQ: %s", c.srq ? "True" : "False"));
  const char* reason = to_string(static_cast<RejReason>(c.reason));
  want.push_back(fmt("Reject reason: %s (%u)", std::string(reason) == "UNKNOWN" ? "Unknown" : reason,
                     unsigned{c.reason}));
}

// The lines the dissector must print for this packet.
std::vector<std::string> expected_lines(const Packet& p, uint32_t icrc) {
  const Mbth& m = p.mbth;
  std::vector<std::string> want = {
      "MetaRoCE",
      "MBTH (MetaRoCE Base Transport Header)",
      fmt("Version: %u", unsigned{m.version}),
      fmt("Opcode: %s (0x%02x)", to_string(m.opcode), unsigned(m.opcode)),
      fmt("Flags: 0x%04x", unsigned{m.flags}),
      fmt("Path ID: %u", unsigned{m.path_id}),
      fmt("Destination QP: 0x%06" PRIx32, m.dest_qpn),
      fmt("PSN: %" PRIu32, m.psn),
      fmt("MSN: %" PRIu32, m.msn),
      fmt("Offset: %" PRIu32, m.offset),
      fmt("Timestamp: %" PRIu32, m.timestamp),
      fmt("ICRC: 0x%08" PRIx32, icrc),
      "ICRC status: Good",
  };
  const OpcodeInfo& row = *find_opcode(m.opcode);
  for (size_t i = 0; i < row.ext_count(); ++i) {
    want.push_back(std::string(ext_info(row.exts[i]).name) + " (");
    switch (row.exts[i]) {
      case Ext::kReth:
        want.push_back(fmt("Virtual address: 0x%016" PRIx64, p.reth.va));
        want.push_back(fmt("R_Key: 0x%08" PRIx32, p.reth.rkey));
        want.push_back(fmt("DMA length: %" PRIu32, p.reth.length));
        break;
      case Ext::kSeth: want.push_back(fmt("Message length: %" PRIu32, p.seth.length)); break;
      case Ext::kImm: want.push_back(fmt("Immediate data: 0x%08" PRIx32, p.imm)); break;
      case Ext::kAtomicEth:
        want.push_back(fmt("Virtual address: 0x%016" PRIx64, p.atomic.va));
        want.push_back(fmt("R_Key: 0x%08" PRIx32, p.atomic.rkey));
        want.push_back(fmt("Swap/add data: 0x%016" PRIx64, p.atomic.swap_add));
        want.push_back(fmt("Compare data: 0x%016" PRIx64, p.atomic.compare));
        break;
      case Ext::kAtomicAckEth:
        want.push_back(fmt("Original value: 0x%016" PRIx64, p.atomic_ack.original));
        break;
      case Ext::kAckh:
        want.push_back(fmt("Cumulative PSN: %" PRIu32, p.ack.cum_psn));
        want.push_back(fmt("SACK bitmap: 0x%016" PRIx64, p.ack.sack));
        want.push_back(fmt("Echoed timestamp: %" PRIu32, p.ack.echo_ts));
        want.push_back(fmt("Credit: %" PRIu32, p.ack.credit));
        want.push_back(fmt("CE count: %u", unsigned{p.ack.ce_count}));
        want.push_back(fmt("Echoed path ID: %u", unsigned{p.ack.echo_path}));
        want.push_back(fmt("ACK flags: 0x%02x", unsigned{p.ack.ack_flags}));
        want.push_back(fmt("Receiver MSN: %" PRIu32, p.ack.rcv_msn));
        break;
      case Ext::kNackh:
        want.push_back(fmt("Reason: %s (%u)", to_string(p.nack.reason), unsigned(p.nack.reason)));
        want.push_back(fmt("RNR timer: %u", unsigned{p.nack.rnr_timer}));
        want.push_back(fmt("NACKed PSN: %" PRIu32, p.nack.psn));
        break;
      case Ext::kProbeh:
        want.push_back(fmt("Nonce: 0x%08" PRIx32, p.probe.nonce));
        want.push_back(fmt("Echoed timestamp: %" PRIu32, p.probe.echo_ts));
        break;
      case Ext::kCmh: cmh_lines(p.cm, want); break;
      case Ext::kDeth:
        want.push_back(fmt("Q_Key: 0x%08" PRIx32, p.deth.qkey));
        want.push_back(fmt("Source QP: 0x%06" PRIx32, p.deth.src_qpn));
        break;
      case Ext::kIeth: want.push_back(fmt("Invalidate R_Key: 0x%08" PRIx32, p.ieth.rkey)); break;
      case Ext::kNone: break;
    }
  }
  if (!p.payload.empty()) want.push_back("Payload: ");
  return want;
}

std::string tshark_path() {
  for (const char* p : {"/usr/bin/tshark", "/usr/local/bin/tshark"}) {
    std::ifstream f(p);
    if (f) return p;
  }
  return "";
}

}  // namespace

TEST_CASE("dissector__decodes_every_golden_vector") {
  const std::string tshark = tshark_path();
  REQUIRE_MESSAGE(!tshark.empty(), "tshark not found: run tools/setup (installs the tshark package)");
  const auto vectors = metaroce::test::load_vectors();
  REQUIRE(vectors.size() >= kOpcodeTable.size());

  std::vector<Bytes> frames;
  for (const Vector& v : vectors) {
    REQUIRE_MESSAGE(v.error.empty(), v.error);
    frames.push_back(v.frame);
  }
  // One more: the first IPv4 vector with its ICRC broken.
  size_t bad_of = 0;
  while (!vectors[bad_of].headers.src_ip.is_v4()) ++bad_of;
  frames.push_back(vectors[bad_of].frame);
  frames.back().back() ^= 0xFF;

  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = tmp ? tmp : "/tmp";
  const std::string pcap = dir + "/metaroce_vectors.pcap";
  write_pcap(pcap, frames);
  const std::string lua = metaroce::test::runfiles_path("tools/wireshark/metaroce.lua");
  REQUIRE_MESSAGE(std::ifstream(lua).good(), "dissector not found at " << lua);

  int status = 0;
  const std::string out =
      run("HOME='" + dir + "' '" + tshark + "' -n -X lua_script:'" + lua + "' -r '" + pcap +
              "' -V -o ip.check_checksum:TRUE -o udp.check_checksum:TRUE 2>&1",
          status);
  INFO("tshark output:\n" << out.substr(0, 4000));
  REQUIRE(status == 0);
  CHECK(out.find("Lua: Error") == std::string::npos);
  const auto decoded = split_frames(out);
  REQUIRE(decoded.size() == frames.size());

  for (size_t i = 0; i < vectors.size(); ++i) {
    CAPTURE(vectors[i].name);
    const std::string& text = decoded[i];
    for (const std::string& line : expected_lines(vectors[i].packet(), vectors[i].icrc))
      CHECK_MESSAGE(text.find(line) != std::string::npos, "missing: " << line);
    CHECK(text.find("Bad") == std::string::npos);  // no bad IP/UDP checksum, no bad ICRC
    CHECK(text.find("Malformed") == std::string::npos);
    if (vectors[i].headers.src_ip.is_v4()) {
      CHECK(text.find("Header checksum status: Good") != std::string::npos);
    } else {
      CHECK(text.find("[Checksum Status: Good]") != std::string::npos);
    }
  }
  const std::string& bad = decoded.back();
  CHECK(bad.find("ICRC status: Bad (expected 0x") != std::string::npos);
  CHECK(bad.find("Bad ICRC") != std::string::npos);
}
