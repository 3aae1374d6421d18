#!/usr/bin/env bash
# End-to-end: capture real conversations of two metaroced daemons in two
# namespaces (tests/lib/netns.sh, --io packet so that an AF_PACKET capture
# sees both directions) and compare them with tools/pcap-compare, daemon A
# as the device under test:
#   - ibv_rc_pingpong (dumpcap -P: pcap), ib_write_bw and ib_read_bw (dumpcap,
#     pcapng), each with a 64 MiB capture buffer: no divergence;
#   - metaroce-ctl capture (our own AF_PACKET capture, no buffer option) of a
#     short pingpong: compared clean, or refused as incomplete when its
#     socket buffer overflowed, never a false divergence;
#   - a divergence planted in one of A's responses (an ACK's cum_psn, a
#     READ_RESP's MSN; frame rebuilt by the codec): named with its field,
#     its frame number and its section;
#   - hostile files (cut, another link type, garbage): exit 2 with a reason,
#     no crash;
#   - then with daemon A on the device model behind the hardware ABI
#     (--backend hw --hw-device model): pingpong, ib_write_bw and ib_read_bw
#     compare clean against the reference.
# Needs root; skips with a reason otherwise.
set -u
here=$(cd "$(dirname "$0")" && pwd)
top=${TEST_SRCDIR:+$TEST_SRCDIR/metaroce}
top=${top:-$(cd "$here/../.." && pwd)}
source "$top/tests/lib/e2e.sh"
source "$top/tests/lib/netns.sh"

if [ "$(id -u)" != 0 ] || ! command -v ibv_rc_pingpong >/dev/null || ! command -v dumpcap >/dev/null; then
  echo "SKIP: needs root, ibverbs-utils, perftest and dumpcap (tools/setup)"; E2E_SKIPPED=1; e2e_finish; exit 0
fi
COMPARE=$(mroce_find_bin pcap-compare tools/pcap-compare/pcap-compare) || exit 1
PLANT=$(mroce_find_bin pcap-plant tests/pcap/pcap-plant) || exit 1
CTL=$(mroce_find_bin metaroce-ctl tools/metaroce-ctl) || exit 1
find_file() {  # rel-path: runfiles first, then the tree's bazel-bin
  local f
  for f in "$top/$1" "$top/.bazel/bin/$1"; do [ -e "$f" ] && { readlink -f "$f"; return 0; }; done
  return 1
}
PROVIDER=$(find_file provider/libmetaroce-rdmav34.so) || { echo "provider .so not built"; exit 1; }
TOOL_ENV=(RDMAV_DRIVERS="${PROVIDER%-rdmav34.so}")
asan=$(ldd "$PROVIDER" | awk '/libasan/ {print $3; exit}')
[ -n "$asan" ] && TOOL_ENV+=(LD_PRELOAD="$asan" ASAN_OPTIONS=detect_leaks=0:abort_on_error=1)
in_a() { mroce_in_a env "${TOOL_ENV[@]}" timeout 90 "$@"; }
in_b() { mroce_in_b env "${TOOL_ENV[@]}" timeout 90 "$@"; }

WORK=$E2E_RUN_DIR/pcap
mkdir -p "$WORK"
trap 'mroce_net_down >/dev/null 2>&1' EXIT
mroce_net_up --io packet || { echo "mroce_net_up failed"; E2E_FAILED=1; e2e_finish; exit 1; }

gid_index() {  # in_a|in_b dev ip: the RoCE v2 IPv4-mapped GID
  "$1" ibv_devinfo -v -d "$2" | awk -v ip="::ffff:$3" '/GID\[/ && index($0, ip) && /RoCE v2/ {
    gsub(/.*GID\[ */, ""); gsub(/\].*/, ""); print; exit }'
}
GID_A=$(gid_index in_a "$MROCE_DEV_A" "$MROCE_IP_A")
GID_B=$(gid_index in_b "$MROCE_DEV_B" "$MROCE_IP_B")

# ---- capture: start in A, run, stop with SIGINT ----
CAP_PID=
capture_start() {  # ctl|dumpcap|dumpcap-pcap file
  local log=$2.log
  if [ "$1" = dumpcap-pcap ]; then
    ip netns exec "$MROCE_NS_A" dumpcap -B 64 -P -i "$MROCE_IF_A" -f "udp port 4796" -w "$2" >"$log" 2>&1 &
    CAP_PID=$!; e2e_track_pid "$CAP_PID"
    wait_for 30 grep -q "^File: " "$log" || { cat "$log"; e2e_fail "dumpcap did not start"; }
  elif [ "$1" = ctl ]; then
    # ip netns exec and env exec: $! is the capture itself, which SIGINT stops.
    ip netns exec "$MROCE_NS_A" env SYSFS_PATH="$MROCE_SYSFS_A" "$CTL" --run-dir "$MROCE_RUN_A" \
      --sysfs-root "$MROCE_SYSFS_A" capture "$MROCE_DEV_A" -w "$2" >"$log" 2>&1 &
    CAP_PID=$!; e2e_track_pid "$CAP_PID"
    wait_for 30 grep -q "^capturing $MROCE_DEV_A" "$log" || { cat "$log"; e2e_fail "capture did not start"; }
  else
    # -B 64: a 64 MiB kernel buffer, so perftest's bursts are not lost by the
    # capture (pcap-compare refuses a capture that lost acknowledged frames).
    # "File:" is printed once the capture socket is open: frames after it are seen.
    ip netns exec "$MROCE_NS_A" dumpcap -B 64 -i "$MROCE_IF_A" -f "udp port 4796" -w "$2" >"$log" 2>&1 &
    CAP_PID=$!; e2e_track_pid "$CAP_PID"
    wait_for 30 grep -q "^File: " "$log" || { cat "$log"; e2e_fail "dumpcap did not start"; }
  fi
}
capture_stop() {
  kill -INT "$CAP_PID" 2>/dev/null
  wait_for 30 _exited "$CAP_PID" || { kill -9 "$CAP_PID"; e2e_fail "the capture did not stop on SIGINT"; }
  wait "$CAP_PID" || true
}
_exited() { ! kill -0 "$1" 2>/dev/null; }

PORT=18800
tcp_listening() { ip netns exec "$1" ss -ltn 2>/dev/null | grep -q ":$2 "; }
pair() {  # name "server cmd" "client cmd": A serves, B connects
  local name=$1 spid rc=0 src=0
  PORT=$((PORT + 1))
  eval "$2 -p $PORT" >"$WORK/$name.server.log" 2>&1 &
  spid=$!; e2e_track_pid "$spid"
  wait_for 60 tcp_listening "$MROCE_NS_A" "$PORT" || e2e_fail "$name: server never listened"
  eval "$3 -p $PORT $MROCE_IP_A" >"$WORK/$name.client.log" 2>&1 || rc=$?
  wait "$spid" || src=$?
  [ $rc = 0 ] && [ $src = 0 ] || { cat "$WORK/$name".*.log; e2e_fail "$name: client $rc server $src"; }
}

# pcap-compare must exit `want` and its report must hold each pattern.
compare_expect() {  # file want pattern...
  local file=$1 want=$2 rc=0; shift 2
  "$COMPARE" --dut-ip "$MROCE_IP_A" "$file" >"$file.report" 2>&1 || rc=$?
  cat "$file.report"
  [ "$rc" = "$want" ] || e2e_fail "pcap-compare exit $rc, want $want"
  local p
  for p in "$@"; do grep -qE "$p" "$file.report" || e2e_fail "report lacks /$p/"; done
}
# A real conversation compares clean, and some of A's responses were compared.
compare_clean() {
  compare_expect "$1" 0 "^result: no divergence$"
  local n
  n=$(awk '/^DUT responses compared:/ {gsub(",", "", $4); print $4}' "$1.report")
  [ "${n:-0}" -gt 10 ] || e2e_fail "only ${n:-0} DUT responses compared"
}

# Captures one pair's conversation in A and compares it: no divergence.
captured() {  # name ctl|dumpcap "server cmd" "client cmd"
  local file=$WORK/$1.pcap
  [ "$2" = dumpcap ] && file=$WORK/$1.pcapng
  capture_start "$2" "$file"
  pair "$1" "$3" "$4"
  capture_stop
  compare_clean "$file"
}
pingpong() { echo "in_$1 ibv_rc_pingpong -d $2 -g $3 -s 4096 -n 200"; }
perf() { echo "in_$1 $4 -d $2 -x $3 -u 18 -s 65536 -n 100"; }
# metaroce-ctl's socket buffer is the kernel default: under load it can
# lose frames. Then pcap-compare must refuse the capture (exit 2, "the
# capture is incomplete"), not report divergences that are the capture's.
t_ctl_capture() {
  local file=$WORK/ctl_pingpong.pcap rc=0
  capture_start ctl "$file"
  pair ctl_pingpong "$(pingpong a "$MROCE_DEV_A" "$GID_A")" "$(pingpong b "$MROCE_DEV_B" "$GID_B")"
  capture_stop
  "$COMPARE" --dut-ip "$MROCE_IP_A" "$file" >"$file.report" 2>&1 || rc=$?
  cat "$file.report"
  case $rc in
    0) grep -q "^result: no divergence$" "$file.report" || e2e_fail "exit 0 without the clean result" ;;
    2) grep -q "the capture is incomplete" "$file.report" || e2e_fail "exit 2 for another reason" ;;
    *) e2e_fail "pcap-compare exit $rc on a capture of two conformant daemons" ;;
  esac
}
t_pingpong() {
  captured pingpong dumpcap-pcap "$(pingpong a "$MROCE_DEV_A" "$GID_A")" "$(pingpong b "$MROCE_DEV_B" "$GID_B")"
}
t_write_bw() {
  captured write_bw dumpcap "$(perf a "$MROCE_DEV_A" "$GID_A" ib_write_bw)" "$(perf b "$MROCE_DEV_B" "$GID_B" ib_write_bw)"
}
t_read_bw() {
  captured read_bw dumpcap "$(perf a "$MROCE_DEV_A" "$GID_A" ib_read_bw)" "$(perf b "$MROCE_DEV_B" "$GID_B" ib_read_bw)"
}
# The DUT is the device model behind the hardware ABI (metaroced --backend
# hw --hw-device model, docs/hardware-offload.md §8), the peer a soft NIC.
stat_a() { mroce_in_a "$CTL" --run-dir "$MROCE_RUN_A" --sysfs-root "$MROCE_SYSFS_A" stat -a "$MROCE_DEV_A"; }
t_model_is_the_dut() {
  stat_a | grep -qE '^ *model_' || e2e_fail "daemon A does not report the device model's counters"
}
# The restarted daemon's device, as libibverbs and metaroce-ctl see it.
model_ready() {
  in_a ibv_devinfo -d "$MROCE_DEV_A" 2>/dev/null | grep -q PORT_ACTIVE && stat_a >/dev/null 2>&1
}
t_model_pingpong() {
  captured model_pingpong dumpcap-pcap "$(pingpong a "$MROCE_DEV_A" "$GID_A")" "$(pingpong b "$MROCE_DEV_B" "$GID_B")"
}
t_model_write_bw() {
  captured model_write_bw dumpcap "$(perf a "$MROCE_DEV_A" "$GID_A" ib_write_bw)" "$(perf b "$MROCE_DEV_B" "$GID_B" ib_write_bw)"
}
t_model_read_bw() {
  captured model_read_bw dumpcap "$(perf a "$MROCE_DEV_A" "$GID_A" ib_read_bw)" "$(perf b "$MROCE_DEV_B" "$GID_B" ib_read_bw)"
}

# pcap-plant prints the frame it changed; the report must name it.
plant_expect() {  # source opcode nth plant-field delta reported-field section
  local out=$WORK/planted.$2.pcap at
  [ -s "$1" ] || e2e_skip "no capture $1 (its case failed)"
  at=$("$PLANT" "$1" "$out" "$MROCE_IP_A" "$2" "$3" "$4" "$5") || e2e_fail "pcap-plant failed"
  echo "planted $4 += $5 in frame $at"
  compare_expect "$out" 1 "^result: DIVERGENCE$" "^first divergence: DUT packet $at " \
    "^  field: +$6\$" "docs/protocol.md $7"
}
t_planted_ack_cum_psn() { plant_expect "$WORK/write_bw.pcapng" ACK 20 ack.cum_psn 1 ack.cum_psn "§3.7, §6.4"; }
t_planted_read_resp_msn() {
  plant_expect "$WORK/read_bw.pcapng" RDMA_READ_RESP 30 mbth.msn 1 read_resp.mbth.msn "§6.2, §6.5"
}

t_hostile_files() {
  local src=$WORK/pingpong.pcap rc
  [ -s "$src" ] || e2e_skip "no capture $src (its case failed)"
  head -c 100 "$src" > "$WORK/cut.pcap"
  { head -c 20 "$src"; printf '\161\000\000\000'; tail -c +25 "$src"; } > "$WORK/cooked.pcap"  # link type 113
  head -c 4096 /dev/urandom > "$WORK/garbage.pcap"
  for f in cut cooked garbage; do
    rc=0; "$COMPARE" --dut-ip "$MROCE_IP_A" "$WORK/$f.pcap" >"$WORK/$f.out" 2>&1 || rc=$?
    cat "$WORK/$f.out"
    [ "$rc" = 2 ] || e2e_fail "$f: exit $rc, want 2"
  done
  grep -q "truncated" "$WORK/cut.out" || e2e_fail "cut: no reason"
  grep -q "link type 113 (Linux cooked" "$WORK/cooked.out" || e2e_fail "cooked: no reason"
  grep -q "not a pcap or pcapng file" "$WORK/garbage.out" || e2e_fail "garbage: no reason"
}

e2e_case pingpong_capture_has_no_divergence t_pingpong
e2e_case metaroce_ctl_capture_is_clean_or_refused_as_incomplete t_ctl_capture
e2e_case write_bw_pcapng_capture_has_no_divergence t_write_bw
e2e_case read_bw_capture_has_no_divergence t_read_bw
e2e_case planted_ack_cum_psn_is_named t_planted_ack_cum_psn
e2e_case planted_read_resp_msn_is_named t_planted_read_resp_msn
e2e_case hostile_files_exit_2_with_a_reason t_hostile_files

# Daemon A again, now with the device model as its transport.
if MROCE_DAEMON_ARGS="--backend hw --hw-device model" mroce_daemon_restart a &&
   wait_for 30 model_ready; then
  GID_A=$(gid_index in_a "$MROCE_DEV_A" "$MROCE_IP_A")
  echo "daemon A on the device model; GID index $GID_A"
  e2e_case device_model_is_the_dut t_model_is_the_dut
  e2e_case model_pingpong_capture_has_no_divergence t_model_pingpong
  e2e_case model_write_bw_capture_has_no_divergence t_model_write_bw
  e2e_case model_read_bw_capture_has_no_divergence t_model_read_bw
else
  echo "FAIL: daemon A did not come up on the device model"; E2E_FAILED=$((E2E_FAILED + 1))
fi
e2e_finish
