"""``bench --dry-run``: the plan's statistics, nothing sent (no server is even started).

The real Mooncake traces have known infinite-cache block hit rates at their own 512-token
blocks: 0.640 (synthetic) and 0.366 (conversation).
"""

from __future__ import annotations

import json
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
