"""``simulate --calibrate``: fit the cost model to a real run of the embedded engine."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from bench_support import bench

from perfmodel.config import EngineConfig
from perfmodel.costmodel import CostModel
from session.calibrate import TOLERANCE, calibrate

CLI = [sys.executable, "-c", "from prefillscope.cli import main; main()", "simulate"]
#: A slower device than the preset: the decode steps reach half its bandwidth.
PLANTED_EFFICIENCY = 0.4
PLANTED = (f"bandwidth_efficiency={PLANTED_EFFICIENCY}",)


@pytest.fixture(scope="module")
def planted_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A bench run (wall clock) of an engine whose decode reaches 40 % of the roofline."""
    out = tmp_path_factory.mktemp("cal") / "run"
    bench(
        "few-shot", out, engine=PLANTED,
        overrides={"num_requests": 16, "rate": 8.0, "seed": 4},
    )  # fmt: skip
    return out


def test_the_fit_recovers_the_planted_efficiency_and_replays_the_run(planted_run: Path) -> None:
    result = calibrate(planted_run, EngineConfig())
    assert result["prompts"] == "rebuilt from the run's plan for 16 of 16"  # not fresh tokens
    assert set(result["fitted"]) == {
        "bandwidth_efficiency", "host_overhead_per_seq_s", "prefill_mfu"
    }  # fmt: skip
    # held to the server's own mean decode step (its histogram), beside the client's gaps
    assert result["decode_fit"]["anchored"] is True
    assert "prefillscope_engine_step_seconds" in result["decode_source"]
    # a wall-clock run on a shared machine: the exact recovery is test_calibrate_decode's
    assert result["fitted"]["bandwidth_efficiency"] == pytest.approx(PLANTED_EFFICIENCY, rel=0.2)
    for key in result["fit_targets"]:
        assert abs(result["relative_error"][key]) <= TOLERANCE, (key, result)
    assert result["predicted"]["itl_p99"] > 0 and result["measured"]["itl_p99"] > 0


def test_the_command_prints_the_fit_and_uses_it(planted_run: Path) -> None:
    done = subprocess.run(
        [*CLI, "--calibrate", str(planted_run), "--json"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    fitted = result["calibration"]["fitted"]["bandwidth_efficiency"]
    (row,) = result["configurations"]
    # the grid ran on the fitted engine: its ITL floor is the weights at the fitted bandwidth
    cost = CostModel.from_config(EngineConfig())
    weights_s = cost.weight_bytes_per_gpu / cost.gpu.bandwidth
    assert row["itl_s"]["p50"] >= weights_s / fitted
    assert row["completed"] == result["calibration"]["requests"]


def test_a_holdout_run_is_predicted_with_the_error_per_metric(
    planted_run: Path, tmp_path: Path
) -> None:
    other = tmp_path / "b"  # another chunk budget, the same planted device
    bench(
        "few-shot", other, engine=(*PLANTED, "max_num_batched_tokens=256"),
        overrides={"num_requests": 16, "rate": 8.0, "seed": 5},
    )  # fmt: skip
    done = subprocess.run(
        [*CLI, "--calibrate", str(planted_run), "--holdout", str(other),
         "--holdout-engine", "max_num_batched_tokens=256", "--no-break-even", "--json"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    check = json.loads(done.stdout)["calibration"]["holdout"]
    assert check["max_num_batched_tokens"] == 256 and check["requests"] == 16
    for key in ("ttft_p50", "itl_p50", "itl_p99"):
        error = check["relative_error"][key]
        assert check["within_goal"][key] == (abs(error) <= check["goal"])
    # the decode the fit found predicts the other run's median gap
    assert abs(check["relative_error"]["itl_p50"]) <= 0.10, check


def test_a_holdout_needs_a_calibration(tmp_path: Path) -> None:
    done = subprocess.run(
        [*CLI, "--workload", "chat", "--holdout", str(tmp_path)], capture_output=True, text=True
    )
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "--holdout" in done.stderr


def test_a_missing_run_is_one_line(tmp_path: Path) -> None:
    done = subprocess.run(
        [*CLI, "--calibrate", str(tmp_path / "nope")], capture_output=True, text=True
    )
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "--calibrate" in done.stderr


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"family": "warp-drive"}, "unknown workload family 'warp-drive'"),
        ({"prompt_format": "text"}, "text prompts were rendered by the server's tokenizer"),
    ],
)
def test_a_run_whose_plan_cannot_be_rebuilt_is_one_line_naming_why(
    planted_run: Path, tmp_path: Path, change: dict, why: str
) -> None:
    """Not a replay of other prompts: a fit to them would be a fit to another workload."""
    run = Path(shutil.copytree(planted_run, tmp_path / "run"))
    info = json.loads((run / "run.json").read_text())
    info["workload"] |= change
    (run / "run.json").write_text(json.dumps(info))
    done = subprocess.run([*CLI, "--calibrate", str(run)], capture_output=True, text=True)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("prefillscope: error: --calibrate: ") and why in done.stderr
    assert "cannot be rebuilt" in done.stderr and "Traceback" not in done.stderr
