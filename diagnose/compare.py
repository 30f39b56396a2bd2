"""Did NEW get worse than BASE? Two runs of one workload, compared metric by metric.

Metrics are named ``<latency>_<statistic>`` — latency one of ``ttft``, ``ttft_sent``,
``itl``, ``tpot``, ``e2e``, ``e2e_sent`` and statistic one of ``mean``, ``p50``, ``p90``,
``p95``, ``p99``, ``p999`` (``itl_p99``, ``ttft_p50``) — or ``requests_per_s`` /
``output_tokens_per_s``. Lower is better for latencies, higher for throughput.

Each metric is a ratio NEW/BASE with a bootstrap interval (``diagnose.stats``, whose
docstring states the test and its assumptions): per-request values for TTFT/TPOT/E2E,
per-token ITL gaps resampled in time blocks (``time_blocks``: gaps at one time share
the server's steps; the pooled p99 of the resampled blocks' gaps is recomputed),
throughput in equal time slices of each run's measured window (one run has one
throughput, but its slices vary), and the stall metrics ``stall_worst`` / ``stall_lost``
per stall event (each long prompt's prefill, ``probes.stall_events``; events resampled,
as ``diagnose ab`` does). Without ``--metric`` the stall metrics are shown whenever a run
has stall events; they are not applicable when no run stalled (no decode gap beside a
long prefill longer than ``STALL_FACTOR`` normal steps in either run: prompts too short
to stretch a step).

**Stalls a pooled quantile cannot see.** A pooled ITL quantile q reaches the stall gaps
only when they are at least 1 − q of a run's gaps (``RunStalls.seen_by``): a budget that
stalls each long prompt for one or two long steps leaves its stalls under the p99, which
then improves while the stalls grow. When NEW has stall gaps and they are below that
share, a quantile row whose estimate shows no worsening beyond its gate's limit (no
worsening at all, without a gate) and that does not fail is inconclusive, saying so (a
run without stall gaps hides nothing from it); when it is worse — failed, or undecided
with an estimate beyond the limit (stall gaps just over 1 % of NEW's gaps, which
resampled time blocks keep or drop) — and BASE's stalls were the unseen ones while
NEW's worst gap per prefill is shorter, the row notes the trade-off (more frequent,
shorter stalls).

**Different draws.** When BASE and NEW were drawn with different workload seeds, they
are two samples of the traffic, not one: bursts of arrivals and the mix of prompt
lengths differ between draws, and requests near one another in time share a queue. Then
per-request values are resampled in time blocks of requests (``request_blocks``) and ITL
gaps in blocks twice as long as for one draw (``DRAW_BLOCK_LIFETIMES``): the resampled
unit holds the correlation between neighbours. Every metric's interval is then at least
a Student t interval of each run's bootstrap variance, corrected for the few units
(units/(units − 1); the degrees of freedom its own variance estimate has, at most
units − 1: ``diagnose.draws``, "effective degrees of freedom") and for the correlation
left between neighbouring units (``diagnose.draws``). ITL gaps keep units − 1 degrees
of freedom, as they get no lag window: their time blocks are not alike by design, and a
within-run estimate reads that shape as noise — in an ``interference`` run at budget 768
the pooled p99 rests on the few blocks with stalls, a resample drawing too few of them
drops it ten-fold, and its variance estimate came out with under one degree of freedom;
the 12288 → 768 ``itl_p99:+25%`` gate then FAILED 0 of 100 different-seed pairs, 46
with units − 1 (``benchmarks/compare_calibration.py``). Stall events are too few (a run
has a dozen long prompts) to resample in blocks, yet they are correlated: long prefills
that arrive faster than they are served queue behind one another and share the gaps they
overlap. Their interval is widened to at least the Student t interval of batch means of
each run's events in time order, or where narrower of the spread of single events, a
bound whatever their correlation (``diagnose.draws`` states what that covers and what it
does not); the mean worst gap's also carries the phase of each run's chunk grid, a level
every event of a run shares (``diagnose.draws``, "a level a whole run shares"), and a
change within it that is not significant is noted as inconclusive, repeated runs as
trials being what would decide it. Requests and gaps are not widened by batch means: a
run's time batches are not alike by design (an ``interference`` run's streams outlast its
long prompts, so its last batches have no stalls), and batch means would read that shared
shape as variance between draws.
The result says the seeds differ (``CompareResult.draws``).
``benchmarks/compare_calibration.py`` measures the A/A false-positive rate of
different-seed pairs for every default metric.

A gate ``METRIC:+X%`` reads that interval against its limit: pass, fail or inconclusive
(``diagnose.gate``).

A run that cannot be compared at all — no run directory, no ``run.json``, no requests,
a BASE with no completed request, another workload without ``force`` — is an
``InputError`` (one line, exit 2). A NEW whose requests all failed is a result: its
latency rows are missing and its gates cannot pass.

Two runs are comparable when their workload specs (``run.json`` ``workload``) are equal
except for the seed and the run length (``num_requests``, ``duration``): another sample
of the same traffic. Another workload name, family, preset, arrival process, rate,
concurrency, prompt format or parameter is another experiment.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from diagnose.draws import grid_note, grid_variance
from diagnose.gate import (
    FAIL,
    INCONCLUSIVE,
    NOT_SIGNIFICANT,
    PASS,
    CompareResult,
    Gate,
    MetricResult,
)
from diagnose.metrics import (
    CONFIDENCE,
    DEFAULT_METRICS,
    RESAMPLES,
    STALL_METRICS,
    STALL_SOURCES,
    THROUGHPUTS,
    MetricSpec,
    metric_spec,
)
from diagnose.stats import MIN_UNITS, Comparison, Sample, compare_stats
from probes.latency import measured_window, request_latencies, throughput_bins
from probes.stall_events import STALL_FACTOR, RunStalls, run_stalls
from probes.token_gaps import TokenGaps, token_gaps
from runfmt.metrics import E2E, ITL, TTFT
from runfmt.run import Run, open_run
from runfmt.runinfo import RunInfo
from runfmt.tables import completed_mask
from runtime.quantiles import QUANTILES
from workloads.errors import InputError

#: Workload spec keys that may differ between comparable runs.
SAME_WORKLOAD_ANYWAY = ("seed", "num_requests", "duration")

#: The source of the ITL metrics: per-token gaps, resampled in time blocks. When the seeds
#: differ their t part keeps units − 1 degrees of freedom (the module docstring).
GAPS = ITL.key


@dataclass(frozen=True)
class RunSamples:
    """What a comparison resamples from one run directory."""

    path: Path
    run: Run | None
    latencies: pd.DataFrame
    gaps: TokenGaps
    throughput: pd.DataFrame
    requests: int = 0
    stalls: RunStalls = field(default_factory=RunStalls.none)
    #: Each completed request's intended send, in ``latencies``' order (its time block).
    starts_s: np.ndarray | None = None

    @classmethod
    def of_tables(
        cls, path: Path, run: Run | None, requests: pd.DataFrame, chunks: Any
    ) -> RunSamples:
        """What a comparison reads from a run's measured requests and its chunks."""
        ok = completed_mask(requests)
        latencies = request_latencies(requests)[ok]
        gaps = token_gaps(chunks, latencies["id"])
        done = requests[ok]
        return cls(
            path=path,
            run=run,
            latencies=latencies,
            gaps=gaps,
            throughput=throughput_bins(
                requests, measured_window(requests), throughput_slices(int(ok.sum()))
            ),
            requests=len(requests),
            stalls=run_stalls(done, latencies[TTFT.key].to_numpy(float), gaps),
            starts_s=pd.to_numeric(done["intended_s"], errors="coerce").to_numpy(float),
        )

    def sample(self, spec: MetricSpec, *, draws: bool = False) -> Sample:
        """The values ``spec`` is compared on; ``draws``: BASE and NEW are different draws
        of the workload, so requests are resampled in time blocks."""
        if spec.source == GAPS:
            lifetimes = DRAW_BLOCK_LIFETIMES if draws else 1.0
            return Sample.of(self.gaps.gap_s, time_blocks(self.gaps, lifetimes))
        if spec.source in THROUGHPUTS:
            return Sample.of(self.throughput[spec.source])
        if spec.source in STALL_SOURCES:
            values = self.stalls.values(spec.source)
            if not draws or spec.source != STALL_SOURCES[0] or not len(values):
                return Sample.of(values)
            return Sample.of(values, level_variance=self.grid_variance())
        if not draws or self.starts_s is None:
            return Sample.of(self.latencies[spec.source])
        lifetimes = self.latencies[E2E.key].to_numpy(float)
        blocks = request_blocks(self.starts_s, lifetimes, DRAW_BLOCK_LIFETIMES)
        return Sample.of(self.latencies[spec.source], blocks)

    def grid_variance(self) -> float:
        """The log variance of the mean worst stall gap that the phase of this run's chunk
        grid sets (``diagnose.draws.grid_variance``: stall gaps as ``probes.stall_events``
        counts them, longer than ``STALL_FACTOR`` normal steps)."""
        events = self.stalls.events
        threshold = STALL_FACTOR * events.normal_s
        level = float(np.mean(events.stall_s)) if len(events) else math.nan
        return grid_variance(self.gaps.gap_s, self.gaps.request, threshold, level)

    @property
    def completed(self) -> int:
        return len(self.latencies)

    def lacks(self, spec: MetricSpec) -> str | None:
        """What this run lacks for ``spec`` (``"no ITL gaps"``), or ``None``."""
        if spec.source in THROUGHPUTS:
            return None if len(self.throughput) else "no measured window"
        if self.completed == 0:
            return f"no completed request (of {self.requests})"
        if len(self.sample(spec).values):
            return None
        if spec.source == GAPS:
            return "no ITL gaps (no request streamed two tokens)"
        if spec.source in STALL_SOURCES:
            return "no stall events (no long prompt of another kind beside decode streams)"
        return f"no {spec.source.removesuffix('_s')} values"

    def requests_for(self, spec: MetricSpec, units: int, now: int) -> int:
        """Requests that would give ``units`` units of ``spec``, this run giving ``now``:
        ten completions per throughput slice, else this run's requests per unit."""
        if spec.source in THROUGHPUTS:
            per_unit = COMPLETIONS_PER_SLICE * self.requests / max(self.completed, 1)
        elif spec.source in STALL_SOURCES:  # events come with the long prompts
            per_unit = self.requests / max(len(self.stalls.events), 1)
        else:
            per_unit = self.requests / max(now, 1)
        return math.ceil(units * per_unit)


#: Block length, in median request lifetimes, when BASE and NEW are different draws: the
#: load a request meets builds up over the lifetime before it, so blocks of one lifetime
#: are correlated with their neighbours and understate the variance between draws. On
#: 60 different-seed A/A pairs of 400 ``system-prompt`` requests
#: (``benchmarks/compare_calibration.py``) TPOT and E2E p50 were significant in 13–15 %
#: of pairs with blocks of one lifetime, 7–8 % with two, no fewer with four.
DRAW_BLOCK_LIFETIMES = 2.0


def time_blocks(gaps: TokenGaps, lifetimes: float = 1.0) -> np.ndarray:
    """The time block each ITL gap falls in: the units its bootstrap resamples.

    A continuous-batching server advances every running request in the same step, so a
    long prefill chunk stalls all of them at once: gaps are correlated across requests
    at one time, not only within a request (virtual-time A/A runs of 1000 requests
    differed by ±14 % in pooled p99 ITL while request clusters gave intervals of ±3 %).
    Blocks of one median request lifetime (first to last token) hold most of that
    correlation (``_blocks``).
    """
    t = gaps.t_s
    if t.size == 0:
        return np.zeros(0, dtype=np.int64)
    first = np.full(len(gaps.request_ids), np.inf)
    last = np.full(len(gaps.request_ids), -np.inf)
    np.minimum.at(first, gaps.request, t)
    np.maximum.at(last, gaps.request, t)
    seen = np.isfinite(first)
    return _blocks(t, lifetimes * float(np.median(last[seen] - first[seen])))


def request_blocks(
    start_s: np.ndarray, lifetime_s: np.ndarray, lifetimes: float = 1.0
) -> np.ndarray:
    """The time block of each request by its intended send (``start_s``), blocks of
    ``lifetimes`` median lifetimes (``lifetime_s``: E2E) as ``_blocks`` cuts them;
    requests with no send time share a block of their own."""
    start_s = np.asarray(start_s, float)
    durations = np.asarray(lifetime_s, float)
    durations = durations[np.isfinite(durations)]
    known = np.isfinite(start_s)
    out = np.full(len(start_s), -1, dtype=np.int64)
    if known.any() and durations.size:
        out[known] = _blocks(start_s[known], lifetimes * float(np.median(durations)))
    return out


def _blocks(t: np.ndarray, lifetime: float) -> np.ndarray:
    """Blocks of ``lifetime`` seconds over the span of ``t``; a span shorter than
    ``2 × MIN_UNITS`` lifetimes gets that many blocks, shorter than a lifetime (then the
    interval is narrower than the truth)."""
    start, span = float(t.min()), float(t.max() - t.min())
    length = min(lifetime, span / (2 * MIN_UNITS))
    if not length > 0:
        return np.zeros(t.size, dtype=np.int64)
    return np.floor((t - start) / length).astype(np.int64)


#: Least and most time slices a run's throughput is cut into.
THROUGHPUT_SLICES = (5, 30)
#: Completions per throughput slice, about.
COMPLETIONS_PER_SLICE = 10


def throughput_slices(completed: int) -> int:
    """Time slices for throughput: about ten completions each, between 5 and 30."""
    low, high = THROUGHPUT_SLICES
    return max(low, min(high, completed // COMPLETIONS_PER_SLICE))


def load_run(path: str | Path, argument: str, *, need_completed: bool = True) -> RunSamples:
    """Read what ``compare`` needs from a run directory; ``argument`` names it in errors.

    A run with no request is unusable; one with no completed request too, unless
    ``need_completed`` is False (a NEW run that failed is a result to report).
    """
    run = open_run(path, argument)
    run.require_info(argument)
    requests = run.tables.measured
    if requests.empty:
        raise InputError(argument, f"{path} has no measured requests", "compare finished runs")
    ok = completed_mask(requests)
    if need_completed and not ok.any():
        raise InputError(
            argument,
            f"{path} has no completed requests ({len(requests)} failed)",
            "compare against a run whose requests completed",
        )
    return RunSamples.of_tables(Path(path), run, requests, run.tables.chunks)


def workload_differences(base: RunInfo | None, new: RunInfo | None) -> list[str]:
    """How the workload specs two ``run.json`` recorded differ, ignoring seed and run
    length (what was recorded is compared, so that a spec this version cannot rebuild
    still matches its twin)."""
    found = (
        base.workload_differences(new, SAME_WORKLOAD_ANYWAY)
        if base is not None and new is not None
        else None
    )
    if found is None:
        return ["a run.json has no workload spec, so the runs cannot be shown to match"]
    return [f"workload{'.' + k if k else ''}: {a!r} vs {b!r}" for k, a, b in found]


def _ordered_metrics(metrics: Sequence[str], gates: Sequence[Gate]) -> list[MetricSpec]:
    names = list(dict.fromkeys([*metrics, *(g.metric.name for g in gates)]))
    return [metric_spec(name) for name in names]


#: How ``shortfall`` words a unit and a value of each metric source.
_WORDS = (
    {GAPS: ("time blocks", "gaps")}
    | dict.fromkeys(THROUGHPUTS, ("time slices", "slices"))
    | dict.fromkeys(STALL_SOURCES, ("stall events", "events"))
)


def _few_streams(runs: tuple[RunSamples, RunSamples]) -> tuple[str, int] | None:
    """Fewer than ``MIN_UNITS`` requests with ITL gaps in a run: why, and the requests per
    run that would have enough."""
    streams = [len(np.unique(run.gaps.request)) for run in runs]
    if min(streams) >= MIN_UNITS:
        return None
    few = [(who, n) for who, n in zip(("BASE", "NEW"), streams, strict=True) if n < MIN_UNITS]
    if len(few) == 2 and streams[0] == streams[1]:
        few = [("BASE and NEW", streams[0])]
    reason = "; ".join(
        f"{who}: {n} requests with ITL gaps (fewer than {MIN_UNITS})" for who, n in few
    )
    pairs = zip(runs, streams, strict=True)
    return reason, max(math.ceil(MIN_UNITS * run.requests / max(n, 1)) for run, n in pairs)


def _row(
    spec: MetricSpec,
    c: Comparison,
    gate: Gate | None,
    runs: tuple[RunSamples, RunSamples],
    draws: bool = False,
    confidence: float = CONFIDENCE,
) -> MetricResult:
    """A row: what is missing, and the run size that would decide it; a pooled ITL
    quantile blind to NEW's stalls, or worse by a trade-off of stalls (``_stall_view``);
    for different draws, a worst-gap change within the runs' chunk grids (``_grid_view``)."""
    row = _decided_row(spec, c, gate, runs)
    if spec.source == GAPS:
        return _stall_view(row, runs)
    if draws and spec.source == STALL_SOURCES[0]:
        return _grid_view(row, runs, confidence)
    return row


def _grid_view(
    row: MetricResult, runs: tuple[RunSamples, RunSamples], confidence: float
) -> MetricResult:
    """A worst-gap row of different draws that is not significant, its change within the
    phase of the runs' chunk grids, carries ``diagnose.draws.grid_note``."""
    if row.status != NOT_SIGNIFICANT:
        return row
    levels = [run.grid_variance() for run in runs]
    note = grid_note(levels, row.comparison.ratio, confidence)
    return row if note is None else replace(row, note=note)


def _stall_text(stalls: RunStalls) -> str:
    events = stalls.events
    return f"{stalls.share:.1%} of its gaps ({events.stalled_gaps} beside {len(events)} prefills)"


def _stall_view(row: MetricResult, runs: tuple[RunSamples, RunSamples]) -> MetricResult:
    """What a pooled ITL quantile says of the stalls (the module docstring's rule)."""
    if row.missing or row.spec.stat not in QUANTILES or QUANTILES[row.spec.stat] <= 50:
        return row
    base, new = (run.stalls for run in runs)
    q = QUANTILES[row.spec.stat] / 100.0
    c = row.comparison
    worse = c.side(1.0) == 1 if row.gate is None else row.gate_verdict == FAIL
    blind_to = _blind(new, q)
    # blind: NEW's stalls are under the quantile, and the quantile shows no worsening
    # beyond what is allowed (an estimate many-fold worse did see something)
    unchanged = c.ratio <= (row.limit if row.limit is not None else 1.0)
    if blind_to and not worse and unchanged:
        why = (
            f"NEW's stall gaps are {_stall_text(new)}, under the {1 - q:.1%} above the "
            f"{row.spec.stat}: the {row.spec.stat} cannot see its stalls; judge them with "
            f"{' or '.join(STALL_METRICS)}"
        )
        reasons = [why, *([c.inconclusive] if c.inconclusive else [])]
        blind = replace(c, significant=False, inconclusive="; ".join(reasons))
        return replace(row, comparison=blind, needed_requests=None)
    # worse, or undecided with an estimate beyond the limit: the trade-off explains either
    looks_worse = worse or (row.gate_verdict != PASS and not unchanged)
    if looks_worse and _blind(base, q) and new.seen_by(q) and len(new.events) and len(base.events):
        worst = _mean_ratio(base, new)
        if worst < 1.0:
            note = (
                f"trade-off, not a bare regression: NEW stalls more often (stall gaps "
                f"{_stall_text(new)}, BASE {_stall_text(base)}: under the {1 - q:.1%} its "
                f"{row.spec.stat} sees) but shorter (worst decode gap per prefill "
                f"{(worst - 1) * 100:+.0f} %)"
            )
            return replace(row, note=note)
    return row


def _blind(stalls: RunStalls, q: float) -> bool:
    """Whether a run has stall gaps and a pooled quantile ``q`` cannot see them (a run
    with none hides nothing from it)."""
    return stalls.events.stalled_gaps > 0 and not stalls.seen_by(q)


def _mean_ratio(base: RunStalls, new: RunStalls) -> float:
    """NEW/BASE of the mean worst decode gap per prefill."""
    key = STALL_SOURCES[0]
    return float(np.mean(new.values(key)) / np.mean(base.values(key)))


def _decided_row(
    spec: MetricSpec, c: Comparison, gate: Gate | None, runs: tuple[RunSamples, RunSamples]
) -> MetricResult:
    """A row: what is missing, and the run size that would decide it."""
    if spec.source in STALL_SOURCES and not any(run.stalls.events.stalled_gaps for run in runs):
        why = (
            "one request kind in both runs: no long prefill beside decode streams to stall"
            if all(run.stalls.kind is None for run in runs)
            else f"no decode gap beside a long prefill is longer than {STALL_FACTOR:g} normal "
            "steps in either run: nothing stalled"
        )
        return MetricResult(spec, c, gate, not_applicable=why)
    lacking = [f"{who} has {what}" for who, run in zip(("BASE", "NEW"), runs, strict=True)
               if (what := run.lacks(spec))]  # fmt: skip
    if lacking:
        return MetricResult(spec, c, gate, "; ".join(lacking))
    needed = None
    if c.needed_units is not None:  # a run too small for the minimums
        needed = max(
            run.requests_for(spec, c.needed_units, now)
            for run, now in zip(runs, c.units, strict=True)
        )
    few = _few_streams(runs) if spec.source == GAPS else None
    if few is not None:  # time blocks are the units, but a handful of requests is a handful
        reasons = [few[0], *([c.inconclusive] if c.inconclusive else [])]
        c = replace(c, significant=False, inconclusive="; ".join(reasons))
        needed = max(needed or 0, few[1])
    if needed is not None:
        return MetricResult(spec, c, gate, None, needed)
    row = MetricResult(spec, c, gate)
    if row.limit is None or row.gate_verdict != INCONCLUSIVE:
        return row
    units = c.units_to_separate(row.limit)  # the width shrinks as 1/sqrt(run size)
    if units is None:
        return row
    needed = math.ceil(max(run.requests for run in runs) * units / max(c.units))
    return MetricResult(spec, c, gate, None, needed)


def compare_runs(
    base_dir: str | Path, new_dir: str | Path, gates: Sequence[Gate] = (), **settings: Any
) -> CompareResult:
    """Compare two run directories: ``compare_samples`` (whose keywords ``settings`` are)
    on the runs read with ``load_run``."""
    base = load_run(base_dir, "BASE_RUN")
    new = load_run(new_dir, "NEW_RUN", need_completed=False)
    return compare_samples(base, new, gates, **settings)


def different_draws(base: RunSamples, new: RunSamples) -> str | None:
    """Why BASE and NEW are different draws of the workload (their seeds differ), or
    ``None`` (one draw, or a run.json that does not say)."""
    seeds = [run.run.info.seed if run.run is not None and run.run.info else None
             for run in (base, new)]  # fmt: skip
    if None in seeds or seeds[0] == seeds[1]:
        return None
    return (
        f"the seeds differ (BASE {seeds[0]}, NEW {seeds[1]}): two draws of the workload; "
        "per-request metrics are resampled in time blocks of requests and stall intervals "
        "widened to the spread between time batches of each run's events, so the "
        "intervals carry the variance between draws"
    )


def compare_samples(
    base: RunSamples,
    new: RunSamples,
    gates: Sequence[Gate] = (),
    *,
    metrics: Sequence[str] | None = None,
    force: bool = False,
    resamples: int = RESAMPLES,
    confidence: float = CONFIDENCE,
    seed: int = 0,
    inconclusive: str = FAIL,
    draws: str | None = None,
) -> CompareResult:
    """Compare two runs on ``metrics`` (and every gated metric; ``None``: the defaults,
    and the stall metrics when a run has stall events).

    Refuses (``InputError``) runs of different workloads unless ``force``.
    ``inconclusive`` is ``"fail"`` or ``"pass"``: what an undecided gate counts as.
    ``draws`` says why the runs are different draws when their ``run.json`` cannot
    (``different_draws`` otherwise).
    """
    if metrics is None:
        stalls = len(base.stalls.events) or len(new.stalls.events)
        metrics = (*DEFAULT_METRICS, *(STALL_METRICS if stalls else ()))
    info = (base.run.info if base.run else None, new.run.info if new.run else None)
    differences = workload_differences(*info) if base.run or new.run else []
    draws = draws or different_draws(base, new)
    if differences and not force:
        raise InputError(
            "NEW_RUN",
            f"not the same workload as BASE_RUN ({'; '.join(differences)})",
            "compare runs of one workload, or pass --force",
        )
    specs = _ordered_metrics(metrics, gates)
    gate_of = {g.metric.name: g for g in gates}
    by_source: dict[str, list[MetricSpec]] = {}
    for spec in specs:
        by_source.setdefault(spec.source, []).append(spec)
    comparisons: dict[str, Comparison] = {}
    for source, group in by_source.items():
        found = compare_stats(
            base.sample(group[0], draws=draws is not None),
            new.sample(group[0], draws=draws is not None),
            {spec.name: spec.stat for spec in group},
            resamples=resamples,
            confidence=confidence,
            seed=seed,
            names=_WORDS.get(source, ("time blocks" if draws else "requests", "requests")),
            draws=draws is not None,
            batch_means=source in STALL_SOURCES,
            effective_dof=source != GAPS,
        )
        comparisons |= {c.metric: c for c in found}
    different = draws is not None
    gated = [(s, comparisons[s.name], gate_of.get(s.name)) for s in specs]
    rows = [_row(*g, (base, new), different, confidence) for g in gated]
    labels = tuple(
        dict(r.run.info.labels) if r.run is not None and r.run.info else {} for r in (base, new)
    )
    return CompareResult(
        base.path, new.path, rows, differences, confidence, inconclusive, labels, draws
    )
