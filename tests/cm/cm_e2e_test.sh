#!/usr/bin/env bash
# End-to-end (issue 12): Debian's stock librdmacm programs connect across two
# namespaces, each with a real metaroced, through the emulated
# /dev/infiniband/rdma_cm (kmod-shim/launcher) and the daemons' connection
# managers (firmware-model/daemon/cm_role.*). Packet I/O: $MROCE_E2E_IO.
# Honours MROCE_PREFIX and E2E_RUN_DIR (tests/lib/netns.sh). Needs root.
set -u
here=$(cd "$(dirname "$0")" && pwd)
top=${TEST_SRCDIR:+$TEST_SRCDIR/metaroce}
top=${top:-$(cd "$here/../.." && pwd)}
source "$top/tests/lib/e2e.sh"

find_file() {
  local f
  for f in "$top/$1" "$top/.bazel/bin/$1"; do [ -e "$f" ] && { readlink -f "$f"; return 0; }; done
  return 1
}
PROVIDER=$(find_file provider/libmetaroce-rdmav34.so) || { echo "provider .so not built"; exit 1; }
PRELOAD=$(find_file kmod-shim/launcher/libmetaroce-preload.so) || { echo "interposer not built"; exit 1; }
LAUNCHER=$top/kmod-shim/launcher/metaroce-run
export METAROCE_PROVIDER=$PROVIDER METAROCE_PRELOAD=$PRELOAD
asan=$(ldd "$PRELOAD" | awk '/libasan/ {print $3; exit}')
[ -n "$asan" ] && export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1

if [ "$(id -u)" != 0 ] || ! ip netns list >/dev/null 2>&1; then
  echo "SKIP: needs root and network namespaces"; E2E_SKIPPED=1; e2e_finish; exit 0
fi
command -v rping >/dev/null || { echo "SKIP: rping not installed (tools/setup installs rdmacm-utils)"; E2E_SKIPPED=1; e2e_finish; exit 0; }
source "$top/tests/lib/netns.sh"
trap 'mroce_net_down >/dev/null 2>&1' EXIT
mroce_net_up ${MROCE_E2E_IO:+--io $MROCE_E2E_IO} || { echo "mroce_net_up failed"; E2E_FAILED=1; e2e_finish; exit 1; }
LOGS=$E2E_RUN_DIR/cm-logs; mkdir -p "$LOGS"

# Runs a program under the launcher in namespace a or b, in the background
# (a simple command, so $! is its pid through the launcher's execs).
start_in() {  # a|b LOG CMD...
  local side=$1 log=$2; shift 2
  local ns=$MROCE_NS_A sysfs=$MROCE_SYSFS_A
  [ "$side" = b ] && { ns=$MROCE_NS_B; sysfs=$MROCE_SYSFS_B; }
  ip netns exec "$ns" env -u RDMAV_DRIVERS SYSFS_PATH="$sysfs" timeout 120 "$LAUNCHER" "$@" >"$log" 2>&1 &
  STARTED=$!; e2e_track_pid "$STARTED"
}
run_in() {  # a|b LOG CMD... (foreground; its exit status)
  start_in "$@"; wait "$STARTED"
}

# A thread of PID or of its child (under timeout) blocked in recvfrom
# (x86_64 syscall 45): GET_EVENT.
in_get_event() {
  local p
  for p in "$1" $(pgrep -P "$1"); do grep -q '^45 ' /proc/"$p"/task/*/syscall 2>/dev/null && return 0; done
  return 1
}

cm_counter() {  # a|b NAME: a daemon's counter from its SIGUSR1 dump
  local run=$MROCE_RUN_A pid=$MROCE_PID_A
  [ "$1" = b ] && { run=$MROCE_RUN_B; pid=$MROCE_PID_B; }
  local before; before=$(grep -c "counters:" "$run/daemon.log")
  kill -USR1 "$pid"
  wait_for 30 dump_after "$run/daemon.log" "$before" || return 1
  grep "counters:" "$run/daemon.log" | tail -1 | tr ' ' '\n' | awk -F= -v n="$2" '$1 == n {print $2}'
}
dump_after() { [ "$(grep -c "counters:" "$1")" -gt "$2" ]; }

rping_1000_with_verification() {
  start_in a "$LOGS/rping-s.log" rping -s -a "$MROCE_IP_A" -p 7471 -V -C 1000
  local server=$STARTED
  wait_for 60 in_get_event "$server" || e2e_fail "rping -s never listened: $(cat "$LOGS/rping-s.log")"
  run_in b "$LOGS/rping-c.log" rping -c -a "$MROCE_IP_A" -p 7471 -v -V -C 1000 ||
    e2e_fail "rping -c exit $?: $(grep -v 'ping data' "$LOGS/rping-c.log")"
  wait "$server" || e2e_fail "rping -s exit $?: $(grep -v 'ping data' "$LOGS/rping-s.log")"
  # Each ping once (the cm thread's DISCONNECT line may split one line).
  local n; n=$(grep -o "rdma-ping-[0-9]*:" "$LOGS/rping-c.log" | sort -u | wc -l)
  [ "$n" = 1000 ] || e2e_fail "client printed $n of 1000 verified pings"
  ! grep -qi "error\|fail\|invalid" "$LOGS/rping-c.log" "$LOGS/rping-s.log" || e2e_fail "rping reported errors"
  local est; est=$(cm_counter a cm_established)
  [ "${est:-0}" -ge 1 ] || e2e_fail "server daemon counted no established connection ($est)"
}

e2e_case rping_1000_with_verification rping_1000_with_verification
e2e_finish
