#!/usr/bin/env bash
# End-to-end (issue 11): UCX's ucx_perftest between two namespaces over
# metaroce, with UCX_TLS=ud_v, rc_v and UCX's default, and ucx_info -d
# listing the device. Programs run under metaroce-run --sysfs-view on (UCX
# reads /sys/class/infiniband). Each case proves the payload crossed
# metaroce: UCX names the transport it chose (ep_cfg: ..._verbs/metaroceN:1)
# and the daemons' tx_bytes grow by more than the message volume; TCP is
# not a candidate (UCX_NET_DEVICES names only the metaroce port).
# Honours MROCE_PREFIX and E2E_RUN_DIR (tests/lib/netns.sh). Needs root.
set -u
here=$(cd "$(dirname "$0")" && pwd)
top=${TEST_SRCDIR:+$TEST_SRCDIR/metaroce}
top=${top:-$(cd "$here/../.." && pwd)}
source "$top/tests/lib/e2e.sh"
source "$top/tests/lib/verbs.sh"
PRELOAD=$(find_file kmod-shim/launcher/libmetaroce-preload.so) || { echo "interposer not built"; exit 1; }
export METAROCE_PRELOAD=$PRELOAD
LAUNCHER=$top/kmod-shim/launcher/metaroce-run
source "$top/tests/lib/netns.sh"
# UCT-level tests (-x/-d) send the client's device name to the server, so
# both namespaces publish the same name (their sysfs trees are separate).
MROCE_DEV_B=$MROCE_DEV_A
if [ "$(id -u)" != 0 ] || ! command -v ucx_perftest >/dev/null; then
  echo "SKIP: needs root and ucx-utils (tools/setup installs it)"; E2E_SKIPPED=1; e2e_finish; exit 0
fi
trap 'mroce_net_down >/dev/null 2>&1' EXIT
mroce_net_up ${MROCE_E2E_IO:+--io $MROCE_E2E_IO} || { echo "mroce_net_up failed"; E2E_FAILED=1; e2e_finish; exit 1; }

# A UCX program under the launcher in namespace a or b.
ucx_in() {  # a|b CMD...
  local side=$1; shift
  local ns=$MROCE_NS_A sysfs=$MROCE_SYSFS_A
  [ "$side" = b ] && { ns=$MROCE_NS_B; sysfs=$MROCE_SYSFS_B; }
  ip netns exec "$ns" env -u RDMAV_DRIVERS UCX_LOG_LEVEL=info timeout 120 \
    "$LAUNCHER" --sysfs-root "$sysfs" --sysfs-view on "$@"
}
tx_bytes() {  # a|b
  local ctl; ctl=$(mroce_find_bin metaroce-ctl tools/metaroce-ctl) || return 1
  if [ "$1" = a ]; then mroce_in_a "$ctl" --sysfs-root "$MROCE_SYSFS_A" stat -a "$MROCE_DEV_A"
  else mroce_in_b "$ctl" --sysfs-root "$MROCE_SYSFS_B" stat -a "$MROCE_DEV_B"; fi |
    awk '$1 == "tx_bytes" {print $2; exit}'
}

# ucx_perftest: server in A, client in B; both must finish, print a final
# figure, name a metaroce transport, and move more than SIZE*ITERS bytes
# through the daemons.
perftest() {  # name tls(or "default") transport-pattern test size iters
  local name=$1 tls=$2 want=$3 test=$4 size=$5 iters=$6 spid rc=0 src=0 before after
  local log_s=$E2E_RUN_DIR/$name.server.log log_c=$E2E_RUN_DIR/$name.client.log
  local tlsenv=(); [ "$tls" = default ] || tlsenv=(UCX_TLS="$tls")
  PORT=$((PORT + 1))
  before=$(( $(tx_bytes a) + $(tx_bytes b) ))
  ucx_in a env "${tlsenv[@]}" UCX_NET_DEVICES="$MROCE_DEV_A:1" ucx_perftest -p $PORT >"$log_s" 2>&1 &
  spid=$!; e2e_track_pid "$spid"
  wait_for 60 tcp_listening "$MROCE_NS_A" "$PORT" || e2e_fail "$name: server never listened on $PORT"
  ucx_in b env "${tlsenv[@]}" UCX_NET_DEVICES="$MROCE_DEV_B:1" ucx_perftest -p $PORT \
    -t "$test" -s "$size" -n "$iters" "$MROCE_IP_A" >"$log_c" 2>&1 || rc=$?
  wait "$spid" || src=$?
  after=$(( $(tx_bytes a) + $(tx_bytes b) ))
  echo "== server"; grep -v "failed to get boot id" "$log_s"; echo "== client"; grep -v "failed to get boot id" "$log_c"
  [ $rc = 0 ] && [ $src = 0 ] || { daemon_stats; e2e_fail "$name: client exit $rc, server exit $src"; }
  grep -q "^Final:" "$log_c" || e2e_fail "$name: no final figure"
  grep -Eq "ep_cfg\[[0-9]+\]: .*$want/$MROCE_DEV_B:1" "$log_c" || e2e_fail "$name: UCX did not choose $want on $MROCE_DEV_B"
  echo "FIGURE: $name $(grep '^Final:' "$log_c")"
  echo "daemon tx_bytes grew by $((after - before)) for $((size * iters)) bytes of messages"
  [ $((after - before)) -gt $((size * iters)) ] || e2e_fail "$name: the daemons sent only $((after - before)) bytes"
}

# A UCT-level test on rc_verbs (the device's own atomics: UCP's AMO needs
# and/or/xor/swap too, so over verbs UCP emulates atomics with active
# messages, "amo_am"); same checks of completion and bytes sent.
uct_test() {  # test iters
  local name=uct_rc_verbs_$1 test=$1 iters=$2 spid rc=0 src=0 before after dev=$MROCE_DEV_A:1
  local log_s=$E2E_RUN_DIR/$name.server.log log_c=$E2E_RUN_DIR/$name.client.log
  PORT=$((PORT + 1))
  before=$(( $(tx_bytes a) + $(tx_bytes b) ))
  ucx_in a ucx_perftest -p $PORT -x rc_verbs -d "$dev" >"$log_s" 2>&1 &
  spid=$!; e2e_track_pid "$spid"
  wait_for 60 tcp_listening "$MROCE_NS_A" "$PORT" || e2e_fail "$name: server never listened on $PORT"
  ucx_in b ucx_perftest -p $PORT -x rc_verbs -d "$dev" -t "$test" -n "$iters" "$MROCE_IP_A" >"$log_c" 2>&1 || rc=$?
  wait "$spid" || src=$?
  after=$(( $(tx_bytes a) + $(tx_bytes b) ))
  echo "== server"; grep -v "failed to get boot id" "$log_s"; echo "== client"; grep -v "failed to get boot id" "$log_c"
  [ $rc = 0 ] && [ $src = 0 ] || { daemon_stats; e2e_fail "$name: client exit $rc, server exit $src"; }
  grep -q "^Final:" "$log_c" || e2e_fail "$name: no final figure"
  echo "FIGURE: $name $(grep '^Final:' "$log_c")"
  [ $((after - before)) -gt $((8 * iters)) ] || e2e_fail "$name: the daemons sent only $((after - before)) bytes"
}
t_uct_add() { uct_test add_lat 1000; }
t_uct_fadd() { uct_test fadd 1000; }
t_uct_cswap() { uct_test cswap 1000; }

t_ucx_info() {
  local out=$E2E_RUN_DIR/ucx_info.log
  ucx_in a ucx_info -d >"$out" 2>&1 || e2e_fail "ucx_info -d failed"
  sed -n "/Memory domain: $MROCE_DEV_A/,/^# Memory domain: [^m]/p" "$out"
  local t; for t in rc_verbs ud_verbs; do
    awk -v t="$t" -v d="$MROCE_DEV_A:1" '$2 == "Transport:" && $3 == t {x = 1} x && $2 == "Device:" {print ($3 == d); exit}' \
      "$out" | grep -q 1 || e2e_fail "ucx_info -d lists no $t on $MROCE_DEV_A:1"
  done
  # rc_verbs: RDMA write/read and the 64-bit atomics the device implements.
  sed -n "/Transport: rc_verbs/,/Transport: ud_verbs/p" "$out" | grep -q "atomic_fadd: 64 bit" || e2e_fail "no 64-bit atomics"
  sed -n "/Transport: rc_verbs/,/Transport: ud_verbs/p" "$out" | grep -q "get_zcopy" || e2e_fail "no RDMA read"
  # The GID UCX picks is RoCE v2 (UCX's own view of the device, through the launcher).
  ucx_in a ibv_devinfo -v -d "$MROCE_DEV_A" | grep -q "::ffff:$MROCE_IP_A, RoCE v2" || e2e_fail "no RoCE v2 GID"
}

# UCX's client/server connection establishment through rdma_cm (issue
# 12): UCX 1.13's ucx_perftest has no sockaddr mode (it swaps worker
# addresses over its own TCP socket, src/tools/perf/perftest.c), so the
# stock program for it is ucx-utils' io_demo (UCP listener, ucp_ep_create
# with a socket address). UCX_SOCKADDR_TLS_PRIORITY=rdmacm leaves rdma_cm
# as the only connection manager (no TCP fallback); the server daemon's CM
# must count the connection, UCX must name the metaroce lanes, io_demo
# checks every buffer (-q) and the daemons must carry the data.
cm_counter_of() {  # a|b NAME (metaroce-ctl stat -a)
  local ctl; ctl=$(mroce_find_bin metaroce-ctl tools/metaroce-ctl) || return 1
  if [ "$1" = a ]; then mroce_in_a "$ctl" --sysfs-root "$MROCE_SYSFS_A" stat -a "$MROCE_DEV_A"
  else mroce_in_b "$ctl" --sysfs-root "$MROCE_SYSFS_B" stat -a "$MROCE_DEV_B"; fi |
    awk -v n="$2" '$1 == n {print $2; exit}'
}
t_rdmacm_info() {
  local out=$E2E_RUN_DIR/ucx_info_cm.log
  ucx_in a ucx_info -d >"$out" 2>&1 || e2e_fail "ucx_info -d failed"
  grep -q "^# Connection manager: rdmacm" "$out" || e2e_fail "ucx_info -d lists no rdmacm connection manager: $(grep -i 'connection manager' "$out")"
}
t_rdmacm_io_demo() {
  local name=rdmacm_io_demo spid rc=0 before after est0 est1 iters=200
  local log_s=$E2E_RUN_DIR/$name.server.log log_c=$E2E_RUN_DIR/$name.client.log
  local opts=(-d 4096:65536 -o write,read -q)  # -q on both: the server fills, the client checks
  PORT=$((PORT + 1))
  before=$(( $(tx_bytes a) + $(tx_bytes b) )); est0=$(cm_counter_of a cm_established)
  ucx_in a env UCX_SOCKADDR_TLS_PRIORITY=rdmacm UCX_NET_DEVICES="$MROCE_DEV_A:1" io_demo -p $PORT "${opts[@]}" >"$log_s" 2>&1 &
  spid=$!; e2e_track_pid "$spid"
  wait_for 60 grep -q "started listener .* on 0.0.0.0:$PORT" "$log_s" || e2e_fail "$name: server never listened: $(cat "$log_s")"
  ucx_in b env UCX_SOCKADDR_TLS_PRIORITY=rdmacm UCX_NET_DEVICES="$MROCE_DEV_B:1" io_demo -p $PORT "${opts[@]}" \
    -i $iters "$MROCE_IP_A" >"$log_c" 2>&1 || rc=$?
  kill "$spid" 2>/dev/null; wait "$spid" 2>/dev/null || true  # the server runs until stopped
  after=$(( $(tx_bytes a) + $(tx_bytes b) )); est1=$(cm_counter_of a cm_established)
  echo "== server"; grep -v "failed to get boot id\|DEMO\] active" "$log_s" | tail -20
  echo "== client"; grep -v "failed to get boot id\|DEMO\] active" "$log_c" | tail -20
  [ $rc = 0 ] || { daemon_stats; e2e_fail "$name: client exit $rc"; }
  grep -q "got new connection request .* from client $MROCE_IP_B:" "$log_s" || e2e_fail "$name: the server saw no connection request"
  grep -q 'due to "End of the Client run"' "$log_c" || e2e_fail "$name: the client did not finish its $iters operations"
  # io_demo's own failures ("[DEMO] ERROR: ... data corruption"); the server's "detected error: Connection reset" is the client leaving.
  ! grep -q "\\[DEMO\\] ERROR\\|corruption" "$log_c" "$log_s" || e2e_fail "$name: io_demo reported: $(grep "\\[DEMO\\] ERROR\\|corruption" "$log_c" "$log_s")"
  grep -Eq "ep_cfg\[[0-9]+\]: .*[a-z]+_verbs/$MROCE_DEV_B:1" "$log_c" || e2e_fail "$name: UCX chose no metaroce lane"
  [ "${est1:-0}" -gt "${est0:-0}" ] || e2e_fail "$name: the server daemon's CM counted no connection (${est0:-0} -> ${est1:-0})"
  echo "FIGURE: $name $(grep 'total:' "$log_c" | tail -1 | sed 's/^\[[0-9.]*\] //')"
  echo "daemon tx_bytes grew by $((after - before)); cm_established ${est0:-0} -> $est1"
  [ $((after - before)) -gt $((4096 * iters)) ] || e2e_fail "$name: the daemons sent only $((after - before)) bytes"
}

# One case per (UCX_TLS, test): a function named after both, as e2e_case runs.
cases() {  # tls transport-pattern
  local tls=$1 want=$2 n=${1//_/} spec t size iters
  for spec in tag_bw:1048576:50 tag_lat:8:1000 ucp_put_bw:65536:200 ucp_get:4096:200 ucp_add:8:1000; do
    IFS=: read -r t size iters <<<"$spec"
    eval "t_${n}_$t() { perftest ${n}_$t $tls '$want' $t $size $iters; }"
    e2e_case "${n}_$t" "t_${n}_$t"
  done
}
e2e_case ucx_info_lists_metaroce t_ucx_info
cases ud_v ud_verbs
cases rc_v rc_verbs
cases default '[a-z]+_verbs'
e2e_case uct_rc_verbs_atomic_add t_uct_add
e2e_case uct_rc_verbs_atomic_fadd t_uct_fadd
e2e_case uct_rc_verbs_atomic_cswap t_uct_cswap
e2e_case ucx_info_lists_rdmacm t_rdmacm_info
e2e_case rdmacm_io_demo_write_read t_rdmacm_io_demo
e2e_finish
