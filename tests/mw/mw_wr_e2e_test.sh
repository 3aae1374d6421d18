#!/usr/bin/env bash
# End-to-end memory windows on the data path (docs/engine.md §Memory
# windows) between two namespaces (tests/lib/netns.sh) over the I/O path
# MROCE_E2E_IO names: tests/mw/mw_wr_e2e binds windows by ibv_wr_bind_mw,
# ibv_post_send IBV_WR_BIND_MW and ibv_bind_mw, on RC and UC QPs, and
# invalidates them by LOCAL_INV, SEND_WITH_INV and QP destruction (see
# mw_wr_e2e.cc for the sessions); its daemons run with a small per-client
# window limit, which the server fills. Then daemon A's counters must name
# each refusal the client saw. Needs root; skips otherwise.
set -u
here=$(cd "$(dirname "$0")" && pwd)
top=${TEST_SRCDIR:+$TEST_SRCDIR/metaroce}
top=${top:-$(cd "$here/../.." && pwd)}
source "$top/tests/lib/e2e.sh"
source "$top/tests/lib/verbs.sh"
MW_E2E=$(need_file tests/mw/mw_wr_e2e) || exit 1
export MW_LIMIT=12  # the server checks max_mw says it and the 13th window is refused
export MROCE_DAEMON_ARGS="${MROCE_DAEMON_ARGS:-} --max-mw-per-client $MW_LIMIT"
verbs_e2e_up

t_windows_by_work_request() {
  pair mw_wr "in_a env MW_LIMIT=$MW_LIMIT $MW_E2E server $MROCE_DEV_A" "in_b $MW_E2E client $MROCE_DEV_B"
  expect_counter mw_binds 7                     # W, P, T, Q x3, U
  expect_counter mw_local_invalidations 2       # W (RC, ibv_wr_local_inv), U (UC)
  expect_counter mw_remote_invalidations 1      # P (ibv_wr_send_inv)
  expect_counter mw_invalidated_qp_destroyed 3  # Q, with each of its 3 QPs
  expect_counter rkey_refused_no_key 3          # P, W, U after their invalidation
  expect_counter rkey_refused_no_access 1       # WRITE through the read-only T
  expect_counter rkey_refused_out_of_bounds 2   # past Q's end (RC), past U's end (UC)
  expect_counter rx_drop_uc_access 2            # the two refused UC WRITEs
}

e2e_case windows_by_work_request t_windows_by_work_request
e2e_finish
