#include "tools/ctl/format.h"

#include <doctest/doctest.h>

#include <cstring>

#include "tools/ctl/json.h"

namespace metaroce::ctl {
namespace {

DeviceInfo device() {
  DeviceInfo d;
  d.name = "metaroce0";
  d.node_guid = "0200:5eff:fe00:0001";
  d.state = "ACTIVE";
  d.phys_state = "LinkUp";
  d.netdev = "mroce-va";
  d.gids = {{1, "0000:0000:0000:0000:0000:ffff:0a4d:0001", "10.77.0.1", "RoCE v2"}};
  d.socket_path = "/run/metaroce/metaroce0.sock";
  return d;
}

TEST_CASE("format_device__state_netdev_guid_and_gids") {
  CHECK(format_device(device(), DaemonState::kRunning) ==
        "metaroce0: state ACTIVE physical_state LinkUp netdev mroce-va node_guid "
        "0200:5eff:fe00:0001 daemon running\n"
        "    gid 1 0000:0000:0000:0000:0000:ffff:0a4d:0001 (10.77.0.1) RoCE v2\n");
}

TEST_CASE("format_device__missing_fields_print_a_dash_and_no_gids_says_why") {
  DeviceInfo d;
  d.name = "metaroce5";
  CHECK(format_device(d, DaemonState::kNotRunning) ==
        "metaroce5: state - physical_state - netdev - node_guid - daemon not-running\n"
        "    no GIDs (the interface has no IP address)\n");
}

TEST_CASE("format_link__with_and_without_pid") {
  CHECK(format_link(device(), DaemonState::kRunning, 812) ==
        "link metaroce0/1 state ACTIVE netdev mroce-va daemon running pid 812 socket "
        "/run/metaroce/metaroce0.sock\n");
  CHECK(format_link(device(), DaemonState::kNotRunning, 0) ==
        "link metaroce0/1 state ACTIVE netdev mroce-va daemon not-running socket "
        "/run/metaroce/metaroce0.sock\n");
}

TEST_CASE("counter_group__by_prefix") {
  CHECK(counter_group("tx_packets") == "transport");
  CHECK(counter_group("rx_drop_bad_icrc") == "transport");
  CHECK(counter_group("tx_drop_no_neighbor") == "daemon");
  CHECK(counter_group("cq_events") == "daemon");
  CHECK(counter_group("cq_overflows") == "transport");
  CHECK(counter_group("ctrl_requests") == "control");
  CHECK(counter_group("clients_opened") == "control");
  CHECK(counter_group("dma_read_bytes") == "dma");
  CHECK(counter_group("io_rx_frames") == "io");
}

const std::vector<Counter> kCounters = {
    {"tx_packets", 12},  {"rx_packets", 0},       {"ctrl_requests", 3},
    {"io_rx_frames", 5}, {"tx_drop_too_big", 0},
};

TEST_CASE("format_counters__non_zero_only_grouped_in_fixed_order") {
  CHECK(format_counters("metaroce0 device", kCounters, false) ==
        "metaroce0 device:\n"
        "  transport:\n"
        "    tx_packets    12\n"
        "  io:\n"
        "    io_rx_frames  5\n"
        "  control:\n"
        "    ctrl_requests 3\n");
}

TEST_CASE("format_counters__all_shows_zeros") {
  CHECK(format_counters("metaroce0 qp 17", kCounters, true) ==
        "metaroce0 qp 17:\n"
        "  transport:\n"
        "    tx_packets      12\n"
        "    rx_packets      0\n"
        "  daemon:\n"
        "    tx_drop_too_big 0\n"
        "  io:\n"
        "    io_rx_frames    5\n"
        "  control:\n"
        "    ctrl_requests   3\n");
}

TEST_CASE("format_counters__all_zero_says_so") {
  CHECK(format_counters("q", {{"tx_packets", 0}, {"rx_packets", 0}}, false) ==
        "q:\n  all 2 counters are zero (-a shows them)\n");
  CHECK(format_counters("q", {}, false) == "q:\n  (no counters)\n");
}

TEST_CASE("json__strings_are_escaped") {
  CHECK(json_string("a\"b\\c\nd\x01") == "\"a\\\"b\\\\c\\nd\\u0001\"");
  CHECK(JsonObject().add("n", uint64_t{18446744073709551615u}).add_bool("ok", false).str() ==
        "{\"n\":18446744073709551615,\"ok\":false}");
  CHECK(json_array({}) == "[]");
}

TEST_CASE("json__device_link_and_counters_have_the_documented_fields") {
  CHECK(json_device(device(), DaemonState::kRunning) ==
        "{\"ifname\":\"metaroce0\",\"state\":\"ACTIVE\",\"physical_state\":\"LinkUp\","
        "\"netdev\":\"mroce-va\",\"node_guid\":\"0200:5eff:fe00:0001\",\"fw\":\"\","
        "\"daemon\":\"running\",\"gids\":[{\"index\":1,\"gid\":"
        "\"0000:0000:0000:0000:0000:ffff:0a4d:0001\",\"ip\":\"10.77.0.1\",\"type\":\"RoCE v2\"}]}");
  CHECK(json_link(device(), DaemonState::kNotRunning, 0) ==
        "{\"ifname\":\"metaroce0\",\"port\":1,\"state\":\"ACTIVE\",\"netdev\":\"mroce-va\","
        "\"daemon\":\"not-running\",\"pid\":0,\"socket\":\"/run/metaroce/metaroce0.sock\"}");
  CHECK(json_counters({{"tx_packets", 3}, {"timeouts", 0}}) == "{\"tx_packets\":3,\"timeouts\":0}");
}

TEST_CASE("transport__rtt_window_pacing_paths_and_loss") {
  mroce_qp_transport_resp t{};
  t.srtt_ns = 210500;
  t.min_rtt_ns = 180200;
  t.rttvar_ns = 12000;
  t.rto_ns = 1000000;
  t.cwnd_bytes = 65536;
  t.pacing_rate_bps = 2496100000;
  t.pkts_in_flight = 3;
  t.bytes_in_flight = 12288;
  t.num_paths = 2;
  t.path_weight_ppm[0] = 1000000;
  t.path_weight_ppm[1] = 500000;
  std::strcpy(t.cc, "default");
  t.qp_state = 3;
  std::vector<Counter> c = {{"tx_retransmits", 4}, {"timeouts", 1}};
  CHECK(format_transport(t, c) ==
        "  transport state:\n    qp_state RTS\n    cc default rtt_us srtt 210.5 min 180.2 var 12.0 rto 1000.0\n"
        "    cwnd_bytes 65536 pacing_mbps 2496.1 inflight 3 pkts 12288 bytes\n"
        "    lost 0 retransmits 4 timeouts 1\n    path_weights 1.000 0.500\n");
  CHECK(json_transport(t, c) ==
        "{\"qp_state\":\"RTS\",\"error\":\"\",\"cc\":\"default\",\"srtt_ns\":210500,\"min_rtt_ns\":180200,\"rttvar_ns\":12000,"
        "\"rto_ns\":1000000,\"cwnd_bytes\":65536,\"pacing_rate_bps\":2496100000,"
        "\"bytes_in_flight\":12288,\"pkts_in_flight\":3,\"lost\":0,\"retransmits\":4,"
        "\"timeouts\":1,\"path_weights_ppm\":[1000000,500000]}");
  t.num_paths = 1000;  // a hostile count never reads past the array
  CHECK(json_transport(t, c).size() < 2000);
}

TEST_CASE("transport__qp_state_and_the_error_that_failed_it") {
  mroce_qp_transport_resp t{};
  t.qp_state = 6;
  t.error_status = 10;
  CHECK(format_transport(t, {}).rfind("  transport state:\n    qp_state ERR error remote access error\n", 0) == 0);
  CHECK(json_transport(t, {}).rfind("{\"qp_state\":\"ERR\",\"error\":\"remote access error\",", 0) == 0);
  CHECK(qp_state_name(0) == "RESET");
  CHECK(qp_state_name(3) == "RTS");
  CHECK(qp_state_name(7) == "state 7");
  CHECK(wc_status_text(12) == "transport retry counter exceeded");
  CHECK(wc_status_text(21) == "general error");
  CHECK(wc_status_text(200) == "status 200");
}

}  // namespace
}  // namespace metaroce::ctl
