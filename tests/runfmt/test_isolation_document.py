"""``isolation.json`` (``runfmt.isolation``): typed sections written and read by the
codec, keys it does not declare kept, an unmeasured gap written null, versions checked."""

from __future__ import annotations

import json
import math

import pytest

from runfmt.isolation import (
    ISOLATION_FORMAT_VERSION,
    Channel,
    Experiment,
    IsolationResult,
    TtftGap,
    Verdict,
)
from runfmt.names import ISOLATION_JSON
from runfmt.rundir import RunDir
from workloads.errors import InputError


def test_a_written_result_reads_back_typed(tmp_path):
    unmeasured = TtftGap(confidence=0.95, probes=(1, 0), inconclusive="fewer than two probes")
    verdict = Verdict("inconclusive", "no_power", "no power", math.nan)
    result = IsolationResult(
        status="complete",
        verdict=verdict,
        experiments=(Experiment(prefix_tokens=64, control=Channel(gap=unmeasured)),),
    )
    run = RunDir(tmp_path, create=True)
    run.write_json(ISOLATION_JSON, result.to_json())
    raw = json.loads((tmp_path / ISOLATION_JSON).read_text())
    assert raw["format_version"] == ISOLATION_FORMAT_VERSION
    ttft = raw["experiments"][0]["control"]["ttft"]
    assert ttft["gap_s"] is None and ttft["probes"] == [1, 0]  # JSON has no NaN
    assert raw["verdict"]["resolution_s"] is None
    read = IsolationResult.read(run)
    gap = read.experiments[0].control.gap
    assert math.isnan(gap.gap_s) and gap.inconclusive == "fewer than two probes"
    assert math.isnan(read.verdict.resolution_s) and read.verdict.by == "no_power"
    assert read.to_json() == raw


def test_keys_it_does_not_declare_are_kept_where_they_were(tmp_path):
    doc = IsolationResult(status="complete").to_json()
    doc["from_the_future"] = {"x": 1}
    doc["verdict"] = doc["verdict"] | {"margin": 0.1}
    read = IsolationResult.from_json(doc)
    assert read.extra["from_the_future"] == {"x": 1} and read.verdict.extra["margin"] == 0.1
    assert read.to_json() == doc


def test_a_newer_result_is_refused_naming_the_file(tmp_path):
    run = RunDir(tmp_path, create=True)
    run.write_json(ISOLATION_JSON, {"format_version": ISOLATION_FORMAT_VERSION + 1})
    with pytest.raises(InputError, match=r"isolation\.json"):
        IsolationResult.read(run)
