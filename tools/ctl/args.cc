#include "tools/ctl/args.h"

#include <charconv>

namespace metaroce::ctl {

const char* usage() {
  return "usage: metaroce-ctl [OPTIONS] OBJECT [COMMAND] [ARGS]\n"
         "  dev [show [NAME]]                  devices: state, GIDs, node GUID, netdev\n"
         "  stat [-a] [--qp N|all] DEV         counters of the device (or of QP N, or of every QP)\n"
         "  link [show [NAME]]                 devices and the metaroced serving each\n"
         "  monitor DEV                        stream events: daemon, port up/down, QPs created and\n"
         "                                     destroyed, error counters growing (until ^C)\n"
         "  link add NAME netdev IF [DAEMON OPTIONS...]\n"
         "                                     start metaroced for NAME (metaroceN) on interface IF\n"
         "                                     --persist: also write /etc/metaroce/IF.conf and\n"
         "                                     enable metaroced@IF.service (survives a reboot)\n"
         "  link delete NAME                   stop the metaroced started by link add\n"
         "  capture DEV -w FILE [--count N] [--duration S]\n"
         "                                     pcap of DEV's MetaRoCE frames (UDP 4796) on its\n"
         "                                     interface, for tshark with metaroce.lua\n"
         "options:\n"
         "  --sysfs-root DIR   published device tree (default $SYSFS_PATH, else /run/metaroce/sysfs)\n"
         "  --run-dir DIR      sockets, pidfiles and logs (default $METAROCE_RUN_DIR, else /run/metaroce)\n"
         "  --timeout SECONDS  how long to wait for metaroced (default 10)\n"
         "  --config-dir DIR   link add --persist: where IF.conf goes (default $METAROCE_CONFIG_DIR,\n"
         "                     else /etc/metaroce)\n"
         "  -a                 stat: show zero counters too\n"
         "  -j, --json         JSON output, one array per command (docs/operations.md)\n"
         "  -h, --help         this text\n"
         "metaroced is found as $METAROCED, else next to metaroce-ctl, else on PATH.\n";
}

bool valid_device_name(const std::string& name) {
  return name.size() > 8 && name.size() <= 16 && name.rfind("metaroce", 0) == 0 &&
         name.find_first_not_of("0123456789", 8) == std::string::npos;
}

namespace {

bool parse_u32(const std::string& s, uint32_t* out) {
  uint32_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || p != s.data() + s.size()) return false;
  *out = v;
  return true;
}

bool is_one_of(const std::string& s, std::initializer_list<const char*> names) {
  for (const char* n : names) {
    if (s == n) return true;
  }
  return false;
}

// Options metaroce-ctl sets itself on the daemon's command line.
bool reserved_daemon_option(const std::string& a) {
  return is_one_of(a, {"--netdev", "--ibdev", "--run-dir", "--sysfs-root", "--pidfile"});
}

struct Parser {
  Parser(const std::vector<std::string>& a, Command* o, std::string* e)
      : args(a), out(o), error(e) {}
  const std::vector<std::string>& args;
  Command* out;
  std::string* error;
  std::vector<std::string> words;  // object, command, arguments
  bool help = false;
  bool has_sysfs = false, has_run_dir = false;

  bool fail(const std::string& e) {
    *error = e;
    return false;
  }

  // Splits options from words; after `link add NAME netdev IF` the rest
  // belongs to the daemon.
  bool scan() {
    for (size_t i = 0; i < args.size(); i++) {
      const std::string& a = args[i];
      if (daemon_tail()) {
        out->daemon_args.assign(args.begin() + static_cast<long>(i), args.end());
        return true;
      }
      auto value = [&](std::string* v) {
        if (i + 1 >= args.size()) return fail(a + " needs a value");
        *v = args[++i];
        return true;
      };
      std::string v;
      if (a == "-h" || a == "--help") {
        help = true;
      } else if (a == "-a" || a == "--all") {
        out->all = true;
      } else if (a == "-j" || a == "--json") {
        out->json = true;
      } else if (a == "--sysfs-root") {
        if (!value(&out->sysfs_root)) return false;
        has_sysfs = true;
      } else if (a == "--run-dir") {
        if (!value(&out->run_dir)) return false;
        has_run_dir = true;
      } else if (a == "--config-dir") {
        if (!value(&out->config_dir)) return false;
      } else if (a == "--timeout") {
        uint32_t s = 0;
        if (!value(&v)) return false;
        if (!parse_u32(v, &s) || s == 0 || s > 3600)
          return fail("--timeout expects seconds from 1 to 3600, got '" + v + "'");
        out->timeout_ms = s * 1000;
      } else if (a == "-w") {
        if (!value(&out->capture_file)) return false;
        if (out->capture_file.empty()) return fail("-w needs a file name");
      } else if (a == "--count" || a == "--duration") {
        uint32_t n = 0;
        if (!value(&v)) return false;
        if (!parse_u32(v, &n) || n == 0) return fail(a + " expects a positive number, got '" + v + "'");
        if (a == "--count") out->capture_count = n; else out->capture_duration_s = n;
      } else if (a == "--qp") {
        if (!value(&v)) return false;
        out->has_qp = true;
        if (v == "all") {
          out->qpn = kAllQps;
        } else if (!parse_u32(v, &out->qpn) || out->qpn >= kAllQps) {
          return fail("--qp expects a QP number or 'all', got '" + v + "'");
        }
      } else if (a.size() > 1 && a[0] == '-') {
        return fail("unknown option '" + a + "'");
      } else {
        words.push_back(a);
      }
    }
    return true;
  }

  bool daemon_tail() const {
    return words.size() == 5 && words[0] == "link" && is_one_of(words[1], {"add", "a"});
  }

  bool device_name(const std::string& name) {
    if (!valid_device_name(name))
      return fail("device names are metaroceN (N a number), got '" + name + "'");
    out->dev = name;
    return true;
  }

  bool dev() {
    if (words.size() == 1) return out->verb = Verb::kDevShow, true;
    if (!is_one_of(words[1], {"show", "list", "ls"}))
      return fail("unknown dev command '" + words[1] + "' (known: show)");
    if (words.size() > 3) return fail("dev show takes at most one device name");
    out->verb = Verb::kDevShow;
    return words.size() == 3 ? device_name(words[2]) : true;
  }

  bool stat() {
    size_t first = 1;
    if (words.size() > 1 && is_one_of(words[1], {"show", "list"})) first = 2;
    if (words.size() != first + 1) return fail("stat needs exactly one device name: stat [--qp N] DEV");
    out->verb = Verb::kStat;
    return device_name(words[first]);
  }

  bool link() {
    if (words.size() == 1) return out->verb = Verb::kLinkShow, true;
    const std::string& c = words[1];
    if (is_one_of(c, {"show", "list", "ls"})) {
      if (words.size() > 3) return fail("link show takes at most one device name");
      out->verb = Verb::kLinkShow;
      return words.size() == 3 ? device_name(words[2]) : true;
    }
    if (is_one_of(c, {"delete", "del", "d"})) {
      if (words.size() != 3) return fail("link delete needs exactly one device name");
      out->verb = Verb::kLinkDelete;
      return device_name(words[2]);
    }
    if (is_one_of(c, {"add", "a"})) return link_add();
    return fail("unknown link command '" + c + "' (known: show, add, delete)");
  }

  bool link_add() {
    if (words.size() < 3) return fail("link add needs a name: link add NAME netdev IF");
    if (!device_name(words[2])) return false;
    if (words.size() < 5 || words[3] != "netdev")
      return fail("link add " + words[2] + " needs the interface: link add " + words[2] +
                  " netdev IF");
    out->netdev = words[4];
    if (out->netdev.empty() || out->netdev.size() >= 16 ||
        out->netdev.find('/') != std::string::npos)
      return fail("'" + out->netdev + "' is not a network interface name");
    auto& d = out->daemon_args;
    for (auto it = d.begin(); it != d.end();) {
      if (*it == "--persist") {
        out->persist = true;
        it = d.erase(it);
      } else {
        ++it;
      }
    }
    for (const std::string& a : out->daemon_args) {
      if (reserved_daemon_option(a))
        return fail(a + " is set by metaroce-ctl; use metaroce-ctl's own --run-dir/--sysfs-root");
    }
    out->verb = Verb::kLinkAdd;
    return true;
  }

  bool command() {
    if (help || words.empty()) return out->verb = Verb::kHelp, true;
    const std::string& o = words[0];
    if (o == "help") return out->verb = Verb::kHelp, true;
    if (is_one_of(o, {"dev", "device"})) return dev();
    if (is_one_of(o, {"stat", "statistic", "statistics"})) return stat();
    if (o == "link") return link();
    if (o == "capture") {
      if (words.size() != 2) return fail("capture needs exactly one device name: capture DEV -w FILE");
      if (out->capture_file.empty()) return fail("capture needs -w FILE (the pcap to write)");
      out->verb = Verb::kCapture;
      return device_name(words[1]);
    }
    if (o == "monitor") {
      if (words.size() != 2) return fail("monitor needs exactly one device name: monitor DEV");
      out->verb = Verb::kMonitor;
      return device_name(words[1]);
    }
    return fail("unknown object '" + o + "' (known: dev, stat, link, monitor, capture)");
  }
};

}  // namespace

bool parse_command_line(const std::vector<std::string>& args, const Env& env, Command* out,
                        std::string* error) {
  *out = Command{};
  Parser p(args, out, error);
  if (!p.scan() || !p.command()) return false;
  if (out->has_qp && out->verb != Verb::kStat) return p.fail("--qp only applies to stat");
  if ((!out->capture_file.empty() || out->capture_count || out->capture_duration_s) &&
      out->verb != Verb::kCapture)
    return p.fail("-w, --count and --duration only apply to capture");
  if (!p.has_sysfs) out->sysfs_root = env.sysfs_path.empty() ? kDefaultSysfsRoot : env.sysfs_path;
  if (!p.has_run_dir) out->run_dir = env.run_dir.empty() ? "/run/metaroce" : env.run_dir;
  if (out->config_dir.empty())
    out->config_dir = env.config_dir.empty() ? "/etc/metaroce" : env.config_dir;
  if (out->sysfs_root.empty() || out->run_dir.empty())
    return p.fail("--sysfs-root and --run-dir need a directory");
  return true;
}

}  // namespace metaroce::ctl
