"""Which chunk size to run: the A/B's decision rule and its one-sentence verdict.

The rule (stated in ``ab.json`` as ``verdict.rule``):

1. No verdict when the conditions did not match (``ab_conditions``).
2. With SLOs (``--slo itl=…`` on p99 ITL, ``ttft=…`` on p99 TTFT), only arms meeting every
   one (point estimates) are candidates. None: no winner. One: it wins when it is
   significantly better than each other arm on a metric that arm misses.
3. Among several candidates, metrics are taken in priority order — with an ITL SLO,
   p50 TTFT first (ITL is already bounded, so the largest chunk that meets it buys the
   best TTFT); otherwise p99 ITL first (what the token budget protects), then p50 TTFT.
   For each metric, the arms significantly worse than the best one drop out; a single
   arm left is the winner. Several left after both metrics: no significant difference.

The p50 TTFT weighed is that of the prefill-heavy request kind when the traffic mixes
kinds (``ab_metrics.prefill_kind``: the long prompts of ``interference``), not the pooled
one, which falls between the kinds. ``rule_text`` states the rule as applied, in words
(``verdict.rule``); what the winner gives up is ``ab_tradeoffs``'.

"Significantly better" is ``Comparison.significant`` (decided, and the interval excludes
1) with the ratio on the better side, from ``compare_trials`` over the trials
of the two arms. Every winner is thus backed by a significant pairwise comparison.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Protocol

from diagnose.ab_conditions import Conditions
from diagnose.metrics import metric_spec
from diagnose.stats import Comparison
from probes.slo import Slo


def sentence_name(metric: str) -> str:
    """How a metric reads in a verdict: the statistic first, the metric as the registry
    names it (``itl_p99`` → ``p99 ITL``, ``ttft_p50[long-prompt]`` → ``p50 TTFT
    (long-prompt)``)."""
    base, _, kind = metric.partition("[")
    name = metric_spec(base).named(stat_first=True)
    return f"{name} ({kind[:-1]})" if kind else name


def _value_text(metric: str, value: float) -> str:
    """A value of ``metric`` (kind suffix allowed) in the registry entry's unit."""
    return metric_spec(metric.partition("[")[0]).metric.format(value)


#: The metric the decision weighs first without an ITL SLO, and the SLO metrics.
ITL_KEY, ITL_SLO, TTFT_SLO = "itl_p99", "itl_p99", "ttft_p99"
RULE = (
    f"refuse unless conditions matched; candidates meet every SLO (ITL on "
    f"{sentence_name(ITL_SLO)}, TTFT on {sentence_name(TTFT_SLO)}); then "
    f"{sentence_name('ttft_p50')} first with an ITL SLO, else {sentence_name(ITL_KEY)} first, "
    "then the other; arms significantly worse than the best drop out; one left wins"
)
MINUS = "\u2212"

#: ``compare(base, new)``: each metric's Comparison of arm ``new`` against arm ``base``.
Compare = Callable[[int, int], Mapping[str, Comparison]]


class ArmLike(Protocol):
    index: int
    chunk: int
    label: str


@dataclass(frozen=True)
class Verdict:
    """The winner's chunk size (``None``: no verdict or no significant difference)."""

    winner: int | None
    arm: str | None
    sentence: str
    #: The metrics that separated the winner from the rest (``["slo"]`` for rule 2).
    decided_by: list[str]
    refused: bool
    rule: str = RULE
    #: What the winner made significantly worse (``ab_tradeoffs.Tradeoff.to_dict``).
    tradeoffs: list[dict[str, Any]] = field(default_factory=list)
    #: The trade-offs in words (also the end of ``sentence``); ``None`` when there are none.
    tradeoff_sentence: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def percent(ratio: float, unit: bool = True) -> str:
    """A ratio as a signed change: 0.62 → ``−38 %`` (``−38`` without the unit)."""
    change = (ratio - 1.0) * 100.0
    digits = 0 if abs(change) >= 10 else 1
    text = f"{abs(change):.{digits}f}"
    sign = "+" if change > 0 else (MINUS if change < 0 and float(text) > 0 else "")
    return f"{sign}{text}{' %' if unit else ''}"


def change_text(
    ratio: float, low: float, high: float, significant: bool, inconclusive: bool = False
) -> str:
    """``−38 % [−45, −30]``, marked ``n.s.`` when not significant, ``inconclusive`` when
    the data cannot decide (too few requests or values beyond the quantile)."""
    text = f"{percent(ratio)} [{percent(low, False)}, {percent(high, False)}]"
    if inconclusive:
        return f"{text} inconclusive"
    return text if significant else f"{text} n.s."


def change(c: Comparison) -> str:
    return change_text(c.ratio, c.ci_low, c.ci_high, c.significant, c.inconclusive is not None)


def slo_text(slo: Slo | None) -> str:
    parts = []
    bounds = (None, None) if slo is None else (slo.itl_s, slo.ttft_s)
    for name, bound in zip((ITL_SLO, TTFT_SLO), bounds, strict=True):
        if bound is not None:
            spec = metric_spec(name)
            parts.append(f"{spec.named()} \u2264 {spec.metric.format(bound)}")
    return " and ".join(parts)


def violated(stats: Mapping[str, float], slo: Slo | None) -> list[str]:
    """The key metrics on which an arm misses an SLO (``itl_p99``, ``ttft_p99``)."""
    missed = []
    if slo is not None and slo.itl_s is not None and not stats[f"{ITL_SLO}_s"] <= slo.itl_s:
        missed.append(ITL_SLO)
    if slo is not None and slo.ttft_s is not None and not stats[f"{TTFT_SLO}_s"] <= slo.ttft_s:
        missed.append(TTFT_SLO)
    return missed


@dataclass(frozen=True)
class Decision:
    """Everything the rule looks at."""

    arms: Sequence[ArmLike]
    stats: Sequence[Mapping[str, float]]
    compare: Compare
    reference: int
    slo: Slo | None
    #: The TTFT metric weighed: ``ttft_p50``, or ``ttft_p50[KIND]`` of the prefill-heavy kind.
    ttft: str = "ttft_p50"

    @property
    def keys(self) -> dict[str, str]:
        """The metrics the decision is made on and how they read in a sentence."""
        return {metric: sentence_name(metric) for metric in (ITL_KEY, self.ttft)}

    def value(self, arm: ArmLike, metric: str) -> float:
        return self.stats[arm.index][f"{metric}_s"]

    def better(self, better: ArmLike, worse: ArmLike, metric: str) -> bool:
        """Whether ``better`` is significantly lower than ``worse`` on ``metric``."""
        c = self.compare(worse.index, better.index)[metric]
        return c.significant and c.ratio < 1.0

    def head(self) -> str:
        """The measured trade-off, before the decision."""
        ref = self.arms[self.reference]
        if len(self.arms) == 2:
            other = self.arms[1 - self.reference]
            c = self.compare(ref.index, other.index)
            shown = ", ".join(f"{name} {change(c[m])}" for m, name in self.keys.items())
            return f"{other.label} vs {ref.label}: {shown}"
        ordered = sorted(self.arms, key=lambda a: a.chunk)
        ranges = []
        for metric, name in self.keys.items():
            values = [self.value(a, metric) for a in ordered]
            low, high = (_value_text(metric, v) for v in (values[0], values[-1]))
            ranges.append(f"{name} {low} \u2192 {high}")
        chunks = ", ".join(a.label for a in ordered)
        return f"chunks {chunks}: {'; '.join(ranges)} (smallest \u2192 largest chunk)"


def _only_candidate(d: Decision, winner: ArmLike, head: str, slo: str) -> Verdict:
    for other in d.arms:
        if other is winner:
            continue
        if not any(d.better(winner, other, m) for m in violated(d.stats[other.index], d.slo)):
            sentence = (
                f"{head}; only {winner.label} meets {slo}, but it is not significantly "
                f"better than {other.label} on what {other.label} misses"
            )
            return Verdict(None, None, sentence, [], False)
    sentence = f"{head}; with {slo}, choose {winner.label}"
    return Verdict(winner.chunk, winner.label, sentence, ["slo"], False)


def _priority(d: Decision) -> list[str]:
    itl_slo = d.slo is not None and d.slo.itl_s is not None
    return [d.ttft, ITL_KEY] if itl_slo else [ITL_KEY, d.ttft]


def rule_text(d: Decision) -> str:
    """The rule as it applies to this A/B, in words: SLO first when there is one."""
    first, second = (d.keys[m] for m in _priority(d))
    slo = slo_text(d.slo)
    pick = (
        f"the arm significantly best on {first} wins; where {first} does not separate "
        f"them, {second} decides; otherwise no significant difference"
    )
    if slo:
        return (
            f"SLO first: only arms meeting {slo} are candidates (a lone candidate wins when "
            f"significantly better than each other arm on what that arm misses); among "
            f"several, {pick} (the arms' conditions must match, else no verdict)"
        )
    return f"no SLO given: {pick} (the arms' conditions must match, else no verdict)"


def _reason(d: Decision, winner: ArmLike, separated: list[str], slo: str) -> str:
    itl, ttft = d.keys[ITL_KEY], d.keys[d.ttft]
    if slo:
        return f"with {slo}, choose {winner.label}"
    if separated == [d.ttft]:
        return f"{itl} does not differ significantly: choose {winner.label} for {ttft}"
    if len(separated) > 1:
        return f"no SLO given, {itl} first, then {ttft}: choose {winner.label}"
    fastest = min(d.arms, key=lambda a: d.value(a, d.ttft))
    cost = ""
    if len(d.arms) > 2 and fastest is not winner:
        c = d.compare(fastest.index, winner.index)[d.ttft]
        cost = f" ({ttft} {change(c)} vs {fastest.label})"
    return f"no SLO given, {itl} first: choose {winner.label}{cost}"


def decide(d: Decision, conditions: Conditions) -> Verdict:
    """Apply the rule of the module docstring; ``verdict.rule`` states it for this A/B."""
    return replace(_decide(d, conditions), rule=rule_text(d))


def _decide(d: Decision, conditions: Conditions) -> Verdict:
    if not conditions.matched:
        sentence = (
            "no verdict: the arms' conditions did not match (" + "; ".join(conditions.reasons) + ")"
        )
        return Verdict(None, None, sentence, [], True)
    head, slo = d.head(), slo_text(d.slo)
    candidates = [a for a in d.arms if not violated(d.stats[a.index], d.slo)]
    if not candidates:
        best = min(d.arms, key=lambda a: d.value(a, ITL_KEY))
        lowest = _value_text(ITL_KEY, d.value(best, ITL_KEY))
        itl = d.keys[ITL_KEY]
        sentence = f"{head}; no chunk size meets {slo} (lowest {itl} {lowest}, {best.label})"
        return Verdict(None, None, sentence, [], False)
    if len(candidates) == 1 and len(d.arms) > 1:
        return _only_candidate(d, candidates[0], head, slo)
    separated: list[str] = []
    for metric in _priority(d):
        best = min(candidates, key=lambda a: d.value(a, metric))
        kept = [a for a in candidates if a is best or not d.better(best, a, metric)]
        if len(kept) < len(candidates):
            separated.append(metric)
        candidates = kept
        if len(candidates) == 1:
            break
    if len(candidates) == 1 and separated:
        winner = candidates[0]
        sentence = f"{head}; {_reason(d, winner, separated, slo)}"
        return Verdict(winner.chunk, winner.label, sentence, separated, False)
    tied = ", ".join(a.label for a in candidates)
    where = f" among {tied}" if len(candidates) < len(d.arms) else ""
    return Verdict(None, None, f"{head}; no significant difference{where}", [], False)
