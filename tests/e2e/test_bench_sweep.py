"""``bench --rate 1,2,4`` and ``bench --concurrency 1,8`` run ``prefillscope sweep`` over
those loads (one run per point into one folder), and ``--json`` prints ``sweep.json`` with
``out``, the folder, so a script finds every point's run directory from the output alone."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
from bench_support import bench_cli, bench_process, read_json, requests_table, wait_for_rows

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
        # a gate of 0 is a gate (it was read as "not given", and the sweep ran ungated)
        (
            ["--rate", "1,2", "--max-error-rate", "0"],
            "--rate: 1,2 runs a sweep, which has no "
            "--max-error-rate (give one load, or drop that flag)",
        ),
        (
            ["--concurrency", "1,2", "--slo", "ttft=1s", "--min-goodput", "0"],
            "--concurrency: 1,2 runs a sweep, which has no --min-goodput",
        ),
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


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["sigterm", "ctrl-c"])
def test_a_stop_signal_ends_the_sweep_at_its_point_with_its_curve(
    tmp_path: Path, sig: signal.Signals
) -> None:
    """A stop signal mid-point: that point's run is recorded interrupted, the sweep stops
    there with ``sweep.json`` and its curve written, one line names the signal, and the
    status is 128 + its number (a SIGTERM had been reported as Ctrl-C, then again)."""
    out = tmp_path / "sweep"
    sweep = bench_process(
        *("--workload", "shared-prefix", "--num-requests", "400", "--gpu-telemetry", "off"),
        *("--engine", "fixed_step_s=0.005", "--concurrency", "2,4", "--out", str(out)),
        start_new_session=True,
    )
    wait_for_rows(out / "concurrency-2" / "requests.jsonl", 3)
    sweep.send_signal(sig)
    _, stderr = sweep.communicate(timeout=60)
    assert sweep.returncode == 128 + sig, stderr
    said = [line for line in stderr.splitlines() if line.startswith("prefillscope:")]
    name = "Ctrl-C" if sig == signal.SIGINT else "SIGTERM"
    assert said[0].startswith("prefillscope: sweep: 2 points")  # the estimate, before
    assert said[1:] == [
        f"prefillscope: sweep stopped ({name}) at its point 1 of 2; what it measured is in {out}"
    ]
    document = read_json(out, "sweep.json")
    assert [p["status"] for p in document["points"]] == ["interrupted"]
    assert document["knee"] is None and document["saturated_at"] is None  # not on a stop
    assert document["stopped_early"] and (out / "sweep.html").is_file()
    run = read_json(out / "concurrency-2", "run.json")
    assert run["reason"] == f"cancelled ({name})"
