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
VERBS_E2E=$(find_file tests/verbs/verbs_e2e) || { echo "verbs_e2e not built"; exit 1; }

source "$top/tests/lib/netns.sh"
if [ "$(id -u)" != 0 ] || ! command -v ibv_ud_pingpong >/dev/null || ! command -v ib_send_bw >/dev/null; then
  echo "SKIP: needs root and ibverbs-utils/perftest"; E2E_SKIPPED=1; e2e_finish; exit 0
fi
if ! mroce_find_bin metaroced firmware-model/daemon/metaroced >/dev/null 2>&1 && [ -z "${METAROCED:-}" ]; then
  echo "SKIP: metaroced is not built (bazel build //firmware-model/daemon:metaroced)"
  E2E_SKIPPED=1; e2e_finish; exit 0
fi
trap 'mroce_net_down >/dev/null 2>&1' EXIT
mroce_net_up ${MROCE_E2E_IO:+--io $MROCE_E2E_IO} || { echo "mroce_net_up failed"; E2E_FAILED=1; e2e_finish; exit 1; }
GID_A=$(gid_index in_a "$MROCE_DEV_A" "$MROCE_IP_A")
GID_B=$(gid_index in_b "$MROCE_DEV_B" "$MROCE_IP_B")
echo "GID index A=$GID_A B=$GID_B io=${MROCE_E2E_IO:-auto}"

# One engine counter of a device, from metaroce-ctl's device counters.
counter() {  # a|b name
  local ctl sys dev run
  ctl=$(mroce_find_bin metaroce-ctl tools/metaroce-ctl) || return 1
  if [ "$1" = a ]; then run=mroce_in_a sys=$MROCE_SYSFS_A dev=$MROCE_DEV_A; else run=mroce_in_b sys=$MROCE_SYSFS_B dev=$MROCE_DEV_B; fi
  "$run" "$ctl" --sysfs-root "$sys" stat -a "$dev" | awk -v n="$2" '$1 == n || $1 == n":" {print $NF; exit}'
}

# The veth's MTU of 1500 gives an active MTU of 1024: the largest UD message.
t_ud_pingpong() {
  local s
  for s in 1 512 1024; do
    pair "ud_pingpong_$s" "in_a ibv_ud_pingpong -d $MROCE_DEV_A -g $GID_A -s $s -n 200" \
         "in_b ibv_ud_pingpong -d $MROCE_DEV_B -g $GID_B -s $s -n 200"
    grep -E "bytes in" "$E2E_RUN_DIR/ud_pingpong_$s.client.log"
  done
  [ "$(counter b ud_rx_delivered)" -ge 600 ] || e2e_fail "B delivered fewer than 600 datagrams"
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
  q0=$(counter a rx_drop_ud_qkey); s0=$(counter a ud_tx_oversize); a0=$(counter a ud_tx_unknown_ah)
  in_a "$VERBS_E2E" ud "$MROCE_DEV_A" || e2e_fail "verbs_e2e ud failed"
  [ "$(counter a rx_drop_ud_qkey)" -gt "$q0" ] || e2e_fail "the wrong Q_Key was not counted"
  [ "$(counter a ud_tx_oversize)" -gt "$s0" ] || e2e_fail "the oversize send was not counted"
  [ "$(counter a ud_tx_unknown_ah)" -gt "$a0" ] || e2e_fail "the foreign AH was not counted"
}

e2e_case ibv_ud_pingpong_sizes t_ud_pingpong
e2e_case ibv_ud_pingpong_over_mtu_refused t_ud_pingpong_too_big
e2e_case ib_send_bw_ud t_send_bw_ud
e2e_case ib_send_lat_ud t_send_lat_ud
e2e_case verbs_ud_bad_input_is_a_clear_error_or_counted_drop t_ud_bad_input
e2e_finish
