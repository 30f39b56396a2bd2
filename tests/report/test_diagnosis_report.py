"""The report shows the diagnosis' primary finding where it shows the decision.

``prefillscope diagnose RUN`` writes ``diagnosis.json`` (with ``primary``), and
``prefillscope report RUN`` — terminal and HTML — opens its decision with it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from run_shapes import RunShape
from rundirs import report_run

CLI = str(Path(sys.executable).with_name("prefillscope"))


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([CLI, *args], capture_output=True, text=True, timeout=300)


def test_the_report_opens_its_decision_with_the_primary_finding(tmp_path: Path) -> None:
    run = report_run(tmp_path / "run", RunShape(diagnosis=False))
    diagnosed = _run("diagnose", str(run), "--json")
    assert diagnosed.returncode == 0, diagnosed.stderr[-2000:]
    primary = json.loads(diagnosed.stdout)["primary"]
    assert primary["confidence"] in {"strong", "moderate", "weak"}
    line = f"Primary finding: {primary['finding']} ({primary['confidence']} confidence)"
    page = tmp_path / "r.html"
    html = _run("report", str(run), "--html", str(page))
    assert html.returncode == 0, html.stderr[-2000:]
    assert line in page.read_text()
    terminal = _run("report", str(run))
    assert terminal.returncode == 0 and line in " ".join(terminal.stdout.split())
