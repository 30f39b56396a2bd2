"""``ab.json``: the result of a chunk-size A/B, declared once as frozen sections.

``diagnose.ab.analyse_ab`` computes the verdict, the arms, the comparisons with their
intervals, the conditions and the trade-off as these types; the session
(``session.ab_runner``) adds how the A/B ran (status, servers, workload, command) and
writes the document; the terminal view and the prediction read it back as the same types
(``runfmt.codec`` writes and reads them as JSON). Every section keeps what it does not
declare in ``extra`` (a newer writer's keys), so a document read and written back holds
the same keys and values.

Figures are seconds (``_s``) or per second, as the metric registry names them, written at
full precision; a figure that could not be computed is ``null``. An arm's figures
(``itl_p99_s``, ``ttft_p50[decode]_s`` …), its per-kind TTFTs, its events' means and a
trade-off row's figures are keyed by the registry's names, so their sections hold them
by name (``figures``), beside the keys they declare.

Format versions: 1 is every ``ab.json`` written before ``format_version`` existed; 2 adds
that key only. Keys added within version 2 (nothing older changed meaning): ``status:
running`` (the document written when the A/B starts and after each trial, before its
analysis: the analysis's sections absent); ``arms[].events`` (the per-prefill stall
events: ``count``, ``alone`` and per metric ``event_*_mean_s`` with
``event_*_interval_s``) and ``arms[].event_*_s``; the ``event_stall``/``event_lost``/
``event_ttft`` rows of ``comparisons``; ``verdict.outcome`` (winner, equivalent,
inconclusive, no winner, refused), ``verdict.unit`` and ``unit_reason`` (what the stall
was judged on, and why), ``verdict.min_effect`` and ``verdict.needed`` (for an
inconclusive verdict: the comparison and the units per arm that would decide);
``settings.min_effect``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

from runfmt.ab_prediction import Prediction
from runfmt.ab_servers import ServerRecord
from runfmt.codec import ABSENT, EMPTY, decode, encode, frozen_map, key
from runfmt.names import AB_JSON
from runfmt.slo import Slo
from runfmt.version import document_version

#: The ``format_version`` this version writes.
AB_FORMAT_VERSION = 2


def _figures(extra: Mapping[str, Any]) -> Mapping[str, Any]:
    """The keys a section holds by the registry's names (what its ``extra`` read)."""
    return {k: v for k, v in extra.items() if v is not ABSENT}


class _Figures:
    """A section holding figures by the registry's names beside its declared keys (in
    ``extra``, as the codec reads every key a section does not declare)."""

    extra: Mapping[str, Any]

    @property
    def figures(self) -> Mapping[str, Any]:
        """The figures by name (``itl_p99_s``, ``event_stall_mean_s`` …)."""
        return _figures(self.extra)


def known(value: float | None) -> float | None:
    """JSON has no NaN: a figure that could not be computed is ``null``."""
    return value if value is not None and math.isfinite(value) else None


def _named(values: Mapping[str, float | None] | None) -> Mapping[str, Any]:
    """Figures by name, the unknown ones ``None`` (kept in a section's ``extra``)."""
    return frozen_map({k: known(v) for k, v in (values or {}).items()})


def _interval() -> Any:
    """A ratio or bound that may be unknown: NaN in memory, ``null`` in the file."""
    return key(nan_null=True)


@dataclass(frozen=True)
class RatioInterval:
    """NEW/BASE for one metric: the ratio, its interval, and whether the data decide
    (``diagnose.stats.Comparison`` computes it).

    ``inconclusive`` says why the data cannot decide (``None`` when they can); ``units``
    is (BASE, NEW) independent units; ``needed_units`` the units per run that would meet
    the minimums when those are what failed. A value that could not be computed is NaN,
    ``null`` in the file.

    ``method`` says how the interval was made, as free text a reader shows; its first
    words name the units: ``bootstrap`` / ``cluster bootstrap`` (requests or time blocks
    of two runs, ``compare``; ``…, widened …`` for different seeds), ``events …`` (stall
    events, ``diagnose ab``), ``trials …`` (an A/B's trials as units: ``trials as units,
    random effects (between-trial tau …; t interval, … dof)`` or ``…; the trials agree
    within their sampling: its normal interval …``, ``trials as units, Welch t …``, and
    ``trials (per-trial max)``; ``ab.json`` files written before the random-effects
    combination also hold a bare ``trials``, and ``bootstrap`` / ``cluster bootstrap``
    for an A/B's pooled trials). ``units`` and ``needed_units`` are in those units.
    """

    metric: str
    ratio: float = _interval()
    ci_low: float = _interval()
    ci_high: float = _interval()
    p_value: float = _interval()
    significant: bool
    base: float = _interval()
    new: float = _interval()
    method: str
    inconclusive: str | None = None
    units: tuple[int, int] = (0, 0)
    needed_units: int | None = None
    #: The bootstrap's replicates; None for the trials' t interval.
    resamples: int | None = None


@dataclass(frozen=True)
class AbComparison(RatioInterval):
    """A row of ``comparisons``: an arm against the reference arm on one metric."""

    arm: str = ""
    chunk: int = 0
    reference: str = ""
    #: The request kind of a per-kind metric (``ttft_p50[decode]``), else ``None``.
    kind: str | None = None
    extra: Mapping[str, Any] = field(default_factory=EMPTY)


@dataclass(frozen=True)
class TrialRecord:
    """One bench run of one arm: the ``round``-th of that arm (1-based)."""

    arm: int = 0
    round: int = 0
    run_dir: str = ""
    status: str = ""
    reason: str | None = None
    seconds: float | None = None
    #: An unmeasured trial (a fresh server's one-time costs), kept apart from the analysis.
    warmup: bool = False
    extra: Mapping[str, Any] = field(default_factory=EMPTY)


@dataclass(frozen=True)
class KindBlock(_Figures):
    """An arm's figures for one request kind: requests, median prompt, and its TTFT
    quantiles by the registry's names (``figures``)."""

    requests: int = 0
    prompt_tokens_p50: float | None = None
    extra: Mapping[str, Any] = field(default_factory=EMPTY)

    @classmethod
    def of(
        cls, requests: int, prompt_p50: float | None, figures: Mapping[str, float | None]
    ) -> KindBlock:
        return cls(requests, prompt_p50, _named(figures))


@dataclass(frozen=True)
class EventBlock(_Figures):
    """An arm's stall events (one per long prompt): how many, how many ran alone, and per
    metric the mean and its interval by the registry's names (``event_stall_mean_s``,
    ``event_stall_interval_s`` …: ``figures``)."""

    count: int = 0
    alone: int = 0
    extra: Mapping[str, Any] = field(default_factory=EMPTY)

    @classmethod
    def of(cls, count: int, alone: int, figures: Mapping[str, Any]) -> EventBlock:
        return cls(count, alone, frozen_map(figures))


@dataclass(frozen=True)
class ArmResult(_Figures):
    """One arm: its configuration, its figures (trials pooled) by the registry's names
    (``figures``), its ITL intervals, per-kind and per-event blocks, and its trials."""

    index: int = 0
    chunk: int = 0
    label: str = ""
    target: str = ""
    #: ITL quantiles' intervals ``[low, high]`` and the trials' maxima, by name.
    intervals: Mapping[str, tuple[float | None, ...]] = field(default_factory=EMPTY)
    by_kind: Mapping[str, KindBlock] = field(default_factory=EMPTY)
    #: None: one request kind (no prefill events).
    events: EventBlock | None = None
    trials: tuple[TrialRecord, ...] = ()
    extra: Mapping[str, Any] = field(default_factory=EMPTY)

    def figure(self, name: str) -> float | None:
        value = self.figures.get(name)
        return float(value) if isinstance(value, int | float) else None


def arm_result(
    index: int,
    chunk: int,
    label: str,
    target: str,
    trials: Sequence[TrialRecord],
    figures: Mapping[str, float | None] | None = None,
    *,
    intervals: Mapping[str, Sequence[float | None]] | None = None,
    by_kind: Mapping[str, KindBlock] | None = None,
    events: EventBlock | None = None,
    analysed: bool = True,
) -> ArmResult:
    """An arm of ``ab.json``; before the analysis (``analysed=False``) its intervals,
    per-kind and per-event blocks are absent from the file, as a document read without
    them."""
    extra = dict(_named(figures))
    if not analysed:
        extra |= {"intervals": ABSENT, "by_kind": ABSENT, "events": ABSENT}
    return ArmResult(
        index,
        chunk,
        label,
        target,
        frozen_map({k: tuple(v) for k, v in (intervals or {}).items()}),
        frozen_map(by_kind),
        events,
        tuple(trials),
        frozen_map(extra),
    )


@dataclass(frozen=True)
class Reference:
    """The arm every other is compared with."""

    arm: str = ""
    chunk: int = 0
    extra: Mapping[str, Any] = field(default_factory=EMPTY)


@dataclass(frozen=True)
class Tradeoff:
    """One metric the winner made significantly worse than arm ``against``.

    ``change`` is the relative change winner/against − 1 (+0.57: 57 % higher) and
    ``interval`` the same for the comparison's interval.
    """

    metric: str = ""
    kind: str | None = None
    against: str = ""
    ratio: float = 0.0
    change: float = 0.0
    interval: tuple[float, float] = (0.0, 0.0)
    significant: bool = False
    method: str = ""
    text: str = ""
    #: The change is smaller than ``--min-effect`` (listed, and marked so in ``text``).
    under_min_effect: bool = False
    extra: Mapping[str, Any] = field(default_factory=EMPTY)


@dataclass(frozen=True)
class Needed:
    """For an inconclusive verdict: the comparison that did not decide, and the units per
    arm that would (``None``: no size of the A/B would)."""

    metric: str = ""
    arms: tuple[str, ...] = ()
    units: int | None = None
    unit: str = ""
    have: tuple[int, ...] = ()
    reason: str = ""
    extra: Mapping[str, Any] = field(default_factory=EMPTY)


@dataclass(frozen=True)
class Verdict:
    """The winner's chunk size (``None``: no verdict or no significant difference), the
    sentence, the rule that made it and what the winner gave up (``diagnose.ab_verdict``
    decides it)."""

    winner: int | None = None
    arm: str | None = None
    sentence: str = ""
    #: The metrics that separated the winner from the rest (``("slo",)`` for an SLO).
    decided_by: tuple[str, ...] = ()
    refused: bool = False
    rule: str = ""
    #: What the winner made significantly worse (``diagnose.ab_tradeoffs``).
    tradeoffs: tuple[Tradeoff, ...] = ()
    #: The trade-offs in words (also the end of ``sentence``); ``None`` when there are none.
    tradeoff_sentence: str | None = None
    #: winner, equivalent (no difference beyond ``min_effect``), inconclusive, no winner,
    #: refused.
    outcome: str = ""
    #: What the stall was judged on: ``events`` (per prefill) or ``gaps`` (pooled), and why.
    unit: str = "gaps"
    unit_reason: str = ""
    #: The smallest change worth telling from none (``--min-effect``).
    min_effect: float | None = None
    needed: Needed | None = None
    extra: Mapping[str, Any] = field(default_factory=EMPTY)


@dataclass(frozen=True)
class Check:
    """One condition: matched (``None``: not applicable or unknown), what was seen, the
    tolerance, and each arm's values (by arm label)."""

    name: str = ""
    matched: bool | None = None
    detail: str = ""
    tolerance: str = ""
    values: Mapping[str, tuple[Any, ...]] = field(default_factory=EMPTY)
    extra: Mapping[str, Any] = field(default_factory=EMPTY)


@dataclass(frozen=True)
class Conditions:
    """All checks (``diagnose.ab_conditions``); the verdict is refused when any failed."""

    matched: bool = True
    reasons: tuple[str, ...] = ()
    checks: tuple[Check, ...] = ()
    extra: Mapping[str, Any] = field(default_factory=EMPTY)

    @classmethod
    def of(cls, checks: Sequence[Check]) -> Conditions:
        """The conditions of ``checks``: matched unless one failed, and why each failed."""
        return cls(
            all(c.matched is not False for c in checks),
            tuple(f"{c.name}: {c.detail}" for c in checks if c.matched is False),
            tuple(checks),
        )


@dataclass(frozen=True)
class TradeoffRow(_Figures):
    """A row of ``tradeoff``: an arm by chunk size, its ITL and TTFT figures by name
    (``figures``, the per-kind TTFTs among them) and whether it meets the SLOs (``None``:
    none given)."""

    chunk: int = 0
    arm: str = ""
    meets_slo: bool | None = None
    extra: Mapping[str, Any] = field(default_factory=EMPTY)

    @classmethod
    def of(
        cls, chunk: int, arm: str, figures: Mapping[str, Any], meets_slo: bool | None
    ) -> TradeoffRow:
        return cls(chunk, arm, meets_slo, frozen_map(figures))


@dataclass(frozen=True)
class Tolerances:
    """How far trials may differ and still count as the same load: relative for tokens
    and rate, absolute for the hit rate, the error share and the shares of CPU-saturated
    trials, seconds for the loop lag, a share of a trial's ITL p99 for the engine's step
    lateness p99 (``None`` in an A/B written before that check) (``diagnose.ab_conditions``
    judges by them and owns their defaults)."""

    tokens: float
    rate: float
    hit_rate: float
    errors: float
    client: float
    loop_lag: float
    engine_lateness: float | None = key(omit_none=True, default=None)


@dataclass(frozen=True)
class AbSettingsSection:
    """How the trials were judged (``diagnose.ab.AbSettings``)."""

    trials: int = 0
    reference: int = 0
    #: The SLO bounds given (``itl_s``, ``ttft_s`` …), ``None`` when none.
    slo: Slo | None = None
    tolerances: Tolerances | None = None
    resamples: int = 0
    confidence: float = 0.95
    seed: int = 0
    logprob_tolerance: float | None = None
    min_effect: float | None = None
    extra: Mapping[str, Any] = field(default_factory=EMPTY)


@dataclass(frozen=True)
class AbWorkload:
    """The workload every trial sent: its name and the overrides given."""

    name: str = ""
    overrides: Mapping[str, Any] = field(default_factory=EMPTY)
    extra: Mapping[str, Any] = field(default_factory=EMPTY)


@dataclass(frozen=True)
class OutputCheck:
    """Greedy outputs of one set of trials against another's (``--check-outputs``:
    ``diagnose.outputs_check``): how many requests were compared and matched exactly,
    where they first diverged (``count``, ``min``, ``p50``, ``p90``, ``max``, ``buckets``,
    ``near_ties``), the |Δ logprob| before it (``count`` and quantiles; ``None`` without
    logprobs), the tokens over the tolerance, the status and whether it is consistent."""

    compared: int = 0
    exact_matches: int = 0
    exact_match_rate: float | None = None
    first_divergence: Mapping[str, Any] = field(default_factory=EMPTY)
    logprob_abs_diff: Mapping[str, Any] | None = None
    tokens_over_tolerance: int | None = None
    tolerance: float = 0.0
    status: str = "unknown"
    consistent: bool | None = None
    extra: Mapping[str, Any] = field(default_factory=EMPTY)


@dataclass(frozen=True)
class ArmOutputs(OutputCheck):
    """An arm's outputs against the reference arm's, trial by trial."""

    arm: str = ""
    chunk: int = 0
    reference: str = ""

    @classmethod
    def of(cls, check: OutputCheck, arm: str, chunk: int, reference: str) -> ArmOutputs:
        found = {f.name: getattr(check, f.name) for f in fields(OutputCheck)}
        return cls(**found, arm=arm, chunk=chunk, reference=reference)


@dataclass(frozen=True)
class Outputs:
    """``--check-outputs``: each arm against the reference, the reference against itself
    (``baseline``: its run-to-run nondeterminism; ``None`` with one trial), in one
    sentence."""

    sentence: str = ""
    tolerance: float = 0.0
    reference: str = ""
    #: Every arm consistent with the reference (``None``: some could not be compared).
    consistent: bool | None = None
    #: Each arm's status by label.
    statuses: Mapping[str, str] = field(default_factory=EMPTY)
    arms: tuple[ArmOutputs, ...] = ()
    baseline: OutputCheck | None = None
    extra: Mapping[str, Any] = field(default_factory=EMPTY)


#: The sections only the analysis writes: absent from the ``running`` document.
ANALYSIS_SECTIONS = ("verdict", "kinds", "comparisons", "conditions", "tradeoff", "outputs")


@dataclass(frozen=True)
class ABResult:
    """``ab.json``: the analysis (verdict, arms, comparisons, conditions, trade-off,
    outputs, settings), then how the A/B ran (status, target, workload, command)."""

    format_version: int | None = None
    verdict: Verdict | None = None
    arms: tuple[ArmResult, ...] = ()
    reference: Reference = field(default_factory=Reference)
    #: Request kinds, longest prompts first (empty: one kind).
    kinds: tuple[str, ...] = ()
    comparisons: tuple[AbComparison, ...] = ()
    conditions: Conditions | None = None
    tradeoff: tuple[TradeoffRow, ...] = ()
    #: ``--check-outputs``' comparison, else ``None``.
    outputs: Outputs | None = None
    settings: AbSettingsSection = field(default_factory=AbSettingsSection)
    status: str = "unknown"
    reason: str | None = None
    out: str = ""
    mode: str = ""
    chunks: tuple[int, ...] = ()
    launch: tuple[str, ...] | None = None
    restart_per_trial: bool = False
    warmup_trials: tuple[TrialRecord, ...] = ()
    #: The launched servers (``session.ab_servers``' records).
    servers: tuple[ServerRecord, ...] = ()
    workload: AbWorkload = field(default_factory=AbWorkload)
    cache_protocol: str = ""
    command: tuple[str, ...] = ()
    tool_version: str = ""
    #: Predicted vs measured per arm (``--predict``: ``session.ab_prediction``).
    prediction: Prediction | None = key(omit_none=True, default=None)  # noqa: RUF009
    extra: Mapping[str, Any] = field(default_factory=EMPTY)

    def unanalysed(self) -> ABResult:
        """This document before its analysis: the analysis's sections absent."""
        marks = {k: ABSENT for k in ANALYSIS_SECTIONS}
        return replace(self, extra=frozen_map({**self.extra, **marks}))

    def to_json(self) -> dict[str, Any]:
        """The ``ab.json`` document, with this version's ``format_version``."""
        return encode(replace(self, format_version=AB_FORMAT_VERSION))

    @classmethod
    def from_json(cls, doc: Mapping[str, Any], source: str = AB_JSON) -> ABResult:
        """An ``ab.json`` of any version this one reads (``InputError`` naming ``source``
        for a newer one); ``format_version`` is the version read (1: no key)."""
        version = document_version(dict(doc), source, AB_FORMAT_VERSION)
        return replace(decode(cls, doc), format_version=version)
