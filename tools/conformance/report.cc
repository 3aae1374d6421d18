#include "tools/conformance/report.h"

#include <arpa/inet.h>

#include <cstdio>
#include <sstream>

namespace metaroce::conform {

namespace {

std::string json_str(const std::string& s) {
  std::string o = "\"";
  for (char ch : s) {
    unsigned char c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      o += '\\';
      o += ch;
    } else if (c < 0x20) {
      char b[8];
      std::snprintf(b, sizeof b, "\\u%04x", c);
      o += b;
    } else {
      o += ch;
    }
  }
  return o + "\"";
}

std::string json_list(const std::vector<std::string>& v) {
  std::string o = "[";
  for (size_t i = 0; i < v.size(); ++i) o += (i ? ", " : "") + json_str(v[i]);
  return o + "]";
}

std::string ip_text(const proto::IpAddr& a) {
  char b[INET6_ADDRSTRLEN] = "";
  if (a.is_v4()) {
    in_addr x{htonl(a.v4_host_order())};
    inet_ntop(AF_INET, &x, b, sizeof b);
  } else {
    inet_ntop(AF_INET6, a.bytes.data(), b, sizeof b);
  }
  return b;
}

std::string tally_json(const Tally& t) {
  return "{\"pass\": " + std::to_string(t.pass) + ", \"fail\": " + std::to_string(t.fail) +
         ", \"skip\": " + std::to_string(t.skip) + ", \"total\": " + std::to_string(t.total()) + "}";
}

std::string tally_text(const char* name, const Tally& t) {
  return std::string(name) + ": " + std::to_string(t.pass) + "/" + std::to_string(t.total()) +
         " passed, " + std::to_string(t.fail) + " failed, " + std::to_string(t.skip) + " skipped";
}

}  // namespace

Summary summarize(const std::vector<CaseResult>& results) {
  Summary s;
  for (const CaseResult& r : results) {
    Tally& t = r.c->level == Level::kMust ? s.must : s.should;
    if (r.out.verdict == Verdict::kPass) t.pass++;
    if (r.out.verdict == Verdict::kFail) t.fail++;
    if (r.out.verdict == Verdict::kSkip) t.skip++;
  }
  if (s.must.fail) s.level = "none";
  else if (s.must.skip) s.level = "must-incomplete";
  else if (s.should.fail || s.should.skip) s.level = "must";
  else s.level = "full";
  return s;
}

std::string report_json(const std::string& dut, const Setup& st, const std::vector<CaseResult>& results) {
  Summary s = summarize(results);
  std::ostringstream o;
  o << "{\n  \"dut\": " << json_str(dut) << ",\n  \"dut_ip\": " << json_str(ip_text(st.dut_ip))
    << ",\n  \"peer_ip\": " << json_str(ip_text(st.peer_ip)) << ",\n  \"mtu\": " << st.mtu_bytes
    << ",\n  \"level\": " << json_str(s.level) << ",\n  \"must\": " << tally_json(s.must)
    << ",\n  \"should\": " << tally_json(s.should) << ",\n  \"cases\": [";
  for (size_t i = 0; i < results.size(); ++i) {
    const CaseResult& r = results[i];
    char secs[32];
    std::snprintf(secs, sizeof secs, "%.3f", r.seconds);
    o << (i ? "," : "") << "\n    {\"id\": " << json_str(r.c->id) << ", \"title\": " << json_str(r.c->title)
      << ", \"level\": " << json_str(to_string(r.c->level)) << ", \"cites\": " << json_list(r.c->cites)
      << ", \"verdict\": " << json_str(to_string(r.out.verdict)) << ", \"reason\": " << json_str(r.out.reason)
      << ", \"expected\": " << json_str(r.out.expected) << ", \"differ\": " << json_list(r.out.differ)
      << ", \"trace\": " << json_list(r.out.trace) << ", \"seconds\": " << secs << "}";
  }
  o << "\n  ]\n}\n";
  return o.str();
}

std::string report_table(const std::string& dut, const std::vector<CaseResult>& results) {
  Summary s = summarize(results);
  std::ostringstream o;
  o << "MetaRoCE conformance: " << dut << "\n\n";
  char line[512];
  std::snprintf(line, sizeof line, "%-4s  %-6s  %-40s  %s\n", "", "level", "case", "cites");
  o << line;
  for (const CaseResult& r : results) {
    std::string cites;
    for (const std::string& t : r.c->cites) cites += (cites.empty() ? "" : " ") + t;
    std::snprintf(line, sizeof line, "%-4s  %-6s  %-40s  %s\n", to_string(r.out.verdict),
                  to_string(r.c->level), r.c->id.c_str(), cites.c_str());
    o << line;
    if (r.out.verdict == Verdict::kSkip) o << "        skipped: " << r.out.reason << "\n";
  }
  for (const CaseResult& r : results) {
    if (r.out.verdict != Verdict::kFail) continue;
    o << "\nFAIL " << r.c->id << " (" << r.c->title << ")\n  why:      " << r.out.reason << "\n";
    if (!r.out.expected.empty()) o << "  expected: " << r.out.expected << "\n";
    for (const std::string& d : r.out.differ) o << "  got:      " << d << "\n";
    o << "  trace:\n";
    for (const std::string& t : r.out.trace) o << "    " << t << "\n";
  }
  o << "\n" << tally_text("MUST", s.must) << "\n" << tally_text("SHOULD", s.should) << "\n"
    << "Conformance level: " << s.level << "\n";
  return o.str();
}

}  // namespace metaroce::conform
