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

from collections import Counter
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

    def get(self, name: str, default: Any = None) -> Any:
        return self._data.get(name, default)

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

    def records(self) -> list[dict[str, Any]]:
        """The rows as dicts of Python values (``DataFrame.to_dict("records")``)."""
        names = self.columns
        listed = [self._data[name].tolist() for name in names]
        return [dict(zip(names, values, strict=True)) for values in zip(*listed, strict=True)]

    def to_frame(self, index: Any = None) -> pd.DataFrame:
        """A DataFrame of the same rows, with ``index`` when given (imports pandas)."""
        import pandas as pd

        return pd.DataFrame(self._data, index=index)


#: A run's table as the statistics take it: a ``Columns`` (the bench's own end, without
#: pandas) or a ``pandas.DataFrame`` (diagnose, report). Both give a column as
#: ``table[name]``, say ``name in table``, and select rows with ``table[bool_mask]``.
Table = Any


def as_columns(table: Table) -> Columns:
    """A table as ``Columns`` (a DataFrame's columns taken as numpy arrays)."""
    if isinstance(table, Columns):
        return table
    return Columns({name: table[name].to_numpy() for name in table.columns}, len(table))


def numbers(table: Table, column: str) -> np.ndarray:
    """A column as float64: NaN where it is null or not a number, and all NaN when the
    table has no such column (unknown, not 0) — ``pandas.to_numeric(errors="coerce")``."""
    if column not in table:
        return np.full(len(table), np.nan)
    values = np.asarray(table[column])
    if values.dtype.kind in "biuf":
        return values.astype(float)
    try:
        return np.array(values.tolist(), dtype=float)  # None is NaN
    except (TypeError, ValueError):
        return np.array([_number(v) for v in values.tolist()], dtype=float)


def _number(value: Any) -> float:
    try:
        return float(value) if value is not None else np.nan
    except (TypeError, ValueError):
        return np.nan


def present(table: Table, column: str) -> np.ndarray:
    """True where a column has a value (not None, not NaN); all False when absent."""
    if column not in table:
        return np.zeros(len(table), dtype=bool)
    values = np.asarray(table[column])
    if values.dtype.kind in "biu":
        return np.ones(len(values), dtype=bool)
    if values.dtype.kind == "f":
        return ~np.isnan(values)
    return np.array([v is not None and v == v for v in values.tolist()], dtype=bool)


def flags(table: Table, column: str) -> np.ndarray:
    """A column as bools, a missing value False (``fillna(False).astype(bool)``)."""
    if column not in table:
        return np.zeros(len(table), dtype=bool)
    values = np.asarray(table[column])
    if values.dtype == bool:
        return values
    return np.array([bool(v) and v == v for v in values.tolist()], dtype=bool)


def texts(table: Table, column: str, missing: str) -> list[str]:
    """A column as strings, ``missing`` where null (``fillna(missing).astype(str)``); all
    ``missing`` when the table has no such column."""
    if column not in table:
        return [missing] * len(table)
    return [missing if v is None or v != v else str(v) for v in np.asarray(table[column]).tolist()]


def factorize(values: Any) -> tuple[np.ndarray, np.ndarray]:
    """Codes of ``values`` in order of first appearance, -1 for a missing value, and the
    distinct values (as ``pandas.factorize``), by one pass over a dict."""
    index: dict[Any, int] = {}
    listed = np.asarray(values).tolist()
    codes = np.fromiter(
        (-1 if v is None or v != v else index.setdefault(v, len(index)) for v in listed),
        dtype=np.intp,
        count=len(listed),
    )
    uniques = np.empty(len(index), dtype=object)
    uniques[:] = list(index)
    return codes, uniques


def counted(keys: list[Any], *, by_count: bool = True) -> dict[Any, int]:
    """How often each key occurs, in order of first appearance, or most frequent first
    with ties in that order (``value_counts``; ``Counter`` keeps both orders)."""
    counts = Counter(keys)
    return dict(counts.most_common()) if by_count else dict(counts)


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


def _id_keys(ids: Any) -> np.ndarray:
    """Each id as bytes that tell ids apart as ``==`` does: text as ``\\x01`` + UTF-8, any
    other value as ``\\x02`` + its repr, a missing one as empty (never a member)."""
    keys = [
        b"\x01" + v.encode("utf-8", "surrogatepass")
        if isinstance(v, str)
        else b""
        if v is None or v != v
        else b"\x02" + repr(v).encode()
        for v in np.asarray(ids, dtype=object).tolist()
    ]
    return np.array(keys, dtype=bytes) if keys else np.empty(0, dtype="S1")


class IdSet:
    """A set of request ids held as one sorted array of their bytes: about an id's length
    per id, where a Python ``set`` holds an object and a slot for each (a long run's
    completed requests, which the statistics at its end select the chunks of)."""

    def __init__(self, parts: Any = ()) -> None:
        keys = [_id_keys(part) for part in parts]
        self._keys = np.unique(np.concatenate(keys)) if keys else np.empty(0, dtype="S1")
        self._keys = self._keys[self._keys != b""]

    def __len__(self) -> int:
        return len(self._keys)

    def contains(self, ids: Any) -> np.ndarray:
        """True for each of ``ids`` in the set."""
        keys = _id_keys(ids)
        if not len(self._keys) or not len(keys):
            return np.zeros(len(keys), dtype=bool)
        at = np.minimum(np.searchsorted(self._keys, keys), len(self._keys) - 1)
        return (self._keys[at] == keys) & (keys != b"")
