"""runtime.quantiles.quantile: the one quantile every report, view and check uses."""

from __future__ import annotations

import math

import numpy as np

from runtime.quantiles import describe, quantile, quantiles


def test_quantile_is_numpys_linear_interpolation_over_the_finite_values() -> None:
    values = np.random.default_rng(3).lognormal(size=997)
    assert quantile(values, 0.99) == float(np.percentile(values, 99))
    assert quantiles(values, (0.5, 0.999)) == [quantile(values, 0.5), quantile(values, 0.999)]
    assert quantile([*values, math.nan, math.inf], 0.5) == quantile(values, 0.5)
    assert quantile(values, 0.99) == describe(values)["p99"]


def test_no_samples_is_nan_not_zero() -> None:
    assert math.isnan(quantile([], 0.5))
    assert all(math.isnan(v) for v in quantiles([math.nan], (0.5, 0.99)))
