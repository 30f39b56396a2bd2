"""``bench --out DIR`` on a disk that fills mid-run (a real 3 MB tmpfs).

The embedded engine answers 3,000 planned requests while the run's own files — its
``/metrics`` samples above all, scraped every 250 ms — fill the disk. The first write that
fails stops the run as a signal would: nothing more is sent, the requests in flight are
cancelled, ``run.json`` says ``failed`` with ``no space left on DIR``, ``summary.json`` is
written in the space reserved for it, one line goes to stderr (no traceback) and the
exit status is 6. Every row journalled before the disk filled reads back, and no journal
holds a line that is not whole.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from bench_support import bench_cli
from small_disk import small_tmpfs

from perfmodel.config import EngineConfig
from runfmt.tables import RunTables
from session.exit_status import EXIT_WRITE_FAILED
from simengine.embedded import EmbeddedServer

PLANNED = 3000


@pytest.mark.slow
def test_a_disk_full_mid_run_stops_it_with_one_line_and_keeps_what_was_written(
    tmp_path: Path,
) -> None:
    with (
        small_tmpfs(tmp_path / "disk", "3m") as disk,
        EmbeddedServer(EngineConfig(fixed_step_s=0.002)) as engine,
    ):
        out = disk / "run"
        done = bench_cli(
            "--endpoint", engine.url, "--workload", "shared-prefix", "--set", "prefix_len=64",
            "--set", "suffix_len=32", "--set", "output_len=8",
            "--num-requests", str(PLANNED), "--rate", "50", "--metrics-interval", "0.25",
            "--vocab-size", "32000", "--gpu-telemetry", "off",
            "--workers", "1", "--out", str(out),
        )  # fmt: skip
        lines = done.stderr.strip().splitlines()
        print(f"exit {done.returncode}: {done.stderr.strip()}")
        assert done.returncode == EXIT_WRITE_FAILED, done.stderr
        assert "Traceback" not in done.stderr and len(lines) == 1, done.stderr
        line = re.fullmatch(
            rf"prefillscope: run failed: no space left on {re.escape(str(out))}; "
            rf"(\d+) of (\d+) finished requests kept in {re.escape(str(out))}",
            lines[0],
        )
        assert line is not None, lines[0]
        kept, finished = int(line[1]), int(line[2])
        run = json.loads((out / "run.json").read_text())
        assert (run["status"], run["reason"]) == ("failed", f"no space left on {out}")
        sent = run["result"]["requests"]["sent"]
        assert sent < PLANNED / 4  # it stopped at the disk's fill, not at the plan's end
        summary = json.loads((out / "summary.json").read_text())
        requests = RunTables(out).requests
        ok = run["result"]["requests"]["ok"]
        print(f"rows kept {len(requests)} of {finished} finished ({ok} answered, the rest")
        print(f"cancelled in flight), {sent} of {PLANNED} sent")
        assert 0 < kept == len(requests) <= finished
        assert summary["requests"]["total"] + summary["requests"]["warmup_excluded"] == kept
        for journal in out.glob("*.jsonl"):  # whole lines only: nothing for a reader to skip
            data = journal.read_bytes()
            assert not data or data.endswith(b"\n"), journal.name
            assert all(json.loads(raw) for raw in data.splitlines()), journal.name
        assert not list(out.glob("*.tmp")) and not (out / ".reserve").exists()
