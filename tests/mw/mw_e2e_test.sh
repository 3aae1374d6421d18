#!/usr/bin/env bash
# End-to-end memory windows (docs/engine.md §Memory windows) between two
# namespaces (tests/lib/netns.sh) over the I/O path MROCE_E2E_IO names:
# tests/mw/mw_e2e's server in A binds type 1 and type 2 windows, its client
# in B accesses A's memory through them (see mw_e2e.cc for the sessions).
# Then daemon A's counters must name each refusal the client saw.
# Needs root; skips otherwise.
set -u
here=$(cd "$(dirname "$0")" && pwd)
top=${TEST_SRCDIR:+$TEST_SRCDIR/metaroce}
top=${top:-$(cd "$here/../.." && pwd)}
source "$top/tests/lib/e2e.sh"
source "$top/tests/lib/verbs.sh"
MW_E2E=$(need_file tests/mw/mw_e2e) || exit 1
verbs_e2e_up

t_windows() {
  pair mw "in_a $MW_E2E server $MROCE_DEV_A" "in_b $MW_E2E client $MROCE_DEV_B"
  expect_counter mw_binds 5                  # a type 1 bind and unbind, 3 type 2 binds
  expect_counter mw_remote_invalidations 1   # SEND_WITH_INV
  expect_counter mw_local_invalidations 1    # LOCAL_INV
  expect_counter rkey_refused_no_key 2       # the invalidated windows (remote, local)
  expect_counter rkey_refused_no_access 1    # WRITE through a read-only window
  expect_counter rkey_refused_out_of_bounds 1  # READ beyond the type 1 window
  expect_counter mw_bind_refused 1           # the bind beyond the MR
  expect_counter mw_refused_out_of_bounds 1
}

e2e_case memory_windows t_windows
e2e_finish
