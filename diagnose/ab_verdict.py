"""Which chunk size to run: the A/B's decision rule and its one-sentence verdict.

The rule (stated in ``ab.json`` as ``verdict.rule``):

1. No verdict when the conditions did not match (``ab_conditions``).
2. With SLOs (``--slo itl=…`` on p99 ITL, ``ttft=…`` on p99 TTFT), only arms meeting every
   one (point estimates) are candidates. None: no winner. One: it wins when it is
   significantly better than each other arm on a metric that arm misses.
3. Among several candidates, metrics are taken in priority order — with an ITL SLO,
   p50 TTFT first (ITL is already bounded, so the largest chunk that meets it buys the
   best TTFT); otherwise the stall first (what the token budget protects), then p50 TTFT.
   For each metric, the arms significantly worse than the best one drop out; a single
   arm left is the winner.
4. Several left after both metrics: "no significant difference" only when every
   comparison of the decision's metrics between them is *equivalent* — its interval
   within ±``--min-effect`` (``ab_effect``); otherwise the verdict is ``inconclusive``,
   naming the comparison that could not decide, its actual reason — an interval that
   reaches past ±``--min-effect``, or data below the minimums a statistic needs (12 long
   prompts where a p50 needs 20: ``stats.shortfall``), whatever its interval — and the
   data (events or trials per arm) that would.

**The stall's unit** (``verdict.unit``, and why: ``verdict.unit_reason``). When the
traffic mixes kinds and every arm served at least ``stats.MIN_UNITS`` long prompts beside
the decode streams, the stall is judged per event (``ab_events``: each long prompt's
worst decode gap, trials pooled, events resampled): the question is what each prefill
does to the decodes, and a pooled gap quantile rests on the few gaps the stalls make.
Otherwise it is the pooled p99 ITL (gaps resampled in time blocks). The choice is made
from the number of long prompts, before any comparison is read; the other view is
reported beside it.

The p50 TTFT weighed is that of the prefill-heavy request kind when the traffic mixes
kinds (``ab_metrics.prefill_kind``: the long prompts of ``interference``), not the pooled
one, which falls between the kinds. ``rule_text`` states the rule as applied, in words
(``verdict.rule``); what the winner gives up is ``ab_tradeoffs``'.

"Significantly better" is ``Comparison.significant`` (decided, and the interval excludes
1) with the ratio on the better side. Every winner is thus backed by a significant
pairwise comparison.

**Several chances to name a winner.** Rule 3 names a winner when the stall separates the
arms *or*, where it does not, the TTFT weighed does (and rule 2 on any missed SLO's
metric), between any pair of arms: m comparisons, each a chance for arms that do not
differ to look different. ``decision_family`` lists them and each is read at
1 − (1 − confidence)/m (Bonferroni, ``ab_effect.Family``: 97.5 % for two arms without
SLO), so the whole decision names a winner for identical arms in at most 5 % of A/Bs;
``verdict.rule`` states the level, each comparison's method its own.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from diagnose.ab_conditions import Conditions
from diagnose.ab_effect import (
    EQUIVALENT,
    INCONCLUSIVE,
    MIN_EFFECT,
    SIGNIFICANT,
    Family,
    effect_status,
    unit_word,
    units_to_decide,
)
from diagnose.ab_events import EVENT_METRICS
from diagnose.metrics import metric_spec
from diagnose.stats import Comparison
from runfmt.abresult import Needed, Verdict
from runfmt.metrics import (
    AB_SLO_ITL,
    AB_SLO_TTFT,
    AB_STALL_GAPS,
    AB_TTFT_WEIGHED,
    json_name,
)
from runfmt.slo import Slo

#: The pooled-gap stall metric, and the SLO metrics (the registry's selections).
ITL_KEY, ITL_SLO, TTFT_SLO = AB_STALL_GAPS, AB_SLO_ITL, AB_SLO_TTFT


def sentence_name(metric: str) -> str:
    """How a metric reads in a verdict: the statistic first, the metric as the registry
    names it (``itl_p99`` → ``p99 ITL``, ``ttft_p50[long-prompt]`` → ``p50 TTFT
    (long-prompt)``)."""
    base, _, kind = metric.partition("[")
    name = EVENT_METRICS.get(base) or metric_spec(base).named(stat_first=True)
    return f"{name} ({kind[:-1]})" if kind else name


def _value_text(metric: str, value: float) -> str:
    """A value of ``metric`` (kind suffix allowed) in the registry entry's unit."""
    base = metric.partition("[")[0]
    return metric_spec(ITL_KEY if base in EVENT_METRICS else base).metric.format(value)


RULE = (
    f"refuse unless conditions matched; candidates meet every SLO (ITL on "
    f"{sentence_name(ITL_SLO)}, TTFT on {sentence_name(TTFT_SLO)}); then "
    f"{sentence_name(AB_TTFT_WEIGHED)} first with an ITL SLO, else the stall first (per prefill "
    f"event, else {sentence_name(ITL_KEY)}), then the other; arms significantly worse than "
    "the best drop out; one left wins; no significant difference only within --min-effect; "
    "each comparison a winner may be named on read at 1 − 5 %/m, m of them (Bonferroni)"
)
MINUS = "\u2212"

#: ``compare(base, new)``: each metric's Comparison of arm ``new`` against arm ``base``.
Compare = Callable[[int, int], Mapping[str, Comparison]]


class ArmLike(Protocol):
    index: int
    chunk: int
    label: str


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


def change(c: Comparison, min_effect: float | None = None) -> str:
    """A comparison in words; with ``min_effect``, a non-significant one that cannot rule
    out a change that large reads ``inconclusive``, not ``n.s.``."""
    undecided = c.inconclusive is not None or (
        min_effect is not None and effect_status(c, min_effect) == INCONCLUSIVE
    )
    return change_text(c.ratio, c.ci_low, c.ci_high, c.significant, undecided)


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
    if slo is not None and slo.itl_s is not None and not stats[json_name(ITL_SLO)] <= slo.itl_s:
        missed.append(ITL_SLO)
    if slo is not None and slo.ttft_s is not None and not stats[json_name(TTFT_SLO)] <= slo.ttft_s:
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
    ttft: str = AB_TTFT_WEIGHED
    #: The stall metric: ``ITL_KEY`` (pooled gaps) or ``ab_events.EVENT_STALL`` (per event).
    stall: str = ITL_KEY
    unit_reason: str = ""
    min_effect: float = MIN_EFFECT
    #: The comparisons a winner may be named on and their level (``decision_family``).
    family: Family | None = None

    @property
    def unit(self) -> str:
        return "events" if self.stall in EVENT_METRICS else "gaps"

    @property
    def keys(self) -> dict[str, str]:
        """The metrics the decision is made on and how they read in a sentence."""
        return {metric: sentence_name(metric) for metric in (self.stall, self.ttft)}

    @property
    def shown(self) -> dict[str, str]:
        """What the head shows of two arms: the stall (with the decode time lost when it
        is per event) and the TTFT weighed."""
        lost = ["event_lost"] if self.unit == "events" else []
        return {m: sentence_name(m) for m in (self.stall, *lost, self.ttft)}

    def value(self, arm: ArmLike, metric: str) -> float:
        return self.stats[arm.index][json_name(metric)]

    def better(self, better: ArmLike, worse: ArmLike, metric: str) -> bool:
        """Whether ``better`` is significantly lower than ``worse`` on ``metric``, by a
        change that may reach ``min_effect`` (``ab_effect``: not equivalent)."""
        c = self.compare(worse.index, better.index)[metric]
        return effect_status(c, self.min_effect) == SIGNIFICANT and c.ratio < 1.0

    def head(self) -> str:
        """The measured trade-off, before the decision."""
        ref = self.arms[self.reference]
        if len(self.arms) == 2:
            other = self.arms[1 - self.reference]
            c = self.compare(ref.index, other.index)
            shown = ", ".join(
                f"{name} {change(c[m], self.min_effect)}" for m, name in self.shown.items()
            )
            if self.unit == "events":  # the pooled-gap view beside the per-event one
                itl = f"{sentence_name(ITL_KEY)} {change(c[ITL_KEY], self.min_effect)}"
                shown += f" (gaps pooled: {itl})"
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
            return Verdict(None, None, sentence, (), False)
    sentence = f"{head}; with {slo}, choose {winner.label}"
    return Verdict(winner.chunk, winner.label, sentence, ("slo",), False)


def decision_family(stall: str, ttft: str, slo: Slo | None, arms: int, confidence: float) -> Family:
    """The comparisons this rule may name a winner on: the stall and the TTFT weighed,
    and with SLOs the metrics of those given (a lone candidate wins on what another arm
    misses), between every pair of arms (``ab_effect.Family``)."""
    bounds = (None, None) if slo is None else (slo.itl_s, slo.ttft_s)
    given = [m for m, b in zip((ITL_SLO, TTFT_SLO), bounds, strict=True) if b is not None]
    return Family(tuple(dict.fromkeys([stall, ttft, *given])), arms, confidence)


def _family_text(d: Decision) -> str:
    f = d.family
    if f is None or f.size <= 1:
        return ""
    names = ", ".join(sentence_name(m) for m in f.metrics)
    pairs = f.arms * (f.arms - 1) // 2
    between = f", each between {pairs} pairs of arms" if pairs > 1 else ""
    return (
        f"; each of the {f.size} comparisons a winner may be named on ({names}{between}) "
        f"read at {100 * f.level:.4g} % (Bonferroni), so arms that do not differ name a "
        f"winner in at most {100 * (1 - f.confidence):.4g} % of A/Bs"
    )


def _priority(d: Decision) -> list[str]:
    itl_slo = d.slo is not None and d.slo.itl_s is not None
    return [d.ttft, d.stall] if itl_slo else [d.stall, d.ttft]


def rule_text(d: Decision) -> str:
    """The rule as it applies to this A/B, in words: SLO first when there is one."""
    first, second = (d.keys[m] for m in _priority(d))
    slo = slo_text(d.slo)
    pick = (
        f"the arm significantly best on {first} wins; where {first} does not separate "
        f"them, {second} decides; otherwise no significant difference when every interval "
        f"lies within {_band(d)}, else inconclusive (the stall judged on {d.unit}: "
        f"{d.unit_reason or 'pooled ITL gaps'}){_family_text(d)}"
    )
    if slo:
        return (
            f"SLO first: only arms meeting {slo} are candidates (a lone candidate wins when "
            f"significantly better than each other arm on what that arm misses); among "
            f"several, {pick} (the arms' conditions must match, else no verdict)"
        )
    return f"no SLO given: {pick} (the arms' conditions must match, else no verdict)"


def _reason(d: Decision, winner: ArmLike, separated: list[str], slo: str) -> str:
    itl, ttft = d.keys[d.stall], d.keys[d.ttft]
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
        cost = f" ({ttft} {change(c, d.min_effect)} vs {fastest.label})"
    return f"no SLO given, {itl} first: choose {winner.label}{cost}"


def decide(d: Decision, conditions: Conditions) -> Verdict:
    """Apply the rule of the module docstring; ``verdict.rule`` states it for this A/B."""
    verdict = _decide(d, conditions)
    outcome = verdict.outcome or ("winner" if verdict.winner is not None else "no winner")
    return replace(
        verdict,
        rule=rule_text(d),
        outcome="refused" if verdict.refused else outcome,
        unit=d.unit,
        unit_reason=d.unit_reason,
        min_effect=d.min_effect,
    )


def _band(d: Decision) -> str:
    return f"\u00b1{d.min_effect * 100:g} %"


def _who(reason: str, base: ArmLike, new: ArmLike) -> str:
    """A comparison's shortfall (``stats``: ``BASE and NEW: 12 values: …``) with the arms
    named: ``in both arms, 12 values: …``, ``in 512: …``."""
    who, sep, rest = reason.partition(": ")
    arms = {"BASE and NEW": "both arms", "BASE": base.label, "NEW": new.label}
    return f"in {arms[who]}, {rest}" if sep and who in arms else reason


def why_undecided(c: Comparison, base: ArmLike, new: ArmLike, band: str) -> str:
    """Why a comparison that is not equivalent did not decide: too little data for the
    statistic (its interval, however narrow, is not trusted), else an interval that
    reaches past the band."""
    if c.inconclusive is not None:
        return f"is not trusted: too little data ({_who(c.inconclusive, base, new)})"
    return f"cannot rule out a change of {band} or more"


def _undecided(d: Decision, candidates: Sequence[ArmLike], head: str, where: str) -> Verdict:
    """No arm separated: equivalent when every comparison of the decision's metrics
    between the candidates lies within ``min_effect``, else inconclusive with the data
    that would decide the first that does not."""
    ref = d.arms[d.reference]
    ordered = sorted(candidates, key=lambda a: a is not ref)  # the reference first
    for metric in _priority(d):
        for i, base in enumerate(ordered):
            for new in ordered[i + 1 :]:
                c = d.compare(base.index, new.index)[metric]
                if effect_status(c, d.min_effect) == EQUIVALENT:
                    continue
                units = units_to_decide(c, d.min_effect)
                word = unit_word(c)
                name = d.keys[metric]
                size = (
                    f"about {units} {word} per arm would decide"
                    if units is not None
                    else "no size of this A/B would decide it"
                )
                shown = change_text(c.ratio, c.ci_low, c.ci_high, True)
                why = why_undecided(c, base, new, _band(d))
                sentence = (
                    f"{head}; inconclusive{where}: {name} ({new.label} vs {base.label}) "
                    f"{shown} {why}; {size}"
                )
                needed = Needed(metric, (base.label, new.label), units, word, c.units, why)
                return Verdict(None, None, sentence, (), False, outcome=INCONCLUSIVE,
                               needed=needed)  # fmt: skip
    sentence = f"{head}; no significant difference{where}: every interval lies within {_band(d)}"
    return Verdict(None, None, sentence, (), False, outcome=EQUIVALENT)


def _decide(d: Decision, conditions: Conditions) -> Verdict:
    if not conditions.matched:
        sentence = (
            "no verdict: the arms' conditions did not match (" + "; ".join(conditions.reasons) + ")"
        )
        return Verdict(None, None, sentence, (), True)
    head, slo = d.head(), slo_text(d.slo)
    candidates = [a for a in d.arms if not violated(d.stats[a.index], d.slo)]
    if not candidates:
        best = min(d.arms, key=lambda a: d.value(a, ITL_KEY))
        lowest = _value_text(ITL_KEY, d.value(best, ITL_KEY))
        itl = sentence_name(ITL_KEY)
        sentence = f"{head}; no chunk size meets {slo} (lowest {itl} {lowest}, {best.label})"
        return Verdict(None, None, sentence, (), False)
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
        return Verdict(winner.chunk, winner.label, sentence, tuple(separated), False)
    tied = ", ".join(a.label for a in candidates)
    where = f" among {tied}" if len(candidates) < len(d.arms) else ""
    return _undecided(d, candidates, head, where)
