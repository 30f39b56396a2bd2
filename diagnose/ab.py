"""The chunk-size A/B: arms, trials, and what they say together.

An *arm* is one value of ``max_num_batched_tokens`` (one server configuration); a *trial*
is one bench run of the A/B's plan against an arm. Trials alternate ABAB… (ABCABC… for
more arms), so that drift in the machine (thermal, other tenants, a filling cache)
lands on every arm alike, and every trial sends the same plan (seed, arrivals, lengths,
cache protocol). The trials of an arm are its independent units.

``analyse_ab`` reads the trials' run directories and

1. checks that the arms got the same load (``ab_conditions``);
2. compares each arm with the reference arm on p50/p95/p99 ITL and TTFT and on output
   throughput — a ratio with a bootstrap interval and a rank test per metric
   (``stats.compare_trials``, pooling trials unless they differ more than sampling
   explains);
3. decides (``ab_verdict``) and, with ``--check-outputs``, compares what the model said
   in each arm (``outputs_check``).

The orchestration — starting servers, running the trials — is the CLI's
(``session.ab_runner``); this module only reads run directories.
"""

from __future__ import annotations

import math
import string
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from diagnose.ab_conditions import Conditions, Tolerances, TrialFacts, check_conditions
from diagnose.ab_verdict import Decision, Verdict, decide, violated
from diagnose.compare import MetricSpec, RunSamples, load_run, metric_spec
from diagnose.outputs_check import baseline, compare_arms, outputs_sentence
from diagnose.stats import CONFIDENCE, RESAMPLES, Comparison, Sample, compare_trials
from probes.latency import Slo
from probes.quantiles import statistic
from workloads.errors import InputError

#: What every arm is compared on (ratios arm / reference).
METRICS = (
    "itl_p50",
    "itl_p95",
    "itl_p99",
    "ttft_p50",
    "ttft_p95",
    "ttft_p99",
    "output_tokens_per_s",
)


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
        }


def _load(trial: Trial) -> RunSamples | None:
    """The trial's samples; ``None`` when it has nothing to compare (no completed request)."""
    try:
        return load_run(trial.run_dir, f"trial {trial.round} of arm {trial.arm}")
    except InputError:
        return None


class Comparer:
    """Arm-against-arm comparisons on ``METRICS``, computed once per pair."""

    def __init__(self, samples: Sequence[Sequence[RunSamples]], settings: AbSettings) -> None:
        self.samples = samples
        self.settings = settings
        self.specs = [metric_spec(m) for m in METRICS]
        self.compare = cache(self._compare)

    def _compare(self, base: int, new: int) -> Mapping[str, Comparison]:
        by_source: dict[str, list[MetricSpec]] = {}
        for spec in self.specs:
            by_source.setdefault(spec.source, []).append(spec)
        out: dict[str, Comparison] = {}
        for group in by_source.values():
            found = compare_trials(
                [s.sample(group[0]) for s in self.samples[base]],
                [s.sample(group[0]) for s in self.samples[new]],
                {spec.name: spec.stat for spec in group},
                resamples=self.settings.resamples,
                confidence=self.settings.confidence,
                seed=self.settings.seed,
            )
            out |= {c.metric: c for c in found}
        return out


def arm_statistics(samples: Sequence[RunSamples]) -> dict[str, float]:
    """Each metric over the arm's trials pooled (``itl_p99_s`` …, ``output_tokens_per_s``)."""
    out: dict[str, float] = {}
    for name in (*METRICS, "requests_per_s"):
        spec = metric_spec(name)
        pooled = Sample.concat([s.sample(spec) for s in samples])
        key = name if spec.higher_is_better else f"{name}_s"
        out[key] = statistic(pooled.values, spec.stat) if samples else float("nan")
    return out


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

    def tradeoff(self) -> list[dict[str, Any]]:
        """ITL p99 against TTFT p50 per arm, by chunk size, with the SLOs met."""
        rows = []
        for arm in sorted(self.arms, key=lambda a: a.chunk):
            stats = self.stats[arm.index]
            rows.append(
                {
                    "chunk": arm.chunk,
                    "arm": arm.label,
                    "itl_p99_s": _known(stats["itl_p99_s"]),
                    "ttft_p50_s": _known(stats["ttft_p50_s"]),
                    "ttft_p99_s": _known(stats["ttft_p99_s"]),
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
            "arms": [
                arm.to_dict()
                | {k: _known(v) for k, v in self.stats[arm.index].items()}
                | {"trials": [t.to_dict() for t in self.trials if t.arm == arm.index]}
                for arm in self.arms
            ],
            "reference": {"arm": reference.label, "chunk": reference.chunk},
            "comparisons": [
                c.to_dict() | {"arm": arm.label, "chunk": arm.chunk, "reference": reference.label}
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
    loaded = [[_load(t) for t in trials if t.arm == arm.index] for arm in arms]
    samples = [[s for s in arm if s is not None] for arm in loaded]
    stats = [arm_statistics(s) for s in samples]
    comparisons: list[tuple[Arm, Comparison]] = []
    if all(len(s) >= 2 for s in samples):
        comparer = Comparer(samples, settings)
        for arm in arms:
            if arm.index != settings.reference:
                found = comparer.compare(settings.reference, arm.index)
                comparisons += [(arm, found[m]) for m in METRICS]
        decision = Decision(arms, stats, comparer.compare, settings.reference, settings.slo)
        verdict = decide(decision, conditions)
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
    )
