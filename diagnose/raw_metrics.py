"""Server series the canonical mapping does not carry, read from the raw scrapes.

``probes.normalise`` reduces every flavour to the canonical series the reports share.
A diagnosis also wants a few engine-specific ones when a server exposes them — the
embedded engine's step time by step kind (``prefillscope_engine_step_seconds{kind}``)
and its prefix-cache evictions (``prefillscope_engine_prefix_evictions_total``). The
scraper keeps every sample it saw (``server_metrics``, long format), so they are read
back here by name and labels; a server that never exposed one gives ``None`` (unknown,
never 0).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping

import numpy as np
import pandas as pd

from probes.canonical import Histogram


class RawMetrics:
    """The raw samples of one run, queried by metric name and labels."""

    def __init__(self, samples: pd.DataFrame) -> None:
        self.samples = samples
        self._labels: dict[str, dict[str, str]] = {}

    def has(self, metric: str) -> bool:
        return not self.samples.empty and bool((self.samples["metric"] == metric).any())

    def _decoded(self, text: str) -> dict[str, str]:
        found = self._labels.get(text)
        if found is None:
            found = self._labels[text] = json.loads(text) if text else {}
        return found

    def rows(self, metric: str, labels: Mapping[str, str] | None = None) -> pd.DataFrame:
        """``t_s``, ``value`` and decoded ``labels`` of the samples of ``metric`` whose
        labels include ``labels``, in time order."""
        if self.samples.empty:
            return pd.DataFrame({"t_s": [], "value": [], "labels": []})
        picked = self.samples[self.samples["metric"] == metric]
        decoded = [self._decoded(text) for text in picked["labels"]]
        keep = [all(d.get(k) == v for k, v in (labels or {}).items()) for d in decoded]
        out = pd.DataFrame(
            {
                "t_s": picked["t_s"].to_numpy(dtype=float),
                "value": picked["value"].to_numpy(dtype=float),
                "labels": decoded,
            }
        )[np.asarray(keep, dtype=bool)]
        return out.sort_values("t_s", kind="stable").reset_index(drop=True)

    def counter_increase(
        self, metric: str, labels: Mapping[str, str] | None = None
    ) -> float | None:
        """Reset-aware increase of a counter over the run (label sets summed per scrape)."""
        rows = self.rows(metric, labels)
        if rows.empty:
            return None
        totals = rows.groupby("t_s")["value"].sum().to_numpy()
        if totals.size < 2:
            return None
        steps = np.diff(totals)
        restarted = steps < 0  # a restarted server counts from zero again
        steps[restarted] = totals[1:][restarted]
        return float(steps.sum())

    def histogram_increase(
        self, metric: str, labels: Mapping[str, str] | None = None
    ) -> Histogram | None:
        """Observations of a histogram between the first and the last scrape that carried
        it (a reset in between keeps only what the last scrape shows, as Prometheus does)."""
        buckets = self.rows(f"{metric}_bucket", labels)
        if buckets.empty:
            return None
        times = buckets["t_s"].unique()
        first = self._histogram_at(metric, labels, buckets, float(times[0]))
        last = self._histogram_at(metric, labels, buckets, float(times[-1]))
        return last.minus(first) if len(times) > 1 else None

    def _histogram_at(
        self,
        metric: str,
        labels: Mapping[str, str] | None,
        buckets: pd.DataFrame,
        t_s: float,
    ) -> Histogram:
        at = buckets[buckets["t_s"] == t_s]
        by_bound: dict[float, float] = {}
        for value, lbl in zip(at["value"], at["labels"], strict=True):
            bound = float(lbl.get("le", "+Inf"))
            by_bound[bound] = by_bound.get(bound, 0.0) + float(value)
        bounds = tuple(sorted(by_bound))
        cumulative = tuple(by_bound[b] for b in bounds)
        total = self._scalar_at(f"{metric}_sum", labels, t_s)
        count = self._scalar_at(f"{metric}_count", labels, t_s)
        return Histogram(
            bounds,
            cumulative,
            count if count is not None else (cumulative[-1] if cumulative else 0.0),
            total if total is not None else math.nan,
        )

    def _scalar_at(self, metric: str, labels: Mapping[str, str] | None, t_s: float) -> float | None:
        rows = self.rows(metric, labels)
        rows = rows[rows["t_s"] == t_s]
        return float(rows["value"].sum()) if not rows.empty else None
