"""IncastJob.bound on synthetic runs (rootless): the inputs it gathers from a run (the
receiver's and each sender's link rate, their leaves, the spines the routing lets a
flow use, the fabric's rate, the block size, the MTU) give the round's bound worked out
by hand from incast_bound's formula, max(N·S·f/B_r, S·f/B_s, fabric) (no α: a run's
map gives no latency); and the collapse condition's numbers and sentence at its edges.

Rates are Mbit/s: 40 Mbit/s moves 5,000,000 B/s, 8 Mbit/s 1,000,000, 2 Mbit/s 250,000.
"""
import pytest

from incastlab.jobs.incast import IncastJob, collapse_condition
from incastlab.jobs.incast_bound import incast_bound
from tests.job_bound_runs import fabric, run

F = 1514 / 1448    # a bulk flow's wire bytes per payload byte at MTU 1500
F9000 = 9014 / 8948
S = 250_000
# 2 leaves x 3 hosts: h1-h3 on lf1, h4-h6 on lf2. The receiver h4 (lf2) at 40 Mbit/s;
# senders h1, h2 on lf1 (20 and 8 Mbit/s) and h5 on lf2 (20 Mbit/s)
RATES = {"h1": 20.0, "h2": 8.0, "h4": 40.0, "h5": 20.0}
SENDERS = ["h1", "h2", "h5"]


def _spec(policy="ecmp", block=S):
    return ('[workload]\nkind = "incast"\nsenders = 3\n'
            + (f"block_bytes = {block}\n" if block else "")
            + f'[routing]\npolicy = "{policy}"\n')


def _bound(tmp_path, spec=None, fab=None, servers=("h4",), workers=SENDERS, **kw):
    a = run(tmp_path / "run", spec or _spec(), fab or fabric(RATES, fabric_mbps=2.0),
            servers, workers, **kw)
    return a, a.tables["bound"]


def test_every_input_of_a_round_from_the_run(tmp_path):
    _, b = _bound(tmp_path)
    # receiver port: 3 x 250,000 B·f over 5,000,000 B/s; the slowest sender (h2) sends
    # its block at 1,000,000 B/s; lf1's two senders put 500,000 B on its 2 spine links of
    # 2 Mbit/s each (ECMP: both spines), 500,000 B/s: 1 s·f, the bottleneck
    assert b.terms == {"receiver_port": pytest.approx(0.15 * F),
                       "sender_link": pytest.approx(0.25 * F),
                       "fabric": pytest.approx(1.0 * F), "latency": 0.0}
    assert b.seconds == pytest.approx(1.0 * F)
    assert b.bottleneck == "fabric (uplinks of lf1)"
    by_hand = incast_bound(3, S, 40.0, sender_mbps=[20.0, 8.0, 20.0],
                           sender_leaves=["lf1", "lf1", "lf2"], receiver_leaf="lf2",
                           spines=2, fabric_mbps=2.0)
    assert b.formula == by_hand.formula


def test_single_routing_puts_every_flow_on_one_spine(tmp_path):
    _, b = _bound(tmp_path, _spec("single"))
    # the same 500,000 B over one 2 Mbit/s spine link: 2 s·f
    assert b.terms["fabric"] == pytest.approx(2.0 * F)
    assert b.seconds == pytest.approx(2.0 * F)


def test_a_fast_fabric_leaves_the_slowest_sender_at_mtu_9000(tmp_path):
    _, b = _bound(tmp_path, fab=fabric(RATES, fabric_mbps=100.0, mtu=9000))
    # fabric: 500,000 B over 2 x 12,500,000 B/s = 0.02 s·f, below the sender link's 0.25
    assert b.terms["fabric"] == pytest.approx(0.02 * F9000)
    assert b.terms["receiver_port"] == pytest.approx(0.15 * F9000)
    assert (b.seconds, b.bottleneck) == (pytest.approx(0.25 * F9000), "sender link")


def test_one_leaf_has_no_fabric_term_and_the_receiver_port_can_bind(tmp_path):
    # 1 leaf x 4 hosts, no spines: receiver h1 at 8 Mbit/s, senders h2-h4 at 10 Mbit/s
    fab = fabric({"h1": 8.0}, spines=0, leaves=1, hosts_per_leaf=4)
    _, b = _bound(tmp_path, fab=fab, servers=("h1",), workers=["h2", "h3", "h4"])
    # 750,000 B·f at 1,000,000 B/s; each sender's 250,000 B·f at 1,250,000 B/s
    assert b.terms == {"receiver_port": pytest.approx(0.75 * F),
                       "sender_link": pytest.approx(0.2 * F), "fabric": 0.0, "latency": 0.0}
    assert (b.seconds, b.bottleneck) == (pytest.approx(0.75 * F), "receiver port")


def test_the_block_defaults_to_the_fields_default(tmp_path):
    _, b = _bound(tmp_path, _spec(block=None), fab=fabric(RATES, fabric_mbps=100.0))
    # IncastFields.block_bytes = 131,072: 3 x 131,072 B·f at 5,000,000 B/s
    assert b.terms["receiver_port"] == pytest.approx(3 * 131_072 * F / 5e6)
    assert b.terms["sender_link"] == pytest.approx(131_072 * F / 1e6)


@pytest.mark.parametrize("servers, workers, placement", [
    (("h4",), SENDERS, False),     # a run directory without its placement
    ((), SENDERS, True),           # no receiver
    (("h4",), [], True),           # no senders
    (("h9",), SENDERS, True),      # the receiver is not in the fabric map
    (("h4",), ["h1", "h9"], True),  # nor is a sender
])
def test_no_bound_without_the_placement_or_the_rates(tmp_path, servers, workers, placement):
    a, _ = _bound(tmp_path, servers=servers, workers=workers, placement=placement)
    assert IncastJob().bound(a) is None


def test_no_bound_without_a_fabric_map(tmp_path):
    a = run(tmp_path / "run", _spec(), None, ("h4",), SENDERS)
    assert a.fabric is None and IncastJob().bound(a) is None


# --- the collapse condition: exact numbers and the sentence's edges ------------------

def test_round_and_worst_goodput_exactly():
    c = collapse_condition(16, 65536, 200.0, 200)
    # 16 x 65,536 x 8 = 8,388,608 bits at 200 Mbit/s = 41.94304 ms; one 200 ms timeout
    # per round: 8,388,608 bits / 0.24194304 s
    assert c["round_ms"] == pytest.approx(41.94304, rel=1e-12)
    assert c["worst_mbps"] == pytest.approx(8_388_608 / 0.24194304 / 1e6, rel=1e-12)
    assert c["rto_rounds"] == 0 and c["mean_goodput_mbps"] is None
    assert "N·block = 16 × 64 KiB through the receiver's 200 Mbit/s link" in c["text"]


def test_the_rounds_with_an_rto_are_returned():
    c = collapse_condition(4, 1024, 10.0, 200, [5.0], rto_rounds=1)
    assert c["rto_rounds"] == 1 and "1 of them with an RTO" in c["text"]
    assert "4 × 1 KiB" in c["text"]


def test_the_kernel_default_is_named_right_after_the_number():
    c = collapse_condition(12, 65536, 20.0, None)
    assert "RTO_min = 200 ms (the kernel default), " in c["text"]
    assert "RTO_min = 200 ms, " in collapse_condition(12, 65536, 20.0, 200)["text"]


@pytest.mark.parametrize("rto_ms, tick_note", [(1, True), (10, True), (11, False)])
def test_the_timer_tick_note_up_to_10_ms(rto_ms, tick_note):
    # 41.9 ms rounds: a timeout of up to 11 ms is far below 2 rounds, no collapse
    c = collapse_condition(16, 65536, 200.0, rto_ms, [150.0])
    assert c["expected"] == "no collapse"
    note = "with the kernel's timer tick rounding a 1 ms timeout up to a few ms. Measured"
    assert (note in c["text"]) is tick_note
    assert ("(ideal 200). Measured" in c["text"]) is not tick_note
