"""The metrics two runs are compared on, by name, and a comparison's default settings.

Metrics are named ``<latency>_<statistic>`` (``itl_p99``, ``ttft_p50``),
``requests_per_s`` / ``output_tokens_per_s``, or ``stall_worst`` / ``stall_lost`` (the mean
over a run's stall events, ``probes.stall_events``); ``metric_spec`` says where a metric's samples
come from and which way is better. Nothing here needs numpy, pandas or scipy: the CLI shows
these names and defaults in ``--help`` on every start, before anything is compared.
"""

from __future__ import annotations

from dataclasses import dataclass

from runfmt import metrics as registry
from runtime.quantiles import STATISTICS
from workloads.errors import InputError

#: Default number of bootstrap resamples.
RESAMPLES = 2000
#: Default confidence level of intervals (significant: the interval excludes 1).
CONFIDENCE = 0.95


def _latencies() -> dict[str, str]:
    """Registered latency prefixes and the summary key each is described under (read at
    each ask: a latency registered after import is compared and gated too)."""
    return {metric.prefix: metric.key for metric in registry.latencies()}


#: Throughput metrics (higher is better), compared as the mean over time slices.
THROUGHPUTS = tuple(metric.key for metric in registry.THROUGHPUTS)
#: What ``compare`` shows when no metric is named (the registry's selection), and besides
#: them when a run has stall events (the mean over long prefills of each stall metric).
DEFAULT_METRICS = registry.COMPARE_DEFAULTS
STALL_METRICS = registry.COMPARE_STALLS
#: The stall metrics' sources (``summary.json`` keys), compared over events.
STALL_SOURCES = tuple(metric.key for metric in registry.STALLS)


@dataclass(frozen=True)
class MetricSpec:
    """One comparable metric: where its samples come from and which way is better."""

    name: str
    source: str
    stat: str
    higher_is_better: bool

    @property
    def is_latency(self) -> bool:
        return not self.higher_is_better

    @property
    def metric(self) -> registry.Metric:
        """The registry entry its samples come from: its names, unit and format."""
        return registry.by_key(self.source)

    def named(self, *, stat_first: bool = False) -> str:
        """How a reader names it, as the registry does: ``ITL p99`` (``p99 ITL`` with
        ``stat_first``) for a latency statistic, the label of a throughput."""
        if not self.is_latency or self.source in STALL_SOURCES:
            return self.metric.label
        return self.metric.named(self.stat, stat_first=stat_first)


def metric_grammar() -> str:
    """The metric names ``compare`` and its gates accept, in one line."""
    return (
        f"<{'|'.join(_latencies())}>_<{'|'.join(STATISTICS)}> or {' or '.join(THROUGHPUTS)}"
        f" or {' or '.join(STALL_METRICS)} (per long prefill)"
    )


def metric_spec(name: str, flag: str = "--metric") -> MetricSpec:
    """The spec of a metric name; ``InputError`` naming ``flag`` for an unknown one."""
    if name in THROUGHPUTS:
        return MetricSpec(name, name, "mean", registry.by_key(name).higher_is_better)
    if name in registry.STALL_NAMES:  # a mean over stall events
        return MetricSpec(name, registry.STALL_NAMES[name].key, "mean", False)
    prefix, _, stat = name.rpartition("_")
    key = _latencies().get(prefix)
    if key is not None and stat in STATISTICS:
        return MetricSpec(name, key, stat, registry.by_key(key).higher_is_better)
    raise InputError(flag, f"unknown metric {name!r}", f"use {metric_grammar()}")
