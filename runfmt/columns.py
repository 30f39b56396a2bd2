"""A journal's rows as named numpy columns, on their way to parquet or to a DataFrame.

``runfmt.journal.read_journal`` gathers a journal into ``Columns``: the compaction at a
run's end writes them to parquet through pyarrow (``to_arrow``), with no DataFrame in
between, and ``runfmt.tables.RunTables`` reads a journal as a DataFrame (``to_frame``).
Measured with ``benchmarks/loadgen_overhead.py --bench16-only`` against a DataFrame per
journal written by pandas, with the same packages, this path costs the same (0.86–1.06
CPU-s against 0.86–0.99 for a whole 16-request bench, six rounds each, ``docs/scaling.md``):
it is kept as the simpler one, not for speed. pandas is imported either way: pyarrow
loads it at its first conversion of Python values or numpy arrays when it is installed
(only ``Array.from_buffers`` and the parquet write do not), and the summary that follows
is computed on DataFrames.

A column is what pyarrow makes of the values: float64 with NaN for numbers with nulls
(int64 or bool when there are none), objects (``str``, ``None``, lists) otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa


class Columns:
    """Equal-length named numpy columns, in the order they were first seen."""

    __slots__ = ("_data", "_length")

    def __init__(self, data: Mapping[str, Any], length: int = 0) -> None:
        self._data = {name: np.asarray(values) for name, values in data.items()}
        lengths = {len(values) for values in self._data.values()}
        if len(lengths) > 1:
            raise ValueError(f"columns of different lengths: {sorted(lengths)}")
        self._length = lengths.pop() if lengths else length

    @property
    def columns(self) -> list[str]:
        return list(self._data)

    def __len__(self) -> int:
        return self._length

    def get(self, name: str) -> np.ndarray | None:
        return self._data.get(name)

    def to_arrow(self) -> pa.Table:
        """An arrow table of the same rows, each column's type inferred from its values."""
        import pyarrow as pa

        return pa.table({name: pa.array(values) for name, values in self._data.items()})

    def to_frame(self) -> pd.DataFrame:
        """A DataFrame of the same rows (imports pandas)."""
        import pandas as pd

        return pd.DataFrame(self._data)


def concat(tables: list[Columns]) -> Columns:
    """The rows of every table in turn; a column one table lacks is missing there (NaN in a
    number column, ``None`` otherwise), as ``pandas.concat`` fills it."""
    tables = [t for t in tables if t.columns]
    if len(tables) <= 1:
        return tables[0] if tables else Columns({})
    names = dict.fromkeys(name for t in tables for name in t.columns)
    data = {}
    for name in names:
        parts = [t.get(name) for t in tables]
        numeric = all(p is None or p.dtype.kind in "iuf" for p in parts)
        filled = [
            _as(p, numeric) if p is not None else _missing(len(t), numeric)
            for p, t in zip(parts, tables, strict=True)
        ]
        data[name] = np.concatenate(filled)
    return Columns(data)


def _as(values: np.ndarray, numeric: bool) -> np.ndarray:
    return values if numeric else values.astype(object)


def _missing(length: int, numeric: bool) -> np.ndarray:
    return np.full(length, np.nan) if numeric else np.full(length, None, dtype=object)
