"""What ``simulate --json``, ``simulate --against --json``, ``compare --json`` and
``diagnose ab --predict --json`` printed before these outputs were typed
(``tests/fixtures/outputs/``) reads through today's types and writes back with the same
keys and values: the keys are contracts read from outside (CI gates, notebooks). A fresh
``simulate --json`` of the same grid has every key the old one had."""

from __future__ import annotations

import json
import re
import sys
from typing import Any

import pytest
from repo_paths import FIXTURES

from prefillscope.cli import main
from runfmt.abresult import ABResult
from runfmt.codec import ABSENT, decode, encode
from runfmt.compareresult import CompareDocument, CompareRow, SweepCompareDocument
from runfmt.simresult import AgainstResult, SimConfiguration, SimulateResult, StageFigures
from runfmt.summary_sections import Stats

OUTPUTS = FIXTURES / "outputs"
#: output file → its type.
TYPES = {
    "simulate.json": SimulateResult,
    "simulate_against.json": AgainstResult,
    "simulate_calibrate.json": SimulateResult,
    "simulate_calibrate_client.json": SimulateResult,
    "compare.json": CompareDocument,
    "compare_sweep.json": SweepCompareDocument,
}


def _read(name: str) -> dict[str, Any]:
    return json.loads((OUTPUTS / name).read_text())


def _paths(doc: Any, at: str = "") -> dict[str, Any]:
    """Every leaf of a JSON document by its path (``/configurations[0]/ttft_s/p99``)."""
    if isinstance(doc, dict):
        out: dict[str, Any] = {at or "/": {}} if not doc else {}
        for key, value in doc.items():
            out |= _paths(value, f"{at}/{key}")
        return out
    if isinstance(doc, list):
        out = {at: []} if not doc else {}
        for i, value in enumerate(doc):
            out |= _paths(value, f"{at}[{i}]")
        return out
    return {at: doc}


def _written_back(name: str) -> Any:
    doc = _read(name)
    if name == "ab_predict.json":
        return ABResult.from_json(doc).to_json()
    return encode(decode(TYPES[name], doc))


@pytest.mark.parametrize("name", sorted(p.name for p in OUTPUTS.glob("*.json")))
def test_an_output_of_the_earlier_code_writes_back_the_same_keys_and_values(name: str) -> None:
    before = _read(name)
    after = json.loads(json.dumps(_written_back(name)))
    assert _paths(after) == _paths(before)


def _unknown(section: Any) -> set[str]:
    """The keys a section read but does not declare (an absent optional key is no such
    key)."""
    return {k for k, v in section.extra.items() if v is not ABSENT}


def test_the_outputs_read_typed() -> None:
    """Every key the old outputs had is declared: none is left in a section's ``extra``."""
    grid = decode(SimulateResult, _read("simulate.json"))
    assert not _unknown(grid) and not any(_unknown(row) for row in grid.configurations)
    row = grid.configurations[1]
    assert isinstance(row, SimConfiguration) and isinstance(row.latencies["ttft_s"], Stats)
    assert row.break_even is not None and row.break_even.gbps in row.break_even.bracket_gbps
    against = decode(AgainstResult, _read("simulate_against.json"))
    assert not _unknown(against) and isinstance(against.configurations[0], StageFigures)
    assert not any(_unknown(s) for s in against.scores)
    compared = decode(CompareDocument, _read("compare.json"))
    assert not _unknown(compared) and all(isinstance(r, CompareRow) for r in compared.comparisons)
    assert not any(_unknown(r) for r in compared.comparisons)
    assert compared.gated("fail")[0].metric == "itl_p99" and not compared.passed
    sweep = decode(SweepCompareDocument, _read("compare_sweep.json"))
    assert sweep.failed_points == ["rate-2"] and sweep.sweep.axis == "rate"
    prediction = ABResult.from_json(_read("ab_predict.json")).prediction
    assert prediction is not None and not _unknown(prediction)
    assert not any(_unknown(f) for arm in prediction.arms for f in arm.metrics.values())


def _shape(doc: Any) -> set[str]:
    """The key paths of a document, array positions left out."""
    return {re.sub(r"\[\d+\]", "[]", path) for path in _paths(doc)}


def test_a_fresh_simulate_json_has_every_key_the_old_one_had(monkeypatch, capsys) -> None:
    argv = [
        "prefillscope", "simulate", "--workload", "random", "--num-requests", "60", "--rate",
        "20", "--seed", "3", "--chunks", "256,1024", "--disaggregate", "1:1", "--slo",
        "ttft=300ms,itl=40ms", "--json",
    ]  # fmt: skip
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(SystemExit) as exit_:
        main()
    assert not exit_.value.code
    fresh = json.loads(capsys.readouterr().out)
    assert _shape(_read("simulate.json")) <= _shape(fresh)
    for row in fresh["configurations"]:
        for metric in ("ttft_s", "itl_s", "tpot_s", "e2e_s"):
            assert {"mean", "p50", "p90", "p99", "max"} <= set(row[metric])
