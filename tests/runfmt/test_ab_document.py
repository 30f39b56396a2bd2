"""``ab.json`` (``runfmt.abresult``) through the codec: the fixture read as typed sections
whose attributes are the file's values, an unknown figure NaN in memory and ``null`` in the
file, the document written while the A/B runs without the analysis's sections, and a
newer writer's keys kept at every depth."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from repo_paths import ROOT

from diagnose.ab import AbSettings, Arm, Trial, unanalysed_arm
from diagnose.stats import Comparison
from runfmt.abresult import AB_FORMAT_VERSION, ABResult
from runfmt.codec import ABSENT, encode
from workloads.errors import InputError

FIXTURE = ROOT / "tests" / "fixtures" / "documents" / "ab.json"


def _doc() -> dict[str, Any]:
    return json.loads(FIXTURE.read_text())


def test_the_fixture_reads_as_typed_sections_holding_the_file_s_values() -> None:
    doc = _doc()
    result = ABResult.from_json(doc)
    assert result.format_version == doc["format_version"] == AB_FORMAT_VERSION
    verdict = result.verdict
    assert verdict is not None and verdict.winner == doc["verdict"]["winner"]
    assert verdict.decided_by == tuple(doc["verdict"]["decided_by"])
    arm = result.arms[0]
    raw = doc["arms"][0]
    assert (arm.index, arm.chunk, arm.label) == (raw["index"], raw["chunk"], raw["label"])
    assert arm.figure("itl_p99_s") == raw["itl_p99_s"]
    assert arm.events is not None and arm.events.count == raw["events"]["count"]
    assert arm.events.figures["event_stall_mean_s"] == raw["events"]["event_stall_mean_s"]
    block = arm.by_kind["long-prompt"]
    assert block.requests == raw["by_kind"]["long-prompt"]["requests"]
    assert block.figures["ttft_p50_s"] == raw["by_kind"]["long-prompt"]["ttft_p50_s"]
    assert arm.trials[0].run_dir == raw["trials"][0]["run_dir"]
    first = result.comparisons[0]
    assert (first.metric, first.ratio, first.arm) == tuple(
        doc["comparisons"][0][k] for k in ("metric", "ratio", "arm")
    )
    assert result.conditions is not None and result.conditions.matched
    assert [c.name for c in result.conditions.checks] == [
        c["name"] for c in doc["conditions"]["checks"]
    ]
    tolerances = result.settings.tolerances
    assert (
        tolerances is not None and tolerances.loop_lag == doc["settings"]["tolerances"]["loop_lag"]
    )
    assert result.workload.name == doc["workload"]["name"] and result.status == doc["status"]
    assert json.loads(json.dumps(result.to_json())) == doc


def test_an_unknown_figure_is_nan_in_memory_and_null_in_the_file() -> None:
    nan = math.nan
    c = Comparison.judge("itl_p99", nan, (nan, nan), nan, (0.01, nan), "boot", 0.95)
    written = encode(c)
    assert written["ratio"] is None and written["ci_low"] is None and written["new"] is None
    assert written["base"] == 0.01 and written["units"] == [0, 0]
    doc = _doc()
    doc["comparisons"][0] |= {"ratio": None, "ci_low": None}
    read = ABResult.from_json(doc)
    row = read.comparisons[0]
    assert (
        math.isnan(row.ratio) and math.isnan(row.ci_low) and row.arm == doc["comparisons"][0]["arm"]
    )
    assert json.loads(json.dumps(read.to_json())) == doc


def test_the_running_document_holds_no_analysis_section(tmp_path) -> None:
    arms = [Arm(0, 512, "512", "embedded engine"), Arm(1, 2048, "2048", "embedded engine")]
    trials = [Trial(0, 1, tmp_path / "t1", "complete", seconds=1.5)]
    settings = AbSettings(trials=3, reference=1)
    result = ABResult(
        arms=tuple(unanalysed_arm(arm, trials) for arm in arms),
        reference=settings.reference_of(arms),
        settings=settings.recorded(),
        status="running",
    ).unanalysed()
    doc = result.to_json()
    for section in ("verdict", "kinds", "comparisons", "conditions", "tradeoff", "outputs"):
        assert section not in doc
    assert "prediction" not in doc and doc["format_version"] == AB_FORMAT_VERSION
    first, second = doc["arms"]
    assert set(first) == {"index", "chunk", "label", "target", "trials"}
    assert first["trials"] == [
        {"arm": 0, "round": 1, "run_dir": str(tmp_path / "t1"), "status": "complete",
         "reason": None, "seconds": 1.5, "warmup": False}
    ]  # fmt: skip
    assert second["trials"] == [] and doc["reference"] == {"arm": "2048", "chunk": 2048}
    assert doc["settings"]["tolerances"]["loop_lag"] == settings.tolerances.loop_lag
    assert doc["settings"]["slo"] is None
    # read back, it is the same document: absent stays absent
    assert ABResult.from_json(doc).to_json() == doc
    assert ABResult.from_json(doc).extra["verdict"] is ABSENT


def test_a_newer_writer_s_keys_are_kept_and_a_newer_version_refused() -> None:
    doc = _doc()
    doc["later"] = {"x": 1}
    doc["verdict"]["confidence_band"] = [0.1, 0.2]
    doc["arms"][1]["trials"][0]["gpu_clock_mhz"] = 1980
    doc["comparisons"][2]["bayes_factor"] = 3.5
    read = ABResult.from_json(doc)
    assert read.extra["later"] == {"x": 1} and read.arms[1].trials[0].extra["gpu_clock_mhz"]
    assert json.loads(json.dumps(read.to_json())) == doc
    with pytest.raises(InputError, match="format_version 9"):
        ABResult.from_json(doc | {"format_version": 9})
