// metaroce-ctl's output: plain text, one object per block, stable field
// names a script can grep (like iproute2's `rdma`). Pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "firmware-model/uapi/metaroce_abi.h"
#include "tools/ctl/sysfs.h"

namespace metaroce::ctl {

struct Counter {
  std::string name;
  uint64_t value = 0;
};

// Whether a metaroced answers on the device's socket.
enum class DaemonState { kUnknown, kRunning, kNotRunning };

// "metaroce0: state ACTIVE physical_state LinkUp netdev mroce-va node_guid ..."
// then one indented line per non-zero GID.
std::string format_device(const DeviceInfo& d, DaemonState daemon);

// "link metaroce2/1 state ACTIVE netdev veth-c daemon running pid 812 socket PATH"
std::string format_link(const DeviceInfo& d, DaemonState daemon, int pid);

// The group a counter belongs to: "transport" (the engine), "control",
// "daemon", "dma" or "io" (packet I/O backend), by name.
std::string_view counter_group(std::string_view name);

// "TITLE:" then, per group in a fixed order, "  group:" and "    name value"
// lines, aligned. Without `all` zero counters are left out (and groups
// that become empty); if nothing is left a line says so.
std::string format_counters(const std::string& title, const std::vector<Counter>& counters,
                            bool all);

// The same objects as JSON (docs/operations.md §JSON lists the fields).
// dev:  {"ifname","state","physical_state","netdev","node_guid","fw","daemon",
//        "gids":[{"index","gid","ip","type"}]}
// link: {"ifname","port","state","netdev","daemon","pid","socket"}
// counters: {"NAME": value, ...}, every counter (zero ones too).
std::string json_device(const DeviceInfo& d, DaemonState daemon);
std::string json_link(const DeviceInfo& d, DaemonState daemon, int pid);
std::string json_counters(const std::vector<Counter>& counters);
const char* daemon_text(DaemonState s);

// "RTS" for enum ibv_qp_state 3; "state 9" for values no verbs state has.
std::string qp_state_name(uint32_t state);
// ibv_wc_status_str()'s text ("remote access error" for 10), without
// linking libibverbs; "status 99" for unknown values.
std::string wc_status_text(uint32_t status);

// A QP's transport state (stat --qp N), with its loss and retransmission
// counters taken from `counters`:
//   "  transport state:\n    qp_state ERR error remote access error\n"
//   "    cc default rtt_us srtt 210.5 min 180.2 var 12.0 rto 1000.0\n"
//   "    cwnd_bytes 65536 pacing_mbps 2496.1 inflight 3 pkts 12288 bytes\n"
//   "    lost 0 retransmits 4 timeouts 0\n    path_weights 1.000 0.500\n"
std::string format_transport(const mroce_qp_transport_resp& t, const std::vector<Counter>& counters);
// {"qp_state","error" ("" none),"cc","srtt_ns","min_rtt_ns","rttvar_ns","rto_ns","cwnd_bytes","pacing_rate_bps",
//  "bytes_in_flight","pkts_in_flight","lost","retransmits","timeouts","path_weights_ppm":[...]}
std::string json_transport(const mroce_qp_transport_resp& t, const std::vector<Counter>& counters);

}  // namespace metaroce::ctl
