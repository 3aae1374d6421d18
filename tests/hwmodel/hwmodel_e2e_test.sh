#!/usr/bin/env bash
# End-to-end through the hardware ABI: two namespaces, a metaroced in each
# with `--backend hw --hw-device model` (HwOffloadBackend, the driver, over
# the device model's BAR0: admin queue, doorbells, rings, event queue,
# interrupt; docs/hardware-offload.md §8), over AF_PACKET and over AF_XDP.
# Stock tools across the namespaces: ibv_devices, ibv_rc_pingpong with
# buffer validation (-c), ib_write_bw, ib_read_bw, ib_send_bw. Each case then
# asserts, from the device model's own counters read through admin
# QUERY_COUNTERS (metaroce-ctl stat), that the traffic went through the ABI.
# Honours MROCE_PREFIX and E2E_RUN_DIR (tests/lib/netns.sh). Needs root.
set -u
here=$(cd "$(dirname "$0")" && pwd)
top=${TEST_SRCDIR:+$TEST_SRCDIR/metaroce}
top=${top:-$(cd "$here/../.." && pwd)}
source "$top/tests/lib/e2e.sh"

find_file() {  # rel-path: runfiles first, then the tree's bazel-bin
  local f
  for f in "$top/$1" "$top/.bazel/bin/$1"; do [ -e "$f" ] && { readlink -f "$f"; return 0; }; done
  return 1
}
PROVIDER=$(find_file provider/libmetaroce-rdmav34.so) || { echo "provider .so not built"; exit 1; }

# Stock tools are not sanitizer builds: an ASan provider needs the runtime
# preloaded, and their own leaks are not ours.
TOOL_ENV=(RDMAV_DRIVERS="${PROVIDER%-rdmav34.so}")
asan=$(ldd "$PROVIDER" | awk '/libasan/ {print $3; exit}')
if [ -n "$asan" ]; then
  TOOL_ENV+=(LD_PRELOAD="$asan" ASAN_OPTIONS=detect_leaks=0:abort_on_error=1)
fi
in_a() { mroce_in_a env "${TOOL_ENV[@]}" timeout 120 "$@"; }
in_b() { mroce_in_b env "${TOOL_ENV[@]}" timeout 120 "$@"; }

gid_index() {  # in_a|in_b dev ip: the RoCE v2 IPv4-mapped GID
  "$1" ibv_devinfo -v -d "$2" | awk -v ip="::ffff:$3" '/GID\[/ && index($0, ip) && /RoCE v2/ {
    gsub(/.*GID\[ */, ""); gsub(/\].*/, ""); print; exit }'
}

PORT=18700
tcp_listening() { ip netns exec "$1" ss -ltn 2>/dev/null | grep -q ":$2 "; }
pair() {  # name "server cmd..." "client cmd..." (client gets the server IP last)
  local name=$1 log_s=$E2E_RUN_DIR/hw_$1.server.log log_c=$E2E_RUN_DIR/hw_$1.client.log spid rc
  PORT=$((PORT + 1))
  eval "$2 -p $PORT" >"$log_s" 2>&1 &
  spid=$!; e2e_track_pid "$spid"
  wait_for 60 tcp_listening "$MROCE_NS_A" "$PORT" || e2e_fail "$name: server never listened on $PORT"
  rc=0; eval "$3 -p $PORT $MROCE_IP_A" >"$log_c" 2>&1 || rc=$?
  local src=0; wait "$spid" || src=$?
  echo "== server"; cat "$log_s"; echo "== client"; cat "$log_c"
  [ $rc = 0 ] && [ $src = 0 ] || { model_stats a; model_stats b; e2e_fail "$name: client exit $rc, server exit $src"; }
}

stat_of() {  # a|b: every counter of the device (admin QUERY_COUNTERS to the model)
  if [ "$1" = a ]; then mroce_in_a "$CTL" --sysfs-root "$MROCE_SYSFS_A" stat -a "$MROCE_DEV_A"
  else mroce_in_b "$CTL" --sysfs-root "$MROCE_SYSFS_B" stat -a "$MROCE_DEV_B"; fi
}
model_stats() { echo "== device model $1"; stat_of "$1" 2>&1 | grep -E "model_|io_|dma_faults" || true; }
counter() {  # a|b name: its value
  stat_of "$1" | awk -v n="$2" '$1 == n {print $2; found=1} END {if (!found) print -1}'
}
# Every counter named must have grown on the sides named since `snap`.
SNAP_A=; SNAP_B=
snap() { SNAP_A=$(stat_of a); SNAP_B=$(stat_of b); }
grew() {  # "a b"|a|b name...
  local sides=$1 side name before after; shift
  for side in $sides; do
    for name in "$@"; do
      if [ $side = a ]; then before=$SNAP_A; else before=$SNAP_B; fi
      before=$(echo "$before" | awk -v n="$name" '$1 == n {print $2}')
      after=$(counter $side "$name")
      [ -n "$before" ] && [ "$after" -gt "$before" ] 2>/dev/null ||
        { model_stats $side; e2e_fail "device model $side: $name did not grow ($before -> $after)"; }
      echo "device model $side: $name $before -> $after"
    done
  done
}
# The ABI's traffic: objects through the admin queue on both sides; the
# side that posts work (both for pingpong and send, the client B for a
# one-sided WRITE/READ, whose server A posts nothing) rings doorbells, gets
# CQEs in its CQ rings, completion EQEs and interrupts.
ADMIN="model_admin_commands"
DATA="model_doorbells model_cq_doorbells model_cqes model_eqes model_interrupts"
abi_clean() {
  local side n
  for side in a b; do
    for n in model_dma_unmapped model_admin_bad_mailbox model_doorbell_beyond_depth model_fatal dma_faults; do
      [ "$(counter $side $n)" = 0 ] || { model_stats $side; e2e_fail "device model $side: $n is not 0"; }
    done
  done
}

perf_figure() {  # logfile
  local row
  row=$(awk '/^ *#bytes/ {h=1; next} h && /^ *[0-9]/ {print; exit}' "$1")
  [ -n "$row" ] || e2e_fail "no figure in $1"
  echo "FIGURE ($IO): $row"
}

t_devices() {
  local out; out=$(in_a ibv_devices); echo "$out"  # (tee /dev/stderr would truncate the test log)
  echo "$out" | grep -q "$MROCE_DEV_A"
  in_b ibv_devices | grep -q "$MROCE_DEV_B"
  grep -q "transport: hw backend on the device model" "$MROCE_RUN_A/daemon.log" ||
    e2e_fail "daemon a is not on the device model: $(tail -5 "$MROCE_RUN_A/daemon.log")"
}
t_pingpong() {  # -c: the receiver validates every buffer's contents
  snap
  pair "pingpong_$IO" "in_a ibv_rc_pingpong -d $MROCE_DEV_A -g $GID_A -s 4096 -n 500 -c" \
       "in_b ibv_rc_pingpong -d $MROCE_DEV_B -g $GID_B -s 4096 -n 500 -c"
  grep -E "bytes in" "$E2E_RUN_DIR/hw_pingpong_$IO.client.log"
  grep -q "buffer" "$E2E_RUN_DIR/hw_pingpong_$IO.client.log" &&
    e2e_fail "ibv_rc_pingpong reported a corrupted buffer"
  grew "a b" $ADMIN $DATA model_wqes_sq model_wqes_rq
  abi_clean
}
perf() {  # "sides that post work" tool extra-args
  local posters=$1 tool=$2; shift 2
  snap
  pair "${tool}_$IO" "in_a $tool -d $MROCE_DEV_A -x $GID_A -u 18 $*" "in_b $tool -d $MROCE_DEV_B -x $GID_B -u 18 $*"
  perf_figure "$E2E_RUN_DIR/hw_${tool}_$IO.client.log"
  grew "a b" $ADMIN
  grew "$posters" $DATA
  abi_clean
}
t_write_bw() { perf b ib_write_bw -s 65536 -n 500; grew b model_wqes_sq; }
t_read_bw() { perf b ib_read_bw -s 65536 -n 500; grew b model_wqes_sq; }
t_send_bw() { perf "a b" ib_send_bw -s 65536 -n 500; grew a model_wqes_rq; grew b model_wqes_sq; }

source "$top/tests/lib/netns.sh"
if [ "$(id -u)" != 0 ] || ! command -v ibv_devices >/dev/null || ! command -v ib_write_bw >/dev/null; then
  echo "SKIP: needs root and ibverbs-utils/perftest"; E2E_SKIPPED=1; e2e_finish; exit 0
fi
CTL=$(mroce_find_bin metaroce-ctl tools/metaroce-ctl) || { echo "metaroce-ctl not built"; exit 1; }
trap 'mroce_net_down >/dev/null 2>&1' EXIT
export MROCE_DAEMON_ARGS="--backend hw --hw-device model ${MROCE_DAEMON_ARGS:-}"

run_io() {  # packet|xdp
  IO=$1
  echo "=== --io $IO"
  if ! mroce_net_up --io "$IO"; then
    mroce_net_down >/dev/null 2>&1
    # AF_XDP needs kernel support the host may lack; AF_PACKET must work.
    if [ "$IO" = xdp ]; then
      for c in devices pingpong write_bw read_bw send_bw; do
        echo "--- ${c}_$IO"; echo "SKIP: AF_XDP unavailable (metaroced --io xdp did not start)"
        echo "skip ${c}_$IO"; E2E_SKIPPED=$((E2E_SKIPPED + 1))
      done
      return
    fi
    echo "mroce_net_up --io $IO failed"; E2E_FAILED=$((E2E_FAILED + 1)); return
  fi
  GID_A=$(gid_index in_a "$MROCE_DEV_A" "$MROCE_IP_A")
  GID_B=$(gid_index in_b "$MROCE_DEV_B" "$MROCE_IP_B")
  echo "GID index A=$GID_A B=$GID_B"
  export IO GID_A GID_B
  e2e_case "ibv_devices_$IO" t_devices
  e2e_case "rc_pingpong_validated_$IO" t_pingpong
  e2e_case "ib_write_bw_$IO" t_write_bw
  e2e_case "ib_read_bw_$IO" t_read_bw
  e2e_case "ib_send_bw_$IO" t_send_bw
  mroce_net_down >/dev/null 2>&1
}
run_io packet
run_io xdp
e2e_finish
