#!/usr/bin/env bash
# End-to-end: RoCE v2 over IPv6 from the first packet right after bring-up,
# between the two namespaces of tests/lib/netns.sh: GID 0 (the EUI-64
# link-local GID) and an IPv6 global GID, with stock ibv_rc_pingpong and
# perftest, while DAD still keeps the addresses tentative; and a neighbour
# that only neighbour discovery can resolve, picked up once it resolves.
# MROCE_E2E_IO=packet|xdp picks the daemons' packet I/O. Needs root.
set -u
here=$(cd "$(dirname "$0")" && pwd)
top=${TEST_SRCDIR:+$TEST_SRCDIR/metaroce}
top=${top:-$(cd "$here/../.." && pwd)}
source "$top/tests/lib/e2e.sh"
source "$top/tests/lib/netns.sh"

find_file() {  # rel-path: runfiles first, then the tree's bazel-bin
  local f
  for f in "$top/$1" "$top/.bazel/bin/$1"; do [ -e "$f" ] && { readlink -f "$f"; return 0; }; done
  return 1
}
if [ "$(id -u)" != 0 ] || ! command -v ibv_rc_pingpong >/dev/null || ! command -v ib_write_bw >/dev/null; then
  echo "SKIP: needs root, ibverbs-utils and perftest"; E2E_SKIPPED=1; e2e_finish; exit 0
fi
PROVIDER=$(find_file provider/libmetaroce-rdmav34.so) || { echo "provider .so not built"; exit 1; }
TOOL_ENV=(RDMAV_DRIVERS="${PROVIDER%-rdmav34.so}")
asan=$(ldd "$PROVIDER" | awk '/libasan/ {print $3; exit}')
[ -n "$asan" ] && TOOL_ENV+=(LD_PRELOAD="$asan" ASAN_OPTIONS=detect_leaks=0:abort_on_error=1)
in_a() { mroce_in_a env "${TOOL_ENV[@]}" timeout 90 "$@"; }
in_b() { mroce_in_b env "${TOOL_ENV[@]}" timeout 90 "$@"; }

PORT=18700
tcp_listening() { ip netns exec "$1" ss -ltn 2>/dev/null | grep -q ":$2 "; }
pair() {  # name "server cmd..." "client cmd..." (the client gets the server's IPv4 address last)
  local name=$1 log_s=$E2E_RUN_DIR/$1.server.log log_c=$E2E_RUN_DIR/$1.client.log spid rc
  PORT=$((PORT + 1))
  eval "$2 -p $PORT" >"$log_s" 2>&1 &
  spid=$!; e2e_track_pid "$spid"
  wait_for 60 tcp_listening "$MROCE_NS_A" "$PORT" || e2e_fail "$name: server never listened on $PORT"
  rc=0; eval "$3 -p $PORT $MROCE_IP_A" >"$log_c" 2>&1 || rc=$?
  local src=0; wait "$spid" || src=$?
  echo "== server"; cat "$log_s"; echo "== client"; cat "$log_c"
  if [ $rc != 0 ] || [ $src != 0 ]; then
    dump_daemons
    e2e_fail "$name: client exit $rc, server exit $src"
  fi
}

# Has the daemon's log more SIGUSR1 counter dumps than N? (A function, so
# wait_for counts them again on every poll.)
dumps_above() {  # log N
  [ "$(grep -c 'counters:' "$1")" -gt "$2" ]
}

# What the daemons saw, for a failed case: counters and QP states.
dump_daemons() {
  local pid log n
  for pid in "$MROCE_PID_A:$MROCE_RUN_A" "$MROCE_PID_B:$MROCE_RUN_B"; do
    log=${pid#*:}/daemon.log; pid=${pid%%:*}
    n=$(grep -c 'counters:' "$log")
    kill -USR1 "$pid" 2>/dev/null && wait_for 10 dumps_above "$log" "$n"
    echo "== daemon $pid"; grep -v ': context ' "$log" | tail -8
  done
  ip -n "$MROCE_NS_A" -6 addr show; ip -n "$MROCE_NS_B" -6 neigh show
}

gid_index() {  # in_a|in_b dev address: the index of its RoCE v2 GID
  "$1" ibv_devinfo -v -d "$2" | awk -v ip="$3" '/GID\[/ && /RoCE v2/ { g = $0; sub(/.*GID\[ */, "", g); i = g; sub(/\].*/, "", i);
    sub(/^[^:]*:[ \t]*/, "", g); sub(/,.*/, "", g); if (g == ip) { print i; exit } }'
}

# A daemon counter, from the dump SIGUSR1 writes to its log.
counter() {  # a|b name
  local log pid n
  if [ "$1" = a ]; then log=$MROCE_RUN_A/daemon.log pid=$MROCE_PID_A; else log=$MROCE_RUN_B/daemon.log pid=$MROCE_PID_B; fi
  n=$(grep -c 'counters:' "$log")
  kill -USR1 "$pid"
  wait_for 30 dumps_above "$log" "$n" || e2e_fail "no counter dump from daemon $1"
  grep 'counters:' "$log" | tail -1 | tr ' ' '\n' | awk -F= -v k="$2" '$1 == k {v = $2} END {print v + 0}'
}

tentative() {  # ns address-prefix: the address is still in DAD
  ip -n "$1" -6 addr show | grep -q "inet6 $2.* tentative"
}

# Brings the network up again for every case: each starts right after
# bring-up, the moment the daemons are up.
fresh() {
  mroce_net_up ${MROCE_E2E_IO:+--io $MROCE_E2E_IO} "$@" || e2e_fail "mroce_net_up failed"
  local want=${MROCE_E2E_IO:-} io
  io=$(grep -h 'packet I/O:' "$MROCE_RUN_A/daemon.log")
  echo "$io"
  case $want in
    xdp) grep -q 'af_xdp' <<<"$io" || e2e_fail "asked for AF_XDP, the daemon runs: $io" ;;
    packet) grep -q 'af_packet' <<<"$io" || e2e_fail "asked for AF_PACKET, the daemon runs: $io" ;;
  esac
}

# No frame may wait for a neighbour: the first packet leaves at once.
no_neighbour_drops() {
  local a b
  a=$(counter a tx_drop_no_neighbor); b=$(counter b tx_drop_no_neighbor)
  echo "tx_drop_no_neighbor: A=$a B=$b"
  [ "$a" = 0 ] && [ "$b" = 0 ] || e2e_fail "frames dropped for want of a neighbour (A=$a B=$b)"
}

t_gid0_pingpong() {
  fresh
  local t=no; tentative "$MROCE_NS_A" fe80: && t=yes
  pair gid0 "in_a ibv_rc_pingpong -d $MROCE_DEV_A -g 0 -n 200" "in_b ibv_rc_pingpong -d $MROCE_DEV_B -g 0 -n 200"
  echo "link-local tentative at start: $t"
  grep -q 'GID fe80::' "$E2E_RUN_DIR/gid0.client.log" || e2e_fail "GID 0 is not the link-local GID"
  no_neighbour_drops
}

# The RC measurements qperf's rc_bw, rc_rdma_write_bw and rc_rdma_read_lat
# make, with perftest, which names the GID (-x): qperf 0.4.11 cannot
# (docs/packet-io.md "IPv6 GIDs and qperf"); rc_lat's is rc_pingpong's.
perf_right_after_bring_up() {  # gid0|global tool args...
  local kind=$1 tool=$2 ga=0 gb=0; shift 2
  if [ "$kind" = global ]; then
    fresh --ipv6
    ga=$(gid_index in_a "$MROCE_DEV_A" "$MROCE_IP6_A"); gb=$(gid_index in_b "$MROCE_DEV_B" "$MROCE_IP6_B")
    [ -n "$ga" ] && [ -n "$gb" ] || e2e_fail "no RoCE v2 GID for $MROCE_IP6_A / $MROCE_IP6_B"
  else
    fresh
  fi
  # -u 18 (1.07 s per try), as tests/verbs does: a loaded 2-vCPU CI stalled
  # a latency ping-pong past perftest's 0.54 s. The first-packet property
  # is the counter below, not a deadline.
  pair "${tool}_$kind" "in_a $tool -d $MROCE_DEV_A -x $ga -u 18 $*" "in_b $tool -d $MROCE_DEV_B -x $gb -u 18 $*"
  awk '/^ *#bytes/ {h=1; next} h && /^ *[0-9]/ {print "FIGURE: " $0; exit}' "$E2E_RUN_DIR/${tool}_$kind.client.log"
  no_neighbour_drops
}

t_global_pingpong() {
  fresh --ipv6
  local ga gb t=no
  tentative "$MROCE_NS_A" "$MROCE_IP6_A/" && t=yes
  ga=$(gid_index in_a "$MROCE_DEV_A" "$MROCE_IP6_A"); gb=$(gid_index in_b "$MROCE_DEV_B" "$MROCE_IP6_B")
  [ -n "$ga" ] && [ -n "$gb" ] || e2e_fail "no RoCE v2 GID for $MROCE_IP6_A / $MROCE_IP6_B"
  echo "global GID index A=$ga B=$gb; tentative at start: $t"
  pair global "in_a ibv_rc_pingpong -d $MROCE_DEV_A -g $ga -n 200" "in_b ibv_rc_pingpong -d $MROCE_DEV_B -g $gb -n 200"
  grep -q "GID $MROCE_IP6_A" "$E2E_RUN_DIR/global.client.log" || e2e_fail "the peer's GID is not $MROCE_IP6_A"
  no_neighbour_drops
}

# Neighbour discovery only (no static IPv6 neighbour), started while A's
# global address is in a 6 s DAD: the kernel in B gives up on the tentative
# peer (3 probes, NUD_FAILED) before A answers, so the first frames wait
# (counted) and the daemon must ask again, bounded, until the neighbour
# resolves; then the transfer completes. perftest's -u 19 gives each try
# 2.1 s (17 s in all), longer than DAD.
has_global_gid() { in_a ibv_devinfo -v -d "$MROCE_DEV_A" 2>/dev/null | grep -q "$MROCE_IP6_A, RoCE v2"; }

t_global_neighbour_discovery() {
  fresh --ipv6-nd
  local ga gb d tr
  ip netns exec "$MROCE_NS_A" sh -c "echo 6 > /proc/sys/net/ipv6/conf/$MROCE_IF_A/dad_transmits" ||
    e2e_fail "cannot set dad_transmits"
  ip -n "$MROCE_NS_A" addr del "$MROCE_IP6_A/64" dev "$MROCE_IF_A"
  ip -n "$MROCE_NS_A" addr add "$MROCE_IP6_A/64" dev "$MROCE_IF_A"
  wait_for 30 has_global_gid || e2e_fail "$MROCE_IP6_A never came back as a GID"
  tentative "$MROCE_NS_A" "$MROCE_IP6_A/" || e2e_fail "A's address is not tentative: the case would not test discovery"
  ga=$(gid_index in_a "$MROCE_DEV_A" "$MROCE_IP6_A"); gb=$(gid_index in_b "$MROCE_DEV_B" "$MROCE_IP6_B")
  ip -n "$MROCE_NS_B" -6 neigh show "$MROCE_IP6_A" | grep -q lladdr && e2e_fail "B already knows A: the case would not test discovery"
  pair global_nd "in_a ib_write_bw -d $MROCE_DEV_A -x $ga -u 19 -s 65536 -n 300" "in_b ib_write_bw -d $MROCE_DEV_B -x $gb -u 19 -s 65536 -n 300"
  d=$(counter b tx_drop_no_neighbor); tr=$(counter b neigh_resolve_triggers)
  echo "B: tx_drop_no_neighbor=$d neigh_resolve_triggers=$tr"
  [ "$d" -gt 0 ] || e2e_fail "no frame waited for the neighbour: discovery was not tested"
  [ "$tr" -ge 2 ] || e2e_fail "B asked only once: the kernel's own retries resolved it, not the daemon's"
  ip -n "$MROCE_NS_B" -6 neigh show "$MROCE_IP6_A" | grep -q lladdr || e2e_fail "the kernel never resolved $MROCE_IP6_A"
}

trap 'mroce_net_down >/dev/null 2>&1' EXIT
e2e_case rc_pingpong_gid0_right_after_bring_up t_gid0_pingpong
e2e_case rc_pingpong_ipv6_global_right_after_bring_up t_global_pingpong
for kind in gid0 global; do
  # Not ib_send_lat: right after bring-up it sometimes sets off a storm of
  # tail-loss probes in the engine (tens of thousands in seconds, over IPv4
  # as well) that overflows the peer's receive ring until the retries run
  # out; an engine bug, reported, not an IPv6 one. rc_pingpong above is the
  # SEND ping-pong.
  for spec in "ib_send_bw -s 65536 -n 300" "ib_write_bw -s 65536 -n 300" "ib_read_lat -n 300"; do
    tool=${spec%% *}
    eval "t_${tool}_$kind() { perf_right_after_bring_up $kind $spec; }"
    e2e_case "${tool}_${kind}_right_after_bring_up" "t_${tool}_$kind"
  done
done
e2e_case ib_write_bw_ipv6_global_neighbour_resolved_later t_global_neighbour_discovery
e2e_finish
