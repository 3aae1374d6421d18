# Stock-tool helpers shared by the verbs e2e tests (sourced after e2e.sh,
# with $top the source tree): the provider, in_a/in_b with the tools'
# environment (ASan runtime when the provider is an ASan build), the
# launcher as launch_a/launch_b, the network up (verbs_e2e_up), GID
# lookup, server/client pairs, perftest figures and daemon counters.
# A test script starts:
#   set -u
#   here=$(cd "$(dirname "$0")" && pwd)
#   top=${TEST_SRCDIR:+$TEST_SRCDIR/metaroce}
#   top=${top:-$(cd "$here/../.." && pwd)}
#   source "$top/tests/lib/e2e.sh"
#   source "$top/tests/lib/verbs.sh"
#   PROG=$(need_file tests/x/prog) || exit 1
#   verbs_e2e_up ibv_rc_pingpong   # the stock tools it needs
find_file() {  # rel-path: runfiles first, then the tree's bazel-bin
  local f
  for f in "$top/$1" "$top/.bazel/bin/$1"; do [ -e "$f" ] && { readlink -f "$f"; return 0; }; done
  return 1
}
need_file() {  # rel-path: as find_file, or says what to build
  find_file "$1" || { echo "$1 is not built (bazel build //${1%/*}:${1##*/})" >&2; return 1; }
}
PROVIDER=$(find_file provider/libmetaroce-rdmav34.so) || { echo "provider .so not built"; exit 1; }
export METAROCE_PROVIDER=$PROVIDER

# Stock tools are not sanitizer builds: an ASan provider needs the runtime
# preloaded (metaroce-run does this itself), and their own leaks are not ours.
TOOL_ENV=(RDMAV_DRIVERS="${PROVIDER%-rdmav34.so}")
asan=$(ldd "$PROVIDER" | awk '/libasan/ {print $3; exit}')
if [ -n "$asan" ]; then
  TOOL_ENV+=(LD_PRELOAD="$asan" ASAN_OPTIONS=detect_leaks=0:abort_on_error=1)
  export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1
fi
in_a() { mroce_in_a env "${TOOL_ENV[@]}" timeout 90 "$@"; }
in_b() { mroce_in_b env "${TOOL_ENV[@]}" timeout 90 "$@"; }

# The launcher (metaroce-run: completion channels through its interposer).
LAUNCHER=$top/kmod-shim/launcher/metaroce-run
PRELOAD=$(find_file kmod-shim/launcher/libmetaroce-preload.so) && export METAROCE_PRELOAD=$PRELOAD
launch_a() { need_file kmod-shim/launcher/libmetaroce-preload.so >/dev/null || return 1
             mroce_in_a env -u RDMAV_DRIVERS timeout 90 "$LAUNCHER" "$@"; }
launch_b() { need_file kmod-shim/launcher/libmetaroce-preload.so >/dev/null || return 1
             mroce_in_b env -u RDMAV_DRIVERS timeout 90 "$LAUNCHER" "$@"; }

source "$top/tests/lib/netns.sh"

# The two hosts up over $MROCE_E2E_IO (tests/lib/netns.sh), GID_A/GID_B set,
# torn down at exit. Without root, a TOOL or metaroced: the summary line
# with one skipped case, and exit 0; the network not up: one failed, exit 1.
verbs_e2e_up() {  # TOOL... (stock tools the cases run)
  local t
  [ "$(id -u)" = 0 ] || _verbs_e2e_skip "needs root"
  for t in "$@"; do
    command -v "$t" >/dev/null || _verbs_e2e_skip "needs $t (ibverbs-utils/perftest: tools/setup installs them)"
  done
  if ! mroce_find_bin metaroced firmware-model/daemon/metaroced >/dev/null 2>&1 && [ -z "${METAROCED:-}" ]; then
    _verbs_e2e_skip "metaroced is not built (bazel build //firmware-model/daemon:metaroced)"
  fi
  trap 'mroce_net_down >/dev/null 2>&1' EXIT
  mroce_net_up ${MROCE_E2E_IO:+--io $MROCE_E2E_IO} || { echo "mroce_net_up failed"; E2E_FAILED=1; e2e_finish; exit 1; }
  GID_A=$(gid_index in_a "$MROCE_DEV_A" "$MROCE_IP_A")
  GID_B=$(gid_index in_b "$MROCE_DEV_B" "$MROCE_IP_B")
  echo "GID index A=$GID_A B=$GID_B io=${MROCE_E2E_IO:-auto}"
}
_verbs_e2e_skip() { echo "SKIP: $*"; E2E_SKIPPED=1; e2e_finish; exit 0; }

# Index of the RoCE v2 IPv4-mapped GID (what -g / -x need).
gid_index() {  # in_a|in_b dev ip
  "$1" ibv_devinfo -v -d "$2" | awk -v ip="::ffff:$3" '/GID\[/ && index($0, ip) && /RoCE v2/ {
    gsub(/.*GID\[ */, ""); gsub(/\].*/, ""); print; exit }'
}

# Runs a server in A (background) and a client in B; both must succeed.
PORT=18600
tcp_listening() { ip netns exec "$1" ss -ltn 2>/dev/null | grep -q ":$2 "; }
pair() {  # name "server cmd..." "client cmd..." (client gets the server IP last)
  local name=$1 log_s=$E2E_RUN_DIR/$1.server.log log_c=$E2E_RUN_DIR/$1.client.log spid rc
  PORT=$((PORT + 1))
  eval "$2 -p $PORT" >"$log_s" 2>&1 &
  spid=$!; e2e_track_pid "$spid"
  # Wait for the server's TCP exchange port (its start-up can take seconds).
  wait_for 60 tcp_listening "$MROCE_NS_A" "$PORT" || e2e_fail "$name: server never listened on $PORT"
  rc=0; eval "$3 -p $PORT $MROCE_IP_A" >"$log_c" 2>&1 || rc=$?
  local src=0; wait "$spid" || src=$?
  echo "== server"; cat "$log_s"; echo "== client"; cat "$log_c"
  [ $rc = 0 ] && [ $src = 0 ] || { daemon_stats; e2e_fail "$name: client exit $rc, server exit $src"; }
}

# Both daemons' counters (retransmissions, drops by reason), to say why a
# pair failed.
daemon_stats() {
  local ctl; ctl=$(mroce_find_bin metaroce-ctl tools/metaroce-ctl 2>/dev/null) || return 0
  echo "== daemon a"; mroce_in_a "$ctl" --sysfs-root "$MROCE_SYSFS_A" stat -a "$MROCE_DEV_A" 2>&1
  echo "== daemon b"; mroce_in_b "$ctl" --sysfs-root "$MROCE_SYSFS_B" stat -a "$MROCE_DEV_B" 2>&1
}

# One engine or daemon counter of device a or b (metaroce-ctl stat -a), or
# "missing".
engine_counter() {  # a|b name
  local ctl; ctl=$(mroce_find_bin metaroce-ctl tools/metaroce-ctl) || return 1
  if [ "$1" = a ]; then mroce_in_a "$ctl" --sysfs-root "$MROCE_SYSFS_A" stat -a "$MROCE_DEV_A"
  else mroce_in_b "$ctl" --sysfs-root "$MROCE_SYSFS_B" stat -a "$MROCE_DEV_B"; fi |
    awk -v n="$2" '$1 == n || $1 == n":" {print $NF; found=1; exit} END {if (!found) print "missing"}'
}

# Fails the case unless device a's (or b's) counter is at least a minimum.
expect_counter() {  # [a|b] name minimum (default a)
  local side=a v
  [ $# = 3 ] && { side=$1; shift; }
  v=$(engine_counter "$side" "$1")
  echo "$side: $1 = $v"
  [ "$v" != missing ] && [ "$v" -ge "$2" ] || e2e_fail "counter $1 of $side = $v, want >= $2"
}

# perftest prints one row of figures under its header; show and require it.
perf_figure() {  # logfile
  local row
  row=$(awk '/^ *#bytes/ {h=1; next} h && /^ *[0-9]/ {print; exit}' "$1")
  [ -n "$row" ] || e2e_fail "no figure in $1"
  echo "FIGURE: $row"
}


# perftest between the namespaces: server in A, client in B, and its figure.
# -u 18: an IB timeout of 1.07 s per try (8.6 s without progress) instead of
# perftest's 14 (0.54 s): these cases check that the tools run and print
# figures; under load a 2-vCPU CI stalled a latency ping-pong past 0.5 s
# (both sides RETRY_EXC_ERR, also on the engine before this session).
perf() {  # tool extra-args
  local tool=$1; shift
  pair "$tool" "in_a $tool -d $MROCE_DEV_A -x $GID_A -u 18 $*" "in_b $tool -d $MROCE_DEV_B -x $GID_B -u 18 $*"
  perf_figure "$E2E_RUN_DIR/$tool.client.log"
}
# perftest says what it ran; a case passes only if it ran that.
ran() {  # tool pattern (in the client's log of the last perf)
  grep -q "$2" "$E2E_RUN_DIR/$1.client.log" || e2e_fail "$1 did not run with '$2'"
}
