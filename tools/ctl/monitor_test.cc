#include "tools/ctl/monitor.h"

#include <doctest/doctest.h>

namespace metaroce::ctl {
namespace {

TEST_CASE("monitor__error_counters_by_name") {
  CHECK(is_error_counter("rx_drop_bad_icrc"));
  CHECK(is_error_counter("tx_drop_no_neighbor"));
  CHECK(is_error_counter("timeouts"));
  CHECK_FALSE(is_error_counter("tx_packets"));
  CHECK_FALSE(is_error_counter("clients_opened"));
  CHECK(error_counters({{"tx_packets", 9}, {"dma_faults", 1}}) ==
        std::map<std::string, uint64_t>{{"dma_faults", 1}});
}

TEST_CASE("monitor__events_from_two_snapshots") {
  Snapshot a{true, "ACTIVE", {{"rx_drop_parse", 1}}, {{7, {"RTS", "", {{"timeouts", 0}}}}}};
  Snapshot b{true, "DOWN", {{"rx_drop_parse", 4}}, {{9, {"RTS", "", {{"timeouts", 2}}}}}};
  std::vector<Event> e = diff_snapshots(a, b);
  REQUIRE(e.size() == 5);
  CHECK(format_event("metaroce0", e[0]) == "metaroce0 port DOWN");
  CHECK(format_event("metaroce0", e[1]) == "metaroce0 qp 7 destroyed");
  CHECK(format_event("metaroce0", e[2]) == "metaroce0 qp 9 created");
  CHECK(format_event("metaroce0", e[3]) == "metaroce0 error rx_drop_parse +3 (now 4)");
  CHECK(format_event("metaroce0", e[4]) == "metaroce0 error timeouts +2 (now 2) qp 9");
  CHECK(json_event("metaroce0", e[4], "T") ==
        "{\"time\":\"T\",\"ifname\":\"metaroce0\",\"event\":\"error\",\"what\":\"timeouts\","
        "\"qpn\":9,\"delta\":2,\"value\":2,\"from\":\"\",\"reason\":\"\"}");
  CHECK(diff_snapshots(b, b).empty());
}

TEST_CASE("monitor__daemon_gone_and_back") {
  Snapshot up{true, "ACTIVE", {{"dma_faults", 5}}, {{7, {"RTS", "", {}}}}};
  Snapshot down{false, "ACTIVE", {}, {}};
  std::vector<Event> e = diff_snapshots(up, down);
  REQUIRE(e.size() == 1);
  CHECK(format_event("metaroce0", e[0]) == "metaroce0 daemon not-running");
  // Back: counters restart from a new daemon, not reported as errors.
  e = diff_snapshots(down, up);
  REQUIRE(e.size() == 2);
  CHECK(format_event("metaroce0", e[0]) == "metaroce0 daemon running");
  CHECK(format_event("metaroce0", e[1]) == "metaroce0 qp 7 created");
}

TEST_CASE("monitor__qp_state_changes_with_their_reason") {
  Snapshot a{true, "ACTIVE", {}, {{7, {"RTS", "", {{"rx_nak_access", 0}}}},
                                  {8, {"RTS", "", {{"rx_nak_access", 0}}}},
                                  {9, {"INIT", "", {}}}}};
  Snapshot b = a;
  b.qps[7] = {"ERR", "remote access error", {{"rx_nak_access", 0}}};  // the daemon says why
  b.qps[8] = {"ERR", "", {{"rx_nak_access", 1}}};  // no failed WR: the counter that grew
  b.qps[9] = {"RTS", "", {}};
  std::vector<Event> e = diff_snapshots(a, b);
  REQUIRE(e.size() == 4);
  CHECK(format_event("metaroce0", e[0]) == "metaroce0 qp 7 state RTS -> ERR (remote access error)");
  CHECK(format_event("metaroce0", e[1]) == "metaroce0 qp 8 state RTS -> ERR (rx_nak_access)");
  CHECK(format_event("metaroce0", e[2]) == "metaroce0 qp 9 state INIT -> RTS");
  CHECK(format_event("metaroce0", e[3]) == "metaroce0 error rx_nak_access +1 (now 1) qp 8");
  CHECK(json_event("metaroce0", e[0], "T") ==
        "{\"time\":\"T\",\"ifname\":\"metaroce0\",\"event\":\"state\",\"what\":\"ERR\","
        "\"qpn\":7,\"delta\":0,\"value\":0,\"from\":\"RTS\",\"reason\":\"remote access error\"}");
  CHECK(diff_snapshots(b, b).empty());  // staying in ERR is no event
}

TEST_CASE("monitor__new_qp_reports_its_state_only_when_failed") {
  Snapshot a{true, "ACTIVE", {}, {}};
  Snapshot b{true, "ACTIVE", {}, {{7, {"RTS", "", {}}}, {8, {"ERR", "transport retry counter exceeded", {}}}}};
  std::vector<Event> e = diff_snapshots(a, b);
  REQUIRE(e.size() == 3);
  CHECK(format_event("metaroce0", e[0]) == "metaroce0 qp 7 created");
  CHECK(format_event("metaroce0", e[1]) == "metaroce0 qp 8 created");
  CHECK(format_event("metaroce0", e[2]) ==
        "metaroce0 qp 8 state ERR (transport retry counter exceeded)");
}

}  // namespace
}  // namespace metaroce::ctl
