#!/usr/bin/env bash
# End-to-end (issue 11): Open MPI 4.1 (Debian's openmpi-bin) with pml ucx
# runs mpi_collectives (MPI_Allreduce and MPI_Alltoall, 8 B to 4 MiB, every
# element checked, nccl-tests algbw/busbw) across two namespaces over
# metaroce: 2 ranks (one per namespace) and 4 ranks (two per namespace).
# tools/benchlib/lib_bench.py runs the large sizes (64 MiB) for figures.
#
# Each namespace is a host of its own name (mpi_job.sh: a UTS namespace per
# side), so Open MPI and UCX see two nodes. mpirun runs in namespace A under
# metaroce-run; it starts orted in B through netns_agent.sh (--mca
# plm_rsh_agent: `ip netns exec B unshare --uts metaroce-run ...`, where ssh
# would be). Each job proves where its payload went:
#   - pml ucx with UCX_TLS=rc_v,sm,self and UCX_NET_DEVICES=metaroce0:1 (no tcp);
#     --mca btl self,vader (no tcp btl); the UCX log lines carry both
#     hostnames; every lane of every endpoint configuration is rc_verbs or
#     ud_verbs on metaroce0:1, or shared memory; with 2 ranks (one per host)
#     no shared memory at all, with 4 every rank has a shared-memory
#     configuration (its node mate) and a network-only one (the other host);
#   - the daemons' tx_bytes grow by at least the bytes the job must have
#     moved between the two hosts (mpi_collectives prints that lower bound);
#   - the kernel's TCP (Tcp OutSegs of both namespaces, times the MTU) sent
#     under a hundredth of it (what remains is mpirun's out-of-band control).
# A rank that exits non-zero fails the job with Open MPI's message naming it;
# a rank that hangs is ended by the wall-clock deadline, which kills mpirun's
# whole process tree (orted and the ranks in B too) by pid.
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
AGENT=$(find_file tests/mpi/netns_agent.sh) || { echo "netns_agent.sh missing"; exit 1; }
PROGRAM=$(find_file tests/mpi/mpi_collectives) || { echo "mpi_collectives not built"; exit 1; }
source "$top/tests/lib/netns.sh"
source "$top/tests/mpi/mpi_job.sh"
# UCX names its devices in the address it sends to peers: both namespaces
# publish the same name (their sysfs trees are separate), as tests/ucx does.
MROCE_DEV_B=$MROCE_DEV_A
if [ "$(id -u)" != 0 ] || ! command -v mpirun >/dev/null; then
  echo "SKIP: needs root and openmpi-bin (tools/setup installs it)"; E2E_SKIPPED=1; e2e_finish; exit 0
fi
trap 'mroce_net_down >/dev/null 2>&1' EXIT
mroce_net_up ${MROCE_E2E_IO:+--io $MROCE_E2E_IO} || { echo "mroce_net_up failed"; E2E_FAILED=1; e2e_finish; exit 1; }
mpi_setup

MAX_BYTES=$((4 << 20))

# Per job: every size of both collectives reported and checked.
require_rows() {  # log
  local op bytes=8
  while :; do
    for op in allreduce alltoall; do
      awk -v op=$op -v b=$bytes '$1 == op && $2 >= b && $2 <= 2 * b && $NF == "ok" {f = 1} END {exit !f}' "$1" ||
        e2e_fail "no checked $op row of about $bytes bytes"
    done
    [ $bytes -ge $MAX_BYTES ] && break
    bytes=$((bytes * 8)); [ $bytes -gt $MAX_BYTES ] && bytes=$MAX_BYTES
  done
}

# "HOST PID LANES" per endpoint configuration UCX reported.
ep_configs() {  # log
  grep -E 'UCX +INFO +ep_cfg\[' "$1" |
    sed -E 's/^\[[^]]*\] +\[([^:]+):([0-9]+) *:[^]]*\].*ep_cfg\[[0-9]+\]: /\1 \2 /'
}

# The ranks ran on two hosts of their own names, and every endpoint
# configuration uses metaroce's verbs transports or shared memory. A rank's
# endpoint to itself names self/memory0; to a rank on its host, shared memory
# (sysv, posix, cma) without self; to the other host, metaroce alone. With
# one rank per host there is no second kind at all; with two per host every
# rank has one; every rank has the third.
require_lanes() {  # log np
  local cfgs bad sm="(posix|sysv|cma|knem|xpmem)/memory" net="(rc|ud)_verbs/$MROCE_DEV_A:1" n
  cfgs=$(ep_configs "$1")
  [ -n "$cfgs" ] || e2e_fail "UCX reported no endpoint configuration"
  ! grep -m1 '^\[' <<<"$cfgs" || e2e_fail "an ep_cfg line in a form this test does not read (above)"
  [ "$(awk '{print $1}' <<<"$cfgs" | sort -u | tr '\n' ' ')" = "$(printf '%s\n' "$MPI_HOST_A" "$MPI_HOST_B" | sort | tr '\n' ' ')" ] ||
    e2e_fail "ranks ran on hosts $(awk '{print $1}' <<<"$cfgs" | sort -u | tr '\n' ' '), not $MPI_HOST_A and $MPI_HOST_B"
  bad=$(cut -d' ' -f3- <<<"$cfgs" | grep -Eo '[a-z_]+/[A-Za-z0-9_.:-]+' | grep -Evx "$net|$sm|self/memory0" || true)
  [ -z "$bad" ] || e2e_fail "UCX chose transports that are neither metaroce's nor shared memory: $(echo $bad)"
  n=$(awk '{print $2}' <<<"$cfgs" | sort -u | wc -l)
  [ "$n" -ge "$2" ] || e2e_fail "only $n of $2 ranks reported their UCX endpoint configuration"
  n=$(grep -E "$net" <<<"$cfgs" | grep -Ev "$sm|self/" | awk '{print $2}' | sort -u | wc -l)
  [ "$n" -ge "$2" ] || e2e_fail "only $n of $2 ranks reached the other host over metaroce alone"
  n=$(grep -E "$sm" <<<"$cfgs" | grep -v "self/" | awk '{print $2}' | sort -u | wc -l)
  if [ "$2" = 2 ]; then
    [ "$n" = 0 ] || e2e_fail "shared memory between ranks on different hosts ($n ranks)"
  else
    [ "$n" -ge "$2" ] || e2e_fail "only $n of $2 ranks reached their node mate through shared memory"
  fi
}

collective_job() {  # name np
  local name=$1 np=$2 log=$E2E_RUN_DIR/$1.log tx0 tx1 tcp0 tcp1 payload rc=0
  tx0=$(mpi_tx_bytes); tcp0=$(mpi_tcp_out_segs)
  mpi_run "$name" 300 "$np" "${MPI_OVER_METAROCE[@]}" -x UCX_LOG_LEVEL=info -- "$PROGRAM" --min-bytes 8 \
    --max-bytes $MAX_BYTES --budget-bytes 8M --max-iters 5 || rc=$?
  tx1=$(mpi_tx_bytes); tcp1=$(mpi_tcp_out_segs)
  grep -Ev 'UCX +INFO +(Version|UCX_\* env)' "$log"
  [ $rc = 0 ] || { daemon_stats; e2e_fail "$name: mpirun exited $rc (log $log)"; }
  require_rows "$log"
  require_lanes "$log" "$np"
  payload=$(awk '/^# cross-host payload/ {print $(NF - 1)}' "$log")
  [ -n "$payload" ] || e2e_fail "$name: no payload line"
  awk '$1 == "allreduce" || $1 == "alltoall" {print "FIGURE: '"$name"' " $0}' "$log"
  echo "daemon tx_bytes grew by $((tx1 - tx0)) for a cross-host payload of at least $payload bytes;" \
    "kernel TCP sent $((tcp1 - tcp0)) segments"
  [ $((tx1 - tx0)) -ge "$payload" ] || e2e_fail "$name: the daemons sent only $((tx1 - tx0)) of $payload bytes"
  [ $(((tcp1 - tcp0) * 1500 * 100)) -lt "$payload" ] ||
    e2e_fail "$name: kernel TCP sent $((tcp1 - tcp0)) segments, a payload's worth: traffic went over TCP"
}
t_2ranks() { collective_job mpi_2ranks 2; }
t_4ranks() { collective_job mpi_4ranks 4; }

# Rank 1 (in B) exits 3 after its first collective: mpirun must fail the job,
# name the process and its exit code, and leave no process behind.
t_rank_failure() {
  local log=$E2E_RUN_DIR/mpi_rank_failure.log rc=0
  mpi_run mpi_rank_failure 300 2 "${MPI_OVER_METAROCE[@]}" -- "$PROGRAM" --max-bytes 1K --fail-rank 1 || rc=$?
  cat "$log"
  [ $rc != 0 ] || e2e_fail "mpirun exited 0 although rank 1 failed"
  [ $rc != 124 ] || e2e_fail "mpirun did not end by itself after rank 1 failed: the deadline killed it"
  grep -q "rank 1: failing on purpose" "$log" || e2e_fail "rank 1 never reached its failure"
  grep -q "exited with non-zero status" "$log" || e2e_fail "mpirun's message names no failed process"
  grep -Eq "Exit code: +3" "$log" || e2e_fail "mpirun does not report rank 1's exit code 3"
  mpi_require_tree_gone
}

# Rank 1 hangs after its first collective: once it has, the job must still
# be running 10 s later (rank 0 waits in the next collective), and the
# deadline then ends it and kills mpirun's tree, in both namespaces, by pid.
# The 120 s bound is for reaching the stall (MPI start-up, under ASan too).
t_rank_stall() {
  local log=$E2E_RUN_DIR/mpi_rank_stall.log rc=0
  MPI_END_AFTER="rank 1: stalling on purpose" MPI_END_GRACE=10 \
    mpi_run mpi_rank_stall 120 2 "${MPI_OVER_METAROCE[@]}" -- "$PROGRAM" --max-bytes 1K --stall-rank 1 || rc=$?
  cat "$log"
  [ $rc = 124 ] || e2e_fail "expected the deadline to end the stalled job (exit 124), got $rc"
  grep -q "rank 1: stalling on purpose" "$log" || e2e_fail "rank 1 never reached its stall"
  grep -q "log matched 'rank 1: stalling on purpose'; ending it in 10 s" "$log" ||
    e2e_fail "the job was not running when rank 1 stalled"
  mpi_require_tree_gone
}

e2e_case mpi_2ranks_allreduce_alltoall t_2ranks
e2e_case mpi_4ranks_allreduce_alltoall t_4ranks
e2e_case mpi_rank_failure_fails_job t_rank_failure
e2e_case mpi_rank_stall_hits_deadline t_rank_stall
e2e_finish
