"""The canonical series from a Prometheus server (``--prometheus URL``) over a run window.

In production the engines are already scraped by Prometheus, often many replicas behind
a router; asking Prometheus gives the same canonical series without touching the
servers. The PromQL is generated from the flavour's mapping, one query per metric the
mapping reads, summed over replicas but keeping the labels the mapping selects on
(``sum by (mode) (sglang:realtime_tokens_total{…})``; ``avg`` / ``max`` where the mapping
aggregates that way; ``le`` for histogram buckets). Info metrics whose *labels* carry
the value (``vllm:cache_config_info``) are read raw. Each step's results are then fed to
the same mapping code that reads a /metrics page, so a series means the same thing
whichever way it was collected. DCGM exporter series give GPU samples the same shape as
the NVML probe's.

Limits: a counter summed over replicas is differenced after summing, so one replica's
restart mid-run reads as a reset of the sum (the increase is under-counted, never
invented).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qsl, urlsplit, urlunsplit

import requests
from prometheus_api_client import PrometheusApiClientException, PrometheusConnect
from urllib3.util.retry import Retry

from probes.exposition import Exposition, Sample
from probes.mapping import BUILTIN_FLAVOURS, builtin_mapping, choose_mapping
from probes.mapping_model import MetricMapping, Source
from probes.normalise import ServerSeries
from probes.sampling import ProbeStatus
from runtime.clock import RunClock
from workloads.errors import InputError

_PROMQL_AGGREGATE = {"sum": "sum", "mean": "avg", "max": "max"}

#: DCGM exporter fields → GPU table columns (FB values are MiB).
DCGM_FIELDS = {
    "DCGM_FI_DEV_GPU_UTIL": "utilisation_pct",
    "DCGM_FI_DEV_FB_USED": "memory_used_mib",
    "DCGM_FI_DEV_FB_FREE": "memory_free_mib",
    "DCGM_FI_DEV_SM_CLOCK": "sm_clock_mhz",
    "DCGM_FI_DEV_POWER_USAGE": "power_w",
}
_MIB = 1024 * 1024


@dataclass(frozen=True)
class Query:
    """One PromQL query and the metric name its results stand for."""

    metric: str
    promql: str


class PrometheusSource:
    """Read a run window's canonical series (and DCGM GPU series) from Prometheus.

    ``selector`` adds label matchers to every query (``job="vllm"``) when the Prometheus
    server scrapes more than the target. Without a mapping the flavour is detected from
    the metric names Prometheus holds.
    """

    def __init__(
        self,
        url: str,
        mapping: MetricMapping | None = None,
        *,
        selector: str = "",
        timeout_s: float = 10.0,
    ) -> None:
        if not url.startswith(("http://", "https://")):
            raise InputError(
                "--prometheus", f"{url!r} is not an http(s) URL", "e.g. http://host:9090"
            )
        self.url = url.rstrip("/")
        # A query string (``?token=T``, how token gateways take their key) goes with every
        # request as parameters, after the API path, not before it.
        parts = urlsplit(url)
        self._params = dict(parse_qsl(parts.query, keep_blank_values=True))
        base = urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/"), "", ""))
        self.selector = selector
        self.timeout_s = timeout_s
        self.status = ProbeStatus("prometheus")
        self._mapping = mapping
        self._client = PrometheusConnect(
            base,
            disable_ssl=True,
            retry=Retry(total=1, backoff_factor=0.1, status_forcelist=(502, 503, 504)),
            timeout=timeout_s,
        )

    # -- queries ---------------------------------------------------------------------------
    def mapping(self) -> MetricMapping:
        """The mapping given, or the one detected from the names Prometheus holds."""
        if self._mapping is None:
            names = [Sample(r["metric"]["__name__"], {}, 1.0) for r in self._get(_detect_query())]
            self._mapping = choose_mapping(Exposition(names))
        return self._mapping

    def queries(self) -> list[Query]:
        """Every query a window read runs, in a stable order (recorded in run files)."""
        mapping = self.mapping()
        found: dict[str, Query] = {}
        for source in (*mapping.series.values(), *mapping.pool.sources.values()):
            for leaf in _leaves(source):
                for base in leaf.metrics:
                    for name in mapping.spellings(base):
                        query = self._leaf_query(name, leaf)
                        found.setdefault(query.promql, query)
        for hist in mapping.histograms.values():
            keys = sorted({k for k, _ in hist.labels})
            for base in hist.metrics:
                for name in mapping.spellings(base):
                    for suffix, by in (
                        ("_bucket", ["le", *keys]),
                        ("_count", keys),
                        ("_sum", keys),
                    ):
                        query = self._sum_query(name + suffix, hist.labels, by, "sum")
                        found.setdefault(query.promql, query)
        return list(found.values())

    def _matchers(self, labels: Iterable[tuple[str, str]]) -> str:
        parts = [f'{k}="{_escape(v)}"' for k, v in labels]
        if self.selector:
            parts.append(self.selector)
        return "{" + ",".join(parts) + "}" if parts else ""

    def _sum_query(
        self, name: str, labels: Iterable[tuple[str, str]], by: list[str], aggregate: str
    ) -> Query:
        op = _PROMQL_AGGREGATE[aggregate]
        grouping = f" by ({', '.join(by)})" if by else ""
        return Query(name, f"{op}{grouping} ({name}{self._matchers(labels)})")

    def _leaf_query(self, name: str, leaf: Source) -> Query:
        if leaf.label is not None:  # the value is a label: keep every series as it is
            return Query(name, f"{name}{self._matchers(leaf.labels)}")
        return self._sum_query(
            name, leaf.labels, sorted({k for k, _ in leaf.labels}), leaf.aggregate
        )

    # -- HTTP ------------------------------------------------------------------------------
    def _get(self, promql: str, window: tuple[datetime, datetime, float] | None = None) -> list:
        try:
            params = dict(self._params) or None  # the library adds its own to the dict
            if window is None:
                return self._client.custom_query(promql, params=params)
            start, end, step = window
            return self._client.custom_query_range(promql, start, end, str(step), params=params)
        except requests.RequestException as exc:
            reason = f"Prometheus at {self.url} unreachable: {type(exc).__name__}"
            raise InputError("--prometheus", reason, "is the server up?") from None
        except PrometheusApiClientException as exc:
            raise InputError("--prometheus", f"query {promql!r} failed: {exc}") from None

    def _window(
        self, clock: RunClock, start_s: float, end_s: float, step_s: float
    ) -> tuple[datetime, datetime, float]:
        if end_s <= start_s or step_s <= 0:
            raise InputError("window", f"empty window [{start_s}, {end_s}] or step {step_s}")
        return (
            datetime.fromtimestamp(clock.to_wall(start_s), tz=UTC),
            datetime.fromtimestamp(clock.to_wall(end_s), tz=UTC),
            step_s,
        )

    # -- reads -----------------------------------------------------------------------------
    def server_series(
        self, clock: RunClock, start_s: float, end_s: float, step_s: float = 1.0
    ) -> ServerSeries | None:
        """The canonical series on the run clock, one row per step; None (the status says
        why) when Prometheus cannot be asked or holds nothing for the target."""
        try:
            window = self._window(clock, start_s, end_s, step_s)
            mapping = self.mapping()
            by_time: dict[float, list[Sample]] = defaultdict(list)
            for query in self.queries():
                for result in self._get(query.promql, window):
                    labels = {k: v for k, v in result["metric"].items() if k != "__name__"}
                    for stamp, value in result["values"]:
                        by_time[float(stamp)].append(Sample(query.metric, labels, float(value)))
        except InputError as exc:
            self.status.fail(exc.problem)
            return None
        if not by_time:
            self.status.fail("Prometheus holds no series of the target in the run window")
            return None
        self.status.succeeded()
        times = sorted(by_time)
        snapshots = [mapping.snapshot(Exposition(by_time[t])) for t in times]
        return ServerSeries.from_snapshots([t - clock.wall_t0 for t in times], snapshots)

    def gpu_rows(
        self, clock: RunClock, start_s: float, end_s: float, step_s: float = 1.0
    ) -> list[dict[str, Any]]:
        """DCGM exporter samples as GPU-table rows (per host and GPU, not summed); empty
        (status says why) when Prometheus has no DCGM series."""
        try:
            window = self._window(clock, start_s, end_s, step_s)
            readings: dict[tuple[float, str], dict[str, Any]] = {}
            for metric, column in DCGM_FIELDS.items():
                for result in self._get(f"{metric}{self._matchers(())}", window):
                    labels = result["metric"]
                    gpu = "/".join(x for x in (labels.get("Hostname"), labels.get("gpu")) if x)
                    for stamp, value in result["values"]:
                        row = readings.setdefault(
                            (float(stamp), gpu),
                            {
                                "t_s": float(stamp) - clock.wall_t0,
                                "gpu": gpu,
                                "name": labels.get("modelName"),
                            },
                        )
                        row[column] = float(value)
        except InputError as exc:
            self.status.fail(exc.problem)
            return []
        if not readings:
            self.status.fail("no DCGM exporter series (DCGM_FI_DEV_*) in the run window")
            return []
        return [_gpu_row(row) for _, row in sorted(readings.items())]


def _gpu_row(reading: dict[str, Any]) -> dict[str, Any]:
    used, free = reading.get("memory_used_mib"), reading.get("memory_free_mib")
    return {
        "t_s": reading["t_s"],
        "gpu": reading["gpu"],
        "name": reading["name"],
        "utilisation_pct": reading.get("utilisation_pct"),
        "memory_used_bytes": used * _MIB if used is not None else None,
        "memory_total_bytes": (used + free) * _MIB
        if used is not None and free is not None
        else None,
        "sm_clock_mhz": reading.get("sm_clock_mhz"),
        "power_w": reading.get("power_w"),
    }


def _detect_query() -> str:
    """The names of every series whose prefix some built-in flavour is detected by."""
    prefixes = {p for f in BUILTIN_FLAVOURS for p in builtin_mapping(f).detect}
    pattern = "|".join(re.escape(p) for p in sorted(prefixes))
    return f'count by (__name__) ({{__name__=~"({pattern}).+"}})'


def _leaves(source: Source) -> list[Source]:
    """The metric-reading sources inside ``first`` / ``sum`` compositions."""
    if source.first or source.total:
        return [leaf for part in (*source.first, *source.total) for leaf in _leaves(part)]
    return [source]


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')
