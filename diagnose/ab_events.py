"""The chunk-size A/B's stall events compared between arms.

What a stall event is — a long prompt's prefill, its worst decode gap (``stall``), the
decode time it cost (``lost``) and its TTFT — is defined once, in ``probes.stall_events``
(``summary.json`` and ``compare`` read the same events).

**Events nested in trials, the trials the units.** Each trial's statistic is the mean of
a metric over that trial's events; the arms are compared on those per-trial means by
``trials.compare_trials``' random-effects rule (Welch t on the trials' logs, never
narrower than the trials' own sampling plus the between-trial variance), as every other
A/B metric is. Events within a trial are not independent — long prefills that arrive
faster than they are served queue behind one another and share the gaps they overlap
(lag-one correlation ~0.5 on ``compare``'s stall traffic) — and trials differ by more
than their events' scatter (the moment the prompts land, the machine): resampling the
events of all trials pooled as independent read both as a difference, and named an A/A
winner ("worst decode gap per prefill −9.3 % [−17, −2.0]"). The mean of a trial's
events carries whatever correlation they have into the spread between trials, which the
t interval measures. Fewer than ``stats.MIN_UNITS`` events in an arm is inconclusive,
with the trials that would give them. ``benchmarks/ab_event_calibration.py`` measures
the A/A winner and detection rates of the whole decision on the virtual-time engine.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from diagnose.resample import Sample
from diagnose.stats import Comparison
from diagnose.trials import compare_trials
from probes.stall_events import STALL_FIELDS, StallEvents, mean_interval
from runfmt.abresult import EventBlock
from runfmt.metrics import AB_EVENTS, json_name

#: The per-event metrics, as ``ab.json`` names them, and how a verdict reads them.
EVENT_METRICS = {name: metric.label for name, metric in AB_EVENTS.items()} | {
    "event_ttft": "TTFT per long prompt",
}
#: The ``StallEvents`` field of each per-event metric.
_FIELDS = {name: STALL_FIELDS[metric.key] for name, metric in AB_EVENTS.items()} | {
    "event_ttft": "ttft_s"
}
#: The per-event metric the stall is judged on.
EVENT_STALL = "event_stall"
#: What each trial's statistic is (``trials.compare_trials``' method text).
OF = " (each trial's mean over its events)"


def event_values(events: StallEvents, metric: str) -> np.ndarray:
    """The per-event values of ``metric`` (an ``EVENT_METRICS`` name)."""
    return events.field(_FIELDS[metric])


def scaled(events: StallEvents, metric: str, factor: float) -> StallEvents:
    """``events`` with ``metric``'s values multiplied by ``factor`` (a planted effect)."""
    return events.scaled(_FIELDS[metric], factor)


def compare_events(
    base: Sequence[StallEvents],
    new: Sequence[StallEvents],
    *,
    resamples: int,
    confidence: float,
    seed: Any = 0,
    levels: Mapping[str, float] | None = None,
) -> dict[str, Comparison]:
    """NEW/BASE of each per-event metric's mean, the trials as units: each trial's mean
    over its events (``base`` and ``new`` hold an arm's trials' events), compared by
    ``trials.compare_trials``' random-effects rule; ``levels`` as there."""
    out = {}
    for metric in EVENT_METRICS:
        (found,) = compare_trials(
            [Sample.of(event_values(trial, metric)) for trial in base],
            [Sample.of(event_values(trial, metric)) for trial in new],
            {metric: "mean"},
            resamples=resamples,
            confidence=confidence,
            seed=seed,
            levels=levels,
            names=("events", "events"),
            of=OF,
        )
        out[metric] = found
    return out


def _known(value: float) -> float | None:
    return float(value) if np.isfinite(value) else None


def event_summary(events: StallEvents, resamples: int, confidence: float, seed: int) -> EventBlock:
    """An arm's ``events`` block in ``ab.json``: the count, and per metric the mean with
    its bootstrap interval over events (``stall_events.mean_interval``; none below two
    events)."""
    out: dict[str, Any] = {}
    for metric in EVENT_METRICS:
        values = event_values(events, metric)
        mean = float(np.mean(values)) if len(values) else float("nan")
        interval = mean_interval(values, confidence, resamples, seed)
        out[json_name(metric, part="mean")] = _known(mean)
        out[json_name(metric, part="interval")] = list(interval) if interval else [None, None]
    return EventBlock.of(len(events), events.alone, out)
