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

import string
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np

from diagnose.ab_conditions import DEFAULT_TOLERANCES, TrialFacts, check_conditions
from diagnose.ab_effect import MIN_EFFECT
from diagnose.ab_events import EVENT_METRICS, EVENT_STALL, event_summary, event_values
from diagnose.ab_metrics import (
    METRICS,
    Comparer,
    TrialSamples,
    arm_intervals,
    arm_statistics,
    by_kind,
    kind_metric,
    prefill_kind,
    reported_metrics,
    request_kinds,
    split_metric,
    trial_events,
)
from diagnose.ab_tradeoffs import with_tradeoffs
from diagnose.ab_verdict import ITL_KEY, RULE, Decision, decide, decision_family, violated
from diagnose.outputs_check import baseline, compare_arms, outputs_sentence
from diagnose.stats import CONFIDENCE, MIN_UNITS, RESAMPLES, Comparison
from probes.stall_events import StallEvents
from runfmt.abresult import (
    AbComparison,
    ABResult,
    AbSettingsSection,
    ArmOutputs,
    ArmResult,
    Conditions,
    EventBlock,
    KindBlock,
    Outputs,
    RatioInterval,
    Reference,
    Tolerances,
    TradeoffRow,
    TrialRecord,
    Verdict,
    arm_result,
    known,
)
from runfmt.codec import frozen_map
from runfmt.metrics import AB_TRADEOFF, AB_TTFT_WEIGHED, json_name
from runfmt.slo import Slo

__all__ = ["METRICS", "AbAnalysis", "AbSettings", "Arm", "Trial", "analyse_ab", "make_arms"]


@dataclass(frozen=True)
class Arm:
    """One configuration: its chunk size, its label and what served it."""

    index: int
    chunk: int
    label: str
    target: str


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

    def recorded(self) -> TrialRecord:
        """The trial as ``ab.json`` records it."""
        return TrialRecord(
            self.arm, self.round, str(self.run_dir), self.status, self.reason, self.seconds,
            self.warmup,
        )  # fmt: skip


def alternating(arms: int, rounds: int) -> list[tuple[int, int]]:
    """``(arm, round)`` in the order trials run: every arm once per round (ABAB…)."""
    return [(arm, r) for r in range(1, rounds + 1) for arm in range(arms)]


@dataclass(frozen=True)
class AbSettings:
    """How the trials are judged."""

    trials: int
    reference: int
    slo: Slo | None = None
    tolerances: Tolerances = DEFAULT_TOLERANCES
    resamples: int = RESAMPLES
    confidence: float = CONFIDENCE
    seed: int = 0
    #: Compare outputs with this |Δ logprob| tolerance; ``None``: no output check.
    logprob_tolerance: float | None = None
    #: The smallest change worth telling from none (``--min-effect``, ``ab_effect``).
    min_effect: float = MIN_EFFECT

    def recorded(self) -> AbSettingsSection:
        """The settings as ``ab.json`` records them (the SLO's bounds given)."""
        return AbSettingsSection(
            self.trials,
            self.reference,
            self.slo or None,
            self.tolerances,
            self.resamples,
            self.confidence,
            self.seed,
            self.logprob_tolerance,
            self.min_effect,
        )

    def reference_of(self, arms: Sequence[Arm]) -> Reference:
        arm = arms[self.reference]
        return Reference(arm.label, arm.chunk)


def unanalysed_arm(arm: Arm, trials: Sequence[Trial]) -> ArmResult:
    """``arm`` with its ``trials`` before the analysis (its analysis's keys absent)."""
    records = [t.recorded() for t in trials if t.arm == arm.index]
    return arm_result(arm.index, arm.chunk, arm.label, arm.target, records, analysed=False)


@dataclass(frozen=True)
class AbAnalysis:
    """Everything ``ab.json`` holds about the measurements and the verdict."""

    arms: list[Arm]
    trials: list[Trial]
    settings: AbSettings
    conditions: Conditions
    stats: list[dict[str, float]]
    comparisons: list[tuple[Arm, Comparison]]
    verdict: Verdict
    outputs: Outputs | None = None
    #: Request kinds, longest prompts first (empty: one kind).
    kinds: list[str] = field(default_factory=list)
    #: Per arm: its ITL intervals (``ab_metrics.arm_intervals``) and its per-kind block.
    intervals: list[dict[str, Any]] = field(default_factory=list)
    kind_blocks: list[dict[str, KindBlock]] = field(default_factory=list)
    #: Per arm: its stall events' block (``ab_events.event_summary``); empty: one kind.
    event_blocks: list[EventBlock] = field(default_factory=list)

    def _arm(self, arm: Arm) -> ArmResult:
        stats = self.stats[arm.index]
        return arm_result(
            arm.index,
            arm.chunk,
            arm.label,
            arm.target,
            [t.recorded() for t in self.trials if t.arm == arm.index],
            {k: v for k, v in stats.items() if split_metric(k)[1] is None},
            intervals=self.intervals[arm.index] if self.intervals else {},
            by_kind=self.kind_blocks[arm.index] if self.kind_blocks else {},
            events=self.event_blocks[arm.index] if self.event_blocks else None,
        )

    def tradeoff(self) -> tuple[TradeoffRow, ...]:
        """ITL p99 (and max) against TTFT p50 (of all requests and per kind) per arm, by
        chunk size, with the SLOs met."""
        rows = []
        for arm in sorted(self.arms, key=lambda a: a.chunk):
            stats = self.stats[arm.index]
            by_kind_ttft = {k: known(stats[json_name(AB_TTFT_WEIGHED, k)]) for k in self.kinds}
            figures = {json_name(m): known(stats[json_name(m)]) for m in AB_TRADEOFF}
            figures[json_name(AB_TTFT_WEIGHED, part="by_kind")] = by_kind_ttft
            slo = self.settings.slo
            meets = not violated(stats, slo) if slo else None
            rows.append(TradeoffRow.of(arm.chunk, arm.label, figures, meets))
        return tuple(rows)

    def comparison_rows(self) -> tuple[AbComparison, ...]:
        """Each arm against the reference arm, metric by metric."""
        reference = self.arms[self.settings.reference].label
        return tuple(
            AbComparison(
                **{f.name: getattr(c, f.name) for f in fields(RatioInterval)},
                arm=arm.label,
                chunk=arm.chunk,
                reference=reference,
                kind=split_metric(c.metric)[1],
            )
            for arm, c in self.comparisons
        )

    def result(self) -> ABResult:
        """The analysis's sections of ``ab.json`` (the session adds how the A/B ran)."""
        return ABResult(
            verdict=self.verdict,
            arms=tuple(self._arm(arm) for arm in self.arms),
            reference=self.settings.reference_of(self.arms),
            kinds=tuple(self.kinds),
            comparisons=self.comparison_rows(),
            conditions=self.conditions,
            tradeoff=self.tradeoff(),
            outputs=self.outputs,
            settings=self.settings.recorded(),
        )


def _outputs(arms: Sequence[Arm], trials: Sequence[Trial], settings: AbSettings) -> Outputs | None:
    tolerance = settings.logprob_tolerance
    if tolerance is None:
        return None
    dirs = [[t.run_dir for t in trials if t.arm == arm.index] for arm in arms]
    ref = arms[settings.reference]
    per_arm = [
        ArmOutputs.of(
            compare_arms(dirs[ref.index], dirs[arm.index], tolerance),
            arm.label,
            arm.chunk,
            ref.label,
        )
        for arm in arms
        if arm.index != ref.index
    ]
    verdicts = [a.consistent for a in per_arm]
    rerun = baseline(dirs[ref.index], tolerance)
    return Outputs(
        sentence=outputs_sentence(per_arm, rerun, ref.label, tolerance),
        tolerance=tolerance,
        reference=ref.label,
        consistent=None if None in verdicts else all(verdicts),
        statuses=frozen_map({a.arm: a.status for a in per_arm}),
        arms=tuple(per_arm),
        baseline=rerun,
    )


def analyse_ab(
    arms: Sequence[Arm],
    trials: Sequence[Trial],
    settings: AbSettings,
    open_loop_ids: frozenset[str] = frozenset(),
) -> AbAnalysis:
    """Conditions, comparisons against the reference arm, the verdict, the output check."""
    facts = [TrialFacts.read(t.arm, t.run_dir, open_loop_ids, t.round) for t in trials]
    conditions = check_conditions(
        facts, [a.label for a in arms], settings.trials, settings.tolerances
    )
    loaded = [[TrialSamples.load(t) for t in trials if t.arm == arm.index] for arm in arms]
    samples = [[s for s in arm if s is not None] for arm in loaded]
    judged = judge(arms, samples, settings, conditions)
    kinds, stats, events = judged.kinds, judged.stats, judged.events
    comparisons, verdict = judged.comparisons, judged.verdict
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


@dataclass(frozen=True)
class Judged:
    """What the arms' samples say: the request kinds, each arm's figures and stall events,
    the comparisons against the reference arm and the verdict."""

    kinds: list[str]
    stats: list[dict[str, float]]
    events: list[StallEvents]
    comparisons: list[tuple[Arm, Comparison]]
    verdict: Verdict


def judge(
    arms: Sequence[Arm],
    samples: Sequence[Sequence[TrialSamples]],
    settings: AbSettings,
    conditions: Conditions,
) -> Judged:
    """Compare each arm's trials with the reference arm's and decide (``ab_verdict``);
    ``analyse_ab`` reads the samples from run directories, the A/B's calibration
    (``benchmarks/ab_event_calibration.py``) simulates them."""
    kinds = request_kinds(samples)
    stats = [arm_statistics(s, kinds) for s in samples]
    per_trial = trial_events(samples, kinds)
    events = [StallEvents.concat(arm) for arm in per_trial]
    for arm_stats, arm in zip(stats, events, strict=True):
        if kinds:
            arm_stats |= {json_name(m): _mean(event_values(arm, m)) for m in EVENT_METRICS}
    comparisons: list[tuple[Arm, Comparison]] = []
    if all(len(s) >= 2 for s in samples):
        kind = prefill_kind(kinds)
        stall, why = stall_unit(kinds, events)
        ttft = kind_metric(AB_TTFT_WEIGHED, kind)
        family = decision_family(stall, ttft, settings.slo, len(arms), settings.confidence)
        comparer = Comparer(samples, settings, kinds, per_trial, family)
        metrics = reported_metrics(kinds)
        for arm in arms:
            if arm.index != settings.reference:
                found = comparer.compare(settings.reference, arm.index)
                comparisons += [(arm, found[m]) for m in metrics]
        decision = Decision(
            arms,
            stats,
            comparer.compare,
            settings.reference,
            settings.slo,
            ttft,
            stall,
            why,
            settings.min_effect,
            family,
        )
        # every reported metric, the per-event ones included: a long prompt's TTFT per
        # event can be significantly worse where its pooled p50 is not
        verdict = with_tradeoffs(decide(decision, conditions), decision, metrics)
    else:
        reason = "fewer than two trials with completed requests in an arm"
        sentence = f"no verdict: {reason}"
        verdict = Verdict(None, None, sentence, (), True, RULE, min_effect=MIN_EFFECT)
    return Judged(kinds, stats, events, comparisons, verdict)


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
