#!/usr/bin/env bash
# End-to-end: the datagram service (UD QPs, docs/protocol.md §13) with stock
# tools (ibv_ud_pingpong, perftest -c UD) and our verbs program's UD cases
# (bad input: another context's AH, a wrong Q_Key, an oversize send) against
# real metaroced daemons in two namespaces. MROCE_E2E_IO=packet|xdp picks the
# daemons' packet I/O. Needs root; skips with a reason otherwise.
set -u
here=$(cd "$(dirname "$0")" && pwd)
top=${TEST_SRCDIR:+$TEST_SRCDIR/metaroce}
top=${top:-$(cd "$here/../.." && pwd)}
source "$top/tests/lib/e2e.sh"
source "$top/tests/lib/verbs.sh"
VERBS_E2E=$(need_file tests/verbs/verbs_e2e) || exit 1
verbs_e2e_up ibv_ud_pingpong ib_send_bw

# The veth's MTU of 1500 gives an active MTU of 1024: the largest UD message.
t_ud_pingpong() {
  local s
  for s in 1 512 1024; do
    pair "ud_pingpong_$s" "in_a ibv_ud_pingpong -d $MROCE_DEV_A -g $GID_A -s $s -n 200" \
         "in_b ibv_ud_pingpong -d $MROCE_DEV_B -g $GID_B -s $s -n 200"
    grep -E "bytes in" "$E2E_RUN_DIR/ud_pingpong_$s.client.log"
  done
  [ "$(engine_counter b ud_rx_delivered)" -ge 600 ] || e2e_fail "B delivered fewer than 600 datagrams"
}
t_ud_pingpong_too_big() {  # over the port's active MTU: the tool refuses it itself
  local out rc=0; out=$(in_a ibv_ud_pingpong -d "$MROCE_DEV_A" -g "$GID_A" -s 2048 -p 18599 2>&1) || rc=$?
  echo "$out"
  [ $rc != 0 ] && grep -qi "mtu" <<<"$out" || e2e_fail "expected the MTU refusal"
}
ud_perf() {  # tool extra-args
  local tool=$1; shift
  pair "${tool}_ud" "in_a $tool -d $MROCE_DEV_A -x $GID_A -c UD $*" "in_b $tool -d $MROCE_DEV_B -x $GID_B -c UD $*"
  perf_figure "$E2E_RUN_DIR/${tool}_ud.client.log"
}
t_send_bw_ud() { ud_perf ib_send_bw -s 1024 -n 2000; }
t_send_lat_ud() { ud_perf ib_send_lat -s 1024 -n 1000; }
t_ud_bad_input() {
  local q0 s0 a0
  q0=$(engine_counter a rx_drop_ud_qkey); s0=$(engine_counter a ud_tx_oversize); a0=$(engine_counter a ud_tx_unknown_ah)
  in_a "$VERBS_E2E" ud "$MROCE_DEV_A" || e2e_fail "verbs_e2e ud failed"
  [ "$(engine_counter a rx_drop_ud_qkey)" -gt "$q0" ] || e2e_fail "the wrong Q_Key was not counted"
  [ "$(engine_counter a ud_tx_oversize)" -gt "$s0" ] || e2e_fail "the oversize send was not counted"
  [ "$(engine_counter a ud_tx_unknown_ah)" -gt "$a0" ] || e2e_fail "the foreign AH was not counted"
}

# Multicast: two QPs in A attached to 239.7.7.7 each get every datagram B
# sends to the group (IP multicast between hosts), then one sent in A.
t_ud_multicast() {
  local ready=$E2E_RUN_DIR/mcast.ready pid
  rm -f "$ready"
  in_a "$VERBS_E2E" mcast_recv "$MROCE_DEV_A" "$ready" &
  pid=$!; e2e_track_pid "$pid"
  wait_for 60 test -e "$ready" || e2e_fail "receiver never got ready"
  in_b "$VERBS_E2E" mcast_send "$MROCE_DEV_B" || e2e_fail "sender failed"
  wait "$pid" || { echo "A: $(engine_counter a rx_drop_mcast_no_group) no-group drops"; e2e_fail "receiver failed"; }
}

e2e_case ibv_ud_pingpong_sizes t_ud_pingpong
e2e_case ibv_ud_pingpong_over_mtu_refused t_ud_pingpong_too_big
e2e_case ib_send_bw_ud t_send_bw_ud
e2e_case ib_send_lat_ud t_send_lat_ud
e2e_case verbs_ud_bad_input_is_a_clear_error_or_counted_drop t_ud_bad_input
e2e_case ud_multicast_across_hosts_and_on_the_host t_ud_multicast
e2e_finish
