"""Arrival processes: the rate, the burstiness and the bounds they promise."""

from __future__ import annotations

import numpy as np
import pytest

from workloads.arrivals import (
    ClosedLoop,
    ConstantRate,
    Gamma,
    Poisson,
    Ramp,
    TraceTimes,
    make_arrival,
)
from workloads.errors import InputError


def _gaps(times: np.ndarray) -> np.ndarray:
    assert np.all(np.diff(times) >= 0)
    return np.diff(times)


def _rng() -> np.random.Generator:
    return np.random.default_rng(12345)


def test_poisson_has_its_rate_and_unit_cv() -> None:
    times = Poisson(8.0).times(_rng(), 50_000, None)
    gaps = _gaps(times)
    assert times[0] == 0.0
    assert 1 / gaps.mean() == pytest.approx(8.0, rel=0.03)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, rel=0.03)


@pytest.mark.parametrize("cv", [0.5, 3.0])
def test_gamma_has_its_rate_and_cv(cv: float) -> None:
    gaps = _gaps(Gamma(5.0, cv).times(_rng(), 80_000, None))
    assert 1 / gaps.mean() == pytest.approx(5.0, rel=0.05)
    assert gaps.std() / gaps.mean() == pytest.approx(cv, rel=0.06)


def test_burstier_gamma_clusters_more_requests_into_short_windows() -> None:
    def busiest_second(proc: Gamma) -> int:
        times = proc.times(_rng(), None, 2000.0)
        return int(np.bincount(times.astype(int)).max())

    assert busiest_second(Gamma(5.0, 4.0)) > 2 * busiest_second(Gamma(5.0, 1.0))


def test_constant_rate_is_evenly_spaced() -> None:
    times = ConstantRate(4.0).times(_rng(), 9, None)
    assert times.tolist() == pytest.approx([i * 0.25 for i in range(9)])


def test_a_duration_bounds_the_schedule() -> None:
    times = Poisson(20.0).times(_rng(), None, 300.0)
    assert times.max() < 300.0
    assert len(times) == pytest.approx(6000, rel=0.05)
    both = Poisson(20.0).times(_rng(), 100, 300.0)
    assert len(both) == 100


def test_linear_ramp_rises_from_start_to_end_rate() -> None:
    ramp = Ramp(start_rate=0.0, rate=40.0)
    times = ramp.times(_rng(), None, 100.0)
    # The integrated rate over [0, 50] is 500 and over [50, 100] is 1500.
    first, second = (times < 50).sum(), (times >= 50).sum()
    assert first == pytest.approx(500, rel=0.15)
    assert second == pytest.approx(1500, rel=0.1)
    late = times[times >= 90]
    assert len(late) / 10 == pytest.approx(38, rel=0.15)


def test_ramp_sized_by_count_spans_the_expected_time() -> None:
    times = Ramp(start_rate=2.0, rate=18.0).times(_rng(), 2000, None)
    assert len(times) == 2000
    assert times[-1] == pytest.approx(2 * 2000 / 20.0, rel=0.05)


def test_exponential_ramp_grows_by_a_constant_factor_per_second() -> None:
    # r(t) = 1 · 16^(t/100): the integral over [0, 50] is 100·(4-1)/ln 16 ≈ 108.2 and
    # over [50, 100] 100·(16-4)/ln 16 ≈ 432.8 (four times as many: the rate quadrupled)
    ramp = Ramp(start_rate=1.0, rate=16.0, shape="exponential")
    times = ramp.times(_rng(), None, 100.0)
    first, second = (times < 50).sum(), (times >= 50).sum()
    assert first == pytest.approx(108.2, rel=0.2)
    assert second == pytest.approx(432.8, rel=0.1)
    # sized by a count, it spans count · ln(r1/r0) / (r1 - r0)
    counted = Ramp(start_rate=2.0, rate=18.0, shape="exponential").times(_rng(), 2000, None)
    assert counted[-1] == pytest.approx(2000 * np.log(9.0) / 16.0, rel=0.05)
    assert make_arrival("ramp", rate=4, start_rate=1, ramp="exponential") == Ramp(
        1.0, 4.0, "exponential"
    )
    with pytest.raises(InputError, match="cannot start at 0"):
        make_arrival("ramp", rate=4, start_rate=0, ramp="exponential")


def test_trace_times_scale() -> None:
    trace = TraceTimes((0.0, 1.0, 2.5, 4.0), time_scale=0.5)
    assert trace.times(_rng(), None, None).tolist() == [0.0, 0.5, 1.25, 2.0]
    assert trace.times(_rng(), None, 1.3).tolist() == [0.0, 0.5, 1.25]
    assert trace.times(_rng(), 2, None).tolist() == [0.0, 0.5]


def test_closed_loop_has_no_schedule() -> None:
    assert ClosedLoop(4).times(_rng(), 10, None) is None


def test_same_generator_state_gives_the_same_schedule() -> None:
    a = Gamma(3.0, 2.0).times(np.random.default_rng(9), 500, None)
    b = Gamma(3.0, 2.0).times(np.random.default_rng(9), 500, None)
    c = Gamma(3.0, 2.0).times(np.random.default_rng(10), 500, None)
    assert np.array_equal(a, b)
    assert not np.array_equal(a, c)


def test_make_arrival_builds_each_process() -> None:
    assert make_arrival("poisson", rate=2) == Poisson(2.0)
    assert make_arrival("gamma", rate=2, cv=3) == Gamma(2.0, 3.0)
    assert make_arrival("constant", rate=2) == ConstantRate(2.0)
    assert make_arrival("ramp", rate=2, start_rate=0.5) == Ramp(0.5, 2.0)
    assert make_arrival("closed", concurrency=3) == ClosedLoop(3)
    assert make_arrival("trace", trace_offsets_s=(0.0, 1.0), time_scale=2) == TraceTimes(
        (0.0, 1.0), 2.0
    )


@pytest.mark.parametrize(
    ("name", "kwargs", "field"),
    [
        ("poisson", {"rate": 0}, "rate"),
        ("poisson", {"rate": -1}, "rate"),
        ("poisson", {"rate": float("nan")}, "rate"),
        ("ramp", {"rate": float("inf")}, "rate"),  # a ramp to infinity has no shape
        ("gamma", {"rate": 1, "cv": 0}, "cv"),
        ("ramp", {"rate": 1, "start_rate": -1}, "start_rate"),
        ("closed", {"concurrency": 0}, "concurrency"),
        ("trace", {}, "arrival"),
        ("burst", {"rate": 1}, "arrival"),
    ],
)
def test_bad_arrival_settings_are_input_errors(name: str, kwargs: dict, field: str) -> None:
    with pytest.raises(InputError) as info:
        make_arrival(name, **kwargs)
    assert info.value.field == field


@pytest.mark.parametrize("name", ["poisson", "gamma", "constant"])
def test_an_infinite_rate_sends_everything_at_once(name: str) -> None:
    """``--rate inf`` as in ``vllm bench serve``: every request is due at t=0."""
    times = make_arrival(name, rate=float("inf")).times(np.random.default_rng(0), 50, None)
    assert len(times) == 50 and not times.any()
