// `metaroce-ctl monitor DEV`: a stream of device and QP events, one line
// (or, with -j, one JSON object) each: the daemon coming and going, the
// port going up and down, QPs appearing and disappearing, QPs changing
// state (RTS -> ERR, with the reason), and error counters (drops, NAKs,
// timeouts, faults) growing, per device or per QP.
//
// It polls the same sources `dev` and `stat` read (the published tree, the
// control socket: QUERY_COUNTERS, LIST_QPS, QUERY_QP_TRANSPORT) every
// interval and reports the differences; an event shorter than the interval
// (a port flapping twice, a QP through INIT and RTR) is seen once or not at
// all, and several increments of a counter are reported as one event.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "tools/ctl/format.h"

namespace metaroce::ctl {

struct QpSnapshot {
  std::string state;                       // "RTS", "ERR" (qp_state_name)
  std::string error;                       // why it failed (wc_status_text), "" none known
  std::map<std::string, uint64_t> errors;  // its error counters
};

struct Snapshot {
  bool daemon = false;         // the socket answered
  std::string port;            // "ACTIVE", "DOWN", "" unknown
  std::map<std::string, uint64_t> dev_errors;  // device error counters
  std::map<uint32_t, QpSnapshot> qps;          // by QPN
};

struct Event {
  std::string kind;    // "daemon", "port", "qp", "state", "error"
  std::string what;    // daemon: running|not-running; port: state; qp: created|destroyed;
                       // state: the QP's new state; error: the counter's name
  uint32_t qpn = 0;    // qp, state and per-QP error events; 0 otherwise
  uint64_t delta = 0;  // error: how much it grew
  uint64_t value = 0;  // error: its value now
  std::string from{};  // state: the state before ("" for a QP new in an error state)
  std::string reason{};  // state into ERR/SQE: the failed work request's status, else the
                       // QP's error counters that grew with it ("rx_nak_access"); "" none
};

// Is this counter one that only grows on a failure (a drop, a NAK, a
// timeout, a fault)? By name, as the counters' groups are.
bool is_error_counter(const std::string& name);
// Only the error counters of a QUERY_COUNTERS reply.
std::map<std::string, uint64_t> error_counters(const std::vector<Counter>& counters);

// What changed from `a` to `b`, in a fixed order (daemon, port, QPs gone,
// QPs new, QP state changes, device errors, QP errors). A new QP gets a
// state event only when it is already in an error state. Pure.
std::vector<Event> diff_snapshots(const Snapshot& a, const Snapshot& b);

// "metaroce0 port DOWN", "metaroce0 qp 4098 created",
// "metaroce0 qp 4098 state RTS -> ERR (remote access error)",
// "metaroce0 error timeouts +3 (now 7) qp 4098"; the JSON form has the
// fields time, ifname, event, what, qpn, delta, value, from, reason
// (docs/operations.md §Events), every one in every event.
std::string format_event(const std::string& dev, const Event& e);
std::string json_event(const std::string& dev, const Event& e, const std::string& time);

}  // namespace metaroce::ctl
