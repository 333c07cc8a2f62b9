/* Sanity bounds for the window DCTCP drives (incastlab/bpf/dctcp.bpf.c).
 *
 * A probe of this machine kind saw, with a BPF DCTCP at both ends, the kernel's
 * CWR/PRR path leave a slow-start threshold of 0x81104110 that no op of the program
 * wrote, after which PRR set cwnd to 1e8..2e9 packets. The cause is unknown, so every
 * value the program reads back is checked here before it is used. Plain C on purpose:
 * tests/test_dctcp_guard.py compiles this header for the host and feeds it the values
 * the probe saw.
 */
#ifndef INCAST_DCTCP_GUARD_H
#define INCAST_DCTCP_GUARD_H

#define DCTCP_INFINITE_SSTHRESH 0x7fffffffU /* the kernel's TCP_INFINITE_SSTHRESH */
#define DCTCP_INT_MAX 0x7fffffffU
#define DCTCP_MIN_CWND 2U

/* The largest window a socket could ever fill: sk_sndbuf is an int, so no more than
 * INT_MAX bytes are ever in flight; a window above INT_MAX / mss packets is absurd. */
static inline __u32 dctcp_max_sane_cwnd(__u32 mss)
{
	return DCTCP_INT_MAX / (mss ? mss : 1U);
}

/* 1 when ssthresh cannot be one TCP wrote: above the kernel's "infinite" marker, or,
 * other than that marker, a window no socket could fill. */
static inline int dctcp_ssthresh_absurd(__u32 ssthresh, __u32 mss)
{
	if (ssthresh == DCTCP_INFINITE_SSTHRESH)
		return 0;
	return ssthresh > dctcp_max_sane_cwnd(mss);
}

static inline int dctcp_cwnd_absurd(__u32 cwnd, __u32 mss)
{
	return cwnd > dctcp_max_sane_cwnd(mss);
}

/* DCTCP's reduction: cwnd * (1 - alpha / 2), alpha in 1/1024, never below 2 packets. */
static inline __u32 dctcp_reduced_cwnd(__u32 cwnd, __u32 alpha)
{
	__u32 cut = (__u32)(((__u64)cwnd * alpha) >> 11);
	__u32 left = cwnd - cut;

	return left > DCTCP_MIN_CWND ? left : DCTCP_MIN_CWND;
}

/* The window after a reduction state's ACK (CWR or Recovery): at most the threshold,
 * at least 2 packets. The probe's bug lived in PRR; this replaces it. */
static inline __u32 dctcp_window_in_reduction(__u32 cwnd, __u32 ssthresh)
{
	__u32 target = ssthresh > DCTCP_MIN_CWND ? ssthresh : DCTCP_MIN_CWND;

	return cwnd > target ? target : cwnd;
}

/* A window found absurd restarts from what is in flight (at least 2 packets). */
static inline __u32 dctcp_window_after_absurd(__u32 in_flight)
{
	return in_flight > DCTCP_MIN_CWND ? in_flight : DCTCP_MIN_CWND;
}

#endif
