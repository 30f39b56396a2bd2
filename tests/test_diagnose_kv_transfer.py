"""H5 (KV transfer on the critical path) on real runs of a disaggregated embedded engine."""

from __future__ import annotations

from pathlib import Path

from bench_support import bench

from diagnose.checklist import run_checklist
from perfmodel.config import EngineConfig
from runfmt.diagnosis import Status
from simengine.disagg_config import DisaggConfig
from simengine.embedded import EmbeddedServer
from simengine.kv_link import LinkSpec


def _h5(tmp_path: Path, gbps: float):
    disagg = DisaggConfig(1, 1, LinkSpec(gbps))
    with EmbeddedServer(EngineConfig(), disagg=disagg) as server:
        outcome = bench(
            "long-prompt", tmp_path / f"run-{gbps:g}", endpoint=server.url,
            overrides={"num_requests": 6, "rate": 4.0, "seed": 2}, metrics_interval_s=0.2,
        )  # fmt: skip
    diagnosis = run_checklist(outcome.run_dir)
    (h5,) = [h for h in diagnosis.hypotheses if h.id == "H5"]
    return h5, {e.name: e.value for e in h5.evidence}


def test_a_slow_link_puts_the_transfer_on_the_critical_path(tmp_path: Path) -> None:
    slow, slow_evidence = _h5(tmp_path, 5.0)
    assert slow.status == Status.SUPPORTED, slow.summary
    assert slow_evidence["KV wait / TTFT"] >= 0.2
    # transfers overlapping on the shared link each get a share of its 5 Gb/s, never more
    assert 0 < slow_evidence["achieved link throughput per transfer"] <= 5.0 * 1.001
    fast, fast_evidence = _h5(tmp_path, 10_000.0)
    assert fast.status == Status.NOT_SUPPORTED, fast.summary
    assert fast_evidence["KV wait / TTFT"] < slow_evidence["KV wait / TTFT"] / 10
    assert "--kv-transfer overlap" in fast.next


def test_a_monolithic_run_is_not_applicable(tmp_path: Path) -> None:
    outcome = bench("long-prompt", tmp_path / "mono", overrides={"num_requests": 2, "rate": 4.0})
    (h5,) = [h for h in run_checklist(outcome.run_dir).hypotheses if h.id == "H5"]
    assert h5.status == Status.NOT_APPLICABLE
