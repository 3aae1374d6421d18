// tc programs for tests/daemon/daemon_e2e_test.sh: this kernel has no
// sch_netem, so loss and reordering are made from what it has. Compiled by
// the test at run time: clang -O2 -target bpf -DDROP=<u32> -DSLOW=<u32>.
//   sec "tc_drop": clsact egress, direct action: drops a frame with
//               probability DROP / 2^32.
//   sec "tc_lane": classifier of an htb root with a fast class 1:10 and a
//               rate-limited class 1:20; sends a frame to 1:20 with
//               probability SLOW / 2^32, so it leaves after frames queued
//               behind it in 1:10: reordering. The test gives 1:20 1 Gbit/s
//               and a 40-frame pfifo: at most ~0.5 ms of extra delay
//               (overflow adds to the loss).
#include <linux/bpf.h>
#include <linux/pkt_cls.h>

static unsigned int (*bpf_get_prandom_u32)(void) = (void *)BPF_FUNC_get_prandom_u32;

__attribute__((section("tc_drop"), used)) int drop(struct __sk_buff *skb) {
  return bpf_get_prandom_u32() < DROP ? TC_ACT_SHOT : TC_ACT_OK;
}

__attribute__((section("tc_lane"), used)) int lane(struct __sk_buff *skb) {
  return bpf_get_prandom_u32() < SLOW ? 0x10020 : 0x10010;
}

// sec "xdp_drop": generic XDP on the receiving veth, drops a frame with
// probability DROP / 2^32 before any socket sees it. This is the loss that
// reaches the daemon's AF_PACKET traffic: frames it sends with
// PACKET_MMAP/sendmmsg on these kernels were measured to pass a clsact
// egress drop untouched (10% "dropped" by the filter, 0 lost by the
// transport), while an XDP drop of 1% gave ~1% retransmissions.
__attribute__((section("xdp_drop"), used)) int rx_drop(struct xdp_md *ctx) {
  return bpf_get_prandom_u32() < DROP ? XDP_DROP : XDP_PASS;
}

char _license[] __attribute__((section("license"), used)) = "GPL";
