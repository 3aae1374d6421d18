// metaroced's command line (docs/daemon.md §Command line).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "firmware-model/daemon/io/packet_io.h"

namespace metaroce::daemon {

struct Options {
  std::string netdev;                 // --netdev IF (required)
  std::string ibdev = "metaroce0";    // --ibdev NAME (must be metaroceN)
  std::string backend = "soft";       // --backend soft|hw
  std::string hw_device = "pci";      // --hw-device pci|model (with --backend hw)
  io::Backend io = io::Backend::kAuto;  // --io auto|xdp|packet
  io::XdpMode xdp_mode = io::XdpMode::kAuto;  // --xdp-mode auto|native|generic
  bool gso = false;                   // --gso: UDP GSO super-frames (AF_PACKET)
  std::string sysfs_root = "/run/metaroce/sysfs";  // --sysfs-root DIR
  std::string run_dir = "/run/metaroce";           // --run-dir DIR (control socket)
  int uverbs_index = -1;              // --uverbs N (default: N of metaroceN)
  uint32_t paths = 4;                 // --paths N (path entropies per QP)
  uint32_t path_train = 0;            // --path-train N (0: 16 with --gso, else 1)
  int spin_us = -1;                   // --spin-us N (poll this long before sleeping; -1: auto)
  // wake: placement and wake-up (docs/daemon.md §The loop).
  bool spin = false;                  // --spin: dedicated core, the loop never sleeps
  int cpu = -1;                       // --cpu N: pin the daemon to CPU N (-1: anywhere)
  uint32_t busy_horizon_us = 2000;    // --busy-horizon-us N: awake while a deadline is this close
  std::string cc = "default";         // --cc NAME
  uint32_t base_rtt_us = 200;         // --base-rtt-us N (congestion control's base RTT floor)
  uint32_t link_gbps = 25;            // --link-gbps N (line rate the CC assumes)
  uint32_t max_qp_per_client = 1024;  // --max-qp-per-client N
  // Per-user (uid) limits over all of a user's connections (--uid-max-*).
  uint32_t uid_max_pd = 2048, uid_max_mr = 32768, uid_max_cq = 2048, uid_max_qp = 2048;
  uint32_t uid_max_srq = 2048;  // --uid-max-srq N
  uint32_t max_mw_per_client = 16384, uid_max_mw = 32768;  // mw2: --max-mw-per-client, --uid-max-mw
  uint32_t uid_max_connections = 256;
  uint32_t uid_max_ring_mb = 1024;    // CQ and QP ring memory, MiB
  uint32_t max_cm_ids_per_client = 1024;  // --max-cm-ids-per-client N (rdma_cm IDs)
  uint32_t uid_max_cm_ids = 4096;         // --uid-max-cm-ids N
  std::string pidfile;                // --pidfile FILE
  uint32_t rt_priority = 10;          // --rt-priority N (SCHED_FIFO; 0 = normal scheduling)
  bool verbose = false;               // -v
  // --metrics [ADDR:]PORT: Prometheus text over HTTP (docs/operations.md); off
  // when metrics_port is 0. ADDR defaults to 127.0.0.1 (IPv6 as [ADDR]).
  std::string metrics_addr = "127.0.0.1";
  uint16_t metrics_port = 0;
  // --violate RULE[,RULE]: test only. Breaks the named rules of
  // docs/protocol.md on purpose (fw::Violation), for the conformance
  // suite's non-conformant device. Command line only, never a config file.
  uint32_t violate = 0;
};

// "9464", "127.0.0.1:9464", "[::1]:9464" -> address and port (1..65535).
bool parse_listen_address(const std::string& s, std::string* addr, uint16_t* port,
                          std::string* error);

// Parses argv. On error returns false and sets *error to a message naming
// the bad argument and what is expected. --help sets *help.
bool parse_options(const std::vector<std::string>& args, Options* out, std::string* error,
                   bool* help);
const char* usage();

}  // namespace metaroce::daemon
