// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
// MetaRoCE XDP steering program (docs/packet-io.md "The XDP program").
//
// Redirects Ethernet frames carrying UDP to destination port `cfg.udp_port`
// (IPv4 or IPv6, optionally behind one 802.1Q/802.1ad tag) into the AF_XDP
// socket registered in xsks_map at the frame's rx queue index. Everything
// else, and our port when no socket is registered for the queue, goes on to
// the kernel stack (XDP_PASS), so ping, ARP/ND and kernel sockets keep
// working on the interface.
//
// Only the first buffer of a multi-buffer frame is examined; the headers are
// always in it. The daemon loads the program with BPF_F_XDP_HAS_FRAGS when it
// binds the socket with XDP_USE_SG, and attaches it with a bpf_link, so the
// program is detached when the daemon exits, however it exits.
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/udp.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

struct {
  __uint(type, BPF_MAP_TYPE_XSKMAP);
  __uint(max_entries, 64);
  __type(key, __u32);
  __type(value, __u32);
} xsks_map SEC(".maps");

// Set by the loader before load (.rodata): the only variable there.
struct metaroce_xdp_config {
  __u16 udp_port;  // network byte order
};
volatile const struct metaroce_xdp_config cfg = {.udp_port = bpf_htons(4796)};

// Counters per CPU: index 0 redirected, 1 passed. Read by tests/bpftool.
struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, 2);
  __type(key, __u32);
  __type(value, __u64);
} counters SEC(".maps");

static __always_inline void count(__u32 index) {
  __u64* c = bpf_map_lookup_elem(&counters, &index);
  if (c) *c += 1;
}

struct vlan_hdr_ {
  __be16 tci;
  __be16 encapsulated_proto;
};

// Returns the UDP destination port (network order) of an unfragmented IPv4
// or IPv6 UDP packet, or 0. (The port is read here, right after the bounds
// check: handing the header pointer back lets clang recompute it in a form
// the verifier cannot follow.)
static __always_inline __be16 udp_dest(void* data, void* data_end) {
  struct ethhdr* eth = data;
  if ((void*)(eth + 1) > data_end) return 0;
  void* l3 = eth + 1;
  __be16 proto = eth->h_proto;
  if (proto == bpf_htons(ETH_P_8021Q) || proto == bpf_htons(ETH_P_8021AD)) {
    struct vlan_hdr_* vlan = l3;
    if ((void*)(vlan + 1) > data_end) return 0;
    proto = vlan->encapsulated_proto;
    l3 = vlan + 1;
  }
  if (proto == bpf_htons(ETH_P_IP)) {
    struct iphdr* ip = l3;
    if ((void*)(ip + 1) > data_end) return 0;
    if (ip->protocol != IPPROTO_UDP || ip->ihl < 5) return 0;
    // Fragments (MF set or offset non-zero) go to the kernel to reassemble.
    if (ip->frag_off & bpf_htons(0x3FFF)) return 0;
    struct udphdr* udp = (void*)ip + ip->ihl * 4;
    if ((void*)(udp + 1) > data_end) return 0;
    return udp->dest;
  }
  if (proto == bpf_htons(ETH_P_IPV6)) {
    struct ipv6hdr* ip6 = l3;
    if ((void*)(ip6 + 1) > data_end) return 0;
    // MetaRoCE sends no IPv6 extension headers (docs/protocol.md §2).
    if (ip6->nexthdr != IPPROTO_UDP) return 0;
    struct udphdr* udp = (void*)(ip6 + 1);
    if ((void*)(udp + 1) > data_end) return 0;
    return udp->dest;
  }
  return 0;
}

SEC("xdp")
int metaroce_xdp(struct xdp_md* ctx) {
  void* data = (void*)(long)ctx->data;
  void* data_end = (void*)(long)ctx->data_end;
  if (udp_dest(data, data_end) == cfg.udp_port) {
    count(0);
    // XDP_PASS in the flags: the action when no socket is at this index.
    return bpf_redirect_map(&xsks_map, ctx->rx_queue_index, XDP_PASS);
  }
  count(1);
  return XDP_PASS;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
