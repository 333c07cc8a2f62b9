// SPDX-License-Identifier: GPL-2.0
/* ECN marking at a switch egress queue without RED (docs/ecn.md).
 *
 * ecn_egress runs at the switch port's clsact egress hook, before the HTB/pfifo (or
 * bfifo) queue; ecn_ingress runs at the clsact ingress hook of the port's peer, where
 * every packet the queue sent arrives. Both find the port's slot from (network
 * namespace cookie, ifindex) in `ports`, so occupancy = in - out is the queue's real
 * content, whatever rate the shaper actually achieved. A packet that arrives to find
 * more than `threshold` queued (packets or bytes, as the queue's limit) is marked CE if
 * it is ECT(0) or ECT(1). A packet the queue will drop (it is full) is not counted in:
 * it never reaches the peer.
 */
#include "vmlinux.h"
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#define TC_ACT_OK 0
#define ETH_P_IP 0x0800
#define ECN_MASK 3
#define ECN_CE 3
#define MAX_PORTS 1024

struct ecn_port_key {
	__u64 netns;   /* bpf_get_netns_cookie of the device's namespace */
	__u32 ifindex; /* the device's ifindex there */
	__u32 pad;
};

struct ecn_conf {
	__u64 threshold; /* mark above this occupancy (packets or bytes) */
	__u64 limit;     /* the queue's limit in the same unit */
	__u32 in_bytes;  /* 1: the queue counts bytes (bfifo), 0: packets (pfifo) */
	__u32 pad;
};

struct ecn_stats {
	__u64 in_pkts, in_bytes;   /* entered the queue (egress hook) */
	__u64 out_pkts, out_bytes; /* left it (peer's ingress hook) */
	__u64 marks;               /* ECT packets this port set to CE */
	__u64 ce_arrived;          /* already CE on arrival (marked upstream), any occupancy */
	__u64 not_ect_over;        /* not ECN-capable, arrived above the threshold */
	__u64 full;                /* arrived at a full queue: the queue drops them */
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 2 * MAX_PORTS);
	__type(key, struct ecn_port_key);
	__type(value, __u32);
} ports SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_PORTS);
	__type(key, __u32);
	__type(value, struct ecn_conf);
} conf SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_PORTS);
	__type(key, __u32);
	__type(value, struct ecn_stats);
} stats SEC(".maps");

extern void *bpf_cast_to_kern_ctx(void *ctx) __ksym;

/* The cookie of the device's own namespace (bpf_get_netns_cookie was seen to miss at a
 * host's ingress: it answers for the packet's socket, if any, not the device). */
static __always_inline __u64 dev_netns_cookie(struct __sk_buff *ctx)
{
	struct sk_buff *skb = bpf_cast_to_kern_ctx(ctx);

	return BPF_CORE_READ(skb, dev, nd_net.net, net_cookie);
}

static __always_inline struct ecn_stats *port_of(struct __sk_buff *skb, __u32 *slot)
{
	struct ecn_port_key key = {};
	__u32 ifindex = skb->ifindex; /* each context field into a local: the verifier */
	__u32 *found;

	key.netns = dev_netns_cookie(skb);
	key.ifindex = ifindex;
	found = bpf_map_lookup_elem(&ports, &key);
	if (!found)
		return NULL;
	*slot = *found;
	return bpf_map_lookup_elem(&stats, slot);
}

/* The IPv4 ECN field of an Ethernet frame, or -1 for anything else. */
static __always_inline int ecn_field(struct __sk_buff *skb)
{
	__u16 proto = 0;
	__u8 tos = 0;

	if (bpf_skb_load_bytes(skb, 12, &proto, sizeof(proto)) < 0 ||
	    proto != bpf_htons(ETH_P_IP))
		return -1;
	if (bpf_skb_load_bytes(skb, 15, &tos, sizeof(tos)) < 0)
		return -1;
	return tos & ECN_MASK;
}

SEC("tc")
int ecn_egress(struct __sk_buff *skb)
{
	struct ecn_stats *st;
	struct ecn_conf *cf;
	__u32 slot = 0;
	__u64 len = skb->len;
	__s64 occupancy;
	int ecn;

	st = port_of(skb, &slot);
	if (!st)
		return TC_ACT_OK;
	cf = bpf_map_lookup_elem(&conf, &slot);
	if (!cf)
		return TC_ACT_OK;
	occupancy = cf->in_bytes ? (__s64)(st->in_bytes - st->out_bytes)
				 : (__s64)(st->in_pkts - st->out_pkts);
	if (occupancy < 0)
		occupancy = 0;
	/* pfifo drops when it holds `limit` packets; bfifo when this frame would pass it */
	if (cf->in_bytes ? (__u64)occupancy + len > cf->limit : (__u64)occupancy >= cf->limit) {
		__sync_fetch_and_add(&st->full, 1);
		return TC_ACT_OK;
	}
	__sync_fetch_and_add(&st->in_pkts, 1);
	__sync_fetch_and_add(&st->in_bytes, len);
	ecn = ecn_field(skb);
	if (ecn == ECN_CE) /* what leaves CE = marks + ce_arrived: the captures' check */
		__sync_fetch_and_add(&st->ce_arrived, 1);
	if (ecn == ECN_CE || (__u64)occupancy <= cf->threshold)
		return TC_ACT_OK;
	if (ecn > 0 && bpf_skb_ecn_set_ce(skb))
		__sync_fetch_and_add(&st->marks, 1);
	else if (ecn == 0)
		__sync_fetch_and_add(&st->not_ect_over, 1);
	return TC_ACT_OK;
}

SEC("tc")
int ecn_ingress(struct __sk_buff *skb)
{
	struct ecn_stats *st;
	__u32 slot = 0;
	__u64 len = skb->len;

	st = port_of(skb, &slot);
	if (!st)
		return TC_ACT_OK;
	__sync_fetch_and_add(&st->out_pkts, 1);
	__sync_fetch_and_add(&st->out_bytes, len);
	return TC_ACT_OK;
}

char LICENSE[] SEC("license") = "GPL";
