// metaroce-ctl: inspect and manage MetaRoCE devices (see `metaroce-ctl -h`).
// Exit status: 0 success, 1 the operation failed (message on stderr),
// 2 bad command line (message and usage on stderr).
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <ctime>
#include <memory>
#include <thread>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <set>

#include "tools/ctl/args.h"
#include "tools/ctl/capture.h"
#include "tools/ctl/client.h"
#include "tools/ctl/format.h"
#include "tools/ctl/json.h"
#include "tools/ctl/link.h"
#include "tools/ctl/monitor.h"
#include "tools/ctl/persist.h"
#include "tools/ctl/sysfs.h"

namespace metaroce::ctl {
namespace {

namespace fs = std::filesystem;

constexpr uint32_t kDeviceCounters = 0xffffffffu;

int fail(const std::string& why) {
  std::cerr << "metaroce-ctl: " << why << "\n";
  return 1;
}

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

DaemonState daemon_state(const std::string& socket) {
  return socket_listening(socket) ? DaemonState::kRunning : DaemonState::kNotRunning;
}

// The named device, or every published one.
int devices(const Command& c, std::vector<std::string>* names) {
  if (!c.dev.empty()) {
    names->push_back(c.dev);
    return 0;
  }
  std::string why;
  int err = list_devices(c.sysfs_root, names, &why);
  if (err) return fail(why);
  if (names->empty()) {
    std::cerr << "metaroce-ctl: no MetaRoCE devices under " << c.sysfs_root
              << "/class/infiniband\n";
  }
  return 0;
}

// -j: the command's objects as one JSON array on stdout.
void print_json(const std::vector<std::string>& items) { std::cout << json_array(items) << "\n"; }

int dev_show(const Command& c) {
  std::vector<std::string> names, json;
  if (int rc = devices(c, &names)) return rc;
  for (const std::string& n : names) {
    DeviceInfo d;
    std::string why;
    if (read_device(c.sysfs_root, c.run_dir, n, &d, &why)) return fail(why);
    DaemonState state = daemon_state(d.socket_path);
    if (c.json) {
      json.push_back(json_device(d, state));
    } else {
      std::cout << format_device(d, state);
    }
  }
  if (c.json) print_json(json);
  return 0;
}

int link_show(const Command& c) {
  std::vector<std::string> names;
  if (int rc = devices(c, &names)) return rc;
  std::set<std::string> seen(names.begin(), names.end());
  std::error_code ec;
  if (c.dev.empty()) {  // daemons started by link add that have not published (yet)
    for (const auto& e : fs::directory_iterator(c.run_dir, ec)) {
      std::string n = e.path().stem().string();
      if (e.path().extension() == ".pid" && valid_device_name(n) && seen.insert(n).second)
        names.push_back(n);
    }
  }
  std::vector<std::string> json;
  for (const std::string& n : names) {
    DeviceInfo d;
    std::string why;
    if (read_device(c.sysfs_root, c.run_dir, n, &d, &why)) {
      if (!c.dev.empty() && read_pidfile(link_paths(c.run_dir, n).pidfile) == 0) return fail(why);
      d.name = n;
      d.socket_path = socket_path(c.sysfs_root, c.run_dir, n);
    }
    pid_t pid = read_pidfile(link_paths(c.run_dir, n).pidfile);
    if (!is_live_daemon(pid, n)) pid = 0;
    if (c.json) {
      json.push_back(json_link(d, daemon_state(d.socket_path), pid));
    } else {
      std::cout << format_link(d, daemon_state(d.socket_path), pid);
    }
  }
  if (c.json) print_json(json);
  return 0;
}

int stat(const Command& c) {
  std::string why;
  ControlClient client;
  client.set_timeout_ms(static_cast<int>(c.timeout_ms));
  if (client.connect(socket_path(c.sysfs_root, c.run_dir, c.dev), c.dev, &why) ||
      client.open_context(&why))
    return fail(why);
  std::vector<Counter> counters;
  if (!c.has_qp) {
    std::vector<uint32_t> qps;
    if (client.query_counters(kDeviceCounters, &counters, &why) || client.list_qps(&qps, &why))
      return fail(why);
    if (c.json) {
      std::vector<std::string> numbers;
      for (uint32_t q : qps) numbers.push_back(std::to_string(q));
      print_json({JsonObject()
                      .add("ifname", c.dev)
                      .add_json("counters", json_counters(counters))
                      .add_json("qps", json_array(numbers))
                      .str()});
      return 0;
    }
    std::cout << format_counters(c.dev + " device", counters, c.all);
    std::cout << "  qps: " << qps.size();
    for (uint32_t q : qps) std::cout << " " << q;
    std::cout << "\n";
    return 0;
  }
  std::vector<uint32_t> qps = {c.qpn};
  if (c.qpn == kAllQps && client.list_qps(&qps, &why)) return fail(why);
  std::vector<std::string> json;
  for (uint32_t q : qps) {
    mroce_qp_transport_resp t{};
    if (client.query_counters(q, &counters, &why) || client.query_qp_transport(q, &t, &why))
      return fail("QP " + std::to_string(q) + ": " + why);
    if (c.json) {
      json.push_back(JsonObject()
                         .add("ifname", c.dev)
                         .add("qpn", uint64_t{q})
                         .add_json("transport", json_transport(t, counters))
                         .add_json("counters", json_counters(counters))
                         .str());
      continue;
    }
    std::cout << format_counters(c.dev + " qp " + std::to_string(q), counters, c.all)
              << format_transport(t, counters);
  }
  if (c.json) return print_json(json), 0;
  if (qps.empty()) std::cout << c.dev << ": no QPs\n";
  return 0;
}

std::string self_dir() {
  std::error_code ec;
  fs::path p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? "" : p.parent_path().string();
}

// --persist: IF.conf written, the unit enabled. Where systemd runs it
// starts the daemon (*started); elsewhere metaroce-ctl starts it with the
// same file (*args becomes --config FILE) and *note says why.
int persist(const Command& c, std::vector<std::string>* args, bool* started, std::string* note) {
  std::string text, why;
  if (!config_text(c.dev, *args, &text, &why) || write_config(c.config_dir, c.netdev, text, &why))
    return fail("link add " + c.dev + " --persist: " + why);
  std::string file = c.config_dir + "/" + c.netdev + ".conf", unit = "metaroced@" + c.netdev + ".service";
  *args = {"--config", file};
  *note = "config " + file;
  switch (systemd_state(kUnitFile)) {
    case Systemd::kRunning:
      if (systemctl({"enable", "--now", unit}, &why)) return fail(why);
      *started = true;
      *note += ", " + unit + " enabled and started";
      return 0;
    case Systemd::kOffline:
      if (systemctl({"enable", unit}, &why)) return fail(why);
      *note += ", " + unit + " enabled; systemd is not running here (not PID 1), so "
               "metaroce-ctl started the daemon with the same config";
      return 0;
    case Systemd::kUnavailable: break;
  }
  std::cerr << "metaroce-ctl: warning: " << kUnitFile << " or systemctl is missing: " << file
            << " is written, but nothing will start the daemon at boot\n";
  return 0;
}

// link add's JSON object, the same fields however the daemon was started
// (docs/operations.md §JSON).
std::string json_link_added(const Command& c, pid_t pid, const std::string& log,
                            const std::string& note) {
  return JsonObject()
      .add("ifname", c.dev)
      .add("netdev", c.netdev)
      .add("pid", static_cast<uint64_t>(pid))
      .add("socket", socket_path(c.sysfs_root, c.run_dir, c.dev))
      .add("log", log)
      .add("note", note)
      .str();
}

int link_add(const Command& c) {
  std::string why, note;
  std::vector<std::string> daemon_args = c.daemon_args;
  bool started = false;
  if (c.persist) {
    if (int rc = persist(c, &daemon_args, &started, &note)) return rc;
    if (started) {  // by systemd: no pid of ours, the log is the journal
      if (c.json) {
        print_json({json_link_added(c, 0, "journal (journalctl -u metaroced@" + c.netdev + ")", note)});
      } else {
        std::cout << "link " << c.dev << " persisted: " << note << "\n";
      }
      return 0;
    }
  }
  LinkAddRequest r;
  r.metaroced = find_metaroced(env("METAROCED"), self_dir(), env("PATH"), &why);
  if (r.metaroced.empty()) return fail(why);
  r.name = c.dev;
  r.netdev = c.netdev;
  r.run_dir = c.run_dir;
  r.sysfs_root = c.sysfs_root;
  r.daemon_args = daemon_args;
  r.timeout_ms = static_cast<int>(c.timeout_ms);
  pid_t pid = 0;
  if (ctl::link_add(r, &pid, &why)) return fail("link add " + c.dev + ": " + why);
  LinkPaths paths = link_paths(c.run_dir, c.dev);
  if (c.json) {
    print_json({json_link_added(c, pid, paths.log, note)});
    return 0;
  }
  std::cout << "link " << c.dev << " added: metaroced pid " << pid << " on " << c.netdev
            << ", socket " << paths.socket << ", log " << paths.log
            << (note.empty() ? "" : "; " + note) << "\n";
  return 0;
}

int link_delete(const Command& c) {
  std::string why;
  if (ctl::link_delete(c.dev, c.run_dir, static_cast<int>(c.timeout_ms), &why))
    return fail("link delete " + c.dev + ": " + why);
  if (c.json) {
    print_json({JsonObject().add("ifname", c.dev).add_bool("deleted", true).str()});
    return 0;
  }
  std::cout << "link " << c.dev << " deleted\n";
  return 0;
}

// ---- monitor ----

constexpr int kMonitorIntervalMs = 200;
constexpr size_t kMonitorMaxQps = 256;  // QPs whose counters are polled
volatile sig_atomic_t g_stop = 0;

// One QP's state and error counters; false if it is gone (or unreadable).
// State first: the engine counts a failure before it moves the QP to ERR,
// so counters read after an ERR state include the growth that explains it.
bool poll_qp(ControlClient& client, uint32_t qpn, QpSnapshot* q) {
  std::vector<Counter> counters;
  mroce_qp_transport_resp t{};
  std::string why;
  if (client.query_qp_transport(qpn, &t, &why) || client.query_counters(qpn, &counters, &why))
    return false;
  q->state = qp_state_name(t.qp_state);
  q->error = t.error_status ? wc_status_text(t.error_status) : "";
  q->errors = error_counters(counters);
  return true;
}

// One poll of DEV. A failed call drops the connection (reopened next time).
Snapshot take_snapshot(const Command& c, std::unique_ptr<ControlClient>* client) {
  Snapshot s;
  DeviceInfo d;
  std::string why;
  if (read_device(c.sysfs_root, c.run_dir, c.dev, &d, &why) == 0) s.port = d.state;
  if (!*client) {
    auto fresh = std::make_unique<ControlClient>();
    fresh->set_timeout_ms(static_cast<int>(c.timeout_ms));
    if (fresh->connect(socket_path(c.sysfs_root, c.run_dir, c.dev), c.dev, &why) ||
        fresh->open_context_keeping_events(&why))
      return s;
    *client = std::move(fresh);
  }
  // Our context is sent port events too: read them, or they count as
  // async_event_write_failed (the port change itself comes from the tree).
  (*client)->drain_async_events();
  std::vector<Counter> counters;
  std::vector<uint32_t> qps;
  if ((*client)->query_counters(kDeviceCounters, &counters, &why) || (*client)->list_qps(&qps, &why)) {
    client->reset();
    return s;
  }
  s.daemon = true;
  s.dev_errors = error_counters(counters);
  for (size_t i = 0; i < qps.size(); i++) {
    QpSnapshot q;
    // A QP destroyed since LIST_QPS answers ENOENT: it is simply gone.
    if (i < kMonitorMaxQps && !poll_qp(**client, qps[i], &q)) continue;
    s.qps[qps[i]] = std::move(q);
  }
  return s;
}

std::string now_text() {
  auto t = std::chrono::system_clock::now();
  std::time_t secs = std::chrono::system_clock::to_time_t(t);
  int ms = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                t.time_since_epoch()).count() % 1000);
  char buf[40];
  std::strftime(buf, sizeof(buf), "%FT%T", std::gmtime(&secs));
  return std::string(buf) + "." + std::to_string(1000 + ms).substr(1) + "Z";
}

// Each event is flushed as it is printed: a pipe (`monitor | grep`) gets
// it at once, not when a stdio buffer fills.
void print_events(const Command& c, const std::vector<Event>& events) {
  for (const Event& e : events) {
    std::string t = now_text();
    std::cout << (c.json ? json_event(c.dev, e, t) : t + " " + format_event(c.dev, e)) << std::endl;
  }
}

int monitor(const Command& c) {
  struct sigaction sa {};
  sa.sa_handler = [](int) { g_stop = 1; };
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  std::unique_ptr<ControlClient> client;
  Snapshot prev = take_snapshot(c, &client);
  // The state at start (no error events: those counters are history).
  std::vector<Event> start = diff_snapshots(Snapshot{!prev.daemon, "", {}, {}}, prev);
  std::erase_if(start, [](const Event& e) { return e.kind == "error"; });
  print_events(c, start);
  while (!g_stop) {
    std::this_thread::sleep_for(std::chrono::milliseconds(kMonitorIntervalMs));
    Snapshot s = take_snapshot(c, &client);
    print_events(c, diff_snapshots(prev, s));
    prev = std::move(s);
  }
  return 0;
}

int capture(const Command& c) {
  DeviceInfo d;
  std::string why;
  if (read_device(c.sysfs_root, c.run_dir, c.dev, &d, &why)) return fail(why);
  if (d.netdev.empty()) return fail(c.dev + " publishes no interface (no GID has a netdev)");
  CaptureRequest r;
  r.netdev = d.netdev;
  r.file = c.capture_file;
  r.count = c.capture_count;
  r.duration_s = c.capture_duration_s;
  r.ready = [&] {
    std::cerr << "capturing " << c.dev << " on " << d.netdev << " to " << r.file << "\n";
  };
  uint64_t frames = 0;
  if (ctl::capture(r, &frames, &why)) return fail("capture " + c.dev + ": " + why);
  if (c.json) {
    print_json({JsonObject().add("ifname", c.dev).add("netdev", d.netdev).add("file", r.file)
                    .add("frames", frames).str()});
  } else {
    std::cout << frames << " frames of " << c.dev << " (" << d.netdev << ") written to " << r.file << "\n";
  }
  return 0;
}

int run(int argc, char** argv) {
  Command c;
  std::string error;
  Env e{env("SYSFS_PATH"), env("METAROCE_RUN_DIR"), env("METAROCE_CONFIG_DIR")};
  if (!parse_command_line({argv + 1, argv + argc}, e, &c, &error)) {
    std::cerr << "metaroce-ctl: " << error << "\n" << usage();
    return 2;
  }
  switch (c.verb) {
    case Verb::kHelp: std::cout << usage(); return 0;
    case Verb::kDevShow: return dev_show(c);
    case Verb::kStat: return stat(c);
    case Verb::kLinkShow: return link_show(c);
    case Verb::kLinkAdd: return link_add(c);
    case Verb::kLinkDelete: return link_delete(c);
    case Verb::kMonitor: return monitor(c);
    case Verb::kCapture: return capture(c);
  }
  return 2;
}

}  // namespace
}  // namespace metaroce::ctl

int main(int argc, char** argv) { return metaroce::ctl::run(argc, argv); }
