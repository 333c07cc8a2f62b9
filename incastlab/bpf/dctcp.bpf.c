// SPDX-License-Identifier: GPL-2.0
/* DCTCP (Alizadeh et al., SIGCOMM 2010) as a TCP congestion-control struct_ops, for
 * kernels built without tcp_dctcp. The estimator follows the kernel's tcp_dctcp.c:
 * alpha, the fraction of CE-marked bytes, is updated once per window with g = 1/16,
 * and each reduction cuts cwnd by alpha/2; the receiver echoes CE with a two-state
 * machine that sends an immediate ACK whenever the CE state flips.
 *
 * Unlike tcp_dctcp.c the window is driven from cong_control, not cong_avoid: with
 * cong_avoid the kernel's PRR path was seen to write absurd ssthresh and cwnd values
 * here (see dctcp_guard.h), and cong_control bypasses PRR entirely. Every value read
 * back is still checked, and each correction is counted in guard_trips.
 *
 * Registered under the name "incast_dctcp" (never "dctcp", which is the kernel's own);
 * incastlab/congestion.py registers and unregisters it around a run.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "dctcp_guard.h"

char _license[] SEC("license") = "GPL"; /* struct_ops programs must be GPL */

/* include/net/tcp.h: neither the flags nor the ecn_flags bits are in BTF */
#define TCP_CONG_NON_RESTRICTED 0x1 /* a namespace other than the root may choose it */
#define TCP_CONG_NEEDS_ECN 0x2      /* the socket negotiates ECN */
#define TCP_ECN_OK 0x1
#define TCP_ECN_DEMAND_CWR 0x4

#define DCTCP_MAX_ALPHA 1024U
#define DCTCP_SHIFT_G 4 /* g = 1/16 */

extern void tcp_reno_cong_avoid(struct sock *sk, __u32 ack, __u32 acked) __ksym;

/* Read by the run after the fact (bpftool map dump): how often the guard corrected an
 * absurd value, and the last such value seen. */
__u64 guard_trips = 0;
__u32 guard_last_value = 0;

struct dctcp_ca {
	__u32 old_delivered;
	__u32 old_delivered_ce;
	__u32 prior_rcv_nxt;
	__u32 alpha;
	__u32 next_seq;
	__u32 ce_state;
	__u32 loss_cwnd;
};

static inline struct tcp_sock *tcp_of(struct sock *sk)
{
	return (struct tcp_sock *)sk;
}

static inline struct dctcp_ca *ca_of(struct sock *sk)
{
	return (struct dctcp_ca *)((struct inet_connection_sock *)sk)->icsk_ca_priv;
}

static inline int seq_before(__u32 a, __u32 b)
{
	return (__s32)(a - b) < 0;
}

static inline void guard_tripped(__u32 value)
{
	__sync_fetch_and_add(&guard_trips, 1);
	guard_last_value = value;
}

static inline void start_window(struct tcp_sock *tp, struct dctcp_ca *ca)
{
	ca->next_seq = tp->snd_nxt;
	ca->old_delivered = tp->delivered;
	ca->old_delivered_ce = tp->delivered_ce;
}

SEC("struct_ops/incast_dctcp_init")
void BPF_PROG(incast_dctcp_init, struct sock *sk)
{
	struct tcp_sock *tp = tcp_of(sk);
	struct dctcp_ca *ca = ca_of(sk);

	/* Without ECN (the peer refused it) the estimator never sees a mark: alpha then
	 * stays at its start value and every loss halves the window, as Reno does. */
	ca->prior_rcv_nxt = tp->rcv_nxt;
	ca->alpha = DCTCP_MAX_ALPHA;
	ca->loss_cwnd = 0;
	ca->ce_state = 0;
	start_window(tp, ca);
}

/* alpha = (1 - g) * alpha + g * F once per window of data, F the fraction of the
 * window's delivered packets that carried CE. */
SEC("struct_ops/incast_dctcp_in_ack_event")
void BPF_PROG(incast_dctcp_in_ack_event, struct sock *sk, __u32 flags)
{
	struct tcp_sock *tp = tcp_of(sk);
	struct dctcp_ca *ca = ca_of(sk);
	__u32 alpha, delivered, delivered_ce, step;

	if (seq_before(tp->snd_una, ca->next_seq))
		return;
	delivered_ce = tp->delivered_ce - ca->old_delivered_ce;
	delivered = tp->delivered - ca->old_delivered;
	alpha = ca->alpha;
	step = alpha >> DCTCP_SHIFT_G;
	alpha -= step ? step : alpha; /* the kernel's min_not_zero: a tiny alpha decays to 0 */
	if (delivered_ce) {
		delivered_ce <<= (10 - DCTCP_SHIFT_G);
		delivered_ce /= delivered ? delivered : 1U;
		alpha += delivered_ce;
		if (alpha > DCTCP_MAX_ALPHA)
			alpha = DCTCP_MAX_ALPHA;
	}
	ca->alpha = alpha;
	start_window(tp, ca);
}

SEC("struct_ops/incast_dctcp_ssthresh")
__u32 BPF_PROG(incast_dctcp_ssthresh, struct sock *sk)
{
	struct tcp_sock *tp = tcp_of(sk);
	struct dctcp_ca *ca = ca_of(sk);

	ca->loss_cwnd = tp->snd_cwnd;
	return dctcp_reduced_cwnd(tp->snd_cwnd, ca->alpha);
}

/* A loss (fast recovery or RTO) halves the window, whatever alpha says. */
static inline void react_to_loss(struct sock *sk)
{
	struct tcp_sock *tp = tcp_of(sk);
	__u32 half = tp->snd_cwnd >> 1;

	ca_of(sk)->loss_cwnd = tp->snd_cwnd;
	tp->snd_ssthresh = half > DCTCP_MIN_CWND ? half : DCTCP_MIN_CWND;
}

SEC("struct_ops/incast_dctcp_set_state")
void BPF_PROG(incast_dctcp_set_state, struct sock *sk, __u8 new_state)
{
	struct inet_connection_sock *icsk = (struct inet_connection_sock *)sk;

	if (new_state == TCP_CA_Recovery && icsk->icsk_ca_state != TCP_CA_Recovery)
		react_to_loss(sk);
}

static inline void set_demand_cwr(struct tcp_sock *tp, __u32 ce_state)
{
	if (ce_state)
		tp->ecn_flags |= TCP_ECN_DEMAND_CWR;
	else
		tp->ecn_flags &= ~TCP_ECN_DEMAND_CWR;
}

/* Receiver: echo ECE exactly while the data carries CE. When the CE state flips, a
 * delayed ACK still owed is sent first with the old state, then one ACK now. */
static inline void ce_state_update(struct sock *sk, __u32 new_state)
{
	struct inet_connection_sock *icsk = (struct inet_connection_sock *)sk;
	struct tcp_sock *tp = tcp_of(sk);
	struct dctcp_ca *ca = ca_of(sk);

	if (ca->ce_state != new_state) {
		if (icsk->icsk_ack.pending & ICSK_ACK_TIMER) {
			set_demand_cwr(tp, ca->ce_state);
			bpf_tcp_send_ack(tp, ca->prior_rcv_nxt);
		}
		icsk->icsk_ack.pending |= ICSK_ACK_NOW;
	}
	ca->prior_rcv_nxt = tp->rcv_nxt;
	ca->ce_state = new_state;
	set_demand_cwr(tp, new_state);
}

SEC("struct_ops/incast_dctcp_cwnd_event")
void BPF_PROG(incast_dctcp_cwnd_event, struct sock *sk, enum tcp_ca_event ev)
{
	switch (ev) {
	case CA_EVENT_ECN_IS_CE:
		ce_state_update(sk, 1);
		break;
	case CA_EVENT_ECN_NO_CE:
		ce_state_update(sk, 0);
		break;
	case CA_EVENT_LOSS:
		react_to_loss(sk);
		break;
	default:
		break;
	}
}

/* The window, on every ACK: in CWR or Recovery at most the threshold set on entry
 * (one reduction per window, as DCTCP wants); otherwise Reno's slow start and
 * additive increase, both only while the window limits the sender. */
SEC("struct_ops/incast_dctcp_cong_control")
void BPF_PROG(incast_dctcp_cong_control, struct sock *sk, __u32 ack, int flag,
	      const struct rate_sample *rs)
{
	struct inet_connection_sock *icsk = (struct inet_connection_sock *)sk;
	struct tcp_sock *tp = tcp_of(sk);
	__u32 mss = tp->mss_cache;
	__u8 state = icsk->icsk_ca_state;

	if (dctcp_ssthresh_absurd(tp->snd_ssthresh, mss)) {
		guard_tripped(tp->snd_ssthresh);
		tp->snd_ssthresh = dctcp_reduced_cwnd(tp->snd_cwnd, ca_of(sk)->alpha);
	}
	if (dctcp_cwnd_absurd(tp->snd_cwnd, mss)) {
		guard_tripped(tp->snd_cwnd);
		tp->snd_cwnd = dctcp_window_after_absurd(tp->packets_out);
	}
	if (state == TCP_CA_CWR || state == TCP_CA_Recovery)
		tp->snd_cwnd = dctcp_window_in_reduction(tp->snd_cwnd, tp->snd_ssthresh);
	else if (rs->acked_sacked)
		tcp_reno_cong_avoid(sk, ack, rs->acked_sacked);
	if (tp->snd_cwnd > tp->snd_cwnd_clamp)
		tp->snd_cwnd = tp->snd_cwnd_clamp;
}

SEC("struct_ops/incast_dctcp_undo_cwnd")
__u32 BPF_PROG(incast_dctcp_undo_cwnd, struct sock *sk)
{
	struct tcp_sock *tp = tcp_of(sk);
	__u32 loss_cwnd = ca_of(sk)->loss_cwnd;

	if (dctcp_cwnd_absurd(loss_cwnd, tp->mss_cache)) {
		guard_tripped(loss_cwnd);
		loss_cwnd = 0;
	}
	return tp->snd_cwnd > loss_cwnd ? tp->snd_cwnd : loss_cwnd;
}

SEC(".struct_ops")
struct tcp_congestion_ops incast_dctcp = {
	.init = (void *)incast_dctcp_init,
	.in_ack_event = (void *)incast_dctcp_in_ack_event,
	.cwnd_event = (void *)incast_dctcp_cwnd_event,
	.ssthresh = (void *)incast_dctcp_ssthresh,
	.cong_control = (void *)incast_dctcp_cong_control,
	.undo_cwnd = (void *)incast_dctcp_undo_cwnd,
	.set_state = (void *)incast_dctcp_set_state,
	.flags = TCP_CONG_NON_RESTRICTED | TCP_CONG_NEEDS_ECN,
	.name = "incast_dctcp",
};
