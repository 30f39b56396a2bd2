"""Did NEW get worse than BASE? Two runs of one workload, compared metric by metric.

Metrics are named ``<latency>_<statistic>`` — latency one of ``ttft``, ``ttft_sent``,
``itl``, ``tpot``, ``e2e``, ``e2e_sent`` and statistic one of ``mean``, ``p50``, ``p90``,
``p95``, ``p99``, ``p999`` (``itl_p99``, ``ttft_p50``) — or ``requests_per_s`` /
``output_tokens_per_s``. Lower is better for latencies, higher for throughput.

Each metric is a ratio NEW/BASE with a bootstrap interval and a rank test
(``diagnose.stats``): per-request values for TTFT/TPOT/E2E, per-token ITL gaps
resampled by request (the gaps of one request are not independent), and throughput in
equal time slices of each run's measured window (one run has one throughput, but its
slices vary).

A gate ``METRIC:+X%`` fails when NEW is worse than BASE by more than X (the point
estimate) *and* the difference is significant (``Comparison.significant``): a noisy
run must not fail a build, and a real but tolerated change must not either.

Two runs are comparable when their workload specs (``run.json`` ``workload``) are equal
except for the seed and the run length (``num_requests``, ``duration``): another sample
of the same traffic. Another workload name, family, preset, arrival process, rate,
concurrency, prompt format or parameter is another experiment.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from diagnose.metrics import (
    CONFIDENCE,
    DEFAULT_METRICS,
    RESAMPLES,
    THROUGHPUTS,
    MetricSpec,
    metric_spec,
)
from diagnose.stats import Comparison, Sample, compare_stats
from loadgen.rundir import RUN_JSON, RunDir
from probes.latency import (
    TokenGaps,
    completed_mask,
    measured,
    measured_window,
    request_latencies,
    throughput_bins,
    token_gaps,
)
from workloads.errors import InputError

#: Workload spec keys that may differ between comparable runs.
SAME_WORKLOAD_ANYWAY = ("seed", "num_requests", "duration")


@dataclass(frozen=True)
class Gate:
    """Fail when ``metric`` gets worse by more than ``max_worsening`` (0.10 = 10 %)."""

    metric: MetricSpec
    max_worsening: float

    @property
    def text(self) -> str:
        return f"{self.metric.name}:+{self.max_worsening * 100:g}%"


_GATE = re.compile(r"^\s*([a-z0-9_]+)\s*:\s*\+?\s*(\d+(?:\.\d+)?)\s*%\s*$")
_GATE_FIX = "write --gate METRIC:+X%, e.g. --gate itl_p99:+10% (NEW may be up to 10 % worse)"


def parse_gate(text: str) -> Gate:
    """Parse ``METRIC:+X%`` (``itl_p99:+10%``, ``output_tokens_per_s:+5%``)."""
    match = _GATE.match(text.lower())
    if match is None:
        raise InputError("--gate", f"{text!r} is not METRIC:+X%", _GATE_FIX)
    return Gate(metric_spec(match[1], flag="--gate"), float(match[2]) / 100.0)


def worsening(spec: MetricSpec, ratio: float) -> float:
    """How much worse NEW is than BASE as a fraction (negative: better)."""
    return ratio - 1.0 if spec.is_latency else 1.0 - ratio


@dataclass(frozen=True)
class RunSamples:
    """What a comparison resamples from one run directory."""

    path: Path
    run_json: dict[str, Any]
    latencies: pd.DataFrame
    gaps: TokenGaps
    throughput: pd.DataFrame

    def sample(self, spec: MetricSpec) -> Sample:
        if spec.source == "itl_s":
            return Sample.of(self.gaps.gap_s, self.gaps.request)
        if spec.source in THROUGHPUTS:
            return Sample.of(self.throughput[spec.source])
        return Sample.of(self.latencies[spec.source])


def throughput_slices(completed: int) -> int:
    """Time slices for throughput: about ten completions each, between 5 and 30."""
    return max(5, min(30, completed // 10))


def load_run(path: str | Path, argument: str) -> RunSamples:
    """Read what ``compare`` needs from a run directory; ``argument`` names it in errors."""
    try:
        run = RunDir(path)
    except FileNotFoundError:
        raise InputError(
            argument, f"no run directory at {path}", "pass a bench --out folder"
        ) from None
    if not run.has(RUN_JSON):
        raise InputError(argument, f"{path} has no {RUN_JSON}", "pass a bench --out folder")
    requests = measured(run.read_table("requests"))
    ok = completed_mask(requests)
    if not ok.any():
        raise InputError(argument, f"{path} has no completed requests", "compare finished runs")
    latencies = request_latencies(requests)[ok]
    window = measured_window(requests)
    return RunSamples(
        path=Path(path),
        run_json=run.read_json(RUN_JSON),
        latencies=latencies,
        gaps=token_gaps(run.read_table("chunks"), latencies["id"]),
        throughput=throughput_bins(requests, window, throughput_slices(int(ok.sum()))),
    )


def workload_differences(base: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """How two ``run.json`` workload specs differ, ignoring seed and run length."""
    specs = [doc.get("workload") for doc in (base, new)]
    if any(spec is None for spec in specs):
        return ["a run.json has no workload spec, so the runs cannot be shown to match"]
    if not all(isinstance(spec, dict) for spec in specs):
        return [] if specs[0] == specs[1] else [f"workload: {specs[0]!r} vs {specs[1]!r}"]
    a, b = ({k: v for k, v in s.items() if k not in SAME_WORKLOAD_ANYWAY} for s in specs)
    return [
        f"workload.{k}: {a.get(k)!r} vs {b.get(k)!r}" for k in sorted(a | b) if a.get(k) != b.get(k)
    ]


@dataclass(frozen=True)
class MetricResult:
    """One row of the comparison: the metric, its comparison and the gate on it, if any."""

    spec: MetricSpec
    comparison: Comparison
    gate: Gate | None = None

    @property
    def worsening(self) -> float:
        return worsening(self.spec, self.comparison.ratio)

    @property
    def gate_failed(self) -> bool:
        return (
            self.gate is not None
            and self.worsening > self.gate.max_worsening
            and self.comparison.significant
        )

    def to_dict(self) -> dict[str, Any]:
        out = self.comparison.to_dict() | {
            "higher_is_better": self.spec.higher_is_better,
            "worse_by": self.worsening,
        }
        if self.gate is not None:
            out["gate"] = {
                "max_worse_by": self.gate.max_worsening,
                "failed": self.gate_failed,
                "text": self.gate.text,
            }
        return out


@dataclass(frozen=True)
class CompareResult:
    base: Path
    new: Path
    rows: list[MetricResult]
    differences: list[str] = field(default_factory=list)
    confidence: float = CONFIDENCE

    @property
    def failed_gates(self) -> list[MetricResult]:
        return [row for row in self.rows if row.gate_failed]

    @property
    def passed(self) -> bool:
        return not self.failed_gates

    def to_dict(self) -> dict[str, Any]:
        return {
            "base": str(self.base),
            "new": str(self.new),
            "passed": self.passed,
            "confidence": self.confidence,
            "workload_differences": self.differences,
            "comparisons": [row.to_dict() for row in self.rows],
        }


def _ordered_metrics(metrics: Sequence[str], gates: Sequence[Gate]) -> list[MetricSpec]:
    names = list(dict.fromkeys([*metrics, *(g.metric.name for g in gates)]))
    return [metric_spec(name) for name in names]


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
) -> CompareResult:
    """Compare two run directories on ``metrics`` (and every gated metric).

    Refuses (``InputError``) runs of different workloads unless ``force``.
    """
    base, new = load_run(base_dir, "BASE_RUN"), load_run(new_dir, "NEW_RUN")
    differences = workload_differences(base.run_json, new.run_json)
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
    for group in by_source.values():
        found = compare_stats(
            base.sample(group[0]),
            new.sample(group[0]),
            {spec.name: spec.stat for spec in group},
            resamples=resamples,
            confidence=confidence,
            seed=seed,
        )
        comparisons |= {c.metric: c for c in found}
    rows = [MetricResult(s, comparisons[s.name], gate_of.get(s.name)) for s in specs]
    return CompareResult(base.path, new.path, rows, differences, confidence)
