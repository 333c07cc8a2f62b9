// SPDX-License-Identifier: GPL-2.0
/* Path labels for routing below the flow (policies spray and flowlet,
 * docs/routing-below-the-flow.md).
 *
 * label_egress runs at each emulated host's clsact egress hook and writes a path label
 * 0 .. labels-1 into the DSCP bits of every IPv4 packet (the ECN bits are kept, the
 * header checksum updated); the leaves' OpenFlow rules send each label to one spine.
 * Per flow (5-tuple), in `flows`:
 *   spray   (mode 0): the flow's labels go round robin, packet by packet;
 *   flowlet (mode 1): the label moves to the next one only when the packet follows the
 *                     flow's previous one by at least gap_ns (a flowlet's boundary).
 * A new flow starts on the next label of a counter shared by all flows, so that flows
 * too start spread (as the spread policy does). The programs of one run are loaded
 * once and attached in every host: `flows` and `conf` are the whole fabric's, which is
 * harmless, as a flow is sent by one host only.
 */
#include "vmlinux.h"
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#define TC_ACT_OK 0
#define ETH_P_IP 0x0800
#define ETH_HLEN 14
#define IP_TOS_OFF (ETH_HLEN + 1)
#define IP_CSUM_OFF (ETH_HLEN + 10)
#define IPPROTO_TCP 6
#define IPPROTO_UDP 17
#define MODE_SPRAY 0
#define MODE_FLOWLET 1
#define MAX_LABELS 64 /* DSCP is 6 bits */
#define MAX_FLOWS 16384

struct label_conf {
	__u32 labels; /* label space: the fabric's spines */
	__u32 mode;   /* MODE_SPRAY or MODE_FLOWLET */
	__u64 gap_ns; /* flowlet: the gap that starts a new flowlet */
};

struct flow_key {
	__u32 src, dst;
	__u16 sport, dport;
	__u32 proto;
};

struct flow_state {
	__u64 last_ns;  /* when its last packet left */
	__u64 packets;  /* labelled so far */
	__u64 changes;  /* times its label changed (flowlet boundaries; spray: every packet) */
	__u32 label;    /* the label of its last packet */
	__u32 pad;
};

struct label_stats {
	__u64 new_flows;
	__u64 unlabelled; /* IPv4 packets that could not be relabelled */
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct label_conf);
} conf SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, MAX_FLOWS);
	__type(key, struct flow_key);
	__type(value, struct flow_state);
} flows SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct label_stats);
} stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_LABELS);
	__type(key, __u32);
	__type(value, __u64);
} label_packets SEC(".maps"); /* packets sent with each label, all hosts */

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} next_flow SEC(".maps");

/* The flow of an IPv4 packet; ports only for TCP and UDP (as the controller's FlowKey).
 * Returns -1 for anything that is not IPv4. */
static __always_inline int flow_of(struct __sk_buff *skb, struct flow_key *key, __u8 *tos)
{
	__u16 proto = 0;
	__u8 vihl = 0, l4 = 0;
	__u32 addrs[2];
	__u16 ports[2] = {0, 0};

	if (bpf_skb_load_bytes(skb, 12, &proto, sizeof(proto)) < 0 ||
	    proto != bpf_htons(ETH_P_IP))
		return -1;
	if (bpf_skb_load_bytes(skb, ETH_HLEN, &vihl, 1) < 0 ||
	    bpf_skb_load_bytes(skb, IP_TOS_OFF, tos, 1) < 0 ||
	    bpf_skb_load_bytes(skb, ETH_HLEN + 9, &l4, 1) < 0 ||
	    bpf_skb_load_bytes(skb, ETH_HLEN + 12, addrs, sizeof(addrs)) < 0)
		return -1;
	if (l4 == IPPROTO_TCP || l4 == IPPROTO_UDP)
		bpf_skb_load_bytes(skb, ETH_HLEN + (vihl & 0xf) * 4, ports, sizeof(ports));
	key->src = addrs[0];
	key->dst = addrs[1];
	key->sport = ports[0];
	key->dport = ports[1];
	key->proto = l4;
	return 0;
}

/* The label for this packet of the flow, updating the flow's state. */
static __always_inline __u32 next_label(struct flow_key *key, struct label_conf *cf,
					 __u64 now, struct label_stats *st)
{
	struct flow_state *fs, fresh = {};
	__u32 zero = 0, label;
	__u64 *counter;

	fs = bpf_map_lookup_elem(&flows, key);
	if (!fs) {
		counter = bpf_map_lookup_elem(&next_flow, &zero);
		if (!counter)
			return 0;
		fresh.label = __sync_fetch_and_add(counter, 1) % cf->labels;
		fresh.last_ns = now;
		fresh.packets = 1;
		bpf_map_update_elem(&flows, key, &fresh, BPF_ANY);
		if (st)
			__sync_fetch_and_add(&st->new_flows, 1);
		return fresh.label;
	}
	label = fs->label;
	if (cf->mode == MODE_SPRAY || now - fs->last_ns >= cf->gap_ns) {
		label = (label + 1) % cf->labels;
		__sync_fetch_and_add(&fs->changes, 1);
	}
	fs->label = label;
	fs->last_ns = now;
	__sync_fetch_and_add(&fs->packets, 1);
	return label;
}

SEC("tc")
int label_egress(struct __sk_buff *skb)
{
	struct label_conf *cf;
	struct label_stats *st;
	struct flow_key key = {};
	__u32 zero = 0, label;
	__u8 tos = 0, new_tos;
	__u64 *count;

	cf = bpf_map_lookup_elem(&conf, &zero);
	if (!cf || cf->labels == 0 || cf->labels > MAX_LABELS)
		return TC_ACT_OK;
	if (flow_of(skb, &key, &tos) < 0)
		return TC_ACT_OK;
	st = bpf_map_lookup_elem(&stats, &zero);
	label = next_label(&key, cf, bpf_ktime_get_ns(), st);
	if (label >= MAX_LABELS)
		return TC_ACT_OK;
	new_tos = (__u8)(label << 2) | (tos & 3);
	if (new_tos != tos) {
		/* tos is the low byte of the header's first 16-bit word */
		if (bpf_l3_csum_replace(skb, IP_CSUM_OFF, bpf_htons(tos), bpf_htons(new_tos), 2) < 0 ||
		    bpf_skb_store_bytes(skb, IP_TOS_OFF, &new_tos, 1, 0) < 0) {
			if (st)
				__sync_fetch_and_add(&st->unlabelled, 1);
			return TC_ACT_OK;
		}
	}
	count = bpf_map_lookup_elem(&label_packets, &label);
	if (count)
		__sync_fetch_and_add(count, 1);
	return TC_ACT_OK;
}

char LICENSE[] SEC("license") = "GPL";
