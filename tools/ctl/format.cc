#include "tools/ctl/format.h"

#include <algorithm>
#include <cstdio>

#include "tools/ctl/json.h"

namespace metaroce::ctl {

const char* daemon_text(DaemonState s) {
  switch (s) {
    case DaemonState::kRunning: return "running";
    case DaemonState::kNotRunning: return "not-running";
    case DaemonState::kUnknown: break;
  }
  return "unknown";
}

namespace {

std::string or_dash(const std::string& s) { return s.empty() ? "-" : s; }

// Groups in print order, and the name prefixes that select them. Engine
// counters have no common prefix: whatever matches nothing is "transport".
struct GroupRule {
  std::string_view prefix;
  std::string_view group;
};
constexpr GroupRule kRules[] = {
    {"ctrl_", "control"},    {"clients_", "control"},  {"tx_drop_", "daemon"},
    {"wqe_", "daemon"},      {"cq_event", "daemon"},   {"async_event", "daemon"},
    {"doorbell_", "daemon"}, {"dma_", "dma"},          {"io_", "io"},
};
constexpr std::string_view kGroupOrder[] = {"transport", "daemon", "dma", "io", "control"};

}  // namespace

std::string_view counter_group(std::string_view name) {
  for (const GroupRule& r : kRules) {
    if (name.substr(0, r.prefix.size()) == r.prefix) return r.group;
  }
  return "transport";
}

std::string format_device(const DeviceInfo& d, DaemonState daemon) {
  std::string s = d.name + ": state " + or_dash(d.state) + " physical_state " +
                  or_dash(d.phys_state) + " netdev " + or_dash(d.netdev) + " node_guid " +
                  or_dash(d.node_guid);
  if (!d.fw_ver.empty()) s += " fw " + d.fw_ver;
  s += " daemon " + std::string(daemon_text(daemon)) + "\n";
  for (const Gid& g : d.gids) {
    s += "    gid " + std::to_string(g.index) + " " + g.raw;
    if (!g.ip.empty()) s += " (" + g.ip + ")";
    if (!g.type.empty()) s += " " + g.type;
    s += "\n";
  }
  if (d.gids.empty()) s += "    no GIDs (the interface has no IP address)\n";
  return s;
}

std::string format_link(const DeviceInfo& d, DaemonState daemon, int pid) {
  std::string s = "link " + d.name + "/1 state " + or_dash(d.state) + " netdev " +
                  or_dash(d.netdev) + " daemon " + daemon_text(daemon);
  if (pid > 0) s += " pid " + std::to_string(pid);
  return s + " socket " + d.socket_path + "\n";
}

std::string format_counters(const std::string& title, const std::vector<Counter>& counters,
                            bool all) {
  std::string s = title + ":\n";
  size_t width = 0;
  for (const Counter& c : counters) {
    if (all || c.value) width = std::max(width, c.name.size());
  }
  bool any = false;
  for (std::string_view group : kGroupOrder) {
    std::string lines;
    for (const Counter& c : counters) {
      if (counter_group(c.name) != group || (!all && c.value == 0)) continue;
      lines += "    " + c.name + std::string(width - c.name.size() + 1, ' ') +
               std::to_string(c.value) + "\n";
    }
    if (lines.empty()) continue;
    s += "  " + std::string(group) + ":\n" + lines;
    any = true;
  }
  if (!any) {
    s += counters.empty() ? "  (no counters)\n"
                          : "  all " + std::to_string(counters.size()) +
                                " counters are zero (-a shows them)\n";
  }
  return s;
}

std::string json_device(const DeviceInfo& d, DaemonState daemon) {
  std::vector<std::string> gids;
  for (const Gid& g : d.gids) {
    gids.push_back(JsonObject()
                       .add("index", static_cast<uint64_t>(g.index))
                       .add("gid", g.raw)
                       .add("ip", g.ip)
                       .add("type", g.type)
                       .str());
  }
  return JsonObject()
      .add("ifname", d.name)
      .add("state", d.state)
      .add("physical_state", d.phys_state)
      .add("netdev", d.netdev)
      .add("node_guid", d.node_guid)
      .add("fw", d.fw_ver)
      .add("daemon", daemon_text(daemon))
      .add_json("gids", json_array(gids))
      .str();
}

std::string json_link(const DeviceInfo& d, DaemonState daemon, int pid) {
  return JsonObject()
      .add("ifname", d.name)
      .add("port", uint64_t{1})
      .add("state", d.state)
      .add("netdev", d.netdev)
      .add("daemon", daemon_text(daemon))
      .add("pid", static_cast<uint64_t>(pid > 0 ? pid : 0))
      .add("socket", d.socket_path)
      .str();
}

std::string json_counters(const std::vector<Counter>& counters) {
  JsonObject o;
  for (const Counter& c : counters) o.add(c.name, c.value);
  return o.str();
}

namespace {

uint64_t counter(const std::vector<Counter>& counters, std::string_view name) {
  for (const Counter& c : counters)
    if (c.name == name) return c.value;
  return 0;
}

std::string fixed(double v, int decimals) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.*f", decimals, v);
  return buf;
}

}  // namespace

std::string qp_state_name(uint32_t state) {
  static constexpr const char* kNames[] = {"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"};
  return state < std::size(kNames) ? kNames[state] : "state " + std::to_string(state);
}

std::string wc_status_text(uint32_t status) {
  static constexpr const char* kText[] = {  // libibverbs' ibv_wc_status_str()
      "success", "local length error", "local QP operation error",
      "local EE context operation error", "local protection error", "Work Request Flushed Error",
      "memory management operation error", "bad response error", "local access error",
      "remote invalid request error", "remote access error", "remote operation error",
      "transport retry counter exceeded", "RNR retry counter exceeded", "local RDD violation error",
      "remote invalid RD request", "operation aborted", "invalid EE context number",
      "invalid EE context state", "fatal error", "response timeout error", "general error"};
  return status < std::size(kText) ? kText[status] : "status " + std::to_string(status);
}

// Appends only: GCC 12 at -O3 warns falsely (-Wrestrict) on
// "literal" + std::string&& chains.
std::string format_transport(const mroce_qp_transport_resp& t, const std::vector<Counter>& counters) {
  std::string s = "  transport state:\n    qp_state ";
  s.append(qp_state_name(t.qp_state));
  if (t.error_status) s.append(" error ").append(wc_status_text(t.error_status));
  s.append("\n    cc ");
  s.append(t.cc[0] ? t.cc : "-");
  s.append(" rtt_us srtt ").append(fixed(t.srtt_ns / 1e3, 1));
  s.append(" min ").append(fixed(t.min_rtt_ns / 1e3, 1));
  s.append(" var ").append(fixed(t.rttvar_ns / 1e3, 1));
  s.append(" rto ").append(fixed(t.rto_ns / 1e3, 1));
  s.append("\n    cwnd_bytes ").append(std::to_string(t.cwnd_bytes));
  s.append(" pacing_mbps ").append(fixed(t.pacing_rate_bps / 1e6, 1));
  s.append(" inflight ").append(std::to_string(t.pkts_in_flight));
  s.append(" pkts ").append(std::to_string(t.bytes_in_flight));
  s.append(" bytes\n    lost ").append(std::to_string(t.lost));
  s.append(" retransmits ").append(std::to_string(counter(counters, "tx_retransmits")));
  s.append(" timeouts ").append(std::to_string(counter(counters, "timeouts")));
  s.append("\n    path_weights");
  for (uint32_t i = 0; i < t.num_paths && i < MROCE_MAX_PATHS; i++)
    s.append(" ").append(fixed(t.path_weight_ppm[i] / 1e6, 3));
  s.append("\n");
  return s;
}

std::string json_transport(const mroce_qp_transport_resp& t, const std::vector<Counter>& counters) {
  std::vector<std::string> weights;
  for (uint32_t i = 0; i < t.num_paths && i < MROCE_MAX_PATHS; i++)
    weights.push_back(std::to_string(t.path_weight_ppm[i]));
  return JsonObject()
      .add("qp_state", qp_state_name(t.qp_state))
      .add("error", t.error_status ? wc_status_text(t.error_status) : "")
      .add("cc", t.cc)
      .add("srtt_ns", t.srtt_ns)
      .add("min_rtt_ns", t.min_rtt_ns)
      .add("rttvar_ns", t.rttvar_ns)
      .add("rto_ns", t.rto_ns)
      .add("cwnd_bytes", t.cwnd_bytes)
      .add("pacing_rate_bps", t.pacing_rate_bps)
      .add("bytes_in_flight", t.bytes_in_flight)
      .add("pkts_in_flight", uint64_t{t.pkts_in_flight})
      .add("lost", uint64_t{t.lost})
      .add("retransmits", counter(counters, "tx_retransmits"))
      .add("timeouts", counter(counters, "timeouts"))
      .add_json("path_weights_ppm", json_array(weights))
      .str();
}

}  // namespace metaroce::ctl
