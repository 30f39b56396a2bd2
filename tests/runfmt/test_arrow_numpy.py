"""``runfmt.arrow_numpy`` against pyarrow's own conversions, value for value and type for
type, and the end of a run without pandas: compacting the journals and reading the tables
back as ``Columns`` import no pandas, and give what the DataFrame reader gives."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from repo_paths import FIXTURES, ROOT

from runfmt.arrow_numpy import arrow_of, column_of, numpy_of
from runfmt.journal import BATCH_KEY
from runfmt.tables import SCHEMAS, RunTables

#: Columns as journals hold them, and the odd ones around them: nulls in every place,
#: bools with gaps, ints mixed with floats, lists of each kind, empty lists, unicode, and
#: values left to pyarrow (a dict, a list of lists, an int past int64, a mix of kinds).
CASES = [
    [], [None], [None, None], [1, 2], [1, None], [True, False], [True, None], [1.5, None, 2],
    [1, 2.5], ["a", None, "é"], ["", ""], [[1, 2], None, []], [[1.0, None]], [[], []],
    [["a"], ["b", None]], [[True], None], [None, [None]], [[None, None], []], [[1, 2.5]],
    [0.0, -0.0], [1e308, -1], [{"a": 1}], [[[1]]], [2**63], [[1], [2**63]], [1, "a"],
    [True, 1],
]  # fmt: skip
GOLDEN_RUNS = [FIXTURES / "golden_v1" / "run", FIXTURES / "golden_v2" / "run"]


def _journal_columns() -> list[list]:
    """Every column of the golden runs' row journals, as the JSON values written."""
    columns = []
    for journal in sorted(p for run in GOLDEN_RUNS for p in run.glob("*.jsonl")):
        rows = [json.loads(line) for line in journal.read_text().splitlines() if line.strip()]
        rows = [row for row in rows if isinstance(row, dict) and BATCH_KEY not in row]
        for name in dict.fromkeys(key for row in rows for key in row):
            columns.append([row.get(name) for row in rows])
    return columns


def _same(a: object, b: object) -> bool:
    """Equal values of equal types, NaN equal to NaN, arrays element by element."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        if not (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)):
            return False
        if a.dtype != b.dtype or a.shape != b.shape:
            return False
        if a.dtype == object:
            return all(_same(x, y) for x, y in zip(a, b, strict=True))
        return np.array_equal(a, b, equal_nan=a.dtype.kind == "f")
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and isinstance(b, float) and a != a and b != b:
        return True
    return type(a) is type(b) and a == b


def _pyarrow_column(values: list) -> np.ndarray | None:
    try:
        return pa.array(values).to_numpy(zero_copy_only=False)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        return None


ALL = CASES + _journal_columns()


def test_the_golden_journals_give_columns_to_compare() -> None:
    assert len(ALL) > len(CASES) + 30  # the journals' columns were found and read


@pytest.mark.parametrize("values", ALL, ids=lambda v: repr(v[:3])[:40])
def test_each_conversion_is_pyarrow_s_own(values: list) -> None:
    column = column_of(values)
    expected = _pyarrow_column(values)
    if expected is not None:
        assert _same(column, expected)
    else:  # pyarrow cannot convert them: kept as they are
        assert column.dtype == object and column.tolist() == values
    try:
        made = pa.array(column)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as exc:
        with pytest.raises(type(exc)):
            arrow_of(column)
        return
    built = arrow_of(column)
    assert built.type == made.type and built.null_count == made.null_count
    assert _same(built.to_pylist(), made.to_pylist())
    chunked = pa.chunked_array([made, made.slice(1)], type=made.type)
    for arrow in (made, made.slice(1), chunked):
        assert _same(numpy_of(arrow), arrow.to_numpy(zero_copy_only=False))


def _script(body: str) -> str:
    """Run ``body`` in a fresh interpreter; it prints whether pandas was imported."""
    out = subprocess.run(
        [sys.executable, "-c", body + "\nprint('pandas' in sys.modules)"],
        cwd=ROOT, capture_output=True, text=True, check=True, timeout=120,
    )  # fmt: skip
    return out.stdout.strip().splitlines()[-1]


def test_compaction_and_the_columns_reader_import_no_pandas(tmp_path: Path) -> None:
    for run in GOLDEN_RUNS:
        copy = tmp_path / run.parent.name
        copy.mkdir()
        for journal in run.glob("*.jsonl"):
            (copy / journal.name).write_bytes(journal.read_bytes())
    body = f"""
import sys
from pathlib import Path
from runfmt.rundir import RunDir
from runfmt.tables import RunTables, SCHEMAS
for path in sorted(Path({str(tmp_path)!r}).iterdir()):
    run = RunDir(path)
    for name in SCHEMAS:
        if (path / f"{{name}}.jsonl").exists():
            run.compact(name)
    assert list(path.glob("*.parquet")), path
    tables = RunTables(path)
    for name in SCHEMAS:
        tables.columns(name)
"""
    assert _script(body) == "False"
    # and what was written reads back as the journals' own rows, by either reader
    for copy in tmp_path.iterdir():
        (copy / "journal-only").mkdir()
        parquet, journal = RunTables(copy), RunTables(copy / "journal-only")
        for name in SCHEMAS:
            if (copy / f"{name}.jsonl").exists():
                (copy / "journal-only" / f"{name}.jsonl").write_bytes(
                    (copy / f"{name}.jsonl").read_bytes()
                )
            a, b = parquet.columns(name), journal.columns(name)
            assert a.columns == b.columns and len(a) == len(b)
            assert all(_same(a[c], b[c]) for c in a.columns), name


@pytest.mark.parametrize("run", GOLDEN_RUNS, ids=lambda p: p.parent.name)
def test_the_columns_reader_gives_the_rows_the_frame_reader_gives(run: Path) -> None:
    tables = RunTables(run)
    for name in SCHEMAS:
        columns, frame = tables.columns(name), tables.read(name)
        assert columns.columns == list(frame.columns) and len(columns) == len(frame)
        for column in columns.columns:
            ours, theirs = columns[column], frame[column].to_numpy()
            if ours.dtype != object and theirs.dtype != object:
                assert ours.dtype == theirs.dtype
                assert np.array_equal(ours, theirs, equal_nan=ours.dtype.kind == "f")
                continue
            for x, y in zip(ours, theirs, strict=True):  # pandas' strings miss as NaN
                if x is None:
                    assert y is None or y != y
                elif isinstance(x, np.ndarray):
                    assert np.array_equal(x, y)
                else:
                    assert x == y
