# Stock-tool helpers shared by the verbs e2e tests (sourced after e2e.sh,
# with $top the source tree): the provider, in_a/in_b with the tools'
# environment (ASan runtime when the provider is an ASan build), GID
# lookup, server/client pairs and perftest figures.
find_file() {  # rel-path: runfiles first, then the tree's bazel-bin
  local f
  for f in "$top/$1" "$top/.bazel/bin/$1"; do [ -e "$f" ] && { readlink -f "$f"; return 0; }; done
  return 1
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

# perftest prints one row of figures under its header; show and require it.
perf_figure() {  # logfile
  local row
  row=$(awk '/^ *#bytes/ {h=1; next} h && /^ *[0-9]/ {print; exit}' "$1")
  [ -n "$row" ] || e2e_fail "no figure in $1"
  echo "FIGURE: $row"
}

