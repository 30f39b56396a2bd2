"""Finished requests' journal lines: written together after the loop pass they ended in."""

from __future__ import annotations

import asyncio
import os
from array import array
from pathlib import Path

from loadgen.finished import FinishedJournal
from loadgen.load_options import new_record
from loadgen.records import ChunkTimes
from runfmt.rundir import RunDir
from runfmt.tables import RunTables
from workloads.plan import Prompt, RequestSpec


def _finished(i: int) -> tuple:
    record = new_record(RequestSpec(f"r{i}", Prompt.of_tokens([7] * 4), 2), float(i))
    record.end_s = i + 0.5
    return record, ChunkTimes(array("d", [i + 0.1, i + 0.2]), array("q", [1, 1]))


def test_a_burst_is_one_write_per_table_after_its_pass(tmp_path: Path, monkeypatch) -> None:
    """Requests ending in one pass of the loop: nothing is written during the pass, then
    each table gets one write holding all of them, in the order they ended."""
    run = RunDir(tmp_path, create=True)
    journal = FinishedJournal(run.table("requests"), run.table("chunks"))
    writes: list[int] = []
    real_write = os.write
    monkeypatch.setattr(os, "write", lambda fd, data: writes.append(fd) or real_write(fd, data))

    async def burst() -> list[int]:
        for i in range(4):
            journal.add(*_finished(i))
        during = list(writes)
        await asyncio.sleep(0)  # the pass ends: the callback runs
        return during

    assert asyncio.run(burst()) == []
    assert len(writes) == 2 and len(set(writes)) == 2
    tables = RunTables(tmp_path)
    assert list(tables.requests["id"]) == ["r0", "r1", "r2", "r3"]
    assert list(tables.chunks["request_id"]) == ["r0", "r0", "r1", "r1", "r2", "r2", "r3", "r3"]


def test_flush_writes_what_waits_and_no_loop_writes_at_once(tmp_path: Path) -> None:
    """``flush`` (a run's end, on any path) writes what is kept, and a second flush adds
    nothing; outside a running loop a finished request is written at once."""
    run = RunDir(tmp_path, create=True)
    journal = FinishedJournal(run.table("requests"), run.table("chunks"))

    async def ended_then_flushed() -> int:
        journal.add(*_finished(0))
        journal.flush()
        journal.flush()
        return len(RunTables(tmp_path).requests)

    assert asyncio.run(ended_then_flushed()) == 1
    journal.add(*_finished(1))
    assert list(RunTables(tmp_path).requests["id"]) == ["r0", "r1"]
    assert len(RunTables(tmp_path).chunks) == 4
