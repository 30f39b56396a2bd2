"""Slopes with cluster-bootstrap intervals (``diagnose.trend``)."""

from __future__ import annotations

import numpy as np
import pytest

from diagnose.trend import fit_trend


def _clustered(slope: float, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """40 requests, each at its own batch size, 30 gaps each with a shared offset."""
    rng = np.random.default_rng(seed)
    running = np.repeat(rng.integers(1, 30, 40), 30)
    clusters = np.repeat(np.arange(40), 30)
    offset = np.repeat(rng.normal(0, 0.002, 40), 30)  # what a request's gaps share
    y = 0.007 + slope * running + offset + rng.normal(0, 0.0005, running.size)
    return running.astype(float), y, clusters


def test_a_planted_slope_is_recovered_inside_its_interval():
    x, y, clusters = _clustered(0.001)
    trend = fit_trend(x, y, clusters, resamples=500)
    assert trend is not None and trend.units == 40
    assert trend.ci_low < 0.001 < trend.ci_high
    assert trend.rising


def test_no_slope_gives_an_interval_around_zero():
    x, y, clusters = _clustered(0.0, seed=3)
    trend = fit_trend(x, y, clusters, resamples=500)
    assert trend is not None and trend.ci_low < 0 < trend.ci_high
    assert not trend.rising


def test_clusters_widen_the_interval_over_a_gap_level_fit():
    x, y, clusters = _clustered(0.0005, seed=5)
    by_request = fit_trend(x, y, clusters, resamples=500)
    by_gap = fit_trend(x, y, np.arange(x.size), resamples=500)
    assert by_request is not None and by_gap is not None
    assert by_request.slope == pytest.approx(by_gap.slope)
    width = by_request.ci_high - by_request.ci_low
    assert width > 2 * (by_gap.ci_high - by_gap.ci_low)


def test_no_spread_or_too_few_clusters_gives_none():
    assert fit_trend(np.ones(50), np.arange(50.0), np.arange(50)) is None
    assert fit_trend(np.arange(10.0), np.arange(10.0), np.repeat([0, 1], 5)) is None
