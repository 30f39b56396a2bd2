"""``prefillscope diagnose``: the run form, room for sub-commands, files, errors."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import typer
from run_shapes import steady_streams
from rundirs import write_run
from typer.testing import CliRunner

from prefillscope.cli import main
from prefillscope.diagnose_group import DiagnoseGroup


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    records, chunks = steady_streams(4, 120, 0.02)
    info = {"target": {"flavour": "vllm", "model": "some/model"}}
    return write_run(tmp_path_factory.mktemp("cli") / "run", records, chunks, info)


def cli(monkeypatch, capsys, *args: str | Path) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "argv", ["prefillscope", *map(str, args)])
    with pytest.raises(SystemExit) as exit_info:
        main()
    out, err = capsys.readouterr()
    return int(exit_info.value.code or 0), out, err


@pytest.mark.parametrize(
    "form",
    [
        ("diagnose", "{run}", "--json"),
        ("diagnose", "--json", "{run}"),
        ("diagnose", "run", "{run}", "--json"),
    ],
)
def test_the_run_form_with_or_without_the_subcommand_name(monkeypatch, capsys, run_dir, form):
    args = [a.format(run=run_dir) for a in form]
    code, out, err = cli(monkeypatch, capsys, *args, "--model", "llama-3.1-8b", "--gpu", "h100-sxm")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["run"] == str(run_dir)
    assert json.loads((run_dir / "diagnosis.json").read_text()) == doc
    h2 = next(h for h in doc["hypotheses"] if h["id"] == "H2")
    assert h2["status"] == "supported"  # 20 ms gaps where an H100 explains 7 ms


def test_the_table(monkeypatch, capsys, run_dir):
    code, out, _ = cli(monkeypatch, capsys, "diagnose", run_dir, "--slo", "itl=1ms")
    assert code == 0
    assert "Diagnosis of" in out and "Prefill chunks starving decodes" in out
    assert "HARD FAILURE" in out and "ITL p99 0.02 s breaches the SLO itl<=0.001 s" in out
    assert "inconclusive" in out  # H2/H3 without --model/--gpu


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (("diagnose", "/no/such/run"), "RUN_DIR"),
        (("diagnose", "{run}", "--gpu", "tpu9"), "--gpu"),
        (("diagnose", "{run}", "--slo", "itl=fast"), "--slo"),
        (("diagnose", "{run}", "--max-num-batched-tokens", "0"), "--max-num-batched-tokens"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(monkeypatch, capsys, run_dir, args, field):
    code, out, err = cli(monkeypatch, capsys, *[a.format(run=run_dir) for a in args])
    assert code == 2 and not out
    assert err.startswith(f"prefillscope: error: {field}") and err.count("\n") == 1


def test_a_sibling_subcommand_is_not_mistaken_for_a_run_directory():
    group = typer.Typer(cls=DiagnoseGroup, no_args_is_help=True)
    seen: list[str] = []

    @group.command("run", hidden=True)
    def run(run_dir: str) -> None:
        seen.append(f"run {run_dir}")

    @group.command("ab")
    def ab(chunks: str = typer.Option(...)) -> None:
        seen.append(f"ab {chunks}")

    runner = CliRunner()
    assert runner.invoke(group, ["ab", "--chunks", "512,2048"]).exit_code == 0
    assert runner.invoke(group, ["runs/x"]).exit_code == 0
    assert runner.invoke(group, ["./ab"]).exit_code == 0
    assert seen == ["ab 512,2048", "run runs/x", "run ./ab"]
    helped = runner.invoke(group, ["--help"])
    assert helped.exit_code == 0 and "ab" in helped.output
