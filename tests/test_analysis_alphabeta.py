"""Lower bounds of the cost model against hand-computed values.

Rates are Mbit/s: 20 Mbit/s moves 2,500,000 bytes/s, so 1,000,000 B take 0.4 s.
F = 1514/1448 (a bulk flow), FA = (2 x 1514 + 66) / (2 x 1448) (data plus the ACKs of
an equal flow the other way).
"""
import pytest

from incastlab.analysis import alphabeta as cm
from incastlab.jobs.incast_bound import incast_bound
from incastlab.jobs.ps_bound import ps_bound
from incastlab.jobs.ring_bound import ring_bound

F = 1514 / 1448
FA = (2 * 1514 + 66) / (2 * 1448)
MB = 1_000_000


def test_framing_factors():
    assert cm.framing_factor() == pytest.approx(1.045580, abs=1e-6)
    assert cm.framing_factor() == F
    assert cm.ack_framing() == pytest.approx(FA)
    assert cm.ack_framing() == pytest.approx(1.068370, abs=1e-6)
    # MTU 9000: 9014-byte frames carry 8948 bytes
    assert cm.framing_factor(9000) == pytest.approx(9014 / 8948)
    with pytest.raises(ValueError, match="mtu"):
        cm.framing_factor(50)


def test_sync_ps_demo_by_hand():
    """The demo: 3 workers x 1,000,000 B, one PS, every link 20 Mbit/s. Push then pull
    with no overlap: 3 x 1 MB / 2.5 MB/s = 1.2 s each way, 2.4 s before framing. The
    lower bound: the 3 pulls leave the port (1.2 s), then the last-answered worker's next
    1 MB must come back (0.4 s): 1.6 s before framing."""
    b = ps_bound(3, 1, MB, 20.0)
    assert b.seconds == pytest.approx((1.2 + 0.4) * F)
    assert b.terms["push_then_pull"] == pytest.approx((1.2 + 1.2) * F)
    assert b.terms["worker_link"] == pytest.approx(2 * 0.4 * F)  # own pull, then own push
    assert b.bottleneck == "shard port"
    assert "1.673 s" in b.formula and "2.509 s" in b.formula
    assert b.ratio(2.509) == pytest.approx(2.509 / ((1.6) * F))


def test_sync_ps_fabric_not_the_bottleneck_when_non_blocking():
    """Two workers on lf1, one on lf2 with the PS; 2 spines x 20 Mbit/s = 5 MB/s per leaf.
    Pulls over lf2's uplinks: 2 MB / 5 MB/s = 0.4 s, + one slice back 0.4 s = 0.8 s of
    fabric chain, below the 1.6 s of the port."""
    b = ps_bound(3, 1, MB, 20.0, worker_leaves=["lf1", "lf1", "lf2"],
                    shard_leaves=["lf2"], spines=2, fabric_mbps=20.0)
    assert b.terms["fabric"] == pytest.approx((0.4 + 0.4) * F)
    assert b.seconds == pytest.approx(1.6 * F)
    assert b.bottleneck == "shard port"


def test_sync_ps_oversubscribed_fabric_is_the_bottleneck():
    """Four 20 Mbit/s workers on lf1, the PS on lf2 with a 100 Mbit/s port, the leaves
    joined by 2 spines x 10 Mbit/s = 2.5 MB/s. Port chain: 4 MB / 12.5 MB/s = 0.32 s + 1 MB
    back at the worker's 2.5 MB/s = 0.4 s -> 0.72 s. Worker link: 2 x 0.4 = 0.8 s.
    Fabric: the pulls leave lf2 over its uplinks, 4 MB / 2.5 MB/s = 1.6 s, then one MB
    back (slowest of worker link, port, fabric: 2.5 MB/s) 0.4 s -> 2.0 s."""
    b = ps_bound(4, 1, MB, 20.0, 100.0, worker_leaves=["lf1"] * 4, shard_leaves=["lf2"],
                    spines=2, fabric_mbps=10.0)
    assert b.terms["shard_port"] == pytest.approx(0.72 * F)
    assert b.terms["worker_link"] == pytest.approx(0.8 * F)
    assert b.terms["fabric"] == pytest.approx(2.0 * F)
    assert b.seconds == pytest.approx(2.0 * F)
    assert b.bottleneck == "fabric (uplinks of lf2)"
    # push then pull: the 4 MB cross the spines twice, 1.6 s each way
    assert b.terms["push_then_pull"] == pytest.approx(3.2 * F)
    # under the single-path policy only one spine's 10 Mbit/s: 1.25 MB/s -> 3.2 + 0.8 s
    single = ps_bound(4, 1, MB, 20.0, 100.0, worker_leaves=["lf1"] * 4,
                         shard_leaves=["lf2"], spines=1, fabric_mbps=10.0)
    assert single.seconds == pytest.approx(4.0 * F)


def test_sync_ps_shards_split_the_port_load():
    """2 shards on hosts of 20 Mbit/s, 4 workers: each shard port carries 4 x 0.5 MB =
    2 MB = 0.8 s, then a 0.5 MB slice back 0.2 s -> 1.0 s; the worker link 2 x 0.4 s."""
    b = ps_bound(4, 2, MB, 20.0)
    assert b.terms["shard_port"] == pytest.approx(1.0 * F)
    assert b.seconds == pytest.approx(1.0 * F)
    # one slow shard (10 Mbit/s) sets the pace: 2 MB / 1.25 MB/s + 0.5 MB / 1.25 MB/s
    slow = ps_bound(4, 2, MB, 20.0, [20.0, 10.0])
    assert slow.seconds == pytest.approx((1.6 + 0.4) * F)


def test_sync_ps_uneven_worker_links():
    """Workers at 20, 20 and 10 Mbit/s into a 20 Mbit/s PS port. The slow worker's own
    pull and push: 2 x 1 MB / 1.25 MB/s = 1.6 s. The port chain: 3 MB out (1.2 s), then
    the last-answered worker's 1 MB back -- which may be a fast one: 0.4 s -> 1.6 s."""
    b = ps_bound(3, 1, MB, [20.0, 20.0, 10.0], 20.0)
    assert b.terms["worker_link"] == pytest.approx(1.6 * F)
    assert b.terms["shard_port"] == pytest.approx(1.6 * F)
    assert b.seconds == pytest.approx(1.6 * F)


def test_async_ps_shares_the_port_in_full_duplex():
    """async, 3 workers x 1 MB, all links 20 Mbit/s. A worker's own link: push 0.4 s then
    pull 0.4 s (sequential for that worker) = 0.8 s x F. The port carries 3 MB per
    direction per round of 3 updates, both directions at once, so the period >= 1.2 s x
    FA; with 0.1 s of compute in that period, communication >= 1.2 s x FA - 0.1 s."""
    b = ps_bound(3, 1, MB, 20.0, mode="async", compute_s=0.1)
    assert b.terms["worker_link"] == pytest.approx(0.8 * F)
    assert b.terms["shard_port_period"] == pytest.approx(1.2 * FA)
    assert b.seconds == pytest.approx(1.2 * FA - 0.1)
    assert b.bottleneck == "shard port"
    # with long compute the port has slack: only the worker's own transfer remains
    slack = ps_bound(3, 1, MB, 20.0, mode="ssp", compute_s=5.0)
    assert slack.seconds == pytest.approx(0.8 * F)
    assert slack.bottleneck == "worker link"
    assert ps_bound(3, 1, MB, 20.0, mode="backup").seconds == pytest.approx(1.2 * FA)


def test_ring_bound_host_link():
    """N = 4, M = 4 MiB, B = 50 Mbit/s = 6.25 MB/s: each rank sends 2 x 3/4 x 4,194,304 =
    6,291,456 B, 1.00663 s, x FA (its link also carries the incoming flow's ACKs)."""
    b = ring_bound(4, 4 * 2**20, 50.0)
    assert b.seconds == pytest.approx(6_291_456 / 6.25e6 * FA)
    assert b.seconds == pytest.approx(1.0755, abs=1e-4)
    assert b.bottleneck == "host link"
    assert ring_bound(1, MB, 50.0).seconds == 0.0


def test_ring_order_decides_the_fabric_term():
    """Same ring on 2 leaves joined by 1 spine x 50 Mbit/s. Grouped order (lf1, lf1, lf2,
    lf2): one edge leaves each leaf: 6,291,456 B at 6.25 MB/s = 1.00663 s, as much as
    the host link. Interleaved (lf1, lf2, lf1, lf2): every edge crosses, two leave each
    leaf: 2.01327 s, the bottleneck."""
    s = 6_291_456
    grouped = ring_bound(4, 4 * 2**20, 50.0, leaves=["lf1", "lf1", "lf2", "lf2"],
                            spines=1, fabric_mbps=50.0)
    assert grouped.terms["fabric"] == pytest.approx(s / 6.25e6 * FA)
    assert grouped.seconds == pytest.approx(s / 6.25e6 * FA)
    inter = ring_bound(4, 4 * 2**20, 50.0, leaves=["lf1", "lf2", "lf1", "lf2"],
                          spines=1, fabric_mbps=50.0)
    assert inter.seconds == pytest.approx(2 * s / 6.25e6 * FA)
    assert inter.bottleneck.startswith("fabric (")
    # two spines double the capacity: back to the host link
    two = ring_bound(4, 4 * 2**20, 50.0, leaves=["lf1", "lf2", "lf1", "lf2"],
                        spines=2, fabric_mbps=50.0)
    assert two.seconds == pytest.approx(s / 6.25e6 * FA)


def test_latency_terms():
    """alpha = 1 ms: sync PS adds 2 alpha (a pull, then a push), the ring 2(N-1) alpha."""
    assert ps_bound(3, 1, MB, 20.0, alpha_s=0.001).seconds == pytest.approx(
        1.6 * F + 0.002)
    assert ring_bound(4, 4 * 2**20, 50.0, alpha_s=0.001).seconds == pytest.approx(
        6_291_456 / 6.25e6 * FA + 0.006)


def test_incast_bound():
    """4 senders x 262,144 B into a 20 Mbit/s receiver: 1,048,576 B / 2.5 MB/s =
    0.4194304 s x F; each sender's own 20 Mbit/s link needs only a quarter of that."""
    b = incast_bound(4, 262_144, 20.0, sender_mbps=20.0)
    assert b.seconds == pytest.approx(0.4194304 * F)
    assert b.terms["sender_link"] == pytest.approx(0.4194304 / 4 * F)
    assert b.bottleneck == "receiver port"
    # all senders on another leaf behind one 10 Mbit/s spine link: 0.8388608 s
    fab = incast_bound(4, 262_144, 20.0, sender_leaves=["lf2"] * 4, receiver_leaf="lf1",
                          spines=1, fabric_mbps=10.0)
    assert fab.seconds == pytest.approx(0.8388608 * F)
    assert fab.bottleneck.startswith("fabric (")


def test_bad_inputs_name_the_argument():
    with pytest.raises(ValueError, match="mode"):
        ps_bound(3, 1, MB, 20.0, mode="bsp")
    with pytest.raises(ValueError, match="workers"):
        ps_bound(0, 1, MB, 20.0)
    with pytest.raises(ValueError, match="host_mbps"):
        ps_bound(3, 1, MB, [20.0, 20.0])
    with pytest.raises(ValueError, match="spines"):
        ps_bound(3, 1, MB, 20.0, worker_leaves=["lf1"] * 3, shard_leaves=["lf2"])
    with pytest.raises(ValueError, match="leaves"):
        ring_bound(4, MB, 20.0, leaves=["lf1"])
    # every rank on one leaf: no fabric term is needed, and none is asked for
    assert ring_bound(2, MB, 20.0, leaves=["lf1", "lf1"]).terms["fabric"] == 0.0
