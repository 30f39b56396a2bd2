"""The run directory (``docs/ARCHITECTURE.md``): journaled tables that survive a crash.

A parquet file is only readable once its footer is written, so a run that dies
mid-way would lose everything written to a parquet stream. Instead each table is first
appended to a JSON-lines journal (``<name>.jsonl``, ``runfmt.journal``), one flushed line
per finished request, and compacted into ``<name>.parquet`` when the run closes. Its
tables are read through ``runfmt.tables.RunTables`` (parquet, falling back to the
journal), so an interrupted run is still a run.

A ``run.json`` or ``summary.json`` that does not parse is an ``InputError`` naming the
file, which the CLI turns into one line and exit status 2.

**A write that fails** (the disk full, the folder made read-only mid-run) never leaves a
line that poisons the reader: a journal write cut short is cut back to its last complete
line (``ftruncate``), or, when even that fails, the next write starts on a new line, so
the torn piece is one unreadable line the reader skips. The first failure is recorded
(``RunDir.write_failure``: ``no space left on DIR``), each ``watch`` callback is told at
once (a load run stops sending, as on a signal), and the writer raises ``RunWriteError``.
A parquet file is written beside its journal and renamed into place, so a compaction
that fails leaves the journal, which stays the source of truth, and no damaged parquet.
``reserve`` sets a little space aside for the run's last documents: a JSON document that
does not fit releases it and is written again.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runfmt.journal import (
    BATCH_KEY,
    FIX_DAMAGED,
    clean_value,
    dumps_line,
    encode_column,
    journal_parts,
    loads_line,
    one_line,
    parse_line,
    read_journal,
)
from runfmt.names import journal_file, parquet_file
from runtime import atomic, redact
from runtime.atomic import WriteFailed, failure_reason
from workloads.errors import InputError

if TYPE_CHECKING:
    import pyarrow as pa

#: Bytes ``RunDir.reserve`` sets aside for ``run.json`` and ``summary.json`` at the end.
RESERVE_BYTES = 256 * 1024
_RESERVE_FILE = ".reserve"


class RunWriteError(WriteFailed):
    """A write to the run directory failed; ``reason`` is the one line that says so."""


#: The one line for a failed write (``runtime.atomic``).
write_failure_reason = failure_reason


class TableWriter:
    """Append-only rows for one table of a run directory.

    Each append is one ``write`` system call on a descriptor opened for appending: the
    line is in the file (the kernel's page cache) when the call returns, as a flushed
    buffered file would have it, without the text and buffer layers (a finished request
    writes two lines: one to ``requests``, one to ``chunks``).
    """

    def __init__(self, run_dir: RunDir, name: str) -> None:
        self.run_dir = run_dir
        self.name = name
        self.rows_written = 0
        path = run_dir.path / journal_file(name)
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_BINARY", 0)  # no \r\n
        try:
            self._fd: int | None = os.open(path, flags, 0o644)
        except OSError as exc:
            raise run_dir.failed(exc) from None
        #: A write cut short left a piece of a line that could not be cut back.
        self._torn = False

    def append(self, row: dict[str, Any]) -> None:
        """Write one row and flush it, so a crash right after loses nothing."""
        self.append_many([row])

    def append_many(self, rows: list[dict[str, Any]]) -> None:
        if not rows:
            return
        self._write(
            b"".join(dumps_line({k: clean_value(v) for k, v in row.items()}) for row in rows),
            len(rows),
        )

    def append_columns(self, columns: dict[str, Sequence[float]], **constants: Any) -> None:
        """Append rows given column by column: numeric columns, plus fields equal in every row.

        The per-token path: a finished request's chunk times go out as one journal line
        holding each column's raw bytes (base64), not a dict and a ``json.dumps`` per
        row; a reader expands it into rows (``runfmt.journal.read_journal``), so the table is
        the same. Typed arrays (``array``, numpy) are written as they are.
        """
        self.append_column_sets([(columns, constants)])

    def append_column_sets(
        self, sets: Sequence[tuple[Mapping[str, Sequence[float]], Mapping[str, Any]]]
    ) -> None:
        """``append_columns`` for each (columns, constants) pair, in one write."""
        lines, rows = [], 0
        for columns, constants in sets:
            lengths = {len(values) for values in columns.values()}
            if len(lengths) > 1:
                raise ValueError("columns must have equal lengths")
            length = lengths.pop() if lengths else 0
            if not length:
                continue
            line = {k: clean_value(v) for k, v in constants.items()}
            line[BATCH_KEY] = {name: encode_column(values) for name, values in columns.items()}
            lines.append(dumps_line(line))
            rows += length
        if lines:
            self._write(b"".join(lines), rows)

    def _write(self, data: bytes, rows: int) -> None:
        """Append ``data`` (whole lines); a failure keeps the complete lines that went out
        and raises ``RunWriteError`` (see the module docstring)."""
        if self._fd is None:
            raise RuntimeError(f"table {self.name} is closed")
        if self._torn:
            data = b"\n" + data
        view, written = memoryview(data), 0
        try:
            while view:  # a regular file takes it whole but for a full disk or a signal
                n = os.write(self._fd, view)
                written += n
                view = view[n:]
        except OSError as exc:
            self._cut_back(data, written)
            raise self.run_dir.failed(exc) from None
        self._torn = False
        self.rows_written += rows

    def _cut_back(self, data: bytes, written: int) -> None:
        """After a write cut short at ``written`` bytes: drop the torn line it ended in."""
        assert self._fd is not None
        torn = written - (data.rfind(b"\n", 0, written) + 1)
        if torn == 0:
            self._torn = False
            return
        try:
            os.ftruncate(self._fd, os.fstat(self._fd).st_size - torn)
            self._torn = False
        except OSError:
            self._torn = True  # the next write starts a new line

    def truncate(self, size: int) -> None:
        """Cut the journal back to ``size`` bytes (``size()`` taken before lines to take back)."""
        assert self._fd is not None
        os.ftruncate(self._fd, size)

    def size(self) -> int:
        """The journal's length in bytes."""
        assert self._fd is not None
        return os.fstat(self._fd).st_size

    def __del__(self) -> None:
        # a writer dropped unclosed (a crashed caller, a test) gives its descriptor back, as
        # a file object would; its lines are already in the file
        if getattr(self, "_fd", None) is not None:
            os.close(self._fd)

    def close(self, *, compact: bool = True) -> None:
        """Compact the journal into parquet (the journal stays as the source of truth)."""
        if self._fd is None:
            return
        os.close(self._fd)
        self._fd = None
        if compact:
            self.run_dir.compact(self.name)


class RunDir:
    """One bench run's folder: ``run.json``, tables, ``summary.json``."""

    def __init__(self, path: str | Path, *, create: bool = False) -> None:
        self.path = Path(path)
        if create:
            atomic.make_folder(self.path)
        elif not self.path.is_dir():
            raise FileNotFoundError(f"no run directory at {self.path}")
        self._writers: dict[str, TableWriter] = {}
        #: Why the first write that failed did (``None``: none did).
        self.write_failure: str | None = None
        self._watchers: list[Callable[[str], None]] = []

    # -- failing -------------------------------------------------------------------------
    def watch(self, callback: Callable[[str], None]) -> None:
        """Call ``callback(reason)`` at the first write that fails (at once if one did)."""
        self._watchers.append(callback)
        if self.write_failure is not None:
            callback(self.write_failure)

    def failed(self, exc: OSError) -> RunWriteError:
        """Record a failed write (the first one's reason is kept, the watchers told once);
        the error to raise."""
        reason = write_failure_reason(self.path, exc)
        if self.write_failure is None:
            self.write_failure = reason
            for callback in self._watchers:
                callback(reason)
        return RunWriteError(exc.errno, reason, cause=exc)

    def reserve(self, size: int = RESERVE_BYTES) -> None:
        """Set ``size`` bytes aside for the last documents (released when one does not fit)."""
        with contextlib.suppress(OSError), open(self.path / _RESERVE_FILE, "wb") as fh:
            fh.write(bytes(size))

    def release_reserve(self) -> bool:
        """Give the reserved space back (the run's last document is written); whether any was."""
        try:
            (self.path / _RESERVE_FILE).unlink()
        except OSError:
            return False
        return True

    # -- writing -------------------------------------------------------------------------
    def table(self, name: str) -> TableWriter:
        if name not in self._writers:
            self._writers[name] = TableWriter(self, name)
        return self._writers[name]

    def write_json(self, name: str, obj: Any) -> None:
        """Write a JSON document atomically (write to a temp file, then rename); one that
        does not fit is written again in the reserved space, if any is left."""
        clean = redact.document(json.loads(json.dumps(obj, default=str)))
        data = (json.dumps(clean, indent=2, sort_keys=False) + "\n").encode()
        try:
            self._replace(name, lambda tmp: tmp.write_bytes(data))
        except RunWriteError:
            if not self.release_reserve():
                raise
            self._replace(name, lambda tmp: tmp.write_bytes(data))

    def _replace(self, name: str, write: Callable[[Path], object]) -> None:
        """``write`` a temp file beside ``name``, then rename it into place; a failed write
        leaves ``name`` as it was and no temp file (``RunWriteError``)."""
        try:
            atomic.replace(self.path / name, write)
        except WriteFailed as exc:
            raise self.failed(exc.cause or exc).keeping(exc.kept or "") from None

    def compact(self, name: str) -> None:
        """The table's parquet file from its journal (which stays); ``RunWriteError`` when
        it cannot be written, with no parquet file left behind."""
        journal = self.path / journal_file(name)
        if journal.exists():
            try:
                self._replace(parquet_file(name), lambda tmp: _write_parquet(journal, tmp))
            except RunWriteError:
                with contextlib.suppress(OSError):  # an earlier one is stale: the journal reads
                    (self.path / parquet_file(name)).unlink()
                raise

    def close(self, *, compact: bool = True) -> None:
        """Close every table; ``compact=False`` leaves only the journals (a worker's part
        of a run, which the parent absorbs). A table whose parquet file cannot be written
        keeps its journal (``write_failure`` says why)."""
        for writer in self._writers.values():
            with contextlib.suppress(RunWriteError):
                writer.close(compact=compact)
        self._writers.clear()

    def absorb_journal(self, name: str, journal: Path, tag: Mapping[str, Any] | None = None) -> int:
        """Append the complete lines of another journal of table ``name`` (a worker's) to
        this run's; a torn last line is dropped. With ``tag``, its fields are added to
        every row (a line that is not one row is kept as it is). Returns the lines appended."""
        data = journal.read_bytes()
        complete = data[: data.rfind(b"\n") + 1]
        if not complete:
            return 0
        if tag:
            complete = b"".join(_tagged(line, tag) for line in complete.splitlines(keepends=True))
        self.table(name)._write(complete, 0)
        return complete.count(b"\n")

    def absorb_journals(
        self, folder: Path, names: Sequence[str], tags: Mapping[str, Mapping[str, Any]]
    ) -> dict[str, int]:
        """``absorb_journal`` for each of a worker's journals in ``folder`` (``tags`` by
        table), all or none: when one fails (the disk full), the lines already appended are
        taken back and ``RunWriteError`` is raised, so the worker's folder still holds every
        row (``runfmt.tables`` reads it) and none is counted twice. Lines appended by table."""
        present = [name for name in names if (folder / journal_file(name)).exists()]
        marks = {name: self.table(name).size() for name in present}
        try:
            return {
                name: self.absorb_journal(name, folder / journal_file(name), tags.get(name))
                for name in present
            }
        except RunWriteError:
            for name, size in marks.items():
                with contextlib.suppress(OSError):
                    self.table(name).truncate(size)
            raise

    def set_column(self, name: str, column: str, values: Mapping[str, Any]) -> None:
        """Set ``column`` in the rows of the closed table ``name`` whose ``id`` is in
        ``values``: a fact known only once the run is over (the prefix oracle's replay of
        what was sent). The journal is rewritten whole (atomically), then compacted."""
        if name in self._writers:
            raise RuntimeError(f"table {name} is still open")
        journal = self.path / journal_file(name)
        if not journal.exists():
            return
        lines = []
        for line in journal.read_bytes().splitlines(keepends=True):
            row = parse_line(line) if line.endswith(b"\n") else None  # a torn line stays
            if row is not None and BATCH_KEY not in row and row.get("id") in values:
                row[column] = clean_value(values[row["id"]])
                line = dumps_line(row)
            lines.append(line)
        self._replace(journal.name, lambda tmp: tmp.write_bytes(b"".join(lines)))
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
            raise InputError(str(path), f"is unreadable ({one_line(exc)})", FIX_DAMAGED) from None
        if not isinstance(doc, dict):
            raise InputError(
                str(path), f"holds a JSON {type(doc).__name__}, not an object", FIX_DAMAGED
            )
        return doc

    def has(self, name: str) -> bool:
        return (self.path / name).exists()


def _write_parquet(journal: Path, path: Path) -> None:
    """The journal as a parquet file at ``path``, converted and written a part at a time
    (``journal_parts``, one row group each), in two passes: the first converts each part
    only to learn its column types, which the parts must agree on
    (``promote_options="permissive"``: a column empty in one part takes the others' type,
    whole numbers and fractions are fractions, as a read of the whole journal infers
    them); the second converts each part again and writes it. One part is held at a time,
    never the run's rows (as Python objects, or as arrow tables: holding every part's
    until the types were known was a long run's largest allocation at its end)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schemas = [part.to_arrow().schema for part in journal_parts(journal) if part.columns]
    if not schemas:
        pq.write_table(read_journal(journal).to_arrow(), path)
        return
    try:
        schema = pa.unify_schemas(schemas, promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError):  # parts that disagree: read it whole
        pq.write_table(read_journal(journal).to_arrow(), path)
        return
    with pq.ParquetWriter(path, schema) as writer:
        for part in journal_parts(journal):
            if part.columns:
                writer.write_table(_conformed(part.to_arrow(), schema))


def _conformed(part: pa.Table, schema: pa.Schema) -> pa.Table:
    """``part`` with ``schema``'s columns in its order (nulls where it has none), cast."""
    import pyarrow as pa

    columns = [
        part.column(f.name).cast(f.type)
        if f.name in part.column_names
        else pa.nulls(part.num_rows, f.type)
        for f in schema
    ]
    return pa.table(columns, schema=schema)


def _tagged(line: bytes, tag: Mapping[str, Any]) -> bytes:
    """A journal line with ``tag``'s fields added, when it is one row."""
    row = loads_line(line)
    if not isinstance(row, dict) or BATCH_KEY in row:
        return line
    return dumps_line({**row, **tag})
