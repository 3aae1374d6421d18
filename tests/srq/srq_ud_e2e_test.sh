#!/usr/bin/env bash
# End-to-end: UD QPs on a shared receive queue and the exact receive-queue
# bound between two namespaces (tests/lib/netns.sh), over the I/O path
# MROCE_E2E_IO names. tests/srq/srq_ud_e2e receives in B (see its header),
# sends from A; then daemon B's counters must show the SRQ-empty drop.
# And perftest's UD over an SRQ (ib_send_bw/ib_send_lat -c UD --use-srq).
# Needs root; skips otherwise.
set -u
here=$(cd "$(dirname "$0")" && pwd)
top=${TEST_SRCDIR:+$TEST_SRCDIR/metaroce}
top=${top:-$(cd "$here/../.." && pwd)}
source "$top/tests/lib/e2e.sh"
source "$top/tests/lib/verbs.sh"
SRQ_UD_E2E=$(need_file tests/srq/srq_ud_e2e) || exit 1
verbs_e2e_up ib_send_bw ib_send_lat

counter_b_at_least() { local v; v=$(engine_counter b "$1"); [ "$v" != missing ] && [ "$v" -ge "$2" ]; }

t_ud_on_srq() {
  local dir=$E2E_RUN_DIR/srq_ud rpid rc=0 src=0
  rm -rf "$dir"; mkdir -p "$dir"
  in_b "$SRQ_UD_E2E" recv "$MROCE_DEV_B" "$dir" "$MROCE_IP_A" >"$dir/recv.log" 2>&1 &
  rpid=$!; e2e_track_pid "$rpid"
  in_a "$SRQ_UD_E2E" send "$MROCE_DEV_A" "$dir" >"$dir/send.log" 2>&1 &
  local spid=$!; e2e_track_pid "$spid"
  wait_for 90 test -e "$dir/drained" || e2e_fail "the receiver never drained its SRQ"
  wait_for 60 counter_b_at_least rx_drop_ud_srq_empty 1 ||
    e2e_fail "no datagram counted rx_drop_ud_srq_empty on an empty SRQ"
  echo "rx_drop_ud_srq_empty = $(engine_counter b rx_drop_ud_srq_empty)"
  touch "$dir/done"
  wait "$rpid" || rc=$?
  wait "$spid" || src=$?
  echo "== recv"; cat "$dir/recv.log"; echo "== send"; cat "$dir/send.log"
  [ $rc = 0 ] && [ $src = 0 ] || { daemon_stats; e2e_fail "receiver exit $rc, sender exit $src"; }
  grep -q "all checks passed" "$dir/recv.log" || e2e_fail "receiver did not pass its checks"
}

t_send_bw_ud_srq() {
  perf ib_send_bw -c UD -s 1024 -n 500 --use-srq
  ran ib_send_bw "Connection type : UD"; ran ib_send_bw "Using SRQ *: ON"
}
t_send_lat_ud_srq() {
  perf ib_send_lat -c UD -s 64 -n 500 --use-srq
  ran ib_send_lat "Connection type : UD"; ran ib_send_lat "Using SRQ *: ON"
}

e2e_case ud_on_srq_and_exact_rq_bound t_ud_on_srq
e2e_case ib_send_bw_ud_use_srq t_send_bw_ud_srq
e2e_case ib_send_lat_ud_use_srq t_send_lat_ud_srq
e2e_finish
