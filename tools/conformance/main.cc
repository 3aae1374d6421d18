// mroce-conform: the MetaRoCE conformance suite (docs/conformance.md).
//
//   mroce-conform run --peer-if IF [--peer-netns NS] [--device NAME]
//                     [--dut-ip IP] [--dut-mac MAC] [--ipv6] [--mtu 256..4096]
//                     [--cases ID,ID] [--json FILE] [--table FILE]
//                     [--expect-failing TAG,TAG]
//   mroce-conform list
//   mroce-conform coverage --spec docs/protocol.md (--out FILE | --check FILE)
//
// run: this process is a verbs application on the DUT (run it where the
// DUT's provider works: under metaroce-run for the soft NIC); it opens its
// raw socket on the peer interface IF, inside network namespace NS if
// given, and plays the DUT's remote peer there. Exit 0 when no MUST case
// failed; with --expect-failing, 0 exactly when the failing cases are the
// cases citing those tags (the broken-DUT check). 1 otherwise, 2 usage.
#include <arpa/inet.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "tools/conformance/coverage.h"
#include "tools/conformance/report.h"
#include "tools/conformance/suite.h"

namespace metaroce::conform {
namespace {

struct Args {
  std::string cmd, peer_if, peer_netns, device, dut_ip, dut_mac, cases, json, table, spec, out, check;
  std::string expect_failing;
  bool ipv6 = false;
  uint32_t mtu = 1024;
};

int usage() {
  std::fputs(
      "usage: mroce-conform run --peer-if IF [--peer-netns NS] [--device NAME] [--dut-ip IP]\n"
      "                         [--dut-mac MAC] [--ipv6] [--mtu 256..4096] [--cases ID,..]\n"
      "                         [--json FILE] [--table FILE] [--expect-failing TAG,..]\n"
      "       mroce-conform list\n"
      "       mroce-conform coverage --spec docs/protocol.md (--out FILE | --check FILE)\n",
      stderr);
  return 2;
}

bool parse_args(int argc, char** argv, Args* a) {
  if (argc < 2) return false;
  a->cmd = argv[1];
  for (int i = 2; i < argc; ++i) {
    std::string k = argv[i];
    auto val = [&](std::string* v) {
      if (i + 1 >= argc) return false;
      *v = argv[++i];
      return true;
    };
    std::string m;
    bool ok = true;
    if (k == "--peer-if") ok = val(&a->peer_if);
    else if (k == "--peer-netns") ok = val(&a->peer_netns);
    else if (k == "--device") ok = val(&a->device);
    else if (k == "--dut-ip") ok = val(&a->dut_ip);
    else if (k == "--dut-mac") ok = val(&a->dut_mac);
    else if (k == "--cases") ok = val(&a->cases);
    else if (k == "--json") ok = val(&a->json);
    else if (k == "--table") ok = val(&a->table);
    else if (k == "--spec") ok = val(&a->spec);
    else if (k == "--out") ok = val(&a->out);
    else if (k == "--check") ok = val(&a->check);
    else if (k == "--expect-failing") ok = val(&a->expect_failing);
    else if (k == "--ipv6") a->ipv6 = true;
    else if (k == "--mtu" && val(&m)) a->mtu = static_cast<uint32_t>(std::atoi(m.c_str()));
    else ok = false;
    if (!ok) {
      std::fprintf(stderr, "mroce-conform: bad or incomplete argument '%s'\n", k.c_str());
      return false;
    }
  }
  return true;
}

std::set<std::string> split(const std::string& s) {
  std::set<std::string> v;
  std::stringstream in(s);
  std::string x;
  while (std::getline(in, x, ','))
    if (!x.empty()) v.insert(x);
  return v;
}

bool read_file(const std::string& path, std::string* out) {
  std::ifstream f(path);
  if (!f) return false;
  std::stringstream b;
  b << f.rdbuf();
  *out = b.str();
  return true;
}

int coverage(const Args& a) {
  std::string md;
  if (a.spec.empty() || !read_file(a.spec, &md)) {
    std::fprintf(stderr, "mroce-conform: cannot read the spec '%s'\n", a.spec.c_str());
    return 2;
  }
  Coverage c = build_coverage(extract_tags(md, "docs/protocol.md"), registry(), unobservable());
  if (!a.out.empty()) {
    std::ofstream(a.out) << c.markdown;
  }
  if (!a.check.empty()) {
    std::string have;
    if (!read_file(a.check, &have) || have != c.markdown)
      c.errors.push_back(a.check + " is stale: run tools/conformance/gen-coverage");
  }
  for (const std::string& e : c.errors) std::fprintf(stderr, "coverage: %s\n", e.c_str());
  return c.errors.empty() ? 0 : 1;
}

bool parse_ip(const std::string& s, proto::IpAddr* ip) {
  in_addr v4;
  in6_addr v6;
  if (inet_pton(AF_INET, s.c_str(), &v4) == 1) {
    *ip = proto::IpAddr::v4(ntohl(v4.s_addr));
    return true;
  }
  if (inet_pton(AF_INET6, s.c_str(), &v6) != 1) return false;
  std::memcpy(ip->bytes.data(), &v6, 16);
  return true;
}

bool parse_mac(const std::string& s, proto::MacAddr* m) {
  unsigned b[6];
  if (std::sscanf(s.c_str(), "%x:%x:%x:%x:%x:%x", &b[0], &b[1], &b[2], &b[3], &b[4], &b[5]) != 6)
    return false;
  for (int i = 0; i < 6; ++i) (*m)[i] = static_cast<uint8_t>(b[i]);
  return true;
}

ibv_mtu to_ibv_mtu(uint32_t bytes) {
  switch (bytes) {
    case 256: return IBV_MTU_256;
    case 512: return IBV_MTU_512;
    case 2048: return IBV_MTU_2048;
    case 4096: return IBV_MTU_4096;
    default: return IBV_MTU_1024;
  }
}

// Addresses: the peer's from its interface; the DUT's from --dut-ip or the
// DUT GID of the family that the peer namespace has a neighbour for (IPv6:
// the DUT's global IPv6 GID); its MAC from --dut-mac or that neighbour.
bool resolve(const Args& a, Link& link, Dut* dut, Setup* s, std::string* err) {
  s->ipv6 = a.ipv6;
  s->mtu = to_ibv_mtu(a.mtu);
  s->mtu_bytes = a.mtu;
  s->peer_mac = link.mac;
  auto peer = a.ipv6 ? link.ipv6 : link.ipv4;
  if (!peer) return *err = std::string("the peer interface has no ") + (a.ipv6 ? "global IPv6" : "IPv4") + " address", false;
  s->peer_ip = *peer;
  s->other_ip = *peer;
  s->other_ip.bytes[15] ^= 0x80;
  bool mac_known = !a.dut_mac.empty() && parse_mac(a.dut_mac, &s->dut_mac);
  if (!a.dut_mac.empty() && !mac_known) return *err = "bad --dut-mac " + a.dut_mac, false;
  for (auto& [ip, mac] : link.neighbours) {
    for (const proto::IpAddr& g : dut->gid_addresses()) {
      if (!(g == ip)) continue;
      if (!mac_known) s->dut_mac = mac, mac_known = true;
      if (!a.ipv6 && a.dut_ip.empty()) s->dut_ip = ip;
    }
  }
  if (!a.dut_ip.empty() && !parse_ip(a.dut_ip, &s->dut_ip)) return *err = "bad --dut-ip " + a.dut_ip, false;
  if (a.ipv6 && a.dut_ip.empty()) {
    for (const proto::IpAddr& g : dut->gid_addresses())
      if (!g.is_v4() && g.bytes[0] != 0xfe) s->dut_ip = g;
  }
  if (s->dut_ip == proto::IpAddr{}) return *err = "cannot tell the DUT's address: give --dut-ip", false;
  if (!mac_known) return *err = "cannot tell the DUT's MAC (no neighbour entry): give --dut-mac", false;
  return true;
}

std::vector<const Case*> selected(const Args& a, std::string* err) {
  const std::set<std::string> asked = split(a.cases);
  std::set<std::string> want = asked;
  std::vector<const Case*> v;
  for (const Case& c : registry())
    if (asked.empty() || want.erase(c.id)) v.push_back(&c);
  for (const std::string& w : want) *err += (err->empty() ? "no such case: " : ", ") + w;
  return v;
}

CaseResult run_case(const Case& c, const Setup& s, Link& link, Dut& dut) {
  CaseResult r{&c, {}, 0};
  double t0 = now_s();
  try {
    Ctx ctx(s, link, dut, r.out);
    c.run(ctx);
  } catch (const CaseEnd&) {
  } catch (const std::exception& e) {
    r.out.verdict = Verdict::kFail;
    r.out.reason = std::string("exception: ") + e.what();
  }
  r.seconds = now_s() - t0;
  std::fprintf(stderr, "%-4s %s%s%s\n", to_string(r.out.verdict), c.id.c_str(),
               r.out.reason.empty() ? "" : ": ", r.out.reason.c_str());
  return r;
}

// --expect-failing: the failing cases must be exactly those citing the tags.
bool failing_as_expected(const std::string& tags, const std::vector<CaseResult>& results) {
  std::set<std::string> t = split(tags), want, got;
  for (const CaseResult& r : results) {
    for (const std::string& c : r.c->cites)
      if (t.count(c)) want.insert(r.c->id);
    if (r.out.verdict == Verdict::kFail) got.insert(r.c->id);
  }
  bool same = want == got;
  for (const std::string& id : want)
    if (!got.count(id)) std::fprintf(stderr, "expected to fail but did not: %s\n", id.c_str());
  for (const std::string& id : got)
    if (!want.count(id)) std::fprintf(stderr, "failed but cites none of %s: %s\n", tags.c_str(), id.c_str());
  std::fprintf(stderr, "broken-DUT check: %zu case(s) cite %s; %zu failed; %s\n", want.size(),
               tags.c_str(), got.size(), same ? "exactly those" : "NOT the same set");
  return same && !want.empty();
}

int run(const Args& a) {
  if (a.peer_if.empty()) return usage();
  std::string err;
  std::vector<const Case*> cases = selected(a, &err);
  if (!err.empty()) return std::fprintf(stderr, "mroce-conform: %s\n", err.c_str()), 2;
  auto link = Link::open(a.peer_if, a.peer_netns, &err);
  if (!link) return std::fprintf(stderr, "mroce-conform: %s\n", err.c_str()), 1;
  auto dut = Dut::open(a.device, 8 << 20, &err);
  if (!dut) return std::fprintf(stderr, "mroce-conform: %s\n", err.c_str()), 1;
  Setup s;
  if (!resolve(a, *link, dut.get(), &s, &err) || !dut->select_gid(s.dut_ip)) {
    if (err.empty()) err = "the DUT has no GID for the address chosen";
    return std::fprintf(stderr, "mroce-conform: %s\n", err.c_str()), 1;
  }
  std::vector<CaseResult> results;
  for (const Case* c : cases) results.push_back(run_case(*c, s, *link, *dut));
  std::string table = report_table(dut->name(), results);
  if (!a.json.empty()) std::ofstream(a.json) << report_json(dut->name(), s, results);
  if (!a.table.empty()) std::ofstream(a.table) << table;
  std::fputs(table.c_str(), stdout);
  if (!a.expect_failing.empty()) return failing_as_expected(a.expect_failing, results) ? 0 : 1;
  return summarize(results).must.fail ? 1 : 0;
}

}  // namespace
}  // namespace metaroce::conform

int main(int argc, char** argv) {
  using namespace metaroce::conform;
  Args a;
  if (!parse_args(argc, argv, &a)) return usage();
  if (a.cmd == "coverage") return coverage(a);
  if (a.cmd == "list") {
    for (const Case& c : registry()) {
      std::string cites;
      for (const std::string& t : c.cites) cites += " " + t;
      std::printf("%-40s %-6s%s  %s\n", c.id.c_str(), to_string(c.level), cites.c_str(), c.title.c_str());
    }
    return 0;
  }
  if (a.cmd == "run") return run(a);
  return usage();
}
