#!/usr/bin/env bash
# The Debian package, end to end (docs/operations.md §The package): built by
# tools/package from this build's binaries, installed with apt-get, used
# (the daemon through metaroce-ctl with the service's config file, a stock
# ibv_devices through the installed launcher), upgraded, and purged; a
# file-system diff of /usr /etc /lib /var/lib (apt and dpkg state excluded)
# before install and after purge must be empty.
#
# Installing puts a provider into system paths, where other verbs programs
# on this machine would find it: the package stays installed only for the
# cases that need it and is purged on every exit (trap). Tagged exclusive.
# Needs root; skips with a reason otherwise.
set -u
here=$(cd "$(dirname "$0")" && pwd)
top=${TEST_SRCDIR:+$TEST_SRCDIR/metaroce}
top=${top:-$(cd "$here/../.." && pwd)}
source "$top/tests/lib/e2e.sh"
if [ "$(id -u)" != 0 ] || ! ip netns list >/dev/null 2>&1 || ! command -v apt-get >/dev/null; then
  echo "SKIP: needs root, network namespaces and apt-get"; E2E_SKIPPED=1; e2e_finish; exit 0
fi
if dpkg-query -W -f='${Status}' metaroce 2>/dev/null | grep -q installed; then
  echo "FAIL: a metaroce package is already installed; this test installs and purges its own"
  E2E_FAILED=1; e2e_finish; exit 1
fi
PREFIX=${MROCE_PREFIX:-mroce}
NS=$PREFIX-pkg IF=$PREFIX-pa PEER=$PREFIX-pb DEV=metaroce0
RUN=/run/metaroce/$NS
WORK=$(mktemp -d /tmp/mroce-pkg.XXXXXX)
TRIPLET=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || gcc -print-multiarch)
ARCH=$(dpkg --print-architecture)
DEB1=$WORK/metaroce_0.1.0~test1_$ARCH.deb DEB2=$WORK/metaroce_0.1.0~test2_$ARCH.deb
export DEBIAN_FRONTEND=noninteractive

# Cases run in subshells: whether we installed is kept in a file. (None was
# installed when we started, so any installed metaroce is ours.)
purge() {
  [ -e "$WORK/installed" ] || return 0
  apt-get purge -y -q metaroce > "$WORK/purge.log" 2>&1 || { cat "$WORK/purge.log"; return 1; }
  rm -f "$WORK/installed"
}
cleanup() {
  local pid
  if [ -e "$WORK/svc" ]; then
    systemctl stop "metaroced@$SVC_IF.service" 2>/dev/null
    rm -f "/etc/metaroce/$SVC_IF.conf"; rm -rf "$SVC_RUN"
    ip link del "$SVC_IF" 2>/dev/null
  fi
  pid=$(cat "$RUN/$DEV.pid" 2>/dev/null) && grep -qa "$DEV" "/proc/$pid/cmdline" 2>/dev/null && kill -9 "$pid"
  purge
  ip netns del "$NS" 2>/dev/null
  rm -rf "$RUN"
  [ -e "$WORK/installed" ] || rm -rf "$WORK"  # kept (with its log) if purge failed
}
trap cleanup EXIT

# Every file under the trees a package may touch, except package-manager state.
snapshot() {
  local roots=(/usr /etc /var/lib)
  [ -L /lib ] || roots+=(/lib)
  find "${roots[@]}" -xdev \( -path /var/lib/dpkg -o -path /var/lib/apt -o -path /etc/ld.so.cache \
    -o -path /var/lib/systemd/deb-systemd-helper-enabled \) -prune -o -print | sort
}
in_ns() { ip netns exec "$NS" "$@"; }
ctl() { in_ns /usr/bin/metaroce-ctl --run-dir "$RUN" --sysfs-root "$RUN/sysfs" "$@"; }
EXPECTED=(/usr/sbin/metaroced /usr/bin/metaroce-ctl /usr/bin/metaroce-run
  "/usr/lib/$TRIPLET/libibverbs/libmetaroce-rdmav34.so" /etc/libibverbs.d/metaroce.driver
  "/usr/lib/$TRIPLET/metaroce/libmetaroce-preload.so" "/usr/lib/$TRIPLET/metaroce/metaroce-sysfs-view"
  "/usr/lib/$TRIPLET/wireshark/plugins/metaroce.lua"
  /lib/systemd/system/metaroced@.service /usr/share/man/man8/metaroced.8.gz
  /usr/share/man/man8/metaroce-ctl.8.gz /usr/share/man/man1/metaroce-run.1.gz
  /usr/share/man/man7/metaroce.7.gz)

t_package_builds() {
  local v
  for v in 1 2; do
    "$top/tools/package" --bin "$top" --version "0.1.0~test$v" --out "$WORK" > "$WORK/build$v.log" 2>&1 ||
      { cat "$WORK/build$v.log"; e2e_fail "tools/package failed"; }
  done
  dpkg-deb -I "$DEB1" > "$WORK/info"
  grep -E '^ Depends: .*libc6 .*libibverbs1' "$WORK/info" || e2e_fail "Depends lacks libc6/libibverbs1: $(cat "$WORK/info")"
  dpkg-deb -c "$DEB1" | awk '{print substr($6, 2)}' > "$WORK/contents"
  local f
  for f in "${EXPECTED[@]}"; do grep -qx "$f" "$WORK/contents" || e2e_fail "$f not in the package"; done
  echo "package $(stat -c %s "$DEB1") bytes, installed size $(awk '/Installed-Size/ {print $2}' "$WORK/info") KiB"
}

t_install() {
  snapshot > "$WORK/before"
  local t0 t1
  t0=$(date +%s%N)
  touch "$WORK/installed"
  apt-get install -y -q --no-install-recommends "$DEB1" > "$WORK/install.log" 2>&1 ||
    { cat "$WORK/install.log"; e2e_fail "apt-get install failed"; }
  t1=$(date +%s%N)
  echo "apt-get install: $(( (t1 - t0) / 1000000 )) ms"
  dpkg -L metaroce > "$WORK/listed"
  local f
  for f in "${EXPECTED[@]}"; do
    grep -qx "$f" "$WORK/listed" && [ -e "$f" ] || e2e_fail "$f not installed (dpkg -L)"
  done
  MANPAGER=cat man 8 metaroced 2>/dev/null | grep -q "MetaRoCE soft RDMA NIC daemon" || e2e_fail "man metaroced"
  MANPAGER=cat man 7 metaroce 2>/dev/null | grep -q "NOTIFY_SOCKET" || e2e_fail "man 7 metaroce"
}

t_unit_verifies() {
  # Static checks work without systemd as PID 1.
  systemd-analyze verify "metaroced@$IF.service" > "$WORK/verify" 2>&1 || true
  cat "$WORK/verify"
  ! grep -v -e "^$" -e "sys-subsystem-net-devices" "$WORK/verify" || e2e_fail "systemd-analyze verify complains"
  systemd-analyze security "metaroced@$IF.service" --offline=yes > "$WORK/sec" 2>&1 &&
    grep -E "Overall exposure level" "$WORK/sec" || true
}

t_service_via_ctl_and_installed_launcher() {
  ip netns add "$NS" && ip link add "$IF" netns "$NS" type veth peer name "$PEER" netns "$NS" || return 1
  in_ns ip link set lo up && in_ns ip addr add 10.80.0.1/24 dev "$IF"
  in_ns ip link set "$IF" up && in_ns ip link set "$PEER" up
  if [ "$(cat /proc/1/comm)" = systemd ] && [ -d /run/systemd/system ]; then
    echo "systemd is PID 1, but the unit runs in the root network namespace and this test's" \
         "interface is in $NS: the service is started through metaroce-ctl here too"
  else
    echo "systemd is not PID 1 here (PID 1 is $(cat /proc/1/comm)): the unit is checked statically" \
         "(systemd-analyze verify) and the same config runs through metaroce-ctl"
  fi
  # stdout only: with -j it must be JSON alone (systemctl's words go to stderr).
  ctl -j link add "$DEV" netdev "$IF" --persist --io packet > "$WORK/add" 2> "$WORK/add.err" ||
    { cat "$WORK/add" "$WORK/add.err"; e2e_fail "link add --persist"; }
  cat "$WORK/add" "$WORK/add.err"
  python3 "$top/tests/ops/check_json.py" "$top/docs/operations.md" "link add" < "$WORK/add" ||
    e2e_fail "link add --persist -j lacks documented fields"
  grep -qx "ibdev $DEV" "/etc/metaroce/$IF.conf" && grep -qx "io packet" "/etc/metaroce/$IF.conf" ||
    e2e_fail "/etc/metaroce/$IF.conf: $(cat "/etc/metaroce/$IF.conf")"
  [ -L "/etc/systemd/system/multi-user.target.wants/metaroced@$IF.service" ] || e2e_fail "unit not enabled"
  grep -qa -- "--config" "/proc/$(cat "$RUN/$DEV.pid")/cmdline" || e2e_fail "daemon not started with --config"
  in_ns /usr/bin/metaroce-run --sysfs-root "$RUN/sysfs" ibv_devices > "$WORK/devices" 2>&1
  cat "$WORK/devices"
  grep -Eq "^ +$DEV +" "$WORK/devices" || e2e_fail "ibv_devices through /usr/bin/metaroce-run does not list $DEV"
  # It used the installed provider and interposer, not a tree's.
  in_ns /usr/bin/metaroce-run --sysfs-root "$RUN/sysfs" env > "$WORK/env"
  ! grep -q '^RDMAV_DRIVERS=' "$WORK/env" || e2e_fail "installed launcher set RDMAV_DRIVERS"
  grep -qx "LD_PRELOAD=/usr/lib/$TRIPLET/metaroce/libmetaroce-preload.so" "$WORK/env" || e2e_fail "$(grep LD_PRELOAD "$WORK/env")"
  # ...and its /sys/class view (docs/provider.md "Programs that read /sys directly").
  in_ns /usr/bin/metaroce-run --sysfs-view on --sysfs-root "$RUN/sysfs" ls /sys/class/infiniband > "$WORK/view" 2>&1 ||
    { cat "$WORK/view"; e2e_fail "the installed launcher made no /sys/class view"; }
  grep -qx "$DEV" "$WORK/view" || e2e_fail "/sys/class/infiniband through the installed launcher: $(cat "$WORK/view")"
}

# Where systemd is PID 1: the unit itself, on a veth pair in the root
# namespace that stays down and without addresses (no traffic leaves it):
# started by systemctl, reachable through metaroce-ctl, logging to the
# journal at its levels, stopped. Elsewhere the case says so and skips
# (the service's config ran through metaroce-ctl in the case above).
SVC_IF=$PREFIX-sa SVC_PEER=$PREFIX-sb SVC_RUN=/run/metaroce/$PREFIX-svc
t_unit_started_by_systemd() {
  if [ "$(cat /proc/1/comm)" != systemd ] || [ ! -d /run/systemd/system ]; then
    e2e_skip "systemd is not PID 1 here (PID 1 is $(cat /proc/1/comm)): no unit can be started;" \
      "the same config ran through metaroce-ctl (service_config_via_ctl_installed_launcher_lists_device)"
  fi
  local unit=metaroced@$SVC_IF.service
  ip link add "$SVC_IF" type veth peer name "$SVC_PEER" || return 1
  touch "$WORK/svc"
  printf 'ibdev metaroce9\nio packet\nrun-dir %s\nsysfs-root %s/sysfs\n' "$SVC_RUN" "$SVC_RUN" \
    > "/etc/metaroce/$SVC_IF.conf"
  # Type=notify: start returns once READY=1 came, i.e. the device is published.
  timeout 60 systemctl start "$unit" || { systemctl status "$unit"; e2e_fail "systemctl start $unit"; }
  systemctl is-active -q "$unit" || e2e_fail "$unit not active"
  /usr/bin/metaroce-ctl --run-dir "$SVC_RUN" --sysfs-root "$SVC_RUN/sysfs" -j link show metaroce9 |
    grep -q '"daemon":"running"' || e2e_fail "metaroce9 of $unit does not answer"
  journalctl -u "$unit" -p info -o cat | grep -q '^metaroce9 up on ' || e2e_fail "no info line in the journal"
  ! journalctl -u "$unit" -p warning -o cat | grep -q '^metaroce9 up on ' ||
    e2e_fail "an info line passed journalctl -p warning: priorities not set"
  timeout 60 systemctl stop "$unit" || e2e_fail "systemctl stop $unit"
  ! systemctl is-active -q "$unit" || e2e_fail "$unit still active after stop"
  rm -f "/etc/metaroce/$SVC_IF.conf"; rm -rf "$SVC_RUN"
  ip link del "$SVC_IF"
}

t_tree_launcher_ignores_installed_provider() {
  local tree_provider
  tree_provider=$(readlink -f "$top/provider/libmetaroce-rdmav34.so")
  in_ns env LD_DEBUG=files "$top/kmod-shim/launcher/metaroce-run" --sysfs-root "$RUN/sysfs" ibv_devices \
    > "$WORK/ld" 2>&1 || { cat "$WORK/ld"; e2e_fail "ibv_devices through the tree's launcher failed"; }
  local first
  first=$(grep -o 'calling init: [^ ]*libmetaroce-rdmav34.so' "$WORK/ld" | head -1)
  echo "first provider initialised: ${first#calling init: }"
  [ "${first#calling init: }" = "$tree_provider" ] || e2e_fail "the tree's launcher used ${first:-no provider}, not $tree_provider"
}

t_upgrade_keeps_config() {
  apt-get install -y -q --no-install-recommends "$DEB2" > "$WORK/upgrade.log" 2>&1 ||
    { cat "$WORK/upgrade.log"; e2e_fail "upgrade failed"; }
  [ "$(dpkg-query -W -f='${Version}' metaroce)" = "0.1.0~test2" ] || e2e_fail "version after upgrade"
  grep -qx "ibdev $DEV" "/etc/metaroce/$IF.conf" || e2e_fail "upgrade lost /etc/metaroce/$IF.conf"
  ctl -j link show "$DEV" | grep -q '"daemon":"running"' || e2e_fail "daemon gone after upgrade"
}

t_purge_leaves_nothing() {
  ctl link delete "$DEV" || e2e_fail "link delete"
  purge || e2e_fail "apt-get purge failed"
  ! dpkg -L metaroce > /dev/null 2>&1 || e2e_fail "dpkg still lists metaroce"
  snapshot > "$WORK/after"
  diff "$WORK/before" "$WORK/after" > "$WORK/diff" && { echo "file-system diff: empty"; return 0; }
  cat "$WORK/diff"; e2e_fail "purge left the file system different"
}

e2e_case package_builds_with_depends t_package_builds
e2e_case apt_install_clean t_install
e2e_case unit_verifies_statically t_unit_verifies
e2e_case service_config_via_ctl_installed_launcher_lists_device t_service_via_ctl_and_installed_launcher
e2e_case unit_started_by_systemd_reachable t_unit_started_by_systemd
e2e_case tree_launcher_ignores_installed_provider t_tree_launcher_ignores_installed_provider
e2e_case upgrade_keeps_config_and_daemon t_upgrade_keeps_config
e2e_case purge_leaves_no_file t_purge_leaves_nothing
e2e_finish
