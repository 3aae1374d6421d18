#!/usr/bin/env bash
# mroce-impair end to end, in a three-namespace network (tests/lib/netns.sh
# --hop: host A - $MROCE_PREFIX-m - host B):
#   (a) the impairer itself, measured by our own probe (impair_probe: numbered,
#       timestamped MetaRoCE frames; the receiver reports losses, loss runs,
#       duplicates, corrupt frames, reordering, CE marks and delays): each
#       impairment is observed at the receiver within statistical bounds and
#       agrees with the hop's own counters; other traffic (ICMP, kernel UDP,
#       ARP/ND) passes untouched even at 100 % loss;
#   (b) MetaRoCE through it, over AF_XDP and AF_PACKET: perftest WRITE and
#       READ under 1 % loss + 1 ms delay, and verified traffic (mroce_traffic,
#       content checked) under 1 % loss,
#       asserting both that the transfer completed and that the impairment
#       happened (hop counters, daemons' retransmissions); and a 200 Mbit/s
#       bottleneck whose queue marks CE, seen by the daemons.
# Needs root; skips with a reason otherwise. Honours MROCE_PREFIX/E2E_RUN_DIR.
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
PROBE=$(find_file tests/impair/impair_probe) || exit 1
PINGPONG=$(find_file tests/io/io_pingpong) || exit 1
TRAFFIC=$(find_file tests/daemon/mroce_traffic) || exit 1
PROVIDER=$(find_file provider/libmetaroce-rdmav34.so) || exit 1
CTL=$(find_file tools/metaroce-ctl) || exit 1
MROCE_IMPAIR=$(find_file tools/impair/mroce-impair) || exit 1
export MROCE_IMPAIR
TOOL_ENV=(RDMAV_DRIVERS="${PROVIDER%-rdmav34.so}")
asan=$(ldd "$PROVIDER" | awk '/libasan/ {print $3; exit}')
if [ -n "$asan" ]; then
  TOOL_ENV+=(LD_PRELOAD="$asan" ASAN_OPTIONS=detect_leaks=0:abort_on_error=1)
  export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1
fi
WORK=$(mktemp -d /tmp/mroce-impair-e2e.XXXXXX)

source "$top/tests/lib/netns.sh"
if [ "$(id -u)" != 0 ] || ! ip netns list >/dev/null 2>&1; then
  echo "SKIP: needs root and network namespaces"; E2E_SKIPPED=1; e2e_finish; exit 0
fi
cleanup() { mroce_net_down >/dev/null 2>&1; rm -rf "$WORK"; }
trap cleanup EXIT

# ---- helpers ----

jnum() {  # json key: the first number after "key":
  grep -o "\"$2\": [0-9.]*" <<<"$1" | head -1 | awk '{print $2}'
}
hop() {  # dir(a_to_b|b_to_a) counter, from the last hop_snapshot
  jnum "$(grep -o "\"$1\": {[^}]*}" <<<"$HOP_JSON")" "$2"
}
hop_snapshot() { HOP_JSON=$(mroce_hop_stats) || e2e_fail "no counters from mroce-impair"; }
hop_with() {  # mroce-impair args: restart the hop with these impairments
  mroce_hop_restart "$@" || e2e_fail "mroce-impair $* did not start: $(tail -3 "$MROCE_RUN_M/impair.log")"
}
expect() {  # description condition...
  local what=$1; shift
  "$@" || e2e_fail "$what"
  echo "  ok: $what"
}
within() {  # x n p: x within 5 standard deviations of binomial(n, p)
  awk -v x="$1" -v n="$2" -v p="$3" 'BEGIN {sd = sqrt(n * p * (1 - p)); d = x - n * p; exit !(d <= 5 * sd && -d <= 5 * sd)}'
}
ge() { awk -v a="$1" -v b="$2" 'BEGIN {exit !(a >= b)}'; }
eq() { [ "$1" = "$2" ]; }

# Every frame the hop received ended one way: passed, dropped by a reason,
# or forwarded (a duplicate is one more forwarded frame). Nothing is held
# when the probe has finished (delays are ms, the snapshot comes later).
balance() {  # dir
  local d=$1 in out
  in=$(( $(hop "$d" passed) + $(hop "$d" matched) ))
  out=$(( $(hop "$d" forwarded) - $(hop "$d" duplicated) + $(hop "$d" dropped_loss) + $(hop "$d" dropped_burst) \
        + $(hop "$d" dropped_queue_full) + $(hop "$d" dropped_hold_limit) + $(hop "$d" dropped_tx_error) \
        + $(hop "$d" dropped_tx_busy) ))
  expect "$d: rx_frames $(hop "$d" rx_frames) = passed + matched = forwarded - duplicated + drops ($in, $out)" \
    eq "$(hop "$d" rx_frames)" "$in"
  eq "$in" "$out" || e2e_fail "$d: counters do not balance: $HOP_JSON"
}

MAC_B=
probe() {  # count pace-us size [send args...]: A sends, B receives; sets RX (JSON)
  local count=$1 pace=$2 size=$3 rpid ready=$WORK/probe.ready; shift 3
  rm -f "$ready"
  ip netns exec "$MROCE_NS_B" "$PROBE" recv --if "$MROCE_IF_B" --count "$count" --idle 2 --timeout 60 \
    --ready-file "$ready" >"$WORK/probe.recv" 2>&1 &
  rpid=$!; e2e_track_pid "$rpid"
  for _ in $(seq 1 300); do [ -e "$ready" ] && break; sleep 0.1; done
  [ -e "$ready" ] || e2e_fail "probe receiver did not start: $(cat "$WORK/probe.recv")"
  ip netns exec "$MROCE_NS_A" "$PROBE" send --if "$MROCE_IF_A" --src-ip "$MROCE_IP_A" --dst-ip "$MROCE_IP_B" \
    --dst-mac "$MAC_B" --count "$count" --pace-us "$pace" --size "$size" "$@" >"$WORK/probe.send" 2>&1 ||
    e2e_fail "probe sender failed: $(cat "$WORK/probe.send")"
  wait "$rpid" || e2e_fail "probe receiver failed: $(cat "$WORK/probe.recv")"
  RX=$(grep '^{' "$WORK/probe.recv")
  [ -n "$RX" ] || e2e_fail "probe receiver printed no result: $(cat "$WORK/probe.recv")"
  hop_snapshot
  echo "  receiver: $RX"
  echo "  hop a_to_b: $(grep -o '"a_to_b": {[^}]*}' <<<"$HOP_JSON" | sed 's/"[a-z_]*": 0, //g; s/, "[a-z_]*": 0}/}/')"
}
rx() { jnum "$RX" "$1"; }
# Frames the receiver missed besides the hop's decisions: its own socket
# overflowing on a busy machine, or the hop's receive socket.
lost_elsewhere() { echo $(( $(rx kernel_drops) + $(hop a_to_b dropped_rx_kernel) )); }

# ---- (a) the impairer, measured ----

N=20000
case_passthrough() {
  hop_with --loss 100%
  ip netns exec "$MROCE_NS_B" "$PINGPONG" --role=icmp-ping --dst-ip="$MROCE_IP_A" ||
    e2e_fail "ICMP does not pass the hop at --loss 100% (only UDP 4796 is impaired)"
  ip netns exec "$MROCE_NS_A" "$PINGPONG" --role=udp-server --port=5599 --timeout=20 >"$WORK/udp.log" 2>&1 &
  local spid=$!; e2e_track_pid "$spid"
  sleep 0.5
  ip netns exec "$MROCE_NS_B" "$PINGPONG" --role=udp-client --dst-ip="$MROCE_IP_A" --port=5599 ||
    e2e_fail "kernel UDP to another port does not pass the hop"
  kill "$spid" 2>/dev/null; wait "$spid" 2>/dev/null || true
  probe 200 50 256
  expect "all 200 MetaRoCE frames dropped" eq "$(rx unique)" 0
  expect "hop counted 200 loss drops" eq "$(hop a_to_b dropped_loss)" 200
  expect "other traffic passed (passed > 0 both ways)" ge "$(( $(hop a_to_b passed) > 0 && $(hop b_to_a passed) > 0 ))" 1
  balance a_to_b; balance b_to_a
}

case_loss() {
  hop_with --loss 5% --seed 3
  probe $N 20 512
  expect "dropped_loss $(hop a_to_b dropped_loss) within 5 sd of $N x 5%" within "$(hop a_to_b dropped_loss)" $N 0.05
  expect "receiver lost $(rx lost) = hop drops + drops elsewhere ($(lost_elsewhere))" \
    eq "$(rx lost)" $(( $(hop a_to_b dropped_loss) + $(lost_elsewhere) ))
  expect "nothing damaged or duplicated" eq "$(rx corrupt)$(rx duplicates)" 00
  balance a_to_b
}

case_burst() {
  hop_with --burst 1%:5 --seed 4
  probe $N 20 512
  local runs; runs=$(rx loss_runs)
  expect "bursts happened ($(hop a_to_b dropped_burst) frames)" ge "$(hop a_to_b dropped_burst)" 100
  expect "receiver lost $(rx lost) = burst drops + elsewhere" \
    eq "$(rx lost)" $(( $(hop a_to_b dropped_burst) + $(lost_elsewhere) ))
  expect "losses come in runs: mean $(awk -v l="$(rx lost)" -v r="$runs" 'BEGIN {printf "%.1f", l / r}') frames (configured 5)" \
    ge "$(awk -v l="$(rx lost)" -v r="$runs" 'BEGIN {print l / r}')" 3
  balance a_to_b
}

case_delay() {
  hop_with --delay 2ms --jitter 500us --seed 5
  probe 2000 50 512
  expect "every frame held ($(hop a_to_b delayed))" eq "$(hop a_to_b delayed)" 2000
  expect "minimum one-way delay $(rx delay_min_us) us >= 1500 us (2 ms - 500 us jitter)" ge "$(rx delay_min_us)" 1500
  expect "mean delay $(rx delay_avg_us) us >= 1900 us" ge "$(rx delay_avg_us)" 1900
  expect "jitter keeps order (reordered $(rx reordered))" eq "$(rx reordered)" 0
  balance a_to_b
}

case_reorder() {
  hop_with --reorder 10%:300us --seed 6
  probe 5000 20 512
  local held; held=$(hop a_to_b reordered)
  expect "reordered $held within 5 sd of 5000 x 10%" within "$held" 5000 0.1
  expect "receiver saw $(rx reordered) frames out of order (at most $held, at least half)" \
    ge "$held" "$(rx reordered)"
  ge "$(rx reordered)" $(( held / 2 )) || e2e_fail "receiver saw only $(rx reordered) of $held reordered frames"
  balance a_to_b
}

case_duplicate() {
  hop_with --dup 5% --seed 7
  probe $N 20 512
  local dup; dup=$(hop a_to_b duplicated)
  expect "duplicated $dup within 5 sd of $N x 5%" within "$dup" $N 0.05
  expect "receiver saw $(rx duplicates) duplicates (= $dup less drops elsewhere)" \
    ge "$(rx duplicates)" $(( dup - $(lost_elsewhere) ))
  ge "$dup" "$(rx duplicates)" || e2e_fail "receiver saw more duplicates than the hop made"
  balance a_to_b
}

case_corrupt() {
  hop_with --corrupt 5% --seed 8
  probe $N 20 512
  local bad; bad=$(hop a_to_b corrupted)
  expect "corrupted $bad within 5 sd of $N x 5%" within "$bad" $N 0.05
  expect "receiver found $(rx corrupt) frames failing the ICRC (= $bad less drops elsewhere)" \
    ge "$(rx corrupt)" $(( bad - $(lost_elsewhere) ))
  ge "$bad" "$(rx corrupt)" || e2e_fail "receiver found more corrupt frames than the hop made"
  balance a_to_b
}

case_rate_ecn() {
  # 20 Mbit/s bottleneck, unpaced source (faster): the queue fills, marks
  # CE above 16 KB and tail-drops at 64 KB.
  hop_with --rate 20mbit --queue 64KB --ecn-threshold 16KB --seed 9
  probe 5000 0 1024
  local marked; marked=$(hop a_to_b ecn_marked)
  expect "frames marked CE ($marked)" ge "$marked" 1
  expect "receiver saw $(rx ce) CE marks (= $marked less drops elsewhere)" ge "$(rx ce)" $(( marked - $(lost_elsewhere) ))
  ge "$marked" "$(rx ce)" || e2e_fail "receiver saw more CE marks than the hop made"
  expect "queue tail-dropped ($(hop a_to_b dropped_queue_full))" ge "$(hop a_to_b dropped_queue_full)" 1
  expect "queue peaked at $(hop a_to_b queue_max_bytes) B, within 16 KB..64 KB" \
    ge "$(hop a_to_b queue_max_bytes)" 16384
  ge 65536 "$(hop a_to_b queue_max_bytes)" || e2e_fail "queue exceeded its capacity"
  expect "receiver lost $(rx lost) = tail drops + elsewhere" \
    eq "$(rx lost)" $(( $(hop a_to_b dropped_queue_full) + $(lost_elsewhere) ))
  balance a_to_b
}

# ---- (b) MetaRoCE through the hop ----

ctl() {  # a|b args
  if [ "$1" = a ]; then shift; mroce_in_a "$CTL" --sysfs-root "$MROCE_SYSFS_A" "$@"
  else shift; mroce_in_b "$CTL" --sysfs-root "$MROCE_SYSFS_B" "$@"; fi
}
retransmits() {  # both daemons' tx_retransmits, summed
  local s n=0
  for s in a b; do
    n=$(( n + $(ctl $s stat -a "$([ $s = a ] && echo "$MROCE_DEV_A" || echo "$MROCE_DEV_B")" |
      awk '$1 == "tx_retransmits" {print $2; f=1} END {if (!f) print 0}') ))
  done
  echo "$n"
}
NET=none
net_up() {  # io impair-args...: the whole network through the hop
  local io=$1; shift
  NET=none
  mroce_net_down >/dev/null 2>&1
  MROCE_IMPAIR_ARGS="$*" mroce_net_up --hop --io "$io" >"$WORK/net_up.log" 2>&1 && { NET=$io; return 0; }
  cat "$WORK/net_up.log"
  return 1
}
PORT=18760
traffic() {  # name args...: mroce_traffic server in A, client in B, both exit 0
  local name=$1 spid rc=0 src=0; shift
  PORT=$((PORT + 1))
  mroce_in_a env "${TOOL_ENV[@]}" timeout 180 "$TRAFFIC" server --dev "$MROCE_DEV_A" --port "$PORT" "$@" \
    >"$WORK/$name.server.log" 2>&1 &
  spid=$!; e2e_track_pid "$spid"
  mroce_in_b env "${TOOL_ENV[@]}" timeout 180 "$TRAFFIC" client "$MROCE_IP_A" --dev "$MROCE_DEV_B" --port "$PORT" "$@" \
    >"$WORK/$name.client.log" 2>&1 || rc=$?
  wait "$spid" || src=$?
  tail -4 "$WORK/$name.client.log"
  [ $rc = 0 ] && [ $src = 0 ] || { cat "$WORK/$name.server.log" "$WORK/$name.client.log"; e2e_fail "$name: client exit $rc, server exit $src"; }
}
perftest() {  # tool: 64 KiB x 300, server in A, client in B
  local tool=$1 spid rc=0 src=0 gid_a gid_b
  PORT=$((PORT + 1))
  gid_a=$(mroce_in_a env "${TOOL_ENV[@]}" ibv_devinfo -v -d "$MROCE_DEV_A" | awk -v ip="::ffff:$MROCE_IP_A" \
    '/GID\[/ && index($0, ip) && /RoCE v2/ {gsub(/.*GID\[ */, ""); gsub(/\].*/, ""); print; exit}')
  gid_b=$(mroce_in_b env "${TOOL_ENV[@]}" ibv_devinfo -v -d "$MROCE_DEV_B" | awk -v ip="::ffff:$MROCE_IP_B" \
    '/GID\[/ && index($0, ip) && /RoCE v2/ {gsub(/.*GID\[ */, ""); gsub(/\].*/, ""); print; exit}')
  mroce_in_a env "${TOOL_ENV[@]}" timeout 120 stdbuf -oL "$tool" -F -d "$MROCE_DEV_A" -x "$gid_a" -s 65536 -n 300 -p "$PORT" \
    >"$WORK/$tool.server.log" 2>&1 &
  spid=$!; e2e_track_pid "$spid"
  for _ in $(seq 1 100); do ip netns exec "$MROCE_NS_A" ss -ltn 2>/dev/null | grep -q ":$PORT " && break; sleep 0.1; done
  mroce_in_b env "${TOOL_ENV[@]}" timeout 120 stdbuf -oL "$tool" -F -d "$MROCE_DEV_B" -x "$gid_b" -s 65536 -n 300 -p "$PORT" \
    "$MROCE_IP_A" >"$WORK/$tool.client.log" 2>&1 || rc=$?
  wait "$spid" || src=$?
  awk '/^ *#bytes/ {h=1; next} h && /^ *[0-9]/ {print "  FIGURE: " $0; exit}' "$WORK/$tool.client.log"
  [ $rc = 0 ] && [ $src = 0 ] || { perftest_diagnose "$tool"; e2e_fail "$tool: client exit $rc, server exit $src"; }
}
perftest_diagnose() {  # tool: what each side printed, and where each QP stands
  local s
  echo "  --- $1 server (A):"; sed 's/^/  | /' "$WORK/$1.server.log"
  echo "  --- $1 client (B):"; sed 's/^/  | /' "$WORK/$1.client.log"
  for s in a b; do
    echo "  --- daemon $s, every QP's non-zero counters:"
    ctl $s stat --qp all "$([ $s = a ] && echo "$MROCE_DEV_A" || echo "$MROCE_DEV_B")" 2>&1 | sed 's/^/  | /'
  done
  echo "  --- hop: $(mroce_hop_stats 2>&1)"
}

# Verified traffic (mroce_traffic --mode verify: every size of SEND, WRITE,
# WRITE_IMM, READ and atomics, then bulk WRITE and READ, content checked)
# under 1 % loss each way. It used to fail about one run in two with
# RETRY_EXC_ERR: each side re-armed its tail-loss probe after every probe,
# ~3,000 a second per QP, and when the hop was descheduled on a busy machine
# the flood overran it and the peer's receive ring (engine fix and its
# deterministic reproduction: firmware-model/engine/recovery_test.cc).
case_verified_loss() {  # io
  net_up "$1" --loss 1% --seed 21 || e2e_fail "network through the hop (--io $1) did not come up"
  # IB timeout 18 (1.07 s) x 8 tries: a busy 2-vCPU machine stalls a QP for
  # longer than the default 0.5 s budget at times; the loss is what is tested.
  traffic "verified_$1" --seed 31 --bulk-mib 16 --timeout 18
  hop_snapshot
  local r; r=$(retransmits)
  echo "  hop drops: a_to_b $(hop a_to_b dropped_loss), b_to_a $(hop b_to_a dropped_loss); daemons' retransmits $r"
  expect "the hop dropped frames both ways" ge "$(( $(hop a_to_b dropped_loss) > 0 && $(hop b_to_a dropped_loss) > 0 ))" 1
  expect "the daemons retransmitted ($r)" ge "$r" 1
}

case_perftest_loss_delay() {  # io
  net_up "$1" --loss 1% --delay 1ms --seed 22 || e2e_fail "network through the hop (--io $1) did not come up"
  perftest ib_write_bw
  perftest ib_read_bw
  hop_snapshot
  local r; r=$(retransmits)
  echo "  hop: a_to_b delayed $(hop a_to_b delayed) dropped $(hop a_to_b dropped_loss); b_to_a delayed" \
       "$(hop b_to_a delayed) dropped $(hop b_to_a dropped_loss); daemons' retransmits $r"
  expect "frames delayed both ways" ge "$(( $(hop a_to_b delayed) > 0 && $(hop b_to_a delayed) > 0 ))" 1
  expect "frames dropped both ways" ge "$(( $(hop a_to_b dropped_loss) > 0 && $(hop b_to_a dropped_loss) > 0 ))" 1
  expect "the daemons retransmitted ($r)" ge "$r" 1
}

# A real bottleneck for congestion control: the hop's rate-limited queue
# marks CE, the daemons see the marks (ecn_marks_seen) and the write completes.
device_counter_sum() {  # counter: both daemons', summed
  local s n=0
  for s in a b; do
    n=$(( n + $(ctl $s stat -a "$([ $s = a ] && echo "$MROCE_DEV_A" || echo "$MROCE_DEV_B")" |
      awk -v c="$1" '$1 == c {print $2; f=1} END {if (!f) print 0}') ))
  done
  echo "$n"
}
case_ecn_bottleneck() {
  # perftest's client in B writes to A: the data crosses the hop B -> A.
  net_up packet --b-to-a --rate 200mbit --queue 512KB --ecn-threshold 32KB --seed 23 ||
    e2e_fail "network through the hop did not come up"
  perftest ib_write_bw
  hop_snapshot
  local seen; seen=$(device_counter_sum ecn_marks_seen)
  echo "  hop b_to_a: ecn_marked $(hop b_to_a ecn_marked), queue max $(hop b_to_a queue_max_bytes) B," \
       "tail drops $(hop b_to_a dropped_queue_full); daemons' ecn_marks_seen $seen"
  expect "the bottleneck marked CE ($(hop b_to_a ecn_marked))" ge "$(hop b_to_a ecn_marked)" 1
  expect "the daemons saw CE marks ($seen)" ge "$seen" 1
  expect "only the limited direction marked (a_to_b $(hop a_to_b ecn_marked))" eq "$(hop a_to_b ecn_marked)" 0
}

# ib_write_bw through 25 % reordering (held 100 us) and 100 us of delay
# (issue 15: the bench row ran at 0.02-0.06 Gbit/s or timed out). A held
# frame is late, not lost: the write completes (RETRY_EXC_ERR or a hang
# fails it). The counts are printed, not bounded: on the shared 2-core
# machine a descheduled daemon still fires the odd (undone) RTO, whose
# flight dominates the retransmit count (79 alone, 490 with the whole suite
# running); the deterministic bound is recovery_test's reordering case.
case_perftest_reorder() {
  net_up packet --delay 100us --reorder 25%:100us --seed 24 ||
    e2e_fail "network through the hop did not come up"
  perftest ib_write_bw
  hop_snapshot
  local r held; r=$(retransmits); held=$(( $(hop a_to_b reordered) + $(hop b_to_a reordered) ))
  echo "  hop: reordered $held frames; daemons' tx_retransmits $r, timeouts $(device_counter_sum timeouts)," \
       "spurious_timeouts $(device_counter_sum spurious_timeouts), fast_retransmits $(device_counter_sum fast_retransmits)"
  expect "frames reordered ($held)" ge "$held" 100
}

# ---- run ----

# MROCE_IMPAIR_CASES=REGEX runs only the cases whose name matches (e.g.
# "verified" to repeat the verified-traffic cases); all by default.
want_case() { [[ $1 =~ ${MROCE_IMPAIR_CASES:-.} ]]; }
run_case() {  # name fn
  if want_case "$1"; then e2e_case "$1" "$2"; else echo "not selected: $1 (MROCE_IMPAIR_CASES)"; fi
}

probe_net() {
  net_up packet || { echo "network through the hop did not come up"; return 1; }
  # The probe owns UDP 4796 on both hosts: no daemons for part (a).
  kill "$MROCE_PID_A" "$MROCE_PID_B" 2>/dev/null
  wait "$MROCE_PID_A" "$MROCE_PID_B" 2>/dev/null
  MROCE_PID_A=; MROCE_PID_B=
  MAC_B=$(ip -n "$MROCE_NS_B" -br link show "$MROCE_IF_B" | awk '{print $3}')
}
need_probe_net() { [ -n "$MAC_B" ] || e2e_fail "network through the hop did not come up (log above)"; }

want_case hop_ && probe_net
for c in passthrough loss burst delay reorder duplicate corrupt rate_ecn; do
  eval "t_$c() { need_probe_net; case_$c; }"
  run_case "hop_$c" "t_$c"
done
for io in xdp packet; do
  eval "t_verified_$io() { case_verified_loss $io; }"
  eval "t_perftest_$io() { case_perftest_loss_delay $io; }"
  run_case "verified_traffic_${io}_loss_1pct" "t_verified_$io"
  run_case "perftest_${io}_loss_1pct_delay_1ms" "t_perftest_$io"
done
run_case ecn_bottleneck_packet case_ecn_bottleneck
run_case perftest_packet_reorder_25pct_delay_100us case_perftest_reorder
mroce_net_down >/dev/null 2>&1
e2e_finish
