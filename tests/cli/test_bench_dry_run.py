"""``bench --dry-run``: the plan's statistics, nothing sent (no server is even started).

The real Mooncake traces have known infinite-cache block hit rates at their own 512-token
blocks: 0.640 (synthetic) and 0.366 (conversation).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from bench_support import bench_cli


@pytest.mark.slow  # the two traces are 16k requests, ~8 s to plan and replay
@pytest.mark.parametrize(
    ("trace", "requests", "hit_rate"),
    [("mooncake_synthetic_trace", 3993, 0.640), ("mooncake_conversation_trace", 12031, 0.366)],
)
def test_mooncake_traces_report_their_known_hit_rates(
    fixtures_dir: Path, trace: str, requests: int, hit_rate: float
) -> None:
    path = fixtures_dir / "traces" / f"{trace}.jsonl"
    done = bench_cli("--workload", f"trace:{path}", "--dry-run", "--json")
    assert done.returncode == 0, done.stderr
    stats = json.loads(done.stdout)  # stdout is the JSON and nothing else
    assert stats["requests"] == requests
    prefix = stats["prefix"]
    assert prefix["block_size"] == 512 and prefix["pool"] == "unbounded"
    assert round(prefix["block_hit_rate"], 3) == hit_rate


def test_a_finite_pool_lowers_the_expected_hit_rate_and_nothing_is_written(
    tmp_path: Path,
) -> None:
    args = ("--workload", "system-prompt", "--num-requests", "60", "--dry-run", "--json")
    unbounded = json.loads(bench_cli(*args, cwd=tmp_path).stdout)["prefix"]
    small = json.loads(
        bench_cli(*args, "--block-size", "16", "--num-gpu-blocks", "150", cwd=tmp_path).stdout
    )["prefix"]
    assert unbounded["pool"] == "unbounded" and small["pool"] == "150 blocks"
    assert small["expected_hit_rate"] < unbounded["expected_hit_rate"] - 0.1
    assert small["block_hit_rate"] == unbounded["block_hit_rate"]  # what the workload allows
    assert not (tmp_path / "runs").exists()


def test_the_table_names_the_figures(tmp_path: Path) -> None:
    done = bench_cli("--workload", "few-shot", "--num-requests", "20", "--dry-run", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    for label in ("requests (measured)", "prompt tokens (total)", "block hit rate", "nothing sent"):
        assert label in done.stdout


def test_the_dry_run_says_how_many_workers_a_run_would_take(tmp_path: Path) -> None:
    """As many as asked unless the plan bounds them (its users here), else as many as the
    planned token rate needs: what ``bench`` itself would start, before anything is."""
    args = ("--workload", "multi-turn", "--concurrency", "2", "--dry-run")
    bound = json.loads(bench_cli(*args, "--workers", "4", "--json", cwd=tmp_path).stdout)
    assert bound["workers"] == {
        "asked": 4,
        "run": 2,
        "planned_tokens_per_s": 200.0,
        "bound_by": "only 2 closed-loop users",
    }
    burst = ("--workload", "shared-prefix", "--num-requests", "400", "--rate", "inf")
    default = json.loads(bench_cli(*burst, "--dry-run", "--json", cwd=tmp_path).stdout)
    # 400 streams at once, 100 tokens/s each, over 10k tokens/s a worker: 4, at most the cores
    assert default["workers"]["asked"] is None and default["workers"]["bound_by"] is None
    assert default["workers"]["planned_tokens_per_s"] == 40_000.0
    assert default["workers"]["run"] == min(4, len(os.sched_getaffinity(0)))
    table = bench_cli(*args, "--workers", "4", cwd=tmp_path).stdout
    assert "2 (asked 4: only 2 closed-loop users)" in table
    assert not list(tmp_path.iterdir())  # nothing written
