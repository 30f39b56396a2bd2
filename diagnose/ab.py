"""The chunk-size A/B: arms, trials, and what they say together.

An *arm* is one value of ``max_num_batched_tokens`` (one server configuration); a *trial*
is one bench run of the A/B's plan against an arm. Trials alternate ABAB… (ABCABC… for
more arms), so that drift in the machine (thermal, other tenants, a filling cache)
lands on every arm alike, and every trial sends the same plan (seed, arrivals, lengths,
cache protocol). The trials of an arm are its independent units.

``analyse_ab`` reads the trials' run directories and

1. checks that the arms got the same load (``ab_conditions``);
2. compares each arm with the reference arm on p50/p95/p99 ITL and TTFT, the worst ITL
   gap, output throughput and, when the plan mixes request kinds, TTFT per kind and the
   per-prefill stall events (``ab_events``) — a ratio with an interval and a test per
   metric (``ab_metrics``);
3. decides (``ab_verdict``), lists what the winner gave up (``ab_tradeoffs``) and, with
   ``--check-outputs``, compares what the model said in each arm (``outputs_check``).

The orchestration — starting servers, running the trials — is the CLI's
(``session.ab_runner``); this module only reads run directories.
"""

from __future__ import annotations

import math
import string
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from diagnose.ab_conditions import Conditions, Tolerances, TrialFacts, check_conditions
from diagnose.ab_effect import MIN_EFFECT
from diagnose.ab_events import EVENT_METRICS, EVENT_STALL, event_summary, event_values
from diagnose.ab_metrics import (
    METRICS,
    Comparer,
    TrialSamples,
    arm_events,
    arm_intervals,
    arm_statistics,
    by_kind,
    kind_metric,
    prefill_kind,
    reported_metrics,
    request_kinds,
    split_metric,
)
from diagnose.ab_tradeoffs import with_tradeoffs
from diagnose.ab_verdict import ITL_KEY, Decision, Verdict, decide, violated
from diagnose.outputs_check import baseline, compare_arms, outputs_sentence
from diagnose.stats import CONFIDENCE, MIN_UNITS, RESAMPLES, Comparison
from probes.metric_registry import AB_TRADEOFF, AB_TTFT_WEIGHED, json_name
from probes.slo import Slo
from probes.stall_events import StallEvents

__all__ = ["METRICS", "AbAnalysis", "AbSettings", "Arm", "Trial", "analyse_ab", "make_arms"]


@dataclass(frozen=True)
class Arm:
    """One configuration: its chunk size, its label and what served it."""

    index: int
    chunk: int
    label: str
    target: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def make_arms(chunks: Sequence[int], targets: Sequence[str]) -> list[Arm]:
    """Arms labelled by chunk size, with a letter when a size repeats (an A/A test)."""
    repeated = len(set(chunks)) < len(chunks)
    letters = string.ascii_uppercase
    return [
        Arm(i, chunk, f"{chunk}/{letters[i]}" if repeated else str(chunk), target)
        for i, (chunk, target) in enumerate(zip(chunks, targets, strict=True))
    ]


@dataclass(frozen=True)
class Trial:
    """One bench run of one arm: the ``round``-th of that arm (1-based)."""

    arm: int
    round: int
    run_dir: Path
    status: str
    reason: str | None = None
    seconds: float | None = None
    #: An unmeasured trial (a fresh server's one-time costs), kept apart from the analysis.
    warmup: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"run_dir": str(self.run_dir)}


def alternating(arms: int, rounds: int) -> list[tuple[int, int]]:
    """``(arm, round)`` in the order trials run: every arm once per round (ABAB…)."""
    return [(arm, r) for r in range(1, rounds + 1) for arm in range(arms)]


@dataclass(frozen=True)
class AbSettings:
    """How the trials are judged."""

    trials: int
    reference: int
    slo: Slo | None = None
    tolerances: Tolerances = field(default_factory=Tolerances)
    resamples: int = RESAMPLES
    confidence: float = CONFIDENCE
    seed: int = 0
    #: Compare outputs with this |Δ logprob| tolerance; ``None``: no output check.
    logprob_tolerance: float | None = None
    #: The smallest change worth telling from none (``--min-effect``, ``ab_effect``).
    min_effect: float = MIN_EFFECT

    def to_dict(self) -> dict[str, Any]:
        return {
            "trials": self.trials,
            "reference": self.reference,
            "slo": self.slo.to_dict() if self.slo else None,
            "tolerances": self.tolerances.to_dict(),
            "resamples": self.resamples,
            "confidence": self.confidence,
            "seed": self.seed,
            "logprob_tolerance": self.logprob_tolerance,
            "min_effect": self.min_effect,
        }


def _known(value: float) -> float | None:
    """JSON has no NaN: an unknown statistic is ``null``."""
    return value if math.isfinite(value) else None


@dataclass
class AbAnalysis:
    """Everything ``ab.json`` holds about the measurements and the verdict."""

    arms: list[Arm]
    trials: list[Trial]
    settings: AbSettings
    conditions: Conditions
    stats: list[dict[str, float]]
    comparisons: list[tuple[Arm, Comparison]]
    verdict: Verdict
    outputs: dict[str, Any] | None = None
    #: Request kinds, longest prompts first (empty: one kind).
    kinds: list[str] = field(default_factory=list)
    #: Per arm: its ITL intervals (``ab_metrics.arm_intervals``) and its per-kind block.
    intervals: list[dict[str, Any]] = field(default_factory=list)
    kind_blocks: list[dict[str, Any]] = field(default_factory=list)
    #: Per arm: its stall events' block (``ab_events.event_summary``); empty: one kind.
    event_blocks: list[dict[str, Any]] = field(default_factory=list)

    def _arm(self, arm: Arm) -> dict[str, Any]:
        stats = self.stats[arm.index]
        return (
            arm.to_dict()
            | {k: _known(v) for k, v in stats.items() if split_metric(k)[1] is None}
            | {
                "intervals": self.intervals[arm.index] if self.intervals else {},
                "by_kind": self.kind_blocks[arm.index] if self.kind_blocks else {},
                "events": self.event_blocks[arm.index] if self.event_blocks else None,
                "trials": [t.to_dict() for t in self.trials if t.arm == arm.index],
            }
        )

    def tradeoff(self) -> list[dict[str, Any]]:
        """ITL p99 (and max) against TTFT p50 (of all requests and per kind) per arm, by
        chunk size, with the SLOs met."""
        rows = []
        for arm in sorted(self.arms, key=lambda a: a.chunk):
            stats = self.stats[arm.index]
            by_kind_ttft = {k: _known(stats[json_name(AB_TTFT_WEIGHED, k)]) for k in self.kinds}
            rows.append(
                {"chunk": arm.chunk, "arm": arm.label}
                | {json_name(m): _known(stats[json_name(m)]) for m in AB_TRADEOFF}
                | {
                    json_name(AB_TTFT_WEIGHED, part="by_kind"): by_kind_ttft,
                    "meets_slo": (
                        not violated(stats, self.settings.slo) if self.settings.slo else None
                    ),
                }
            )
        return rows

    def to_dict(self) -> dict[str, Any]:
        reference = self.arms[self.settings.reference]
        return {
            "verdict": self.verdict.to_dict(),
            "arms": [self._arm(arm) for arm in self.arms],
            "reference": {"arm": reference.label, "chunk": reference.chunk},
            "kinds": self.kinds,
            "comparisons": [
                c.to_dict()
                | {
                    "arm": arm.label,
                    "chunk": arm.chunk,
                    "reference": reference.label,
                    "kind": split_metric(c.metric)[1],
                }
                for arm, c in self.comparisons
            ],
            "conditions": self.conditions.to_dict(),
            "tradeoff": self.tradeoff(),
            "outputs": self.outputs,
            "settings": self.settings.to_dict(),
        }


def _outputs(
    arms: Sequence[Arm], trials: Sequence[Trial], settings: AbSettings
) -> dict[str, Any] | None:
    tolerance = settings.logprob_tolerance
    if tolerance is None:
        return None
    dirs = [[t.run_dir for t in trials if t.arm == arm.index] for arm in arms]
    ref = arms[settings.reference]
    per_arm = [
        {"arm": arm.label, "chunk": arm.chunk, "reference": ref.label}
        | compare_arms(dirs[ref.index], dirs[arm.index], tolerance)
        for arm in arms
        if arm.index != ref.index
    ]
    verdicts = [a["consistent"] for a in per_arm]
    rerun = baseline(dirs[ref.index], tolerance)
    return {
        "sentence": outputs_sentence(per_arm, rerun, ref.label, tolerance),
        "tolerance": tolerance,
        "reference": ref.label,
        "consistent": None if None in verdicts else all(verdicts),
        "statuses": {a["arm"]: a["status"] for a in per_arm},
        "arms": per_arm,
        "baseline": rerun,
    }


def analyse_ab(
    arms: Sequence[Arm],
    trials: Sequence[Trial],
    settings: AbSettings,
    open_loop_ids: frozenset[str] = frozenset(),
) -> AbAnalysis:
    """Conditions, comparisons against the reference arm, the verdict, the output check."""
    facts = [TrialFacts.read(t.arm, t.run_dir, open_loop_ids) for t in trials]
    conditions = check_conditions(
        facts, [a.label for a in arms], settings.trials, settings.tolerances
    )
    loaded = [[TrialSamples.load(t) for t in trials if t.arm == arm.index] for arm in arms]
    samples = [[s for s in arm if s is not None] for arm in loaded]
    kinds = request_kinds(samples)
    stats = [arm_statistics(s, kinds) for s in samples]
    events = arm_events(samples, kinds)
    for arm_stats, arm in zip(stats, events, strict=True):
        if kinds:
            arm_stats |= {json_name(m): _mean(event_values(arm, m)) for m in EVENT_METRICS}
    comparisons: list[tuple[Arm, Comparison]] = []
    if all(len(s) >= 2 for s in samples):
        comparer = Comparer(samples, settings, kinds)
        metrics = reported_metrics(kinds)
        for arm in arms:
            if arm.index != settings.reference:
                found = comparer.compare(settings.reference, arm.index)
                comparisons += [(arm, found[m]) for m in metrics]
        kind = prefill_kind(kinds)
        stall, why = stall_unit(kinds, events)
        decision = Decision(
            arms,
            stats,
            comparer.compare,
            settings.reference,
            settings.slo,
            kind_metric(AB_TTFT_WEIGHED, kind),
            stall,
            why,
            settings.min_effect,
        )
        # every reported metric, the per-event ones included: a long prompt's TTFT per
        # event can be significantly worse where its pooled p50 is not
        verdict = with_tradeoffs(decide(decision, conditions), decision, metrics)
    else:
        reason = "fewer than two trials with completed requests in an arm"
        verdict = Verdict(None, None, f"no verdict: {reason}", [], True)
    return AbAnalysis(
        list(arms),
        list(trials),
        settings,
        conditions,
        stats,
        comparisons,
        verdict,
        _outputs(arms, trials, settings),
        kinds,
        [arm_intervals(s, settings) if s else {} for s in samples],
        [by_kind(stats[i], s, kinds) for i, s in enumerate(samples)],
        [event_summary(e, settings.resamples, settings.confidence, settings.seed) for e in events]
        if kinds
        else [],
    )


def _mean(values: Any) -> float:
    return float(np.mean(values)) if len(values) else float("nan")


def stall_unit(kinds: Sequence[str], events: Sequence[StallEvents]) -> tuple[str, str]:
    """What the stall is judged on, and why (``ab_verdict``'s "the stall's unit"): per
    event when every arm has ``MIN_UNITS`` long prompts beside the decode streams, else
    the pooled gaps' p99."""
    if not kinds:
        return ITL_KEY, "one request kind: no prefill events, the pooled gaps' p99 is the stall"
    fewest = min(len(e) for e in events)
    kind = prefill_kind(kinds)
    if fewest < MIN_UNITS:
        return ITL_KEY, (
            f"{fewest} {kind} prefills beside decode streams in an arm, fewer than "
            f"{MIN_UNITS} events: the pooled gaps' p99 is the stall"
        )
    return EVENT_STALL, (
        f"each {kind} prefill is one stall event ({fewest} or more per arm): its worst "
        "decode gap is what the budget decides, while a pooled gap quantile rests on the "
        "few gaps the stalls make"
    )
