"""runfmt.tables: every table of a run has a schema its writer keeps, and one reader."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import pytest

from loadgen.records import ChunkEvent, RequestRecord
from probes.exposition import parse_exposition
from probes.sampling import ProbeStatus
from probes.scraper import sample_rows
from runfmt.run import Run
from runfmt.rundir import RunDir
from runfmt.tables import (
    CHUNKS,
    PROBE_EVENTS,
    REQUESTS,
    SCHEMAS,
    SERVER_METRICS,
    RunTables,
    completed_mask,
    measured_rows,
)


def test_the_writers_write_the_columns_of_their_schemas(tmp_path: Path) -> None:
    """The typed writers by their fields; the probes by the rows they append. (The client
    table is held to its schema in tests/loadgen/test_loadgen_run.py, the gpu table in
    tests/probes/test_gpu.py, each by a real run of its writer.)"""
    assert tuple(RequestRecord.columns()) == REQUESTS.columns
    assert tuple(f.name for f in fields(ChunkEvent)) == CHUNKS.columns
    exposition = parse_exposition('# TYPE x counter\nx_total{a="b"} 3\n')
    (row,) = sample_rows(1.5, exposition)
    assert tuple(row) == SERVER_METRICS.columns
    run = RunDir(tmp_path, create=True)
    status = ProbeStatus.for_run("gpu", run)
    status.unavailable("no driver")
    status.fail("timed out", 2.0)
    run.close()
    events = RunTables(run).probe_events
    assert tuple(events.columns) == PROBE_EVENTS.columns
    assert events["event"].tolist() == ["unavailable", "failed"]


def test_a_table_with_no_rows_reads_with_its_schemas_columns(tmp_path: Path) -> None:
    run = RunDir(tmp_path, create=True)
    run.table(CHUNKS.name)  # an empty journal: opened, nothing appended
    run.close()
    tables = RunTables(tmp_path)
    for name, schema in SCHEMAS.items():
        frame = tables.read(name)
        assert frame.empty and tuple(frame.columns) == schema.columns, name
    assert tables.requests["warmup"].empty  # a reader can select a column of no rows
    assert tables.has(CHUNKS.name) and not tables.has(REQUESTS.name)  # written or not


def test_a_name_the_format_does_not_have_is_refused(tmp_path: Path) -> None:
    RunDir(tmp_path, create=True).table(REQUESTS.name).append({"id": "a"})
    with pytest.raises(KeyError, match="no table 'request' in the run format; known: requests"):
        RunTables(tmp_path).read("request")
    assert RunTables(tmp_path).requests["id"].tolist() == ["a"]


def test_measured_and_completed_are_defined_once_a_missing_warmup_flag_counting(
    tmp_path: Path,
) -> None:
    """The rows every reader counts: a warm-up is left out, a row that lacks the flag (a
    journal of another writer) is measured, and only an ``ok`` one completed."""
    rows = [{"id": "w", "warmup": True, "status": "ok"}, {"id": "a", "status": "ok"},
            {"id": "b", "warmup": False, "status": "error"}]  # fmt: skip
    RunDir(tmp_path, create=True).table(REQUESTS.name).append_many(rows)
    tables = Run.at(tmp_path, live=False).tables
    assert tables.measured["id"].tolist() == ["a", "b"]
    assert tables.completed["id"].tolist() == ["a"]
    assert completed_mask(measured_rows(tables.requests)).tolist() == [True, False]
    assert tables.requests is tables.requests  # a run opened to be read reads a table once
    live = RunTables(tmp_path)  # a run still being written is read afresh at every ask
    assert live.requests is not live.requests
