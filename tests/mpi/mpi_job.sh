# Open MPI jobs across the two namespaces of tests/lib/netns.sh (sourced
# after it, with LAUNCHER = metaroce-run and AGENT = netns_agent.sh). Used by
# tests/mpi/mpi_e2e_test.sh and tools/benchlib/lib_bench.py.
#
#   mpi_setup                 hostfile (A, B: 2 slots each) and the agent's host table
#   mpi_in_host NS HOST CMD...  CMD in network namespace NS, in a UTS namespace named HOST
#   mpi_run NAME DEADLINE NP [MPIRUN-ARGS...] -- PROGRAM [ARGS...]
#       mpirun in A under metaroce-run, ranks mapped by node (rank 0 in A,
#       1 in B, ...); output in $E2E_RUN_DIR/NAME.log. Returns mpirun's
#       status, or 124 when DEADLINE seconds passed: then mpirun's whole
#       process tree (orted and ranks in B as well) has been killed by pid.
#       With MPI_END_AFTER=REGEX MPI_END_GRACE=S set for the call, the job is
#       also ended S seconds after its log first matches REGEX (a stall the
#       test waits for: the job must still be running then).
#   MPI_OVER_METAROCE         mpirun arguments: pml ucx, metaroce's verbs between hosts, shared memory within
#   MPI_OVER_TCP              mpirun arguments: pml ob1 over the kernel's TCP (btl tcp), the reference
#   mpi_require_tree_gone     fails (e2e_fail) if a process of the last job is still alive
#   mpi_tx_bytes / mpi_tcp_out_segs   both daemons' tx_bytes / both namespaces' TCP OutSegs
#
# Each namespace is its own host: mpirun and each orted run in a UTS
# namespace named after the network namespace (MPI_HOST_A/B, set by
# mpi_setup), so Open MPI and UCX see two nodes. Ranks on one host talk
# through shared memory (UCX sysv, posix, cma), ranks on different hosts
# through metaroce's verbs transports; no tcp btl (btl self,vader beside pml
# ucx), so TCP carries only mpirun's out-of-band control.
MPI_OVER_METAROCE=(--mca pml ucx --mca btl self,vader
  -x UCX_TLS=rc_v,sm,self -x UCX_NET_DEVICES="$MROCE_DEV_A:1")
MPI_OVER_TCP=(--mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include 10.77.0.0/24)

mpi_setup() {
  MPI_HOST_A=$MROCE_NS_A; MPI_HOST_B=$MROCE_NS_B
  MPI_HOSTFILE=$E2E_RUN_DIR/mpi.hosts
  mkdir -p "$E2E_RUN_DIR"
  printf '%s slots=2\n%s slots=2\n' "$MROCE_IP_A" "$MROCE_IP_B" >"$MPI_HOSTFILE"
  export MROCE_MPI_HOSTS="$MROCE_IP_A=$MROCE_NS_A=$MROCE_SYSFS_A=$MPI_HOST_A $MROCE_IP_B=$MROCE_NS_B=$MROCE_SYSFS_B=$MPI_HOST_B"
  export MROCE_MPI_LAUNCHER=$LAUNCHER
}

mpi_in_host() {  # NS HOST CMD...
  local ns=$1 host=$2; shift 2
  ip netns exec "$ns" unshare --uts /bin/sh -c 'hostname "$0" && exec "$@"' "$host" "$@"
}

# Every process of a job carries MROCE_MPI_JOB=<tag> in its environment
# (mpirun, the agent and orted pass theirs on), which finds the ones that
# left the tree.
_mpi_job_pids() {  # tag
  local f pid
  for f in /proc/[0-9]*/environ; do
    pid=${f#/proc/}; pid=${pid%/environ}
    [ "$pid" = "$$" ] || [ "$pid" = "$BASHPID" ] && continue
    grep -qzx "MROCE_MPI_JOB=$1" "$f" 2>/dev/null && echo "$pid"
  done
  return 0
}

_mpi_descendants() {  # pid: it and all its descendants
  ps -e -o pid=,ppid= | awk -v root="$1" '
    { kids[$2] = kids[$2] " " $1 }
    END { todo = root; while (todo != "") { split(todo, a, " "); todo = "";
          for (i in a) { print a[i]; if (a[i] in kids) todo = todo kids[a[i]] } } }'
}

# Stops the tree (and the job's strays) until no new process appears, then
# kills them all: nothing forks or is re-parented between the list and the kill.
_mpi_kill_tree() {  # pid tag
  local pids=() prev=-1
  while [ ${#pids[@]} != "$prev" ]; do
    prev=${#pids[@]}
    mapfile -t pids < <({ _mpi_descendants "$1"; _mpi_job_pids "$2"; } | sort -un)
    [ ${#pids[@]} = 0 ] || kill -STOP "${pids[@]}" 2>/dev/null
  done
  [ ${#pids[@]} = 0 ] || kill -KILL "${pids[@]}" 2>/dev/null
  echo "killed mpirun's tree: ${pids[*]}"
}

# True once, when the log first matches MPI_END_AFTER (if set).
_mpi_grace_started() {  # log
  [ -n "${MPI_END_AFTER:-}" ] && [ -z "${_mpi_grace_on:-}" ] && grep -Eq "$MPI_END_AFTER" "$1" || return 1
  _mpi_grace_on=1
}

mpi_run() {  # NAME DEADLINE NP [MPIRUN-ARGS...] -- PROGRAM [ARGS...]
  local name=$1 deadline=$2 np=$3 log=$E2E_RUN_DIR/$1.log pid end mpiargs=() _mpi_grace_on=
  shift 3
  while [ $# -gt 0 ] && [ "$1" != -- ]; do mpiargs+=("$1"); shift; done
  shift
  MPI_JOB_TAG=$name.$$.$RANDOM
  mpi_in_host "$MROCE_NS_A" "$MPI_HOST_A" env MROCE_MPI_JOB="$MPI_JOB_TAG" \
    "$LAUNCHER" --sysfs-root "$MROCE_SYSFS_A" --sysfs-view on \
    mpirun --allow-run-as-root --hostfile "$MPI_HOSTFILE" -np "$np" --map-by node \
      --mca plm_rsh_agent "$AGENT" --mca oob_tcp_if_include 10.77.0.0/24 \
      -x MROCE_MPI_JOB "${mpiargs[@]}" "$@" >"$log" 2>&1 &
  pid=$!; e2e_track_pid "$pid"
  end=$((SECONDS + deadline))
  until _mroce_exited "$pid"; do
    _mpi_grace_started "$log" && end=$((SECONDS + MPI_END_GRACE)) &&
      echo "mpi_run: $name: log matched '$MPI_END_AFTER'; ending it in $MPI_END_GRACE s" >>"$log"
    if [ "$SECONDS" -ge "$end" ]; then
      echo "mpi_run: $name passed its deadline; $(_mpi_kill_tree "$pid" "$MPI_JOB_TAG")" | tee -a "$log" >&2
      wait "$pid" 2>/dev/null
      return 124
    fi
    sleep 0.2
  done
  wait "$pid"
}

mpi_require_tree_gone() {
  local left end=$((SECONDS + 30))
  # Processes that are exiting (a killed orted's ranks) get a moment.
  while left=$(_mpi_job_pids "$MPI_JOB_TAG"); [ -n "$left" ]; do
    [ "$SECONDS" -lt "$end" ] || e2e_fail "processes of job $MPI_JOB_TAG still alive: $(echo $left)"
    sleep 0.2
  done
}

mpi_tx_bytes() {
  local ctl a b
  ctl=$(mroce_find_bin metaroce-ctl tools/metaroce-ctl) || return 1
  a=$(mroce_in_a "$ctl" --sysfs-root "$MROCE_SYSFS_A" stat -a "$MROCE_DEV_A" | awk '$1 == "tx_bytes" {print $2; exit}')
  b=$(mroce_in_b "$ctl" --sysfs-root "$MROCE_SYSFS_B" stat -a "$MROCE_DEV_B" | awk '$1 == "tx_bytes" {print $2; exit}')
  echo $((a + b))
}

mpi_tcp_out_segs() {
  local ns n=0 s
  for ns in "$MROCE_NS_A" "$MROCE_NS_B"; do
    s=$(ip netns exec "$ns" awk '$1 == "Tcp:" && $11 ~ /^[0-9]+$/ {print $11}' /proc/net/snmp)
    n=$((n + s))
  done
  echo $n
}
