"""The run format (``runfmt``) against a run directory written before it existed.

``tests/fixtures/golden_v1`` holds a bench run (``bench --workload system-prompt
--num-requests 24 --rate 8 --gpu off``, then ``diagnose``) and the ``ab.json`` of a small
``diagnose ab``, both written by the version before ``format_version`` existed: version 1.
The big journals that have a parquet twin were left out to keep the fixture small.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from repo_paths import FIXTURES

from probes.latency import summarize
from probes.timeline import run_mapping
from runfmt.abresult import AB_FORMAT_VERSION, ABResult
from runfmt.codec import ABSENT, frozen_map
from runfmt.names import AB_JSON, RUN_JSON, SUMMARY_JSON
from runfmt.run_sections import PlanSection, TargetSection
from runfmt.rundir import RunDir
from runfmt.runinfo import RUN_FORMAT_VERSION, RunInfo, read_run_info, started_clock
from runfmt.summary import SUMMARY_FORMAT_VERSION, Summary
from runfmt.tables import RunTables
from workloads.errors import InputError

CLI = Path(sys.executable).with_name("prefillscope")
GOLDEN = FIXTURES / "golden_v1"


@pytest.fixture
def golden_run(tmp_path: Path) -> Path:
    return Path(shutil.copytree(GOLDEN / "run", tmp_path / "run"))


def test_a_version_1_run_json_reads_and_writes_back_the_same_with_its_version() -> None:
    doc = json.loads((GOLDEN / "run" / RUN_JSON).read_text())
    assert "format_version" not in doc
    info = RunInfo.from_json(doc)
    assert info.status == "complete" and info.workload.workload == "system-prompt"
    assert info.probes.server_metrics is not None
    assert info.probes.server_metrics.flavour == "embedded"
    assert info.to_json() == {**doc, "format_version": RUN_FORMAT_VERSION}


def test_a_written_run_json_reads_back_equal() -> None:
    info = RunInfo(
        command=("prefillscope", "bench"),
        clock=started_clock(1_700_000_000.25),
        target=TargetSection(url="http://127.0.0.1:1"),
        workload=frozen_map({"workload": "chat", "seed": 7}),
        seed_written=7,
        plan=PlanSection(requests=3),
    )
    for state in (info, info.finished("interrupted", "SIGINT", 1_700_000_012.5)):
        doc = json.loads(json.dumps(state.to_json()))
        assert doc["format_version"] == RUN_FORMAT_VERSION and doc["seed"] == 7
        assert RunInfo.from_json(doc).to_json() == state.to_json()
        assert RunInfo.from_json(doc).target.url == state.target.url
    assert info.finished("complete", None, 1_700_000_012.5).to_json()["duration_s"] == 12.25


def test_a_newer_format_is_refused_naming_the_file(tmp_path: Path) -> None:
    run = RunDir(tmp_path, create=True)
    run.write_json(RUN_JSON, {"format_version": RUN_FORMAT_VERSION + 1, "status": "complete"})
    with pytest.raises(InputError) as caught:
        read_run_info(run)
    assert caught.value.field.endswith(RUN_JSON)
    assert f"format_version {RUN_FORMAT_VERSION + 1}" in caught.value.problem


def test_the_golden_tables_read_to_the_summary_it_was_written_with(golden_run: Path) -> None:
    run = RunDir(golden_run)
    written = run.read_json(SUMMARY_JSON)
    assert len(RunTables(run).requests) == written["requests"]["total"] == 24
    assert not RunTables(run).chunks.empty  # its parquet only: the journal left out
    again = summarize(run, None).as_read()
    if "by_kind" not in written["requests"]:  # a summary of format 1 predates the key
        assert sum(again["requests"].pop("by_kind").values()) == written["requests"]["total"]
    for key in ("ttft_s", "itl_s", "e2e_s"):  # "max" came after the golden run was written
        if "max" not in written[key]:
            assert again[key].pop("max") >= again[key]["p999"], key
    for key in ("requests", "ttft_s", "itl_s", "e2e_s", "throughput"):
        assert again[key] == written[key], key
    assert run_mapping(run) is not None  # the flavour run.json recorded


def test_the_golden_run_diagnoses_and_reports(golden_run: Path) -> None:
    kept = json.loads((golden_run / "diagnosis.json").read_text())
    (golden_run / "diagnosis.json").unlink()
    for command in ("diagnose", "report"):
        done = subprocess.run([CLI, command, str(golden_run)], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
    again = json.loads((golden_run / "diagnosis.json").read_text())
    ids = [h["id"] for h in again["hypotheses"]]
    assert ids[: len(kept["hypotheses"])] == [h["id"] for h in kept["hypotheses"]]


def test_a_version_1_summary_reads_and_writes_back_the_same_with_its_version() -> None:
    doc = json.loads((GOLDEN / "run" / SUMMARY_JSON).read_text())
    summary = Summary.from_json(doc)
    assert summary.requests.total == 24 and summary.statistic("itl_s", "p50") is not None
    assert summary.to_json() == {"format_version": SUMMARY_FORMAT_VERSION, **doc}
    assert list(summary.to_json())[1:] == list(doc)  # the sections in their written order
    newer = {**doc, "format_version": SUMMARY_FORMAT_VERSION + 1}
    with pytest.raises(InputError, match="format_version"):
        Summary.from_json(newer)


def test_a_section_this_version_does_not_know_is_kept() -> None:
    sections = {"requests": {"total": 1}, "new_section": {"x": 1}, "server": {}}
    summary = Summary.from_json(sections)
    assert {k: v for k, v in summary.extra.items() if v is not ABSENT} == {"new_section": {"x": 1}}
    # the declared sections in their order, then what this version does not know
    assert list(summary.to_json()) == ["format_version", "requests", "server", "new_section"]
    assert Summary.from_json(summary.to_json()) == summary


def test_a_version_1_ab_json_reads_and_writes_back_the_same_with_its_version() -> None:
    doc = json.loads((GOLDEN / AB_JSON).read_text())
    result = ABResult.from_json(doc)
    assert result.format_version == 1 and result.status == "complete"
    assert [arm.chunk for arm in result.arms] == list(result.chunks) == [512, 2048]
    assert result.verdict and result.comparisons and result.mode == doc["mode"] == "embedded"
    assert result.verdict.winner == doc["verdict"]["winner"] and result.verdict.outcome == ""
    assert result.to_json() == {"format_version": AB_FORMAT_VERSION, **doc}
    assert list(result.to_json())[1:] == list(doc)


def test_a_key_this_version_does_not_know_is_kept() -> None:
    doc = json.loads((GOLDEN / "run" / RUN_JSON).read_text()) | {"later": {"x": 1}}
    assert RunInfo.from_json(doc).to_json() == {**doc, "format_version": RUN_FORMAT_VERSION}


def test_report_and_diagnose_refuse_a_newer_format_in_one_line(golden_run: Path) -> None:
    for name in (RUN_JSON, SUMMARY_JSON):
        path = golden_run / name
        kept = path.read_text()
        path.write_text(json.dumps({**json.loads(kept), "format_version": 99}))
        commands = ["report"] if name == SUMMARY_JSON else ["report", "diagnose"]
        for command in commands:
            done = subprocess.run([CLI, command, str(golden_run)], capture_output=True, text=True)
            lines = done.stderr.strip().splitlines()
            assert done.returncode == 2 and len(lines) == 1, done.stderr
            assert name in lines[0] and "format_version 99" in lines[0]
        path.write_text(kept)
