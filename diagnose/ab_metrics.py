"""What an A/B measures in each arm and compares between arms, by request kind.

Mixed traffic pools requests that a chunk size treats in opposite ways: in
``interference`` the decode streams (kind ``decode``) wait behind long prefills while the
long prompts (kind ``long-prompt``) are the prefills. A pooled TTFT p50 falls between the
two populations and flips with a trial's mix, so when a plan labels more than one kind
(the ``kind`` column of ``requests``, set by the workload for every request) TTFT is also
measured and compared per kind, named ``ttft_p50[decode]`` and so on. The kinds are
ordered by their median prompt length, longest first: the first one is the prefill-heavy
kind whose TTFT the chunk size trades against ITL (``prefill_kind``).

Every arm is compared with another on:

* ``METRICS`` — ITL p50/p95/p99, TTFT p50/p95/p99 of all requests, output tokens/s
  (``trials.compare_trials``: trials as units, their between-trial variance carried
  into the interval by a random-effects combination — a ratio, its interval, a test);
* ``itl_max`` — the worst inter-token gap (the longest stall). A maximum has no useful
  bootstrap (a resample never exceeds the sample's maximum), so the trials are the units:
  the ratio of the geometric means of each trial's maximum with a Welch t interval on
  the logs (``trials.trial_interval``, ``method="trials (per-trial max)"``), significant
  when that interval excludes 1 — the t test's p-value agrees with it by construction.
  It assumes the trials' maxima are log-normal around the arm's typical worst stall; with
  three trials per arm only a large difference (several-fold, as between chunk sizes
  whose longest prefill step differs) is called;
* per kind (two kinds or more): TTFT p50/p95/p99 of that kind's requests;
* per stall event (two kinds or more: each long prompt of the prefill-heavy kind beside
  the decode streams, ``ab_events``): the mean worst decode gap, decode time lost and
  TTFT per event, each trial's mean over its events compared with the trials as units.

The comparisons a winner may be named on (``ab_effect.Family``: the stall and the TTFT
weighed, with SLOs their metrics) are made at the family's level (97.5 % for two arms
and two metrics), the rest at ``--confidence``; the method of each says which.

Each arm's own ITL quantiles come with a cluster-bootstrap interval over its pooled trials
(requests as clusters), and its maximum with the range of its trials' maxima.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cache
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from diagnose.ab_effect import Family
from diagnose.ab_events import EVENT_METRICS, compare_events
from diagnose.compare import MetricSpec, RunSamples, load_run, metric_spec
from diagnose.stats import Comparison, Sample, resampled_statistics
from diagnose.trials import compare_trials, trial_interval
from probes.stall_events import NO_KIND, StallEvents, kinds_longest_first, prefill_kind
from runfmt import metrics as registry
from runfmt.abresult import KindBlock
from runfmt.metrics import TTFT, json_name
from runtime.quantiles import quantiles, statistic
from workloads.errors import InputError

if TYPE_CHECKING:
    from diagnose.ab import AbSettings, Trial

#: What every arm is compared on (ratios arm / reference), over all requests.
METRICS = registry.AB_COMPARED
#: The worst inter-token gap of a trial.
ITL_MAX = registry.AB_ITL_MAX
#: ITL statistics reported per arm with an interval.
ITL_QUANTILES = registry.AB_ITL_QUANTILES
#: TTFT statistics compared per request kind.
KIND_TTFT = registry.AB_TTFT_QUANTILES
#: The request columns a stall event is timed by.
_TIMES = ("sent_s", "first_token_s")


#: ``ttft_p50`` of kind ``decode`` → ``ttft_p50[decode]`` and back (the registry's).
kind_metric, split_metric = registry.kind_name, registry.split_kind


def ab_metric_spec(name: str) -> MetricSpec:
    """The spec of an A/B metric, a kind's suffix dropped; ``itl_max`` (a trial's worst
    gap) as ITL's ``max``, so the registry names and writes it as it does ITL."""
    base, _ = split_metric(name)
    if base == ITL_MAX:
        itl = metric_spec(ITL_QUANTILES[0])
        return MetricSpec(ITL_MAX, itl.source, "max", itl.higher_is_better)
    if base in EVENT_METRICS:  # a mean over events, of gaps or of a TTFT
        source = registry.TTFT if base == "event_ttft" else registry.ITL
        return MetricSpec(base, source.key, "mean", False)
    return metric_spec(base)


def higher_is_better(name: str) -> bool:
    return ab_metric_spec(name).higher_is_better


@dataclass(frozen=True)
class TrialSamples:
    """One trial's samples, the kind and prompt length of each completed request, and
    the stall events of its prefill-heavy requests (``attach_events``)."""

    run: RunSamples
    kinds: np.ndarray
    prompt_tokens: np.ndarray
    requests: pd.DataFrame | None = None

    @classmethod
    def load(cls, trial: Trial) -> TrialSamples | None:
        """The trial's samples; ``None`` when it has nothing to compare (no completed request)."""
        try:
            run = load_run(trial.run_dir, f"trial {trial.round} of arm {trial.arm}")
        except InputError:
            return None
        return cls.of_run(run, run.run.tables.requests)

    @classmethod
    def of_run(cls, run: RunSamples, requests: pd.DataFrame) -> TrialSamples:
        """The samples of a run read for comparison and its ``requests`` table (the kind,
        prompt length and times of each request)."""
        requests = requests.drop_duplicates("id", keep="last").set_index("id")
        ids = run.latencies["id"]

        def column(name: str) -> pd.Series:
            if name in requests.columns:
                return ids.map(requests[name])
            return pd.Series(None, index=ids.index, dtype=object)

        kinds = column("kind").fillna(NO_KIND).astype(str).to_numpy()
        prompts = pd.to_numeric(column("prompt_tokens"), errors="coerce").to_numpy(dtype=float)
        times = pd.DataFrame({c: pd.to_numeric(column(c), errors="coerce") for c in _TIMES})
        return cls(run, kinds, prompts, times.assign(kind=kinds))

    def events(self, kind: str | None) -> StallEvents:
        """The stall events of this trial: each completed request of ``kind`` (the
        prefill-heavy one) against the gaps of every other kind's requests."""
        if kind is None or self.requests is None:
            return StallEvents.empty()
        gaps = self.run.gaps
        gap_kind = pd.Series(self.kinds, index=self.run.latencies["id"].to_numpy())
        decode = gap_kind.reindex(gaps.request_ids[gaps.request]).to_numpy() != kind
        long = self.requests[self.kinds == kind]
        ttft = self.run.latencies[TTFT.key].to_numpy(dtype=float)[self.kinds == kind]
        return StallEvents.measure(
            long["sent_s"].to_numpy(float),
            long["first_token_s"].to_numpy(float),
            ttft,
            gaps.gap_s[decode],
            gaps.t_s[decode],
        )

    def sample(self, spec: MetricSpec, kind: str | None = None) -> Sample:
        """The values of ``spec``'s source, of one request kind's requests when given."""
        if kind is None:
            return self.run.sample(spec)
        values = self.run.latencies[spec.source].to_numpy(dtype=float)
        return Sample.of(values[self.kinds == kind])

    @property
    def itl_max(self) -> float:
        gaps = self.run.gaps.gap_s
        return float(np.max(gaps)) if len(gaps) else float("nan")


def request_kinds(arms: Sequence[Sequence[TrialSamples]]) -> list[str]:
    """The request kinds of every arm's completed requests, longest median prompt first
    (``probes.stall_events.kinds_longest_first``); empty when the traffic has a single
    kind (pooled TTFT is then per kind already)."""
    trials = [t for arm in arms for t in arm]
    if not trials:
        return []
    kinds = np.concatenate([t.kinds for t in trials])
    prompts = np.concatenate([t.prompt_tokens for t in trials])
    return kinds_longest_first(kinds, prompts)


def trial_events(
    samples: Sequence[Sequence[TrialSamples]], kinds: Sequence[str]
) -> list[list[StallEvents]]:
    """Each arm's stall events, trial by trial (none when the traffic has one kind)."""
    kind = prefill_kind(kinds)
    return [[t.events(kind) for t in arm] for arm in samples]


def reported_metrics(kinds: Sequence[str]) -> list[str]:
    """Every metric an A/B compares, in the order it reports them (the per-event ones
    when the traffic mixes kinds)."""
    return [
        *METRICS,
        ITL_MAX,
        *(kind_metric(m, kind) for kind in kinds for m in KIND_TTFT),
        *(EVENT_METRICS if kinds else ()),
    ]


def _max_comparison(
    base: Sequence[TrialSamples], new: Sequence[TrialSamples], confidence: float
) -> Comparison:
    per_base = [t.itl_max for t in base]
    per_new = [t.itl_max for t in new]
    units = (len(per_base), len(per_new))
    method = "trials (per-trial max)"
    if not all(np.isfinite(v) and v > 0 for v in [*per_base, *per_new]):
        nan = float("nan")
        return Comparison.judge(
            ITL_MAX, nan, (nan, nan), nan, (nan, nan), method, confidence,
            inconclusive="a trial has no ITL gaps", units=units,
        )  # fmt: skip
    ratio, low, high, p_value = trial_interval(per_base, per_new, confidence)
    means = (
        float(np.exp(np.mean(np.log(per_base)))),
        float(np.exp(np.mean(np.log(per_new)))),
    )
    return Comparison.judge(
        ITL_MAX, ratio, (low, high), p_value, means, method, confidence, units=units
    )


class Comparer:
    """Arm-against-arm comparisons on ``reported_metrics``, computed once per pair (the
    per-event ones on each arm's ``events``, trial by trial: ``trial_events``); the
    metrics of ``family`` (those a winner may be named on, ``ab_effect.Family``) at its
    level, the rest at the settings' confidence."""

    def __init__(
        self,
        samples: Sequence[Sequence[TrialSamples]],
        settings: AbSettings,
        kinds: Sequence[str],
        events: Sequence[Sequence[StallEvents]],
        family: Family | None = None,
    ) -> None:
        self.samples = samples
        self.family = family
        self.settings = settings
        self.kinds = list(kinds)
        self.trial_events = events
        self.levels = family.levels() if family else {}
        self.compare = cache(self._compare)

    def _trials(
        self, base: int, new: int, metrics: Mapping[str, str], spec: MetricSpec, kind: str | None
    ) -> list[Comparison]:
        return compare_trials(
            [s.sample(spec, kind) for s in self.samples[base]],
            [s.sample(spec, kind) for s in self.samples[new]],
            metrics,
            resamples=self.settings.resamples,
            confidence=self.settings.confidence,
            seed=self.settings.seed,
            levels=self.levels,
        )

    def _compare(self, base: int, new: int) -> Mapping[str, Comparison]:
        by_source: dict[str, list[MetricSpec]] = {}
        for spec in (metric_spec(m) for m in METRICS):
            by_source.setdefault(spec.source, []).append(spec)
        out: dict[str, Comparison] = {}
        for group in by_source.values():
            metrics = {spec.name: spec.stat for spec in group}
            out |= {c.metric: c for c in self._trials(base, new, metrics, group[0], None)}
        out[ITL_MAX] = _max_comparison(
            self.samples[base], self.samples[new], self.settings.confidence
        )
        ttft = metric_spec(KIND_TTFT[0])
        for kind in self.kinds:
            metrics = {kind_metric(m, kind): metric_spec(m).stat for m in KIND_TTFT}
            out |= {c.metric: c for c in self._trials(base, new, metrics, ttft, kind)}
        if self.kinds:
            settings = self.settings
            out |= compare_events(
                self.trial_events[base],
                self.trial_events[new],
                resamples=settings.resamples,
                confidence=settings.confidence,
                seed=settings.seed,
                levels=self.levels,
            )
        notes = dict.fromkeys(self.levels, self.family.note()) if self.family else {}
        return {m: _leveled(c, notes.get(m)) for m, c in out.items()}


def _leveled(c: Comparison, note: str | None) -> Comparison:
    """``c`` with its interval's own level said in its method (``note``), when it has one."""
    if note is None:
        return c
    return replace(c, method=f"{c.method}{note}")


def arm_statistics(samples: Sequence[TrialSamples], kinds: Sequence[str]) -> dict[str, float]:
    """Each metric over the arm's trials pooled: ``itl_p99_s`` …, ``itl_max_s``,
    ``output_tokens_per_s``, ``requests_per_s`` and per kind ``ttft_p50[decode]_s`` …."""
    out: dict[str, float] = {}
    for name in registry.AB_ARM_FIGURES:
        spec = metric_spec(name)
        pooled = Sample.concat([s.sample(spec) for s in samples])
        out[json_name(name)] = statistic(pooled.values, spec.stat) if samples else float("nan")
    maxima = [s.itl_max for s in samples if np.isfinite(s.itl_max)]
    out[json_name(ITL_MAX)] = max(maxima) if maxima else float("nan")
    for kind in kinds:
        for name in KIND_TTFT:
            spec = metric_spec(name)
            pooled = Sample.concat([s.sample(spec, kind) for s in samples])
            out[json_name(name, kind)] = statistic(pooled.values, spec.stat)
    return out


def _known(value: float) -> float | None:
    return float(value) if np.isfinite(value) else None


def arm_intervals(samples: Sequence[TrialSamples], settings: AbSettings) -> dict[str, Any]:
    """The arm's ITL quantiles' intervals (cluster bootstrap of its pooled trials) and the
    range of its trials' maxima."""
    out: dict[str, Any] = {}
    gaps = Sample.concat([s.sample(metric_spec(ITL_QUANTILES[0])) for s in samples])
    stats = [metric_spec(m).stat for m in ITL_QUANTILES]
    if gaps.n_units >= 2:
        replicates = resampled_statistics(gaps, stats, settings.resamples, settings.seed)
        alpha = 1.0 - settings.confidence
        for name, stat in zip(ITL_QUANTILES, stats, strict=True):
            low, high = quantiles(replicates[stat], (alpha / 2.0, 1.0 - alpha / 2.0))
            out[json_name(name)] = [_known(low), _known(high)]
    maxima = [s.itl_max for s in samples if np.isfinite(s.itl_max)]
    out[json_name(ITL_MAX, part="per_trial")] = maxima
    return out


def by_kind(
    stats: Mapping[str, float], samples: Sequence[TrialSamples], kinds: Sequence[str]
) -> dict[str, KindBlock]:
    """``ab.json``'s per-kind block of an arm: requests, median prompt, TTFT quantiles."""
    out: dict[str, KindBlock] = {}
    for kind in kinds:
        prompts = np.concatenate([s.prompt_tokens[s.kinds == kind] for s in samples] or [[]])
        prompts = prompts[np.isfinite(prompts)]
        out[kind] = KindBlock.of(
            int(sum(np.sum(s.kinds == kind) for s in samples)),
            float(np.median(prompts)) if len(prompts) else None,
            {json_name(m): _known(stats[json_name(m, kind)]) for m in KIND_TTFT},
        )
    return out
