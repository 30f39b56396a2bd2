"""The flags ``bench`` and ``diagnose ab`` share: one definition (``BenchFlags``), both commands."""

from __future__ import annotations

import inspect
from dataclasses import fields
from pathlib import Path
from typing import Annotated

import pytest
import typer
from ab_support import diagnose_ab
from typer.testing import CliRunner

from prefillscope.app import app
from prefillscope.bench_flags import BenchFlags, takes_bench_flags
from prefillscope.commands.bench import bench
from workloads.errors import InputError

SHARED = [f.name for f in fields(BenchFlags)]


def option_names(command: list[str]) -> set[str]:
    """The ``--flags`` a command's help lists."""
    result = CliRunner().invoke(app, [*command, "--help"], terminal_width=200)
    assert result.exit_code == 0, result.output
    words = result.output.replace(",", " ").split()  # an alias is listed "--a,--b"
    return {word for word in words if word.startswith("--")}


def test_the_wrapped_command_has_the_shared_options_then_its_own():
    params = list(inspect.signature(bench).parameters)
    assert params[: len(SHARED)] == SHARED
    assert params[len(SHARED) :] == [
        "endpoint",
        "out",
        "dry_run_",
        "as_json",
        "max_error_rate",
        "min_goodput",
        # vllm bench serve's result, profiler and ready-check flags (prefillscope.vllm_result)
        "save_result",
        "save_detailed",
        "append_result",
        "result_dir",
        "result_filename",
        "result_label",
        "metadata",
        "profile",
        "ready_check_timeout_sec",
        "no_diagnosis",  # bench's closing diagnosis (prefillscope.bench_ending)
    ]


@pytest.mark.parametrize("command", [["bench"], ["diagnose", "ab"]])
def test_bench_and_the_ab_list_every_shared_flag(command):
    listed = option_names(command)
    for name in SHARED:
        flag = "--set" if name == "set_" else "--" + name.replace("_", "-")
        assert flag in listed, (command, flag)


def test_the_command_gets_the_shared_flags_as_one_object():
    seen: dict[str, object] = {}

    @takes_bench_flags
    def probe(flags: BenchFlags, extra: Annotated[int, typer.Option()] = 1) -> None:
        seen["flags"], seen["extra"] = flags, extra

    test_app = typer.Typer()
    test_app.command()(probe)
    test_app.command("other")(lambda: None)
    args = ["probe", "--workload", "interference", "--rate", "3", "--set", "long_prompts=2"]
    result = CliRunner().invoke(test_app, [*args, "--extra", "5", "--engine", "gpu=l40s"])
    assert result.exit_code == 0, result.output
    flags = seen["flags"]
    assert isinstance(flags, BenchFlags) and seen["extra"] == 5
    assert flags.workload == "interference" and flags.engine == ["gpu=l40s"]
    assert flags.overrides() == {"long_prompts": "2", "rate": 3.0}


def test_a_command_may_not_redefine_a_shared_flag():
    def clash(flags: BenchFlags, rate: float = 1.0) -> None: ...

    with pytest.raises(TypeError, match="rate"):
        takes_bench_flags(clash)


def test_options_are_validated_and_carry_every_flag(tmp_path: Path):
    flags = BenchFlags(
        workload="interference",
        rate=2.0,
        seed=7,
        slo="itl=50ms",
        engine=["max_num_batched_tokens=4096"],
        gpu_telemetry="off",
        cache_protocol="reset",
        metrics_interval=0.1,
    )
    options = flags.options(endpoint=None, out=tmp_path, command=["prefillscope"])
    assert options.overrides == {"rate": 2.0, "seed": 7}
    assert options.engine is not None and options.engine.config.max_num_batched_tokens == 4096
    assert options.slo is not None and options.slo.itl_s == pytest.approx(0.05)
    assert (options.gpu, options.cache_protocol) == ("off", "reset")
    assert options.metrics_interval_s == 0.1
    with pytest.raises(InputError, match="--engine"):
        flags.options(endpoint="http://127.0.0.1:1", out=None, command=[])
    with pytest.raises(InputError, match="--gpu-telemetry"):
        BenchFlags(workload="interference", gpu_telemetry="nvml").options(
            endpoint=None, out=None, command=[]
        )


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--chunks", "512"], "--chunks: '512': give two or more positive sizes"),
        (["--chunks", "512,2048", "--trials", "2"], "--trials: 2 is too few"),
        (["--chunks", "512,2048", "--cache-protocol", "warm"], "--cache-protocol: warm leaves"),
        (
            ["--chunks", "512,2048", "--engine", "max_num_batched_tokens=1024"],
            "--engine: max_num_batched_tokens is what --chunks sets",
        ),
        (["--chunks", "512,2048", "--reference", "1024"], "--reference: 1024 is not one of"),
        (["--chunks", "128,2048"], "--chunks: 128: max_num_batched_tokens 128 is below"),
        (["--chunks", "512,2048", "--tolerance", "rate"], "--tolerance: 'rate' is not KEY=VALUE"),
        (["--chunks", "512,2048", "--launch", "serve --port {port}"], "the command has no {chunk}"),
    ],
)
def test_bad_ab_flags_are_one_line_before_anything_runs(extra, message, tmp_path: Path):
    code, out, err = diagnose_ab("--workload", "interference", *extra, "--out", tmp_path / "ab")
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert err.startswith("prefillscope: error: ") and message in err
    assert not (tmp_path / "ab").exists()
