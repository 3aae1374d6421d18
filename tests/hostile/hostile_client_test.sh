#!/usr/bin/env bash
# Hostile local clients against real metaroced daemons in two namespaces
# (tests/lib/netns.sh), as root and as an unprivileged user (nobody): ring
# memfd truncation, garbage ring contents and indices, completion-channel
# fds that could block, exhausting the per-user limits from two
# connections, operations on other clients' QPs/CQs/PDs/MRs, a bounded
# fuzz run of the control protocol and rings, and the provider leaving the
# application's ptrace protection alone. Throughout, a victim's verified
# traffic (tests/daemon/mroce_traffic) stays byte-exact and the daemons live.
# Needs root; skips with a reason otherwise.
set -u
here=$(cd "$(dirname "$0")" && pwd)
top=${TEST_SRCDIR:+$TEST_SRCDIR/metaroce}
top=${top:-$(cd "$here/../.." && pwd)}
source "$top/tests/lib/e2e.sh"

find_file() {  # rel-path: runfiles first, then the tree's bazel-bin
  local f
  for f in "$top/$1" "$top/.bazel/bin/$1"; do [ -e "$f" ] && { readlink -f "$f"; return 0; }; done
  echo "not built: $1" >&2
  return 1
}
PROVIDER=$(find_file provider/libmetaroce-rdmav34.so) || exit 1
TRAFFIC=$(find_file tests/daemon/mroce_traffic) || exit 1
HOSTILE_BIN=$(find_file tests/hostile/hostile_client) || exit 1
PTRACER=$(find_file tests/hostile/hostile_client_ptracer) || exit 1
CTL=$(find_file tools/metaroce-ctl) || exit 1

TOOL_ENV=(RDMAV_DRIVERS="${PROVIDER%-rdmav34.so}")
asan=$(ldd "$PROVIDER" | awk '/libasan/ {print $3; exit}')
if [ -n "$asan" ]; then
  TOOL_ENV+=(LD_PRELOAD="$asan" ASAN_OPTIONS=detect_leaks=0:abort_on_error=1)
  export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1
fi
in_a() { mroce_in_a env "${TOOL_ENV[@]}" timeout 180 "$@"; }
in_b() { mroce_in_b env "${TOOL_ENV[@]}" timeout 180 "$@"; }

source "$top/tests/lib/netns.sh"
if [ "$(id -u)" != 0 ] || ! ip netns list >/dev/null 2>&1; then
  echo "SKIP: needs root and network namespaces"; E2E_SKIPPED=1; e2e_finish; exit 0
fi
WORK=$(mktemp -d /tmp/mroce-hostile.XXXXXX)
chmod 755 "$WORK"
# The unprivileged attacker cannot reach Bazel's runfiles under /root.
cp "$HOSTILE_BIN" "$WORK/hostile_client" && chmod 755 "$WORK/hostile_client"
HOSTILE_USER=nobody HOSTILE_GROUP=$(id -gn nobody 2>/dev/null || echo nogroup)
HOLD_PID=
cleanup() {
  [ -n "$HOLD_PID" ] && kill "$HOLD_PID" 2>/dev/null
  mroce_net_down >/dev/null 2>&1
  rm -rf "$WORK"
}
trap cleanup EXIT

UID_MAX_QP=6
# HOSTILE_DAEMON_ARGS overrides (e.g. "" to run against a daemon without these options).
export MROCE_DAEMON_ARGS=${HOSTILE_DAEMON_ARGS-"--uid-max-qp $UID_MAX_QP --uid-max-connections 32"}
if ! mroce_net_up --io packet >"$WORK/net_up.log" 2>&1; then
  cat "$WORK/net_up.log"; e2e_fail "network setup failed (log above)"
fi
SOCK_A=$MROCE_RUN_A/$MROCE_DEV_A.sock

# ---- helpers ----
as_root() { ip netns exec "$MROCE_NS_A" env "${TOOL_ENV[@]}" timeout 120 "$WORK/hostile_client" "$@"; }
as_user() {
  ip netns exec "$MROCE_NS_A" setpriv --reuid="$HOSTILE_USER" --regid="$HOSTILE_GROUP" \
    --clear-groups env "${TOOL_ENV[@]}" timeout 120 "$WORK/hostile_client" "$@"
}
counter() {  # NAME: one device counter of daemon A
  mroce_in_a "$CTL" --sysfs-root "$MROCE_SYSFS_A" stat -a "$MROCE_DEV_A" |
    awk -v n="$1" '$1 == n {print $2; found=1} END {if (!found) print "missing"}'
}
daemons_alive() {
  kill -0 "$MROCE_PID_A" 2>/dev/null || e2e_fail "daemon A died: $(tail -20 "$MROCE_RUN_A/daemon.log")"
  kill -0 "$MROCE_PID_B" 2>/dev/null || e2e_fail "daemon B died: $(tail -20 "$MROCE_RUN_B/daemon.log")"
}
PORT=18950
# The victim's transport budget: on a loaded 2-core CI machine (other
# daemons at SCHED_FIFO) a few hundred ms without progress is load, not an
# attack; 4.096 us * 2^18 * (7 + 1) retries is ~8.6 s. An attack that stalls
# the daemon still fails it.
VICTIM_ARGS=(--timeout 18 --retry-cnt 7)
traffic_start() {  # name args...: server in A, client in B (the victim), in the background
  local name=$1; shift
  set -- "$@" "${VICTIM_ARGS[@]}"
  PORT=$((PORT + 1))
  in_a "$TRAFFIC" server --dev "$MROCE_DEV_A" --port "$PORT" "$@" >"$WORK/$name.server.log" 2>&1 &
  T_SPID=$!; e2e_track_pid "$T_SPID"
  in_b "$TRAFFIC" client "$MROCE_IP_A" --dev "$MROCE_DEV_B" --port "$PORT" "$@" \
    >"$WORK/$name.client.log" 2>&1 &
  T_CPID=$!; e2e_track_pid "$T_CPID"
  T_NAME=$name
}
traffic_wait() {
  local rc=0 src=0
  wait "$T_CPID" || rc=$?
  wait "$T_SPID" || src=$?
  echo "== victim server"; tail -5 "$WORK/$T_NAME.server.log"
  echo "== victim client"; tail -5 "$WORK/$T_NAME.client.log"
  if [ $rc != 0 ] || [ $src != 0 ]; then
    echo "== daemon A counters"; mroce_in_a "$CTL" --sysfs-root "$MROCE_SYSFS_A" stat -a "$MROCE_DEV_A" | awk '$2 != 0'
    echo "== daemon B counters"; mroce_in_b "$CTL" --sysfs-root "$MROCE_SYSFS_B" stat -a "$MROCE_DEV_B" | awk '$2 != 0'
    echo "== daemon A log"; tail -20 "$MROCE_RUN_A/daemon.log"
    echo "== daemon B log"; tail -20 "$MROCE_RUN_B/daemon.log"
    e2e_fail "victim traffic $T_NAME: client exit $rc, server exit $src"
  fi
}
victim() { traffic_start "$@"; traffic_wait; }

# ---- cases ----

t_socket_mode() {
  local mode; mode=$(stat -c %a "$SOCK_A")
  echo "control socket mode $mode"
  [ "$mode" = 666 ] || e2e_fail "control socket mode $mode, want 666"
}

t_ring_truncate() {
  as_root truncate "$SOCK_A"
  as_user truncate "$SOCK_A"
  daemons_alive
  victim truncate --seed 21 --bulk-mib 4 --max-size 65536
}

# srqud: a ring written beyond max_recv_wr (docs/security.md).
t_ring_over_bound() {
  local before; before=$(counter wqe_recv_over_bound)
  as_user overbound "$SOCK_A"
  daemons_alive
  echo "wqe_recv_over_bound=$(counter wqe_recv_over_bound)"
  [ "$(counter wqe_recv_over_bound)" -ge $((before + 3)) ] || e2e_fail "entries over the bound not counted"
}

t_ring_garbage() {
  traffic_start garbage --seed 22 --bulk-mib 32 --max-size 262144
  as_user garbage "$SOCK_A" 7
  as_root garbage "$SOCK_A" 8
  traffic_wait
  daemons_alive
  echo "ring_bad_producer=$(counter ring_bad_producer) wqe_rejected=$(counter wqe_rejected)" \
       "wqe_bad_sge_count=$(counter wqe_bad_sge_count)"
  [ "$(counter ring_bad_producer)" -gt 0 ] || e2e_fail "no scribbled producer index was counted"
}

t_bad_channel_fds() {
  local before; before=$(counter channel_fd_refused)
  as_user channel "$SOCK_A"
  [ "$(counter channel_fd_refused)" -ge $((before + 4)) ] || e2e_fail "channel refusals not counted"
  daemons_alive
  victim channel --seed 23 --bulk-mib 4 --max-size 65536
}

t_exhaust_limits() {
  local hold=$WORK/shared/hold  # written by the unprivileged attacker
  mkdir -p "$WORK/shared" && chmod 1777 "$WORK/shared"
  rm -f "$hold"
  ip netns exec "$MROCE_NS_A" setpriv --reuid="$HOSTILE_USER" --regid="$HOSTILE_GROUP" \
    --clear-groups env HOSTILE_HOLD_FILE="$hold" "${TOOL_ENV[@]}" \
    "$WORK/hostile_client" exhaust "$SOCK_A" "$UID_MAX_QP" >"$WORK/exhaust.log" 2>&1 &
  HOLD_PID=$!; e2e_track_pid "$HOLD_PID"
  if ! wait_for 60 test -e "$hold"; then
    kill "$HOLD_PID" 2>/dev/null; cat "$WORK/exhaust.log"; e2e_fail "exhaust did not reach its limit"
  fi
  cat "$WORK/exhaust.log"
  if grep -q '^FAIL' "$WORK/exhaust.log"; then kill "$HOLD_PID"; e2e_fail "exhaust expectations failed"; fi
  [ "$(counter limit_refused_user)" -gt 0 ] || e2e_fail "per-user refusal not counted"
  # root (another uid) still gets its QPs while nobody holds all of its own.
  ( victim exhaust --seed 24 --bulk-mib 4 --max-size 65536 ) || { kill "$HOLD_PID"; exit 1; }
  kill "$HOLD_PID"; wait "$HOLD_PID" 2>/dev/null || true; HOLD_PID=
  daemons_alive
}

t_foreign_objects() {
  traffic_start foreign_user --seed 25 --bulk-mib 64 --max-size 262144
  as_user foreign "$SOCK_A"
  traffic_wait
  traffic_start foreign_root --seed 28 --bulk-mib 64 --max-size 262144
  as_root foreign "$SOCK_A"
  traffic_wait
  daemons_alive
}

t_fuzz() {
  local seed=${HOSTILE_FUZZ_SEED:-$((RANDOM * 32768 + RANDOM))} secs=${HOSTILE_FUZZ_SECS:-30}
  local e0; e0=$(counter ctrl_errors)
  echo "fuzz seed $seed, $secs s (HOSTILE_FUZZ_SEED=$seed reproduces)"
  traffic_start fuzz --seed 26 --bulk-mib 128 --max-size 262144
  as_user fuzz "$SOCK_A" "$secs" "$seed"
  traffic_wait
  daemons_alive
  echo "ctrl_errors=$(counter ctrl_errors) ctrl_malformed=$(counter ctrl_malformed)" \
       "ring_bad_producer=$(counter ring_bad_producer) wqe_rejected=$(counter wqe_rejected)"
  [ "$(counter ctrl_errors)" -gt "$e0" ] || e2e_fail "the fuzz run's rejects were not counted"
  victim after_fuzz --seed 27 --bulk-mib 4 --max-size 65536
}

t_provider_keeps_ptrace_protection() {
  in_a "$PTRACER" "$MROCE_DEV_A"
}

if [ -n "${HOSTILE_ONLY:-}" ]; then  # one case, e.g. HOSTILE_ONLY=fuzz (tools/test)
  e2e_case "$HOSTILE_ONLY" "t_$HOSTILE_ONLY"
else
  e2e_case socket_mode t_socket_mode
  e2e_case ring_truncate t_ring_truncate
  e2e_case ring_garbage t_ring_garbage
  e2e_case ring_over_bound t_ring_over_bound
  e2e_case bad_channel_fds t_bad_channel_fds
  e2e_case exhaust_limits t_exhaust_limits
  e2e_case foreign_objects t_foreign_objects
  e2e_case provider_keeps_ptrace_protection t_provider_keeps_ptrace_protection
  [ "${HOSTILE_SKIP_FUZZ:-}" = 1 ] || e2e_case fuzz t_fuzz
fi
e2e_finish
