"""The one quantile definition, and the named summary statistics built on it.

Every quantile the project computes from samples is this module's, so a "p99" means the
same number in ``summary.json``, the comparison of two runs, the A/B verdicts, the
simulator's and the calibration's figures, the workload statistics and the report:
numpy's default (linear interpolation between order statistics) over the finite values.
Unknown values (NaN) are not samples: a request with one output token has no TPOT, and
it must not count as a zero. A leaf module (numpy only), so that the simulator and the
workloads, which import no probes, use it as well; ``tests/runtime/test_one_quantile.py``
fails on a numpy or pandas quantile anywhere else.

One other definition is kept, by name, for the one caller that needs it:
``inverted_cdf_quantiles`` (values of the sample itself, never between two). A server's
histogram has buckets, not samples: its estimate is ``probes.canonical.Histogram``'s
``bucket_quantile``, PromQL's rule.

numpy is imported by the functions, not the module: the CLI shows the statistics' names
in its ``--help`` (``compare --metric``), which must not wait for numpy.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

#: Quantile statistics by name, as percentages.
QUANTILES: dict[str, float] = {"p50": 50.0, "p90": 90.0, "p95": 95.0, "p99": 99.0, "p999": 99.9}

#: Every statistic a metric can be summarised by.
STATISTICS: tuple[str, ...] = ("mean", *QUANTILES)


def finite(values: Iterable[float] | np.ndarray) -> np.ndarray:
    """The finite values as a float array (NaN/inf dropped: unknown is not a sample)."""
    import numpy as np

    arr = np.asarray(values, dtype=float).ravel()
    return arr[np.isfinite(arr)]


def quantile(values: Iterable[float] | np.ndarray, q: float) -> float:
    """The ``q`` quantile (0 to 1) of the finite values, numpy's linear interpolation; NaN
    for no samples. Every quantile a report, a view or a check shows is this one."""
    import numpy as np

    arr = finite(values)
    return float(np.quantile(arr, q)) if arr.size else float("nan")


def quantiles(values: Iterable[float] | np.ndarray, qs: Iterable[float]) -> list[float]:
    """``quantile`` at each of ``qs``, sorting the values once."""
    import numpy as np

    arr, levels = finite(values), list(qs)
    if arr.size == 0:
        return [float("nan")] * len(levels)
    return [float(v) for v in np.quantile(arr, levels)]


def statistic(values: Iterable[float] | np.ndarray, name: str) -> float:
    """One named statistic (``mean`` or a key of ``QUANTILES``); NaN for no samples."""
    import numpy as np

    if name not in STATISTICS:
        raise KeyError(f"unknown statistic {name!r}; known: {', '.join(STATISTICS)}")
    arr = finite(values)
    if arr.size == 0:
        return float("nan")
    if name == "mean":
        return float(arr.mean())
    return float(np.percentile(arr, QUANTILES[name]))


def describe(values: Iterable[float] | np.ndarray) -> dict[str, float | int | None]:
    """Mean, p50/p90/p95/p99/p99.9 and the sample count; ``None`` values when empty."""
    import numpy as np

    arr = finite(values)
    if arr.size == 0:
        return {name: None for name in STATISTICS} | {"count": 0}
    quantiles = np.percentile(arr, list(QUANTILES.values()))
    out: dict[str, float | int | None] = {"mean": float(arr.mean())}
    out.update({name: float(q) for name, q in zip(QUANTILES, quantiles, strict=True)})
    out["count"] = int(arr.size)
    return out


def inverted_cdf_quantiles(values: Iterable[float] | np.ndarray, qs: Iterable[float]) -> np.ndarray:
    """At each of ``qs``, the smallest finite value whose share of values at or below it
    reaches the level (numpy's ``inverted_cdf``): always a value of the sample, never one
    between two. Not a figure anyone is shown: ``diagnose.resample`` spreads the grid it
    locates resampled quantiles on with it, and a grid point that is a sample value is an
    order statistic, counted exactly at that point. An array (a grid has thousands of
    levels); NaN at each level when no samples."""
    import numpy as np

    arr, levels = finite(values), np.asarray(list(qs), dtype=float)
    if arr.size == 0:
        return np.full(levels.shape, np.nan)
    return np.quantile(arr, levels, method="inverted_cdf")
