"""The run's tables, each with its schema, and ``RunTables``, the one reader of them.

A table is ``<name>.parquet`` once the run closed, else its journal ``<name>.jsonl``
(``runfmt.journal``), else absent. ``RunTables`` reads whichever is there, preferring
parquet: a parquet file that is empty, cut short or otherwise unreadable gives way to its
journal (one warning line on stderr says so), and with no journal to fall back to it is an
``InputError`` naming the file, which the CLI turns into one line and exit status 2.

A schema names the columns every row of a table has, in the order they are written. A
table with no rows yet (a run that stopped before its first request finished) reads as an
empty frame with its schema's columns, so a reader can always select them. The writers
(``loadgen.records``, ``loadgen.health``, ``probes.scraper``, ``probes.gpu``,
``probes.sampling``) write exactly these columns; ``tests/runfmt/test_run_tables.py``
holds them to it.

Which requests count is defined here, once: ``measured_rows`` (every request but the
warm-ups) and ``completed_mask`` (those that finished); ``RunTables.measured`` and
``.completed`` are them applied. A reader builds no ``RunTables`` itself: it gets one
with its run (``runfmt.run.open_run``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from runfmt.journal import (
    FIX_DAMAGED,
    NoReadableRow,
    journal_parts,
    one_line,
    read_journal,
    warn_once,
)
from runfmt.names import (
    CHUNKS_TABLE,
    CLIENT_TABLE,
    EVENTS_TABLE,
    GPU_TABLE,
    REQUESTS_TABLE,
    SERVER_METRICS_TABLE,
    SHARDS_DIR,
    WORKER_COLUMN,
    journal_file,
    parquet_file,
)
from runfmt.rundir import RunDir
from workloads.errors import InputError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence

    import numpy as np
    import pandas as pd

    from runfmt.columns import Columns, Table

T = TypeVar("T")


#: The JSON types a column's value may take (``None`` always may, unless required).
_KINDS: dict[str, tuple[type, ...]] = {
    "number": (int, float),
    "int": (int,),
    "text": (str,),
    "flag": (bool,),
    "list": (list,),
}


@dataclass(frozen=True)
class TableSchema:
    """One table of a run directory: its name and the columns of its rows; ``kinds``
    the JSON type of the columns a row must get right (``_KINDS``), ``required`` those it
    must have. A journal row that breaks them is skipped and counted like a torn line."""

    name: str
    columns: tuple[str, ...]
    kinds: tuple[tuple[str, str], ...] = ()
    required: tuple[str, ...] = ()

    def foreign(self, names: Sequence[str]) -> str | None:
        """Why a file with columns ``names`` is not this table (a required column
        missing, or none of its columns at all); None when it can be (or has none)."""
        if not names:  # an empty table written without columns: nothing to misread
            return None
        missing = [c for c in self.required if c not in names]
        if missing:
            return f"not a {self.name} table: no column {', '.join(missing)}"
        if not set(names) & set(self.columns):
            return f"not a {self.name} table: none of its columns"
        return None

    def fits(self, row: dict) -> bool:
        """Whether ``row`` (a journal line) has every required column and each kind right."""
        for column, kind in self.kinds:
            value = row.get(column)
            if value is None:
                if column in self.required:
                    return False
                continue
            allowed = _KINDS[kind]
            if isinstance(value, bool) and bool not in allowed:
                return False
            if not isinstance(value, allowed):
                return False
        return True


#: One row per request: what was sent, when each stage happened (run clock), tokens, outcome.
REQUESTS = TableSchema(
    REQUESTS_TABLE,
    ("id", "kind", "group", "tenant", "lora", "session", "turn", "warmup", "intended_s",
     "released_s", "sent_s", "first_token_s", "end_s", "prompt_tokens", "output_tokens",
     "cached_tokens", "expected_cached_tokens", "max_tokens", "num_chunks", "multi_token_chunks",
     "token_count_method", "finish_reason", "status", "error_kind", "http_status",
     "error_message", "retried", "usage_suspect", "output_token_ids", "output_logprobs",
     "output_text"),
    kinds=(("id", "text"), ("kind", "text"), ("status", "text"), ("warmup", "flag"),
           *((c, "number") for c in ("intended_s", "released_s", "sent_s", "first_token_s",
                                     "end_s")),
           *((c, "int") for c in ("prompt_tokens", "output_tokens", "cached_tokens",
                                  "expected_cached_tokens", "max_tokens", "num_chunks",
                                  "multi_token_chunks", "http_status")),
           *((c, "text") for c in ("token_count_method", "finish_reason", "error_kind",
                                   "error_message", "usage_suspect"))),
    required=("id",),
)  # fmt: skip
#: One row per streamed read that carried tokens: its request, arrival time, token count.
CHUNKS = TableSchema(CHUNKS_TABLE, ("request_id", "t_s", "n_tokens"))
#: The load generator's health samples: event-loop lag and its thread's CPU share (a run
#: of worker processes adds ``WORKER_COLUMN``: which worker's loop it is).
CLIENT = TableSchema(CLIENT_TABLE, ("t_s", "loop_lag_s", "cpu_share"))
#: The server's ``/metrics`` samples in long form (labels as sorted JSON).
SERVER_METRICS = TableSchema(SERVER_METRICS_TABLE, ("t_s", "metric", "labels", "value"))
#: One row per GPU per sample (NVML).
GPU = TableSchema(
    GPU_TABLE,
    ("t_s", "gpu", "name", "utilisation_pct", "memory_used_bytes", "memory_total_bytes",
     "sm_clock_mhz", "power_w"),
)  # fmt: skip
#: The probes' state changes: started, failed, recovered, lost, unavailable.
PROBE_EVENTS = TableSchema(EVENTS_TABLE, ("t_s", "probe", "event", "reason"))

#: The ``status`` of a request that finished (``loadgen.records.Status``); any other failed.
COMPLETED_STATUS = "ok"


def measured_rows(requests: Table) -> Table:
    """The requests that count: every row but the warm-up ones (a row whose ``warmup``
    is missing counts). A DataFrame or ``Columns`` in, the same kind out."""
    from runfmt.columns import flags

    if "warmup" not in requests:
        return requests
    return requests[~flags(requests, "warmup")]


def completed_mask(requests: Table) -> np.ndarray:
    """True for the rows of requests that finished (``COMPLETED_STATUS``)."""
    import numpy as np

    if "status" not in requests:
        return np.zeros(len(requests), dtype=bool)
    return np.asarray(requests["status"], dtype=object) == COMPLETED_STATUS


#: Every table of the run format, by name.
SCHEMAS: dict[str, TableSchema] = {
    schema.name: schema for schema in (REQUESTS, CHUNKS, CLIENT, SERVER_METRICS, GPU, PROBE_EVENTS)
}


def _schema(name: str) -> TableSchema:
    schema = SCHEMAS.get(name)
    if schema is None:
        raise KeyError(f"no table {name!r} in the run format; known: {', '.join(SCHEMAS)}")
    return schema


def unreadable(path: Path) -> str | None:
    """Why a table file that is there cannot be read (a symlink to itself, a folder, no
    permission); ``None`` when it is absent or opens."""
    if not os.path.lexists(path):
        return None
    try:
        with open(path, "rb") as fh:
            fh.read(1)
    except OSError as exc:
        return exc.strerror or type(exc).__name__
    return None


def _parquet_names(path: Path) -> list[str]:
    """The column names of the parquet file at ``path`` (its footer only)."""
    import pyarrow.parquet as pq

    return pq.read_schema(path).names


#: Most rows one part of ``RunTables.parts`` holds when read from parquet.
PART_READ_ROWS = 16384


def _parquet_columns(path: Path) -> Columns:
    """The parquet file's columns; text columns read as dictionaries, so that a value that
    repeats (a metric name, a label set, a status: most of a long run's rows) is one
    Python string shared by its rows, not one per row (half the memory of a long run's
    ``server_metrics``)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from runfmt.columns import Columns

    text = [f.name for f in pq.read_schema(path) if pa.types.is_string(f.type)]
    return Columns.from_arrow(pq.ParquetFile(path, read_dictionary=text).read())


def _parquet_parts(path: Path, columns: Sequence[str] | None) -> Iterator[Columns]:
    """The parquet file's rows, ``PART_READ_ROWS`` at most at a time, as
    ``_parquet_columns`` reads them (the file is opened, and its footer read, before the
    first part is asked for). Read a row group at a time (the compaction writes one per
    journal part), each cut into parts: pyarrow's ``iter_batches`` reads ahead, its
    buffers growing with the file (a 50,000-request run's requests table: 3.5 MiB at its
    peak against 1.3 at 5,000, and RSS +20 MiB against +11 for the summary's passes); a
    row group at a time it is the same at any length (0.9 MiB)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from runfmt.columns import Columns

    schema = pq.read_schema(path)
    names = [f.name for f in schema if columns is None or f.name in columns]
    text = [f.name for f in schema if f.name in names and pa.types.is_string(f.type)]
    file = pq.ParquetFile(path, read_dictionary=text)

    def parts() -> Iterator[Columns]:
        for group in range(file.num_row_groups):
            table = file.read_row_group(group, columns=names, use_threads=False)
            for batch in table.to_batches(max_chunksize=PART_READ_ROWS):
                yield Columns.from_arrow(pa.Table.from_batches([batch], schema=table.schema))

    return parts()


def _selected(table: Columns, columns: Sequence[str] | None) -> Columns:
    from runfmt.columns import Columns

    if columns is None:
        return table
    return Columns({c: table[c] for c in columns if c in table}, len(table))


class RunTables:
    """The tables of one run directory, read through one door (see the module docstring).

    Each read goes to the files again, so that a run still being written shows its latest
    rows; with ``keep`` (a run opened to be read: ``runfmt.run.open_run``) each table is
    read once and the same frame handed out again (a reader that changes it copies it).
    pandas is imported by the reads, not with the module: a load generator that only
    writes starts faster without it.
    """

    def __init__(
        self,
        run: RunDir | str | Path,
        *,
        keep: bool = False,
        recorded: Callable[[], tuple[int, str] | None] | None = None,
    ) -> None:
        self.run = run if isinstance(run, RunDir) else RunDir(run)
        self._kept: dict[str, pd.DataFrame] | None = {} if keep else None
        self._kept_columns: dict[str, Columns] | None = {} if keep else None
        self._recorded = recorded
        self._sources: dict[str, Path] = {}

    def has(self, name: str) -> bool:
        """Whether the run wrote table ``name`` (its journal or its parquet file)."""
        path = self.run.path
        return any(os.path.lexists(path / f) for f in (journal_file(name), parquet_file(name)))

    def read(self, name: str) -> pd.DataFrame:
        """Table ``name`` as a DataFrame; ``KeyError`` for a name the format does not have."""
        if self._kept is None:
            return self._read(name)
        if name not in self._kept:
            self._kept[name] = self._read(name)
        return self._kept[name]

    def columns(self, name: str) -> Columns:
        """Table ``name`` as numpy ``Columns``: the rows ``read`` gives, read without pandas
        (the statistics at a bench's own end need none); ``KeyError`` as ``read``."""
        if self._kept_columns is None:
            return self._read_columns(name)
        if name not in self._kept_columns:
            self._kept_columns[name] = self._read_columns(name)
        return self._kept_columns[name]

    def parts(self, name: str, columns: Sequence[str] | None = None) -> Iterator[Columns]:
        """Table ``name`` a part at a time: the rows ``columns(name)`` gives, in the same
        order, as consecutive ``Columns`` of at most ``PART_READ_ROWS`` rows (a parquet
        file) or ``journal_parts``' parts (a journal): a reader that reduces each part
        never holds a long run's table. ``columns`` picks the columns read (those the
        table has). Each call reads the files again; nothing is kept."""
        parquet = self._parquet(name, lambda path: _parquet_parts(path, columns))
        if parquet is not None:
            yield from parquet
        else:
            journal = self.run.path / journal_file(name)
            why = unreadable(journal)
            if why is not None:
                raise InputError(str(journal), f"is unreadable ({why})", FIX_DAMAGED)
            if journal.exists():
                try:
                    for part in journal_parts(
                        journal, _schema(name).fits, some_rows=name == REQUESTS_TABLE
                    ):
                        yield _selected(part, columns)
                except NoReadableRow as exc:
                    raise InputError(str(journal), f"is unreadable ({exc})", FIX_DAMAGED) from None
        for table in self._unmerged(name):
            yield _selected(table, columns)

    def _read(self, name: str) -> pd.DataFrame:
        import pandas as pd

        schema = _schema(name)
        frame = self._parquet(name, lambda path: pd.read_parquet(path))
        if frame is None:
            journal = self._journal(name)
            frame = journal.to_frame() if journal is not None else None
        unmerged = [columns.to_frame() for columns in self._unmerged(name)]
        if unmerged:
            frame = pd.concat([f for f in (frame, *unmerged) if f is not None], ignore_index=True)
        if frame is None or (frame.empty and frame.columns.empty):
            frame = pd.DataFrame(columns=list(schema.columns))
        self._check_rows(name, len(frame))
        return frame

    def _read_columns(self, name: str) -> Columns:
        import numpy as np

        from runfmt.columns import Columns, concat

        schema = _schema(name)
        table = self._parquet(name, _parquet_columns)
        if table is None:
            table = self._journal(name)
        tables = [t for t in (table, *self._unmerged(name)) if t is not None]
        table = concat(tables) if tables else None
        if table is None or (table.empty and not table.columns):
            table = Columns({column: np.empty(0, dtype=object) for column in schema.columns})
        self._check_rows(name, len(table))
        return table

    def _check_rows(self, name: str, rows: int) -> None:
        """Hold the request table's ``rows`` to the count the run recorded (``recorded``:
        the rows and the document that counts them): none of them is damage, an
        ``InputError`` naming the file read; fewer is read as it is, with one warning."""
        counted = self._recorded() if self._recorded is not None else None
        if name != REQUESTS_TABLE or counted is None or rows >= counted[0]:
            return
        source = self._sources.get(name, self.run.path / journal_file(name))
        holds = f"holds {rows} of the {counted[0]} requests {counted[1]} counts"
        if rows == 0:
            raise InputError(str(source), holds, FIX_DAMAGED)
        warn_once(f"{source}: {holds}; read from those {rows} ({FIX_DAMAGED})")

    def _journal(self, name: str) -> Columns | None:
        """Table ``name`` from its journal (rows of the wrong types skipped and counted);
        None when there is none; ``InputError`` when it is there but cannot be read."""
        journal = self.run.path / journal_file(name)
        why = unreadable(journal)
        if why is not None:
            raise InputError(str(journal), f"is unreadable ({why})", FIX_DAMAGED)
        if not journal.exists():
            return None
        try:
            return read_journal(journal, _schema(name).fits, some_rows=name == REQUESTS_TABLE)
        except NoReadableRow as exc:  # a request table of garbage is damage, not no requests
            raise InputError(str(journal), f"is unreadable ({exc})", FIX_DAMAGED) from None

    def _parquet(self, name: str, reader: Callable[[Path], T]) -> T | None:
        """Table ``name`` read from its parquet file by ``reader``; None when there is none,
        or when it is unreadable and its journal is there (one warning says so)."""
        parquet = self.run.path / parquet_file(name)
        journal = self.run.path / journal_file(name)
        if not os.path.lexists(parquet):
            return None
        try:
            why = unreadable(parquet) or _schema(name).foreign(_parquet_names(parquet))
            if why is not None:
                raise OSError(why)
            read = reader(parquet)
            self._sources[name] = parquet
            return read
        except (OSError, ValueError) as exc:  # ArrowInvalid is a ValueError
            reason = one_line(exc).split("': ", 1)[-1]  # pyarrow repeats the path
            if not journal.is_file():
                lost = unreadable(journal)
                also = f", nor is {journal.name} ({lost})" if lost else " and has no journal"
                raise InputError(
                    str(parquet), f"is unreadable ({reason}){also}", FIX_DAMAGED
                ) from None
            warn_once(f"{parquet} is unreadable ({reason}); reading {journal.name} instead")
        return None

    def _unmerged(self, name: str) -> list[Columns]:
        """Rows of table ``name`` still in the workers' journals (``SHARDS_DIR``): a run
        whose parent process was killed before it could merge them; the ``client``
        samples with the worker that took them."""
        import numpy as np

        tables = []
        for journal in sorted((self.run.path / SHARDS_DIR).glob(f"*/{journal_file(name)}")):
            table = read_journal(journal, _schema(name).fits)
            if name == CLIENT_TABLE and journal.parent.name.isdigit():
                worker = np.full(len(table), int(journal.parent.name))
                table = table.with_column(WORKER_COLUMN, worker)
            tables.append(table)
        return tables

    @property
    def requests(self) -> pd.DataFrame:
        return self.read(REQUESTS.name)

    @property
    def measured(self) -> pd.DataFrame:
        """The requests that count (``measured_rows``: warm-ups left out)."""
        return measured_rows(self.requests)

    @property
    def completed(self) -> pd.DataFrame:
        """The measured requests that finished (``completed_mask``)."""
        measured = self.measured
        return measured[completed_mask(measured)]

    @property
    def chunks(self) -> pd.DataFrame:
        return self.read(CHUNKS.name)

    @property
    def client(self) -> pd.DataFrame:
        return self.read(CLIENT.name)

    @property
    def server_metrics(self) -> pd.DataFrame:
        return self.read(SERVER_METRICS.name)

    @property
    def gpu(self) -> pd.DataFrame:
        return self.read(GPU.name)

    @property
    def probe_events(self) -> pd.DataFrame:
        return self.read(PROBE_EVENTS.name)
