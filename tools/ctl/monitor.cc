#include "tools/ctl/monitor.h"

#include "tools/ctl/json.h"

namespace metaroce::ctl {

bool is_error_counter(const std::string& name) {
  static constexpr const char* kPrefixes[] = {"rx_drop_", "tx_drop_", "rx_nak_", "io_tx_errors",
                                              "io_rx_invalid", "io_rx_kernel_drops", "dma_faults",
                                              "ctrl_errors", "ctrl_malformed", "wqe_rejected",
                                              "cq_overflows", "local_errors", "timeouts",
                                              "cq_event_write_failed", "async_event_write_failed"};
  for (const char* p : kPrefixes) {
    if (name.rfind(p, 0) == 0) return true;
  }
  return false;
}

std::map<std::string, uint64_t> error_counters(const std::vector<Counter>& counters) {
  std::map<std::string, uint64_t> m;
  for (const Counter& c : counters)
    if (is_error_counter(c.name)) m[c.name] = c.value;
  return m;
}

namespace {

using CounterMap = std::map<std::string, uint64_t>;

void grown(const CounterMap& a, const CounterMap& b, uint32_t qpn, std::vector<Event>* out) {
  for (const auto& [name, v] : b) {
    auto it = a.find(name);
    uint64_t before = it == a.end() ? 0 : it->second;
    if (v > before) out->push_back({"error", name, qpn, v - before, v});
  }
}

bool error_state(const std::string& s) { return s == "ERR" || s == "SQE"; }

// Why a QP went into an error state: the daemon's word (the failed work
// request's status), else the error counters that grew with it.
std::string reason(const CounterMap& before, const QpSnapshot& now) {
  if (!now.error.empty()) return now.error;
  std::string r;
  for (const auto& [name, v] : now.errors) {
    auto it = before.find(name);
    if (v > (it == before.end() ? 0 : it->second)) r += (r.empty() ? "" : ",") + name;
  }
  return r;
}

void state_changed(const QpSnapshot* a, const QpSnapshot& b, uint32_t qpn,
                   std::vector<Event>* out) {
  std::string from = a ? a->state : "";
  if (from == b.state || b.state.empty() || (!a && !error_state(b.state))) return;
  Event e{"state", b.state, qpn};
  e.from = from;
  if (error_state(b.state)) e.reason = reason(a ? a->errors : CounterMap{}, b);
  out->push_back(e);
}

const QpSnapshot* find(const Snapshot& s, uint32_t qpn) {
  auto it = s.qps.find(qpn);
  return it == s.qps.end() ? nullptr : &it->second;
}

}  // namespace

std::vector<Event> diff_snapshots(const Snapshot& a, const Snapshot& b) {
  std::vector<Event> out;
  if (a.daemon != b.daemon) out.push_back({"daemon", b.daemon ? "running" : "not-running"});
  if (a.port != b.port && !b.port.empty()) out.push_back({"port", b.port});
  if (!b.daemon) return out;  // nothing else is known without it
  for (const auto& [qpn, q] : a.qps)
    if (!b.qps.count(qpn)) out.push_back({"qp", "destroyed", qpn});
  for (const auto& [qpn, q] : b.qps)
    if (!a.qps.count(qpn)) out.push_back({"qp", "created", qpn});
  for (const auto& [qpn, q] : b.qps) state_changed(find(a, qpn), q, qpn, &out);
  if (a.daemon) grown(a.dev_errors, b.dev_errors, 0, &out);
  for (const auto& [qpn, q] : b.qps) {
    const QpSnapshot* before = find(a, qpn);
    grown(before ? before->errors : CounterMap{}, q.errors, qpn, &out);
  }
  return out;
}

std::string format_event(const std::string& dev, const Event& e) {
  std::string s = dev + " " + e.kind;
  if (e.kind == "qp") return s + " " + std::to_string(e.qpn) + " " + e.what;
  if (e.kind == "state") {
    s = dev + " qp " + std::to_string(e.qpn) + " state ";
    s += e.from.empty() ? e.what : e.from + " -> " + e.what;
    return e.reason.empty() ? s : s + " (" + e.reason + ")";
  }
  s += " " + e.what;
  if (e.kind == "error") {
    s += " +" + std::to_string(e.delta) + " (now " + std::to_string(e.value) + ")";
    if (e.qpn) s += " qp " + std::to_string(e.qpn);
  }
  return s;
}

std::string json_event(const std::string& dev, const Event& e, const std::string& time) {
  return JsonObject()
      .add("time", time)
      .add("ifname", dev)
      .add("event", e.kind)
      .add("what", e.what)
      .add("qpn", uint64_t{e.qpn})
      .add("delta", e.delta)
      .add("value", e.value)
      .add("from", e.from)
      .add("reason", e.reason)
      .str();
}

}  // namespace metaroce::ctl
