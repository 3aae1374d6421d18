# Two-host test network (sourced): namespaces mroce-a and mroce-b joined by
# one veth pair, a metaroced in each. Traffic never leaves these namespaces.
#
#   mroce_net_up [--io auto|xdp|packet] [--mtu N] [--paths N] [--ipv6 [--ipv6-nd]]
#       exports MROCE_NS_A/B, MROCE_IF_A/B, MROCE_IP_A/B, MROCE_SYSFS_A/B
#       (the SYSFS_PATH to use in each namespace), MROCE_DEV_A/B
#       (metaroce0/metaroce1), MROCE_RUN_A/B, MROCE_PID_A/B
#   --ipv6 adds the global addresses MROCE_IP6_A/B (fd77::1, fd77::2, /64;
#       GID index 2 of each device) with static neighbours, as for IPv4;
#       --ipv6-nd leaves their neighbours to IPv6 neighbour discovery. The
#       daemons start at once: the addresses are still tentative (DAD).
#   mroce_net_down
#   mroce_in_a CMD... / mroce_in_b CMD...   run in a namespace with SYSFS_PATH set
#   mroce_daemon_restart a|b                 kill -9 and restart one daemon
#   MROCE_DAEMONS=a mroce_net_up ...         a daemon in A only (B: a bare host)
#
# Fault-injection hop (docs/impair.md): `mroce_net_up --hop` (or MROCE_HOP=1)
# joins the hosts through a third namespace $MROCE_PREFIX-m instead of one
# veth pair: A's interface is paired with leg $MROCE_PREFIX-ma, B's with
# $MROCE_PREFIX-mb, and mroce-impair $MROCE_IMPAIR_ARGS forwards between the
# legs (L2, so addresses, MACs and static neighbours are as without the hop).
#   exports MROCE_NS_M, MROCE_PID_M, MROCE_HOP_STATS (its JSON counters file)
#   mroce_hop_restart [ARGS...]   restart mroce-impair with other impairments
#   mroce_hop_stats               fresh counters (SIGUSR1, waits for the file)
# It runs as SCHED_FIFO $MROCE_HOP_RT (default 10; 0: normal scheduling): a
# normal task woken by a frame on these busy 2-vCPU machines waited out other
# tasks' slices (ping through the hop: p50 2.8 ms, against 77 us as FIFO).
# The impairer binary: $MROCE_IMPAIR, else runfiles, else .bazel/bin.
#
# The daemon binary: $METAROCED, else the Bazel runfiles copy, else .bazel/bin.

# MROCE_PREFIX (default mroce) names the namespaces, interfaces and run
# directories, so two networks can coexist (names must start with mroce).
MROCE_PREFIX=${MROCE_PREFIX:-mroce}
MROCE_NS_A=$MROCE_PREFIX-a; MROCE_NS_B=$MROCE_PREFIX-b
MROCE_IF_A=$MROCE_PREFIX-va; MROCE_IF_B=$MROCE_PREFIX-vb
MROCE_IP_A=10.77.0.1; MROCE_IP_B=10.77.0.2
MROCE_IP6_A=fd77::1; MROCE_IP6_B=fd77::2
export MROCE_IP6_A MROCE_IP6_B
MROCE_DEV_A=metaroce0; MROCE_DEV_B=metaroce1
MROCE_RUN_A=/run/metaroce/$MROCE_NS_A; MROCE_RUN_B=/run/metaroce/$MROCE_NS_B
MROCE_SYSFS_A=$MROCE_RUN_A/sysfs; MROCE_SYSFS_B=$MROCE_RUN_B/sysfs
export MROCE_NS_A MROCE_NS_B MROCE_IF_A MROCE_IF_B MROCE_IP_A MROCE_IP_B MROCE_DEV_A MROCE_DEV_B
export MROCE_RUN_A MROCE_RUN_B MROCE_SYSFS_A MROCE_SYSFS_B
MROCE_IO=${MROCE_IO:-auto}
MROCE_NS_M=$MROCE_PREFIX-m; MROCE_RUN_M=/run/metaroce/$MROCE_NS_M
MROCE_HOP_STATS=$MROCE_RUN_M/impair.json
export MROCE_NS_M MROCE_RUN_M MROCE_HOP_STATS
MROCE_RUN_DIR_TEST=${E2E_RUN_DIR:-/run/metaroce-test}

mroce_find_bin() {  # name path-in-tree
  local name=$1 rel=$2 var
  for var in "${TEST_SRCDIR:+$TEST_SRCDIR/metaroce/$rel}" "${RUNFILES_DIR:+$RUNFILES_DIR/metaroce/$rel}" \
             "$(dirname "${BASH_SOURCE[0]}")/../../.bazel/bin/$rel"; do
    [ -n "$var" ] && [ -x "$var" ] && { readlink -f "$var"; return 0; }
  done
  echo "netns.sh: cannot find $name (build it: bazel build //${rel%/*}:${rel##*/})" >&2
  return 1
}

_mroce_start_daemon() {  # ns ifname ibdev rundir
  local ns=$1 ifn=$2 dev=$3 run=$4 pid
  mkdir -p "$run"
  rm -f "$run/$dev.sock"
  ip netns exec "$ns" "$METAROCED" --netdev "$ifn" --ibdev "$dev" --io "$MROCE_IO" \
    --sysfs-root "$run/sysfs" --run-dir "$run" --paths "${MROCE_PATHS:-4}" \
    ${MROCE_DAEMON_ARGS:-} >"$run/daemon.log" 2>&1 &
  pid=$!
  echo "$pid" > "$run/daemon.pid"
  mkdir -p "$MROCE_RUN_DIR_TEST"; echo "$pid" >> "$MROCE_RUN_DIR_TEST/pids"
  # Up (socket and tree published) or dead, within a generous deadline.
  local end=$((SECONDS + 60))
  while [ "$SECONDS" -lt "$end" ]; do
    [ -S "$run/$dev.sock" ] && [ -e "$run/sysfs/class/infiniband/$dev" ] && { echo "$pid"; return 0; }
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.05
  done
  echo "netns.sh: metaroced for $dev did not come up; its log:" >&2
  cat "$run/daemon.log" >&2
  return 1
}

mroce_net_up() {
  local mtu=1500 ipv6=0 ipv6_nd=0
  while [ $# -gt 0 ]; do
    case $1 in
      --ipv6) ipv6=1; shift ;;
      --ipv6-nd) ipv6=1; ipv6_nd=1; shift ;;
      --io) MROCE_IO=$2; shift 2 ;;
      --mtu) mtu=$2; shift 2 ;;
      --paths) MROCE_PATHS=$2; shift 2 ;;
      --hop) MROCE_HOP=1; shift ;;
      *) echo "mroce_net_up: unknown option $1" >&2; return 2 ;;
    esac
  done
  METAROCED=${METAROCED:-$(mroce_find_bin metaroced firmware-model/daemon/metaroced)} || return 1
  export METAROCED
  mroce_net_down >/dev/null 2>&1
  ip netns add "$MROCE_NS_A" && ip netns add "$MROCE_NS_B" || return 1
  if [ "${MROCE_HOP:-0}" = 1 ]; then
    _mroce_hop_links "$mtu" || return 1
  else
    ip link add "$MROCE_IF_A" netns "$MROCE_NS_A" type veth peer name "$MROCE_IF_B" netns "$MROCE_NS_B" || return 1
  fi
  local ns ifn ip
  for ns in a b; do
    if [ $ns = a ]; then ns=$MROCE_NS_A ifn=$MROCE_IF_A ip=$MROCE_IP_A; else ns=$MROCE_NS_B ifn=$MROCE_IF_B ip=$MROCE_IP_B; fi
    ip -n "$ns" link set lo up
    ip -n "$ns" link set "$ifn" mtu "$mtu" up
    ip -n "$ns" addr add "$ip/24" dev "$ifn"
  done
  # Static neighbours: no ARP needed, and the first packet is never lost to it.
  local mac_a mac_b
  mac_a=$(ip -n "$MROCE_NS_A" -br link show "$MROCE_IF_A" | awk '{print $3}')
  mac_b=$(ip -n "$MROCE_NS_B" -br link show "$MROCE_IF_B" | awk '{print $3}')
  ip -n "$MROCE_NS_A" neigh replace "$MROCE_IP_B" lladdr "$mac_b" dev "$MROCE_IF_A" nud permanent
  ip -n "$MROCE_NS_B" neigh replace "$MROCE_IP_A" lladdr "$mac_a" dev "$MROCE_IF_B" nud permanent
  if [ "$ipv6" = 1 ]; then
    ip -n "$MROCE_NS_A" addr add "$MROCE_IP6_A/64" dev "$MROCE_IF_A" || return 1
    ip -n "$MROCE_NS_B" addr add "$MROCE_IP6_B/64" dev "$MROCE_IF_B" || return 1
    if [ "$ipv6_nd" = 0 ]; then
      ip -n "$MROCE_NS_A" neigh replace "$MROCE_IP6_B" lladdr "$mac_b" dev "$MROCE_IF_A" nud permanent
      ip -n "$MROCE_NS_B" neigh replace "$MROCE_IP6_A" lladdr "$mac_a" dev "$MROCE_IF_B" nud permanent
    fi
  fi
  if [ "${MROCE_HOP:-0}" = 1 ]; then
    MROCE_PID_M=$(_mroce_start_hop ${MROCE_IMPAIR_ARGS:-}) || return 1
    export MROCE_PID_M
  fi
  MROCE_PID_A=$(_mroce_start_daemon "$MROCE_NS_A" "$MROCE_IF_A" "$MROCE_DEV_A" "$MROCE_RUN_A") || return 1
  # MROCE_DAEMONS=a: B is a bare host (the conformance suite plays it).
  if [ "${MROCE_DAEMONS:-ab}" != a ]; then
    MROCE_PID_B=$(_mroce_start_daemon "$MROCE_NS_B" "$MROCE_IF_B" "$MROCE_DEV_B" "$MROCE_RUN_B") || return 1
  fi
  export MROCE_PID_A MROCE_PID_B
}

# The middle namespace and its two legs; hosts' interfaces as without the hop.
_mroce_hop_links() {  # mtu
  local leg
  MROCE_IMPAIR=${MROCE_IMPAIR:-$(mroce_find_bin mroce-impair tools/impair/mroce-impair)} || return 1
  export MROCE_IMPAIR
  ip netns add "$MROCE_NS_M" || return 1
  ip link add "$MROCE_IF_A" netns "$MROCE_NS_A" type veth peer name "$MROCE_PREFIX-ma" netns "$MROCE_NS_M" || return 1
  ip link add "$MROCE_IF_B" netns "$MROCE_NS_B" type veth peer name "$MROCE_PREFIX-mb" netns "$MROCE_NS_M" || return 1
  # The middle namespace has no addresses and says nothing itself.
  ip netns exec "$MROCE_NS_M" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1
  for leg in ma mb; do
    ip -n "$MROCE_NS_M" link set "$MROCE_PREFIX-$leg" mtu "$1" up || return 1
  done
}

_mroce_start_hop() {  # mroce-impair arguments
  local pid
  mkdir -p "$MROCE_RUN_M"
  rm -f "$MROCE_RUN_M/ready" "$MROCE_HOP_STATS"
  ip netns exec "$MROCE_NS_M" "$MROCE_IMPAIR" --leg-a "$MROCE_PREFIX-ma" --leg-b "$MROCE_PREFIX-mb" \
    --stats "$MROCE_HOP_STATS" --ready-file "$MROCE_RUN_M/ready" --rt-priority "${MROCE_HOP_RT:-10}" "$@" >>"$MROCE_RUN_M/impair.log" 2>&1 &
  pid=$!
  echo "$pid" > "$MROCE_RUN_M/impair.pid"
  mkdir -p "$MROCE_RUN_DIR_TEST"; echo "$pid" >> "$MROCE_RUN_DIR_TEST/pids"
  for _ in $(seq 1 100); do
    [ -e "$MROCE_RUN_M/ready" ] && { echo "$pid"; return 0; }
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  echo "netns.sh: mroce-impair did not come up; its log:" >&2
  cat "$MROCE_RUN_M/impair.log" >&2
  return 1
}

# The pidfile names the running hop: a restart in a subshell (an e2e case)
# leaves this shell's MROCE_PID_M stale.
_mroce_hop_pid() { cat "$MROCE_RUN_M/impair.pid" 2>/dev/null || echo "${MROCE_PID_M:-}"; }

_mroce_stop_hop() {
  MROCE_PID_M=$(_mroce_hop_pid)
  [ -n "${MROCE_PID_M:-}" ] || return 0
  kill "$MROCE_PID_M" 2>/dev/null || true
  for _ in $(seq 1 50); do kill -0 "$MROCE_PID_M" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$MROCE_PID_M" 2>/dev/null || true
  rm -f "$MROCE_RUN_M/impair.pid"
  MROCE_PID_M=
}

mroce_hop_restart() {  # mroce-impair arguments (replace MROCE_IMPAIR_ARGS)
  _mroce_stop_hop
  MROCE_PID_M=$(_mroce_start_hop "$@") || return 1
  export MROCE_PID_M
}

mroce_hop_stats() {  # the hop's counters now, as JSON
  local seq0 seq
  MROCE_PID_M=$(_mroce_hop_pid)
  seq0=$(sed -n 's/^{"seq": \([0-9]*\).*/\1/p' "$MROCE_HOP_STATS" 2>/dev/null)
  kill -USR1 "$MROCE_PID_M" 2>/dev/null || { echo "netns.sh: mroce-impair is not running" >&2; return 1; }
  for _ in $(seq 1 300); do
    seq=$(sed -n 's/^{"seq": \([0-9]*\).*/\1/p' "$MROCE_HOP_STATS" 2>/dev/null)
    [ -n "$seq" ] && [ "$seq" != "${seq0:-}" ] && { cat "$MROCE_HOP_STATS"; return 0; }
    sleep 0.1
  done
  echo "netns.sh: mroce-impair wrote no counters within 30 s" >&2
  return 1
}

# True once pid has exited (gone, or a zombie: its fds, and with them the
# daemon's per-interface claim, are released). The daemons are not this
# shell's children (started in a command substitution), so `wait` cannot.
_mroce_exited() {
  local st
  st=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) || return 0
  [ -z "$st" ] || [ "$st" = Z ] || [ "$st" = X ]
}

mroce_daemon_restart() {  # a|b
  if [ "$1" = a ]; then
    kill -9 "$MROCE_PID_A" 2>/dev/null
    _mroce_wait_exit "$MROCE_PID_A" || return 1
    MROCE_PID_A=$(_mroce_start_daemon "$MROCE_NS_A" "$MROCE_IF_A" "$MROCE_DEV_A" "$MROCE_RUN_A")
  else
    kill -9 "$MROCE_PID_B" 2>/dev/null
    _mroce_wait_exit "$MROCE_PID_B" || return 1
    MROCE_PID_B=$(_mroce_start_daemon "$MROCE_NS_B" "$MROCE_IF_B" "$MROCE_DEV_B" "$MROCE_RUN_B")
  fi
}

_mroce_wait_exit() {  # pid: up to 30 s
  local end=$((SECONDS + 30))
  until _mroce_exited "$1"; do
    [ "$SECONDS" -lt "$end" ] || { echo "netns.sh: pid $1 still alive 30 s after SIGKILL" >&2; return 1; }
    sleep 0.05
  done
}

mroce_net_down() {
  local pid
  # Daemons started by an earlier shell are found through their pidfiles.
  [ -n "${MROCE_PID_A:-}" ] || MROCE_PID_A=$(cat "$MROCE_RUN_A/daemon.pid" 2>/dev/null)
  [ -n "${MROCE_PID_B:-}" ] || MROCE_PID_B=$(cat "$MROCE_RUN_B/daemon.pid" 2>/dev/null)
  for pid in ${MROCE_PID_A:-} ${MROCE_PID_B:-}; do
    kill "$pid" 2>/dev/null
  done
  for pid in ${MROCE_PID_A:-} ${MROCE_PID_B:-}; do
    # A grace period for a clean exit (not a check): then SIGKILL.
    local end=$((SECONDS + 10))
    while ! _mroce_exited "$pid" && [ "$SECONDS" -lt "$end" ]; do sleep 0.05; done
    _mroce_exited "$pid" || { kill -9 "$pid" 2>/dev/null; _mroce_wait_exit "$pid"; }
  done
  MROCE_PID_A=; MROCE_PID_B=
  _mroce_stop_hop
  ip netns del "$MROCE_NS_A" 2>/dev/null
  ip netns del "$MROCE_NS_B" 2>/dev/null
  ip netns del "$MROCE_NS_M" 2>/dev/null || true  # there only with --hop
  rm -rf "$MROCE_RUN_A" "$MROCE_RUN_B" "$MROCE_RUN_M"
  return 0
}

mroce_in_a() { SYSFS_PATH=$MROCE_SYSFS_A ip netns exec "$MROCE_NS_A" env SYSFS_PATH="$MROCE_SYSFS_A" "$@"; }
mroce_in_b() { SYSFS_PATH=$MROCE_SYSFS_B ip netns exec "$MROCE_NS_B" env SYSFS_PATH="$MROCE_SYSFS_B" "$@"; }
