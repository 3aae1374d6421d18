#!/usr/bin/env bash
# End-to-end: stock tools (ibv_devices, ibv_devinfo, ibv_rc_pingpong,
# perftest) and our own verbs program against real metaroced daemons in two
# namespaces (tests/lib/netns.sh). Needs root; skips with a reason otherwise.
set -u
here=$(cd "$(dirname "$0")" && pwd)
top=${TEST_SRCDIR:+$TEST_SRCDIR/metaroce}
top=${top:-$(cd "$here/../.." && pwd)}
source "$top/tests/lib/e2e.sh"

source "$top/tests/lib/verbs.sh"
VERBS_E2E=$(need_file tests/verbs/verbs_e2e) || exit 1
verbs_e2e_up ibv_devices

t_devices() { in_a ibv_devices | tee /dev/stderr | grep -q "$MROCE_DEV_A"; }
t_devinfo() {
  local out; out=$(in_a ibv_devinfo -v -d "$MROCE_DEV_A") || e2e_fail "ibv_devinfo failed"
  echo "$out" | grep -E "state:|link_layer|GID\["
  grep -q "PORT_ACTIVE" <<<"$out" || e2e_fail "port not active"
  grep -q "link_layer:.*Ethernet" <<<"$out" || e2e_fail "link layer not Ethernet"
  grep -q "::ffff:$MROCE_IP_A, RoCE v2" <<<"$out" || e2e_fail "no RoCE v2 IPv4 GID"
}
t_channel_without_launcher() {
  local out rc=0; out=$(in_a ibv_rc_pingpong -d "$MROCE_DEV_A" -g "$GID_A" -e -p 18599 2>&1) || rc=$?
  echo "$out"
  [ $rc != 0 ] && grep -q "completion channel" <<<"$out" || e2e_fail "expected a clean channel failure"
}
t_pingpong() {
  local s
  for s in 1 4096 65536; do
    pair "pingpong_$s" "in_a ibv_rc_pingpong -d $MROCE_DEV_A -g $GID_A -s $s -n 200" \
         "in_b ibv_rc_pingpong -d $MROCE_DEV_B -g $GID_B -s $s -n 200"
    grep -E "bytes in" "$E2E_RUN_DIR/pingpong_$s.client.log"
  done
}
t_pingpong_events() {
  pair pingpong_e "launch_a --sysfs-root $MROCE_SYSFS_A ibv_rc_pingpong -d $MROCE_DEV_A -g $GID_A -e -s 4096 -n 200" \
       "launch_b --sysfs-root $MROCE_SYSFS_B ibv_rc_pingpong -d $MROCE_DEV_B -g $GID_B -e -s 4096 -n 200"
}
# GID 0 is the EUI-64 link-local GID, the default of many tools. It must work
# from the first packet: restart DAD (30 probes, so the addresses stay
# tentative for the whole case, when the kernel cannot yet use them for
# neighbour discovery) and run pingpong over GID 0 at once.
port_active() {  # in_a|in_b dev: waits up to 30 s for PORT_ACTIVE
  local end=$((SECONDS + 30))
  until "$1" ibv_devinfo -d "$2" 2>/dev/null | grep -q PORT_ACTIVE; do
    [ $SECONDS -lt $end ] || e2e_fail "$2: port not active after 30 s"
    sleep 0.1
  done
}

t_pingpong_gid0_tentative() {
  local ns ifn
  for ns in a b; do
    if [ $ns = a ]; then ns=$MROCE_NS_A ifn=$MROCE_IF_A; else ns=$MROCE_NS_B ifn=$MROCE_IF_B; fi
    ip netns exec "$ns" sh -c "echo 30 > /proc/sys/net/ipv6/conf/$ifn/dad_transmits" || e2e_fail "cannot set dad_transmits"
    ip -n "$ns" link set "$ifn" down; ip -n "$ns" link set "$ifn" up
  done
  ip -n "$MROCE_NS_A" -6 addr show dev "$MROCE_IF_A" | grep -q 'scope link tentative' ||
    e2e_fail "the link-local address is not tentative: the case would not test the first packet"
  port_active in_a "$MROCE_DEV_A"; port_active in_b "$MROCE_DEV_B"
  pair pingpong_gid0 "in_a ibv_rc_pingpong -d $MROCE_DEV_A -g 0 -n 100" \
       "in_b ibv_rc_pingpong -d $MROCE_DEV_B -g 0 -n 100"
  grep -q 'GID fe80::' "$E2E_RUN_DIR/pingpong_gid0.client.log" || e2e_fail "GID 0 is not the link-local GID"
  ip -n "$MROCE_NS_A" -6 addr show dev "$MROCE_IF_A" | grep -q 'scope link tentative' ||
    e2e_fail "DAD ended during the case: it no longer shows the first-packet behaviour"
}

# perftest through perf (tests/lib/verbs.sh: -u 18 for a loaded machine).
t_write_bw() { perf ib_write_bw -s 65536 -n 500; }
t_read_bw() { perf ib_read_bw -s 65536 -n 500; }
t_send_bw() { perf ib_send_bw -s 65536 -n 500; }
t_atomic_bw() { perf ib_atomic_bw -n 1000; }
t_write_lat() { perf ib_write_lat -n 500; }
t_read_lat() { perf ib_read_lat -n 500; }
t_send_lat() { perf ib_send_lat -n 500; }
# perftest 4.5 refuses -e for RDMA WRITE/READ itself ("Events feature not
# available on WRITE verb"), before touching any device; completion events
# with a bandwidth tool are exercised through ib_send_bw -e.
t_send_bw_events() {
  pair ib_send_bw_e "launch_a --sysfs-root $MROCE_SYSFS_A ib_send_bw -d $MROCE_DEV_A -x $GID_A -e -s 65536 -n 500" \
       "launch_b --sysfs-root $MROCE_SYSFS_B ib_send_bw -d $MROCE_DEV_B -x $GID_B -e -s 65536 -n 500"
  perf_figure "$E2E_RUN_DIR/ib_send_bw_e.client.log"
}
t_same_device() {  # server and client on one device, one namespace
  local log_s=$E2E_RUN_DIR/same.server.log spid rc
  in_a ib_write_bw -d "$MROCE_DEV_A" -x "$GID_A" -s 65536 -n 500 -p 18650 >"$log_s" 2>&1 &
  spid=$!; e2e_track_pid "$spid"
  wait_for 60 tcp_listening "$MROCE_NS_A" 18650 || e2e_fail "server never listened on 18650"
  rc=0; in_a ib_write_bw -d "$MROCE_DEV_A" -x "$GID_A" -s 65536 -n 500 -p 18650 "$MROCE_IP_A" \
    >"$E2E_RUN_DIR/same.client.log" 2>&1 || rc=$?
  wait "$spid" || e2e_fail "server failed: $(cat "$log_s")"
  cat "$E2E_RUN_DIR/same.client.log"
  [ $rc = 0 ] || e2e_fail "client failed"
  perf_figure "$E2E_RUN_DIR/same.client.log"
}
# With --gso (verbs_e2e_test_packet_gso): the bandwidth cases really went as
# super-frames, cut back at the receiver (before the daemon restart below
# resets the counters).
t_gso_used() {
  local a b
  a=$(engine_counter a io_tx_gso_super); b=$(engine_counter b io_rx_gso_super)
  echo "super-frames: A sent $a, B received $b"
  [ "$a" != missing ] && [ "$a" -gt 0 ] && [ "$b" != missing ] && [ "$b" -gt 0 ] ||
    e2e_fail "no UDP GSO super-frames between the daemons"
}
t_verbs_opcodes() { in_a "$VERBS_E2E" opcodes "$MROCE_DEV_A"; }
t_verbs_access() { in_a "$VERBS_E2E" access "$MROCE_DEV_A"; }
t_verbs_fatal() {
  local ready=$E2E_RUN_DIR/fatal.ready pid
  rm -f "$ready"
  in_a "$VERBS_E2E" fatal "$MROCE_DEV_A" "$ready" &
  pid=$!; e2e_track_pid "$pid"
  wait_for 60 test -e "$ready" || e2e_fail "verbs program never got ready"
  mroce_daemon_restart a || e2e_fail "daemon restart failed"
  wait "$pid" || e2e_fail "verbs program failed after the daemon restart"
}

e2e_case ibv_devices t_devices
e2e_case ibv_devinfo_roce_v2 t_devinfo
e2e_case comp_channel_without_launcher_fails_cleanly t_channel_without_launcher
e2e_case rc_pingpong_sizes t_pingpong
e2e_case rc_pingpong_events_under_launcher t_pingpong_events
e2e_case rc_pingpong_gid0_while_link_local_is_tentative t_pingpong_gid0_tentative
e2e_case ib_write_bw t_write_bw
e2e_case ib_read_bw t_read_bw
e2e_case ib_send_bw t_send_bw
e2e_case ib_atomic_bw t_atomic_bw
e2e_case ib_write_lat t_write_lat
e2e_case ib_read_lat t_read_lat
e2e_case ib_send_lat t_send_lat
e2e_case ib_send_bw_events_under_launcher t_send_bw_events
e2e_case perftest_same_device t_same_device
case " ${MROCE_DAEMON_ARGS:-} " in *" --gso "*) e2e_case gso_super_frames_used t_gso_used ;; esac
e2e_case verbs_loopback_every_opcode t_verbs_opcodes
e2e_case verbs_remote_access_errors t_verbs_access
e2e_case verbs_daemon_kill_restart t_verbs_fatal
e2e_finish
