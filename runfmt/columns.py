"""A journal's rows as named numpy columns, on their way to parquet, to a DataFrame, or to
a reader that needs no pandas.

``runfmt.journal.read_journal`` gathers a journal into ``Columns``: the compaction at a
run's end writes them to parquet through pyarrow (``to_arrow``), with no DataFrame in
between; ``runfmt.tables.RunTables`` reads a table as a DataFrame (``to_frame``) or, for
the statistics of a bench's own end, as ``Columns`` (``RunTables.columns``, from parquet
through ``from_arrow``). Neither way imports pandas: pyarrow's own conversions would (see
``runfmt.arrow_numpy``), and that import was a fifth of a 16-request bench's CPU.

A column is what pyarrow makes of the values: float64 with NaN for numbers with nulls
(int64 or bool when there are none), objects (``str``, ``None``, lists as numpy arrays)
otherwise. Rows are selected as on a DataFrame: ``table[mask]``.
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

    @property
    def empty(self) -> bool:
        """No rows (as ``DataFrame.empty``; a table with columns and no rows is empty)."""
        return self._length == 0

    def __contains__(self, name: object) -> bool:
        return name in self._data

    def get(self, name: str) -> np.ndarray | None:
        return self._data.get(name)

    def __getitem__(self, key: str | np.ndarray) -> Any:
        """A column by name (``KeyError`` when absent), or the rows a boolean mask or an
        index array selects, as a new ``Columns``: ``table[table["status"] == "ok"]`` reads
        as it does on a DataFrame."""
        if isinstance(key, str):
            return self._data[key]
        rows = np.asarray(key)
        if rows.dtype == bool and rows.shape != (self._length,):
            raise ValueError(f"a mask of {rows.shape} rows for a table of {self._length}")
        length = int(rows.sum()) if rows.dtype == bool else len(rows)
        return Columns({name: values[rows] for name, values in self._data.items()}, length)

    def with_column(self, name: str, values: Any) -> Columns:
        """The same rows with column ``name`` added (or replaced)."""
        return Columns({**self._data, name: np.asarray(values)}, self._length)

    def sorted_by(self, name: str) -> Columns:
        """The rows in ascending order of column ``name`` (stable, as ``sort_values``
        with ``kind="stable"``; NaN last)."""
        return self[np.argsort(self._data[name], kind="stable")]

    def to_arrow(self) -> pa.Table:
        """An arrow table of the same rows, each column's type inferred from its values as
        ``pa.array`` infers it (``runfmt.arrow_numpy.arrow_of``, without pandas)."""
        import pyarrow as pa

        from runfmt.arrow_numpy import arrow_of

        return pa.table({name: arrow_of(values) for name, values in self._data.items()})

    @classmethod
    def from_arrow(cls, table: pa.Table) -> Columns:
        """An arrow table's columns as ``to_numpy(zero_copy_only=False)`` gives them
        (``runfmt.arrow_numpy.numpy_of``, without pandas): the same columns a journal of
        the same rows reads as."""
        from runfmt.arrow_numpy import numpy_of

        data = {name: numpy_of(table.column(name)) for name in table.column_names}
        return cls(data, table.num_rows)

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
