"""Columns in the run-directory journal: the per-token rows of ``chunks`` as batches, and a
column set once the run is over (``RunDir.set_column``)."""

from __future__ import annotations

import math
from array import array
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from runfmt.journal import read_journal
from runfmt.rundir import RunDir
from runfmt.tables import RunTables


def _write(run: RunDir) -> None:
    table = run.table("chunks")
    table.append({"request_id": "a", "t_s": 0.5, "n_tokens": 1})
    table.append_columns(
        {"t_s": array("d", [1.0, 1.25, math.nan]), "n_tokens": array("q", [1, 4, 2])},
        request_id="b",
    )
    table.append_columns({"t_s": array("d"), "n_tokens": array("q")}, request_id="empty")
    table.append({"request_id": "c", "t_s": 3.0, "n_tokens": 1})
    table.append_columns({"t_s": np.array([4.0]), "n_tokens": [7]}, request_id='d%x"')


def _check(df) -> None:
    assert df["request_id"].tolist() == ["a", "b", "b", "b", "c", 'd%x"']
    assert df["n_tokens"].tolist() == [1, 1, 4, 2, 1, 7]
    t = df["t_s"].to_numpy(dtype=float)
    assert t[:2].tolist() == [0.5, 1.0] and t[2] == 1.25 and math.isnan(t[3])
    assert t[4:].tolist() == [3.0, 4.0]


def test_batches_read_back_as_rows_from_the_journal_and_from_parquet(tmp_path: Path) -> None:
    run = RunDir(tmp_path, create=True)
    _write(run)
    _check(RunTables(tmp_path).chunks)  # mid-run: the journal
    assert run.table("chunks").rows_written == 6
    run.close()
    assert (tmp_path / "chunks.parquet").exists()
    _check(RunTables(tmp_path).chunks)


def test_a_torn_batch_line_loses_only_itself(tmp_path: Path) -> None:
    run = RunDir(tmp_path, create=True)
    _write(run)
    text = (tmp_path / "chunks.jsonl").read_text()
    (tmp_path / "chunks.jsonl").write_text(text[: text.rindex('"__columns__"') + 20])
    df = RunTables(tmp_path).chunks
    assert df["request_id"].tolist() == ["a", "b", "b", "b", "c"]


def test_times_are_exact(tmp_path: Path) -> None:
    times = array("d", np.random.default_rng(1).uniform(0, 1e4, 500))
    run = RunDir(tmp_path, create=True)
    run.table("chunks").append_columns(
        {"t_s": times, "n_tokens": array("q", [1] * 500)}, request_id="x"
    )
    assert RunTables(tmp_path).chunks["t_s"].tolist() == times.tolist()


def test_batches_of_different_shapes_keep_their_fields(tmp_path: Path) -> None:
    run = RunDir(tmp_path, create=True)
    table = run.table("chunks")
    table.append_columns({"x": [1.0, 2.0]}, request_id="a")
    table.append_columns({"x": [3.0], "y": [9]}, request_id="b", phase="warm")
    table.append_columns({"x": [4.0]}, request_id="c")
    df = RunTables(tmp_path).chunks
    assert df["request_id"].tolist() == ["a", "a", "b", "c"]
    assert df["x"].tolist() == [1.0, 2.0, 3.0, 4.0]
    assert df["phase"].fillna("-").tolist() == ["-", "-", "warm", "-"]
    assert df["y"].fillna(-1).tolist() == [-1, -1, 9, -1]


def test_a_column_known_after_the_run_is_set_in_journal_and_parquet(tmp_path: Path) -> None:
    """``set_column`` (the oracle's values after a run): rows by id, others untouched, a
    torn last line kept as it was, the parquet compacted again; an open table refused."""
    run = RunDir(tmp_path, create=True)
    table = run.table("requests")
    for rid in ("a", "b", "c"):
        table.append({"id": rid, "expected_cached_tokens": None, "max_tokens": 4})
    with pytest.raises(RuntimeError, match="still open"):
        run.set_column("requests", "expected_cached_tokens", {"a": 1})
    run.close()
    journal = tmp_path / "requests.jsonl"
    with journal.open("a") as fh:
        fh.write('{"id": "torn", "exp')  # a write cut short: not a row
    run.set_column("requests", "expected_cached_tokens", {"a": 16, "c": 0, "torn": 5})
    assert journal.read_text().endswith('{"id": "torn", "exp')
    for rows in (RunTables(tmp_path).requests, read_journal(journal).to_frame()):
        assert rows["id"].tolist() == ["a", "b", "c"]
        values = rows["expected_cached_tokens"].tolist()
        assert values[0] == 16 and values[2] == 0 and pd.isna(values[1])
        assert rows["max_tokens"].tolist() == [4, 4, 4]
