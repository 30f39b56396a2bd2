"""``diagnose.h4_memory`` and ``diagnose.h5_kv_transfer`` at their thresholds, from server
samples written by hand (two scrapes: the run's start and its end)."""

from __future__ import annotations

import pytest
from run_shapes import metric_row, steady_streams
from rundirs import write_run

from diagnose import h4_memory, h5_kv_transfer
from diagnose.context import DiagnoseOptions, build_context
from diagnose.inputs import load_run_view
from runfmt.diagnosis import Status
from runtime.engine_metrics import KV_TRANSFER_SECONDS

TTFT_METRIC = "vllm:time_to_first_token_seconds"

INFO = {"target": {"flavour": "vllm"}}


def _context(tmp_path, samples, streams: int = 2):
    records, chunks = steady_streams(streams, 5, 0.05)
    path = write_run(tmp_path / "run", records, chunks, INFO, samples)
    return build_context(load_run_view(path), DiagnoseOptions())


def _histogram(metric: str, count: float, total: float) -> list[dict]:
    """Nothing at t=0; ``count`` observations summing to ``total`` seconds by t=1."""
    rows = []
    for t, n, s in ((0.0, 0.0, 0.0), (1.0, count, total)):
        rows.append(metric_row(t, f"{metric}_bucket", n, le="+Inf"))
        rows.append(metric_row(t, f"{metric}_count", n))
        rows.append(metric_row(t, f"{metric}_sum", s))
    return rows


def _kv(wait_s: float) -> list[dict]:
    ttft = _histogram(TTFT_METRIC, 10, 1.0)
    return ttft + _histogram(KV_TRANSFER_SECONDS, 10, wait_s)


@pytest.mark.parametrize(
    ("wait_s", "status"),
    [(0.3, Status.SUPPORTED), (0.2, Status.SUPPORTED), (0.15, Status.WEAKENED),
     (0.05, Status.NOT_SUPPORTED)],
)  # fmt: skip
def test_kv_wait_as_a_share_of_ttft_decides_h5(tmp_path, wait_s, status):
    finding = h5_kv_transfer.assess(_context(tmp_path, _kv(wait_s)))
    assert finding.status == status
    assert finding.strength == pytest.approx(wait_s / h5_kv_transfer.SHARE)
    share = next(e for e in finding.evidence if e.name == "KV wait / TTFT")
    assert share.value == pytest.approx(wait_s)


def test_h5_without_transfer_metrics_is_not_applicable_and_without_ttft_inconclusive(tmp_path):
    assert h5_kv_transfer.assess(_context(tmp_path / "a", [])).status == Status.NOT_APPLICABLE
    only_wait = _histogram(KV_TRANSFER_SECONDS, 10, 0.5)
    finding = h5_kv_transfer.assess(_context(tmp_path / "b", only_wait))
    assert finding.status == Status.INCONCLUSIVE
    assert finding.missing == [f"the server's TTFT histogram ({h5_kv_transfer.TTFT})"]


def _pool(usage: float, waiting: float, preempted: float) -> list[dict]:
    rows = []
    for t in (0.0, 1.0):
        rows += [
            metric_row(t, "vllm:kv_cache_usage_perc", usage if t else 0.0),
            metric_row(t, "vllm:num_requests_waiting", waiting if t else 0.0),
            metric_row(t, "vllm:num_requests_running", 1.0),
            metric_row(t, "vllm:num_preemptions_total", preempted if t else 0.0),
        ]
    return rows


def test_any_preemption_is_exhaustion_and_its_strength_is_what_it_recomputed(tmp_path):
    """One preemption among 100 requests sits at the threshold (a weak primary at best);
    three among two requests recompute more than the prompt work itself: far past it."""
    one = h4_memory.assess(_context(tmp_path / "one", _pool(0.5, 0, 1), streams=100))
    assert one.status == Status.SUPPORTED and "1 preemptions" in one.summary
    assert one.strength == 1.0  # (100 + 2.5) tokens of 10,000: 1 % < RECOMPUTE_SHARE
    many = h4_memory.assess(_context(tmp_path / "many", _pool(0.5, 0, 3)))
    assert many.status == Status.SUPPORTED and "3 preemptions" in many.summary
    # 3 × (100 prompt + 5/2 output) tokens recomputed of 2 × 100 prompt tokens
    assert many.strength == pytest.approx(3 * 102.5 / 200 / h4_memory.RECOMPUTE_SHARE)


def test_the_recompute_is_weighed_against_the_prefill_it_joins(tmp_path):
    """H4 says what share of the prefill computed its preemptions recomputed, which
    decides whether it explains H1: 1 preemption among 100 streams is a sliver of it,
    3 among 2 streams most of it."""

    def share(finding) -> float:
        return next(e.value for e in finding.evidence if e.name == h4_memory.RECOMPUTED_SHARE)

    one = h4_memory.assess(_context(tmp_path / "one", _pool(0.5, 0, 1), streams=100))
    assert share(one) == pytest.approx(100 * 102.5 / (10_000 + 102.5))
    assert not h4_memory.recompute_makes_the_prefill({"H4": one})
    many = h4_memory.assess(_context(tmp_path / "many", _pool(0.5, 0, 3)))
    assert share(many) == pytest.approx(100 * 3 * 102.5 / (200 + 3 * 102.5))
    assert h4_memory.recompute_makes_the_prefill({"H4": many})
    none = h4_memory.assess(_context(tmp_path / "none", _pool(0.5, 0, 0)))
    assert all(e.name != h4_memory.RECOMPUTED_SHARE for e in none.evidence)
    assert not h4_memory.recompute_makes_the_prefill({"H4": none})


def test_a_queue_while_the_pool_is_full_is_exhaustion(tmp_path):
    finding = h4_memory.assess(_context(tmp_path, _pool(0.96, 2, 0)))
    assert finding.status == Status.SUPPORTED and "96 % of the pool" in finding.summary


def test_a_queue_with_room_in_the_pool_is_reservation_not_exhaustion(tmp_path):
    finding = h4_memory.assess(_context(tmp_path, _pool(0.94, 5, 0)))
    assert finding.status == Status.NOT_SUPPORTED
    assert finding.summary.startswith("Reservation, not exhaustion: no preemptions")
    assert "the token budget or vLLM's --max-num-seqs, not memory, held them" in finding.summary


def test_h4_without_server_metrics_is_inconclusive(tmp_path):
    finding = h4_memory.assess(_context(tmp_path, []))
    assert finding.status == Status.INCONCLUSIVE
    assert finding.missing == ["server metrics (none were scraped or understood)"]
