"""VirtualDriver: arrivals on a simulated clock, per-request timings, what-if runs."""

from __future__ import annotations

import itertools

import pytest
from engine_util import prompt

from perfmodel.config import EngineConfig
from simengine.core import EngineCore, EngineRequest
from simengine.driver import VirtualDriver, simulate


def _arrivals(n: int = 20, gap: float = 0.05) -> list[tuple[float, EngineRequest]]:
    return [
        (i * gap, EngineRequest(f"r{i}", prompt(300 + 50 * i, i), 30, ignore_eos=True))
        for i in range(n)
    ]


def test_clock_is_the_sum_of_step_durations_and_idle_gaps() -> None:
    result = VirtualDriver(EngineCore(EngineConfig(fixed_step_s=0.01))).run(
        [(0.0, EngineRequest("a", prompt(10, 1), 5)), (10.0, EngineRequest("b", prompt(10, 2), 5))]
    )
    a, b = result.requests["a"], result.requests["b"]
    assert a.token_times == pytest.approx([0.01, 0.02, 0.03, 0.04, 0.05])
    assert b.ttft_s == pytest.approx(0.01)
    assert b.token_times[0] == pytest.approx(10.01)
    assert result.end_s == pytest.approx(10.05)
    assert [s.start_s for s in result.steps][5] == pytest.approx(10.0)


def test_timings_agree_with_the_step_records() -> None:
    result = simulate(EngineConfig(), _arrivals())
    ends = {round(s.start_s + s.duration_s, 12) for s in result.steps}
    for timing in result.requests.values():
        assert len(timing.token_times) == 30
        assert timing.token_times[0] > timing.arrival_s  # nothing before arrival
        assert {round(t, 12) for t in timing.token_times} <= ends
        assert timing.e2e_s == pytest.approx(timing.token_times[-1] - timing.arrival_s)
        assert len(timing.itls_s) == 29 and min(timing.itls_s) > 0
        assert timing.finish_reason == "length"
    steps = result.steps
    for prev, nxt in itertools.pairwise(steps):
        assert nxt.start_s >= prev.start_s + prev.duration_s - 1e-12
    assert result.output_tokens == 600


def test_same_arrivals_what_if_two_budgets() -> None:
    arrivals = [
        (0.0, EngineRequest(f"d{i}", prompt(256, i), 200, ignore_eos=True)) for i in range(16)
    ]
    arrivals += [(0.5 + 0.2 * i, EngineRequest(f"p{i}", prompt(6000, 50 + i), 4)) for i in range(5)]
    small = simulate(EngineConfig(max_num_batched_tokens=512), arrivals)
    large = simulate(EngineConfig(max_num_batched_tokens=8192), arrivals)
    itl_max = {
        name: max(max(t.itls_s) for rid, t in r.requests.items() if rid.startswith("d"))
        for name, r in (("small", small), ("large", large))
    }
    ttft = {
        name: sum(r.requests[f"p{i}"].ttft_s for i in range(5))
        for name, r in (("small", small), ("large", large))
    }
    assert itl_max["large"] > 3 * itl_max["small"]
    assert ttft["small"] > ttft["large"]


def test_rejected_requests_are_recorded_not_raised() -> None:
    arrivals = [
        (0.0, EngineRequest("ok", prompt(50, 1), 5)),
        (0.0, EngineRequest("huge", prompt(600, 2), 10)),
    ]
    result = simulate(EngineConfig(max_model_len=512), arrivals)
    assert (
        result.requests["huge"].error and "maximum context length" in result.requests["huge"].error
    )
    assert result.requests["huge"].ttft_s is None
    assert len(result.requests["ok"].token_times) == 5


def test_until_stops_the_clock_early() -> None:
    result = simulate(EngineConfig(fixed_step_s=0.01), _arrivals(n=5, gap=1.0), until_s=2.5)
    assert 2.5 <= result.end_s < 2.52
    assert "r4" not in result.requests
    assert result.requests["r0"].finish_reason == "length"


def test_a_client_timeout_aborts_the_request_and_frees_its_blocks() -> None:
    """Two long answers at fixed 10 ms steps: the one past its 1 s timeout is aborted at
    the first step boundary after it, ends with error "timeout" and gives its blocks back."""
    core = EngineCore(EngineConfig(fixed_step_s=0.01, max_num_seqs=1))
    arrivals = [
        (0.0, EngineRequest("first", prompt(64, 1), 90, ignore_eos=True)),
        (0.0, EngineRequest("second", prompt(64, 2), 90, ignore_eos=True)),
    ]
    result = VirtualDriver(core).run(arrivals, timeout_s=1.0)
    first, second = result.requests["first"], result.requests["second"]
    assert first.finish_reason == "length" and len(first.token_times) == 90
    # max_num_seqs 1: "second" waits 0.9 s for "first", then decodes until the timeout
    assert second.error == "timeout" and second.finish_reason is None
    assert 0 < len(second.token_times) < 90
    assert second.token_times[-1] <= 1.0 + 1e-9
    assert core.pool.num_free_or_reclaimable == core.pool.num_blocks
    assert core.stats.aborted_requests == 1


def test_async_scheduling_admits_an_arrival_one_step_later() -> None:
    """vLLM's async scheduling: the step after the running one is already scheduled, so a
    request arriving mid-step joins the step after next; an idle engine starts at once."""
    busy = [(0.0, EngineRequest("long", prompt(64, 1), 50, ignore_eos=True))]
    late = (0.105, EngineRequest("late", prompt(64, 2), 5, ignore_eos=True))
    ttft = {}
    for lag in (False, True):
        config = EngineConfig(fixed_step_s=0.01, async_scheduling=lag)
        result = VirtualDriver(EngineCore(config)).run([*busy, late])
        ttft[lag] = result.requests["late"].ttft_s
        idle = VirtualDriver(EngineCore(config)).run([late])
        assert idle.requests["late"].ttft_s == pytest.approx(0.01)
    # arriving at 0.105: the step 0.10-0.11 is running; without the lag it joins 0.11-0.12,
    # with it 0.12-0.13 (0.11-0.12 was scheduled at 0.10)
    assert ttft[False] == pytest.approx(0.12 - 0.105)
    assert ttft[True] == pytest.approx(0.13 - 0.105)


def test_the_frontend_delays_a_request_before_the_scheduler_not_the_gpu() -> None:
    """``host_overhead_per_request_s``: a request reaches the scheduler that long after its
    send; its TTFT and E2E count from the send, and the steps meanwhile are not slowed."""
    busy = [(0.0, EngineRequest("long", prompt(64, 1), 50, ignore_eos=True))]
    late = (0.105, EngineRequest("late", prompt(64, 2), 5, ignore_eos=True))
    base = VirtualDriver(EngineCore(EngineConfig(fixed_step_s=0.01))).run([*busy, late])
    ttft = {}
    for front in (0.004, 0.006):
        config = EngineConfig(fixed_step_s=0.01, async_scheduling=True,
                              host_overhead_per_request_s=front)  # fmt: skip
        idle = VirtualDriver(EngineCore(config)).run([late])
        assert idle.requests["late"].arrival_s == 0.105  # the send, not the admission
        assert idle.requests["late"].ttft_s == pytest.approx(front + 0.01)
        result = VirtualDriver(EngineCore(config)).run([*busy, late])
        ttft[front] = result.requests["late"].ttft_s
        # the first request waited its frontend once; its steps are the same steps
        gaps = result.requests["long"].token_times
        assert gaps[0] == pytest.approx(front + 0.01)
        assert [b - a for a, b in itertools.pairwise(gaps)] == pytest.approx(
            [b - a for a, b in itertools.pairwise(base.requests["long"].token_times)]
        )
    # the steps run from the first request's admission at `front`: "late" reaches the
    # scheduler at 0.105 + front, during the step from 0.10 + front (the one after it was
    # scheduled at its start), and joins the step from 0.12 + front: the TTFT of the same
    # arrival without a frontend (0.13 - 0.105, above) plus the frontend's time
    for front, seconds in ttft.items():
        assert seconds == pytest.approx(0.13 - 0.105 + front)
