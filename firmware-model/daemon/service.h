// What metaroced needs to run as a service (docs/operations.md): its
// options from a config file, readiness for systemd (the NOTIFY_SOCKET
// datagram protocol of sd_notify(3), without libsystemd), and one daemon
// per interface.
#pragma once

#include <string>
#include <vector>

namespace metaroce::daemon {

// Reads a config file, /etc/metaroce/IF.conf: one daemon option per line,
// its long name without "--" and its value ("paths 8", "io packet", "v"),
// '#' starts a comment. Appends the options to *args as command-line
// words. Each line is checked with the command line's own parser, so a bad
// line gives "FILE:LINE: <what is wrong>". `netdev` and `config` are not
// accepted: the interface is the file's (and the unit instance's) name.
bool read_config_file(const std::string& path, std::vector<std::string>* args,
                      std::string* error);

// The command line with `--config FILE` replaced by FILE's options, which
// come first so that the command line overrides them. At most one --config.
bool expand_config_option(const std::vector<std::string>& args, std::vector<std::string>* out,
                          std::string* error);

// Sends `state` ("READY=1\nSTATUS=...") to $NOTIFY_SOCKET when set (path
// or '@' abstract name). Returns 0 when sent or when there is no socket,
// else an errno with *why set.
int notify_service_manager(const std::string& state, std::string* why);

// Claims the interface for this process: binds the abstract Unix socket
// "@metaroced/IF", which is per network namespace and released by the
// kernel when the process dies. Returns the socket (keep it open), or -1
// with *why naming the daemon (pid) that already serves IF.
int claim_interface(const std::string& netdev, std::string* why);

}  // namespace metaroce::daemon
