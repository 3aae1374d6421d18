#!/usr/bin/env bash
# End-to-end: programs that read the standard sysfs paths directly (UCX and
# NCCL read /sys/class/infiniband/<dev>/ports/1/gid_attrs/types/N, device/net)
# see the published tree when run through metaroce-run, and nothing changes
# for anything run without it (kmod-shim/launcher/sysfs_view.h). Two
# namespaces from tests/lib/netns.sh; needs root; skips with a reason otherwise.
set -u
here=$(cd "$(dirname "$0")" && pwd)
top=${TEST_SRCDIR:+$TEST_SRCDIR/metaroce}
top=${top:-$(cd "$here/../.." && pwd)}
source "$top/tests/lib/e2e.sh"
source "$top/tests/lib/netns.sh"

find_file() {  # rel-path: runfiles first, then the tree's bazel-bin
  local f
  for f in "$top/$1" "$top/.bazel/bin/$1"; do [ -e "$f" ] && { readlink -f "$f"; return 0; }; done
  echo "$1 not built" >&2; return 1
}
if [ "$(id -u)" != 0 ] || ! command -v ibv_devinfo >/dev/null || ! command -v setpriv >/dev/null; then
  echo "SKIP: needs root, ibverbs-utils and setpriv"; E2E_SKIPPED=1; e2e_finish; exit 0
fi
# Copies every reader can open: the unprivileged cases run as nobody, who
# cannot enter Bazel's output tree under /root.
BIN=$E2E_RUN_DIR/sysfs-view-bin
mkdir -p "$BIN" && chmod 755 "$E2E_RUN_DIR" "$BIN"
for f in provider/libmetaroce-rdmav34.so kmod-shim/launcher/libmetaroce-preload.so \
         kmod-shim/launcher/metaroce-sysfs-view; do
  cp "$(find_file "$f")" "$BIN/" || { E2E_FAILED=1; e2e_finish; exit 1; }
done
cp "$top/kmod-shim/launcher/metaroce-run" "$BIN/" && chmod -R a+rX "$BIN"
export METAROCE_PROVIDER=$BIN/libmetaroce-rdmav34.so METAROCE_PRELOAD=$BIN/libmetaroce-preload.so
export METAROCE_SYSFS_VIEW=$BIN/metaroce-sysfs-view
LAUNCHER=$BIN/metaroce-run
asan=$(ldd "$METAROCE_PROVIDER" | awk '/libasan/ {print $3; exit}')
[ -n "$asan" ] && export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1

trap 'mroce_net_down >/dev/null 2>&1' EXIT
mroce_net_up ${MROCE_E2E_IO:+--io $MROCE_E2E_IO} || { echo "mroce_net_up failed"; E2E_FAILED=1; e2e_finish; exit 1; }
IB=/sys/class/infiniband/$MROCE_DEV_A
PORT=$IB/ports/1

# In namespace A without SYSFS_PATH, so only the standard paths can help.
in_a() { ip netns exec "$MROCE_NS_A" env -u SYSFS_PATH "$@"; }
view_a() { in_a timeout 60 "$LAUNCHER" --sysfs-root "$MROCE_SYSFS_A" "$@"; }

# Every GID slot typed RoCE v2, the GIDs as published, device/net the netdev.
check_tree() {  # runs inside the view
  local i t mac
  for i in $(seq 0 15); do
    t=$(cat "$PORT/gid_attrs/types/$i") || return 1
    [ "$t" = "RoCE v2" ] || { echo "types/$i is '$t'"; return 1; }
  done
  grep -qx "0000:0000:0000:0000:0000:ffff:0a4d:0001" "$PORT/gids/1" || { echo "gids/1: $(cat "$PORT/gids/1")"; return 1; }
  grep -qx "$MROCE_IF_A" "$PORT/gid_attrs/ndevs/1" || { echo "ndevs/1: $(cat "$PORT/gid_attrs/ndevs/1")"; return 1; }
  mac=$(cat "$IB/device/net/$MROCE_IF_A/address") || return 1
  [ "$mac" = "$(cat "/sys/class/net/$MROCE_IF_A/address")" ] || { echo "device/net is not the netdev"; return 1; }
  ls /sys/class/infiniband_verbs | grep -qx uverbs0 || { echo "no uverbs0"; return 1; }
}
export -f check_tree; export IB PORT MROCE_IF_A

t_view_shows_tree() {
  view_a --sysfs-view on bash -c check_tree || e2e_fail "the view does not show the published tree"
  # The host's classes are still there and live.
  view_a --sysfs-view on cat "/sys/class/net/$MROCE_IF_A/mtu" | grep -qx 1500 || e2e_fail "/sys/class/net lost in the view"
  # The program (not the helper) gets the completion-channel interposer.
  view_a --sysfs-view on sh -c 'echo "$LD_PRELOAD"' | grep -q "libmetaroce-preload.so" ||
    e2e_fail "the interposer is not preloaded in the view"
  local out
  out=$(view_a --sysfs-view on sh -c "touch $PORT/x 2>&1; touch /sys/class/x 2>&1" || true)
  echo "$out"
  [ "$(grep -c 'Read-only file system' <<<"$out")" = 2 ] || e2e_fail "the view is writable"
}

t_stock_tool_through_view() {
  local out
  # Without SYSFS_PATH inside the view: only the standard paths can help.
  out=$(view_a --sysfs-view on env -u SYSFS_PATH ibv_devinfo -v -d "$MROCE_DEV_A") ||
    e2e_fail "ibv_devinfo failed in the view"
  grep -E "GID\[" <<<"$out"
  grep -q "GID\[  0\]:.*fe80::.*RoCE v2" <<<"$out" || e2e_fail "no RoCE v2 GID 0"
  grep -q "::ffff:$MROCE_IP_A, RoCE v2" <<<"$out" || e2e_fail "no RoCE v2 IPv4 GID"
}

# The launcher around `ip netns exec` (tools/demo, tools/bench): ip remounts
# /sys for the namespace, which drops the view; SYSFS_PATH still finds the
# device.
t_launcher_around_ip_netns_exec() {
  local out
  out=$(env -u SYSFS_PATH timeout 60 "$LAUNCHER" --sysfs-root "$MROCE_SYSFS_A" \
        ip netns exec "$MROCE_NS_A" ibv_devices 2>&1) || { echo "$out"; e2e_fail "ibv_devices failed"; }
  echo "$out"
  grep -q "$MROCE_DEV_A" <<<"$out" || e2e_fail "ibv_devices under ip netns exec does not list $MROCE_DEV_A"
}

# Without the launcher nothing changes: no class, no mount, no device.
t_host_unchanged() {
  view_a --sysfs-view on true || e2e_fail "launcher failed"
  [ ! -e /sys/class/infiniband ] || e2e_fail "the host has /sys/class/infiniband"
  in_a test ! -e /sys/class/infiniband || e2e_fail "namespace A has /sys/class/infiniband without the launcher"
  ! grep -q metaroce-sysfs-view /proc/self/mountinfo || e2e_fail "a view mount leaked to the host"
  ! in_a grep -q metaroce-sysfs-view /proc/self/mountinfo || e2e_fail "a view mount leaked to namespace A"
  in_a ibv_devices | grep -q "$MROCE_DEV_A" && e2e_fail "libibverbs found the device without SYSFS_PATH or the view"
  return 0
}

t_unprivileged_user_namespace() {
  local out
  out=$(in_a setpriv --reuid=65534 --regid=65534 --clear-groups "$LAUNCHER" --sysfs-view on \
        --sysfs-root "$MROCE_SYSFS_A" bash -c 'id -u; check_tree && ibv_devices' 2>&1) || { echo "$out"; e2e_fail "the view as nobody failed"; }
  echo "$out"
  grep -qx 65534 <<<"$out" || e2e_fail "the program did not keep its uid"
  grep -q "$MROCE_DEV_A" <<<"$out" || e2e_fail "ibv_devices as nobody did not list $MROCE_DEV_A"
}

# No privilege and no user namespaces (user.max_user_namespaces=0 in a user
# namespace of our own, so the host's setting is untouched): 'on' fails with
# the reason, 'auto' warns and runs the program with SYSFS_PATH.
t_no_user_namespaces() {
  local out rc=0
  out=$(in_a unshare --user --map-root-user sh -c "echo 0 > /proc/sys/user/max_user_namespaces &&
        setpriv --inh-caps=-all --bounding-set=-all $LAUNCHER --sysfs-view on --sysfs-root $MROCE_SYSFS_A true" 2>&1) || rc=$?
  echo "$out"
  [ $rc = 1 ] || e2e_fail "--sysfs-view on exited $rc, not 1"
  grep -q "cannot show the devices at /sys/class/infiniband: no CAP_SYS_ADMIN, and unshare(CLONE_NEWUSER).*user namespaces are disabled" <<<"$out" ||
    e2e_fail "no reason given"
  out=$(in_a unshare --user --map-root-user sh -c "echo 0 > /proc/sys/user/max_user_namespaces &&
        setpriv --inh-caps=-all --bounding-set=-all $LAUNCHER --sysfs-root $MROCE_SYSFS_A sh -c 'echo SYSFS_PATH=\$SYSFS_PATH; ibv_devices'" 2>&1) ||
    { echo "$out"; e2e_fail "auto did not run the program"; }
  echo "$out"
  grep -q "warning: no /sys/class/infiniband view" <<<"$out" || e2e_fail "auto did not warn"
  grep -q "SYSFS_PATH=$MROCE_SYSFS_A" <<<"$out" || e2e_fail "auto did not fall back to SYSFS_PATH"
  grep -q "$MROCE_DEV_A" <<<"$out" || e2e_fail "libibverbs did not find the device through SYSFS_PATH"
}

# The view binds the published class directories, not a snapshot: a daemon
# that restarts (and republishes) while a program runs shows at once.
t_view_follows_republish() {
  local ready=$E2E_RUN_DIR/view.ready go=$E2E_RUN_DIR/view.go pid guid
  rm -f "$ready" "$go"
  # bash throughout: dash drops the exported check_tree from the environment.
  view_a --sysfs-view on bash -c "cat $IB/node_guid > $ready; while [ ! -e $go ]; do sleep 0.05; done; check_tree" &
  pid=$!; e2e_track_pid "$pid"
  wait_for 30 test -s "$ready" || e2e_fail "the program never started"
  mroce_daemon_restart a || e2e_fail "daemon restart failed"
  wait_for 30 grep -q "$MROCE_DEV_A up on" "$MROCE_RUN_A/daemon.log" || e2e_fail "the new daemon never published"
  touch "$go"
  wait "$pid" || e2e_fail "the view lost the tree across a daemon restart"
}

# UCX 1.13 reads every GID's type from /sys/class/infiniband itself (and
# takes a missing file for RoCE v1). Its transports do not open on
# metaroce yet (no SRQ/UD QPs), but it reads the types first: through the
# launcher the opens succeed, without the view they fail.
t_ucx_reads_gid_types() {
  command -v ucx_info >/dev/null && command -v strace >/dev/null || e2e_skip "needs ucx-utils and strace (tools/setup)"
  local types=$PORT/gid_attrs/types/ on off
  on=$(view_a --sysfs-view on strace -f -e trace=openat -e signal=none ucx_info -d 2>&1 | grep -F "\"$types") || true
  off=$(view_a --sysfs-view off strace -f -e trace=openat -e signal=none ucx_info -d 2>&1 | grep -F "\"$types") || true
  echo "through the view: $(grep -c ' = [0-9]' <<<"$on") of $(grep -c . <<<"$on") opens of $types* succeeded"
  echo "without it:       $(grep -c ' = [0-9]' <<<"$off") of $(grep -c . <<<"$off") succeeded"
  [ -n "$on" ] || e2e_fail "UCX never read $types* (did it find $MROCE_DEV_A?)"
  ! grep -q ENOENT <<<"$on" || e2e_fail "UCX found no GID type through the view: $(grep -m1 ENOENT <<<"$on")"
  grep -q ENOENT <<<"$off" || e2e_fail "without the view UCX found the types: the case does not test the view"
}

e2e_case sysfs_view_shows_the_published_tree t_view_shows_tree
e2e_case sysfs_view_stock_ibv_devinfo_without_sysfs_path t_stock_tool_through_view
e2e_case sysfs_view_launcher_around_ip_netns_exec t_launcher_around_ip_netns_exec
e2e_case sysfs_view_host_unchanged_without_launcher t_host_unchanged
e2e_case sysfs_view_unprivileged_user_namespace t_unprivileged_user_namespace
e2e_case sysfs_view_no_user_namespaces_clear_message t_no_user_namespaces
e2e_case sysfs_view_follows_a_daemon_restart t_view_follows_republish
e2e_case sysfs_view_ucx_reads_gid_types t_ucx_reads_gid_types
e2e_finish
