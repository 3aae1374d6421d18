#!/usr/bin/env bash
# Operating metaroced, end to end (docs/operations.md), on the two-namespace
# network of tests/lib/netns.sh (names from MROCE_PREFIX) with the metrics
# endpoint on in both daemons:
#   - metaroce-ctl -j: every command's output parses and has the fields
#     docs/operations.md §JSON documents,
#   - the metrics endpoint, scraped during perftest traffic: counters grow,
#     per-QP metrics appear,
#   - capture: a pcap of the device's frames the Wireshark dissector decodes,
#   - monitor: QPs created/destroyed and the port down/up arrive as events;
#     a QP driven into ERR (wrong rkey) arrives as a state change with its
#     reason, streamed through a pipe,
#   - readiness (NOTIFY_SOCKET) arrives only once the device is published,
#   - with JOURNAL_STREAM naming its stderr, every log line carries its
#     sd-daemon priority (<3> <4> <6> <7>); otherwise plain text,
#   - bad input: a config with a wrong option, a second daemon for the same
#     interface, a metrics port already in use: a clear message, non-zero exit.
# Needs root; skips with a reason otherwise.
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
METAROCED=$(find_file firmware-model/daemon/metaroced) || exit 1
CTL=$(find_file tools/metaroce-ctl) || exit 1
PROVIDER=$(find_file provider/libmetaroce-rdmav34.so) || exit 1
QP_ERROR=$(find_file tests/ops/mroce_qp_error) || exit 1
CHECK_JSON=$top/tests/ops/check_json.py
DOC=$top/docs/operations.md
export METAROCED
TOOL_ENV=(RDMAV_DRIVERS="${PROVIDER%-rdmav34.so}")
asan=$(ldd "$PROVIDER" | awk '/libasan/ {print $3; exit}')
[ -n "$asan" ] && TOOL_ENV+=(LD_PRELOAD="$asan" ASAN_OPTIONS=detect_leaks=0:abort_on_error=1)

source "$top/tests/lib/netns.sh"
if [ "$(id -u)" != 0 ] || ! ip netns list >/dev/null 2>&1; then
  echo "SKIP: needs root and network namespaces"; E2E_SKIPPED=1; e2e_finish; exit 0
fi
METRICS_PORT=9464   # each namespace has its own loopback
X_A=$MROCE_PREFIX-xa; X_B=$MROCE_PREFIX-xb  # a spare veth pair in namespace A
RUN_X=/run/metaroce/$MROCE_PREFIX-x
WORK=$(mktemp -d /tmp/mroce-ops-e2e.XXXXXX)
cleanup() {
  local pid
  for pid in $(cat "$WORK/pids" 2>/dev/null); do kill -9 "$pid" 2>/dev/null; done
  pid=$(cat "$RUN_X/metaroce7.pid" 2>/dev/null) && grep -qa metaroce7 "/proc/$pid/cmdline" 2>/dev/null &&
    kill -9 "$pid"
  mroce_net_down >/dev/null 2>&1
  rm -rf "$WORK" "$RUN_X"
}
trap cleanup EXIT
track() { echo "$1" >> "$WORK/pids"; e2e_track_pid "$1"; }

ctl_a() { mroce_in_a "$CTL" --run-dir "$MROCE_RUN_A" --sysfs-root "$MROCE_SYSFS_A" "$@"; }
ctl_b() { mroce_in_b "$CTL" --run-dir "$MROCE_RUN_B" --sysfs-root "$MROCE_SYSFS_B" "$@"; }
ctl_x() { ip netns exec "$MROCE_NS_A" "$CTL" --run-dir "$RUN_X" --sysfs-root "$RUN_X/sysfs" "$@"; }
in_a() { mroce_in_a env "${TOOL_ENV[@]}" timeout 120 "$@"; }
in_b() { mroce_in_b env "${TOOL_ENV[@]}" timeout 120 "$@"; }
scrape_a() {  # the metrics page of daemon A
  ip netns exec "$MROCE_NS_A" curl -sf --max-time 10 "http://127.0.0.1:$METRICS_PORT/metrics"
}
metric() {  # page name labels-regex: the value of one sample
  awk -v n="$2" -v l="$3" '$1 ~ ("^" n "\\{") && $1 ~ l { print $2; exit }' "$1"
}
# expect_fail WANT_RC REGEX CMD...: CMD exits WANT_RC and says REGEX on stderr.
expect_fail() {
  local want=$1 re=$2 rc=0; shift 2
  "$@" >"$WORK/out" 2>&1 || rc=$?
  echo "exit $rc: $(head -3 "$WORK/out")"
  [ "$rc" = "$want" ] || e2e_fail "expected exit $want, got $rc"
  grep -Eq -- "$re" "$WORK/out" || e2e_fail "expected a message matching /$re/"
}

setup() {
  MROCE_DAEMON_ARGS="--metrics 127.0.0.1:$METRICS_PORT" mroce_net_up --io packet || return 1
  ip link add "$X_A" netns "$MROCE_NS_A" type veth peer name "$X_B" netns "$MROCE_NS_A" || return 1
  ip -n "$MROCE_NS_A" addr add 10.79.0.1/24 dev "$X_A"
  ip -n "$MROCE_NS_A" link set "$X_A" up && ip -n "$MROCE_NS_A" link set "$X_B" up
}

t_json_every_command() {
  local c kind
  # command line : the docs/operations.md §JSON row it must match
  for c in "dev:dev" "dev show $MROCE_DEV_A:dev" "link:link [" "link show $MROCE_DEV_A:link [" \
           "stat $MROCE_DEV_A:stat DEV"; do
    kind=${c#*:}; c=${c%%:*}
    ctl_a -j $c > "$WORK/j" || e2e_fail "metaroce-ctl -j $c failed"
    python3 "$CHECK_JSON" "$DOC" "$kind" < "$WORK/j" || e2e_fail "-j $c: $(cat "$WORK/j")"
  done
  # A QP exists while ibv_rc_pingpong waits for its peer.
  # (exec'd all the way down, so $! is ibv_rc_pingpong itself)
  ip netns exec "$MROCE_NS_A" env SYSFS_PATH="$MROCE_SYSFS_A" "${TOOL_ENV[@]}" \
    ibv_rc_pingpong -d "$MROCE_DEV_A" -g 1 -p 18711 > "$WORK/pp" 2>&1 &
  local pp=$!; track "$pp"
  for _ in $(seq 1 300); do
    ctl_a -j stat "$MROCE_DEV_A" | python3 -c 'import json,sys; sys.exit(0 if json.load(sys.stdin)[0]["qps"] else 1)' && break
    sleep 0.1
  done
  ctl_a -j stat --qp all "$MROCE_DEV_A" > "$WORK/j"
  kill "$pp" 2>/dev/null; wait "$pp" 2>/dev/null || true
  python3 "$CHECK_JSON" "$DOC" "stat --qp" < "$WORK/j" || e2e_fail "-j stat --qp all: $(cat "$WORK/j")"
  ctl_x -j link add metaroce7 netdev "$X_A" --io packet > "$WORK/j" || e2e_fail "link add: $(cat "$WORK/j")"
  python3 "$CHECK_JSON" "$DOC" "link add" < "$WORK/j" || return 1
  ctl_x -j link delete metaroce7 > "$WORK/j" || e2e_fail "link delete: $(cat "$WORK/j")"
  python3 "$CHECK_JSON" "$DOC" "link delete" < "$WORK/j"
}

t_metrics_grow_during_traffic() {
  scrape_a > "$WORK/m0" || e2e_fail "no metrics on 127.0.0.1:$METRICS_PORT in $MROCE_NS_A"
  grep -q '^# TYPE metaroce_tx_packets_total counter$' "$WORK/m0" || e2e_fail "no metaroce_tx_packets_total"
  local tx0; tx0=$(metric "$WORK/m0" metaroce_tx_packets_total "device=\"$MROCE_DEV_A\"")
  # Four seconds of RDMA WRITE (duration mode: as long on a slow machine),
  # scraped while it runs.
  in_a ib_write_bw -d "$MROCE_DEV_A" -x 1 -s 65536 -D 4 -p 18712 > "$WORK/bw_s" 2>&1 &
  local srv=$!; track "$srv"
  for _ in $(seq 1 100); do ip netns exec "$MROCE_NS_A" ss -ltn | grep -q ":18712 " && break; sleep 0.1; done
  in_b ib_write_bw -d "$MROCE_DEV_B" -x 1 -s 65536 -D 4 -p 18712 "$MROCE_IP_A" > "$WORK/bw_c" 2>&1 &
  local cli=$!; track "$cli"
  local n=0 during=0
  while kill -0 "$cli" 2>/dev/null; do
    scrape_a > "$WORK/m$((++n))" || e2e_fail "scrape $n failed during traffic"
    if grep -q '^metaroce_qp_tx_packets_total{device="'"$MROCE_DEV_A"'",qpn="' "$WORK/m$n"; then
      during=$n
      # The writer's (B's) QP transport state while it carries traffic.
      # (kept only while a QP exists: the last scrape may see it go)
      ctl_b -j stat --qp all "$MROCE_DEV_B" > "$WORK/qp.json.new" 2>/dev/null &&
        grep -q '"qpn"' "$WORK/qp.json.new" && mv "$WORK/qp.json.new" "$WORK/qp.json"
      ctl_b stat --qp all "$MROCE_DEV_B" > "$WORK/qp.txt.new" 2>/dev/null &&
        grep -q 'transport state:' "$WORK/qp.txt.new" && mv "$WORK/qp.txt.new" "$WORK/qp.txt"
    fi
    sleep 0.2
  done
  wait "$cli" || { cat "$WORK/bw_c"; e2e_fail "ib_write_bw client failed"; }
  wait "$srv" || { cat "$WORK/bw_s"; e2e_fail "ib_write_bw server failed"; }
  [ "$during" -gt 0 ] || e2e_fail "no scrape of $n showed a QP's metrics while traffic ran"
  scrape_a > "$WORK/mend"
  local rx1 tx1 scrapes
  tx1=$(metric "$WORK/mend" metaroce_tx_packets_total "device=\"$MROCE_DEV_A\"")
  rx1=$(metric "$WORK/mend" metaroce_rx_packets_total "device=\"$MROCE_DEV_A\"")
  scrapes=$(metric "$WORK/mend" metaroce_metrics_scrapes_total "device=")
  echo "scrapes $n (QP metrics in #$during); tx_packets $tx0 -> $tx1; rx_packets $rx1; scrapes_total $scrapes"
  [ "$tx1" -gt "$tx0" ] || e2e_fail "metaroce_tx_packets_total did not grow ($tx0 -> $tx1)"
  [ "$rx1" -gt 0 ] && [ "$scrapes" -ge "$((n + 2))" ] || e2e_fail "rx or scrape counters did not grow"
  # stat --qp: RTT, window, pacing and one weight per path, measured.
  [ -s "$WORK/qp.json" ] || e2e_fail "no stat --qp all taken during traffic"
  sed -n '/transport state:/,/path_weights/p' "$WORK/qp.txt" | head -5
  python3 "$CHECK_JSON" "$DOC" "stat --qp" < "$WORK/qp.json" || e2e_fail "stat --qp JSON"
  python3 -c '
import json, sys
qps = json.load(open(sys.argv[1]))
ok = [q for q in qps if q["transport"]["srtt_ns"] > 0 and q["transport"]["cwnd_bytes"] > 0
      and 0 < q["transport"]["min_rtt_ns"] <= q["transport"]["srtt_ns"] * 4
      and q["transport"]["pacing_rate_bps"] > 0
      and len(q["transport"]["path_weights_ppm"]) == int(sys.argv[2])
      and all(0 < w <= 1000000 for w in q["transport"]["path_weights_ppm"])]
print("QPs with measured transport state: %d of %d" % (len(ok), len(qps)))
sys.exit(0 if ok else "no QP shows srtt, cwnd, pacing and %s path weights: %s" % (sys.argv[2], qps))' \
    "$WORK/qp.json" "${MROCE_PATHS:-4}"
  # The page ctl and the endpoint agree on: the same counter names.
  ctl_a -j stat "$MROCE_DEV_A" | python3 -c '
import json, sys
names = json.load(sys.stdin)[0]["counters"].keys()
page = open(sys.argv[1]).read()
missing = [n for n in names if "metaroce_%s_total{" % n not in page]
sys.exit("not exported: %s" % missing if missing else 0)' "$WORK/mend"
}

t_metrics_hostile_requests() {
  local base="http://127.0.0.1:$METRICS_PORT"
  local code
  code=$(ip netns exec "$MROCE_NS_A" curl -s -o /dev/null -w '%{http_code}' -X POST "$base/metrics")
  [ "$code" = 405 ] || e2e_fail "POST gave $code"
  code=$(ip netns exec "$MROCE_NS_A" curl -s -o /dev/null -w '%{http_code}' "$base/")
  [ "$code" = 404 ] || e2e_fail "GET / gave $code"
  scrape_a > "$WORK/m" && grep -E '^metaroce_metrics_bad_requests_total\{device="[^"]+"\} [2-9]' "$WORK/m" ||
    e2e_fail "bad requests not counted"
}

t_ready_only_after_publish() {
  # A NOTIFY_SOCKET of our own: READY=1 must find the device published.
  ip netns exec "$MROCE_NS_A" python3 - "$METAROCED" "$X_A" "$RUN_X" <<'PY'
import os, socket, subprocess, sys, time
daemon, netdev, run = sys.argv[1:4]
path = run + "/notify.sock"
os.makedirs(run, exist_ok=True)
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(path)
s.settimeout(30)
env = dict(os.environ, NOTIFY_SOCKET=path)
p = subprocess.Popen([daemon, "--netdev", netdev, "--ibdev", "metaroce7", "--io", "packet",
                      "--run-dir", run, "--sysfs-root", run + "/sysfs"], env=env,
                     stderr=subprocess.PIPE, text=True)
try:
    msg = s.recv(4096).decode()
    published = os.path.isdir(run + "/sysfs/class/infiniband/metaroce7")
    listening = os.path.exists(run + "/metaroce7.sock")
    print("notify:", msg.replace("\n", " | "), "; published:", published, "; socket:", listening)
    assert msg.startswith("READY=1\n"), msg
    assert published and listening, "READY=1 before the device was published"
finally:
    p.terminate()
    p.wait(30)
    print(p.stderr.read())
PY
}

# journal_run LOG JOURNAL_STREAM ARGS...: metaroced in namespace A with
# stderr appended to LOG and JOURNAL_STREAM set, in the background (pid in
# $JPID).
journal_run() {
  local log=$1 js=$2; shift 2
  ip netns exec "$MROCE_NS_A" env JOURNAL_STREAM="$js" "$METAROCED" "$@" 2>>"$log" &
  JPID=$!; track "$JPID"
}

t_journal_priorities() {
  local log=$WORK/journal.log other=$WORK/other.log
  : > "$log"; : > "$other"
  local js; js=$(stat -c '%d:%i' "$log")  # what systemd sets: stderr's st_dev:st_ino
  journal_run "$log" "$js" --netdev "$X_A" --ibdev metaroce7 --io packet -v \
    --run-dir "$RUN_X" --sysfs-root "$RUN_X/sysfs"
  SEEN=0; wait_line "$log" '^<6>metaroce7 up on ' || return 1
  ctl_x stat metaroce7 > /dev/null || e2e_fail "stat metaroce7"
  ctl_x stat --qp 77777 metaroce7 > /dev/null 2>&1 && e2e_fail "stat of a QP that does not exist succeeded"
  SEEN=0; wait_line "$log" '^<7>client pid [0-9]+ uid 0 connected as context' || return 1
  SEEN=0; wait_line "$log" '^<4>context [0-9]+: op 14 failed: .*no such QP' || return 1
  SEEN=0; wait_line "$log" '^<6>context [0-9]+ \(pid [0-9]+\) closed' || return 1
  kill "$JPID"; wait "$JPID" || e2e_fail "metaroced did not exit 0 on SIGTERM"
  grep -q '^<6>signal Terminated: shutting down$' "$log" || e2e_fail "no <6> shutdown line"
  # An error: a start-up failure.
  journal_run "$log" "$js" --netdev "$X_A" --ibdev metaroce7 --cc nope --run-dir "$RUN_X"
  wait "$JPID" && e2e_fail "metaroced --cc nope succeeded"
  grep -Eq "^<3>.*'nope'" "$log" || e2e_fail "no <3> line for an unknown congestion control"
  cat "$log"
  ! grep -Ev '^<[3467]>' "$log" || e2e_fail "a line without an sd-daemon priority (above)"
  # JOURNAL_STREAM naming another file (inherited, stderr moved): plain text.
  journal_run "$other" "$js" --netdev "$X_A" --ibdev metaroce7 --cc nope --run-dir "$RUN_X"
  wait "$JPID" && e2e_fail "metaroced --cc nope succeeded"
  cat "$other"
  grep -q "^metaroced: .*'nope'" "$other" && ! grep -q '^<' "$other" ||
    e2e_fail "with stderr not the journal, lines must be plain text"
}

t_bad_config() {
  printf 'ibdev metaroce7\npaths 4\nmetrix 9464\n' > "$WORK/bad.conf"
  expect_fail 2 "^metaroced: $WORK/bad.conf:3: unknown argument '--metrix' \(see --help\)$" \
    ip netns exec "$MROCE_NS_A" "$METAROCED" --config "$WORK/bad.conf" --netdev "$X_A"
  printf 'netdev eth0\n' > "$WORK/bad.conf"
  expect_fail 2 "bad.conf:1: 'netdev' cannot be set in a config file" \
    ip netns exec "$MROCE_NS_A" "$METAROCED" --config "$WORK/bad.conf" --netdev "$X_A"
}

t_second_daemon_refused() {
  expect_fail 1 "^metaroced: metaroced pid $MROCE_PID_A already serves $MROCE_IF_A in this network namespace \(one daemon per interface\)$" \
    ip netns exec "$MROCE_NS_A" "$METAROCED" --netdev "$MROCE_IF_A" --ibdev metaroce7 --io packet \
      --run-dir "$RUN_X" --sysfs-root "$RUN_X/sysfs"
  # The first one is untouched: its socket still answers.
  ctl_a stat "$MROCE_DEV_A" > /dev/null || e2e_fail "the first daemon stopped answering"
  [ ! -e "$RUN_X/sysfs/class/infiniband/metaroce7" ] || e2e_fail "the refused daemon published a device"
}

t_metrics_port_in_use() {
  expect_fail 1 "metrics: cannot listen on 127.0.0.1 port $METRICS_PORT: the port is already in use" \
    ip netns exec "$MROCE_NS_A" "$METAROCED" --netdev "$X_A" --ibdev metaroce7 --io packet \
      --run-dir "$RUN_X" --sysfs-root "$RUN_X/sysfs" --metrics "$METRICS_PORT"
  [ ! -e "$RUN_X/sysfs/class/infiniband/metaroce7" ] || e2e_fail "the refused daemon published a device"
}

t_monitor_streams_events() {
  ip netns exec "$MROCE_NS_A" "$CTL" --run-dir "$MROCE_RUN_A" --sysfs-root "$MROCE_SYSFS_A" \
    -j monitor "$MROCE_DEV_A" > "$WORK/mon" 2>&1 &
  local mon=$!; track "$mon"
  SEEN=0
  wait_line "$WORK/mon" '"event":"daemon","what":"running"' || return 1
  ip netns exec "$MROCE_NS_A" env SYSFS_PATH="$MROCE_SYSFS_A" "${TOOL_ENV[@]}" \
    ibv_rc_pingpong -d "$MROCE_DEV_A" -g 1 -p 18713 > "$WORK/pp" 2>&1 &
  local pp=$!; track "$pp"
  wait_line "$WORK/mon" '"event":"qp","what":"created"' || return 1
  kill "$pp"; wait "$pp" 2>/dev/null || true
  wait_line "$WORK/mon" '"event":"qp","what":"destroyed"' || return 1
  ip -n "$MROCE_NS_A" link set "$MROCE_IF_A" down
  wait_line "$WORK/mon" '"event":"port","what":"DOWN"' || return 1
  ip -n "$MROCE_NS_A" link set "$MROCE_IF_A" up
  wait_line "$WORK/mon" '"event":"port","what":"ACTIVE"' || return 1
  kill "$mon"; wait "$mon" || e2e_fail "monitor did not exit 0 on SIGTERM"
  cat "$WORK/mon"
  python3 -c 'import json,sys; [json.loads(l) for l in open(sys.argv[1])]' "$WORK/mon" ||
    e2e_fail "monitor -j printed a line that is not JSON"
  # The port events sent to the monitor's own context were read, not
  # counted as failed writes (no other context was open).
  ! grep -q async_event_write_failed "$WORK/mon" ||
    e2e_fail "the monitor's own context made async_event_write_failed grow"
}

t_monitor_reports_qp_errors() {
  # Two loopback QPs of device A in RTS, waiting for the go file.
  rm -f "$WORK/go"
  ip netns exec "$MROCE_NS_A" env SYSFS_PATH="$MROCE_SYSFS_A" "${TOOL_ENV[@]}" \
    "$QP_ERROR" "$MROCE_DEV_A" 1 "$WORK/go" > "$WORK/qperr" 2>&1 &
  local prog=$!; track "$prog"
  SEEN=0; wait_line "$WORK/qperr" '^ready qpn ' || return 1
  local qa qb; read -r _ _ qa qb < <(grep '^ready qpn ' "$WORK/qperr")
  # The monitor starts now, so its first poll sees both QPs in RTS. Its
  # stdout is a pipe: events must arrive as they happen, not when a buffer
  # fills or the monitor exits.
  ip netns exec "$MROCE_NS_A" "$CTL" --run-dir "$MROCE_RUN_A" --sysfs-root "$MROCE_SYSFS_A" \
    -j monitor "$MROCE_DEV_A" > >(cat > "$WORK/mon2") 2>&1 &
  local mon=$!; track "$mon"
  SEEN=0
  wait_line "$WORK/mon2" '"event":"qp","what":"created","qpn":'"$qb"',' || return 1
  touch "$WORK/go"
  SEEN=0
  wait_line "$WORK/mon2" '"event":"state","what":"ERR","qpn":'"$qa"',.*"from":"RTS","reason":"remote access error"' ||
    return 1
  SEEN=0
  wait_line "$WORK/mon2" '"event":"state","what":"ERR","qpn":'"$qb"',.*"from":"RTS"' || return 1
  grep -q "^status $qa remote access error$" "$WORK/qperr" || e2e_fail "program: $(cat "$WORK/qperr")"
  # stat --qp says the same: state ERR and why.
  ctl_a -j stat --qp "$qa" "$MROCE_DEV_A" | python3 -c '
import json, sys
t = json.load(sys.stdin)[0]["transport"]
sys.exit(0 if (t["qp_state"], t["error"]) == ("ERR", "remote access error") else "stat --qp: %s" % t)' ||
    e2e_fail "stat --qp does not show the QP in ERR with its reason"
  # Still running: the lines came through the pipe while the monitor lived.
  kill -0 "$mon" || e2e_fail "monitor exited early"
  kill "$mon"; wait "$mon" || e2e_fail "monitor did not exit 0 on SIGTERM"
  kill "$prog"; wait "$prog" || e2e_fail "mroce_qp_error failed: $(cat "$WORK/qperr")"
  grep '"event":"state"' "$WORK/mon2"
  python3 -c '
import json, sys
keys = ["time", "ifname", "event", "what", "qpn", "delta", "value", "from", "reason"]
for l in open(sys.argv[1]):
    e = json.loads(l)
    missing = [k for k in keys if k not in e]
    assert not missing, "event without %s: %s" % (missing, l)' "$WORK/mon2" ||
    e2e_fail "monitor -j printed a line that is not JSON or lacks a documented field"
}

# wait_line FILE REGEX: a line matching REGEX is appended to FILE (after
# the lines it had at the previous wait_line) within 30 s.
SEEN=0
wait_line() {
  local n
  for _ in $(seq 1 300); do
    n=$(tail -n "+$((SEEN + 1))" "$1" | grep -En -m1 -- "$2" | cut -d: -f1)
    [ -n "$n" ] && { SEEN=$((SEEN + n)); return 0; }
    sleep 0.1
  done
  echo "no new line matching /$2/ in 30 s:"; cat "$1"; return 1
}

t_capture_pcap_for_the_dissector() {
  local lua=$top/tools/wireshark/metaroce.lua
  ctl_a capture "$MROCE_DEV_A" -w "$WORK/cap.pcap" --count 20 --duration 60 > "$WORK/cap.out" 2>&1 &
  local cap=$!; track "$cap"
  SEEN=0; wait_line "$WORK/cap.out" "^capturing $MROCE_DEV_A on $MROCE_IF_A" || return 1
  ip netns exec "$MROCE_NS_A" env SYSFS_PATH="$MROCE_SYSFS_A" "${TOOL_ENV[@]}" \
    ibv_rc_pingpong -d "$MROCE_DEV_A" -g 1 -p 18714 -n 2000 > "$WORK/pps" 2>&1 &
  local srv=$!; track "$srv"
  for _ in $(seq 1 100); do ip netns exec "$MROCE_NS_A" ss -ltn | grep -q ":18714 " && break; sleep 0.1; done
  in_b ibv_rc_pingpong -d "$MROCE_DEV_B" -g 1 -p 18714 -n 2000 "$MROCE_IP_A" > "$WORK/ppc" 2>&1 ||
    { cat "$WORK/ppc"; e2e_fail "pingpong client"; }
  wait "$srv" || true
  wait "$cap" || { cat "$WORK/cap.out"; e2e_fail "capture failed"; }
  cat "$WORK/cap.out"
  grep -q "^20 frames of $MROCE_DEV_A ($MROCE_IF_A) written to $WORK/cap.pcap$" "$WORK/cap.out" || e2e_fail "capture summary"
  local n
  n=$(HOME=$WORK tshark -n -X lua_script:"$lua" -r "$WORK/cap.pcap" -Y metaroce 2>/dev/null | wc -l)
  echo "tshark with metaroce.lua decodes $n of 20 frames as MetaRoCE"
  [ "$n" = 20 ] || e2e_fail "the dissector decoded $n of 20 captured frames"
  ctl_a -j capture "$MROCE_DEV_A" -w "$WORK/cap2.pcap" --duration 1 > "$WORK/j" 2>"$WORK/cap2.err" ||
    { cat "$WORK/cap2.err"; e2e_fail "capture -j"; }
  python3 "$CHECK_JSON" "$DOC" "capture" < "$WORK/j"
}

# OPS_E2E_ONLY=GLOB (--test_env) runs only the cases whose names match.
ops_case() {
  [[ -z "${OPS_E2E_ONLY:-}" || $1 == $OPS_E2E_ONLY ]] || return 0
  e2e_case "$@"
}

if setup; then
  ops_case json_every_command_has_documented_fields t_json_every_command
  ops_case metrics_scraped_during_traffic_grow t_metrics_grow_during_traffic
  ops_case metrics_hostile_requests_refused t_metrics_hostile_requests
  ops_case ready_notified_only_after_publish t_ready_only_after_publish
  ops_case journal_priority_prefixes t_journal_priorities
  ops_case bad_config_clear_message_exit_2 t_bad_config
  ops_case second_daemon_same_interface_refused t_second_daemon_refused
  ops_case metrics_port_in_use_refused t_metrics_port_in_use
  ops_case capture_pcap_decoded_by_dissector t_capture_pcap_for_the_dissector
  ops_case monitor_streams_qp_and_port_events t_monitor_streams_events
  ops_case monitor_reports_qp_state_change_to_err t_monitor_reports_qp_errors
else
  echo "FAIL: network setup"; E2E_FAILED=1
fi
e2e_finish
