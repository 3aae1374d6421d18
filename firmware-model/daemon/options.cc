#include "firmware-model/daemon/options.h"

#include <arpa/inet.h>

#include <charconv>

#include "firmware-model/engine/engine.h"

namespace metaroce::daemon {

const char* usage() {
  return "usage: metaroced --netdev IF [options]\n"
         "  Soft RDMA NIC: hosts the MetaRoCE transport engine on Ethernet interface IF\n"
         "  and publishes it as an RDMA device for libibverbs.\n"
         "options:\n"
         "  --netdev IF             Ethernet interface to own (required)\n"
         "  --ibdev NAME            RDMA device name, metaroceN (default metaroce0)\n"
         "  --io auto|xdp|packet    packet I/O backend (default auto: AF_XDP, else AF_PACKET)\n"
         "  --xdp-mode auto|native|generic   XDP attach mode (default auto)\n"
         "  --gso                   AF_PACKET: frames with the same headers go out as UDP GSO\n"
         "                          super-frames, and super-frames are received (both ends of\n"
         "                          a veth link need it; docs/packet-io.md \"UDP GSO\")\n"
         "  --backend soft|hw       transport: the software engine, or offload hardware\n"
         "  --hw-device pci|model   with --backend hw: the PCI function behind IF (default),\n"
         "                          or the device model (a simulated NIC on IF, behind the\n"
         "                          hardware ABI; docs/hardware-offload.md)\n"
         "  --sysfs-root DIR        where to publish the sysfs-format device tree\n"
         "                          (default /run/metaroce/sysfs; point SYSFS_PATH here)\n"
         "  --run-dir DIR           control socket directory (default /run/metaroce)\n"
         "  --uverbs N              uverbs index (default: N of metaroceN)\n"
         "  --paths N               path entropies sprayed over per QP, 1..64 (default 4)\n"
         "  --path-train N          packets per path choice, 1..64 (default 1: per-packet\n"
         "                          spraying; 16 with --gso, so a super-frame is one path's)\n"
         "  --spin-us N             poll this long when idle before sleeping (default: 0 on\n"
         "                          machines with 1-2 CPUs, where spinning takes the CPU the\n"
         "                          applications need, else 50)\n"
         "  --busy-horizon-us N     stay awake while an ACK, retransmission or pacing deadline\n"
         "                          is this close, 0..100000 (default 2000)\n"
         "  --spin                  dedicated-core mode: the loop never sleeps, applications\n"
         "                          never ring a doorbell; for a machine with a core to spare\n"
         "                          (combine with --cpu)\n"
         "  --cpu N                 pin the daemon to CPU N; on few cores put the applications\n"
         "                          it serves next to it (taskset), docs/daemon.md §Placement\n"
         "  --cc NAME               congestion control algorithm (default: default)\n"
         "  --base-rtt-us N         base RTT floor for congestion control, 1..100000 (default 200:\n"
         "                          a soft NIC's host delay; the CC raises it to the measured minimum)\n"
         "  --link-gbps N           line rate congestion control assumes, 1..800 (default 25)\n"
         "  --max-qp-per-client N   per-process QP limit (default 1024)\n"
         "  --uid-max-qp N          per-user QP limit over all its connections (default 2048)\n"
         "  --uid-max-cq N          per-user CQ limit (default 2048)\n"
         "  --uid-max-srq N         per-user SRQ limit (default 2048)\n"
         "  --uid-max-pd N          per-user PD limit (default 2048)\n"
         "  --uid-max-mr N          per-user MR limit (default 32768)\n"
         "  --max-mw-per-client N   per-connection memory-window limit (default 16384)\n"
         "  --uid-max-mw N          per-user memory-window limit (default 32768)\n"
         "  --uid-max-connections N per-user limit of open control connections (default 256)\n"
         "  --uid-max-ring-mb N     per-user CQ+QP ring memory in MiB (default 1024)\n"
         "  --max-cm-ids-per-client N  rdma_cm IDs per channel (default 1024)\n"
         "  --uid-max-cm-ids N      per-user rdma_cm IDs over all its channels (default 4096)\n"
         "  --pidfile FILE          write the daemon's pid here\n"
         "  --rt-priority N         run the NIC loop SCHED_FIFO at priority N, 0 = off (default\n"
         "                          10: a woken NIC must preempt busy-polling applications)\n"
         "  --config FILE           read options from FILE first, one per line (\"paths 8\");\n"
         "                          the command line overrides it (metaroced@IF reads\n"
         "                          /etc/metaroce/IF.conf)\n"
         "  --metrics [ADDR:]PORT   serve counters to Prometheus on http://ADDR:PORT/metrics (off by default;\n"
         "                          ADDR defaults to 127.0.0.1)\n"
         "  --violate RULE[,RULE]   TEST ONLY: break these protocol rules on purpose (a\n"
         "                          non-conformant device for the conformance suite,\n"
         "                          docs/conformance.md): ack-without-sack, wrong-nack-code,\n"
         "                          no-probe-reply\n"
         "  -v                      log at debug level too (client connections, I/O probing)\n";
}

namespace {
bool parse_u32(const std::string& s, uint32_t lo, uint32_t hi, uint32_t* out) {
  uint32_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || v < lo || v > hi) return false;
  *out = v;
  return true;
}
}  // namespace

bool parse_listen_address(const std::string& s, std::string* addr, uint16_t* port,
                          std::string* error) {
  std::string a = "127.0.0.1", p = s;
  size_t colon = s.rfind(':');
  if (colon != std::string::npos) {
    a = s.substr(0, colon);
    p = s.substr(colon + 1);
    if (a.size() > 2 && a.front() == '[' && a.back() == ']') a = a.substr(1, a.size() - 2);
  }
  uint32_t n = 0;
  unsigned char buf[16];
  bool v4 = inet_pton(AF_INET, a.c_str(), buf) == 1, v6 = inet_pton(AF_INET6, a.c_str(), buf) == 1;
  if (!parse_u32(p, 1, 65535, &n) || !(v4 || v6)) {
    *error = "--metrics expects [ADDR:]PORT (an IP address and a port 1..65535, IPv6 as "
             "[ADDR]:PORT), got '" + s + "'";
    return false;
  }
  *addr = a;
  *port = static_cast<uint16_t>(n);
  return true;
}

bool parse_options(const std::vector<std::string>& args, Options* o, std::string* error,
                   bool* help) {
  *help = false;
  for (size_t i = 0; i < args.size(); i++) {
    const std::string& a = args[i];
    auto value = [&](std::string* v) {
      if (i + 1 >= args.size()) {
        *error = a + " needs a value";
        return false;
      }
      *v = args[++i];
      return true;
    };
    auto number = [&](uint32_t lo, uint32_t hi, uint32_t* out) {
      std::string v;
      if (!value(&v)) return false;
      if (!parse_u32(v, lo, hi, out)) {
        *error = a + " expects a number from " + std::to_string(lo) + " to " +
                 std::to_string(hi) + ", got '" + v + "'";
        return false;
      }
      return true;
    };
    std::string v;
    uint32_t n = 0;
    if (a == "-h" || a == "--help") {
      *help = true;
      return true;
    } else if (a == "-v") {
      o->verbose = true;
    } else if (a == "--netdev") {
      if (!value(&o->netdev)) return false;
    } else if (a == "--ibdev") {
      if (!value(&o->ibdev)) return false;
      if (o->ibdev.rfind("metaroce", 0) != 0 || o->ibdev.size() == 8 ||
          o->ibdev.find_first_not_of("0123456789", 8) != std::string::npos) {
        *error = "--ibdev must be metaroceN (N a number), got '" + o->ibdev + "'";
        return false;
      }
    } else if (a == "--io") {
      if (!value(&v)) return false;
      if (!io::parse_backend(v, &o->io)) {
        *error = "--io expects auto, xdp or packet, got '" + v + "'";
        return false;
      }
    } else if (a == "--gso") {
      o->gso = true;
    } else if (a == "--xdp-mode") {
      if (!value(&v)) return false;
      if (v == "auto") o->xdp_mode = io::XdpMode::kAuto;
      else if (v == "native") o->xdp_mode = io::XdpMode::kNative;
      else if (v == "generic") o->xdp_mode = io::XdpMode::kGeneric;
      else {
        *error = "--xdp-mode expects auto, native or generic, got '" + v + "'";
        return false;
      }
    } else if (a == "--backend") {
      if (!value(&o->backend)) return false;
      if (o->backend != "soft" && o->backend != "hw") {
        *error = "--backend expects soft or hw, got '" + o->backend + "'";
        return false;
      }
    } else if (a == "--hw-device") {
      if (!value(&o->hw_device)) return false;
      if (o->hw_device != "pci" && o->hw_device != "model") {
        *error = "--hw-device expects pci or model, got '" + o->hw_device + "'";
        return false;
      }
    } else if (a == "--sysfs-root") {
      if (!value(&o->sysfs_root)) return false;
    } else if (a == "--run-dir") {
      if (!value(&o->run_dir)) return false;
    } else if (a == "--uverbs") {
      if (!number(0, 255, &n)) return false;
      o->uverbs_index = static_cast<int>(n);
    } else if (a == "--paths") {
      if (!number(1, 64, &o->paths)) return false;
    } else if (a == "--path-train") {
      if (!number(1, 64, &o->path_train)) return false;
    } else if (a == "--spin-us") {
      if (!number(0, 1'000'000, &n)) return false;
      o->spin_us = static_cast<int>(n);
    } else if (a == "--spin") {
      o->spin = true;
    } else if (a == "--cpu") {
      if (!number(0, 4095, &n)) return false;
      o->cpu = static_cast<int>(n);
    } else if (a == "--busy-horizon-us") {
      if (!number(0, 100'000, &o->busy_horizon_us)) return false;
    } else if (a == "--base-rtt-us") {
      if (!number(1, 100'000, &o->base_rtt_us)) return false;
    } else if (a == "--link-gbps") {
      if (!number(1, 800, &o->link_gbps)) return false;
    } else if (a == "--cc") {
      if (!value(&o->cc)) return false;
    } else if (a == "--max-qp-per-client") {
      if (!number(1, 65536, &o->max_qp_per_client)) return false;
    } else if (a == "--uid-max-qp") {
      if (!number(1, 65536, &o->uid_max_qp)) return false;
    } else if (a == "--uid-max-srq") {
      if (!number(1, 65536, &o->uid_max_srq)) return false;
    } else if (a == "--uid-max-cq") {
      if (!number(1, 65536, &o->uid_max_cq)) return false;
    } else if (a == "--uid-max-pd") {
      if (!number(1, 65536, &o->uid_max_pd)) return false;
    } else if (a == "--uid-max-mr") {
      if (!number(1, 1u << 20, &o->uid_max_mr)) return false;
    } else if (a == "--max-mw-per-client") {  // mw2
      if (!number(1, 65536, &o->max_mw_per_client)) return false;
    } else if (a == "--uid-max-mw") {  // mw2
      if (!number(1, 1u << 20, &o->uid_max_mw)) return false;
    } else if (a == "--uid-max-connections") {
      if (!number(1, 65536, &o->uid_max_connections)) return false;
    } else if (a == "--max-cm-ids-per-client") {
      if (!number(1, 65536, &o->max_cm_ids_per_client)) return false;
    } else if (a == "--uid-max-cm-ids") {
      if (!number(1, 1u << 20, &o->uid_max_cm_ids)) return false;
    } else if (a == "--uid-max-ring-mb") {
      if (!number(1, 1u << 20, &o->uid_max_ring_mb)) return false;
    } else if (a == "--rt-priority") {
      if (!number(0, 99, &o->rt_priority)) return false;
    } else if (a == "--pidfile") {
      if (!value(&o->pidfile)) return false;
    } else if (a == "--violate") {
      if (!value(&v)) return false;
      if (!fw::parse_violations(v, &o->violate, error)) {
        *error = "--violate: " + *error;
        return false;
      }
    } else if (a == "--metrics") {
      if (!value(&v) || !parse_listen_address(v, &o->metrics_addr, &o->metrics_port, error))
        return false;
    } else {
      *error = "unknown argument '" + a + "' (see --help)";
      return false;
    }
  }
  if (o->gso && o->io != io::Backend::kPacket) {
    *error = "--gso needs --io packet (UDP GSO super-frames are an AF_PACKET feature)";
    return false;
  }
  if (o->netdev.empty()) {
    *error = "--netdev IF is required: the Ethernet interface this NIC owns";
    return false;
  }
  if (o->uverbs_index < 0) o->uverbs_index = std::stoi(o->ibdev.substr(8));
  return true;
}

}  // namespace metaroce::daemon
