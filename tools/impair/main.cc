// mroce-impair: a fault-injection hop between two interfaces (docs/impair.md).
#include <sched.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "tools/impair/config.h"
#include "tools/impair/forwarder.h"

using namespace metaroce::impair;

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  for (const auto& a : args) {
    if (a == "--help" || a == "-h") {
      fputs(kUsage, stdout);
      return 0;
    }
  }
  Config cfg;
  std::string why;
  if (!parse_args(args, &cfg, &why)) {
    fprintf(stderr, "mroce-impair: %s\n", why.c_str());
    return 2;
  }
  if (cfg.rt_priority) {
    sched_param sp{};
    sp.sched_priority = cfg.rt_priority;
    if (sched_setscheduler(0, SCHED_FIFO, &sp) != 0) {
      fprintf(stderr, "mroce-impair: SCHED_FIFO %d: %s (needs CAP_SYS_NICE)\n", cfg.rt_priority, strerror(errno));
      return 1;
    }
  }
  auto fwd = Forwarder::open(cfg, &why);
  if (!fwd) {
    fprintf(stderr, "mroce-impair: %s\n", why.c_str());
    return 1;
  }
  fprintf(stderr, "mroce-impair: forwarding %s <-> %s (seed %llu)\n", cfg.leg_a.c_str(), cfg.leg_b.c_str(),
          static_cast<unsigned long long>(cfg.seed));
  if (!cfg.ready_path.empty()) std::ofstream(cfg.ready_path) << "ready\n";
  int rc = fwd->run();
  fwd->write_stats();
  return rc;
}
