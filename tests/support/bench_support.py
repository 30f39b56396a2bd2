"""Running ``prefillscope bench`` in tests: as a command (a real process) or through
``run_bench`` in this process, and reading what a run left behind."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pandas as pd

from prefillscope.engine_flags import parse_engine_flags
from runfmt.tables import RunTables
from session.bench_options import BenchOptions
from session.bench_runner import run_bench
from session.exit_status import BenchOutcome

CLI = [sys.executable, "-c", "from prefillscope.cli import main; main()", "bench"]


def bench_cli(*args: str, timeout: float = 180, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """``prefillscope bench ARGS`` to completion; stdout and stderr captured as text."""
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout, **kwargs)


def bench_process(*args: str, **kwargs: Any) -> subprocess.Popen[str]:
    """``prefillscope bench ARGS`` started in the background."""
    return subprocess.Popen(
        [*CLI, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs
    )


def bench(workload: str, out: Path, *, engine: tuple[str, ...] = (), **fields: Any) -> BenchOutcome:
    """One run through ``run_bench`` (the embedded engine unless ``endpoint`` is given)."""
    fields.setdefault("gpu", "off")
    options = BenchOptions(
        workload=workload,
        out=out,
        engine=parse_engine_flags(engine) if engine else None,
        **fields,
    )
    return asyncio.run(run_bench(options))


def requests_table(run: Path) -> pd.DataFrame:
    return RunTables(run).requests


def read_json(run: Path, name: str) -> dict[str, Any]:
    return json.loads((run / name).read_text())


def histogram_delta(run: Path, name: str) -> tuple[float, float]:
    """(sum, count) increase of a server histogram over the run, from the raw scrapes."""
    samples = RunTables(run).server_metrics
    out = []
    for part in ("_sum", "_count"):
        rows = samples[samples["metric"] == name + part]
        per_scrape = rows.groupby("t_s")["value"].sum().sort_index()
        out.append(float(per_scrape.iloc[-1] - per_scrape.iloc[0]))
    return out[0], out[1]


def wait_for_rows(journal: Path, rows: int, timeout_s: float = 60) -> None:
    """Wait until a run's journal holds ``rows`` lines (requests finished)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if journal.exists() and journal.read_text().count("\n") >= rows:
            return
        time.sleep(0.05)
    raise TimeoutError(f"{journal} did not reach {rows} rows")


#: Four prefix groups at a constant rate: a plan that splits into shards by group.
SHARDED_WORKLOAD = {
    "groups": 4,
    "prefix_len": 256,
    "suffix_len": 32,
    "output_len": 8,
    "num_requests": 48,
    "arrival": "constant",
    "rate": 24,
    "seed": 7,
}


def sharded_options(
    out: Path, workers: int, ray: str | None = None, **overrides: Any
) -> BenchOptions:
    """A ``SHARDED_WORKLOAD`` run on an embedded engine with 20 ms decode steps (the
    engine, not the client, paces), from ``workers`` processes or Ray actors."""
    return BenchOptions(
        workload="shared-prefix",
        overrides={**SHARDED_WORKLOAD, **overrides},
        out=out,
        engine=parse_engine_flags(("fixed_step_s=0.02",)),
        gpu="off",
        workers=workers,
        ray=ray,
    )
