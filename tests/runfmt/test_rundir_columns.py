"""Column batches in the run-directory journal: the per-token rows of ``chunks``."""

from __future__ import annotations

import math
from array import array
from pathlib import Path

import numpy as np

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
