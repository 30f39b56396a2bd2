"""``RunTables.parts`` reads a parquet table a row group at a time: the arrow memory it
holds at its peak is one row group's, the same for a run ten times as long (issue 43
item 8: pyarrow's ``iter_batches`` read ahead, its buffers growing with the file, and the
summary's passes at a long run's end with them)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from runfmt.tables import RunTables

GROUP_ROWS = 4096  # a journal part: the compaction's row group


def _requests_parquet(folder: Path, rows: int) -> Path:
    folder.mkdir()
    ids = np.arange(rows)
    table = pa.table(
        {
            "id": [f"req-{i}" for i in ids],
            "status": ["ok"] * rows,
            "sent_s": ids * 0.01,
            "first_token_s": ids * 0.01 + 0.05,
            "end_s": ids * 0.01 + 0.2,
            "prompt_tokens": np.full(rows, 272),
            "output_tokens": np.full(rows, 16),
            "output_text": ["some words of output " * 4] * rows,
        }
    )
    with pq.ParquetWriter(folder / "requests.parquet", table.schema) as writer:
        for start in range(0, rows, GROUP_ROWS):
            writer.write_table(table.slice(start, GROUP_ROWS))
    return folder


def _peak_arrow_bytes(folder: Path) -> tuple[int, int]:
    """The most arrow bytes allocated while the parts are read, and the rows read."""
    base = pa.total_allocated_bytes()
    peak = rows = 0
    for part in RunTables(folder).parts("requests"):
        peak = max(peak, pa.total_allocated_bytes() - base)
        rows += len(part)
    return peak, rows


def test_reading_parts_holds_one_row_group_at_any_length(tmp_path: Path) -> None:
    short, long = 5_000, 50_000
    peak_short, rows_short = _peak_arrow_bytes(_requests_parquet(tmp_path / "short", short))
    peak_long, rows_long = _peak_arrow_bytes(_requests_parquet(tmp_path / "long", long))
    print(f"arrow peak: {peak_short / 2**20:.2f} MiB at {short:,} rows, "
          f"{peak_long / 2**20:.2f} MiB at {long:,}")  # fmt: skip
    assert (rows_short, rows_long) == (short, long)
    # before: 2.6x as much at ten times the rows (read-ahead); now one row group's
    assert peak_long <= peak_short * 1.1
