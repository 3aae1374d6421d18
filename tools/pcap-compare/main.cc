// pcap-compare: replays a capture of a device under test through the
// reference engine and names the first field where the DUT's answers
// diverge (docs/vendor-guide.md §Capture and compare).
//
//   pcap-compare --dut-ip ADDR | --dut-mac MAC [--pair DUT_QPN:PEER_QPN]...
//                [--max-memory MIB] FILE
//
// Exit status: 0 no divergence, 1 divergence, 2 the capture cannot be
// compared (the reason is printed).
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "tools/pcap-compare/compare.h"
#include "tools/pcap-compare/pcap_reader.h"

namespace {

using namespace metaroce;

constexpr const char* kUsage =
    "usage: pcap-compare --dut-ip ADDR | --dut-mac MAC [--pair DUT_QPN:PEER_QPN]...\n"
    "                    [--max-memory MIB] FILE\n"
    "  FILE: pcap or pcapng of Ethernet frames (tcpdump -w, dumpcap -w, metaroce-ctl capture)\n"
    "  exit: 0 no divergence, 1 divergence, 2 cannot compare\n";

int usage(const std::string& why) {
  std::fprintf(stderr, "pcap-compare: %s\n%s", why.c_str(), kUsage);
  return 2;
}

bool parse_u32(const std::string& s, uint32_t* v) {
  char* end = nullptr;
  errno = 0;
  unsigned long x = std::strtoul(s.c_str(), &end, 0);
  if (errno || end == s.c_str() || *end || x > 0xFFFFFFFFul) return false;
  *v = static_cast<uint32_t>(x);
  return true;
}

bool parse_pair(const std::string& s, std::pair<uint32_t, uint32_t>* p) {
  size_t colon = s.find(':');
  return colon != std::string::npos && parse_u32(s.substr(0, colon), &p->first) &&
         parse_u32(s.substr(colon + 1), &p->second) && p->first < (1u << 24) && p->second < (1u << 24);
}

// Fills opt and file from argv; "" or the reason it cannot.
std::string parse_args(int argc, char** argv, pcapcmp::Options* opt, std::string* file) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    bool has_value = i + 1 < argc;
    if (a == "-h" || a == "--help") return "help";
    if (a == "--dut-ip" && has_value) {
      proto::IpAddr ip;
      if (!pcapcmp::parse_ip(argv[++i], &ip)) return std::string("--dut-ip: not an address: ") + argv[i];
      opt->dut_ip = ip;
    } else if (a == "--dut-mac" && has_value) {
      proto::MacAddr mac;
      if (!pcapcmp::parse_mac(argv[++i], &mac)) return std::string("--dut-mac: not a MAC: ") + argv[i];
      opt->dut_mac = mac;
    } else if (a == "--pair" && has_value) {
      std::pair<uint32_t, uint32_t> p;
      if (!parse_pair(argv[++i], &p)) return std::string("--pair: want DUT_QPN:PEER_QPN: ") + argv[i];
      opt->pairs.push_back(p);
    } else if (a == "--max-memory" && has_value) {
      uint32_t mib;
      if (!parse_u32(argv[++i], &mib) || mib == 0 || mib > (1u << 20))
        return std::string("--max-memory: MiB, 1..1048576: ") + argv[i];
      opt->max_pages = size_t{mib} * 256;
    } else if (a.size() > 1 && a[0] == '-') {
      return "unknown option or missing value: " + a;
    } else if (file->empty()) {
      *file = a;
    } else {
      return "more than one capture file: " + a;
    }
  }
  if (file->empty()) return "no capture file";
  if (opt->dut_ip && opt->dut_mac) return "give --dut-ip or --dut-mac, not both";
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  pcapcmp::Options opt;
  std::string file;
  std::string bad = parse_args(argc, argv, &opt, &file);
  if (bad == "help") return std::fputs(kUsage, stdout), 0;
  if (!bad.empty()) return usage(bad);
  pcap::Capture cap;
  std::string why;
  if (pcap::read_capture(file, &cap, &why)) return std::fprintf(stderr, "pcap-compare: %s\n", why.c_str()), 2;
  pcapcmp::Report report;
  if (pcapcmp::compare_capture(cap, opt, &report, &why))
    return std::fprintf(stderr, "pcap-compare: %s: %s\n", file.c_str(), why.c_str()), 2;
  std::fputs(pcapcmp::format_report(report).c_str(), stdout);
  return report.first ? 1 : 0;
}
