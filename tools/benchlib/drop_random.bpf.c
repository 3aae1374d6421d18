// Loss for tools/bench: drops each frame with probability
// THRESH / 2^32 (the loss cases on kernels without sch_netem). Compiled by the
// benchmark at run time: clang -O2 -target bpf -DTHRESH=<u32>u.
#include <linux/bpf.h>
#include <linux/pkt_cls.h>

static unsigned int (*bpf_get_prandom_u32)(void) = (void *)BPF_FUNC_get_prandom_u32;

__attribute__((section("tc"), used)) int drop_random(struct __sk_buff *skb) {
  return bpf_get_prandom_u32() < THRESH ? TC_ACT_SHOT : TC_ACT_OK;
}

// The variant the benchmark attaches: generic XDP on each receiving veth.
__attribute__((section("xdp"), used)) int xdp_drop_random(struct xdp_md *ctx) {
  return bpf_get_prandom_u32() < THRESH ? XDP_DROP : XDP_PASS;
}

char _license[] __attribute__((section("license"), used)) = "GPL";
