#!/usr/bin/env bash
# The conformance suite (tools/conformance, docs/conformance.md) against the
# soft NIC: metaroced in namespace A is the device under test, namespace B is
# a bare host where mroce-conform plays the remote peer on a raw socket.
#   soft NIC over AF_PACKET, IPv4        every MUST case passes
#   soft NIC over AF_XDP, IPv6           every MUST case passes
#   metaroced --violate ...              exactly the cases citing the broken rules fail
# MROCE_CONFORM_DAEMON_ARGS adds daemon options to every run
# (conformance_hw_e2e_test: "--backend hw --hw-device model", the device
# model). Needs root; skips otherwise.
set -u
here=$(cd "$(dirname "$0")" && pwd)
top=${TEST_SRCDIR:+$TEST_SRCDIR/metaroce}
top=${top:-$(cd "$here/../.." && pwd)}
source "$top/tests/lib/e2e.sh"
source "$top/tests/lib/netns.sh"

find_file() {  # rel-path: runfiles first, then the tree's bazel-bin
  local f
  for f in "$top/$1" "$top/.bazel/bin/$1"; do [ -e "$f" ] && { readlink -f "$f"; return 0; }; done
  echo "conformance_e2e_test: $1 not built" >&2
  return 1
}
if [ "$(id -u)" != 0 ]; then
  echo "SKIP: needs root (namespaces, veth, raw sockets)"; E2E_SKIPPED=1; e2e_finish; exit 0
fi
CONFORM=$(find_file tools/conformance/mroce-conform) || exit 1
[ -n "${MROCE_CONFORM_DAEMON_ARGS:-}" ] && echo "daemon options for every run: $MROCE_CONFORM_DAEMON_ARGS"
export METAROCE_PROVIDER=$(find_file provider/libmetaroce-rdmav34.so) || exit 1
export METAROCE_PRELOAD=$(find_file kmod-shim/launcher/libmetaroce-preload.so) || exit 1
LAUNCHER=$top/kmod-shim/launcher/metaroce-run
trap 'mroce_net_down >/dev/null 2>&1' EXIT

# The rules the broken DUT breaks, and the requirement tag each one is.
VIOLATE=ack-without-sack,wrong-nack-code,no-probe-reply
VIOLATED_TAGS=R3.7-1,R3.8-2,R8-1

# conform NAME IO [--ipv6] [mroce-conform options...]: one run of the suite
# against a fresh daemon; its report lands in $E2E_RUN_DIR/NAME.{json,txt}.
conform() {
  local name=$1 io=$2 v6=; shift 2
  [ "${1:-}" = --ipv6 ] && { v6=--ipv6; shift; }
  MROCE_DAEMONS=a MROCE_DAEMON_ARGS="${MROCE_CONFORM_DAEMON_ARGS:-} ${DUT_ARGS:-}" \
    mroce_net_up --io "$io" $v6 || {
      [ "$io" = xdp ] && e2e_skip "metaroced --io xdp did not come up here (AF_XDP unavailable?)"
      e2e_fail "mroce_net_up failed"; }
  local rc=0
  mroce_in_a timeout 900 "$LAUNCHER" --sysfs-root "$MROCE_SYSFS_A" "$CONFORM" run \
    --peer-if "$MROCE_IF_B" --peer-netns "$MROCE_NS_B" $v6 \
    --json "$E2E_RUN_DIR/$name.json" --table "$E2E_RUN_DIR/$name.txt" \
    ${MROCE_CONFORM_CASES:+--cases "$MROCE_CONFORM_CASES"} "$@" >/dev/null || rc=$?
  cat "$E2E_RUN_DIR/$name.txt" 2>/dev/null
  grep -q '"level"' "$E2E_RUN_DIR/$name.json" || e2e_fail "$name: no JSON report"
  mroce_net_down >/dev/null 2>&1
  return $rc
}

# Every MUST passes; a MUST may skip only for the reason given (the other
# IP family's rules, or CM while the daemon has no connection manager), or
# one matching MROCE_CONFORM_SKIP_OK (a regex: conformance_hw_e2e_test's
# device model has no UD or UC QPs).
musts_pass() {  # name
  local bad
  bad=$(python3 - "$E2E_RUN_DIR/$1.json" "${MROCE_CONFORM_SKIP_OK:-}" <<'PY'
import json, re, sys
r = json.load(open(sys.argv[1]))
ok = sys.argv[2]
for c in r["cases"]:
    if c["level"] != "MUST" or c["verdict"] == "pass": continue
    if c["verdict"] == "skip" and ("IP" in c["reason"] or "connection manager" in c["reason"]): continue
    if c["verdict"] == "skip" and ok and re.search(ok, c["reason"]): continue
    print(c["id"], c["verdict"], c["reason"])
PY
)
  [ -z "$bad" ] || e2e_fail "$1: MUST cases not passing: $bad"
  grep -E '^(MUST|SHOULD|Conformance)' "$E2E_RUN_DIR/$1.txt"
}

t_soft_nic_packet_ipv4() {
  conform soft_packet_v4 packet || e2e_fail "the soft NIC failed a MUST over AF_PACKET"
  musts_pass soft_packet_v4
}
t_soft_nic_xdp_ipv6() {
  conform soft_xdp_v6 xdp --ipv6 || e2e_fail "the soft NIC failed a MUST over AF_XDP/IPv6"
  musts_pass soft_xdp_v6
}
# The broken DUT fails exactly the cases citing the rules it breaks
# (mroce-conform --expect-failing compares the two sets), and the daemon
# said at start what it breaks.
t_broken_dut_fails_exactly_its_rules() {
  DUT_ARGS="--violate $VIOLATE" conform broken packet --expect-failing "$VIOLATED_TAGS" ||
    e2e_fail "the failing cases are not exactly those citing $VIOLATED_TAGS"
  python3 - "$E2E_RUN_DIR/broken.json" "$VIOLATED_TAGS" <<'PY' || e2e_fail "broken DUT: report check"
import json, sys
r = json.load(open(sys.argv[1])); tags = set(sys.argv[2].split(","))
failed = {c["id"] for c in r["cases"] if c["verdict"] == "fail"}
citing = {c["id"] for c in r["cases"] if tags & set(c["cites"])}
assert failed == citing and failed, (failed, citing)
assert r["level"] == "none", r["level"]
print("broken DUT failed exactly:", " ".join(sorted(failed)))
PY
}

# MROCE_CONFORM_RUNS picks runs (default all three); MROCE_CONFORM_CASES
# (ID,..) runs only those cases (for working on a few).
runs=" ${MROCE_CONFORM_RUNS:-packet_ipv4 xdp_ipv6 broken_dut} "
[[ $runs == *" packet_ipv4 "* ]] && e2e_case soft_nic_packet_ipv4 t_soft_nic_packet_ipv4
[[ $runs == *" xdp_ipv6 "* ]] && e2e_case soft_nic_xdp_ipv6 t_soft_nic_xdp_ipv6
[[ $runs == *" broken_dut "* ]] && e2e_case broken_dut_fails_exactly_its_rules t_broken_dut_fails_exactly_its_rules
e2e_finish
