"""One version rule for every reader (``runfmt.version.document_version``): each command
that reads a run's ``run.json``, ``summary.json`` or ``diagnosis.json``, or a sweep's
``sweep.json``, refuses a newer ``format_version`` in one line naming the file, exit
status 2; the kept version-1 run still reads."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
from repo_paths import FIXTURES

from prefillscope.cli import main
from runfmt.names import DIAGNOSIS_JSON, RUN_JSON, SUMMARY_JSON, SWEEP_JSON
from runfmt.run import open_run
from runfmt.rundir import RunDir
from runfmt.sweep import SweepResult, read_sweep, sweep_point, write_sweep
from workloads.errors import InputError

NEWER = 999
#: Each command that reads a run, its arguments (RUN: the run directory).
COMMANDS = {
    "diagnose": ("diagnose", "RUN"),
    "compare": ("compare", "RUN", "RUN"),
    "report": ("report", "RUN"),
    "export": ("export", "RUN"),
    "simulate --calibrate": ("simulate", "--calibrate", "RUN"),
}


def cli(monkeypatch, capsys, *args: str | Path) -> tuple[int, str]:
    """The real entry point in-process: exit status and stderr."""
    monkeypatch.setattr(sys, "argv", ["prefillscope", *map(str, args)])
    with pytest.raises(SystemExit) as exit_info:
        main()
    return int(exit_info.value.code or 0), capsys.readouterr().err


def _copy(version: str, dest: Path) -> Path:
    return Path(shutil.copytree(FIXTURES / f"golden_{version}" / "run", dest))


def _newer(path: Path) -> None:
    path.write_text(json.dumps(json.loads(path.read_text()) | {"format_version": NEWER}))


def _refused(code: int, err: str, path: Path) -> None:
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, err
    assert f"{path}: has format_version {NEWER}" in lines[0] and "Traceback" not in err


@pytest.mark.parametrize("name", [RUN_JSON, SUMMARY_JSON, DIAGNOSIS_JSON])
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_reader_refuses_a_newer_run_document_in_one_line(
    monkeypatch, capsys, tmp_path: Path, command: str, name: str
) -> None:
    run = _copy("v2", tmp_path / "run")
    _newer(run / name)
    args = [run if a == "RUN" else a for a in COMMANDS[command]]
    _refused(*cli(monkeypatch, capsys, *args), run / name)


def _sweep(folder: Path) -> Path:
    run = _copy("v2", folder / "rate-8")
    point = sweep_point(8.0, run.name, "complete", {"achieved_rps": 7.5})
    write_sweep(folder, SweepResult(axis="rate", points=(point,), figure="achieved_rps", knee=8.0))
    return folder


def test_sweep_compare_refuses_a_newer_sweep_json_in_one_line(
    monkeypatch, capsys, tmp_path: Path
) -> None:
    base, new = _sweep(tmp_path / "a"), _sweep(tmp_path / "b")
    _newer(new / SWEEP_JSON)
    _refused(*cli(monkeypatch, capsys, "compare", base, new, "--json"), new / SWEEP_JSON)


def test_sweep_json_carries_its_version_and_a_version_1_one_reads(tmp_path: Path) -> None:
    folder = _sweep(tmp_path / "s")
    doc = RunDir(folder).read_json(SWEEP_JSON)
    assert doc["format_version"] == 2 and doc["points"][0]["achieved_rps"] == 7.5
    del doc["format_version"]  # what a sweep wrote before the key existed
    RunDir(folder).write_json(SWEEP_JSON, doc)
    read = read_sweep(folder)
    assert read is not None and read.completed[8.0].figure("achieved_rps") == 7.5
    assert read.knee == 8.0 and read.axis == "rate"


def test_the_version_1_run_reads_in_every_document(tmp_path: Path) -> None:
    run = open_run(_copy("v1", tmp_path / "run"))
    assert run.info is not None and run.summary is not None and run.diagnosis is not None
    assert run.summary.format_version == 1 and "format_version" not in run.summary.as_read()
    assert run.spec is not None and run.spec.preset == "system-prompt"


def test_a_run_that_is_not_one_is_one_error_naming_the_argument(tmp_path: Path) -> None:
    with pytest.raises(InputError) as caught:
        open_run(tmp_path / "nowhere", "BASE_RUN")
    assert caught.value.field == "BASE_RUN" and "no run directory" in caught.value.problem
    with pytest.raises(InputError, match=r"no run\.json, no requests table"):
        open_run(tmp_path)
