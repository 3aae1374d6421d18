#!/usr/bin/env bash
# End-to-end: shared receive queues and UC QPs with stock tools
# (ibv_srq_pingpong, ibv_uc_pingpong, perftest --use_srq / -c UC) between
# two namespaces (tests/lib/netns.sh), over the I/O path MROCE_E2E_IO
# names (default AF_XDP where available). Needs root; skips otherwise.
set -u
here=$(cd "$(dirname "$0")" && pwd)
top=${TEST_SRCDIR:+$TEST_SRCDIR/metaroce}
top=${top:-$(cd "$here/../.." && pwd)}
source "$top/tests/lib/e2e.sh"
source "$top/tests/lib/verbs.sh"
SRQ_E2E=$(need_file tests/srq/srq_e2e) || exit 1
verbs_e2e_up ibv_srq_pingpong
# perftest through perf (tests/lib/verbs.sh: -u 18 for a loaded machine).

t_srq_pingpong() {
  local s
  for s in 64 4096; do
    pair "srq_pingpong_$s" "in_a ibv_srq_pingpong -d $MROCE_DEV_A -g $GID_A -s $s -n 200" \
         "in_b ibv_srq_pingpong -d $MROCE_DEV_B -g $GID_B -s $s -n 200"
    grep -E "bytes in" "$E2E_RUN_DIR/srq_pingpong_$s.client.log"
  done
}
# perftest says what it ran; a case passes only if it ran that.
t_send_bw_srq() { perf ib_send_bw -s 65536 -n 500 --use-srq; ran ib_send_bw "Using SRQ *: ON"; }
t_send_lat_srq() { perf ib_send_lat -n 500 --use-srq; ran ib_send_lat "Using SRQ *: ON"; }
t_uc_pingpong() {
  local s
  for s in 64 4096; do
    pair "uc_pingpong_$s" "in_a ibv_uc_pingpong -d $MROCE_DEV_A -g $GID_A -s $s -n 200" \
         "in_b ibv_uc_pingpong -d $MROCE_DEV_B -g $GID_B -s $s -n 200"
    grep -E "bytes in" "$E2E_RUN_DIR/uc_pingpong_$s.client.log"
  done
}
t_send_bw_uc() { perf ib_send_bw -c UC -s 4096 -n 500; ran ib_send_bw "Connection type : UC"; }
t_send_lat_uc() { perf ib_send_lat -c UC -n 500; ran ib_send_lat "Connection type : UC"; }
t_write_bw_uc() { perf ib_write_bw -c UC -s 65536 -n 500; ran ib_write_bw "Connection type : UC"; }

t_srq_verbs() { in_a "$SRQ_E2E" "$MROCE_DEV_A"; }

e2e_case srq_limits_events_and_refusals t_srq_verbs
e2e_case srq_pingpong t_srq_pingpong
e2e_case ib_send_bw_use_srq t_send_bw_srq
e2e_case ib_send_lat_use_srq t_send_lat_srq
e2e_case uc_pingpong t_uc_pingpong
e2e_case ib_send_bw_uc t_send_bw_uc
e2e_case ib_send_lat_uc t_send_lat_uc
e2e_case ib_write_bw_uc t_write_bw_uc
e2e_finish
