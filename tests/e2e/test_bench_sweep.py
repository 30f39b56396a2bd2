"""``bench --rate 1,2,4`` and ``bench --concurrency 1,8`` run ``prefillscope sweep`` over
those loads (one run per point into one folder), and ``--json`` prints ``sweep.json`` with
``out``, the folder, so a script finds every point's run directory from the output alone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bench_support import bench_cli, read_json, requests_table

SMALL = ["--workload", "shared-prefix", "--num-requests", "4", "--seed", "2"]
SMALL += ["--gpu-telemetry", "off", "--engine", "fixed_step_s=0.002"]


@pytest.mark.parametrize(
    ("flag", "points", "axis", "plan_key"),
    [
        ("--rate", "10,5", "rate", "asked_rate"),
        ("--concurrency", "2,1", "concurrency", "concurrency"),
    ],
)
def test_a_list_of_loads_runs_a_sweep_into_one_folder(
    tmp_path: Path, flag: str, points: str, axis: str, plan_key: str
) -> None:
    out = tmp_path / "sweep"
    done = bench_cli(*SMALL, flag, points, "--json", "--out", out)
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert document["out"] == str(out) and document["axis"] == axis
    assert document == {"out": str(out)} | read_json(out, "sweep.json")
    values = [p["value"] for p in document["points"]]
    assert values == sorted(float(v) for v in points.split(","))
    for point in document["points"]:
        run = Path(document["out"]) / point["run_dir"]
        assert point["status"] == "complete" and len(requests_table(run)) == 4
        assert read_json(run, "run.json")["plan"][plan_key] == point["value"]
    assert (out / "sweep.html").is_file()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--rate", "1,2", "--dry-run"], "--rate: 1,2 runs a sweep, which has no --dry-run"),
        (["--rate", "1,2", "--concurrency", "1,4"], "--concurrency: sweep one axis at a time"),
        (["--rate", "0,2"], "--rate: '0': sweep points are positive numbers"),
        (["--concurrency", "1,100000000"], "--concurrency: 100,000,000 is above the cap"),
    ],
)
def test_a_bad_list_of_loads_is_one_line(tmp_path: Path, extra: list[str], message: str) -> None:
    done = bench_cli(*SMALL, *extra, "--out", tmp_path / "sweep")
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("prefillscope: error: " + message), done.stderr
    assert not (tmp_path / "sweep").exists()
