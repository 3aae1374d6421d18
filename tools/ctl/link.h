// `metaroce-ctl link add/delete`: starting and stopping a metaroced per
// device, the way `ip link add` makes a device appear. The daemon runs
// detached (its own session), logs to <run_dir>/<NAME>.log and is
// remembered by <run_dir>/<NAME>.pid.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace metaroce::ctl {

struct LinkPaths {
  std::string socket;   // <run_dir>/<name>.sock
  std::string pidfile;  // <run_dir>/<name>.pid
  std::string log;      // <run_dir>/<name>.log
};
LinkPaths link_paths(const std::string& run_dir, const std::string& name);

// metaroced's command line for `link add`.
std::vector<std::string> daemon_command(const std::string& metaroced, const std::string& name,
                                        const std::string& netdev, const std::string& run_dir,
                                        const std::string& sysfs_root,
                                        const std::vector<std::string>& extra);

// Where metaroced is: $METAROCED (given as `env`), else next to this
// program (`self_dir`), else in `self_dir`/../sbin (the package's layout),
// else the first match on `path` ($PATH).
// "" with *why when none is executable.
std::string find_metaroced(const std::string& env, const std::string& self_dir,
                           const std::string& path, std::string* why);

// The last `lines` lines of a file ("" if unreadable).
std::string tail_lines(const std::string& file, size_t lines);

// pid in the pidfile, or 0 when absent/unparsable.
pid_t read_pidfile(const std::string& pidfile);
// Is pid alive and the metaroced serving `name` (its /proc/PID/cmdline has
// --ibdev NAME, so a recycled pid is never mistaken for it)? Zombies count
// as dead.
bool is_live_daemon(pid_t pid, const std::string& name);
// Does someone accept connections on this socket?
bool socket_listening(const std::string& path);

struct LinkAddRequest {
  std::string name, netdev, run_dir, sysfs_root, metaroced;
  std::vector<std::string> daemon_args;
  int timeout_ms = 10000;
};
// Starts the daemon and waits for its socket. On success prints nothing
// and returns 0 with *pid set; on failure an errno with *why (including
// the log's last lines when the daemon died).
int link_add(const LinkAddRequest& r, pid_t* pid, std::string* why);

// SIGTERM to the daemon of the pidfile, waits for it to exit, checks its
// socket no longer answers, removes the pidfile.
int link_delete(const std::string& name, const std::string& run_dir, int timeout_ms,
                std::string* why);

}  // namespace metaroce::ctl
