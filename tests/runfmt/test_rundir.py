"""The run directory keeps every finished row, even when the writer never closes."""

from __future__ import annotations

import gc
import json
import math
import os
from array import array
from pathlib import Path

import numpy as np

from runfmt.rundir import RunDir
from runfmt.tables import RunTables


def test_rows_survive_without_close_and_compact_on_close(tmp_path: Path) -> None:
    run = RunDir(tmp_path / "r", create=True)
    table = run.table("requests")
    table.append({"id": "a", "ttft": 0.5, "cached": None})
    table.append_many([{"id": "b", "ttft": math.nan, "cached": 16}])
    # A second process reading mid-run (or after a crash) sees both rows from the journal.
    df = RunTables(tmp_path / "r").requests
    assert list(df["id"]) == ["a", "b"]
    assert df["ttft"].isna().tolist() == [False, True]
    run.close()
    assert (tmp_path / "r" / "requests.parquet").exists()
    assert RunTables(tmp_path / "r").requests["cached"].tolist()[1] == 16


def test_torn_last_line_is_ignored(tmp_path: Path) -> None:
    run = RunDir(tmp_path, create=True)
    run.table("chunks").append({"request_id": "a", "t_s": 1.0, "n_tokens": 1})
    with (tmp_path / "chunks.jsonl").open("a") as fh:
        fh.write('{"request_id": "b", "t_')
    assert len(RunTables(tmp_path).chunks) == 1


def test_json_documents_are_written_atomically(tmp_path: Path) -> None:
    run = RunDir(tmp_path, create=True)
    run.write_json("run.json", {"status": "complete"})
    assert run.read_json("run.json") == {"status": "complete"}
    assert not list(tmp_path.glob("*.tmp"))


def test_values_orjson_refuses_are_written_by_json_and_read_back(tmp_path: Path) -> None:
    """A journal line is orjson's; what it refuses (an integer beyond 64 bits, a key that is
    not a string) falls back to ``json`` instead of failing the write, and every line
    still parses; a line with a ``NaN`` literal from another writer is read, not skipped."""
    run = RunDir(tmp_path, create=True)
    table = run.table("requests")
    table.append({"id": "big", "n": 2**70, "tags": {1: "x"}, "note": "café"})
    table.append({"id": "np", "n": np.int64(7), "ttft": np.float64(0.25)})
    with (tmp_path / "requests.jsonl").open("a") as fh:
        fh.write('{"id": "nan", "n": 3, "ttft": NaN}\n')
    lines = (tmp_path / "requests.jsonl").read_bytes().splitlines()
    assert json.loads(lines[0]) == {"id": "big", "n": 2**70, "tags": {"1": "x"}, "note": "café"}
    assert json.loads(lines[1]) == {"id": "np", "n": 7, "ttft": 0.25}
    rows = RunTables(tmp_path).requests
    assert list(rows["id"]) == ["big", "np", "nan"]
    assert math.isnan(rows["ttft"].iloc[2])


def test_column_sets_go_out_in_one_write_and_read_back_in_order(
    tmp_path: Path, monkeypatch
) -> None:
    """Many requests' chunk columns (a burst of finished requests) are one system call;
    empty ones are skipped; the rows read back request by request."""
    run = RunDir(tmp_path, create=True)
    table = run.table("chunks")
    writes = []
    real_write = os.write
    monkeypatch.setattr(
        os, "write", lambda fd, data: writes.append(len(data)) or real_write(fd, data)
    )
    sets = [
        (
            {"t_s": array("d", [i + 0.5, i + 0.75]), "n_tokens": array("q", [1, 2])},
            {"request_id": f"r{i}"},
        )
        for i in range(5)
    ]
    sets.insert(2, ({"t_s": array("d"), "n_tokens": array("q")}, {"request_id": "empty"}))
    table.append_column_sets(sets)
    assert len(writes) == 1
    assert table.rows_written == 10
    chunks = RunTables(tmp_path).chunks
    assert list(chunks["request_id"]) == [f"r{i}" for i in range(5) for _ in range(2)]
    assert list(chunks["n_tokens"]) == [1, 2] * 5
    assert chunks["t_s"].tolist()[-1] == 4.75


def test_a_writer_dropped_unclosed_gives_its_descriptor_back(tmp_path: Path) -> None:
    """Writers hold a raw descriptor: one dropped without ``close`` (a crashed caller)
    closes it, so a process making many run directories does not run out; its rows stay."""
    held = len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else None
    for i in range(40):
        RunDir(tmp_path / f"r{i}", create=True).table("requests").append({"id": f"a{i}"})
    gc.collect()
    if held is not None:
        assert len(os.listdir("/proc/self/fd")) <= held
    assert list(RunTables(tmp_path / "r39").requests["id"]) == ["a39"]
