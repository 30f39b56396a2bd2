"""H5 (KV transfer on the critical path) on real runs of a disaggregated embedded engine."""

from __future__ import annotations

from pathlib import Path

from bench_support import bench, read_json

from diagnose.checklist import run_checklist
from diagnose.context import DiagnoseOptions
from runfmt.diagnosis import Status
from runfmt.slo import Slo


def _diagnosed(tmp_path: Path, gbps: float):
    outcome = bench(
        "long-prompt", tmp_path / f"run-{gbps:g}",
        engine=("disaggregate=1:1", f"kv_link_gbps={gbps:g}"),  # bench's own P/D engine
        overrides={"num_requests": 6, "rate": 4.0, "seed": 2}, metrics_interval_s=0.2,
    )  # fmt: skip
    described = read_json(outcome.run_dir, "run.json")["target"]["engine"]
    assert described["disaggregate"]["ratio"] == "1:1"
    assert described["disaggregate"]["link"]["gbps"] == gbps
    return run_checklist(outcome.run_dir), outcome.run_dir


def _h5(tmp_path: Path, gbps: float):
    diagnosis, run_dir = _diagnosed(tmp_path, gbps)
    (h5,) = [h for h in diagnosis.hypotheses if h.id == "H5"]
    return h5, {e.name: e.value for e in h5.evidence}, (diagnosis, run_dir)


def test_a_slow_link_puts_the_transfer_on_the_critical_path(tmp_path: Path) -> None:
    slow, slow_evidence, (diagnosis, run_dir) = _h5(tmp_path, 5.0)
    assert slow.status == Status.SUPPORTED, slow.summary
    # the transfer leads the diagnosis, and the decision measures it first
    assert diagnosis.primary.finding == "H5", diagnosis.primary.why
    assert diagnosis.decision.recommendation.startswith("Measure the KV transfer alone")
    assert "--kv-transfer overlap" in diagnosis.decision.recommendation
    # a breached TTFT SLO is a hard failure: contain by fewer transfers on the link
    breached = run_checklist(run_dir, DiagnoseOptions(slo=Slo(ttft_s=1e-6)))
    assert breached.decision.hard_failure and breached.primary.finding == "H5"
    assert "so that fewer KV transfers share the link" in breached.decision.recommendation
    assert slow_evidence["KV wait / TTFT"] >= 0.2
    # transfers overlapping on the shared link each get a share of its 5 Gb/s, never more
    assert 0 < slow_evidence["achieved link throughput per transfer"] <= 5.0 * 1.001
    fast, fast_evidence, _ = _h5(tmp_path, 10_000.0)
    assert fast.status == Status.NOT_SUPPORTED, fast.summary
    assert fast_evidence["KV wait / TTFT"] < slow_evidence["KV wait / TTFT"] / 10
    assert "--kv-transfer overlap" in fast.next


def test_a_monolithic_run_is_not_applicable(tmp_path: Path) -> None:
    outcome = bench("long-prompt", tmp_path / "mono", overrides={"num_requests": 2, "rate": 4.0})
    (h5,) = [h for h in run_checklist(outcome.run_dir).hypotheses if h.id == "H5"]
    assert h5.status == Status.NOT_APPLICABLE
