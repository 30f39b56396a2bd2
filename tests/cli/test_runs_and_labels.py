"""``--label KEY=VALUE`` (issue 41 item 7): recorded in run.json, carried to ``compare``
and ``export``; ``prefillscope runs [DIR]`` lists runs with label, workload, target,
status and headline numbers, as a table and as JSON."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from bench_support import bench_cli, read_json

CLI = [sys.executable, "-c", "from prefillscope.cli import main; main()"]
FAST = ("--engine", "fixed_step_s=0.001", "--gpu-telemetry", "off", "--metrics-interval", "0.2")


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=180)


@pytest.fixture(scope="module")
def runs_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("runs")
    for name, gpu in (("a", "h100"), ("b", "l40s")):
        done = bench_cli(
            "--workload", "system-prompt", "--num-requests", "12", "--rate", "40",
            "--label", f"gpu={gpu}", "--label", "team=infra", *FAST, "--out", str(root / name),
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
    (root / "notes").mkdir()  # a folder that is no run is not listed
    return root


def test_labels_are_recorded_in_run_json(runs_dir: Path) -> None:
    assert read_json(runs_dir / "a", "run.json")["labels"] == {"gpu": "h100", "team": "infra"}


def test_runs_lists_each_run_with_its_label_workload_target_status_and_headline(
    runs_dir: Path,
) -> None:
    done = cli("runs", str(runs_dir), "--json")
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    assert [r["run"] for r in rows] == ["a", "b"]
    for row, gpu in zip(rows, ("h100", "l40s"), strict=True):
        assert row["labels"] == {"gpu": gpu, "team": "infra"}
        assert (row["workload"], row["target"], row["status"]) == (
            "system-prompt", "embedded", "complete",
        )  # fmt: skip
        assert row["completed"] == row["measured"] == 12
        assert 0 < row["ttft_p50_s"] <= row["ttft_p99_s"] and row["requests_per_s"] > 0
    summary = read_json(runs_dir / "a", "summary.json")
    assert rows[0]["ttft_p99_s"] == pytest.approx(summary["ttft_s"]["p99"])
    for width in ("80", "120"):  # one line a run when it fits, else two; nothing cut
        table = subprocess.run(
            [*CLI, "runs", str(runs_dir)], capture_output=True, text=True,
            env={**os.environ, "COLUMNS": width}, timeout=60,
        )  # fmt: skip
        lines = table.stdout.splitlines()
        assert table.returncode == 0 and max(len(line) for line in lines) <= int(width)
        assert any("gpu=h100 team=infra" in line and "system-prompt" in line for line in lines)
    only = json.loads(cli("runs", str(runs_dir), "--json", "--label", "gpu=l40s").stdout)
    assert [r["run"] for r in only] == ["b"]


def test_compare_and_export_carry_the_labels(runs_dir: Path, tmp_path: Path) -> None:
    done = cli("compare", str(runs_dir / "a"), str(runs_dir / "b"), "--format", "json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["labels"] == {
        "base": {"gpu": "h100", "team": "infra"},
        "new": {"gpu": "l40s", "team": "infra"},
    }
    table = subprocess.run(
        [*CLI, "compare", str(runs_dir / "a"), str(runs_dir / "b")], capture_output=True,
        text=True, env={**os.environ, "COLUMNS": "300"}, timeout=60,
    )  # fmt: skip
    assert "a [gpu=h100 team=infra] → " in table.stdout
    out = tmp_path / "vllm.json"
    done = cli("export", str(runs_dir / "a"), "--format", "vllm-json", "--out", str(out))
    assert done.returncode == 0, done.stderr
    exported = json.loads(out.read_text())
    assert exported["gpu"] == "h100" and exported["team"] == "infra"
    assert exported["label"] == "gpu=h100 team=infra"


@pytest.mark.parametrize("label", ["novalue", "=x", "a b=c"])
def test_a_bad_label_is_one_line_exit_2_and_nothing_written(tmp_path: Path, label: str) -> None:
    out = tmp_path / "run"
    done = bench_cli("--workload", "system-prompt", "--label", label, *FAST, "--out", str(out))
    assert done.returncode == 2 and "--label" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and not out.exists()


def test_runs_of_a_missing_folder_is_one_line(tmp_path: Path) -> None:
    done = cli("runs", str(tmp_path / "absent"))
    assert done.returncode == 2 and "is not a folder" in done.stderr
