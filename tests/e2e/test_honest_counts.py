"""Counts and rates as asked: a workload's added requests said before sending and
counted apart; the target rate shown is the rate asked for; dispatch lag from the real
release time (never negative)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from bench_support import bench_cli, read_json

from prefillscope.engine_flags import parse_engine_flags
from session.bench_options import BenchOptions
from session.bench_runner import run_bench
from session.live_stats import LiveStats

FAST = ("--engine", "fixed_step_s=0.002", "--gpu-telemetry", "off")


def test_interference_says_its_decode_streams_before_sending(tmp_path: Path) -> None:
    out = tmp_path / "run"
    done = bench_cli(
        "--workload", "interference", "--num-requests", "6", "--rate", "10",
        "--concurrency", "2", "--set", "stream_requests=2", "--set", "long_prompt_len=512",
        "--set", "stream_output_len=16", *FAST, "--out", str(out), "--json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    note = next(line for line in done.stderr.splitlines() if "--num-requests 6" in line)
    assert "6 long-prompt" in note and "4 decode" in note and "counted apart" in note
    assert done.stderr.index(note) < done.stderr.index("bench:")  # before any progress
    summary = json.loads(done.stdout)
    assert summary["requests"]["by_kind"] == {"long-prompt": 6, "decode": 4}
    plan = read_json(out, "run.json")["plan"]
    assert plan["by_kind"] == {"long-prompt": 6, "decode": 4}
    assert (plan["asked_rate"], plan["asked_rate_unit"]) == (10.0, "req/s")


def test_the_target_rate_shown_is_the_rate_asked_for(tmp_path: Path) -> None:
    done = bench_cli(
        "--workload", "multi-turn", "--num-requests", "8", "--rate", "2.5",
        "--set", "think_time=0.1", "--set", "output_len=8", *FAST, "--out", str(tmp_path / "r"),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    progress = [line for line in done.stdout.splitlines() if line.startswith("bench: ")]
    assert "(target 2.5 sessions/s)" in progress[-1]
    assert "8 sent · 8/8 done" in progress[-1]


class _Keep:
    """A display that keeps the run's live statistics for the test to read."""

    stats: LiveStats | None = None

    async def run(self, stats: LiveStats) -> None:
        self.stats = stats
        await asyncio.Event().wait()

    def close(self, stats: LiveStats) -> None:
        self.stats = stats


def test_live_dispatch_lag_is_measured_from_the_release(tmp_path: Path) -> None:
    """Open-loop requests are prepared 30 ms ahead of their time; the lag the dashboard
    shows is from their release, so it is never negative (it was about -27 ms)."""
    keep = _Keep()
    options = BenchOptions(
        workload="system-prompt",
        overrides={"num_requests": 40, "rate": 40.0},
        engine=parse_engine_flags(["fixed_step_s=0.002"]),
        out=tmp_path / "run",
        gpu="off",
    )
    outcome = asyncio.run(run_bench(options, keep))
    assert outcome.status == "complete" and keep.stats is not None
    lag = keep.stats.snapshot().dispatch_lag
    assert lag.count == 40 and lag.p50 is not None and lag.p50 >= 0.0
