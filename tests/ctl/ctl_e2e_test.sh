#!/usr/bin/env bash
# metaroce-ctl end to end against real metaroced daemons:
#   - dev / dev show and link show on the two-namespace network
#     (tests/lib/netns.sh: mroce-a/mroce-b, metaroce0/metaroce1),
#   - stat (device counters, -a, a missing QP, a dead daemon),
#   - link add/delete of a third device, metaroce2, on a veth pair inside
#     a namespace this test creates (mroce-ctl-PID), including a daemon
#     that dies at start-up (--backend hw on a host without the silicon),
#   - the daemon's own refusals relayed with their reason by link add (a
#     config with a wrong option, a second daemon for the interface, a
#     metrics port in use): where systemd is not PID 1 this is how the
#     service's config runs,
#   - bad command lines exit 2 with the usage.
set -u
. tests/lib/e2e.sh
. tests/lib/netns.sh
CTL=$(readlink -f tools/metaroce-ctl)
METAROCED=$(readlink -f firmware-model/daemon/metaroced)
export METAROCED
NC=${MROCE_PREFIX:-mroce}-ctl-$$
RUN_C=/run/metaroce/$NC
OUT=$(mktemp)
NET_UP=0; NET_FAILED=0; NET_WHY="needs root (namespaces, veth)"

cleanup() {
  local pid
  for dev in metaroce2 metaroce3; do
    pid=$(cat "$RUN_C/$dev.pid" 2>/dev/null) || continue
    grep -qa -- "$dev" "/proc/$pid/cmdline" 2>/dev/null && kill -9 "$pid" 2>/dev/null
  done
  ip netns del "$NC" 2>/dev/null
  rm -rf "$RUN_C" "$OUT"
  mroce_net_down >/dev/null 2>&1
}
trap cleanup EXIT

# expect_line OUT REGEX: OUT has a line matching REGEX (extended).
expect_line() {
  grep -Eq -- "$2" "$1" || { echo "expected a line matching /$2/ in:"; cat "$1"; return 1; }
}
need_net() {
  [ "$NET_FAILED" = 0 ] || e2e_fail "$NET_WHY"
  [ "$NET_UP" = 1 ] || e2e_skip "$NET_WHY"
}
in_c() { ip netns exec "$NC" "$CTL" --run-dir "$RUN_C" --sysfs-root "$RUN_C/sysfs" "$@"; }

setup() {
  [ "$(id -u)" = 0 ] || return 0
  ip netns list >/dev/null 2>&1 || { NET_WHY="network namespaces unavailable"; return 0; }
  NET_FAILED=1; NET_WHY="network setup failed (see above)"
  mroce_net_up --io packet || return 1
  ip netns add "$NC" || return 1
  ip link add mroce-cx netns "$NC" type veth peer name mroce-cy netns "$NC" || return 1
  ip -n "$NC" link set lo up
  ip -n "$NC" addr add 10.78.0.1/24 dev mroce-cx
  ip -n "$NC" link set mroce-cx up && ip -n "$NC" link set mroce-cy up || return 1
  NET_UP=1; NET_FAILED=0
}

case_usage_errors_exit_2() {
  local rc=0
  "$CTL" frob >"$OUT" 2>&1 || rc=$?
  [ "$rc" = 2 ] || { echo "exit $rc"; cat "$OUT"; return 1; }
  expect_line "$OUT" "^metaroce-ctl: unknown object 'frob' \(known: dev, stat, link, monitor, capture\)$"
  expect_line "$OUT" "^usage: metaroce-ctl"
  rc=0; "$CTL" link add metaroce9 >"$OUT" 2>&1 || rc=$?
  [ "$rc" = 2 ] && expect_line "$OUT" "needs the interface: link add metaroce9 netdev IF"
}

case_dev_lists_both_devices() {
  need_net
  mroce_in_a "$CTL" dev >"$OUT"
  expect_line "$OUT" "^metaroce0: state ACTIVE .*netdev $MROCE_IF_A node_guid [0-9a-f:]+ .*daemon running$"
  expect_line "$OUT" "^    gid [0-9]+ [0-9a-f:]+ \($MROCE_IP_A\)"
  ! grep -q "0000:0000:0000:0000:0000:0000:0000:0000" "$OUT" || { echo "zero GID shown"; return 1; }
  mroce_in_b "$CTL" dev show metaroce1 >"$OUT"
  expect_line "$OUT" "^metaroce1: state ACTIVE .*netdev $MROCE_IF_B "
  expect_line "$OUT" "\($MROCE_IP_B\)"
  mroce_in_a "$CTL" link >"$OUT"
  expect_line "$OUT" "^link metaroce0/1 state ACTIVE netdev $MROCE_IF_A daemon running socket $MROCE_RUN_A/metaroce0.sock$"
}

case_stat_device_counters() {
  need_net
  mroce_in_a "$CTL" stat metaroce0 >"$OUT"
  expect_line "$OUT" "^metaroce0 device:$"
  expect_line "$OUT" "^  control:$"
  expect_line "$OUT" "^    ctrl_requests +[1-9][0-9]*$"
  expect_line "$OUT" "^  qps: 0$"
  ! grep -Eq "^    [a-z_]+ +0$" "$OUT" || { echo "zero counter without -a:"; cat "$OUT"; return 1; }
  mroce_in_a "$CTL" stat -a metaroce0 >"$OUT"
  expect_line "$OUT" "^  transport:$"
  expect_line "$OUT" "^    rx_drop_bad_icrc +0$"
  expect_line "$OUT" "^    io_rx_frames +[0-9]+$"
}

case_stat_errors() {
  need_net
  local rc=0
  mroce_in_a "$CTL" stat --qp 424242 metaroce0 >"$OUT" 2>&1 || rc=$?
  [ "$rc" = 1 ] || { echo "exit $rc"; cat "$OUT"; return 1; }
  expect_line "$OUT" "^metaroce-ctl: QP 424242: QUERY_COUNTERS: .*: no such QP$"
  rc=0
  mroce_in_a "$CTL" --run-dir /run/metaroce/no-such --sysfs-root /run/metaroce/no-such stat metaroce7 >"$OUT" 2>&1 || rc=$?
  [ "$rc" = 1 ] && expect_line "$OUT" "^metaroce-ctl: metaroced for metaroce7 is not running \(no one listens on /run/metaroce/no-such/metaroce7.sock\)$"
}

case_link_add_show_stat_delete() {
  need_net
  in_c link add metaroce2 netdev mroce-cx --io packet >"$OUT"
  expect_line "$OUT" "^link metaroce2 added: metaroced pid [0-9]+ on mroce-cx, socket $RUN_C/metaroce2.sock, log $RUN_C/metaroce2.log$"
  local pid
  pid=$(cat "$RUN_C/metaroce2.pid"); e2e_track_pid "$pid"
  kill -0 "$pid"
  in_c dev show metaroce2 >"$OUT"
  expect_line "$OUT" "^metaroce2: state ACTIVE .*netdev mroce-cx .*daemon running$"
  expect_line "$OUT" "\(10\.78\.0\.1\)"
  in_c link show >"$OUT"
  expect_line "$OUT" "^link metaroce2/1 state ACTIVE netdev mroce-cx daemon running pid $pid socket $RUN_C/metaroce2.sock$"
  in_c stat metaroce2 >"$OUT"
  expect_line "$OUT" "^metaroce2 device:$"
  local rc=0
  in_c link add metaroce2 netdev mroce-cy >"$OUT" 2>&1 || rc=$?
  [ "$rc" = 1 ] && expect_line "$OUT" "^metaroce-ctl: link add metaroce2: metaroce2 already exists: a metaroced serves it \(pid $pid\)"
  in_c link delete metaroce2 >"$OUT"
  expect_line "$OUT" "^link metaroce2 deleted$"
  ! kill -0 "$pid" 2>/dev/null || { echo "metaroced $pid still alive"; return 1; }
  [ ! -e "$RUN_C/metaroce2.pid" ] || { echo "pidfile left behind"; return 1; }
  rc=0; in_c stat metaroce2 >"$OUT" 2>&1 || rc=$?
  [ "$rc" = 1 ] && expect_line "$OUT" "is not running|no device metaroce2"
  rc=0; in_c link delete metaroce2 >"$OUT" 2>&1 || rc=$?
  [ "$rc" = 1 ] && expect_line "$OUT" "^metaroce-ctl: link delete metaroce2: no link metaroce2: "
}

case_link_add_failures_are_explained() {
  need_net
  local rc=0
  in_c link add metaroce3 netdev mroce-nosuch >"$OUT" 2>&1 || rc=$?
  [ "$rc" = 1 ] || { echo "exit $rc"; cat "$OUT"; return 1; }
  expect_line "$OUT" "no network interface mroce-nosuch in this network namespace$"
  rc=0
  in_c link add metaroce3 netdev mroce-cy --backend hw >"$OUT" 2>&1 || rc=$?
  [ "$rc" = 1 ] || { echo "exit $rc"; cat "$OUT"; return 1; }
  expect_line "$OUT" "^metaroce-ctl: link add metaroce3: metaroced for metaroce3 exited with status [0-9]+ during start-up; last lines of $RUN_C/metaroce3.log:$"
  expect_line "$OUT" "^  \| .*no MetaRoCE offload hardware on mroce-cy"
  [ ! -e "$RUN_C/metaroce3.pid" ] || { echo "pidfile left behind"; return 1; }
}

# The daemon refuses; link add says why (its log's last lines), exit 1.
case_link_add_relays_daemon_refusals() {
  need_net
  local rc pid
  in_c link add metaroce2 netdev mroce-cx --io packet --metrics 9464 >"$OUT" || { cat "$OUT"; return 1; }
  pid=$(cat "$RUN_C/metaroce2.pid"); e2e_track_pid "$pid"
  printf 'ibdev metaroce3\nmetrix 9465\n' > "$RUN_C/bad.conf"
  rc=0; in_c link add metaroce3 netdev mroce-cy --config "$RUN_C/bad.conf" >"$OUT" 2>&1 || rc=$?
  cat "$OUT"
  [ "$rc" = 1 ] || { echo "wrong option: exit $rc"; return 1; }
  expect_line "$OUT" "exited with status 2 during start-up" &&
    expect_line "$OUT" "^  \| metaroced: $RUN_C/bad.conf:2: unknown argument '--metrix' \(see --help\)$" || return 1
  rc=0; in_c link add metaroce3 netdev mroce-cx --io packet >"$OUT" 2>&1 || rc=$?
  cat "$OUT"
  [ "$rc" = 1 ] || { echo "second daemon: exit $rc"; return 1; }
  expect_line "$OUT" "^  \| metaroced: metaroced pid $pid already serves mroce-cx in this network namespace \(one daemon per interface\)$" ||
    return 1
  rc=0; in_c link add metaroce3 netdev mroce-cy --io packet --metrics 9464 >"$OUT" 2>&1 || rc=$?
  cat "$OUT"
  [ "$rc" = 1 ] || { echo "metrics port in use: exit $rc"; return 1; }
  expect_line "$OUT" "^  \| metaroced: metrics: cannot listen on 127.0.0.1 port 9464: the port is already in use" || return 1
  [ ! -e "$RUN_C/metaroce3.pid" ] || { echo "pidfile left behind"; return 1; }
  in_c link delete metaroce2 >"$OUT" || { cat "$OUT"; return 1; }
}

setup || echo "setup failed: cases needing the network fail"
e2e_case usage_errors_exit_2 case_usage_errors_exit_2
e2e_case dev_lists_both_devices case_dev_lists_both_devices
e2e_case stat_device_counters case_stat_device_counters
e2e_case stat_errors case_stat_errors
e2e_case link_add_show_stat_delete case_link_add_show_stat_delete
e2e_case link_add_failures_are_explained case_link_add_failures_are_explained
e2e_case link_add_relays_daemon_refusals case_link_add_relays_daemon_refusals
e2e_finish
