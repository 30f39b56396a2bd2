"""``prefillscope report`` as a user runs it: the console script, files, exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from run_shapes import RunShape
from rundirs import report_run

CLI = Path(sys.executable).with_name("prefillscope")


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(CLI), "report", *args], capture_output=True, text=True, timeout=120)


def test_json_and_html_from_one_call(tmp_path: Path) -> None:
    run = report_run(tmp_path / "run", RunShape(pool="vllm"))
    out = tmp_path / "report.html"
    done = _cli(str(run), "--html", str(out), "--json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["status"] == "complete" and doc["html"] == str(out)
    assert doc["long_prompt_arrivals"] == 6
    kinds = {row["kind"]: row for row in doc["itl_by_kind"]}
    assert kinds["decode"]["max_s"] > 10 * kinds["decode"]["p50_s"]  # the stalls show
    buckets = doc["pool"]["buckets"]
    assert buckets["active"]["provenance"] == "derived"
    assert "free" not in buckets and "reclaimable" not in buckets  # unknown, not invented
    assert doc["diagnosis"]["hypotheses"][0]["status"] == "supported"
    page = out.read_text()
    assert page.startswith("<!DOCTYPE html>") and 'id="kv-pool"' in page


def test_terminal_view_is_the_default_and_runs_the_diagnosis_first(tmp_path: Path) -> None:
    """Issue 41: the report leads with the answer, running the diagnosis when none is
    saved (and saving it), before the summary's tables."""
    run = report_run(tmp_path / "run", RunShape(diagnosis=False))
    done = _cli(str(run))
    assert done.returncode == 0, done.stderr
    assert "ITL by request kind" in done.stdout
    assert (run / "diagnosis.json").is_file()
    text = done.stdout
    assert text.index("the answer") < text.index("Decision:") < text.index("Summary")
    assert "the diagnosis was run for this report and saved as diagnosis.json" in text


def test_bad_paths_are_one_line_errors(tmp_path: Path) -> None:
    missing = _cli(str(tmp_path / "nope"))
    assert missing.returncode == 2
    assert missing.stderr.count("\n") == 1 and "RUN_DIR" in missing.stderr
    run = report_run(tmp_path / "run")
    unwritable = _cli(str(run), "--html", str(tmp_path / "no" / "such" / "dir" / "r.html"))
    assert unwritable.returncode == 2
    assert unwritable.stderr.count("\n") == 1 and "--html" in unwritable.stderr
    assert "Traceback" not in missing.stderr + unwritable.stderr
