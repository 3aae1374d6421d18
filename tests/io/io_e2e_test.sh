#!/usr/bin/env bash
# Packet I/O end to end: two namespaces (mroce-ioa-PID, mroce-iob-PID) joined
# by a veth pair, 10.77.0.1/24 + fd77::1/64 on `va`, 10.77.0.2/24 + fd77::2/64
# on `vb`. io_pingpong sends real MetaRoCE frames (proto::build_frame, ICRC)
# over AF_XDP and AF_PACKET; the cases check they arrive intact, that other
# traffic still reaches the kernel while our XDP program is attached, that the
# program dies with the process (kill -9), and print frame rates and RTTs.
set -u
export PATH=$PATH:/usr/sbin:/sbin  # capsh, ip (Bazel's strict action env has only /bin:/usr/bin)
. tests/lib/e2e.sh
PP=$(pwd)/tests/io/io_pingpong
NA=mroce-ioa-$$; NB=mroce-iob-$$
TMP=$(mktemp -d)

# Ends what the current case started (pids in $TMP/pids) and restores the MTU.
# Runs as the EXIT trap of each case's subshell (set -e there): keeps the
# case's exit status and never fails itself.
stop_bg() {
  local rc=$? p
  set +e
  if [ -f "$TMP/pids" ]; then
    while read -r p; do kill -9 "$p" 2>/dev/null; wait "$p" 2>/dev/null; done < "$TMP/pids"
    : > "$TMP/pids"
  fi
  ip -n "$NA" link set va mtu 1500 2>/dev/null; ip -n "$NB" link set vb mtu 1500 2>/dev/null
  return $rc
}

cleanup() {
  stop_bg
  ip netns del "$NA" 2>/dev/null; ip netns del "$NB" 2>/dev/null
  rm -rf "$TMP"
}
trap cleanup EXIT

# track PID: remember a background process of this case.
track() { echo "$1" >> "$TMP/pids"; e2e_track_pid "$1"; }

# bg NS ARGS...: starts io_pingpong in NS in the background (output to
# /dev/null); its pid is in BG_PID.
bg() {
  local ns=$1; shift
  ip netns exec "$ns" "$PP" "$@" >/dev/null 2>&1 &
  BG_PID=$!
  track "$BG_PID"
}

wait_file() {  # wait_file PATH: up to 10 s
  for _ in $(seq 100); do [ -s "$1" ] && return 0; sleep 0.1; done
  echo "timed out waiting for $1" >&2; return 1
}

setup() {
  ip netns add "$NA" && ip netns add "$NB" || return 1
  ip link add va netns "$NA" type veth peer name vb netns "$NB" || return 1
  ip -n "$NA" addr add 10.77.0.1/24 dev va
  ip -n "$NB" addr add 10.77.0.2/24 dev vb
  ip -n "$NA" addr add fd77::1/64 dev va nodad
  ip -n "$NB" addr add fd77::2/64 dev vb nodad
  for ns in "$NA" "$NB"; do ip -n "$ns" link set lo up; done
  ip -n "$NA" link set va up && ip -n "$NB" link set vb up || return 1
  MAC_A=$(ip netns exec "$NA" cat /sys/class/net/va/address)
  MAC_B=$(ip netns exec "$NB" cat /sys/class/net/vb/address)
}

set_mtu() { ip -n "$NA" link set va mtu "$1"; ip -n "$NB" link set vb mtu "$1"; }

# transfer RX_BACKEND TX_BACKEND COUNT SIZE PACE_US EXPECT [extra sink args] [-- extra source args]
# Sink in B, source in A (A -> B, IPv4 unless SRC/DST set).
transfer() {
  local rx=$1 tx=$2 count=$3 size=$4 pace=$5 expect=$6; shift 6
  local sink_args=() src_args=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do sink_args+=("$1"); shift; done
  [ $# -gt 0 ] && shift && src_args=("$@")
  local ready=$TMP/ready.$RANDOM out=$TMP/sink.$RANDOM
  rm -f "$ready"
  ip netns exec "$NB" "$PP" --role=sink --if=vb --io="$rx" --count="$count" --expect="$expect" \
      --timeout=10 --ready-file="$ready" "${sink_args[@]}" >"$out" 2>&1 &
  local sink=$!; track "$sink"
  wait_file "$ready" || { cat "$out"; return 1; }
  ip netns exec "$NA" "$PP" --role=source --if=va --io="$tx" --src-ip="${SRC:-10.77.0.1}" \
      --dst-ip="${DST:-10.77.0.2}" --dst-mac="$MAC_B" --count="$count" --size="$size" \
      --pace-us="$pace" "${src_args[@]}" 2>&1 | grep -E '^source'
  local rc=0
  wait "$sink" || rc=$?
  grep -E '^(backend|sink|\[io\] .*(fall|limit))' "$out"
  [ $rc = 0 ] || { cat "$out" >&2; return 1; }
}

# Integrity cases: every frame that arrives must be intact (any damaged or
# duplicated frame fails). Paced sources lose nothing on a quiet machine, but
# when other jobs hold both vCPUs the sink can be descheduled long enough for
# its ring to overflow (counted as kernel drops in the sink's stats line).
# What these cases test is integrity, not speed: half must arrive (a CI run
# once saw 89% under load), every one of them intact.
MIN3000=1500; MIN2000=1000

xdp_attached() { ip -n "$NB" -d link show dev vb | grep -q 'prog/xdp'; }

case_xdp_rx_intact() { trap 'stop_bg; exit $?' EXIT; need_xdp; transfer xdp packet 3000 1024 100 $MIN3000; }
case_xdp_rx_generic_ipv6() { trap 'stop_bg; exit $?' EXIT; need_xdp; SRC=fd77::1 DST=fd77::2 transfer xdp packet 3000 1400 100 $MIN3000 --xdp-mode=generic; }
case_packet_rx_intact_xdp_tx() { trap 'stop_bg; exit $?' EXIT; need_xdp; transfer packet xdp 3000 1024 100 $MIN3000; }
case_packet_v3_rx_intact() { trap 'stop_bg; exit $?' EXIT; transfer packet packet 3000 1514 100 $MIN3000 --ring=v3; }

case_xdp_multi_buffer_4k() { trap 'stop_bg; exit $?' EXIT; need_xdp;
  set_mtu 4200
  transfer xdp packet 2000 4150 200 $MIN2000 --xdp-mode=native
  transfer xdp packet 2000 4150 200 $MIN2000 --xdp-mode=generic
}

# UDP GSO (AF_PACKET --gso both ends): frames with the same headers go as
# super-frames and are cut back at the receiver, intact. The source sprays
# over 4 ports and makes every 7th frame shorter, so super-frames interleave
# and end early; one of each counter must show they really were used.
gso_transfer() {  # SRC DST: one transfer, its output checked for super-frames
  local out=$TMP/gso.$RANDOM
  SRC=$1 DST=$2 transfer packet packet 3000 4166 100 $MIN3000 --gso=1 -- --gso=1 --paths=4 --short-every=7 \
    | tee "$out" || return 1
  local tx rx
  tx=$(grep '^source stats' "$out" | sed -nE 's/.*gso super tx ([0-9]+).*/\1/p')
  rx=$(grep '^sink stats' "$out" | sed -nE 's/.*gso super tx [0-9]+ rx ([0-9]+).*/\1/p')
  echo "super-frames: sent $tx, received $rx"
  [ "${tx:-0}" -gt 0 ] && [ "${rx:-0}" -gt 0 ] || { echo "no super-frames used" >&2; return 1; }
}
case_packet_gso_intact() { trap 'stop_bg; exit $?' EXIT
  set_mtu 9000
  gso_transfer 10.77.0.1 10.77.0.2
  gso_transfer fd77::1 fd77::2  # IPv6: the receiver computes each frame's UDP checksum
}

# Super-frames a receiver cannot cut are dropped and counted (rx_gso_invalid),
# and the good frames after them still arrive intact.
case_packet_gso_hostile() { trap 'stop_bg; exit $?' EXIT
  set_mtu 9000
  local ready=$TMP/ready.h out=$TMP/sink.h
  ip netns exec "$NB" "$PP" --role=sink --if=vb --io=packet --gso=1 --count=200 --expect=100 \
      --timeout=10 --ready-file="$ready" >"$out" 2>&1 &
  local sink=$!; track "$sink"
  wait_file "$ready" || { cat "$out"; return 1; }
  local sent
  sent=$(ip netns exec "$NA" "$PP" --role=gso-hostile --if=va --src-ip=10.77.0.1 --dst-ip=10.77.0.2 \
      --dst-mac="$MAC_B" --size=4166 | tee /dev/stderr | sed -nE 's/^gso-hostile: sent ([0-9]+)/\1/p')
  ip netns exec "$NA" "$PP" --role=source --if=va --io=packet --gso=1 --paths=1 --src-ip=10.77.0.1 \
      --dst-ip=10.77.0.2 --dst-mac="$MAC_B" --count=200 --size=4166 --pace-us=100 | grep -E '^source'
  local rc=0; wait "$sink" || rc=$?
  cat "$out"
  [ $rc = 0 ] || return 1
  local invalid
  invalid=$(grep '^sink stats' "$out" | sed -nE 's/.*gso super tx [0-9]+ rx [0-9]+ invalid ([0-9]+).*/\1/p')
  echo "hostile super-frames: sent $sent, counted invalid ${invalid:-?}"
  [ "${sent:-0}" -ge 2 ] || { echo "the kernel took fewer than 2 hostile super-frames" >&2; return 1; }
  [ "${invalid:-0}" -ge "$sent" ] || { echo "hostile super-frames not counted" >&2; return 1; }
}

# A flush while a tx buffer is held (the soft NIC flushes when the engine
# asks for room while a payload is being read into a frame): the frame
# committed is the one written, never a stale slot (a duplicate at the sink
# fails). On AF_PACKET the held frame must then have moved.
held_transfer() {  # RX TX
  local out=$TMP/held.$RANDOM moved
  transfer "$1" "$2" 3000 1024 100 $MIN3000 -- --flush-held=7 | tee "$out" || return 1
  [ "$2" = packet ] || return 0
  moved=$(sed -nE 's/^source stats:.*held moved ([0-9]+).*/\1/p' "$out")
  echo "held frames moved: ${moved:-none}"
  [ "${moved:-0}" -gt 0 ] || { echo "no flush ran while a buffer was held" >&2; return 1; }
}
case_packet_flush_while_held() { trap 'stop_bg; exit $?' EXIT; held_transfer packet packet; }
case_xdp_flush_while_held() { trap 'stop_bg; exit $?' EXIT; need_xdp; held_transfer packet xdp; }

case_kernel_traffic_passes_while_attached() { trap 'stop_bg; exit $?' EXIT; need_xdp;
  local ready=$TMP/hold.ready
  bg "$NB" --role=hold --if=vb --io=xdp --ready-file="$ready"
  wait_file "$ready"
  xdp_attached || e2e_fail "our XDP program is not attached to vb"
  local uready=$TMP/udp.ready
  bg "$NB" --role=udp-server --port=9999 --timeout=5 --ready-file="$uready"
  wait_file "$uready"
  ip netns exec "$NA" "$PP" --role=icmp-ping --dst-ip=10.77.0.2 --count=5
  ip netns exec "$NA" "$PP" --role=udp-client --dst-ip=10.77.0.2 --port=9999 --count=5
  ip netns exec "$NA" "$PP" --role=udp-client --dst-ip=fd77::2 --port=9999 --count=5
}

case_xdp_program_dies_with_kill_9() { trap 'stop_bg; exit $?' EXIT; need_xdp;
  local ready=$TMP/hold2.ready pid
  bg "$NB" --role=hold --if=vb --io=xdp --ready-file="$ready"
  pid=$BG_PID
  wait_file "$ready"
  xdp_attached || e2e_fail "XDP program not attached while io_pingpong (pid $pid) runs"
  ip -n "$NB" -d link show dev vb | grep -o 'prog/xdp id [0-9]*' || true
  kill -9 "$pid"
  for _ in $(seq 50); do xdp_attached || break; sleep 0.1; done
  if xdp_attached; then ip -n "$NB" -d link show dev vb; e2e_fail "XDP program still attached after kill -9"; fi
  echo "XDP program detached after kill -9 of pid $pid"
}

case_auto_falls_back_to_af_packet() { trap 'stop_bg; exit $?' EXIT; need_xdp;
  local ready=$TMP/hold3.ready out=$TMP/auto.out
  bg "$NB" --role=hold --if=vb --io=xdp --xdp-mode=native --ready-file="$ready"
  wait_file "$ready"
  # vb is taken by the first process' program: a second one must fall back.
  ip netns exec "$NB" timeout 5 "$PP" --role=sink --if=vb --io=auto --count=1 --timeout=1 >"$out" 2>&1 || true
  grep -E 'falling back|^backend' "$out"
  grep -q '^backend af_packet' "$out" || e2e_fail "--io=auto did not fall back to AF_PACKET"
}

# Without CAP_IPC_LOCK the UMEM must fit RLIMIT_MEMLOCK (8 MiB here).
case_umem_fits_memlock_without_cap_ipc_lock() { trap 'stop_bg; exit $?' EXIT; need_xdp
  command -v capsh >/dev/null || e2e_skip "capsh (libcap2-bin) not installed"
  local out=$TMP/memlock.out
  ip netns exec "$NB" capsh --drop=cap_ipc_lock -- -c "ulimit -l 8192; '$PP' --role=sink --if=vb --io=xdp --count=1 --timeout=0" >"$out" 2>&1 || true
  grep -E 'UMEM|^backend' "$out"
  grep -q '^backend af_xdp' "$out" || { cat "$out"; e2e_fail "AF_XDP did not open within RLIMIT_MEMLOCK"; }
}

# Throughput: unpaced source (AF_PACKET sendmmsg) -> sink under test. Figures
# only (noisy on a shared 2-vCPU VM); the case fails only if nothing arrives.
case_rates() { trap 'stop_bg; exit $?' EXIT;
  local size rx
  for size in 1024 1514; do
    for rx in "xdp --xdp-mode=native" "xdp --xdp-mode=generic" "packet --ring=v2" "packet --ring=v3"; do
      set -- $rx
      local b=$1; shift
      [ "$b" = xdp ] && [ -n "$XDP_WHY" ] && continue
      echo "rate: $size B frames, rx $b $*"
      transfer "$b" packet 200000 "$size" 0 1 "$@" | grep -E '^sink:'
    done
  done
}

case_round_trip() { trap 'stop_bg; exit $?' EXIT;
  local b
  for b in "xdp --xdp-mode=native" "xdp --xdp-mode=generic" "packet --ring=v2"; do
    set -- $b
    local io=$1; shift
    [ "$io" = xdp ] && [ -n "$XDP_WHY" ] && continue
    local ready=$TMP/echo.$RANDOM
    bg "$NB" --role=echo --if=vb --io="$io" "$@" --timeout=3 --ready-file="$ready"
    wait_file "$ready"
    echo -n "rtt $io $*: "
    ip netns exec "$NA" "$PP" --role=ping --if=va --io=packet --src-ip=10.77.0.1 --dst-ip=10.77.0.2 \
        --dst-mac="$MAC_B" --count=20000 --size=128 2>&1 | grep -E '^ping:'
    kill "$BG_PID" 2>/dev/null; wait "$BG_PID" 2>/dev/null || true
  done
}

# Probes AF_XDP once: XDP_WHY is empty when it works, else the reason.
probe_xdp() {
  local out=$TMP/probe.out
  ip netns exec "$NB" "$PP" --role=sink --if=vb --io=xdp --count=1 --timeout=0 >"$out" 2>&1
  if grep -q '^backend af_xdp' "$out"; then XDP_WHY=""; else XDP_WHY=$(grep -m1 'cannot open' "$out"); fi
}
need_xdp() { [ -z "$XDP_WHY" ] || e2e_skip "AF_XDP unavailable: $XDP_WHY"; }

e2e_require_root
setup || e2e_fail "could not create namespaces $NA/$NB with a veth pair"
probe_xdp
[ -z "$XDP_WHY" ] || echo "AF_XDP cases will skip: $XDP_WHY"
e2e_case xdp_rx_intact case_xdp_rx_intact
e2e_case xdp_rx_generic_ipv6 case_xdp_rx_generic_ipv6
e2e_case packet_rx_intact_xdp_tx case_packet_rx_intact_xdp_tx
e2e_case packet_v3_rx_intact case_packet_v3_rx_intact
e2e_case packet_gso_intact case_packet_gso_intact
e2e_case packet_gso_hostile case_packet_gso_hostile
e2e_case xdp_multi_buffer_4k case_xdp_multi_buffer_4k
e2e_case packet_flush_while_held case_packet_flush_while_held
e2e_case xdp_flush_while_held case_xdp_flush_while_held
e2e_case kernel_traffic_passes_while_attached case_kernel_traffic_passes_while_attached
e2e_case xdp_program_dies_with_kill_9 case_xdp_program_dies_with_kill_9
e2e_case auto_falls_back_to_af_packet case_auto_falls_back_to_af_packet
e2e_case umem_fits_memlock_without_cap_ipc_lock case_umem_fits_memlock_without_cap_ipc_lock
e2e_case rates case_rates
e2e_case round_trip case_round_trip
e2e_finish
