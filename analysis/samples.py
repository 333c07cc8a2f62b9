"""Per-sample tables kept out of memory (latency's RTT samples and sojourns): the rows
in a scratch file, each row's value and a small code of its group in memory."""
from __future__ import annotations

import shutil
import tempfile
import weakref
from pathlib import Path

import numpy as np
import pandas as pd

__all__ = ["Samples", "compact", "groups"]


class Samples:
    """A per-sample latency table (RTT samples or sojourns) kept out of memory: the rows
    are appended to a CSV file in a scratch directory (header once; the report copies it
    to tables/), and only each row's value (float64, the same numbers the table holds)
    and a small code of its group (`keys`: int32) stay in memory, ~12 bytes a sample
    instead of ~100. `summary_table`, `summary` and the figure read it as they read the
    DataFrame (the same numbers); the scratch directory goes with the object."""

    def __init__(self, columns, value: str, keys, directory=None):
        self.columns, self.value, self.keys = list(columns), value, list(keys)
        self._dir = tempfile.mkdtemp(prefix="incastlab-latency-", dir=directory)
        self._gone = weakref.finalize(self, shutil.rmtree, self._dir, True)
        self.path = Path(self._dir) / "samples.csv"
        self.rows = 0
        self._code: dict[tuple, int] = {}      # group key -> code
        self._vals: list[np.ndarray] = []
        self._codes: list[np.ndarray] = []
        self._merged = None

    def __len__(self) -> int:
        return self.rows

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
            self._vals.append(df[self.value].to_numpy(dtype=float, copy=True))
            self._codes.append(lut[local])
            self.rows += len(df)
            self._merged = None
        return pd.DataFrame(columns=["flow"])

    def arrays(self) -> tuple[np.ndarray, np.ndarray, pd.DataFrame]:
        """(values, codes, groups): groups is a frame of the `keys` columns whose row i
        is code i."""
        if self._merged is None:
            v = np.concatenate(self._vals) if self._vals else np.empty(0)
            c = np.concatenate(self._codes) if self._codes else np.empty(0, np.int32)
            self._vals, self._codes = [v], [c]  # one copy, not the parts and the merge
            self._merged = (v, c, pd.DataFrame(list(self._code), columns=self.keys))
        return self._merged

    def frame(self) -> pd.DataFrame:
        """The whole table read back from its file (tests; small runs)."""
        if not self.rows:
            return pd.DataFrame(columns=self.columns)
        return pd.read_csv(self.path)

    def close(self) -> None:
        self._gone()


def compact(x, value: str, keys) -> tuple[np.ndarray, np.ndarray, pd.DataFrame] | None:
    """(values, codes, groups) of a Samples or of the same table as a DataFrame; None
    when it has no rows."""
    if x is None or not len(x):
        return None
    if isinstance(x, Samples):
        return x.arrays()
    codes, uniq = pd.MultiIndex.from_frame(x[keys]).factorize()
    return (x[value].to_numpy(dtype=float), np.asarray(codes),
            pd.DataFrame(list(uniq), columns=list(keys)))


def groups(values, codes, groups: pd.DataFrame, by):
    """(key, values of its rows, its groups' rows) for each value of `by` in `groups`
    (indexed by code; a subset of the codes is fine), sorted by key (as
    DataFrame.groupby(sort=True))."""
    size = max(int(codes.max()) + 1 if len(codes) else 0,
               int(groups.index.max()) + 1 if len(groups) else 0)
    for key, g in groups.groupby(by, sort=True):
        pick = np.zeros(size, bool)  # by code: is it one of this key's groups
        pick[g.index.to_numpy()] = True
        yield key, values[pick[codes]], g
