"""Canonical series over time: counters → per-window increases and rates, gauges →
per-window levels, histograms → per-window quantiles from bucket increases (fixed
windows over a whole run: ``probes.timeline.Timeline.bins``).

A server's counters are totals since *it* started, not since our run did, and they
restart from zero when the server does. So a run's prefix hits are the sum of the
reset-aware increments between consecutive scrapes (an increment that goes negative is a
restart: everything now counted is new, as Prometheus's ``increase`` assumes), and a
histogram's window is the difference of its cumulative buckets. A series a scrape did not
carry is NaN in the frame — unknown, never 0 — and a counter that appears mid-run was
created then (SGLang creates ``cached_tokens_total`` at the first hit), so it counts from 0.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from probes.canonical import HISTOGRAMS, SERIES, Histogram, Kind, Provenance, Value
from probes.exposition import Exposition, Sample, exposition_from_rows
from probes.mapping import choose_mapping
from probes.mapping_model import MetricMapping, Snapshot
from probes.pool import pool_breakdown
from runfmt.columns import Columns, Table, as_columns, concat, numbers
from runfmt.summary_server import Level
from runtime.quantiles import QUANTILES

#: Pool columns of the frame (from ``PoolBreakdown.values``); levels like gauges.
POOL_COLUMNS: tuple[str, ...] = ("pool_active", "pool_reclaimable", "pool_free", "pool_total")

_RANK = {Provenance.UNKNOWN: 0, Provenance.DERIVED: 1, Provenance.MEASURED: 2}


@dataclass
class ServerSeries:
    """The canonical series of one run, one row per successful scrape, on the run clock."""

    flavour: str
    itl_per: str | None
    pool_unit: str
    frame: Columns
    provenance: dict[str, Provenance]
    sources: dict[str, str | None]
    histograms: dict[str, list[Histogram | None]]
    #: Why the counters have no baseline (the first scrape came after the first request
    #: was sent: a page that stalled at the run's start): every increase is then
    #: unknown with this reason rather than short of the first requests.
    no_baseline: str | None = None

    # -- construction ----------------------------------------------------------------------
    @classmethod
    def from_snapshots(cls, times: list[float], snapshots: list[Snapshot]) -> ServerSeries:
        """One row per snapshot; each column keeps its best provenance seen in the run."""
        if len(times) != len(snapshots):
            raise ValueError("one time per snapshot")
        rows: list[dict[str, Any]] = []
        provenance = {name: Provenance.UNKNOWN for name in (*SERIES, *POOL_COLUMNS)}
        sources: dict[str, str | None] = {name: None for name in provenance}
        for t_s, snap in zip(times, snapshots, strict=True):
            pool = pool_breakdown(snap)
            values: dict[str, Value] = dict(snap.series)
            values.update(
                {
                    "pool_active": pool.active.value,
                    "pool_reclaimable": pool.reclaimable.value,
                    "pool_free": pool.free.value,
                    "pool_total": pool.total,
                }
            )
            row: dict[str, Any] = {"t_s": t_s}
            for name, value in values.items():
                row[name] = value.value if value.value is not None else np.nan
                if _RANK[value.provenance] > _RANK[provenance[name]]:
                    provenance[name], sources[name] = value.provenance, value.source
                elif sources[name] is None:
                    sources[name] = value.source
            rows.append(row)
        names = ["t_s", *provenance]
        frame = Columns(
            {
                name: np.array([row.get(name, np.nan) for row in rows], dtype=float)
                for name in names
            },
            len(rows),
        )
        first = snapshots[0] if snapshots else None
        for name in HISTOGRAMS:
            sources[name] = next(
                (s.histogram_sources[name] for s in snapshots if s.histogram_sources[name]), None
            )
        return cls(
            flavour=first.flavour if first else "unknown",
            itl_per=first.itl_per if first else None,
            pool_unit=first.pool_unit if first else "blocks",
            frame=frame,
            provenance=provenance,
            sources=sources,
            histograms={
                name: _shared_bounds([s.histograms[name] for s in snapshots]) for name in HISTOGRAMS
            },
        )

    @classmethod
    def from_samples(cls, samples: Table, mapping: MetricMapping | None = None) -> ServerSeries:
        """From a ``server_metrics`` table (long format; ``Columns`` or a DataFrame), its
        rows taken in time order (a stable sort). Without a mapping the flavour is detected
        from the first scrape. Only the metrics the mapping reads are rebuilt, and each
        distinct label set is decoded once: an hour of 0.5 s scrapes is ~3 million rows."""
        if samples.empty:
            return cls.from_snapshots([], [])
        samples = as_columns(samples)
        samples = samples[np.argsort(numbers(samples, "t_s"), kind="stable")]
        return cls.from_parts(lambda: iter((samples,)), mapping)

    @classmethod
    def from_parts(
        cls, parts: Callable[[], Iterable[Columns]], mapping: MetricMapping | None = None
    ) -> ServerSeries:
        """``from_samples`` of the table that ``parts()`` gives a part at a time (a run's
        row groups: ``RunTables.parts``), holding one scrape's rows at a time, never the
        table: the series a long run's end reads. A scrape may go on from one part into
        the next. The parts are read once, twice when a series resolved through different
        sources in different scrapes (``one_source_per_series``: the scrapes are resolved
        again with the source held to one). A table whose times go back (not written in
        scrape order) or are unknown is read whole and sorted, as ``from_samples`` does:
        the same series either way."""
        try:
            return cls._from_scrapes(parts, mapping)
        except _Unordered:
            return cls.from_samples(concat([as_columns(part) for part in parts()]), mapping)

    @classmethod
    def _from_scrapes(
        cls, parts: Callable[[], Iterable[Columns]], mapping: MetricMapping | None
    ) -> ServerSeries:
        decoded: dict[str, dict[str, str]] = {}
        times: list[float] = []
        snapshots: list[Snapshot] = []
        used: dict[str, set[int | None]] = {}
        wanted: set[str] = set()
        for t_s, scrape in _scrapes(parts()):
            if mapping is None:  # the flavour from the first scrape, every metric of it
                mapping = choose_mapping(exposition_from_rows(scrape.records()))
            if not times:
                wanted = set(mapping.metric_names())
                used = {name: set() for name, source in mapping.series.items() if source.first}
            exposition = _exposition(scrape, wanted, decoded)
            for name, options in used.items():
                options.add(mapping.option_used(name, exposition))
            times.append(t_s)
            snapshots.append(mapping.snapshot(exposition))
        if mapping is not None:
            pinned = _pinned(mapping, used)
            if pinned is not mapping:  # resolve every scrape again through the held source
                snapshots = [
                    pinned.snapshot(_exposition(scrape, wanted, decoded))
                    for _, scrape in _scrapes(parts())
                ]
        return cls.from_snapshots(times, snapshots)

    # -- slicing ---------------------------------------------------------------------------
    @property
    def t_s(self) -> np.ndarray:
        return self.frame["t_s"]

    def _rows(self, start: float | None, end: float | None, *, baseline: bool) -> np.ndarray:
        """Row indices in [start, end]; with ``baseline`` also the last scrape before
        start, so an increase over the window starts from the value at its opening."""
        t = self.t_s
        lo = -math.inf if start is None else start
        hi = math.inf if end is None else end
        inside = np.flatnonzero((t >= lo) & (t <= hi))
        if baseline and start is not None:
            before = np.flatnonzero(t < lo)
            if before.size:
                inside = np.concatenate([[before[-1]], inside])
        return inside

    def window(self, start: float | None, end: float | None) -> ServerSeries:
        """The scrapes in [start, end] (plus the one before, as the counters' baseline)."""
        idx = self._rows(start, end, baseline=True)
        return ServerSeries(
            self.flavour,
            self.itl_per,
            self.pool_unit,
            self.frame[idx],
            dict(self.provenance),
            dict(self.sources),
            {name: [hists[i] for i in idx] for name, hists in self.histograms.items()},
        )

    # -- counters --------------------------------------------------------------------------
    def increase(self, name: str, start: float | None = None, end: float | None = None) -> Value:
        """Reset-aware increase of a counter over [start, end]."""
        _require(name, Kind.COUNTER)
        if self.no_baseline is not None:
            return Value.unknown(self.no_baseline)
        values = self.frame[name][self._rows(start, end, baseline=True)]
        if np.isnan(values).all():
            return Value.unknown(self.sources.get(name) or f"{name} not exposed")
        if values.size < 2:
            return Value.unknown("fewer than two scrapes in the window")
        steps = _increments(values)
        return Value(float(steps.sum()), self.provenance[name], self.sources[name])

    def rate(self, name: str, start: float | None = None, end: float | None = None) -> Value:
        """Mean per-second rate of a counter over the span its scrapes cover."""
        idx = self._rows(start, end, baseline=True)
        total = self.increase(name, start, end)
        span = float(self.t_s[idx[-1]] - self.t_s[idx[0]]) if idx.size >= 2 else 0.0
        if total.value is None or span <= 0:
            return Value.unknown(total.source or "no time span")
        return Value(total.value / span, total.provenance, total.source)

    # -- levels ----------------------------------------------------------------------------
    def level(self, name: str, start: float | None = None, end: float | None = None) -> Level:
        """Mean, p50, max, min and last of a gauge (or pool bucket) over [start, end]; each
        None when the server never exposed it there. ``samples`` counts the scrapes that
        knew the value, ``scrapes`` all of them: a pool bucket can be pinned at one
        moment and unknown at the next."""
        values = self.frame[name][self._rows(start, end, baseline=False)]
        known = values[np.isfinite(values)]
        seen = Level(
            provenance=str(self.provenance[name] if known.size else Provenance.UNKNOWN),
            source=self.sources.get(name),
            samples=int(known.size),
            scrapes=int(values.size),
        )
        if not known.size:
            return seen
        return replace(
            seen,
            mean=float(known.mean()),
            p50=float(np.median(known)),
            max=float(known.max()),
            min=float(known.min()),
            last=float(known[-1]),
        )

    def latest(self, name: str) -> Value:
        """The last known value of any column (config such as ``block_size``)."""
        values = self.frame[name] if name in self.frame else np.array([])
        known = values[np.isfinite(values)]
        if not known.size:
            return Value.unknown(self.sources.get(name) or f"{name} not exposed")
        return Value(float(known[-1]), self.provenance[name], self.sources.get(name))

    # -- histograms ------------------------------------------------------------------------
    def histogram_increase(
        self, name: str, start: float | None = None, end: float | None = None
    ) -> Histogram | None:
        """Observations made in [start, end], summed across reset-aware steps (None
        without a baseline, ``no_baseline``)."""
        if self.no_baseline is not None:
            return None
        hists = [self.histograms[name][i] for i in self._rows(start, end, baseline=True)]
        total: Histogram | None = None
        previous: Histogram | None = None
        for index, hist in enumerate(hists):
            if hist is None:
                continue
            if index > 0:
                step = hist.minus(previous) if previous is not None else hist
                total = step if total is None or total.bounds != step.bounds else total.plus(step)
            previous = hist
        if total is None and previous is not None:
            return Histogram(previous.bounds, (0.0,) * len(previous.bounds), 0.0, 0.0)
        return total

    # -- one window as flat numbers --------------------------------------------------------
    def window_stats(self, start: float, end: float) -> dict[str, Any]:
        """The server over [start, end] as flat numbers: counter increases and rates,
        gauge means and maxima, pool means, histogram count/p50/p99 (None = unknown)."""
        row: dict[str, Any] = {}
        for name, kind in SERIES.items():
            if kind is Kind.COUNTER:
                row[f"{name}_delta"] = self.increase(name, start, end).value
                row[f"{name}_rate"] = self.rate(name, start, end).value
            elif kind is Kind.GAUGE:
                stats = self.level(name, start, end)
                row[f"{name}_mean"], row[f"{name}_max"] = stats.mean, stats.max
        for name in POOL_COLUMNS:
            row[f"{name}_mean"] = self.level(name, start, end).mean
        for name in HISTOGRAMS:
            hist = self.histogram_increase(name, start, end)
            row[f"{name}_count"] = hist.count if hist else None
            row[f"{name}_p50"] = hist.bucket_quantile(0.5) if hist else None
            row[f"{name}_p99"] = hist.bucket_quantile(0.99) if hist else None
        return row


def one_source_per_series(mapping: MetricMapping, expositions: list[Exposition]) -> MetricMapping:
    """``mapping`` with every series that resolved through different ``first``
    alternatives in different scrapes held to the one the mapping prefers among them: a
    run's counter is one series, never one source's total spliced onto another's (SGLang's
    ``prefix_queries`` from ``prompt_tokens_total`` before the first hit and from
    ``realtime_tokens_total`` after). Scrapes without that source read unknown there."""
    used = {
        name: {mapping.option_used(name, exposition) for exposition in expositions}
        for name, source in mapping.series.items()
        if source.first
    }
    return _pinned(mapping, used)


def _pinned(mapping: MetricMapping, used: dict[str, set[int | None]]) -> MetricMapping:
    """``mapping`` with each series in ``used`` (the ``first`` alternatives its scrapes
    resolved through) held to the preferred one when they were several; ``mapping``
    itself when none was."""
    choices: dict[str, int] = {}
    for name, options in used.items():
        known = options - {None}
        if len(known) > 1:
            choices[name] = min(known)  # type: ignore[type-var]
    return mapping.pinned(choices) if choices else mapping


def _shared_bounds(histograms: list[Histogram | None]) -> list[Histogram | None]:
    """A histogram's scrapes with equal bucket bounds holding one tuple of them (a server
    keeps its buckets: a run of an hour held each scrape's copy)."""
    shared: list[Histogram | None] = []
    bounds: tuple[float, ...] | None = None
    for hist in histograms:
        if hist is not None and hist.bounds == bounds and hist.bounds is not bounds:
            hist = dataclasses.replace(hist, bounds=bounds)
        bounds = hist.bounds if hist is not None else bounds
        shared.append(hist)
    return shared


class _Unordered(Exception):
    """A ``server_metrics`` table whose times go back or are unknown: read it whole."""


def _scrapes(parts: Iterable[Columns]) -> Iterator[tuple[float, Columns]]:
    """Each scrape's rows (those of one time, in the table's order) with its time, from
    parts in time order; a scrape that goes on into the next part is held until it ends.
    ``_Unordered`` when a time goes back or is not a number."""
    held: list[Columns] = []
    last = -math.inf
    for part in parts:
        part = as_columns(part)
        if not len(part):
            continue
        t = numbers(part, "t_s")
        if not np.isfinite(t).all() or t[0] < last or (t[1:] < t[:-1]).any():
            raise _Unordered
        starts = np.flatnonzero(t[1:] != t[:-1]) + 1
        bounds = [0, *starts.tolist(), len(t)]
        for lo, hi in itertools.pairwise(bounds):
            if held and t[lo] != last:
                yield last, concat(held)
                held = []
            held.append(part[np.arange(lo, hi)])
            last = float(t[lo])
    if held:
        yield last, concat(held)


def _exposition(
    scrape: Columns, wanted: set[str], decoded: dict[str, dict[str, str]]
) -> Exposition:
    """One scrape's samples of the ``wanted`` metrics; each distinct label set is decoded
    once over the run (``decoded``), and its samples share the dict."""
    metrics = np.asarray(scrape["metric"], dtype=object).tolist()
    kept = scrape[np.fromiter((m in wanted for m in metrics), bool, len(metrics))]
    return Exposition(
        [
            Sample(m, decoded.get(lbl) or decoded.setdefault(lbl, json.loads(lbl)), float(v))
            for m, lbl, v in zip(
                *(kept[c].tolist() for c in ("metric", "labels", "value")), strict=True
            )
        ]
    )


def _require(name: str, kind: Kind) -> None:
    if SERIES.get(name) is not kind:
        raise KeyError(f"{str(name)!r} is not a canonical {kind} series")


def _increments(values: np.ndarray) -> np.ndarray:
    """Per-step increases of a counter: restarts and (re)appearances count from zero."""
    prev, cur = values[:-1], values[1:]
    steps = np.where(np.isnan(prev), cur, np.where(cur < prev, cur, cur - prev))
    return np.where(np.isnan(cur), 0.0, steps)


def histogram_summary(hist: Histogram | None) -> dict[str, Any]:
    """Count, mean and the report's quantiles (p50…p999) of a histogram window, plus how
    many observations fell past the last finite bucket (their quantiles are floors)."""
    if hist is None:
        return {"count": None, "mean": None, **{q: None for q in QUANTILES}, "overflow": None}
    overflow = hist.cumulative[-1] - hist.cumulative[-2] if len(hist.cumulative) > 1 else 0.0
    return {
        "count": hist.count,
        "mean": hist.mean,
        **{q: hist.bucket_quantile(pct / 100.0) for q, pct in QUANTILES.items()},
        "overflow": overflow,
    }
