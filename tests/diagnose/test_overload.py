"""``diagnose.overload``: offered above served, read from runs whose arrivals and
completions are laid out by hand (no server samples: the client's readings)."""

from __future__ import annotations

import numpy as np
import pytest
from rundirs import write_run

from diagnose.context import DiagnoseOptions, build_context
from diagnose.inputs import load_run_view
from diagnose.overload import (
    MIN_ARRIVALS,
    QUEUE_GROWTH,
    SERVED_SHARE,
    assess,
    offered_rate,
    overload_strength,
)
from diagnose.registry import declaration
from diagnose.words import percent
from loadgen.records import RequestRecord
from runfmt.diagnosis import Status
from workloads.spec import load_spec


def _run(tmp_path, n: int, end_of, *, rate: float | None = 10.0, concurrency=None):
    """``n`` arrivals every 0.1 s (10/s offered); request i ends at ``end_of(i)``."""
    records = []
    for i in range(n):
        t, end = 0.1 * i, end_of(i)
        records.append(RequestRecord(f"r{i}", intended_s=t, sent_s=t, first_token_s=end - 0.01,
                                     end_s=end, prompt_tokens=100, output_tokens=2))  # fmt: skip
    load = {"rate": rate, "concurrency": concurrency, "num_requests": n}
    workload = load_spec("long-prompt", {k: v for k, v in load.items() if v}).to_dict()
    path = write_run(tmp_path / "run", records, info={"workload": workload,
                                                      "target": {"flavour": "vllm"}})  # fmt: skip
    return build_context(load_run_view(path), DiagnoseOptions())


def test_a_server_serving_half_the_offer_with_a_growing_queue_is_overloaded(tmp_path):
    # one completion every 0.2 s from 0.5 s: 5/s served of 10/s offered
    finding = assess(_run(tmp_path, 60, lambda i: 0.5 + 0.2 * i))
    assert finding.status == Status.SUPPORTED
    served = next(e for e in finding.evidence if e.name.startswith("served rate"))
    assert served.value == pytest.approx(5.0)
    growth = next(e for e in finding.evidence if e.name.startswith("queue growth")).value
    assert growth > QUEUE_GROWTH  # the gap's strength, × √(depth / QUEUE_GROWTH)
    assert finding.strength == pytest.approx(2.0 * SERVED_SHARE * (growth / QUEUE_GROWTH) ** 0.5)
    assert "--rate 4.5" in finding.next and finding.next.startswith("Measure the capacity")


def test_overload_strength_grows_with_the_queue_and_the_gap():
    """1.5× capacity with 203 queued is far past the threshold; the same gap with no queue,
    or a gap at the threshold with a short one, is near it."""
    assert overload_strength(1.5, 203) > 10 * overload_strength(1.5, 0)
    assert overload_strength(1.5, 0) == pytest.approx(1.5 * SERVED_SHARE)
    assert overload_strength(1 / SERVED_SHARE, QUEUE_GROWTH) == pytest.approx(1.0)
    assert overload_strength(2.0, 50) > overload_strength(1.5, 50) > overload_strength(1.5, 20)
    assert overload_strength(None, 203) is None


def test_what_overload_costs_is_the_seconds_requests_queued(tmp_path):
    """Without the server's queue histogram: each request's TTFT beyond the first third's
    median, summed — request i of 60 waits 0.1·i s longer than it arrived later."""
    ctx = _run(tmp_path, 60, lambda i: 0.5 + 0.2 * i)
    cost = declaration("OL").cost(ctx, assess(ctx))
    ttft = np.array([0.5 + 0.2 * i - 0.01 - 0.1 * i for i in range(60)])
    early = np.median(ttft[0.1 * np.arange(60) <= 5.9 / 3])
    assert cost.seconds == pytest.approx(np.clip(ttft - early, 0, None).sum())
    assert cost.how.startswith("client: requests: TTFT beyond the first third's median")


def test_a_server_that_keeps_up_is_not_overloaded(tmp_path):
    finding = assess(_run(tmp_path, 60, lambda i: 0.1 * i + 0.05))
    assert finding.status == Status.NOT_SUPPORTED
    assert "kept up with the 10 req/s offered" in finding.summary


def test_a_closed_loop_cannot_be_overloaded(tmp_path):
    ctx = _run(tmp_path, 20, lambda i: 0.1 * i + 0.05, rate=None, concurrency=4)
    assert offered_rate(ctx) is None
    assert assess(ctx).status == Status.NOT_APPLICABLE


def test_too_few_arrivals_are_inconclusive_and_say_how_many_are_needed(tmp_path):
    finding = assess(_run(tmp_path, MIN_ARRIVALS - 1, lambda i: 0.5 + 0.2 * i))
    assert finding.status == Status.INCONCLUSIVE
    assert finding.missing == [f"at least {MIN_ARRIVALS} requests"]


def test_percent_words_a_share_for_a_sentence():
    assert [percent(s) for s in (0.37, 0.0034, 0.0, 1.0)] == ["37 %", "0.34 %", "0 %", "100 %"]
