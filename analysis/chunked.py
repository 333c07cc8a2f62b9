"""TCP analysis of a run's captures in bounded memory.

Everything tcp.py computes for a flow depends only on that connection's packets (both
directions) at the capture points that saw it. So the captures are read one at a time
(`CaptureStore.add`), reduced to the TCP rows and the columns tcp.py and episodes.py
read (41 bytes a packet, instead of ~85 for a parsed capture and ~270 once all captures
were combined in one frame), and spilled to a scratch directory as NumPy files, each
capture's rows ordered by a hash of their connection (the same for both directions).
`analyse_tcp` then loads one group of hash values at a time from every capture -- at
most `chunk_packets` packets, unless one connection alone holds more -- runs tcp.py's
functions on it, and merges the parts in the order the all-in-memory analysis gives
(flows by key, retransmissions and throughput by flow, losses by time then flow, the
recovery episodes renumbered in flow order). tests/test_bounded_memory.py checks that
the tables are equal to those of tcp.combine() + tcp.py on the whole run.

Peak memory is then the larger of one parsed capture and one chunk, plus what the
merged tables and the report stages' reductions of the chunks (stages.Stage.reduce:
latency's samples, bounded by samples.Samples; failover's per-flow rows) hold; the
heap is trimmed after each chunk (release_freed_memory), or what chunks free stays
resident and the peak grows with the run (benchmarks/parse_pcap.py and
benchmarks/analysis_memory.py measure it).
"""
from __future__ import annotations

import ctypes
import ctypes.util
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from . import episodes as ep
from . import flowstats, tcp

# the columns tcp.py and episodes.py read, with the parser's own (narrow) dtypes
KEEP = (("t", np.float64), ("src", np.uint32), ("dst", np.uint32), ("sport", np.uint16),
        ("dport", np.uint16), ("seq", np.uint32), ("ack", np.uint32), ("flags", np.uint8),
        ("payload_len", np.int32), ("ip_id", np.uint16), ("sack", bool),
        ("sack_hi", np.uint32))
NHASH = 4096               # connection hash values: the finest split into chunks
CHUNK_PACKETS = 2_000_000  # packets loaded at once (~41 bytes each, plus tcp.py's work)


def connection_hash(src, dst, sport, dport) -> np.ndarray:
    """Hash in [0, NHASH) of each packet's connection, the same for both directions."""
    a = (np.asarray(src).astype(np.uint64) << np.uint64(16)) | np.asarray(sport, np.uint64)
    b = (np.asarray(dst).astype(np.uint64) << np.uint64(16)) | np.asarray(dport, np.uint64)
    lo, hi = np.minimum(a, b), np.maximum(a, b)
    with np.errstate(over="ignore"):  # multiplicative mixing wraps modulo 2**64 on purpose
        x = lo * np.uint64(0x9E3779B97F4A7C15) ^ hi * np.uint64(0xC2B2AE3D27D4EB4F)
    x ^= x >> np.uint64(31)
    return (x % np.uint64(NHASH)).astype(np.int64)


class CaptureStore:
    """The TCP rows of a run's captures, added one capture at a time and read back one
    group of connections at a time. A context manager: the scratch files go on exit.

    `directory`: where the scratch directory is made (default: the system's temporary
    directory)."""

    def __init__(self, directory=None):
        self._tmp = tempfile.TemporaryDirectory(prefix="incastlab-tcp-", dir=directory)
        self.dir = Path(self._tmp.name)
        self.ifaces: list[str] = []            # in the order added (the report's file order)
        self._cum: list[np.ndarray] = []       # per capture: row offset of each hash value
        self.rows = 0
        self.t_range: tuple[float, float] | None = None       # all TCP rows (s)
        self.data_range: tuple[float, float] | None = None    # rows with payload (s)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self) -> None:
        self._tmp.cleanup()

    def add(self, iface: str, df: pd.DataFrame) -> int:
        """Keep the TCP rows (whole headers captured) of one parsed capture (a
        pcap.read_pcap frame); returns how many. The frame can be dropped afterwards."""
        if iface in self.ifaces:
            raise ValueError(f"capture {iface} added twice")
        keep = (df["proto"].to_numpy() == 6) & df["hdr_ok"].to_numpy()
        h = connection_hash(*(df[c].to_numpy()[keep] for c in tcp.FLOW_KEY))
        order = np.argsort(h, kind="stable")  # stable: a connection's rows keep their order
        k = len(self.ifaces)
        t_range, data_range = self.t_range, self.data_range
        for name, dtype in KEEP:  # a failure here (disk full) leaves the store as it was
            col = df[name].to_numpy()[keep][order].astype(dtype, copy=False)
            np.save(self.dir / f"{k}.{name}.npy", col)
            if name == "t" and len(col):
                t_range = _widen(t_range, col)
            elif name == "payload_len" and (col > 0).any():
                t = np.load(self.dir / f"{k}.t.npy", mmap_mode="r")
                data_range = _widen(data_range, t[col > 0])
        self.t_range, self.data_range = t_range, data_range
        self.ifaces.append(iface)
        self._cum.append(np.concatenate([[0], np.cumsum(np.bincount(h, minlength=NHASH))]))
        self.rows += int(keep.sum())
        return int(keep.sum())

    def frame(self, lo: int = 0, hi: int = NHASH) -> pd.DataFrame:
        """The rows of every capture whose connection hash is in [lo, hi), as
        tcp.combine would give them (captures in the order added; `iface` categorical
        over the sorted capture names)."""
        cats = sorted(self.ifaces)
        code = {name: i for i, name in enumerate(cats)}
        cols = {name: [] for name, _ in KEEP}
        codes = []
        for k, iface in enumerate(self.ifaces):
            a, b = int(self._cum[k][lo]), int(self._cum[k][hi])
            if b <= a:
                continue
            for name, _ in KEEP:
                cols[name].append(np.array(np.load(self.dir / f"{k}.{name}.npy",
                                                   mmap_mode="r")[a:b]))
            codes.append(np.full(b - a, code[iface], np.int16))
        out = {name: np.concatenate(v) if v else np.empty(0, dt)
               for (name, dt), v in zip(KEEP, cols.values(), strict=True)}
        iface = pd.Categorical.from_codes(
            np.concatenate(codes) if codes else np.empty(0, np.int16), categories=cats)
        order = ["t", "iface", *(name for name, _ in KEEP if name != "t")]
        return pd.DataFrame({c: (iface if c == "iface" else out[c]) for c in order})

    def chunks(self, chunk_packets: int = CHUNK_PACKETS) -> list[tuple[int, int]]:
        """Ranges [lo, hi) of hash values holding at most `chunk_packets` rows each (one
        hash value alone may hold more); empty ranges are left out."""
        per_hash = np.diff(sum(self._cum)) if self._cum else np.zeros(NHASH, np.int64)
        out, lo, n = [], 0, 0
        for h in range(NHASH):
            c = int(per_hash[h])
            if n and n + c > chunk_packets:
                out.append((lo, h))
                lo, n = h, 0
            if n == 0 and c == 0:
                lo = h + 1
                continue
            n += c
        if n:
            out.append((lo, NHASH))
        return out


def _libc():
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None


_LIBC = _libc()


def release_freed_memory() -> None:
    """Give the pages that freed objects leave in the C heap back to the system (glibc's
    malloc_trim; nothing elsewhere). Why: glibc raises its mmap threshold to the size of
    the largest mmap'd block freed (up to 32 MB), so after the first chunk most of a
    chunk's arrays come from the heap, and what each chunk frees stays resident in heap
    holes pinned by the few small objects the chunk keeps (its table parts). Peak RSS then
    grew by ~40 bytes a packet of the run although Python held ~10 (tracemalloc): 292 MB
    before the first chunk of a 6 M packet run, 525 MB before the fourth; with a trim
    after each chunk the growth is what the kept parts hold."""
    trim = getattr(_LIBC, "malloc_trim", None)
    if trim is not None:
        trim(0)


def _widen(rng, t) -> tuple[float, float]:
    lo, hi = float(np.min(t)), float(np.max(t))
    return (lo, hi) if rng is None else (min(rng[0], lo), max(rng[1], hi))


@dataclass
class TcpTables:
    """tcp.py's tables for the whole run (see analyse_tcp)."""
    flows: pd.DataFrame
    reused: pd.DataFrame
    retrans: pd.DataFrame       # with a `spurious` column (object: True/False/NaN)
    recovery_episodes: pd.DataFrame
    losses: pd.DataFrame
    flow_summary: pd.DataFrame
    throughput: pd.DataFrame
    flow_bytes: list | None     # episodes.window_flow_bytes per window (None: no TCP rows)
    chunks: int                 # how many parts the captures were analysed in
    extra: dict                 # name -> merged table of each `extra` reducer, or the
    #                             exception it raised (the caller decides what that costs)


def analyse_tcp(store: CaptureStore, *, rto_threshold_s: float = tcp.DEFAULT_RTO_THRESHOLD_S,
                at_host=None, windows: list | None = None,
                chunk_packets: int = CHUNK_PACKETS, extra: dict | None = None) -> TcpTables:
    """tcp.py's tables of every flow in `store`, loading at most ~`chunk_packets` packets
    at a time; equal to running tcp.py on tcp.combine() of all captures.

    `at_host(flows) -> bool Series`: flows whose receiver-side capture is at the
    destination host (only those are judged for spurious retransmissions; default: all
    with a receiver-side capture). `windows`: episodes.episode_windows, whose per-flow
    bytes are collected on the way (TcpTables.flow_bytes). `extra`: {name: (fn, then)}
    more per-connection reducers, `fn(packets, flows, flow_summary, retrans) ->
    DataFrame` with a `flow` column, run on every chunk (`retrans`: the chunk's
    retransmissions, with `spurious`); the parts are ordered by flow as `flow_summary`
    is (after the column `then` first, e.g. "t", when not None)."""
    at_host = at_host or (lambda f: f["receiver_iface"].notna() if len(f)
                          else pd.Series(dtype=bool))
    windows = windows or []
    ranges = store.chunks(chunk_packets) or [(0, 0)]
    parts = []
    for c, (lo, hi) in enumerate(ranges):
        df = store.frame(lo, hi)
        parts.append(_chunk_tables(df, c, store, at_host, windows, rto_threshold_s, extra))
        del df
        release_freed_memory()
    return _merge_parts(parts, store, windows, extra)


def _chunk_tables(df, c, store, at_host, windows, rto_threshold_s, extra) -> dict:
    """tcp.py's tables of one chunk `df` (chunk number `c`), and each `extra` reducer's
    (or the exception it raised)."""
    flows = tcp.data_flows(df)
    retrans, eps = tcp.retransmissions(df, flows, rto_threshold_s=rto_threshold_s)
    spurious = tcp.spurious_retransmissions(df, retrans, flows[at_host(flows)])
    retrans = retrans.assign(spurious=spurious.to_numpy() if len(retrans) else [])
    part = {
        "flows": flows, "reused": tcp.reused_tuples(df, keys=True),
        "retrans": retrans.assign(_c=c), "eps": eps.assign(_c=c),
        "lost": tcp.losses(df, flows), "fsum": flowstats.flow_summary(df, flows, retrans),
        "tput": flowstats.throughput_series(df, flows, t_range=store.data_range),
        "bytes": ep.window_flow_bytes(df, windows)}
    for name, (fn, _) in (extra or {}).items():
        try:
            part[name] = fn(df, flows, part["fsum"], retrans)
        except Exception as exc:  # noqa: BLE001 - one reducer's bug costs its table only
            part[name] = exc
    return part


def _merge_parts(parts: list[dict], store: CaptureStore, windows: list,
                 extra: dict | None) -> TcpTables:
    """The chunks' tables merged in the order the all-in-memory analysis gives."""
    flows = _cat([p["flows"] for p in parts])
    if len(parts) > 1:
        flows = flows.sort_values(tcp.FLOW_KEY, kind="stable").reset_index(drop=True)
    rank = {f: i for i, f in enumerate(flows["flow"])} if len(flows) else {}

    def by_flow(name, col="flow", then=None):
        return _by_flow(parts, rank, name, col, then)

    reused = _cat([p["reused"] for p in parts])
    if len(reused) and len(parts) > 1:
        reused = reused.sort_values([*tcp.FLOW_KEY, "iface"], kind="stable")
    reused = reused.drop(columns=tcp.FLOW_KEY).reset_index(drop=True)
    retrans, eps = by_flow("retrans"), by_flow("eps")
    if len(eps):  # episode ids: consecutive in flow order, as one pass over all flows gives
        new = {(c, e): i for i, (c, e) in enumerate(zip(eps["_c"], eps["episode"],
                                                        strict=True))}
        eps = eps.assign(episode=np.arange(len(eps), dtype=np.int64))
        retrans["episode"] = [new[c, e] for c, e in zip(retrans["_c"], retrans["episode"],
                                                          strict=True)]
    retrans, eps = retrans.drop(columns="_c"), eps.drop(columns="_c")
    bin_s = next((p["tput"].attrs["bin_s"] for p in parts if "bin_s" in p["tput"].attrs),
                 None)  # the same in every part: the bins come from the run's data span
    tput = by_flow("tput")
    if bin_s is not None:
        tput.attrs["bin_s"] = bin_s
    flow_bytes = None
    if store.rows:
        flow_bytes = [_cat_series([p["bytes"][i] for p in parts]) for i in range(len(windows))]
    out_extra = {}
    for name, (_, then) in (extra or {}).items():
        err = next((p[name] for p in parts if isinstance(p[name], Exception)), None)
        out_extra[name] = err if err is not None else by_flow(name, then=then)
    return TcpTables(flows=flows, reused=reused, retrans=retrans, recovery_episodes=eps,
                     losses=by_flow("lost", then="t"), flow_summary=by_flow("fsum"),
                     throughput=tput, flow_bytes=flow_bytes, chunks=len(parts),
                     extra=out_extra)


def _by_flow(parts: list[dict], rank: dict, name: str, col: str = "flow",
             then: str | None = None) -> pd.DataFrame:
    """The parts of one table in one frame, by flow rank (after `then`), stable; the
    parts are let go as they are merged (the merged copy is the only one left)."""
    frames = [p[name] for p in parts]
    for p in parts:
        p[name] = None
    df = _cat(frames)
    del frames
    if len(df) == 0 or len(parts) == 1:
        return df
    r = df[col].map(rank).to_numpy()
    order = np.lexsort((r,) if then is None else (r, df[then].to_numpy()))  # stable
    return df.take(order).reset_index(drop=True)


def _cat(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """Concatenate the non-empty parts (an empty part's dtypes must not change the
    others'); all empty: the first part as it is."""
    full = [f for f in frames if len(f)]
    if not full:
        return frames[0]
    if len(full) == 1:
        return full[0].reset_index(drop=True)
    return pd.concat(full, ignore_index=True)


def _cat_series(parts: list[pd.Series]) -> pd.Series:
    full = [s for s in parts if len(s)]
    if len(full) <= 1:
        return full[0] if full else parts[0]
    return pd.concat(full).sort_index()
