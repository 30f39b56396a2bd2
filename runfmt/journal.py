"""The journal format of a run table: one JSON object per line, and its reader.

A table is first appended to ``<name>.jsonl``, one flushed line per finished request, so
a run that dies mid-way keeps every line written (``runfmt.rundir`` writes them,
``runfmt.tables`` reads a table through ``read_journal`` when its parquet file is missing
or damaged). A line is one row, or, keyed by ``BATCH_KEY``, many rows column by column
(numeric columns as base64 of their bytes: the per-token path).

A damaged journal is read as far as it can be: a garbage line in the middle is skipped
and counted (one warning line on stderr), never the end of the read.
"""

from __future__ import annotations

import base64
import math
import sys
from array import array
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runtime import redact
from runtime.json_codec import dumps, loads

if TYPE_CHECKING:
    import numpy as np

    from runfmt.columns import Columns

#: The fix a damaged run directory's message names.
FIX_DAMAGED = "the run directory is damaged: rerun the bench or restore the file"


def clean_value(value: Any) -> Any:
    """JSON has no NaN/inf: write them as null so every journal line parses; no secret
    (a key a server echoed in an error body) is written (``runtime.redact``)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, str):
        return redact.text(value)
    return value


#: Warnings already printed in this process: a table read twice warns once.
_WARNED: set[str] = set()


def warn_once(message: str) -> None:
    """One line on stderr about a damaged run directory, printed once per process."""
    if message not in _WARNED:
        _WARNED.add(message)
        print(f"prefillscope: warning: {message}", file=sys.stderr, flush=True)


def dumps_line(value: Any) -> bytes:
    """One journal line: compact JSON and its newline, UTF-8 (``runtime.json_codec``: one
    line per finished request per table, so orjson's encoder). NaN is written as
    ``null`` once ``clean_value`` has been applied."""
    return dumps(value, newline=True)


#: Key of a journal line that carries many rows column by column (see ``append_columns``).
BATCH_KEY = "__columns__"


def encode_column(values: Sequence[float] | array | np.ndarray) -> list[str]:
    """A numeric column as ``[dtype, base64 of its bytes]``: exact and cheap to write.

    numpy is imported here, not with the module: the probe process only appends rows.
    """
    import numpy as np

    data = np.asarray(values)
    if data.dtype.kind not in "iuf":
        raise TypeError(f"append_columns takes numeric columns, got {data.dtype}")
    return [data.dtype.str, base64.b64encode(data.tobytes()).decode("ascii")]


class _BatchRows:
    """Consecutive batch lines of one shape, gathered and turned into one table at once.

    A table per line would cost a conversion each: a long run has one per request.
    """

    def __init__(self) -> None:
        self.shape: tuple[tuple[str, ...], tuple[str, ...]] | None = None
        self.columns: dict[str, list[np.ndarray]] = {}
        self.constants: dict[str, list[Any]] = {}
        self.lengths: list[int] = []

    def fits(self, obj: dict[str, Any]) -> bool:
        return self.shape is None or self.shape == _batch_shape(obj)

    def add(self, obj: dict[str, Any]) -> None:
        import numpy as np

        decoded = {  # every column first: a mangled line raises before anything is kept
            name: np.frombuffer(base64.b64decode(encoded), dtype=np.dtype(dtype))
            for name, (dtype, encoded) in obj[BATCH_KEY].items()
        }
        if len({len(values) for values in decoded.values()}) > 1:
            raise ValueError("batch columns of different lengths")
        self.shape = _batch_shape(obj)
        length = 0
        for name, values in decoded.items():
            self.columns.setdefault(name, []).append(values)
            length = len(values)
        for key, value in obj.items():
            if key != BATCH_KEY:
                self.constants.setdefault(key, []).append(value)
        self.lengths.append(length)

    def table(self) -> Columns:
        import numpy as np

        from runfmt.columns import Columns

        data: dict[str, Any] = {
            key: np.repeat(_column(values), self.lengths) for key, values in self.constants.items()
        }
        for name, parts in self.columns.items():
            data[name] = np.concatenate(parts)
        return Columns(data, sum(self.lengths))


def _batch_shape(obj: dict[str, Any]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    return tuple(k for k in obj if k != BATCH_KEY), tuple(obj[BATCH_KEY])


def _column(values: list[Any]) -> np.ndarray:
    """JSON values of one column as pyarrow converts them: numbers with nulls as float NaN,
    strings, lists and mixed values as objects (``runfmt.arrow_numpy.column_of``, which
    does it without importing pandas)."""
    from runfmt.arrow_numpy import column_of

    return column_of(values)


def _rows_table(rows: list[dict[str, Any]]) -> Columns:
    from runfmt.columns import Columns

    names = dict.fromkeys(name for row in rows for name in row)
    return Columns({name: _column([row.get(name) for row in rows]) for name in names}, len(rows))


#: Rows (or batch lines) gathered before they are turned into one part of a table: a
#: bound on the Python objects held at once while a journal is read in parts.
PART_ROWS = 4096


def read_journal(
    journal: Path, fits: Callable[[dict], bool] | None = None, *, some_rows: bool = False
) -> Columns:
    """Every row of a journal, batch lines expanded, in the order they were written.

    A line that is not a JSON object, or a row that ``fits`` refuses (a column of the
    wrong type: ``runfmt.tables.TableSchema.fits``), is skipped and counted (one warning
    line says how many), and the read goes on. The last line without its newline is a
    write cut short (the run is still going, or crashed mid-line): skipped without a
    warning. numpy and pyarrow are imported here, not with the module: the probe process
    only appends rows.
    """
    from runfmt.columns import concat

    return concat(list(journal_parts(journal, fits, some_rows=some_rows)))


class NoReadableRow(ValueError):
    """A journal that has lines and not one readable row among them."""


def journal_parts(
    journal: Path,
    fits: Callable[[dict], bool] | None = None,
    part_rows: int = PART_ROWS,
    *,
    some_rows: bool = False,
) -> Iterator[Columns]:
    """``read_journal``'s rows in consecutive parts of about ``part_rows`` lines each, so
    a reader that converts each part (the compaction to parquet) never holds a long
    run's rows as Python objects at once. ``some_rows``: a journal whose every line was
    skipped is ``NoReadableRow`` (garbage, not an empty table)."""
    rows: list[dict[str, Any]] = []
    batch = _BatchRows()
    skipped = kept = 0

    def parts() -> Iterator[Columns]:
        nonlocal rows, batch
        if rows:
            yield _rows_table(rows)
            rows = []
        if batch.lengths:
            yield batch.table()
            batch = _BatchRows()

    with journal.open(encoding="utf-8", errors="replace") as fh:
        for raw in fh:
            line = raw.strip()
            if not line:
                continue
            obj = parse_line(line)
            if obj is None:
                skipped += raw.endswith("\n")  # a torn last line is not damage
                continue
            if BATCH_KEY not in obj:
                if fits is not None and not fits(obj):
                    skipped += 1
                    continue
                if batch.lengths or len(rows) >= part_rows:
                    yield from parts()
                rows.append(obj)
                kept += 1
                continue
            if rows or not batch.fits(obj) or len(batch.lengths) >= part_rows:
                yield from parts()
            try:
                batch.add(obj)
                kept += 1
            except (TypeError, ValueError, AttributeError):  # a batch line mangled inside
                skipped += 1
    yield from parts()
    if skipped and not kept and some_rows:
        plural = "s" if skipped > 1 else ""
        raise NoReadableRow(f"not one of its {skipped} line{plural} is a readable row")
    if skipped:
        plural = "s" if skipped > 1 else ""
        warn_once(f"{journal}: skipped {skipped} unreadable line{plural}")


def one_line(exc: BaseException) -> str:
    """An exception's message on one line of at most 160 characters."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 160 else text[:157] + "..."


def loads_line(line: str | bytes) -> Any:
    """A journal line's JSON value, ``None`` when it is not JSON (``runtime.json_codec``:
    orjson's decode, json's for ``NaN`` and integers beyond 64 bits from other writers)."""
    try:
        return loads(line)
    except ValueError:
        return None


def parse_line(line: str | bytes) -> dict[str, Any] | None:
    """A journal line as a row object, or None when it is not one."""
    obj = loads_line(line)
    if not isinstance(obj, dict):
        return None
    batch = obj.get(BATCH_KEY)
    if batch is not None and not isinstance(batch, dict):
        return None
    return obj
