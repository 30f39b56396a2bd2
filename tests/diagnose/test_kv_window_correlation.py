"""``diagnose.h3_bandwidth.window_correlation``: ITL tracked against KV traffic over time
windows, with the cases it declines to read. (H1–H3's verdicts are exercised through
``run_checklist`` in ``test_diagnose_checklist.py`` and ``test_diagnose_roofline.py``.)"""

from __future__ import annotations

import numpy as np
import pytest

from diagnose.attribution import DecodeGaps
from diagnose.h3_bandwidth import MIN_WINDOWS, WINDOWS, window_correlation


def _gaps(n: int, gap_s: np.ndarray) -> DecodeGaps:
    t = np.linspace(0.0, 10.0, n)
    ones = np.ones(n)
    return DecodeGaps(np.zeros(n, dtype=int), t - 0.01, t, gap_s, ones, ones)


def test_itl_that_rises_with_kv_bytes_has_a_rank_correlation_of_one():
    n = 200
    kv = np.linspace(1e6, 2e6, n)
    rho, p, windows = window_correlation(_gaps(n, kv / 1e8), kv)
    assert rho == pytest.approx(1.0) and p < 0.01 and windows == WINDOWS


def test_itl_that_falls_as_kv_rises_is_negative():
    n = 200
    kv = np.linspace(1e6, 2e6, n)
    rho, _, _ = window_correlation(_gaps(n, 1.0 / kv), kv)
    assert rho == pytest.approx(-1.0)


def test_too_few_gaps_or_flat_kv_traffic_say_nothing():
    few = MIN_WINDOWS * 5 - 1
    assert window_correlation(_gaps(few, np.ones(few)), np.arange(few, dtype=float)) is None
    n = 200
    flat = np.full(n, 1e6) + np.linspace(0, 1e3, n)  # under 5 % of the mean: not a change
    assert window_correlation(_gaps(n, np.linspace(0.01, 0.02, n)), flat) is None
