"""Every run document written by the code before the typed documents (main 11a2cbe,
``tests/fixtures/documents/``) reads through today's types and writes back with the same
keys and values: the keys are contracts read from outside (CI scripts, dashboards). The
older golden runs (format 1 and 2) still read, and ``run.json``'s sections are typed."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
from json_paths import leaf_paths
from repo_paths import ROOT

from runfmt.abresult import ABResult
from runfmt.codec import decode, encode
from runfmt.diagnosis import Diagnosis
from runfmt.isolation import IsolationResult
from runfmt.run_sections import Geometry, TargetSection
from runfmt.runinfo import RUN_FORMAT_VERSION, RunInfo
from runfmt.summary import Summary
from runfmt.sweep import SweepResult

DOCUMENTS = ROOT / "tests" / "fixtures" / "documents"


def _read(name: str) -> dict[str, Any]:
    return json.loads((DOCUMENTS / name).read_text())


def _written_back(name: str) -> dict[str, Any]:
    doc = _read(name)
    if name == "run.json":
        return RunInfo.from_json(doc).to_json()
    if name == "summary.json":
        return Summary.from_json(doc).to_json()
    if name == "diagnosis.json":
        return Diagnosis.from_json(doc).to_json()
    if name == "sweep.json":
        return SweepResult.from_json(doc).to_json()
    if name == "isolation.json":
        return IsolationResult.from_json(doc).to_json()
    if name == "ab.json":
        return ABResult.from_json(doc).to_json()
    raise AssertionError(name)


@pytest.mark.parametrize(
    "name",
    sorted(p.name for p in DOCUMENTS.glob("*.json")),
)
def test_a_document_of_the_earlier_code_writes_back_the_same_keys_and_values(name: str) -> None:
    before = _read(name)
    after = json.loads(json.dumps(_written_back(name)))
    assert leaf_paths(after) == leaf_paths(before)


def test_every_kind_of_document_has_its_fixture() -> None:
    names = {p.name for p in DOCUMENTS.glob("*.json")}
    kinds = {"run", "summary", "diagnosis", "sweep", "isolation", "ab"}
    assert {f"{kind}.json" for kind in kinds} == names


def test_run_json_reads_typed_from_the_fixture() -> None:
    """Each typed field is the value the file holds; the oracle's whole geometry travels."""
    doc = _read("run.json")
    info = RunInfo.from_json(doc)
    assert isinstance(info.target, TargetSection) and isinstance(info.oracle, Geometry)
    assert (info.target.url, info.target.flavour, info.target.model) == (
        doc["target"]["url"],
        doc["target"]["flavour"],
        doc["target"]["model"],
    )
    assert encode(info.oracle) == doc["oracle"]  # all six fields, not two
    assert info.oracle.cache_model_source == doc["oracle"]["cache_model_source"]
    assert info.plan.offered_rate_per_s == doc["plan"]["offered_rate_per_s"]
    assert info.load.workers == doc["load"]["workers"]
    assert info.target.server_info.command == tuple(doc["target"]["server_info"]["command"])
    assert [p.name for p in info.probes] == [k for k, v in doc["probes"].items() if v]
    for probe in info.probes:
        assert encode(probe.status) == doc["probes"][probe.name]["status"]
    assert info.cache_protocol.applied == doc["cache_protocol"]["applied"]
    assert info.slo is not None and dict(info.slo.bounds()) == doc["slo"]
    assert dict(info.labels) == doc["labels"]
    result = info.result
    assert result is not None and result.requests.ok == doc["result"]["requests"]["ok"]
    assert encode(result.cache_protocol) == doc["result"]["cache_protocol"]
    assert result.client.timer.wakeups == doc["result"]["client"]["timer"]["wakeups"]
    assert encode(result) == doc["result"]  # the whole account, typed
    assert info.workload.params["groups"] == doc["workload"]["params"]["groups"]
    assert encode(info.workload) == doc["workload"] and info.workload.spec().seed == info.seed
    assert info.wall_t0 == doc["clock"]["wall_t0"] and info.seed == doc["seed"]


@pytest.mark.parametrize("golden", ["golden_v1", "golden_v2"])
def test_the_older_golden_run_json_still_reads(golden: str) -> None:
    doc = json.loads((ROOT / "tests/fixtures" / golden / "run/run.json").read_text())
    info = RunInfo.from_json(doc)
    assert info.status == "complete" and info.oracle.block_size == doc["oracle"]["block_size"]
    assert info.to_json() == {**doc, "format_version": RUN_FORMAT_VERSION}


def test_a_newer_writer_s_keys_and_a_hand_edited_value_are_kept() -> None:
    """Unknown keys at any depth and a value of the wrong type read as absent, and are
    written back where they were."""
    doc = _read("run.json")
    doc["from_the_future"] = {"x": 1}
    doc["oracle"] = doc["oracle"] | {"block_size": "sixteen", "tier": "hbm"}
    doc["target"]["server_info"]["chunk_budget"] = "big"
    info = RunInfo.from_json(doc)
    assert info.oracle.block_size is None and info.target.server_info.chunk_budget is None
    assert info.extra["from_the_future"] == {"x": 1} and info.oracle.extra["tier"] == "hbm"
    assert leaf_paths(json.loads(json.dumps(info.to_json()))) == leaf_paths(doc)


def test_a_partial_run_json_reads_as_absent() -> None:
    empty = RunInfo.from_json({})
    assert (empty.status, empty.tool_version, empty.wall_t0) == ("unknown", "unknown", None)
    assert empty.target.url is None and empty.target.engine is None
    assert empty.plan.offered_rate_per_s is None and empty.oracle.num_blocks is None
    assert list(empty.probes) == [] and empty.probes.server_metrics is None
    assert empty.slo is None and empty.cache_protocol.applied is None
    odd = RunInfo.from_json(
        {
            "target": {"url": 3, "vocab_size": "32000", "engine": "on"},
            "oracle": {"block_size": True, "num_blocks": 12.0},
            "probes": {"server_metrics": {"status": "ok", "flavour": "vllm"}},
        }
    )
    assert (odd.target.url, odd.target.vocab_size, odd.target.engine) == (None, None, None)
    assert (odd.oracle.block_size, odd.oracle.num_blocks) == (None, 12)
    metrics = odd.probes.server_metrics
    assert metrics is not None and metrics.flavour == "vllm" and metrics.status.state is None


def test_the_codec_keeps_absent_apart_from_null() -> None:
    """``labels`` and ``duration_s`` are absent until set; ``reason`` is written null."""
    written = RunInfo().to_json()
    assert "labels" not in written and "duration_s" not in written
    assert "reason" in written and written["reason"] is None
    read = decode(Geometry, {"block_size": 8})  # an older writer's: no num_blocks key
    assert read.num_blocks is None and "num_blocks" not in encode(read)
    assert encode(replace(read, num_blocks=64))["num_blocks"] == 64  # set since: written
    assert encode(Geometry(block_size=8))["num_blocks"] is None  # today's writer: null
