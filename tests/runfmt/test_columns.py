"""``runfmt.columns`` and the compaction through it: a journal's rows reach parquet with
the values and types a DataFrame reader expects, with no DataFrame built on the way."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from runfmt.columns import Columns, concat
from runfmt.journal import read_journal
from runfmt.rundir import RunDir
from runfmt.tables import RunTables


def test_concat_fills_what_a_table_lacks_as_missing_and_keeps_the_first_seen_order() -> None:
    first = Columns({"id": np.array(["a"], dtype=object), "n": np.array([1])})
    second = Columns({"flag": np.array([True]), "n": np.array([2.5])})
    both = concat([first, Columns({}), second])
    assert both.columns == ["id", "n", "flag"] and len(both) == 2
    assert both.get("n").tolist() == [1.0, 2.5]  # numbers stay numbers
    assert both.get("id").tolist() == ["a", None]
    assert both.get("flag").tolist() == [None, True]  # a bool with a gap is an object
    with pytest.raises(ValueError, match="different lengths"):
        Columns({"a": [1, 2], "b": [1]})


def test_a_compacted_table_reads_back_as_the_rows_written(tmp_path: Path) -> None:
    run = RunDir(tmp_path, create=True)
    requests = run.table("requests")
    requests.append({"id": "r0", "status": "ok", "cached_tokens": 16, "warmup": False,
                     "output_token_ids": [5, 6], "error_message": None})  # fmt: skip
    requests.append({"id": "r1", "status": "error", "cached_tokens": None, "warmup": True,
                     "output_token_ids": None, "error_message": "HTTP 503: busy",
                     "http_status": 503})  # fmt: skip
    chunks = run.table("chunks")
    chunks.append_columns(
        {"t_s": np.array([0.1, 0.2]), "n_tokens": np.array([1, 3])}, request_id="r0"
    )
    chunks.append({"request_id": "r1", "t_s": 0.3, "n_tokens": 1})
    run.close()
    assert (tmp_path / "requests.parquet").exists() and (tmp_path / "chunks.parquet").exists()
    tables = RunTables(run)
    read = tables.requests
    assert read["id"].tolist() == ["r0", "r1"] and read["warmup"].tolist() == [False, True]
    assert read["cached_tokens"].iloc[0] == 16 and math.isnan(read["cached_tokens"].iloc[1])
    assert list(read["output_token_ids"].iloc[0]) == [5, 6]
    assert read["output_token_ids"].iloc[1] is None
    assert read["http_status"].iloc[1] == 503 and math.isnan(read["http_status"].iloc[0])
    assert read["error_message"].tolist()[1] == "HTTP 503: busy"
    got = tables.chunks
    assert got["request_id"].tolist() == ["r0", "r0", "r1"]
    assert got["t_s"].tolist() == [0.1, 0.2, 0.3] and got["n_tokens"].tolist() == [1, 3, 1]
    # the parquet file and the journal it came from read alike
    journal = read_journal(tmp_path / "chunks.jsonl").to_frame()
    pd.testing.assert_frame_equal(got, journal, check_dtype=False)
