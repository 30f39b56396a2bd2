"""Did NEW get worse than BASE? Two runs of one workload, compared metric by metric.

Metrics are named ``<latency>_<statistic>`` — latency one of ``ttft``, ``ttft_sent``,
``itl``, ``tpot``, ``e2e``, ``e2e_sent`` and statistic one of ``mean``, ``p50``, ``p90``,
``p95``, ``p99``, ``p999`` (``itl_p99``, ``ttft_p50``) — or ``requests_per_s`` /
``output_tokens_per_s``. Lower is better for latencies, higher for throughput.

Each metric is a ratio NEW/BASE with a bootstrap interval (``diagnose.stats``, whose
docstring states the test and its assumptions): per-request values for TTFT/TPOT/E2E,
per-token ITL gaps resampled in time blocks (``time_blocks``: gaps at one time share
the server's steps; the pooled p99 of the resampled blocks' gaps is recomputed), and
throughput in equal time slices of each run's measured window (one run has one
throughput, but its slices vary).

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
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd

from diagnose.gate import FAIL, INCONCLUSIVE, CompareResult, Gate, MetricResult
from diagnose.metrics import (
    CONFIDENCE,
    DEFAULT_METRICS,
    RESAMPLES,
    THROUGHPUTS,
    MetricSpec,
    metric_spec,
)
from diagnose.stats import MIN_UNITS, Comparison, Sample, compare_stats
from probes.latency import measured_window, request_latencies, throughput_bins
from probes.token_gaps import TokenGaps, token_gaps
from runfmt.run import Run, open_run
from runfmt.runinfo import RunInfo
from runfmt.tables import completed_mask
from workloads.errors import InputError

#: Workload spec keys that may differ between comparable runs.
SAME_WORKLOAD_ANYWAY = ("seed", "num_requests", "duration")


@dataclass(frozen=True)
class RunSamples:
    """What a comparison resamples from one run directory."""

    path: Path
    run: Run
    latencies: pd.DataFrame
    gaps: TokenGaps
    throughput: pd.DataFrame
    requests: int = 0

    def sample(self, spec: MetricSpec) -> Sample:
        if spec.source == "itl_s":
            return Sample.of(self.gaps.gap_s, time_blocks(self.gaps))
        if spec.source in THROUGHPUTS:
            return Sample.of(self.throughput[spec.source])
        return Sample.of(self.latencies[spec.source])

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
        if spec.source == "itl_s":
            return "no ITL gaps (no request streamed two tokens)"
        return f"no {spec.source.removesuffix('_s')} values"

    def requests_for(self, spec: MetricSpec, units: int, now: int) -> int:
        """Requests that would give ``units`` units of ``spec``, this run giving ``now``:
        ten completions per throughput slice, else this run's requests per unit."""
        if spec.source in THROUGHPUTS:
            per_unit = COMPLETIONS_PER_SLICE * self.requests / max(self.completed, 1)
        else:
            per_unit = self.requests / max(now, 1)
        return math.ceil(units * per_unit)


def time_blocks(gaps: TokenGaps) -> np.ndarray:
    """The time block each ITL gap falls in: the units its bootstrap resamples.

    A continuous-batching server advances every running request in the same step, so a
    long prefill chunk stalls all of them at once: gaps are correlated across requests
    at one time, not only within a request (virtual-time A/A runs of 1000 requests
    differed by ±14 % in pooled p99 ITL while request clusters gave intervals of ±3 %).
    Blocks of one median request lifetime (first to last token) hold most of that
    correlation; a run shorter than ``2 × MIN_UNITS`` lifetimes gets that many blocks,
    shorter than a lifetime (then the interval is narrower than the truth).
    """
    t = gaps.t_s
    if t.size == 0:
        return np.zeros(0, dtype=np.int64)
    first = np.full(len(gaps.request_ids), np.inf)
    last = np.full(len(gaps.request_ids), -np.inf)
    np.minimum.at(first, gaps.request, t)
    np.maximum.at(last, gaps.request, t)
    seen = np.isfinite(first)
    lifetime = float(np.median(last[seen] - first[seen]))
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
    latencies = request_latencies(requests)[ok]
    window = measured_window(requests)
    return RunSamples(
        path=Path(path),
        run=run,
        latencies=latencies,
        gaps=token_gaps(run.tables.chunks, latencies["id"]),
        throughput=throughput_bins(requests, window, throughput_slices(int(ok.sum()))),
        requests=len(requests),
    )


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
_WORDS = {"itl_s": ("time blocks", "gaps")} | dict.fromkeys(THROUGHPUTS, ("time slices", "slices"))


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
    spec: MetricSpec, c: Comparison, gate: Gate | None, runs: tuple[RunSamples, RunSamples]
) -> MetricResult:
    """A row: what is missing, and the run size that would decide it."""
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
    few = _few_streams(runs) if spec.source == "itl_s" else None
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
    base_dir: str | Path,
    new_dir: str | Path,
    gates: Sequence[Gate] = (),
    *,
    metrics: Sequence[str] = DEFAULT_METRICS,
    force: bool = False,
    resamples: int = RESAMPLES,
    confidence: float = CONFIDENCE,
    seed: int = 0,
    inconclusive: str = FAIL,
) -> CompareResult:
    """Compare two run directories on ``metrics`` (and every gated metric).

    Refuses (``InputError``) runs of different workloads unless ``force``.
    ``inconclusive`` is ``"fail"`` or ``"pass"``: what an undecided gate counts as.
    """
    base = load_run(base_dir, "BASE_RUN")
    new = load_run(new_dir, "NEW_RUN", need_completed=False)
    differences = workload_differences(base.run.info, new.run.info)
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
            base.sample(group[0]),
            new.sample(group[0]),
            {spec.name: spec.stat for spec in group},
            resamples=resamples,
            confidence=confidence,
            seed=seed,
            names=_WORDS.get(source, ("requests", "requests")),
        )
        comparisons |= {c.metric: c for c in found}
    rows = [_row(s, comparisons[s.name], gate_of.get(s.name), (base, new)) for s in specs]
    labels = tuple(dict(r.run.info.labels) if r.run.info else {} for r in (base, new))
    return CompareResult(
        base.path, new.path, rows, differences, confidence, inconclusive, labels=labels
    )
