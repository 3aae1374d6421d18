#!/usr/bin/env bash
# End-to-end: Debian's librdmacm on the emulated /dev/infiniband/rdma_cm
# (kmod-shim/launcher, docs/connection-manager.md) in a namespace with a real
# metaroced (tests/lib/netns.sh; honours MROCE_PREFIX and E2E_RUN_DIR).
# The interposer forwards the commands to the daemon's connection manager
# (firmware-model/daemon/cm_role.*). Needs root; skips with a reason otherwise.
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
PROBE=$(find_file tests/cm/ucma_probe) || { echo "ucma_probe not built"; exit 1; }
LAUNCHER=$top/kmod-shim/launcher/metaroce-run
export METAROCE_PROVIDER=$PROVIDER METAROCE_PRELOAD=$PRELOAD
asan=$(ldd "$PRELOAD" | awk '/libasan/ {print $3; exit}')
[ -n "$asan" ] && export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1

if [ "$(id -u)" != 0 ] || ! ip netns list >/dev/null 2>&1; then
  echo "SKIP: needs root and network namespaces"; E2E_SKIPPED=1; e2e_finish; exit 0
fi
source "$top/tests/lib/netns.sh"
trap 'mroce_net_down >/dev/null 2>&1' EXIT
mroce_net_up ${MROCE_E2E_IO:+--io $MROCE_E2E_IO} || { echo "mroce_net_up failed"; E2E_FAILED=1; e2e_finish; exit 1; }

without_emulation() {
  # Stock librdmacm without the interposer: the failure issue 12 reports.
  local out
  out=$(mroce_in_a env RDMAV_DRIVERS="${PROVIDER%-rdmav34.so}" ${asan:+LD_PRELOAD=$asan} \
        timeout 60 "$PROBE" "$MROCE_IP_A" 2>&1) && e2e_fail "probe passed without the emulation: $out"
  grep -q "rdma_create_event_channel: No such file or directory" <<<"$out" || e2e_fail "unexpected: $out"
}

probe_under_launcher() {
  local out
  out=$(mroce_in_a env -u RDMAV_DRIVERS timeout 60 "$LAUNCHER" "$PROBE" "$MROCE_IP_A" 2>&1)
  local rc=$?
  echo "$out"
  [ $rc = 0 ] || e2e_fail "ucma_probe exit $rc"
  grep -q "^ucma_probe: all checks passed" <<<"$out" || e2e_fail "no summary line"
}

# A thread of PID blocked in recvfrom (x86_64 syscall 45): librdmacm's
# GET_EVENT on the emulated channel.
in_get_event() { grep -q '^45 ' /proc/"$1"/task/*/syscall 2>/dev/null; }

rping_server_waits_for_a_connection() {
  # rping -s gets through channel, ID, bind, device open and listen, then
  # waits in GET_EVENT for a connection, as over a kernel.
  local log=$E2E_RUN_DIR/rping-s.log pid
  # A simple command (no function), so $! is rping's pid through the execs.
  ip netns exec "$MROCE_NS_A" env -u RDMAV_DRIVERS SYSFS_PATH="$MROCE_SYSFS_A" \
    "$LAUNCHER" rping -s -a "$MROCE_IP_A" -p 18516 >"$log" 2>&1 &
  pid=$!; e2e_track_pid "$pid"
  wait_for 60 in_get_event "$pid" || e2e_fail "rping -s never reached GET_EVENT: $(cat "$log")"
  kill -0 "$pid" 2>/dev/null || e2e_fail "rping -s exited: $(cat "$log")"
  kill "$pid"; wait "$pid" 2>/dev/null || true  # 143: the SIGTERM we sent
  ! grep -qi "fail\|error" "$log" || e2e_fail "rping -s reported: $(cat "$log")"
}

e2e_case without_emulation without_emulation
e2e_case probe_under_launcher probe_under_launcher
e2e_case rping_server_waits_for_a_connection rping_server_waits_for_a_connection
e2e_finish
