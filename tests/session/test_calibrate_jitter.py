"""The step jitter ``simulate --calibrate`` widens replayed gaps by: each residual its share."""

from __future__ import annotations

import numpy as np

from session.calibrate import JITTER_QUANTILES, jitter_quantiles, widened


def test_a_rare_stall_weighs_its_share_in_the_widened_tail() -> None:
    # 998 residuals spread over 0–1 ms and two stalls of 50 ms (0.2 % of the steps);
    # replayed gaps: 995 decode steps of 5 ms and 5 chunk steps of 40 ms (0.5 %)
    residuals = np.concatenate([np.linspace(0.0, 1e-3, 998), [0.05, 0.05]])
    gaps = np.concatenate([np.full(995, 5e-3), np.full(5, 0.04)])
    jitter = np.asarray(jitter_quantiles(residuals))
    assert jitter.size == JITTER_QUANTILES
    seen = widened(gaps, jitter)
    exact = (gaps[:, None] + residuals[None, :]).ravel()  # every gap with every residual
    p50, p99 = np.quantile(seen, (0.5, 0.99))
    true50, true99 = np.quantile(exact, (0.5, 0.99))
    # the stalls are 0.2 % of the steps: with the chunk steps' 0.5 % they stay under 1 %,
    # so p99 is a decode step plus ordinary jitter (~6 ms), not a stall (~55 ms)
    assert abs(p99 - true99) < 2e-4 and p99 < 0.01, (p99, true99)
    assert abs(p50 - true50) < 2e-5


def test_no_residual_is_no_jitter() -> None:
    assert jitter_quantiles(np.zeros(0)) == [0.0]
