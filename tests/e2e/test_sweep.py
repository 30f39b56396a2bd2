"""``prefillscope sweep`` against the embedded engine: one run per load into one folder,
stopped once throughput stops rising, the knee in sweep.json, the table and the curve;
``compare`` of two sweep folders; ``export`` of a run as CSV and vLLM's result JSON."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
from bench_support import requests_table

#: An engine that serves about 4 / (16 × 10 ms) = 25 requests/s at most.
ENGINE = ("--engine", "fixed_step_s=0.01", "--engine", "max_num_seqs=4")
WORKLOAD = ("--workload", "system-prompt", "--num-requests", "40", "--set", "output_len=16")
CLI = [sys.executable, "-c", "from prefillscope.cli import main; main()"]


def cli(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("sweep") / "s"
    done = cli(
        "sweep", *WORKLOAD, *ENGINE, "--rates", "5,10,40,80,160,320",
        "--gpu-telemetry", "off", "--out", str(out),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return out


def test_the_sweep_stops_at_saturation_and_marks_the_knee(sweep_dir: Path) -> None:
    doc = json.loads((sweep_dir / "sweep.json").read_text())
    points = doc["points"]
    values = [p["value"] for p in points]
    assert values == sorted(values) and values[:3] == [5.0, 10.0, 40.0]
    assert doc["saturated_at"] is not None and doc["stopped_early"] is True
    assert len(points) < 6  # the search stopped before the last load
    for p in points:
        assert (sweep_dir / p["run_dir"] / "run.json").is_file()
        assert len(requests_table(sweep_dir / p["run_dir"])) == 40
    achieved = {p["value"]: p["achieved_rps"] for p in points}
    assert achieved[5.0] < achieved[40.0]  # more load, more throughput, below capacity
    top = max(values)
    assert achieved[top] < 0.7 * top  # the server, not the client, limits the top point
    saturated = next(p for p in points if p["value"] == doc["saturated_at"])
    best_before = max(p["achieved_rps"] for p in points if p["value"] < doc["saturated_at"])
    if doc["saturation_cause"] == "no_gain":
        assert saturated["achieved_rps"] < 1.05 * best_before
    else:  # the server served clearly less than the rate offered
        assert doc["saturation_cause"] == "served_below_offered"
        assert saturated["achieved_rps"] < 0.8 * saturated["offered_rps"]
    assert achieved[doc["knee"]] == best_before


def test_the_sweep_table_and_curve(sweep_dir: Path) -> None:
    page = (sweep_dir / "sweep.html").read_text()
    assert "Latency vs achieved throughput" in page and "knee (" in page
    for label in ("TTFT p50", "TTFT p99", "ITL p50", "ITL p99"):
        assert label in page
    assert "knee at " in page and "saturated at " in page


def test_compare_understands_sweep_folders(sweep_dir: Path, tmp_path: Path) -> None:
    done = cli("compare", str(sweep_dir), str(sweep_dir), "--json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    names = {p["run_dir"] for p in json.loads((sweep_dir / "sweep.json").read_text())["points"]}
    assert set(doc["points"]) == names
    assert doc["sweep"]["base"] == doc["sweep"]["new"]
    run = sweep_dir / "rate-5"
    refused = cli("compare", str(sweep_dir), str(run))
    assert refused.returncode == 2 and "not a sweep folder" in refused.stderr


def test_export_csv_and_vllm_json(sweep_dir: Path, tmp_path: Path) -> None:
    run = sweep_dir / "rate-5"
    requests = requests_table(run)
    done = cli("export", str(run), "--format", "csv")
    assert done.returncode == 0, done.stderr
    rows = list(csv.DictReader(io.StringIO(done.stdout)))
    assert len(rows) == len(requests) == 40
    first = requests.set_index("id").loc[rows[0]["id"]]
    ttft_ms = (first["first_token_s"] - first["intended_s"]) * 1e3
    assert float(rows[0]["ttft_ms"]) == pytest.approx(ttft_ms)
    out = tmp_path / "result.json"
    done = cli("export", str(run), "--format", "vllm-json", "--out", str(out))
    assert done.returncode == 0, done.stderr
    doc = json.loads(out.read_text())
    for key in ("completed", "total_input_tokens", "mean_ttft_ms", "p99_itl_ms", "itls"):
        assert key in doc
    assert doc["completed"] == 40 and doc["request_rate"] == 5.0
    assert doc["total_output_tokens"] == int(requests["output_tokens"].sum())
    assert len(doc["ttfts"]) == 40 and len(doc["itls"]) == 40
    bad = cli("export", str(run), "--format", "xml")
    assert bad.returncode == 2 and "--format" in bad.stderr


@pytest.mark.parametrize("width", [80, 100, 120])
def test_the_sweep_table_fits_without_cutting(sweep_dir: Path, width: int) -> None:
    from rich.console import Console

    from prefillscope.sweep_cli import print_sweep as _print
    from runfmt.sweep import read_sweep

    console = Console(width=width, record=True, file=io.StringIO())
    _print(read_sweep(sweep_dir), sweep_dir, console)
    text = console.export_text()
    assert "…" not in text
    assert all(len(line) <= width for line in text.splitlines())
    assert "knee" in text and "TTFT p99" in text
