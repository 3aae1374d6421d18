#!/usr/bin/env bash
# NetlinkMonitor in namespaces: mroce-nla-PID (va, 10.78.0.1/24, monitored)
# and mroce-nlb-PID (vb, 10.78.0.2/24, the neighbour). Each doctest case of
# netlink_monitor_ns_test runs as one e2e case inside mroce-nla-PID.
set -u
export PATH=$PATH:/usr/sbin:/sbin  # capsh, ip (Bazel's strict action env has only /bin:/usr/bin)
. tests/lib/e2e.sh
T=$(pwd)/tests/net/netlink_monitor_ns_test
NA=mroce-nla-$$; NB=mroce-nlb-$$
cleanup() { ip netns del "$NA" 2>/dev/null; ip netns del "$NB" 2>/dev/null; }
trap cleanup EXIT

e2e_require_root
ip netns add "$NA" && ip netns add "$NB" && ip link add va netns "$NA" type veth peer name vb netns "$NB" ||
  e2e_fail "could not create namespaces and a veth pair"
ip -n "$NA" addr add 10.78.0.1/24 dev va
ip -n "$NB" addr add 10.78.0.2/24 dev vb
ip -n "$NA" link set va up; ip -n "$NB" link set vb up
export NL_IF=va NL_PEER_IP=10.78.0.2
NL_MAC=$(ip netns exec "$NA" cat /sys/class/net/va/address)
NL_PEER_MAC=$(ip netns exec "$NB" cat /sys/class/net/vb/address)
export NL_MAC NL_PEER_MAC
for _ in $(seq 30); do ip -n "$NA" link show va | grep -q 'state UP' && break; sleep 0.1; done

# doctest's --test-case filter treats commas as separators: match with '*'.
run_current() { ip netns exec "$NA" "$T" --test-case="${CASE//,/*}" --no-version; }
# Every case the binary has (a case added there runs here without a list to keep).
cases=$("$T" --list-test-cases --no-version | grep -vE '^(\[doctest\]|=+$)')
[ -n "$cases" ] || e2e_fail "no test cases listed by $T"
while IFS= read -r CASE; do
  e2e_case "$CASE" run_current
done <<<"$cases"
e2e_finish
