"""A flavour mapping in memory, and its resolution against one scrape.

``MetricMapping`` holds, for each canonical series, histogram and pool bucket, the ``Source``
the engine exposes it as; ``MetricMapping.snapshot`` resolves them against one ``/metrics``
scrape into a ``Snapshot``. The files these are read from, and their keys, are
``probes.mapping``'s.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from probes.canonical import HISTOGRAMS, SERIES, Histogram, Provenance, Value
from runfmt.series import Hist

if TYPE_CHECKING:
    from probes.exposition import Exposition, Sample

#: How samples from several engines or replicas combine, by the ``aggregate`` key.
AGGREGATES: dict[str, Callable[[list[float]], float]] = {
    "sum": math.fsum,
    "mean": lambda xs: math.fsum(xs) / len(xs),
    "max": max,
}

_LABEL_WORDS = {"true": 1.0, "false": 0.0}


@dataclass(frozen=True)
class Source:
    """Where one canonical value comes from (see the module docstring for the keys)."""

    metrics: tuple[str, ...] = ()
    labels: tuple[tuple[str, str], ...] = ()
    label: str | None = None
    aggregate: str = "sum"
    scale: float = 1.0
    first: tuple[Source, ...] = ()
    total: tuple[Source, ...] = ()
    derived: bool = False
    #: Metrics whose presence says this (not yet created) counter is 0 (``zero_if``).
    zero_if: tuple[str, ...] = ()

    def metric_names(self) -> set[str]:
        """Every metric this source may read (for scrape filtering and PromQL)."""
        names = set(self.metrics) | set(self.zero_if)
        for part in (*self.first, *self.total):
            names |= part.metric_names()
        return names


@dataclass(frozen=True)
class HistogramSource:
    metrics: tuple[str, ...]
    labels: tuple[tuple[str, str], ...] = ()
    per: str | None = None
    scale: float = 1.0


@dataclass(frozen=True)
class PoolSpec:
    unit: str = "blocks"
    reserved: float = 0.0
    sources: dict[str, Source] = field(default_factory=dict)
    note: str | None = None  # why buckets it lacks are unknown


@dataclass(frozen=True)
class Snapshot:
    """The canonical view of one scrape."""

    flavour: str
    series: dict[str, Value]
    histograms: dict[str, Histogram | None]
    histogram_sources: dict[str, str | None]
    pool_raw: dict[str, Value]
    pool_unit: str
    pool_reserved: float
    pool_note: str
    itl_per: str | None


@dataclass(frozen=True)
class MetricMapping:
    """How one server flavour names its metrics: the source of every canonical series,
    histogram and pool bucket, and the name prefixes that detect the flavour."""

    flavour: str
    description: str
    detect: tuple[str, ...]
    prefix_variants: tuple[str, ...]
    series: dict[str, Source]
    histograms: dict[str, HistogramSource]
    pool: PoolSpec

    # -- detection and naming ------------------------------------------------------------
    def matches(self, exposition: Exposition) -> bool:
        """Whether this server looks like this flavour (a detect prefix among its names)."""
        return (
            any(name.startswith(self.detect) for name in exposition.names())
            if self.detect
            else False
        )

    def spellings(self, name: str) -> list[str]:
        """A metric name as the server may spell it (SGLang: ``sglang:`` or ``sglang_``)."""
        for prefix in self.prefix_variants:
            if name.startswith(prefix):
                stem = name[len(prefix) :]
                return [p + stem for p in self.prefix_variants]
        return [name]

    def metric_names(self) -> set[str]:
        """All metric base names this mapping reads, in every spelling."""
        names: set[str] = set()
        for source in (*self.series.values(), *self.pool.sources.values()):
            names |= source.metric_names()
        for hist in self.histograms.values():
            for base in hist.metrics:
                names |= {base + suffix for suffix in ("_bucket", "_sum", "_count")}
        return {spelled for name in names for spelled in self.spellings(name)}

    # -- resolution ----------------------------------------------------------------------
    def snapshot(self, exposition: Exposition) -> Snapshot:
        """Resolve every canonical series against one scrape."""
        series = {
            name: self.resolve(self.series[name], exposition)
            if name in self.series
            else Value.unknown(f"{self.flavour} does not expose {name}")
            for name in SERIES
        }
        histograms: dict[str, Histogram | None] = {}
        hist_sources: dict[str, str | None] = {}
        for name in HISTOGRAMS:
            found = self._histogram(self.histograms.get(name), exposition)
            histograms[name], hist_sources[name] = found if found else (None, None)
        pool_raw = {
            bucket: self.resolve(source, exposition) for bucket, source in self.pool.sources.items()
        }
        itl = self.histograms.get(Hist.ITL)
        return Snapshot(
            self.flavour,
            series,
            histograms,
            hist_sources,
            pool_raw,
            self.pool.unit,
            self.pool.reserved,
            self.pool.note or f"{self.flavour} does not expose it",
            itl.per if itl else None,
        )

    def resolve(self, source: Source, exposition: Exposition) -> Value:
        if source.first:
            for option in source.first:
                value = self.resolve(option, exposition)
                if value.known:
                    return _derive(value) if source.derived else value
            return Value.unknown("none of " + _describe_all(source.first) + " is exposed")
        if source.total:
            parts = [self.resolve(part, exposition) for part in source.total]
            missing = [p.source for p in parts if not p.known]
            if missing:
                return Value.unknown(f"sum needs {'; '.join(str(m) for m in missing)}")
            total = math.fsum(p.value for p in parts if p.value is not None) * source.scale
            return Value(total, Provenance.DERIVED, " + ".join(str(p.source) for p in parts))
        return self._resolve_metric(source, exposition)

    def _resolve_metric(self, source: Source, exposition: Exposition) -> Value:
        for base in source.metrics:
            for name in self.spellings(base):
                samples = _matching(exposition.get(name), source.labels)
                if not samples:
                    continue
                where = _describe(name, source)
                values = _values(samples, source.label)
                if not values:
                    return Value.unknown(f"{where} carries no number")
                value = AGGREGATES[source.aggregate](values) * source.scale
                provenance = Provenance.DERIVED if source.derived else Provenance.MEASURED
                return Value(value, provenance, where)
        if source.zero_if and self._not_created_yet(source, exposition):
            # Created at its first increment: the page shows the server counts it.
            provenance = Provenance.DERIVED if source.derived else Provenance.MEASURED
            return Value(0.0, provenance, _describe(source.metrics[0], source))
        return Value.unknown(f"{_describe_all((source,))} not exposed")

    def _not_created_yet(self, source: Source, exposition: Exposition) -> bool:
        """Whether the page shows this server counts ``source`` although no sample is
        there yet: a ``zero_if`` metric is on it, or its family is declared."""
        evidence = [n for base in source.zero_if for n in self.spellings(base)]
        if any(exposition.get(name) for name in evidence):
            return True
        declared = exposition.types
        return any(
            declared.get(name.removesuffix("_total")) == "counter" or name in declared
            for base in source.metrics
            for name in self.spellings(base)
        )

    def pinned(self, choices: dict[str, int]) -> MetricMapping:
        """This mapping with the series in ``choices`` held to one of their ``first``
        alternatives (by index), so that every scrape of a run reads a series from the
        same source."""
        series = dict(self.series)
        for name, index in choices.items():
            source = series[name]
            if source.first and 0 <= index < len(source.first):
                option = source.first[index]
                series[name] = _derive_source(option) if source.derived else option
        return dataclasses.replace(self, series=series)

    def option_used(self, name: str, exposition: Exposition) -> int | None:
        """Which ``first`` alternative of series ``name`` this scrape resolves through
        (None: the series has no alternatives, or none is exposed)."""
        source = self.series.get(name)
        if source is None or not source.first:
            return None
        for index, option in enumerate(source.first):
            if self.resolve(option, exposition).known:
                return index
        return None

    def _histogram(
        self, spec: HistogramSource | None, exposition: Exposition
    ) -> tuple[Histogram, str] | None:
        if spec is None:
            return None
        for base in spec.metrics:
            for name in self.spellings(base):
                buckets = _matching(exposition.get(name + "_bucket"), spec.labels)
                if buckets:
                    return _sum_buckets(
                        buckets,
                        _matching(exposition.get(name + "_count"), spec.labels),
                        _matching(exposition.get(name + "_sum"), spec.labels),
                        spec.scale,
                    ), _labelled(name, spec.labels)
        return None


def _labelled(name: str, labels: tuple[tuple[str, str], ...]) -> str:
    """A histogram's source as PromQL selects it: ``step_seconds{kind="mixed"}``."""
    if not labels:
        return name
    return name + "{" + ",".join(f'{k}="{v}"' for k, v in labels) + "}"


# -- resolution helpers ------------------------------------------------------------------
def _matching(samples: list[Sample], labels: tuple[tuple[str, str], ...]) -> list[Sample]:
    return [s for s in samples if all(s.labels.get(k, "") == v for k, v in labels)]


def _values(samples: list[Sample], label: str | None) -> list[float]:
    if label is None:
        return [s.value for s in samples if math.isfinite(s.value)]
    out = []
    for sample in samples:
        text = sample.labels.get(label, "")
        number = _LABEL_WORDS.get(text.lower())
        if number is None:
            try:
                number = float(text)
            except ValueError:
                continue  # "None", "" — the server does not know either
        out.append(number)
    return out


def _derive_source(source: Source) -> Source:
    return dataclasses.replace(source, derived=True)


def _derive(value: Value) -> Value:
    return Value(value.value, Provenance.DERIVED, value.source)


def _describe(name: str, source: Source) -> str:
    text = name
    if source.labels:
        text += "{" + ",".join(f'{k}="{v}"' for k, v in source.labels) + "}"
    if source.label:
        text += f" label {source.label}"
    return text


def _describe_all(sources: Iterable[Source]) -> str:
    names = []
    for source in sources:
        if source.metrics:
            names.extend(_describe(m, source) for m in source.metrics)
        else:
            names.append(_describe_all((*source.first, *source.total)))
    return " / ".join(names)


def _sum_buckets(
    buckets: list[Sample], counts: list[Sample], sums: list[Sample], scale: float = 1.0
) -> Histogram:
    """One histogram from the buckets of every matching label set (replicas summed), its
    bounds and sum multiplied by ``scale`` into the canonical unit."""
    by_bound: dict[float, float] = {}
    for sample in buckets:
        bound = float(sample.labels.get("le", "+Inf")) * scale
        by_bound[bound] = by_bound.get(bound, 0.0) + sample.value
    bounds = tuple(sorted(by_bound))
    cumulative = tuple(by_bound[b] for b in bounds)
    count = math.fsum(s.value for s in counts) if counts else cumulative[-1]
    return Histogram(bounds, cumulative, count, math.fsum(s.value for s in sums) * scale)
