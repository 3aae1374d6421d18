// metaroce-sysfs-view: metaroce-run's helper that runs CMD with the published
// device tree at /sys/class/infiniband{,_verbs} (kmod-shim/launcher/sysfs_view.h).
//
//   metaroce-sysfs-view [--fallback] --sysfs-root DIR [--ld-preload LIST] -- CMD [ARGS...]
//
// --ld-preload: the LD_PRELOAD CMD runs with (the helper itself runs with
// the caller's).
// With the view, SYSFS_PATH is unset: every reader, libibverbs included,
// reads the standard paths. Without it (no privilege and no user
// namespaces, or kernel RDMA already owns /sys/class/infiniband), --fallback
// runs CMD anyway with SYSFS_PATH=DIR and says what does not see the
// devices; otherwise it exits 1 with the reason.
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "kmod-shim/launcher/sysfs_view.h"

namespace {

int usage() {
  std::fprintf(stderr, "usage: metaroce-sysfs-view [--fallback] --sysfs-root DIR [--ld-preload LIST] -- CMD [ARGS...]\n");
  return 2;
}

int run(char** cmd, const char* ld_preload) {
  if (ld_preload && *ld_preload) setenv("LD_PRELOAD", ld_preload, 1);
  execvp(cmd[0], cmd);
  std::fprintf(stderr, "metaroce-run: cannot run %s: %s\n", cmd[0], std::strerror(errno));
  return 127;
}

}  // namespace

int main(int argc, char** argv) {
  metaroce::launcher::ViewOptions o;
  bool fallback = false;
  const char* ld_preload = nullptr;
  int i = 1;
  for (; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--fallback") {
      fallback = true;
    } else if (a == "--sysfs-root" && i + 1 < argc) {
      o.published_root = argv[++i];
    } else if (a == "--ld-preload" && i + 1 < argc) {
      ld_preload = argv[++i];
    } else if (a == "--") {
      ++i;
      break;
    } else {
      return usage();
    }
  }
  if (i >= argc) return usage();
  metaroce::launcher::ViewResult r = metaroce::launcher::make_view(o);
  if (r.ok) {
    // SYSFS_PATH stays set beside the view: a program that remounts /sys
    // (`ip netns exec` does) drops the view, and libibverbs must still
    // find the devices. Both name the same tree.
    setenv("SYSFS_PATH", o.published_root.c_str(), 1);
    return run(argv + i, ld_preload);
  }
  if (!fallback || !r.fallback_safe) {
    std::fprintf(stderr, "metaroce-run: cannot show the devices at /sys/class/infiniband: %s\n", r.why.c_str());
    return 1;
  }
  std::fprintf(stderr,
               "metaroce-run: warning: no /sys/class/infiniband view (%s); libibverbs finds the devices through "
               "SYSFS_PATH=%s, programs that read /sys/class/infiniband directly (UCX, NCCL) do not "
               "(--sysfs-view=off: no view, no warning)\n",
               r.why.c_str(), o.published_root.c_str());
  setenv("SYSFS_PATH", o.published_root.c_str(), 1);
  return run(argv + i, ld_preload);
}
