"""What ``simulate --json``, ``simulate --against --json``, ``simulate --calibrate
--holdout --json``, ``compare --json`` and ``diagnose ab --predict --json`` printed before
these outputs were typed (``tests/fixtures/outputs/``) reads through today's types and
writes back with the same keys and values: the keys are contracts read from outside (CI
gates, notebooks). A fresh ``simulate --json`` of the same grid has every key the old one
had."""

from __future__ import annotations

import json
import re
import sys
from typing import Any

import pytest
from json_paths import leaf_paths
from repo_paths import FIXTURES

from prefillscope.cli import main
from runfmt.abresult import ABResult
from runfmt.calibration import Calibration, DecodeFit, FitFigures, FittedSettings
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


def _written_back(name: str) -> Any:
    doc = _read(name)
    if name == "ab_predict.json":
        return ABResult.from_json(doc).to_json()
    return encode(decode(TYPES[name], doc))


@pytest.mark.parametrize("name", sorted(p.name for p in OUTPUTS.glob("*.json")))
def test_an_output_of_the_earlier_code_writes_back_the_same_keys_and_values(name: str) -> None:
    before = _read(name)
    after = json.loads(json.dumps(_written_back(name)))
    assert leaf_paths(after) == leaf_paths(before)


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


def _calibration(name: str) -> Calibration:
    calibration = decode(SimulateResult, _read(name)).calibration
    assert isinstance(calibration, Calibration)
    return calibration


@pytest.mark.parametrize("name", ["simulate_calibrate.json", "simulate_calibrate_client.json"])
def test_the_calibration_block_reads_typed(name: str) -> None:
    """``simulate --calibrate --holdout``'s block: every key declared, the fit, the decode
    and each run's figures their types; a figure's error is the one its figures give."""
    cal = _calibration(name)
    holdout = cal.holdout
    assert holdout is not None
    sections = (cal, cal.fitted, cal.decode_fit, cal.measured, cal.predicted, holdout,
                holdout.measured, holdout.predicted)  # fmt: skip
    assert not any(_unknown(section) for section in sections)
    assert isinstance(cal.fitted, FittedSettings) and isinstance(cal.decode_fit, DecodeFit)
    assert isinstance(holdout.measured, FitFigures) and len(cal.step_jitter_s) == 200
    assert set(cal.relative_error) == set(FitFigures.names())
    for check in (cal, holdout):
        assert dict(check.relative_error) == dict(check.predicted.errors(check.measured))
    assert set(holdout.within_goal) == set(holdout.goals) == {"ttft_p50", "itl_p50", "itl_p99"}
    # the calibrated run `al` was marked client-limited, `ar` not; `b` was limited itself
    assert bool(cal.warnings) == (name == "simulate_calibrate.json") and holdout.warnings
    assert cal.all_warnings == cal.warnings + holdout.warnings
    assert cal.config["max_num_batched_tokens"] == 2048 and holdout.max_num_batched_tokens == 256


def test_a_real_servers_calibration_has_its_step_overhead_and_the_efficiency_test() -> None:
    """The client-gap decode (no step histogram): a per-step overhead among the fitted
    settings, in order, and the free efficiency's interval; the embedded run has
    neither."""
    client, embedded = (_calibration(f"simulate_calibrate{s}.json") for s in ("_client", ""))
    assert list(client.fitted.settings()) == [
        "bandwidth_efficiency", "host_overhead_per_seq_s", "host_overhead_step_s", "prefill_mfu"
    ]  # fmt: skip
    gain = client.decode_fit.efficiency_gain_s
    assert gain is not None and len(gain) == 3 and gain[1] <= gain[0] <= gain[2]
    assert client.decode_fit.efficiency_decided is False and client.decode_fit.anchored is None
    assert client.fit_targets == ("ttft_p50",) and client.measured.decode_step_mean is None
    assert client.relative_error["decode_step_mean"] is None
    assert embedded.fitted.host_overhead_step_s is None
    assert "host_overhead_step_s" not in encode(embedded.fitted)
    assert embedded.decode_fit.anchored is True and embedded.decode_fit.efficiency_gain_s is None


def _shape(doc: Any) -> set[str]:
    """The key paths of a document, array positions left out."""
    return {re.sub(r"\[\d+\]", "[]", path) for path in leaf_paths(doc)}


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
