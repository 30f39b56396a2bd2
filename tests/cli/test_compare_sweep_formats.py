"""``compare SWEEP_A SWEEP_B`` in every ``--format`` and into ``$GITHUB_STEP_SUMMARY``, as
``compare RUN_A RUN_B`` does: it printed the rich tables whatever the format, and wrote
no step summary. Two sweeps of two loads, the second load's ITL planted 30 % slower."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest
from rundirs import synth_run

from prefillscope.cli import main
from runfmt.rundir import RunDir
from session.sweep import SWEEP_JSON, point_name

GATE = ("--gate", "itl_p99:+10%")


def _sweep(folder: Path, seeds: dict[float, int], knee: float, **slower: float) -> Path:
    """A sweep folder over ``rate`` with one synthetic run per load (``slower``: the
    shape of the run at load 2)."""
    points = []
    for value, seed in seeds.items():
        name = point_name("rate", value)
        synth_run(folder / name, seed=seed, **(slower if value == 2 else {}))
        points.append({"value": value, "run_dir": name, "status": "complete"})
    RunDir(folder).write_json(SWEEP_JSON, {"axis": "rate", "knee": knee, "points": points})
    return folder


@pytest.fixture(scope="module")
def sweeps(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("sweeps")
    base = _sweep(root / "base", {1: 1, 2: 2}, knee=2)
    new = _sweep(root / "new", {1: 3, 2: 4}, knee=1, itl_s=0.013)
    return base, new


def _compare(monkeypatch, capsys, *args: str | Path, summary: Path | None = None):
    argv = ["prefillscope", "compare", "--resamples", "1000", *map(str, args)]
    monkeypatch.setattr(sys, "argv", argv)
    if summary is None:
        monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    else:
        monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    with pytest.raises(SystemExit) as exit_info:
        main()
    out, err = capsys.readouterr()
    return int(exit_info.value.code or 0), out, err


def test_markdown_is_a_section_per_load_under_the_sweeps_verdict(monkeypatch, capsys, sweeps):
    code, out, err = _compare(monkeypatch, capsys, *sweeps, *GATE, "--format", "markdown")
    assert (code, err) == (1, "")
    lines = out.splitlines()
    assert lines[0] == "## prefillscope compare — sweeps over rate: FAIL at rate-2 compared loads"
    assert lines[2] == "knee: base 2 req/s, new 1 req/s."
    headings = [line for line in lines if line.startswith("### ")]
    assert headings[0] == "### rate-1: prefillscope compare — PASS: 1 gate(s) held"
    assert headings[1].startswith("### rate-2: prefillscope compare — FAIL: regression beyond")
    assert len(headings) == 2 and "━" not in out and "— rate-1" not in out  # no rich table
    assert out.count("| metric | base | new | change | 95% CI, % | p | sig. | gate |") == 2


def test_junit_is_a_suite_per_load_with_its_failures(monkeypatch, capsys, sweeps):
    code, out, _ = _compare(monkeypatch, capsys, *sweeps, *GATE, "--format", "junit")
    assert code == 1
    suites = {s.get("name"): s for s in ET.fromstring(out).iter("testsuite")}
    assert set(suites) == {"prefillscope compare rate-1", "prefillscope compare rate-2"}
    assert [suites[f"prefillscope compare rate-{n}"].get("failures") for n in (1, 2)] == ["0", "1"]
    failed = suites["prefillscope compare rate-2"].find("testcase[@name='itl_p99']/failure")
    assert failed is not None and "gate fail" in failed.get("message", "")


def test_json_keeps_its_shape_and_the_step_summary_gets_the_markdown(
    monkeypatch, capsys, sweeps, tmp_path
):
    _, markdown, _ = _compare(monkeypatch, capsys, *sweeps, *GATE, "--format", "markdown")
    summary = tmp_path / "step_summary.md"
    summary.write_text("earlier step\n")
    code, out, _ = _compare(monkeypatch, capsys, *sweeps, *GATE, "--json", summary=summary)
    assert code == 1
    doc = json.loads(out)
    assert doc["sweep"] == {"axis": "rate", "base": 2, "new": 1}
    assert [doc["points"][p]["passed"] for p in ("rate-1", "rate-2")] == [True, False]
    assert summary.read_text() == "earlier step\n" + markdown + "\n"
    code, _, _ = _compare(monkeypatch, capsys, *sweeps, *GATE, "--format", "junit",
                          summary=summary)  # fmt: skip
    assert code == 1 and summary.read_text().count(markdown) == 2  # whatever the format
