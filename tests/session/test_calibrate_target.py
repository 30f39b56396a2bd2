"""``simulate --calibrate`` fits the engine the run was measured on: its GPU, model and
chunk budget from ``run.json`` (or the GPU sampler), refused when the run does not say
and ``--engine`` does not either."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from bench_support import bench

from perfmodel.config import EngineConfig
from runfmt.codec import decode
from runfmt.run import open_run
from runfmt.simresult import SimulateResult
from session.calibrate_target import gpu_preset, target_config
from workloads.errors import InputError

CLI = [sys.executable, "-c", "from prefillscope.cli import main; main()", "simulate"]
#: Not the defaults (h100-sxm, 2048): a fit on the defaults would be visible.
RECORDED = ("gpu=a100-80gb", "max_num_batched_tokens=12288")


@pytest.fixture(scope="module")
def a100_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("target") / "run"
    bench(
        "few-shot", out, engine=RECORDED,
        overrides={"num_requests": 12, "rate": 8.0, "seed": 4},
    )  # fmt: skip
    return out


def _as_real_server(run: Path, tmp_path: Path) -> Path:
    """The same run as a real server's would record it: no engine settings in run.json."""
    copy = Path(shutil.copytree(run, tmp_path / "real"))
    info = json.loads((copy / "run.json").read_text())
    del info["target"]["engine"]
    info["target"]["flavour"] = "vllm"
    (copy / "run.json").write_text(json.dumps(info))
    return copy


def test_the_run_records_its_gpu_and_budget_and_the_fit_uses_them(a100_run: Path) -> None:
    target = target_config(open_run(a100_run), EngineConfig(), ())
    assert target.config.gpu == "a100-80gb" and target.config.max_num_batched_tokens == 12288
    assert target.sources["gpu"] == target.sources["max_num_batched_tokens"] == "run.json"
    done = subprocess.run(
        [*CLI, "--calibrate", str(a100_run), "--no-break-even", "--json"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    result = decode(SimulateResult, json.loads(done.stdout))
    cal = result.calibration
    assert cal is not None
    assert cal.config["gpu"] == "a100-80gb" and cal.config["max_num_batched_tokens"] == 12288
    assert "gpu a100-80gb (run.json)" in cal.target
    # the grid replays the run's own budget on its own device
    assert result.gpu == "a100-80gb" and result.configurations[0].chunk == 12288


def test_what_the_user_gives_wins_and_says_so(a100_run: Path) -> None:
    user = EngineConfig(gpu="h200")
    target = target_config(open_run(a100_run), user, {"gpu"})
    assert target.config.gpu == "h200" and target.sources["gpu"] == "--engine"
    assert target.config.max_num_batched_tokens == 12288  # the rest still from the run


def test_a_real_servers_run_without_gpu_or_budget_is_refused_in_one_line(
    a100_run: Path, tmp_path: Path
) -> None:
    real = _as_real_server(a100_run, tmp_path)
    with pytest.raises(InputError) as refused:
        target_config(open_run(real), EngineConfig(), ())
    assert "gpu, max_num_batched_tokens" in refused.value.problem  # the model is a preset
    done = subprocess.run([*CLI, "--calibrate", str(real)], capture_output=True, text=True)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("prefillscope: error: --engine: ")
    assert "--engine gpu=… --engine max_num_batched_tokens=…" in done.stderr
    assert "Traceback" not in done.stderr
    given = target_config(
        open_run(real),
        EngineConfig(gpu="a100-80gb", max_num_batched_tokens=12288),
        {"gpu", "max_num_batched_tokens"},
    )
    assert given.sources == {
        "model": "run.json", "vocab_size": "run.json", "block_size": "run.json",
        "num_gpu_blocks": "run.json", "gpu": "--engine", "max_num_batched_tokens": "--engine",
    }  # fmt: skip


def test_a_holdout_run_must_say_its_own_budget(a100_run: Path, tmp_path: Path) -> None:
    """--engine's budget is the calibrated run's: the held-out run's is its own."""
    real = _as_real_server(a100_run, tmp_path)
    done = subprocess.run(
        [*CLI, "--calibrate", str(a100_run), "--holdout", str(real),
         "--engine", "max_num_batched_tokens=12288", "--engine", "gpu=a100-80gb"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "--holdout-engine max_num_batched_tokens=…" in done.stderr


@pytest.mark.parametrize(
    ("name", "preset"),
    [
        ("NVIDIA A100-SXM4-80GB", "a100-80gb"),
        ("NVIDIA H100 80GB HBM3", "h100-sxm"),
        ("NVIDIA L40S", "l40s"),
        ("NVIDIA A100-SXM4-40GB", None),  # no 40 GB preset: not guessed as the 80 GB one
        ("Tesla T4", None),
    ],
)
def test_a_sampled_gpu_name_maps_to_its_preset_or_to_nothing(name: str, preset: str) -> None:
    assert gpu_preset(name) == preset
