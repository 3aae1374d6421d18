#!/usr/bin/env bash
# End-to-end: the extended verbs against real metaroced daemons in two
# namespaces (tests/lib/netns.sh), over the packet I/O MROCE_E2E_IO names:
# our verbs program (tests/extapi/extapi_e2e.cc: every ibv_wr_* op with its
# data checked, wr_abort, errors at wr_complete, cq_ex read_* values,
# query_device_ex against enforced limits, query_qp masks) and the stock
# ibv_rc_pingpong with the new send API (-N, which uses ibv_create_qp_ex and
# ibv_wr_send) between the hosts. Needs root; skips with a reason otherwise.
set -u
here=$(cd "$(dirname "$0")" && pwd)
top=${TEST_SRCDIR:+$TEST_SRCDIR/metaroce}
top=${top:-$(cd "$here/../.." && pwd)}
source "$top/tests/lib/e2e.sh"
source "$top/tests/lib/verbs.sh"
EXTAPI_E2E=$(need_file tests/extapi/extapi_e2e) || exit 1
verbs_e2e_up ibv_rc_pingpong

t_rc() { in_a "$EXTAPI_E2E" rc "$MROCE_DEV_A"; }
t_ud() { in_a "$EXTAPI_E2E" ud "$MROCE_DEV_A"; }
t_limits() { in_a "$EXTAPI_E2E" limits "$MROCE_DEV_A"; }

# ibv_devinfo -v shows what query_device_ex says (the stock reader of it).
t_devinfo() {
  local out; out=$(in_a ibv_devinfo -v -d "$MROCE_DEV_A") || e2e_fail "ibv_devinfo failed"
  echo "$out" | grep -E "max_mw|max_mcast|phys_port_cnt|max_srq:|RC_RNR_NAK_GEN|max_qp_wr"
  grep -qE "max_mw:[[:space:]]+[1-9]" <<<"$out" || e2e_fail "no memory windows (max_mw 0)"
  grep -q "MEM_WINDOW_TYPE_2B" <<<"$out" || e2e_fail "MEM_WINDOW_TYPE_2B not in device_cap_flags"
  grep -qE "max_mcast_grp:[[:space:]]+[1-9]" <<<"$out" || e2e_fail "no multicast groups"
  grep -q "RC_RNR_NAK_GEN" <<<"$out" || e2e_fail "RC_RNR_NAK_GEN not in device_cap_flags"
}

# Stock ibv_rc_pingpong -N: ibv_create_qp_ex(SEND_OPS_FLAGS) + ibv_wr_send
# between the hosts, -c checking the received data; with -e also through a
# completion channel (the launcher's interposer).
t_pingpong_new_send() {
  pair pp_new_send "in_a ibv_rc_pingpong -d $MROCE_DEV_A -g $GID_A -N -c -s 4096 -n 500" \
       "in_b ibv_rc_pingpong -d $MROCE_DEV_B -g $GID_B -N -c -s 4096 -n 500"
  grep -E "bytes in" "$E2E_RUN_DIR/pp_new_send.client.log"
}
t_pingpong_new_send_events() {
  pair pp_new_send_e "launch_a --sysfs-root $MROCE_SYSFS_A ibv_rc_pingpong -d $MROCE_DEV_A -g $GID_A -N -e -s 4096 -n 200" \
       "launch_b --sysfs-root $MROCE_SYSFS_B ibv_rc_pingpong -d $MROCE_DEV_B -g $GID_B -N -e -s 4096 -n 200"
  grep -E "bytes in" "$E2E_RUN_DIR/pp_new_send_e.client.log"
}
# -t asks for completion timestamps: we offer none, and the tool says so.
t_pingpong_ts_refused() {
  local out rc=0; out=$(in_a ibv_rc_pingpong -d "$MROCE_DEV_A" -g "$GID_A" -t -p 18598 2>&1) || rc=$?
  echo "$out"
  [ $rc != 0 ] && grep -qi "timestamp" <<<"$out" || e2e_fail "expected the timestamp refusal"
}

e2e_case extapi_rc_every_wr_op_abort_and_errors t_rc
e2e_case extapi_ud_wr_ops_and_cq_ex_reads t_ud
e2e_case extapi_query_device_ex_limits_enforced_and_query_qp_masks t_limits
e2e_case devinfo_shows_query_device_ex t_devinfo
e2e_case rc_pingpong_new_send_api_across_hosts t_pingpong_new_send
e2e_case rc_pingpong_new_send_api_with_events t_pingpong_new_send_events
e2e_case rc_pingpong_timestamps_refused t_pingpong_ts_refused
e2e_finish
