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
from session.calibrate import TOLERANCE, calibrate

CLI = [sys.executable, "-c", "from prefillscope.cli import main; main()", "simulate"]
PLANTED_S = 0.010


@pytest.fixture(scope="module")
def planted_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A bench run of an engine with 10 ms of host overhead planted in every step."""
    out = tmp_path_factory.mktemp("cal") / "run"
    bench(
        "few-shot", out, engine=(f"host_overhead_step_s={PLANTED_S}",),
        overrides={"num_requests": 16, "rate": 8.0, "seed": 4},
    )  # fmt: skip
    return out


def test_the_fit_recovers_the_planted_overhead_and_replays_the_run(planted_run: Path) -> None:
    result = calibrate(planted_run, EngineConfig())
    assert result["prompts"] == "rebuilt from the run's plan for 16 of 16"  # not fresh tokens
    assert set(result["fitted"]) == {"host_overhead_step_s", "prefill_mfu"}
    # fitted to the server's own decode steps, which the client's gaps would overstate
    assert result["decode_source"].startswith("prefillscope_engine_step_seconds")
    assert result["fit_targets"] == ["ttft_mean", "decode_step_mean"]
    assert result["fitted"]["host_overhead_step_s"] == pytest.approx(PLANTED_S, rel=0.1)
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
    fitted = result["calibration"]["fitted"]["host_overhead_step_s"]
    (row,) = result["configurations"]
    # the grid ran on the fitted engine: its ITL floor includes the fitted overhead
    assert row["itl_s"]["p50"] >= fitted
    assert row["completed"] == result["calibration"]["requests"]


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
