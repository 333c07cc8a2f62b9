"""Per-sample tables kept out of memory (latency's RTT samples and sojourns): the rows
in a scratch file; in memory each row's value and a small code of its group while the
table holds at most EXACT_SAMPLES rows, beyond that a quantile sketch of the values of
each group, whose size does not grow with the samples.

The sketch (a logarithmic histogram, as DDSketch's): a value v with |v| > ZERO_S falls
in the bucket i with GAMMA**(i-1) < |v| <= GAMMA**i, GAMMA = (1 + REL_ERROR) / (1 -
REL_ERROR), and stands for 2 GAMMA**i / (GAMMA + 1) (with v's sign), which is within
REL_ERROR of every value of the bucket; |v| <= ZERO_S stands for 0. Buckets are ordered
as their values, so the sketch's q-quantile (the smallest value with at least q of the
samples at or below it, as latency.weighted_quantiles) is the representative of the
bucket that holds the exact q-quantile: within REL_ERROR of it (relative), or within
ZERO_S (absolute) of 0. Each group's exact minimum, maximum and count are kept too (a
quantile is clamped to them). A group's buckets span log(max/min) / log(GAMMA) at most:
about 460 for a factor of 100 between its smallest and largest delay, 16 bytes each.
"""
from __future__ import annotations

import math
import shutil
import tempfile
import weakref
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

__all__ = ["EXACT_SAMPLES", "REL_ERROR", "ZERO_S", "Compact", "Dist", "Samples", "compact",
           "groups"]

EXACT_SAMPLES = 2_000_000  # rows a table keeps exactly (~12 bytes each) before its sketch
REL_ERROR = 0.005          # the sketch's quantiles: within 0.5 % of the exact ones
ZERO_S = 1e-9              # |value| at most this: 0 (pcap times are ns at best)
_GAMMA = (1 + REL_ERROR) / (1 - REL_ERROR)
_LOG_GAMMA = math.log(_GAMMA)
_B0 = math.ceil(math.log(ZERO_S) / _LOG_GAMMA) - 1  # bucket index i -> i - _B0 >= 1
_SPAN = 1 << 14  # signed bucket numbers in (-_SPAN/2, _SPAN/2): |v| up to ~1e26 (s)
_MERGE_AT = 1 << 20  # pending (key, count) pairs folded into the sketch at once


def _buckets(v: np.ndarray) -> np.ndarray:
    """Signed bucket number of each finite value: 0 for |v| <= ZERO_S, else +-(i - _B0)."""
    a = np.abs(v)
    i = np.ceil(np.log(np.maximum(a, ZERO_S)) / _LOG_GAMMA).astype(np.int64) - _B0
    i = np.clip(i, 1, _SPAN // 2 - 1)
    return np.where(a <= ZERO_S, 0, np.where(v < 0, -i, i))


def _representatives(b: np.ndarray) -> np.ndarray:
    """The value each signed bucket number stands for (module docstring)."""
    i = np.abs(b).astype(float) + _B0
    rep = 2 * np.exp(i * _LOG_GAMMA) / (_GAMMA + 1)
    return np.where(b == 0, 0.0, np.where(b < 0, -rep, rep))


@dataclass(frozen=True)
class Dist:
    """The values of a set of samples: each sample's own (`counts` None), or a sketch's
    buckets (each one's representative value, ascending, and its count) with the
    samples' exact min `lo` and max `hi` (module docstring)."""
    values: np.ndarray
    counts: np.ndarray | None = None
    lo: float = math.nan
    hi: float = math.nan

    @property
    def exact(self) -> bool:
        return self.counts is None

    @property
    def samples(self) -> int:
        """How many samples (finite values) it describes."""
        if self.counts is None:
            return int(np.isfinite(self.values).sum())
        return int(self.counts.sum())


@dataclass(frozen=True)
class Compact:
    """A sample table in memory (`compact`): per value (or sketch bucket) its group
    `codes` (row of `groups`, a frame of the key columns), with the bucket `counts` and
    each code's exact `lo`/`hi` when sketched (None: exact)."""
    values: np.ndarray
    codes: np.ndarray
    groups: pd.DataFrame
    counts: np.ndarray | None = None
    lo: np.ndarray | None = None
    hi: np.ndarray | None = None

    @property
    def exact(self) -> bool:
        return self.counts is None

    def dist(self, pick: np.ndarray | None = None) -> Dist:
        """The Dist of every sample, or of those whose code `pick` (bool by code) is True."""
        if self.counts is None:
            return Dist(self.values if pick is None else self.values[pick[self.codes]])
        rows = slice(None) if pick is None else pick[self.codes]
        codes = slice(None) if pick is None else pick[:len(self.lo)]
        lo, hi = self.lo[codes], self.hi[codes]
        return Dist(self.values[rows], self.counts[rows],
                    float(np.min(lo)) if len(lo) else math.nan,
                    float(np.max(hi)) if len(hi) else math.nan)


class Samples:
    """A per-sample latency table (RTT samples or sojourns) kept out of memory: the rows
    are appended to a CSV file in a scratch directory (header once; the report copies it
    to tables/); in memory, while there are at most `exact_limit` rows (None:
    EXACT_SAMPLES), only each row's value (float64, the same numbers the table holds) and
    a small code of its group (`keys`: int32), ~12 bytes a sample instead of ~100; beyond
    that a sketch of each group's values (module docstring), whose size depends on the
    groups and the spread of their values, not on how many samples there are.
    `summary_table`, `summary` and the figure read it through `compact`; the scratch
    directory goes with the object."""

    def __init__(self, columns, value: str, keys, directory=None,
                 exact_limit: int | None = None):
        self.columns, self.value, self.keys = list(columns), value, list(keys)
        self.exact_limit = EXACT_SAMPLES if exact_limit is None else int(exact_limit)
        self._dir = tempfile.mkdtemp(prefix="incastlab-latency-", dir=directory)
        self._gone = weakref.finalize(self, shutil.rmtree, self._dir, True)
        self.path = Path(self._dir) / "samples.csv"
        self.rows = 0
        self._code: dict[tuple, int] = {}      # group key -> code
        self._vals: list[np.ndarray] = []      # exact: each part's values and codes
        self._codes: list[np.ndarray] = []
        self._sketch = None                    # beyond exact_limit: (keys, counts)
        self._pending: list[tuple[np.ndarray, np.ndarray]] = []
        self._lo = self._hi = np.empty(0)      # sketched: each code's min and max
        self._merged = None

    def __len__(self) -> int:
        return self.rows

    @property
    def exact(self) -> bool:
        """Are the values still all in memory (not yet folded into the sketch)?"""
        return self._sketch is None

    def add(self, df: pd.DataFrame | None) -> pd.DataFrame:
        """Append one part's rows (all of `columns`); returns an empty frame with a
        `flow` column (what chunked.analyse_tcp merges for an `extra` reducer)."""
        if df is not None and len(df):
            df = df[self.columns]
            df.to_csv(self.path, mode="a", header=self.rows == 0, index=False)
            local, uniq = pd.MultiIndex.from_frame(df[self.keys]).factorize()
            lut = np.array([self._code.setdefault(k, len(self._code)) for k in uniq],
                           dtype=np.int32)
            # a copy: the column alone is a view of the frame's whole block of float
            # columns (t, t_ack, rtt_s ...), which would stay in memory with it
            vals = df[self.value].to_numpy(dtype=float, copy=True)
            self.rows += len(df)
            self._merged = None
            if self._sketch is None and self.rows <= self.exact_limit:
                self._vals.append(vals)
                self._codes.append(lut[local])
                return pd.DataFrame(columns=["flow"])
            if self._sketch is None:  # this part outgrows the limit: fold the values in
                self._sketch = (np.empty(0, np.int64), np.empty(0, np.int64))
                for v, c in zip(self._vals, self._codes, strict=True):
                    self._fold(v, c)
                self._vals, self._codes = [], []
            self._fold(vals, lut[local])
        return pd.DataFrame(columns=["flow"])

    def _fold(self, v: np.ndarray, codes: np.ndarray) -> None:
        """Count finite values `v` (of groups `codes`) into the sketch."""
        ok = np.isfinite(v)
        v, codes = v[ok], codes[ok].astype(np.int64)
        grow = len(self._code) - len(self._lo)
        if grow > 0:
            self._lo = np.concatenate([self._lo, np.full(grow, np.inf)])
            self._hi = np.concatenate([self._hi, np.full(grow, -np.inf)])
        np.minimum.at(self._lo, codes, v)
        np.maximum.at(self._hi, codes, v)
        key, n = np.unique(codes * _SPAN + _buckets(v) + _SPAN // 2, return_counts=True)
        self._pending.append((key, n))
        if sum(len(k) for k, _ in self._pending) >= _MERGE_AT:
            self._merge()

    def _merge(self) -> None:
        if not self._pending:
            return
        keys = np.concatenate([self._sketch[0], *(k for k, _ in self._pending)])
        counts = np.concatenate([self._sketch[1], *(n for _, n in self._pending)])
        self._pending = []
        key, inv = np.unique(keys, return_inverse=True)
        self._sketch = (key, np.bincount(inv, weights=counts).astype(np.int64))

    def nbytes(self) -> int:
        """Bytes its values, codes and sketch hold in memory (not the group keys)."""
        arrays = [*self._vals, *self._codes, self._lo, self._hi,
                  *(a for pair in self._pending for a in pair),
                  *(self._sketch or ())]
        return int(sum(a.nbytes for a in arrays))

    def arrays(self) -> Compact:
        """The table's values (or sketch) by group code (a `Compact`)."""
        if self._merged is None:
            groups = pd.DataFrame(list(self._code), columns=self.keys)
            if self._sketch is None:
                v = np.concatenate(self._vals) if self._vals else np.empty(0)
                c = np.concatenate(self._codes) if self._codes else np.empty(0, np.int32)
                self._vals, self._codes = [v], [c]  # one copy, not the parts and the merge
                self._merged = Compact(v, c, groups)
            else:
                self._merge()
                key, n = self._sketch
                self._merged = Compact(_representatives(key % _SPAN - _SPAN // 2),
                                       (key // _SPAN).astype(np.int32), groups, n,
                                       self._lo, self._hi)
        return self._merged

    def frame(self) -> pd.DataFrame:
        """The whole table read back from its file (tests; small runs)."""
        if not self.rows:
            return pd.DataFrame(columns=self.columns)
        return pd.read_csv(self.path)

    def close(self) -> None:
        self._gone()


def compact(x, value: str, keys) -> Compact | None:
    """The `Compact` of a Samples or of the same table as a DataFrame; None when it has
    no rows."""
    if x is None or not len(x):
        return None
    if isinstance(x, Samples):
        return x.arrays()
    codes, uniq = pd.MultiIndex.from_frame(x[keys]).factorize()
    return Compact(x[value].to_numpy(dtype=float), np.asarray(codes),
                   pd.DataFrame(list(uniq), columns=list(keys)))


def groups(c: Compact, by, rows: pd.DataFrame | None = None):
    """(key, Dist of its samples, its groups' rows) for each value of `by` in `rows`
    (default: c.groups; indexed by code, a subset of the codes is fine), sorted by key
    (as DataFrame.groupby(sort=True))."""
    rows = c.groups if rows is None else rows
    size = max(int(c.codes.max()) + 1 if len(c.codes) else 0,
               int(rows.index.max()) + 1 if len(rows) else 0, len(c.groups))
    for key, g in rows.groupby(by, sort=True):
        pick = np.zeros(size, bool)  # by code: is it one of this key's groups
        pick[g.index.to_numpy()] = True
        yield key, c.dist(pick), g
