"""The run directory keeps every finished row, even when the writer never closes."""

from __future__ import annotations

import math
from pathlib import Path

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
