// metaroce-ctl's command line, in the spirit of iproute2's `rdma`:
//   metaroce-ctl [global options] OBJECT [COMMAND] [ARGS]
// Parsing is pure (no file system, no environment read here: the caller
// passes the environment in), so every error message is unit-tested.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace metaroce::ctl {

enum class Verb {
  kHelp,        // -h / help
  kDevShow,     // dev [show [NAME]]
  kStat,        // stat [-a] [--qp N|all] DEV
  kLinkAdd,     // link add NAME netdev IF [daemon options...]
  kLinkDelete,  // link delete NAME
  kLinkShow,    // link [show [NAME]]
  kMonitor,     // monitor DEV
  kCapture,     // capture DEV -w FILE [--count N] [--duration S]
};

// What the environment supplies (read by main(), injected by tests).
struct Env {
  std::string sysfs_path;  // $SYSFS_PATH, "" when unset
  std::string run_dir;     // $METAROCE_RUN_DIR, "" when unset
  std::string config_dir;  // $METAROCE_CONFIG_DIR, "" when unset
};

inline constexpr uint32_t kAllQps = 0xfffffffe;  // --qp all (0xffffffff is "device")

struct Command {
  Verb verb = Verb::kHelp;
  std::string sysfs_root;   // --sysfs-root, else $SYSFS_PATH, else kDefaultSysfsRoot
  std::string run_dir;      // --run-dir, else $METAROCE_RUN_DIR, else /run/metaroce
  std::string dev;          // the device NAME, "" for "all devices"
  bool all = false;         // -a: also zero counters
  bool json = false;        // -j: JSON (docs/operations.md §JSON)
  bool has_qp = false;
  uint32_t qpn = 0;         // with has_qp: a QP number, or kAllQps
  std::string netdev;       // link add
  std::vector<std::string> daemon_args;  // link add: passed to metaroced as is
  uint32_t timeout_ms = 10000;           // --timeout SECONDS (link add/delete, control calls)
  bool persist = false;                  // link add ... --persist
  std::string capture_file;              // capture -w FILE
  uint64_t capture_count = 0;            // capture --count N (0: no limit)
  uint32_t capture_duration_s = 0;       // capture --duration S (0: no limit)
  std::string config_dir;  // --config-dir, else $METAROCE_CONFIG_DIR, else /etc/metaroce
};

inline constexpr const char* kDefaultSysfsRoot = "/run/metaroce/sysfs";

// Parses argv (without argv[0]). On error returns false with *error saying
// what was wrong and what is expected; the caller prints it with usage()
// and exits 2.
bool parse_command_line(const std::vector<std::string>& args, const Env& env, Command* out,
                        std::string* error);
const char* usage();

// metaroceN, as metaroced requires.
bool valid_device_name(const std::string& name);

}  // namespace metaroce::ctl
