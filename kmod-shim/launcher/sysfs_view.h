// The sysfs view of metaroce-run: runs a program in a private mount
// namespace where the daemon's published tree appears at the standard paths,
// /sys/class/infiniband and /sys/class/infiniband_verbs, for the programs
// that read them directly instead of through libibverbs (UCX reads
// ports/P/gid_attrs/types/I there, NCCL device/ and the GID types). docs:
// docs/provider.md "Programs that read /sys directly".
//
// /sys/class is sysfs, where no directory can be made, so the view covers it
// with a small tmpfs that holds a bind mount of every class the host has
// (net, block, ...: unchanged, live) plus bind mounts of the published
// class/infiniband and class/infiniband_verbs (read-only, and live: a device
// the daemon republishes after a restart shows at once). Mounts are slave:
// nothing the view mounts reaches the host, so programs run without the
// launcher see exactly what they did before.
//
// Privilege: with CAP_SYS_ADMIN (root) a plain mount namespace. Without it,
// an unprivileged user namespace that maps only the caller's own uid and gid
// (so the program keeps its identity; files of other users read as
// nobody/nogroup, and setuid programs run without their privilege). Where
// user namespaces are disabled the view cannot be made: make_view() says so
// and why, and changes nothing.
#pragma once

#include <string>

namespace metaroce::launcher {

struct ViewOptions {
  std::string published_root = "/run/metaroce/sysfs";  // the daemon's --sysfs-root
  std::string sys_class = "/sys/class";                // where the view goes
};

// How the view was made, for messages: "mount namespace" or
// "user + mount namespace (uid U)".
struct ViewResult {
  bool ok = false;
  std::string how;
  std::string why;  // on failure: what failed, its errno text, what to do
  // On failure: whether the program may still run here. False when a user
  // namespace was made but its uid/gid maps could not be written (the
  // program would run with no identity).
  bool fallback_safe = true;
};

// Enters the new namespace(s) and builds the view. The calling process must
// be single-threaded (user namespaces require it). On failure after the
// namespace exists, every mount made so far is undone, so the caller may
// still run the program with the host's /sys (unless !fallback_safe).
ViewResult make_view(const ViewOptions& options);

}  // namespace metaroce::launcher
