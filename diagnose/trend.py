"""How one quantity tracks another: a least-squares slope with a cluster-bootstrap interval.

"ITL rises with the number of running requests" is a slope, and the gaps it is fitted
to come in clusters — a request's gaps share its context and its neighbours — so the
interval resamples requests, not gaps (a gap-level interval would be far too narrow).
The slope of a resample is read from per-request sums (n, Σx, Σy, Σx², Σxy), so a
resample costs one weighted sum per request (``diagnose.stats``' weight machinery).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import sparse

from diagnose.metrics import CONFIDENCE
from diagnose.resample import resample_sums
from runtime.quantiles import quantiles


@dataclass(frozen=True)
class Trend:
    """dy/dx with its interval; ``units`` clusters behind it."""

    slope: float
    ci_low: float
    ci_high: float
    units: int

    @property
    def rising(self) -> bool:
        return bool(self.ci_low > 0)


def _slope(sums: np.ndarray) -> np.ndarray:
    """OLS slope from columns n, Σx, Σy, Σx², Σxy (one row per resample)."""
    n, sx, sy, sxx, sxy = sums.T
    with np.errstate(invalid="ignore", divide="ignore"):
        return (n * sxy - sx * sy) / (n * sxx - sx * sx)


def fit_trend(
    x: np.ndarray,
    y: np.ndarray,
    clusters: np.ndarray,
    *,
    resamples: int = 1000,
    seed: int = 0,
    confidence: float = CONFIDENCE,
) -> Trend | None:
    """Slope of ``y`` on ``x``; None when x does not vary or there are under 3 clusters."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    keep = np.isfinite(x) & np.isfinite(y)
    x, y = x[keep], y[keep]
    codes, _ = pd.factorize(np.asarray(clusters)[keep])
    units = int(codes.max()) + 1 if codes.size else 0
    if units < 3 or x.size == 0 or np.ptp(x) == 0:
        return None
    columns = [np.ones_like(x), x, y, x * x, x * y]
    per_unit = np.stack([np.bincount(codes, weights=c, minlength=units) for c in columns], axis=1)
    slope = float(_slope(per_unit.sum(axis=0, keepdims=True))[0])
    replicates = _slope(resample_sums(sparse.csr_matrix(per_unit), resamples, seed))
    # A resample whose requests all ran at one batch size has no slope (0/0, x/0).
    replicates = np.where(np.isfinite(replicates), replicates, np.nan)
    alpha = 1.0 - confidence
    low, high = quantiles(replicates, (alpha / 2, 1 - alpha / 2))
    return Trend(slope, float(low), float(high), units)
