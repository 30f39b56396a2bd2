"""What ``diagnose``, ``report`` and ``compare`` print for two kept runs, byte for byte.

``tests/fixtures/golden_v1/run`` was written before the run format had a version (format 1)
and ``golden_v2/run`` by a format-2 ``bench`` (both ``bench --workload system-prompt
--num-requests 24 --rate 8 --gpu off``, the large journals that have a parquet twin left
out). Their outputs are kept in ``tests/fixtures/golden_outputs``: each command runs in a
temporary folder holding the copies as ``RUN`` (``OLD`` and ``NEW`` for ``compare``) and is
given those relative names, so the outputs hold them as they are, and a table's padding
does not depend on how long the temporary folder's path is. A change to how runs are
read, summarised, diagnosed or rendered shows here as a diff; when the change is meant,
regenerate the files and review the diff in the commit::

    PREFILLSCOPE_REGENERATE_GOLDEN=1 .venv/bin/python -m pytest tests/cli/test_golden_outputs.py

The commands run on a copy of each run with its ``diagnosis.json`` removed, so that the
diagnosis in every output is derived anew from the tables (``report`` after a ``diagnose``
that writes it again).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from repo_paths import FIXTURES

CLI = Path(sys.executable).with_name("prefillscope")
EXPECTED = FIXTURES / "golden_outputs"
REGENERATE = os.environ.get("PREFILLSCOPE_REGENERATE_GOLDEN") == "1"
#: A fixed width, so that the terminal tables wrap the same way everywhere.
ENV = {**os.environ, "COLUMNS": "100", "NO_COLOR": "1", "TERM": "dumb"}

#: output file -> the command's arguments after ``prefillscope`` (RUN, OLD, NEW: run dirs).
COMMANDS = {
    "diagnose.json": ["diagnose", "RUN", "--json"],
    "report.json": ["report", "RUN", "--json"],
    "report.txt": ["report", "RUN"],
}
COMPARE = ["compare", "OLD", "NEW", "--json"]


def _copy_run(version: str, dest: Path) -> Path:
    run = Path(shutil.copytree(FIXTURES / f"golden_{version}" / "run", dest))
    (run / "diagnosis.json").unlink()
    return run


def _output(args: list[str], folder: Path) -> str:
    """The command's output, run in ``folder`` (where the runs' copies are)."""
    done = subprocess.run(
        [CLI, *args], capture_output=True, text=True, env=ENV, timeout=120, cwd=folder
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def _check(text: str, expected: Path) -> None:
    if REGENERATE:
        expected.parent.mkdir(parents=True, exist_ok=True)
        expected.write_text(text)
    assert expected.exists(), f"{expected} is missing: regenerate (see this module's docstring)"
    assert text == expected.read_text(), f"{expected.name} differs from {expected}"


@pytest.mark.parametrize("version", ["v1", "v2"])
@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_a_kept_run_reads_to_the_kept_output(version: str, name: str, tmp_path: Path) -> None:
    _copy_run(version, tmp_path / "RUN")
    if name.startswith("report"):
        _output(["diagnose", "RUN"], tmp_path)
    _check(_output(COMMANDS[name], tmp_path), EXPECTED / version / name)


def test_the_two_format_versions_compare_to_the_kept_output(tmp_path: Path) -> None:
    _copy_run("v1", tmp_path / "OLD")
    _copy_run("v2", tmp_path / "NEW")
    _check(_output(COMPARE, tmp_path), EXPECTED / "compare-v1-v2.json")


def test_the_kept_outputs_name_no_test_folder() -> None:
    """The outputs are free of the tests' own paths, so they compare equal wherever the
    tests run (the bench command a run recorded keeps its own ``--out``)."""
    for path in EXPECTED.rglob("*"):
        if path.is_file():
            assert "pytest-" not in path.read_text(), path
