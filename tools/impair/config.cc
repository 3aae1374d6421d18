#include "tools/impair/config.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <map>
#include <utility>

namespace metaroce::impair {

const char kUsage[] = R"(usage: mroce-impair --leg-a IF --leg-b IF [options]
Forwards every frame between two interfaces (L2, like a two-port bridge) and
impairs UDP frames to --port (default 4796, MetaRoCE; --all: every frame).
Impairment options apply to both directions, or after --a-to-b / --b-to-a to
that direction only (--both: both again). docs/impair.md.
  --loss P             drop with probability P ("1%" or "0.01")
  --burst P:L          Gilbert-Elliott loss: a burst starts with probability P
                       per frame and drops L frames on average
  --delay D            hold each frame D ("1ms", "200us", "2s")
  --jitter J           delay uniform in [D-J, D+J]; frame order is kept
  --reorder P[:GAP]    hold a frame GAP more (default 100us): later ones overtake it
  --dup P              send a frame twice
  --corrupt P          flip one byte of the UDP payload (the ICRC then fails)
  --rate R             bottleneck rate ("5gbit", "800mbit"); frames queue behind it
  --ecn-threshold B    mark ECN CE (ECT frames) when more than B bytes are queued
  --queue B            queue capacity ("1MB"; default 1 MiB with --rate): tail drop
  --hold-limit B       most bytes held per direction (default 64 MiB)
  --seed N             random seed (default 1); same seed, same decisions
  --all                impair every frame, not only UDP to --port
  --port N             UDP destination port to impair (default 4796)
  --stats FILE         write counters as JSON on SIGUSR1, every --stats-interval
                       and at exit (default: JSON to stdout at exit only)
  --stats-interval D   also write them periodically
  --ready-file FILE    written once both legs are open
  --spin D             poll this long after activity before sleeping (default 0:
                       drain what is there, then sleep)
  --rt-priority N      run as SCHED_FIFO N (1-99): a woken hop preempts at once
                       instead of waiting out another task's time slice
)";

namespace {

bool fail(std::string* why, std::string msg) {
  *why = std::move(msg);
  return false;
}

// Splits "12.5ms" into 12.5 and "ms". False if no number leads.
bool number_unit(const std::string& s, double* v, std::string* unit) {
  if (s.empty()) return false;
  errno = 0;
  char* end = nullptr;
  *v = std::strtod(s.c_str(), &end);
  if (end == s.c_str() || errno != 0 || !std::isfinite(*v) || *v < 0) return false;
  *unit = std::string(end);
  for (char& c : *unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return true;
}

bool scaled(const std::string& s, const std::map<std::string, double>& units, const char* what,
            const char* example, uint64_t* out, std::string* why) {
  double v;
  std::string unit;
  auto it = units.end();
  if (number_unit(s, &v, &unit)) it = units.find(unit);
  if (it == units.end())
    return fail(why, "bad " + std::string(what) + " '" + s + "' (example: " + example + ")");
  double r = v * it->second;
  if (r > 1.8e19) return fail(why, std::string(what) + " '" + s + "' is too large");
  *out = static_cast<uint64_t>(std::llround(r));
  return true;
}

}  // namespace

bool DirConfig::impairs() const {
  return loss > 0 || burst_start > 0 || delay_ns || jitter_ns || reorder > 0 || duplicate > 0 ||
         corrupt > 0 || rate_bps;
}

bool parse_probability(const std::string& s, double* out, std::string* why) {
  double v;
  std::string unit;
  bool ok = number_unit(s, &v, &unit) && (unit.empty() || unit == "%");
  if (ok && unit == "%") v /= 100;
  if (!ok || v > 1) return fail(why, "bad probability '" + s + "' (examples: 1%, 0.01; at most 100%)");
  *out = v;
  return true;
}

bool parse_duration(const std::string& s, uint64_t* ns, std::string* why) {
  static const std::map<std::string, double> units = {
      {"", 1e9}, {"s", 1e9}, {"ms", 1e6}, {"us", 1e3}, {"ns", 1}};
  return scaled(s, units, "duration", "1ms, 200us, 2s", ns, why);
}

bool parse_rate(const std::string& s, uint64_t* bps, std::string* why) {
  static const std::map<std::string, double> units = {
      {"bit", 1}, {"kbit", 1e3}, {"mbit", 1e6}, {"gbit", 1e9}, {"bps", 8}, {"kbps", 8e3},
      {"mbps", 8e6}, {"gbps", 8e9}};
  if (!scaled(s, units, "rate", "5gbit, 800mbit, 1gbps (bytes/s)", bps, why)) return false;
  if (*bps == 0) return fail(why, "rate '" + s + "' is zero (omit --rate for no limit)");
  return true;
}

bool parse_bytes(const std::string& s, uint64_t* out, std::string* why) {
  static const std::map<std::string, double> units = {
      {"", 1}, {"b", 1}, {"k", 1024}, {"kb", 1024}, {"kib", 1024},
      {"m", 1 << 20}, {"mb", 1 << 20}, {"mib", 1 << 20}, {"g", 1 << 30}, {"gb", 1 << 30}, {"gib", 1 << 30}};
  return scaled(s, units, "size", "1500, 64KB, 1MiB (K = 1024)", out, why);
}

namespace {

using DirSetter = std::function<bool(const std::string&, DirConfig*, std::string*)>;

bool parse_burst(const std::string& v, DirConfig* d, std::string* why) {
  auto colon = v.find(':');
  if (colon == std::string::npos) return fail(why, "--burst takes P:L, e.g. 0.5%:5");
  double len = 0;
  if (!parse_probability(v.substr(0, colon), &d->burst_start, why)) return false;
  std::string unit;
  if (!number_unit(v.substr(colon + 1), &len, &unit) || !unit.empty() || len < 1)
    return fail(why, "--burst length '" + v.substr(colon + 1) + "' must be a number of frames >= 1");
  d->burst_len = len;
  return true;
}

bool parse_reorder(const std::string& v, DirConfig* d, std::string* why) {
  auto colon = v.find(':');
  if (!parse_probability(v.substr(0, colon), &d->reorder, why)) return false;
  if (colon == std::string::npos) return true;
  if (!parse_duration(v.substr(colon + 1), &d->reorder_gap_ns, why)) return false;
  if (d->reorder_gap_ns == 0) return fail(why, "--reorder gap must be above 0");
  return true;
}

const std::map<std::string, DirSetter>& dir_options() {
  static const std::map<std::string, DirSetter> m = {
      {"--loss", [](auto& v, auto* d, auto* w) { return parse_probability(v, &d->loss, w); }},
      {"--burst", parse_burst},
      {"--delay", [](auto& v, auto* d, auto* w) { return parse_duration(v, &d->delay_ns, w); }},
      {"--jitter", [](auto& v, auto* d, auto* w) { return parse_duration(v, &d->jitter_ns, w); }},
      {"--reorder", parse_reorder},
      {"--dup", [](auto& v, auto* d, auto* w) { return parse_probability(v, &d->duplicate, w); }},
      {"--corrupt", [](auto& v, auto* d, auto* w) { return parse_probability(v, &d->corrupt, w); }},
      {"--rate", [](auto& v, auto* d, auto* w) { return parse_rate(v, &d->rate_bps, w); }},
      {"--ecn-threshold", [](auto& v, auto* d, auto* w) { return parse_bytes(v, &d->ecn_threshold, w); }},
      {"--queue", [](auto& v, auto* d, auto* w) { return parse_bytes(v, &d->queue_bytes, w); }},
      {"--hold-limit", [](auto& v, auto* d, auto* w) { return parse_bytes(v, &d->hold_limit, w); }},
  };
  return m;
}

bool parse_global(const std::string& k, const std::string& v, Config* c, std::string* why) {
  if (k == "--leg-a") c->leg_a = v;
  else if (k == "--leg-b") c->leg_b = v;
  else if (k == "--stats") c->stats_path = v;
  else if (k == "--ready-file") c->ready_path = v;
  else if (k == "--stats-interval") return parse_duration(v, &c->stats_interval_ns, why);
  else if (k == "--spin") return parse_duration(v, &c->spin_ns, why);
  else if (k == "--rt-priority") {
    char* end = nullptr;
    long n = std::strtol(v.c_str(), &end, 10);
    if (v.empty() || *end || n < 0 || n > 99) return fail(why, "bad --rt-priority '" + v + "' (0-99)");
    c->rt_priority = static_cast<int>(n);
  } else if (k == "--seed" || k == "--port") {
    char* end = nullptr;
    errno = 0;
    unsigned long long n = std::strtoull(v.c_str(), &end, 0);
    if (v.empty() || *end || errno || (k == "--port" && (n == 0 || n > 65535)))
      return fail(why, "bad " + k + " '" + v + "'");
    if (k == "--seed") c->seed = n; else c->udp_port = static_cast<uint16_t>(n);
  } else {
    return fail(why, "unknown option " + k + " (mroce-impair --help lists them)");
  }
  return true;
}

bool check(Config* c, std::string* why) {
  if (c->leg_a.empty() || c->leg_b.empty()) return fail(why, "--leg-a and --leg-b are required");
  if (c->leg_a == c->leg_b) return fail(why, "--leg-a and --leg-b name the same interface");
  for (DirConfig& d : c->dir) {
    if (d.jitter_ns > d.delay_ns) return fail(why, "--jitter must not exceed --delay");
    if ((d.ecn_threshold || d.queue_bytes) && !d.rate_bps)
      return fail(why, "--ecn-threshold and --queue need --rate (the queue forms behind it)");
    if (d.rate_bps && !d.queue_bytes) d.queue_bytes = 1 << 20;
    if (d.ecn_threshold && d.ecn_threshold >= d.queue_bytes)
      return fail(why, "--ecn-threshold must be below --queue (else nothing is ever marked)");
  }
  return true;
}

}  // namespace

bool parse_args(const std::vector<std::string>& args, Config* out, std::string* why) {
  Config c;
  int scope = -1;  // -1: both directions
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& k = args[i];
    if (k == "--a-to-b") { scope = 0; continue; }
    if (k == "--b-to-a") { scope = 1; continue; }
    if (k == "--both") { scope = -1; continue; }
    if (k == "--all") { c.all_traffic = true; continue; }
    if (i + 1 >= args.size()) return fail(why, k + " needs a value");
    const std::string& v = args[++i];
    auto it = dir_options().find(k);
    if (it == dir_options().end()) {
      if (!parse_global(k, v, &c, why)) return false;
      continue;
    }
    for (int d = 0; d < 2; ++d) {
      if ((scope == -1 || scope == d) && !it->second(v, &c.dir[d], why)) {
        *why = k + ": " + *why;
        return false;
      }
    }
  }
  if (!check(&c, why)) return false;
  *out = std::move(c);
  return true;
}

}  // namespace metaroce::impair
