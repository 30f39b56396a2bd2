"""The stall event: one long prompt's prefill, and what it did to the decodes beside it.

A chunk-size A/B asks whether a long prefill stalls the decode streams running with it.
Pooled over a run, stalls are rare gaps (a 12k-token prompt at budget 8192 is two steps
among hundreds), so a pooled p99 of gaps sits on a cliff: one stall more or less above the
quantile moves it many-fold, and its interval spans "25× worse" to "no change" even when
every prefill stalled the decodes alike. The unit the question is about is the prefill
itself. Each long prompt (a request of the plan's prefill-heavy kind,
``ab_metrics.prefill_kind``) is one *event*, over the time its prefill was in flight, from
its send (``sent_s``) to its first token (``first_token_s``):

* ``stall`` — the worst decode gap overlapping that interval (the longest the decode
  streams waited for a token while it was prefilled);
* ``lost`` — the decode time it cost: over the decode streams' gaps overlapping the
  interval, the sum of each gap's excess over the trial's normal step (the median gap
  of the decode streams);
* ``ttft`` — that prompt's TTFT (from its intended send).

Arms are compared over events (n = long prompts, trials pooled), each metric's mean as a
ratio with a bootstrap interval from resampling events (``stats.compare_stats``; fewer
than ``stats.MIN_UNITS`` events in an arm: inconclusive, with the events that would
do). Events are taken as independent: prefills that overlap share the gaps they both
cover. ``benchmarks/ab_event_calibration.py`` measures the false-positive and detection
rates of this comparison on the virtual-time engine.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from diagnose.resample import Sample, resampled_statistics
from diagnose.stats import Comparison, compare_stats
from probes.metric_registry import json_name
from runtime.quantiles import quantiles

#: The per-event metrics, as ``ab.json`` names them, and how a verdict reads them.
EVENT_METRICS = {
    "event_stall": "worst decode gap per prefill",
    "event_lost": "decode time lost per prefill",
    "event_ttft": "TTFT per long prompt",
}
#: The per-event metric the stall is judged on.
EVENT_STALL = "event_stall"
METHOD = "events (bootstrap of the per-event mean)"


@dataclass(frozen=True)
class StallEvents:
    """Per event (a long prompt's prefill): its worst decode gap, the decode time it cost
    and its TTFT, in seconds."""

    stall_s: np.ndarray
    lost_s: np.ndarray
    ttft_s: np.ndarray
    #: Long prompts with no decode gap beside their prefill (nothing to stall): not events.
    alone: int = 0

    @classmethod
    def empty(cls) -> StallEvents:
        return cls(np.empty(0), np.empty(0), np.empty(0))

    @classmethod
    def measure(
        cls,
        starts: Sequence[float],
        ends: Sequence[float],
        ttfts: Sequence[float],
        gap_s: np.ndarray,
        gap_end_s: np.ndarray,
    ) -> StallEvents:
        """The events of one trial: each prefill's interval ``[start, end]`` and TTFT,
        and the decode streams' gaps (each spans ``[end - gap, end]``). A prefill no
        decode gap overlaps (the streams had ended) is counted in ``alone``."""
        gap_s, gap_end_s = np.asarray(gap_s, float), np.asarray(gap_end_s, float)
        normal = float(np.median(gap_s)) if len(gap_s) else 0.0
        excess = np.maximum(gap_s - normal, 0.0)
        stall, lost, ttft = [], [], []
        for start, end, first in zip(starts, ends, ttfts, strict=True):
            overlaps = (gap_end_s > start) & (gap_end_s - gap_s < end)
            if np.isfinite(start) and np.isfinite(end) and overlaps.any():
                stall.append(float(gap_s[overlaps].max()))
                lost.append(float(excess[overlaps].sum()))
                ttft.append(float(first))
        alone = len(starts) - len(stall)
        return cls(np.asarray(stall), np.asarray(lost), np.asarray(ttft, float), alone)

    @classmethod
    def concat(cls, events: Sequence[StallEvents]) -> StallEvents:
        if not events:
            return cls.empty()
        arrays = (np.concatenate([getattr(e, f) for e in events]) for f in cls._fields())
        return cls(*arrays, alone=sum(e.alone for e in events))

    @staticmethod
    def _fields() -> tuple[str, str, str]:
        return ("stall_s", "lost_s", "ttft_s")

    def __len__(self) -> int:
        return len(self.ttft_s)

    def values(self, metric: str) -> np.ndarray:
        """The per-event values of ``metric`` (an ``EVENT_METRICS`` name)."""
        field = dict(zip(EVENT_METRICS, self._fields(), strict=True))[metric]
        return getattr(self, field)

    def scaled(self, metric: str, factor: float) -> StallEvents:
        """These events with ``metric``'s values multiplied by ``factor`` (a planted effect)."""
        field = dict(zip(EVENT_METRICS, self._fields(), strict=True))[metric]
        return replace(self, **{field: getattr(self, field) * factor})


def compare_events(
    base: StallEvents,
    new: StallEvents,
    *,
    resamples: int,
    confidence: float,
    seed: Any = 0,
) -> dict[str, Comparison]:
    """NEW/BASE of each per-event metric's mean, with an interval from resampling events."""
    out = {}
    for metric in EVENT_METRICS:
        (found,) = compare_stats(
            Sample.of(base.values(metric)),
            Sample.of(new.values(metric)),
            {metric: "mean"},
            resamples=resamples,
            confidence=confidence,
            seed=seed,
            names=("events", "events"),
        )
        out[metric] = replace(found, method=METHOD)
    return out


def _known(value: float) -> float | None:
    return float(value) if np.isfinite(value) else None


def event_summary(
    events: StallEvents, resamples: int, confidence: float, seed: int
) -> dict[str, Any]:
    """An arm's ``events`` block in ``ab.json``: the count, and per metric the mean with
    its bootstrap interval over events (none below two events)."""
    out: dict[str, Any] = {"count": len(events), "alone": events.alone}
    alpha = 1.0 - confidence
    for metric in EVENT_METRICS:
        sample = Sample.of(events.values(metric))
        mean = float(np.mean(sample.values)) if len(sample.values) else float("nan")
        interval: list[float | None] = [None, None]
        if sample.n_units >= 2:
            replicates = resampled_statistics(sample, ["mean"], resamples, seed)["mean"]
            low, high = quantiles(replicates, (alpha / 2.0, 1.0 - alpha / 2.0))
            interval = [_known(low), _known(high)]
        out[json_name(metric, part="mean")] = _known(mean)
        out[json_name(metric, part="interval")] = interval
    return out
