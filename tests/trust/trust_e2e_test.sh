#!/usr/bin/env bash
# Trust end to end: what a root metaroced may do to a client's memory
# (docs/daemon.md §DMA), with real daemons in two namespaces
# (tests/lib/netns.sh) and mroce_trust as the clients:
#   - READ freshness: the target changes its buffer with CPU stores and the
#     peer's RDMA READs, FETCH_ADD and CMP_SWAP always act on the latest
#     value; across hosts and with both processes on one device, over AF_XDP
#     and AF_PACKET;
#   - exec after connect: a client registers an MR, then execs (a) another
#     image of a program and (b) a setuid-root program, keeping the control
#     socket open; the daemon refuses the peer's READ and WRITE into that MR:
#     the first access finds the address space gone (dma_client_gone), and
#     from then on the QP behaves as destroyed, its packets dropped
#     unanswered (rx_drop_owner_gone); the new
#     image finds its memory at that address untouched;
#   - userfaultfd after REG_MR, never served: the peer's READ and WRITE fail
#     (the daemon refuses them) and another client's traffic through the
#     same daemon completes meanwhile;
#   - REG_MR of an unmapped range or of a read-only mapping with write
#     access fails with EFAULT/EACCES and the daemon's reason.
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
PROVIDER=$(find_file provider/libmetaroce-rdmav34.so) || exit 1
TRUST=$(find_file tests/trust/mroce_trust) || exit 1
CTL=$(find_file tools/metaroce-ctl) || exit 1

# An ASan provider in a non-ASan process needs the runtime preloaded (as
# tests/daemon does); mroce_trust itself is built with the same config.
TOOL_ENV=(RDMAV_DRIVERS="${PROVIDER%-rdmav34.so}")
asan=$(ldd "$PROVIDER" | awk '/libasan/ {print $3; exit}')
if [ -n "$asan" ]; then
  TOOL_ENV+=(LD_PRELOAD="$asan" ASAN_OPTIONS=detect_leaks=0:abort_on_error=1)
  export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1
fi
in_a() { mroce_in_a env "${TOOL_ENV[@]}" timeout 180 "$@"; }
in_b() { mroce_in_b env "${TOOL_ENV[@]}" timeout 180 "$@"; }

source "$top/tests/lib/netns.sh"
if [ "$(id -u)" != 0 ] || ! ip netns list >/dev/null 2>&1; then
  echo "SKIP: needs root and network namespaces"; E2E_SKIPPED=1; e2e_finish; exit 0
fi
# World-readable copies: the setuid case runs a client as nobody, who cannot
# reach Bazel's runfiles under /root.
WORK=$(mktemp -d /tmp/mroce-trust-e2e.XXXXXX)
chmod 755 "$WORK"
BGPIDS=()
cleanup() {
  local p
  for p in "${BGPIDS[@]}"; do kill -9 "$p" 2>/dev/null; done
  mroce_net_down >/dev/null 2>&1
  rm -rf "$WORK"
}
trap cleanup EXIT

# ---- helpers ----

NET=none NET_WHY=
net_up() {  # xdp|packet
  NET=none
  if mroce_net_up --io "$1" >"$WORK/net_up.log" 2>&1; then
    NET=$1; return 0
  fi
  cat "$WORK/net_up.log"
  if [ "$1" = xdp ] && grep -qiE "xdp|xsk|bpf" "$WORK/net_up.log"; then
    NET_WHY="AF_XDP unavailable here (metaroced --io xdp did not start; log above)"
  else
    NET_WHY="network setup with --io $1 failed (log above)"; NET=failed
  fi
  mroce_net_down >/dev/null 2>&1
  return 1
}
need_net() {  # xdp|packet
  [ "$NET" = "$1" ] && return 0
  [ "$NET" = failed ] && e2e_fail "$NET_WHY"
  e2e_skip "$NET_WHY"
}

counter() {  # a|b NAME: one device counter
  if [ "$1" = a ]; then
    mroce_in_a "$CTL" --sysfs-root "$MROCE_SYSFS_A" stat -a "$MROCE_DEV_A"
  else
    mroce_in_b "$CTL" --sysfs-root "$MROCE_SYSFS_B" stat -a "$MROCE_DEV_B"
  fi | awk -v n="$2" '$1 == n {print $2; found=1} END {if (!found) print "missing"}'
}
daemon_log_a() { tail -20 "$MROCE_RUN_A/daemon.log"; }

# A server role in A (started first, in the background) and a client role
# (in B, or in A for one host); both must exit 0. Logs in $WORK/NAME.*.
PORT=18800
pair() {  # name where(a|b) server-role client-role [server-args...]
  local name=$1 where=$2 srole=$3 crole=$4 spid rc=0 src=0 peer=$MROCE_IP_A dev=$MROCE_DEV_B
  shift 4
  PORT=$((PORT + 1))
  in_a "$TRUST" "$srole" --port "$PORT" --dev "$MROCE_DEV_A" "$@" >"$WORK/$name.server.log" 2>&1 &
  spid=$!; e2e_track_pid "$spid"
  if [ "$where" = a ]; then
    in_a "$TRUST" "$crole" 127.0.0.1 --port "$PORT" --dev "$MROCE_DEV_A" \
      ${CLIENT_ARGS:-} >"$WORK/$name.client.log" 2>&1 || rc=$?
  else
    in_b "$TRUST" "$crole" "$peer" --port "$PORT" --dev "$dev" \
      ${CLIENT_ARGS:-} >"$WORK/$name.client.log" 2>&1 || rc=$?
  fi
  wait "$spid" || src=$?
  echo "== server ($srole)"; cat "$WORK/$name.server.log"
  echo "== client ($crole)"; cat "$WORK/$name.client.log"
  [ $rc = 0 ] && [ $src = 0 ] || e2e_fail "$name: client exit $rc, server exit $src"
}

# ---- cases ----

t_read_fresh() {  # io where
  need_net "$1"
  pair "fresh_$1_$2" "$2" target reader
  grep -q "every READ and atomic saw the latest store" "$WORK/fresh_$1_$2.client.log" ||
    e2e_fail "the reader did not report success"
}

# exec after REG_MR: the daemon must not reach the new image's memory.
t_exec() {  # plain|setuid
  need_net packet
  # The client is a plain copy (a setuid one would run in secure mode, where
  # libibverbs ignores RDMAV_DRIVERS and SYSFS_PATH); the victim is a copy
  # made setuid-root in the setuid case.
  local client=$WORK/client victim=$WORK/victim runner=() before after
  cp "$TRUST" "$client"; cp "$TRUST" "$victim"
  chmod 755 "$client" "$victim"
  if [ "$1" = setuid ]; then
    # The client runs as nobody and execs a setuid-root copy: the new image
    # has euid 0, which a pid-based DMA would write into for nobody.
    cp "$PROVIDER" "$WORK/"
    chmod 644 "$WORK/$(basename "$PROVIDER")"
    chown root:root "$victim"; chmod 4755 "$victim"
    command -v setpriv >/dev/null || e2e_skip "setpriv (util-linux) missing"
    runner=(setpriv --reuid=65534 --regid=65534 --clear-groups --)
  fi
  before=$(counter a dma_client_gone); local dropped0; dropped0=$(counter a rx_drop_owner_gone)
  PORT=$((PORT + 1))
  local spid rc=0 src=0 drivers=${PROVIDER%-rdmav34.so}
  [ "$1" = setuid ] && drivers=$WORK/$(basename "${PROVIDER%-rdmav34.so}")
  mroce_in_a env "${TOOL_ENV[@]}" RDMAV_DRIVERS="$drivers" timeout 180 "${runner[@]}" \
    "$client" exec-target --port "$PORT" --dev "$MROCE_DEV_A" --victim "$victim" \
    >"$WORK/exec.server.log" 2>&1 &
  spid=$!; e2e_track_pid "$spid"
  in_b "$TRUST" attacker "$MROCE_IP_A" --port "$PORT" --dev "$MROCE_DEV_B" \
    >"$WORK/exec.client.log" 2>&1 || rc=$?
  wait "$spid" || src=$?
  after=$(counter a dma_client_gone); local dropped; dropped=$(counter a rx_drop_owner_gone)
  echo "== exec-target/victim"; cat "$WORK/exec.server.log"
  echo "== attacker"; cat "$WORK/exec.client.log"
  echo "daemon a: dma_client_gone $before -> $after, rx_drop_owner_gone $dropped0 -> $dropped"
  [ $rc = 0 ] && [ $src = 0 ] || e2e_fail "exec $1: attacker exit $rc, victim exit $src"
  grep -q "victim: my memory is untouched" "$WORK/exec.server.log" || e2e_fail "no report from the new image"
  if [ "$1" = setuid ]; then
    grep -q "victim: pid [0-9]* euid 0 " "$WORK/exec.server.log" || e2e_fail "the victim did not run with euid 0"
    grep -q "uid 65534 execs" "$WORK/exec.server.log" || e2e_fail "the client did not run as nobody"
  fi
  [ "$after" -ge $((before + 1)) ] 2>/dev/null ||
    e2e_fail "dma_client_gone went $before -> $after, expected +1 (the first access refused)"
  [ "$dropped" -gt "$dropped0" ] 2>/dev/null ||
    e2e_fail "rx_drop_owner_gone went $dropped0 -> $dropped: the gone client's QP still answered"
}

# userfaultfd registered after REG_MR and never served.
t_uffd() {
  need_net packet
  local fifo=$WORK/hold spid rc=0 src=0 faults_before faults_after wfaults_before wfaults_after
  mkfifo "$fifo"
  faults_before=$(counter a dma_faults)
  PORT=$((PORT + 1))
  local port=$PORT
  in_a "$TRUST" uffd-target --port "$port" --dev "$MROCE_DEV_A" >"$WORK/uffd.server.log" 2>&1 &
  spid=$!; e2e_track_pid "$spid"; BGPIDS+=("$spid")
  wfaults_before=$(counter a dma_write_faults)
  in_b "$TRUST" attacker "$MROCE_IP_A" --port "$port" --dev "$MROCE_DEV_B" --hold "$fifo" \
    >"$WORK/uffd.client.log" 2>&1 &
  local apid=$!; e2e_track_pid "$apid"; BGPIDS+=("$apid")
  # Wait (deadline, no fixed sleep) for the attack to be over: the attacker
  # then holds, with the MR still under the unserved userfaultfd.
  local t0=$SECONDS
  until grep -q "attacker: holding" "$WORK/uffd.client.log"; do
    kill -0 "$apid" 2>/dev/null || break
    [ $((SECONDS - t0)) -lt 120 ] || break
    sleep 0.1
  done
  # Another client of the same daemon: exact values, while the bad one holds.
  local other=0
  ( pair uffd_other_client b target reader ) || other=1
  echo x > "$fifo"
  wait "$apid" || rc=$?
  wait "$spid" || src=$?
  faults_after=$(counter a dma_faults)
  wfaults_after=$(counter a dma_write_faults)
  echo "== uffd-target"; cat "$WORK/uffd.server.log"
  echo "== attacker"; cat "$WORK/uffd.client.log"
  [ $other = 0 ] || e2e_fail "the other client's traffic failed while the bad client held (daemon stalled?)"
  echo "daemon a: dma_faults $faults_before -> $faults_after"
  [ $rc = 0 ] && [ $src = 0 ] || e2e_fail "uffd: attacker exit $rc, target exit $src"
  [ "$faults_after" -ge $((faults_before + 2)) ] 2>/dev/null ||
    e2e_fail "dma_faults went $faults_before -> $faults_after, expected +2"
  [ "$wfaults_after" -ge $((wfaults_before + 1)) ] 2>/dev/null ||
    e2e_fail "dma_write_faults went $wfaults_before -> $wfaults_after, expected +1"
}

t_reg_mr() {
  need_net packet
  local out rc=0 before after
  before=$(counter a reg_mr_refused)
  out=$(in_a env METAROCE_DEBUG=1 "$TRUST" reg-mr --dev "$MROCE_DEV_A" 2>&1) || rc=$?
  after=$(counter a reg_mr_refused)
  echo "$out"
  [ $rc = 0 ] || e2e_fail "reg-mr exit $rc"
  echo "$out" | grep -q "Bad address: address 0x[0-9a-f]* of the MR is not mapped in the client" ||
    e2e_fail "no EFAULT reason for the unmapped range"
  [ "$(echo "$out" | grep -c "Permission denied: mapping at 0x[0-9a-f]*-0x[0-9a-f]* is not writable, and the MR asks for write access")" = 2 ] ||
    e2e_fail "no EACCES reason (twice) for the read-only mapping"
  [ "$after" = $((before + 3)) ] || e2e_fail "reg_mr_refused went $before -> $after, expected +3"
}

# ---- run ----

t_fresh_xdp_hosts() { t_read_fresh xdp b; }
t_fresh_xdp_one() { t_read_fresh xdp a; }
t_fresh_packet_hosts() { t_read_fresh packet b; }
t_fresh_packet_one() { t_read_fresh packet a; }
t_exec_plain() { t_exec plain; }
t_exec_setuid() { t_exec setuid; }

net_up xdp || true
e2e_case read_fresh_across_hosts_xdp t_fresh_xdp_hosts
e2e_case read_fresh_one_host_xdp t_fresh_xdp_one
mroce_net_down >/dev/null 2>&1

net_up packet || true
e2e_case read_fresh_across_hosts_packet t_fresh_packet_hosts
e2e_case read_fresh_one_host_packet t_fresh_packet_one
e2e_case reg_mr_checks_mapping_and_permissions t_reg_mr
e2e_case exec_after_connect_new_image_untouched t_exec_plain
e2e_case exec_setuid_after_connect_new_image_untouched t_exec_setuid
e2e_case userfaultfd_mr_does_not_stall_the_daemon t_uffd
mroce_net_down >/dev/null 2>&1

e2e_finish
