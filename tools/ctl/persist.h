// `metaroce-ctl link add NAME netdev IF --persist [OPTIONS]`: the daemon's
// options written to /etc/metaroce/IF.conf (the file metaroced@IF.service
// reads) and the unit enabled, so the device comes back after a reboot.
// docs/operations.md §Service.
#pragma once

#include <string>
#include <vector>

namespace metaroce::ctl {

inline constexpr const char* kDefaultConfigDir = "/etc/metaroce";
inline constexpr const char* kUnitFile = "/lib/systemd/system/metaroced@.service";

// The config file text for device `name` with metaroced options `args`
// ("--paths 8 -v" -> "paths 8", "v"). Pure. false with *why when an
// argument is not an option.
bool config_text(const std::string& name, const std::vector<std::string>& args,
                 std::string* out, std::string* why);

// Writes `text` to <dir>/<netdev>.conf atomically (mode 0644). 0 or an
// errno with *why.
int write_config(const std::string& dir, const std::string& netdev, const std::string& text,
                 std::string* why);

// How the unit can be used here.
enum class Systemd {
  kRunning,       // PID 1 is systemd: systemctl enable --now
  kOffline,       // systemctl and the unit exist, systemd is not PID 1: enable only
  kUnavailable,   // no systemctl or no unit installed
};
Systemd systemd_state(const std::string& unit_file);
// Runs `systemctl ARGS...`; 0 or its exit status with *why.
int systemctl(const std::vector<std::string>& args, std::string* why);

}  // namespace metaroce::ctl
