"""The light SSE mock of ``benchmarks/client_limit_sweep.py`` and the truth it keeps.

``prefillscope bench`` detects it and streams from it like any vLLM server; and the
sweep's reading of the mock's tick record is exact: mapping each token the load
generator received to the tick that wrote it (from the reads alone) gives, tick by
tick, exactly the number of streams the mock says it wrote then.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest
from bench_support import bench_cli, read_json, requests_table
from repo_paths import ROOT

from runfmt.tables import RunTables
from runtime.clock import RunClock

sys.path.insert(0, str(ROOT / "benchmarks"))  # the sweep imports overhead_clients by name
SPEC = importlib.util.spec_from_file_location(
    "client_limit_sweep", ROOT / "benchmarks/client_limit_sweep.py"
)
sweep = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(sweep)
STEP_MS = (
    50.0  # a read must come within a step of its write for the mapping; wide on a busy machine
)

pytestmark = pytest.mark.slow  # a mock process and a few seconds of streams


@pytest.fixture(scope="module")
def mock():
    proc, url = sweep.start_mock(STEP_MS, min(os.sched_getaffinity(0)), rt=False)
    yield url
    proc.terminate()
    proc.wait(10)


def test_bench_streams_from_the_mock(mock: str, tmp_path: Path) -> None:
    run = tmp_path / "run"
    done = bench_cli(
        *("--endpoint", mock, "--workload", "random", "--num-requests", "24"),
        *("--concurrency", "8", "--random-input-len", "16", "--random-output-len", "20"),
        *("--vocab-size", "32000", "--gpu-telemetry", "off", "--out", str(run)),
    )
    assert done.returncode == 0, done.stderr
    info = read_json(run, "run.json")
    assert info["target"]["flavour"] == "vllm" and info["status"] == "complete"
    requests = requests_table(run)
    assert len(requests) == 24 and (requests["status"] == "ok").all()
    assert (requests["output_tokens"] == 20).all()


def test_every_token_maps_to_the_tick_that_wrote_it(mock: str, tmp_path: Path) -> None:
    clock = RunClock()
    since = clock.t0
    result, run_dir, _, _ = asyncio.run(
        sweep.loadgen(mock, 32, 2, 30, tmp_path / "run", clock=clock)
    )
    assert result.ok == 64
    chunks = RunTables(run_dir).chunks
    chunks["t_s"] += clock.t0
    ticks = asyncio.run(sweep.mock_ticks(mock, since))
    starts, written = ticks[:, 1], ticks[:, 3].astype(int)
    counted = np.zeros(len(ticks), dtype=int)
    for _, reads in chunks.sort_values("t_s").groupby("request_id"):
        t = reads["t_s"].to_numpy(dtype=float)
        tick = sweep.token_ticks(t, reads["n_tokens"].to_numpy(dtype=np.int64), starts)
        assert tick[0] >= 0 and np.all(np.diff(tick) == 1)
        np.add.at(counted, tick, 1)
    assert counted.sum() == 64 * 30
    assert (counted == written).all(), json.dumps(
        {"differ": np.flatnonzero(counted != written).tolist()[:10]}
    )
    late, gap_error = sweep.token_errors(chunks, ticks)
    assert late.size == 64 * 30 and gap_error.size == 64 * 29 and (late >= 0).all()


def test_the_mocks_own_totals_count_every_token(mock: str, tmp_path: Path) -> None:
    """``/mock/totals``, which the overhead benchmark sets the clients' TTFT and ITL
    against: one first token per request, one gap per further token, and the gaps'
    mean is the mock's step (its ticks keep an absolute schedule)."""
    import overhead_clients

    before = asyncio.run(overhead_clients.engine_totals(mock))
    result, _, _, _ = asyncio.run(sweep.loadgen(mock, 8, 2, 12, tmp_path / "run"))
    after = asyncio.run(overhead_clients.engine_totals(mock))
    assert result.ok == 16
    assert after["ttft"][1] - before["ttft"][1] == 16
    assert after["itl"][1] - before["itl"][1] == 16 * 11
    step_s = STEP_MS / 1e3
    ttft = overhead_clients.engine_mean(before, after, "ttft")
    itl = overhead_clients.engine_mean(before, after, "itl")
    assert 0 < ttft < 2 * step_s  # the first tick after the request was read
    assert 0.8 * step_s < itl < 1.25 * step_s, itl
