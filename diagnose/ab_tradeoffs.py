"""What the A/B's winner gives up: every reported metric it made significantly worse.

A chunk size that wins on p99 ITL can lose elsewhere — a small budget spreads each
prefill over more steps, so typical gaps (ITL p50/p95) grow while the tail shrinks; a
large one keeps the p99 low when stalls are rarer than 1 % of gaps, but each stall is
longer (ITL max). The verdict must say so. After the decision, the winner is compared
with every other arm on every metric the A/B reports (``ab_metrics.reported_metrics``);
a metric counts as a trade-off when the comparison is significant (``Comparison
.significant``, the same rule that picked the winner) and on the worse side — higher for
latencies, lower for throughput. ``verdict.tradeoffs`` lists them; the verdict's
sentence ends with them in words.

Every reported metric counts, the per-event ones too: a long prompt's TTFT per event
(``event_ttft``) can be significantly worse where the pooled p50 of its kind is not. A
significant cost smaller than ``--min-effect`` is still listed, marked as under it
(``runfmt.abresult.Tradeoff.under_min_effect``: its point estimate is within
±min-effect of no change), so the reader sees it and knows the rule would not have weighed it.

Each metric is judged on its own at the A/B's confidence, exactly as the comparisons
table marks it, with no correction for the ~15 metrics looked at: were the arms alike,
each would still be called worse with probability (1 − confidence)/2, so a trade-off
whose interval barely clears no change is a reason to rerun with more trials, not a
finding. Without a winner nothing is listed (the comparisons table shows every metric).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from diagnose.ab_events import EVENT_METRICS, EVENT_STALL
from diagnose.ab_metrics import ITL_MAX, ab_metric_spec, higher_is_better, split_metric
from diagnose.ab_verdict import ArmLike, Decision, Verdict, percent
from diagnose.stats import Comparison
from runfmt.abresult import Tradeoff


def metric_label(name: str) -> str:
    """``ttft_p50[decode]`` → ``TTFT p50 (decode)``: the metric as the registry names it
    (``itl_max``, a trial's worst gap, as ``worst ITL gap``)."""
    base, kind = split_metric(name)
    if base in EVENT_METRICS:
        return EVENT_METRICS[base]
    spec = ab_metric_spec(base)
    label = f"worst {spec.metric.short} gap" if base == ITL_MAX else spec.named()
    return f"{label} ({kind})" if kind else label


def _times(value: float) -> str:
    return f"{value:.2g}\u00d7"


def _text(name: str, c: Comparison) -> str:
    """``ITL p50 +57 % [+40, +75]``; a maximum (or a per-event stall) as ``worst ITL gap
    3.2× [2.1×, 4.8×]``."""
    if split_metric(name)[0] in (ITL_MAX, EVENT_STALL):
        return f"{metric_label(name)} {_times(c.ratio)} [{_times(c.ci_low)}, {_times(c.ci_high)}]"
    low, high = percent(c.ci_low, False), percent(c.ci_high, False)
    return f"{metric_label(name)} {percent(c.ratio)} [{low}, {high}]"


def _worse(name: str, c: Comparison) -> bool:
    if not (c.significant and np.isfinite(c.ratio)):
        return False
    return c.ratio < 1.0 if higher_is_better(name) else c.ratio > 1.0


def _under(c: Comparison, min_effect: float) -> bool:
    return abs(c.ratio - 1.0) < min_effect


def find_tradeoffs(d: Decision, winner: ArmLike, metrics: Sequence[str]) -> list[Tradeoff]:
    """Every metric of ``metrics`` on which ``winner`` is significantly worse than another arm."""
    found = []
    for other in d.arms:
        if other.index == winner.index:
            continue
        comparisons = d.compare(other.index, winner.index)  # ratios winner / other
        for name in metrics:
            c = comparisons.get(name)
            if c is None or not _worse(name, c):
                continue
            under = _under(c, d.min_effect)
            mark = f" (under --min-effect {d.min_effect * 100:g} %)" if under else ""
            found.append(
                Tradeoff(
                    metric=name,
                    kind=split_metric(name)[1],
                    against=other.label,
                    ratio=c.ratio,
                    change=c.ratio - 1.0,
                    interval=(c.ci_low - 1.0, c.ci_high - 1.0),
                    significant=c.significant,
                    method=c.method,
                    text=_text(name, c) + mark,
                    under_min_effect=under,
                )
            )
    return found


def _and(parts: Sequence[str]) -> str:
    return parts[0] if len(parts) == 1 else f"{', '.join(parts[:-1])} and {parts[-1]}"


def tradeoff_sentence(winner: str, tradeoffs: Sequence[Tradeoff]) -> str | None:
    """``trade-off: 256 made ITL p50 +57 % […] and ITL p95 +153 % […] worse than 8192; its
    worst ITL gap is 3.2× longer than 8192's [2.1×, 4.8×]``; ``None`` when there is none."""
    clauses = []
    for other in dict.fromkeys(t.against for t in tradeoffs):
        mine = [t for t in tradeoffs if t.against == other]
        worse = [t.text for t in mine if t.metric != ITL_MAX]
        if worse:
            clauses.append(f"{winner} made {_and(worse)} worse than {other}")
        for t in mine:
            if t.metric == ITL_MAX:
                low, high = (_times(v + 1.0) for v in t.interval)
                clauses.append(
                    f"{winner}'s worst stall ({ab_metric_spec(ITL_MAX).named()}) is "
                    f"{_times(t.ratio)} {other}'s "
                    f"[{low}, {high}]"
                )
    return f"trade-off: {'; '.join(clauses)}" if clauses else None


def with_tradeoffs(verdict: Verdict, d: Decision, metrics: Sequence[str]) -> Verdict:
    """The verdict with its winner's trade-offs listed and appended to its sentence."""
    if verdict.arm is None:
        return verdict
    winner = next(a for a in d.arms if a.label == verdict.arm)
    found = find_tradeoffs(d, winner, metrics)
    sentence = tradeoff_sentence(winner.label, found)
    if sentence is None:
        return verdict
    return replace(
        verdict,
        sentence=f"{verdict.sentence}. {sentence[0].upper()}{sentence[1:]}",
        tradeoffs=tuple(found),
        tradeoff_sentence=sentence,
    )
