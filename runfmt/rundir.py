"""The run directory (``docs/ARCHITECTURE.md``): journaled tables that survive a crash.

A parquet file is only readable once its footer is written, so a run that dies
mid-way would lose everything written to a parquet stream. Instead each table is first
appended to a JSON-lines journal (``<name>.jsonl``), one flushed line per finished
request, and compacted into ``<name>.parquet`` when the run closes. Readers prefer the
parquet file and fall back to the journal, so an interrupted run is still a run.

A damaged directory is read as far as it can be: a parquet file that is empty, cut short
or otherwise unreadable gives way to its journal (one warning line on stderr says so); a
garbage line in the middle of a journal is skipped and counted, never the end of the
read; a ``run.json`` or ``summary.json`` that does not parse is an ``InputError`` naming
the file, which the CLI turns into one line and exit status 2.
"""

from __future__ import annotations

import base64
import json
import math
import sys
from array import array
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from runtime import redact
from workloads.errors import InputError

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd


def _clean(value: Any) -> Any:
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


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


#: Key of a journal line that carries many rows column by column (see ``append_columns``).
BATCH_KEY = "__columns__"


def _encode_column(values: Sequence[float] | array | np.ndarray) -> list[str]:
    """A numeric column as ``[dtype, base64 of its bytes]``: exact and cheap to write.

    numpy is imported here, not with the module: the probe process only appends rows.
    """
    import numpy as np

    data = np.asarray(values)
    if data.dtype.kind not in "iuf":
        raise TypeError(f"append_columns takes numeric columns, got {data.dtype}")
    return [data.dtype.str, base64.b64encode(data.tobytes()).decode("ascii")]


class _BatchRows:
    """Consecutive batch lines of one shape, gathered and turned into one frame at once.

    A frame per line would cost milliseconds each: a long run has one per request.
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

    def frame(self) -> pd.DataFrame:
        import numpy as np
        import pandas as pd

        data: dict[str, Any] = {}
        for key, values in self.constants.items():
            column = np.empty(len(values), dtype=object)
            column[:] = values
            data[key] = np.repeat(column, self.lengths)
        for name, parts in self.columns.items():
            data[name] = np.concatenate(parts)
        return pd.DataFrame(data)


def _batch_shape(obj: dict[str, Any]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    return tuple(k for k in obj if k != BATCH_KEY), tuple(obj[BATCH_KEY])


class TableWriter:
    """Append-only rows for one table of a run directory."""

    def __init__(self, run_dir: RunDir, name: str) -> None:
        self.run_dir = run_dir
        self.name = name
        self.rows_written = 0
        self._fh: TextIO | None = open(run_dir.path / f"{name}.jsonl", "a", encoding="utf-8")  # noqa: SIM115

    def append(self, row: dict[str, Any]) -> None:
        """Write one row and flush it, so a crash right after loses nothing."""
        self.append_many([row])

    def append_many(self, rows: list[dict[str, Any]]) -> None:
        if not rows:
            return
        self._write(
            "".join(_dumps({k: _clean(v) for k, v in row.items()}) + "\n" for row in rows),
            len(rows),
        )

    def append_columns(self, columns: dict[str, Sequence[float]], **constants: Any) -> None:
        """Append rows given column by column: numeric columns, plus fields equal in every row.

        The per-token path: a finished request's chunk times go out as one journal line
        holding each column's raw bytes (base64), not a dict and a ``json.dumps`` per
        row; a reader expands it into rows (:meth:`RunDir.read_table`), so the table is
        the same. Typed arrays (``array``, numpy) are written as they are.
        """
        encoded = {name: _encode_column(values) for name, values in columns.items()}
        lengths = {len(columns[name]) for name in columns}
        if len(lengths) > 1:
            raise ValueError("columns must have equal lengths")
        if not lengths or not lengths.pop():
            return
        line = {k: _clean(v) for k, v in constants.items()}
        line[BATCH_KEY] = encoded
        self._write(_dumps(line) + "\n", len(next(iter(columns.values()))))

    def _write(self, text: str, rows: int) -> None:
        if self._fh is None:
            raise RuntimeError(f"table {self.name} is closed")
        self._fh.write(text)
        self._fh.flush()
        self.rows_written += rows

    def close(self, *, compact: bool = True) -> None:
        """Compact the journal into parquet (the journal stays as the source of truth)."""
        if self._fh is None:
            return
        self._fh.close()
        self._fh = None
        if compact:
            self.run_dir.compact(self.name)


class RunDir:
    """One bench run's folder: ``run.json``, tables, ``summary.json``."""

    def __init__(self, path: str | Path, *, create: bool = False) -> None:
        self.path = Path(path)
        if create:
            self.path.mkdir(parents=True, exist_ok=True)
        elif not self.path.is_dir():
            raise FileNotFoundError(f"no run directory at {self.path}")
        self._writers: dict[str, TableWriter] = {}

    # -- writing -------------------------------------------------------------------------
    def table(self, name: str) -> TableWriter:
        if name not in self._writers:
            self._writers[name] = TableWriter(self, name)
        return self._writers[name]

    def write_json(self, name: str, obj: Any) -> None:
        """Write a JSON document atomically (write to a temp file, then rename)."""
        target = self.path / name
        tmp = target.with_suffix(target.suffix + ".tmp")
        clean = redact.document(json.loads(json.dumps(obj, default=str)))
        tmp.write_text(json.dumps(clean, indent=2, sort_keys=False) + "\n")
        tmp.replace(target)

    def compact(self, name: str) -> None:
        journal = self.path / f"{name}.jsonl"
        if journal.exists():
            self._read_journal(journal).to_parquet(self.path / f"{name}.parquet", index=False)

    def close(self, *, compact: bool = True) -> None:
        """Close every table; ``compact=False`` leaves only the journals (a worker's part
        of a run, which the parent absorbs)."""
        for writer in self._writers.values():
            writer.close(compact=compact)
        self._writers.clear()

    def absorb_journal(self, name: str, journal: Path) -> int:
        """Append the complete lines of another journal of table ``name`` (a worker's) to
        this run's; a torn last line is dropped. Returns the lines appended."""
        data = journal.read_bytes()
        complete = data[: data.rfind(b"\n") + 1]
        if not complete:
            return 0
        writer = self.table(name)
        writer._write(complete.decode("utf-8", errors="replace"), 0)
        return complete.count(b"\n")

    def set_column(self, name: str, column: str, values: Mapping[str, Any]) -> None:
        """Set ``column`` in the rows of the closed table ``name`` whose ``id`` is in
        ``values``: a fact known only once the run is over (the prefix oracle's replay of
        what was sent). The journal is rewritten whole (atomically), then compacted."""
        if name in self._writers:
            raise RuntimeError(f"table {name} is still open")
        journal = self.path / f"{name}.jsonl"
        if not journal.exists():
            return
        lines = []
        text = journal.read_text(encoding="utf-8", errors="replace")
        for line in text.splitlines(keepends=True):
            row = _parse_line(line) if line.endswith("\n") else None  # a torn line stays
            if row is not None and BATCH_KEY not in row and row.get("id") in values:
                row[column] = _clean(values[row["id"]])
                line = _dumps(row) + "\n"
            lines.append(line)
        tmp = journal.with_suffix(".jsonl.tmp")
        tmp.write_text("".join(lines), encoding="utf-8")
        tmp.replace(journal)
        self.compact(name)

    # -- reading -------------------------------------------------------------------------
    def read_json(self, name: str) -> dict[str, Any]:
        """A JSON document of the run; ``InputError`` naming the file when it cannot be read."""
        path = self.path / name
        try:
            doc = json.loads(path.read_bytes())
        except FileNotFoundError:
            raise InputError(str(path), "is missing", "give a complete run directory") from None
        except (OSError, ValueError) as exc:  # JSONDecodeError and UnicodeDecodeError too
            raise InputError(str(path), f"is unreadable ({_one_line(exc)})", _FIX_DAMAGED) from None
        if not isinstance(doc, dict):
            raise InputError(
                str(path), f"holds a JSON {type(doc).__name__}, not an object", _FIX_DAMAGED
            )
        return doc

    def has(self, name: str) -> bool:
        return (self.path / name).exists()

    def read_table(self, name: str) -> pd.DataFrame:
        """A table as a DataFrame: parquet when compacted, else the journal, else empty.

        A parquet file that cannot be read (empty, cut short, not parquet) gives way to
        the journal, with one warning line; with no journal to fall back to it is an
        ``InputError``. pandas is imported here, not with the module: a load generator
        that only writes starts faster without it.
        """
        import pandas as pd

        parquet = self.path / f"{name}.parquet"
        journal = self.path / f"{name}.jsonl"
        if parquet.exists():
            try:
                return pd.read_parquet(parquet)
            except (OSError, ValueError) as exc:  # ArrowInvalid is a ValueError
                reason = _one_line(exc).split("': ", 1)[-1]  # pyarrow repeats the path
                if not journal.exists():
                    raise InputError(
                        str(parquet), f"is unreadable ({reason}) and has no journal", _FIX_DAMAGED
                    ) from None
                warn_once(f"{parquet} is unreadable ({reason}); reading {journal.name} instead")
        if journal.exists():
            return self._read_journal(journal)
        return pd.DataFrame()

    @staticmethod
    def _read_journal(journal: Path) -> pd.DataFrame:
        """Every row of a journal, batch lines expanded, in the order they were written.

        A line that is not a JSON object is skipped and counted (one warning line says how
        many), and the read goes on. The last line without its newline is a write cut short
        (the run is still going, or crashed mid-line): skipped without a warning.
        """
        import pandas as pd

        frames: list[pd.DataFrame] = []
        rows: list[dict[str, Any]] = []
        batch = _BatchRows()
        skipped = 0

        def flush() -> None:
            nonlocal rows, batch
            if rows:
                frames.append(pd.DataFrame(rows))
                rows = []
            if batch.lengths:
                frames.append(batch.frame())
                batch = _BatchRows()

        with journal.open(encoding="utf-8", errors="replace") as fh:
            for raw in fh:
                line = raw.strip()
                if not line:
                    continue
                obj = _parse_line(line)
                if obj is None:
                    skipped += raw.endswith("\n")  # a torn last line is not damage
                    continue
                if BATCH_KEY not in obj:
                    if batch.lengths:
                        flush()
                    rows.append(obj)
                    continue
                if rows or not batch.fits(obj):
                    flush()
                try:
                    batch.add(obj)
                except (TypeError, ValueError, AttributeError):  # a batch line mangled inside
                    skipped += 1
        flush()
        if skipped:
            plural = "s" if skipped > 1 else ""
            warn_once(f"{journal}: skipped {skipped} unreadable line{plural}")
        if not frames:
            return pd.DataFrame()
        return frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)


_FIX_DAMAGED = "the run directory is damaged: rerun the bench or restore the file"


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 160 else text[:157] + "..."


def _parse_line(line: str) -> dict[str, Any] | None:
    """A journal line as a row object, or None when it is not one."""
    try:
        obj = json.loads(line)
    except ValueError:
        return None
    if not isinstance(obj, dict):
        return None
    batch = obj.get(BATCH_KEY)
    if batch is not None and not isinstance(batch, dict):
        return None
    return obj
