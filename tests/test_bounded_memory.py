"""Bounded-memory analysis (analysis/chunked.py) gives exactly the tables of the
all-in-memory one: tcp.py on tcp.combine() of every capture.

The run directory mixes what the merge has to get right: two connections with the same
packet times (ties across flows when losses are sorted by time), a flow seen at three
capture points (via, seen_at), a flow whose receiver-side capture is not at its
destination host (spurious unknown), a 4-tuple reused by two connections, every
retransmission kind (scenario_tcp), and queue episodes whose senders come from the
captures. `chunk_packets=1` forces one chunk per connection hash.
"""
import numpy as np
import pandas as pd
import pytest

from incastlab.analysis import chunked, episodes, flowstats, rundir, samples, tcp
from incastlab.analysis import latency as lat
from incastlab.analysis.pcap import read_pcap
from incastlab.analysis.report import received_at_host as _received_at_host
from incastlab.commands.common import analyse
from incastlab.analysis.synthetic import MSS, TcpScript, make_demo_run, scenario_tcp, write_pcap

T0 = 1_700_000_000.0


def _bulk(script, t, n, lost=(), resend_at=None):
    """n segments from t, 1 ms apart, each ACKed cumulatively; `lost` segments are
    resent (in order) at `resend_at`."""
    script.handshake(t)
    for k in range(n):
        script.data(t + 0.01 + k * 0.001, k * MSS, lost=k in lost)
    for k in range(n):
        first_hole = min([x for x in lost if x <= k], default=None)
        acked = first_hole * MSS if first_hole is not None else (k + 1) * MSS
        script.ack(t + 0.01 + k * 0.001 + script.delay + 0.0001, acked)
    for j, k in enumerate(sorted(lost)):
        script.data(resend_at + j * 0.001, k * MSS)
    script.ack(resend_at + len(lost) * 0.001 + script.delay + 0.0001, n * MSS)
    script.fin(resend_at + 0.05, n * MSS)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    run = tmp_path_factory.mktemp("bounded") / "run"
    make_demo_run(run, t0=T0)  # queues, workers, fabric, flow paths, counters
    a, _ = scenario_tcp(t0=T0, src="10.0.1.1", dst="10.0.2.1", sport=40000, dport=29500)
    b, _ = scenario_tcp(t0=T0, src="10.0.1.2", dst="10.0.2.1", sport=40001, dport=29500)
    c = TcpScript(src="10.0.2.2", dst="10.0.1.1", sport=40002, dport=29501, t0=T0)
    _bulk(c, 0.002, 30, lost=(5, 17), resend_at=0.3)
    d1 = TcpScript(src="10.0.1.2", dst="10.0.2.2", sport=40003, dport=29502, t0=T0, isn=1000)
    _bulk(d1, 0.004, 10, lost=(3,), resend_at=0.1)
    d2 = TcpScript(src="10.0.1.2", dst="10.0.2.2", sport=40003, dport=29502, t0=T0,
                   isn=777_777)
    _bulk(d2, 0.5, 10, resend_at=0.6)
    sides = {"h1-eth0": a.sender + c.receiver, "h2-eth0": b.sender + d1.sender + d2.sender,
             "h3-eth0": a.receiver + b.receiver, "h4-eth0": c.sender,
             "lf1-eth1": [(t + 0.0001, p) for t, p in c.receiver],   # not at h1 itself
             "sp1-eth2": [(t - 0.0002, p) for t, p in a.receiver],   # between h1 and h3
             "lf2-eth2": d1.receiver + d2.receiver}
    for iface, side in sides.items():
        write_pcap(run / "pcap" / f"{iface}.pcap", side, T0)
    return run


def _store(run):
    store = chunked.CaptureStore()
    for p in sorted((run / "pcap").glob("*.pcap")):
        store.add(p.stem, read_pcap(p, cache=False))
    return store


def _all_in_memory(run, fabric, windows):
    """The analysis as report.py ran it before chunked.py: one frame of all captures."""
    t = tcp.combine({p.stem: read_pcap(p, cache=False)
                     for p in sorted((run / "pcap").glob("*.pcap"))})
    flows = tcp.data_flows(t)
    retrans, eps = tcp.retransmissions(t, flows)
    spurious = tcp.spurious_retransmissions(t, retrans, flows[_received_at_host(flows, fabric)])
    retrans = retrans.assign(spurious=spurious.to_numpy() if len(retrans) else [])
    return {"flows": flows, "reused": tcp.reused_tuples(t), "retrans": retrans,
            "recovery_episodes": eps, "losses": tcp.losses(t, flows),
            "flow_summary": flowstats.flow_summary(t, flows, retrans),
            "throughput": flowstats.throughput_series(t, flows),
            "flow_bytes": episodes.window_flow_bytes(t, windows), "tcp": t}


@pytest.mark.parametrize("chunk", ["one connection", "half the packets", "all"])
def test_chunked_tables_equal_all_in_memory(run, chunk):
    fabric = rundir.load_fabric(run)
    windows = episodes.episode_windows(rundir.load_queues(run), fabric)
    old = _all_in_memory(run, fabric, windows)
    with _store(run) as store:
        chunk_packets = {"one connection": 1, "half the packets": store.rows // 2,
                         "all": store.rows}[chunk]
        new = chunked.analyse_tcp(store, at_host=lambda f: _received_at_host(f, fabric),
                                  windows=windows, chunk_packets=chunk_packets)
        n_hashes = len(np.unique(chunked.connection_hash(
            *(old["tcp"][c].to_numpy() for c in tcp.FLOW_KEY))))
    # the scenario really has what the merge must order: several chunks, flows at 3
    # captures, a reused tuple, unknown spurious, RTO/fast/TLP episodes, losses
    if chunk == "one connection":
        assert new.chunks == n_hashes >= 4
    elif chunk == "all":
        assert new.chunks == 1
    else:
        assert 1 < new.chunks < n_hashes
    assert (old["flows"]["via"] != "").any() and len(old["reused"]) == 2
    assert old["retrans"]["spurious"].isna().any() and (old["retrans"]["spurious"] == True).any()  # noqa: E712
    assert {"rto", "fast", "tlp"} <= set(old["retrans"]["kind"]) and len(old["losses"]) >= 6
    assert old["losses"]["t"].duplicated().any()  # equal times in two flows
    assert len(windows) and sum(len(s) for s in old["flow_bytes"]) > 0
    for name in ("flows", "reused", "retrans", "recovery_episodes", "losses", "flow_summary",
                 "throughput"):
        pd.testing.assert_frame_equal(getattr(new, name), old[name], obj=name)
    assert new.throughput.attrs["bin_s"] == old["throughput"].attrs["bin_s"]
    assert len(new.flow_bytes) == len(old["flow_bytes"])
    for got, want in zip(new.flow_bytes, old["flow_bytes"], strict=True):
        pd.testing.assert_series_equal(got, want)


def test_empty_store_gives_the_empty_tables():
    with chunked.CaptureStore() as store:
        new = chunked.analyse_tcp(store)
        assert store.t_range is None and store.chunks() == []
    old = tcp.combine({})
    pd.testing.assert_frame_equal(new.flows, tcp.data_flows(old))
    assert new.retrans.empty and new.losses.empty and new.throughput.empty
    assert new.flow_bytes is None


def test_connection_hash_is_the_same_both_ways():
    src, dst = np.array([1, 2, 3], np.uint32), np.array([4, 5, 3], np.uint32)
    sport, dport = np.array([10, 11, 12], np.uint16), np.array([20, 21, 13], np.uint16)
    fwd = chunked.connection_hash(src, dst, sport, dport)
    assert (fwd == chunked.connection_hash(dst, src, dport, sport)).all()
    assert ((fwd >= 0) & (fwd < chunked.NHASH)).all()


def _assert_same(x, y, where="analysis"):
    """Equal nested metrics/tables (DataFrames compared with their dtypes)."""
    if isinstance(x, pd.DataFrame):
        pd.testing.assert_frame_equal(x, y, obj=where, check_exact=True)
    elif isinstance(x, pd.Series):
        pd.testing.assert_series_equal(x, y, obj=where, check_exact=True)
    elif isinstance(x, dict):
        assert set(x) == set(y), where
        for k in x:
            _assert_same(x[k], y[k], f"{where}.{k}")
    elif isinstance(x, (list, tuple)) and len(x) and isinstance(x[0], (pd.DataFrame, dict)):
        assert len(x) == len(y), where
        for i, (a, b) in enumerate(zip(x, y, strict=True)):
            _assert_same(a, b, f"{where}[{i}]")
    else:
        assert x == y or (x != x and y != y), where  # NaN equals NaN here


def _sorted(df: pd.DataFrame) -> pd.DataFrame:
    return df.sort_values(list(df.columns), kind="stable").reset_index(drop=True)


def _same_samples(x: lat.Samples, y, where):
    """Two latency sample tables hold the same rows (the chunks append them in their own
    order: compared sorted); `y` a Samples or an all-in-memory DataFrame."""
    assert isinstance(x, lat.Samples), where
    fy = y.frame() if isinstance(y, lat.Samples) else y
    pd.testing.assert_frame_equal(_sorted(x.frame()), _sorted(fy.astype(
        x.frame().dtypes.to_dict())), obj=where)


def test_report_is_the_same_in_one_chunk_and_in_one_per_connection(run, tmp_path):
    """The whole analysis (metrics.json's numbers, every table, latency and incast
    episodes included) does not depend on how many connections are analysed at once;
    latency's per-sample tables are files (lat.Samples) with the same rows both ways, and
    the same rows and summary as latency.analyse on every packet in memory."""
    one = analyse(run, cache=False, chunk_packets=10**9)
    many = analyse(run, cache=False, chunk_packets=1)
    assert one.metrics["flows"] == 4 and one.metrics["retransmissions"]["retrans_packets"] > 8
    lt1, ltn = one.tables["latency"], many.tables["latency"]
    assert lt1["rtt"].frame()["flow"].nunique() == 4
    assert len(lt1["sojourn"]) > 50 and len(one.tables["episodes"])
    assert (lt1["summary"]["measure"] == "sojourn").sum() >= 2  # several pairs of points
    _assert_same(one.metrics, many.metrics, "metrics")
    for name in one.tables:
        if name not in ("tcp", "latency"):
            _assert_same(one.tables[name], many.tables[name], name)
    for name in ("summary", "queue_delay"):
        _assert_same(lt1[name], ltn[name], f"latency.{name}")
    for name in ("rtt", "sojourn"):
        _same_samples(lt1[name], ltn[name], f"latency.{name}")
    # the same as the all-in-memory latency.analyse (DataFrames) on every packet
    full = lat.analyse(one)
    _assert_same(lt1["summary"], full["summary"], "latency.summary vs analyse")
    assert lat.summary(lt1) == lat.summary(full)
    for name in ("rtt", "sojourn"):
        _same_samples(lt1[name], full[name], f"latency.{name} vs analyse")
    # the CSV files the report writes: the same rows, the same columns as the tables
    for name, kind in (("latency_rtt_samples", "rtt"), ("latency_sojourn", "sojourn")):
        csvs = []
        for which, a in (("one", one), ("many", many)):
            a.out_dir = tmp_path / which
            assert lat.write_full(a, a.tables["latency"][kind], name) == f"tables/{name}.csv"
            csvs.append(pd.read_csv(a.out_dir / "tables" / f"{name}.csv"))
        assert list(csvs[0].columns) == list(full[kind].columns)
        assert len(csvs[0]) == len(full[kind])
        pd.testing.assert_frame_equal(_sorted(csvs[0]), _sorted(csvs[1]), obj=name)
    # the packets themselves: all of them while they fit in one chunk, else only the
    # worst flow's connection (the sequence graph's)
    every = tcp.combine({p.stem: read_pcap(p, cache=False)
                         for p in sorted((run / "pcap").glob("*.pcap"))})
    assert len(one.tables["tcp"]) == len(every)
    worst = many.tables["tcp"].attrs["only_connection_of"]
    f = one.tables["flows"].set_index("flow").loc[worst]
    conn = {(f.src, f.dst, f.sport, f.dport), (f.dst, f.src, f.dport, f.sport)}
    mine = [k in conn for k in every[tcp.FLOW_KEY].itertuples(index=False, name=None)]
    sample = many.tables["tcp"]
    assert 0 < len(sample) < len(every)
    assert len(sample[[k in conn for k in sample[tcp.FLOW_KEY].itertuples(
        index=False, name=None)]]) == sum(mine)


def test_a_capture_that_cannot_be_stored_leaves_the_store_as_it_was(run, monkeypatch):
    """Disk full while one capture's columns are written: the captures before it are
    analysed as if it had not been added (nothing half-written is read back)."""
    # the second capture's packets run later than the first's: its times would widen
    # the store's span if they were taken before its columns were all written
    first, second = run / "pcap" / "lf2-eth2.pcap", run / "pcap" / "h1-eth0.pcap"
    with chunked.CaptureStore() as store:
        store.add(first.stem, read_pcap(first, cache=False))
        before = (list(store.ifaces), store.rows, store.t_range, store.data_range,
                  store.frame())
        real_save, saved = np.save, []

        def save(path, arr):  # the fourth column of the second capture hits a full disk
            if len(saved) == 3:
                raise OSError(28, "No space left on device")
            saved.append(path)
            real_save(path, arr)

        monkeypatch.setattr(np, "save", save)
        with pytest.raises(OSError):
            store.add(second.stem, read_pcap(second, cache=False))
        assert (list(store.ifaces), store.rows, store.t_range, store.data_range) == before[:4]
        pd.testing.assert_frame_equal(store.frame(), before[4])


def test_samples_keep_only_their_values_not_the_frames_blocks():
    """Samples keeps each part's value column, 8 bytes a sample: not a view of the part's
    frame, whose block of float columns (t, t_ack, rtt_s: 24 bytes a sample) would stay
    in memory with it (seen: 45 MB of a 6 M packet run's analysis held so)."""
    n = 1000
    df = pd.DataFrame({"flow": ["f"] * n, "role": ["a → b"] * n, "src": 1, "dst": 2,
                       "sport": 3, "dport": 4, "iface": "h1-eth0",
                       "t": np.arange(n, dtype=float), "t_ack": np.arange(n) + 0.5,
                       "rtt_s": np.full(n, 0.5), "seq": 0, "len": 1448, "ip_id": 7,
                       "sack": False})
    s = lat.Samples(lat.RTT_COLUMNS, "rtt_s", lat.RTT_KEYS)
    try:
        s.add(df)
        v = s._vals[0]
        assert v.base is None and v.flags.owndata  # its own 8 bytes a sample, no more
        assert v.tolist() == [0.5] * n
    finally:
        s.close()


def test_the_heap_is_trimmed_after_each_chunk(run, monkeypatch):
    """What each chunk freed goes back to the system before the next (glibc keeps it in
    heap holes otherwise: a 6 M packet report's RSS grew 233 MB over 3 chunks, 57 MB of
    them held by Python); on this glibc machine the trim is really there."""
    assert chunked._LIBC is not None and hasattr(chunked._LIBC, "malloc_trim")
    calls = []
    monkeypatch.setattr(chunked, "release_freed_memory", lambda: calls.append(1))
    with _store(run) as store:
        tt = chunked.analyse_tcp(store, chunk_packets=1)
    assert tt.chunks >= 4 and len(calls) == tt.chunks


# ---- latency samples in bounded memory (samples.py's sketch) ------------------------------

def _rtt_part(rng, n, flows=("f1", "f2", "f3")):
    """n RTT rows over `flows` (two roles), the delays spread over seven decades (1 us
    to 10 s, lognormal), with exact zeros and a few negative values among them."""
    v = np.exp(rng.uniform(np.log(1e-6), np.log(10.0), n)) * rng.lognormal(0, 0.3, n)
    v[rng.random(n) < 0.02] = 0.0
    v[rng.random(n) < 0.005] *= -1
    flow = rng.choice(list(flows), n)
    return pd.DataFrame({"flow": flow, "role": np.where(flow == "f1", "a → b", "c → d"),
                         "rtt_s": v})


def _within(est, exact):
    """The sketch's stated error: REL_ERROR of the exact value, or ZERO_S near zero (and
    the float rounding of a bucket edge, 1e-12 relative)."""
    err = samples.REL_ERROR * abs(exact) + samples.ZERO_S
    return abs(est - exact) <= err * (1 + 1e-9) + 1e-12 * abs(exact)


def test_sketched_quantiles_are_within_the_stated_error_of_the_exact_ones():
    """Past its exact limit a Samples keeps a sketch whose quantiles are each within
    REL_ERROR (0.5 %) of the exact quantile of the same samples (ZERO_S near 0); counts
    and maxima stay exact. The summary table on it is the exact one but for that."""
    rng = np.random.default_rng(11)
    parts = [_rtt_part(rng, 20_000) for _ in range(10)]
    every = pd.concat(parts, ignore_index=True)
    s = samples.Samples(["flow", "role", "rtt_s"], "rtt_s", ["role", "flow"],
                        exact_limit=30_000)
    try:
        for p in parts:
            s.add(p)
        assert not s.exact and len(s) == len(every)
        c = s.arrays()
        qs = (0.0, 0.001, 0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99, 0.999, 1.0)
        checks = [(c.dist(), every["rtt_s"].to_numpy())]
        for role, d, _ in samples.groups(c, "role"):
            checks.append((d, every.loc[every["role"] == role, "rtt_s"].to_numpy()))
        for d, exact_values in checks:
            exact = lat.weighted_quantiles(exact_values, qs=qs)
            for q, got, want in zip(qs, lat.dist_quantiles(d, qs), exact, strict=True):
                assert _within(got, want), (q, got, want)
            assert d.samples == len(exact_values) and d.hi == exact_values.max()
        est, full = lat.summary_table(s, None, None), lat.summary_table(every, None, None)
        assert list(est["group"]) == list(full["group"]) == ["all flows", "a → b", "c → d"]
        assert (est["samples"] == full["samples"]).all()
        assert (est["max_ms"] == full["max_ms"]).all()
        for col in ("p50_ms", "p90_ms", "p99_ms"):
            for got, want in zip(est[col], full[col], strict=True):
                assert _within(got / 1e3, want / 1e3), (col, got, want)
        assert est["note"].str.contains("within 0.5% (sketch)", regex=False).all()
    finally:
        s.close()


def test_samples_memory_does_not_grow_with_the_samples():
    """Ten times the samples, the same memory: what a Samples holds past its exact
    limit (traced by tracemalloc: numpy's buffers included) is its sketch, a few kB per
    group, not 12 bytes a sample (red when the values were kept: 2.4 MB more at 200k)."""
    import tracemalloc

    def held(n_parts):
        rng = np.random.default_rng(5)
        parts = [_rtt_part(rng, 10_000) for _ in range(n_parts)]
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            s = samples.Samples(["flow", "role", "rtt_s"], "rtt_s", ["role", "flow"],
                                exact_limit=15_000)
            for p in parts:
                s.add(p)
            s.arrays()
            kept = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
        assert len(s) == 10_000 * n_parts and s.nbytes() <= kept + 4096
        s.close()
        return kept

    small, big = held(2), held(20)
    assert big < small + 256 * 1024


def test_a_reports_latency_samples_stay_bounded_as_its_packets_grow(tmp_path, monkeypatch):
    """The report's latency tables past samples.EXACT_SAMPLES (5000 here, 2 M by default)
    of a synthetic run analysed a chunk at a time: the memory its RTT samples and
    sojourns hold does not grow with the run's packets (4x the packets: the same sketch,
    where the values alone grew by 12 bytes a sample), and every percentile of the
    summary is within the sketch's stated error of latency.analyse on every packet at
    once (counts and maxima exact)."""
    from incastlab.analysis.synthetic import make_bulk_run

    monkeypatch.setattr(samples, "EXACT_SAMPLES", 5000)
    held = {}
    for n in (40_000, 160_000):
        run = tmp_path / f"run{n}"
        make_bulk_run(run, n, leaves=2, hosts_per_leaf=1, connections_per_pair=1)
        a = analyse(run, cache=False, chunk_packets=n // 3)
        lt = a.tables["latency"]
        assert a.tables["tcp"].attrs.get("only_connection_of")  # more than one chunk
        assert not lt["rtt"].exact and not lt["sojourn"].exact and len(lt["rtt"]) > n // 5
        held[n] = (lt["rtt"].nbytes() + lt["sojourn"].nbytes(), len(lt["rtt"]) +
                   len(lt["sojourn"]))
    a.tables["tcp"] = tcp.combine({p.stem: read_pcap(p, cache=False)
                                   for p in sorted((run / "pcap").glob("*.pcap"))})
    full = lat.analyse(a)["summary"]
    est = lt["summary"]
    assert list(est["group"]) == list(full["group"]) and len(est) == 5  # all, 2 roles, 2 pairs
    assert (est["samples"] == full["samples"]).all() and (est["max_ms"] == full["max_ms"]).all()
    for col in ("p50_ms", "p90_ms", "p99_ms"):
        for got, want in zip(est[col], full[col], strict=True):
            assert _within(got / 1e3, want / 1e3), (col, got, want)
    (small, n_small), (big, n_big) = held[40_000], held[160_000]
    assert n_big - n_small > 50_000  # what 12 bytes a sample would have added: 600 kB
    assert big < small + 32 * 1024, held
