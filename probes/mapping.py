"""Flavour mappings: how one engine's /metrics becomes the canonical series.

A mapping is a TOML file (the built-ins live in ``probes/mappings/``; a user can write one
for their own engine and pass ``--mapping FILE``). Each canonical series names a *source*:

``metric = "name"`` or ``["new_name", "old_name"]``
    the first name the server exposes wins (vLLM renamed several series);
``labels = {mode = "prefill_cache"}``
    keep samples whose labels match (an absent label matches "", as in PromQL);
``label = "block_size"``
    read the value from a label of the matching sample (``vllm:cache_config_info``);
``aggregate = "sum" | "mean" | "max"``
    how samples from several engines/replicas combine (default ``sum``);
``scale = 0.01``
    multiply (a server reporting percent instead of a fraction);
``first = [{…}, {…}]``
    alternatives with their own keys, the first one exposed wins;
``sum = ["a_total", {metric = …}]``
    derived: the sum of several sources, unknown if any part is;
``derived = true``
    the series is a stand-in computed by definition, not the quantity itself;
``note = "…"``
    free text for the reader of the file.

Histograms name a base metric (``_bucket``/``_sum``/``_count`` are found from it) and may
say ``per = "event"|"token"`` (vLLM's ITL is per output event, SGLang's per token). The
``[pool]`` table gives the unit of the pool buckets, blocks reserved by the engine, and
sources for ``active``/``reclaimable``/``free``/``total`` where the engine exposes them.
A mapping may ``extends = "vllm"`` another built-in. Unknown keys are errors that name
the key: a typo must not silently turn a series into "unknown".
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from probes.canonical import HISTOGRAMS, POOL_BUCKETS, SERIES, Histogram, Provenance, Value
from workloads.errors import InputError

if TYPE_CHECKING:  # annotations only: the CLI reads BUILTIN_FLAVOURS at start, without httpx
    from probes.exposition import Exposition, Sample

MAPPINGS_DIR = Path(__file__).with_name("mappings")
#: Built-in flavours in detection order: the embedded engine also exposes vLLM's names,
#: so it must be recognised before vLLM.
BUILTIN_FLAVOURS: tuple[str, ...] = ("embedded", "vllm", "sglang", "llamacpp")

_AGGREGATES: dict[str, Callable[[list[float]], float]] = {
    "sum": math.fsum,
    "mean": lambda xs: math.fsum(xs) / len(xs),
    "max": max,
}
_SOURCE_KEYS = {
    "metric",
    "labels",
    "label",
    "aggregate",
    "scale",
    "first",
    "sum",
    "derived",
    "note",
}
_HISTOGRAM_KEYS = {"metric", "labels", "per", "note"}
_POOL_KEYS = {"unit", "reserved", "note", *POOL_BUCKETS, "total"}
_TOP_KEYS = {
    "flavour",
    "description",
    "extends",
    "detect",
    "prefix_variants",
    "series",
    "histograms",
    "pool",
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

    def metric_names(self) -> set[str]:
        """Every metric this source may read (for scrape filtering and PromQL)."""
        names = set(self.metrics)
        for part in (*self.first, *self.total):
            names |= part.metric_names()
        return names


@dataclass(frozen=True)
class HistogramSource:
    metrics: tuple[str, ...]
    labels: tuple[tuple[str, str], ...] = ()
    per: str | None = None


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
class Mapping:
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
        itl = self.histograms.get("itl")
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
                value = _AGGREGATES[source.aggregate](values) * source.scale
                provenance = Provenance.DERIVED if source.derived else Provenance.MEASURED
                return Value(value, provenance, where)
        return Value.unknown(f"{_describe_all((source,))} not exposed")

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
                    ), name
        return None


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


def _sum_buckets(buckets: list[Sample], counts: list[Sample], sums: list[Sample]) -> Histogram:
    """One histogram from the buckets of every matching label set (replicas summed)."""
    by_bound: dict[float, float] = {}
    for sample in buckets:
        bound = float(sample.labels.get("le", "+Inf"))
        by_bound[bound] = by_bound.get(bound, 0.0) + sample.value
    bounds = tuple(sorted(by_bound))
    cumulative = tuple(by_bound[b] for b in bounds)
    count = math.fsum(s.value for s in counts) if counts else cumulative[-1]
    return Histogram(bounds, cumulative, count, math.fsum(s.value for s in sums))


# -- loading and validation --------------------------------------------------------------
def builtin_mapping(flavour: str) -> Mapping:
    """One of the mappings shipped in ``probes/mappings/``."""
    if flavour not in BUILTIN_FLAVOURS:
        raise InputError(
            "--flavour", f"unknown flavour {flavour!r}", f"one of {', '.join(BUILTIN_FLAVOURS)}"
        )
    return _load(MAPPINGS_DIR / f"{flavour}.toml", seen=())


def load_mapping(path: str | Path) -> Mapping:
    """A user-supplied mapping file, validated: unknown keys and bad values are errors."""
    path = Path(path)
    if not path.is_file():
        raise InputError("--mapping", f"no such file: {path}", "pass a TOML mapping file")
    return _load(path, seen=())


def detect_flavour(exposition: Exposition) -> str | None:
    """The built-in flavour whose metric names this scrape carries, if any."""
    for flavour in BUILTIN_FLAVOURS:
        if builtin_mapping(flavour).matches(exposition):
            return flavour
    return None


def choose_mapping(
    exposition: Exposition | None,
    *,
    flavour: str | None = None,
    mapping_file: str | Path | None = None,
) -> Mapping:
    """The mapping a probe should use: a user file, else a named flavour, else detection."""
    if mapping_file is not None:
        return load_mapping(mapping_file)
    if flavour not in (None, "auto"):
        return builtin_mapping(flavour)
    detected = detect_flavour(exposition) if exposition is not None else None
    if detected is None:
        raise InputError(
            "--flavour",
            "no vllm:, sglang:, llamacpp: or prefillscope_engine_ metrics found",
            "name the flavour with --flavour or describe the metrics with --mapping FILE",
        )
    return builtin_mapping(detected)


def _load(path: Path, seen: tuple[str, ...]) -> Mapping:
    where = str(path)
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise InputError(where, f"not valid TOML: {exc}", "fix the file's syntax") from None
    _check_keys(doc, _TOP_KEYS, where)
    base: Mapping | None = None
    if "extends" in doc:
        parent = _string(doc["extends"], f"{where}: extends")
        if parent not in BUILTIN_FLAVOURS or parent in seen:
            raise InputError(
                f"{where}: extends", f"cannot extend {parent!r}", f"one of {BUILTIN_FLAVOURS}"
            )
        base = _load(MAPPINGS_DIR / f"{parent}.toml", seen=(*seen, parent))
    flavour = _string(doc.get("flavour", path.stem), f"{where}: flavour")
    series = dict(base.series) if base else {}
    for name, spec in _table(doc.get("series", {}), f"{where}: series").items():
        if name not in SERIES:
            raise InputError(
                f"{where}: series.{name}", "unknown canonical series", f"one of {', '.join(SERIES)}"
            )
        series[name] = _source(spec, f"{where}: series.{name}")
    histograms = dict(base.histograms) if base else {}
    for name, spec in _table(doc.get("histograms", {}), f"{where}: histograms").items():
        if name not in HISTOGRAMS:
            raise InputError(
                f"{where}: histograms.{name}",
                "unknown histogram",
                f"one of {', '.join(HISTOGRAMS)}",
            )
        histograms[name] = _histogram_source(spec, f"{where}: histograms.{name}")
    pool = (
        _pool(doc["pool"], f"{where}: pool", base.pool if base else None)
        if "pool" in doc
        else (base.pool if base else PoolSpec())
    )
    return Mapping(
        flavour=flavour,
        description=str(doc.get("description", base.description if base else "")),
        detect=tuple(_strings(doc["detect"], f"{where}: detect"))
        if "detect" in doc
        else (base.detect if base else ()),
        prefix_variants=tuple(_strings(doc["prefix_variants"], f"{where}: prefix_variants"))
        if "prefix_variants" in doc
        else (base.prefix_variants if base else ()),
        series=series,
        histograms=histograms,
        pool=pool,
    )


def _check_keys(table: dict[str, Any], allowed: set[str], where: str) -> None:
    for key in table:
        if key not in allowed:
            raise InputError(
                f"{where}: {key}" if where else key,
                f"unknown key {key!r}",
                f"allowed here: {', '.join(sorted(allowed))}",
            )


def _table(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InputError(where, "must be a table", "write it as [section] or {key = value}")
    return value


def _string(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise InputError(where, f"must be a non-empty string, got {value!r}")
    return value


def _strings(value: Any, where: str) -> list[str]:
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not items:
        raise InputError(where, "must be a string or a non-empty list of strings")
    return [_string(item, where) for item in items]


def _labels(value: Any, where: str) -> tuple[tuple[str, str], ...]:
    table = _table(value, where)
    return tuple(sorted((str(k), _label_value(v, f"{where}.{k}")) for k, v in table.items()))


def _label_value(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise InputError(where, f"label values are strings, got {value!r}")
    return value


def _source(spec: Any, where: str) -> Source:
    if isinstance(spec, str):
        return Source(metrics=(spec,))
    table = _table(spec, where)
    _check_keys(table, _SOURCE_KEYS, where)
    forms = [key for key in ("metric", "first", "sum") if key in table]
    if len(forms) != 1:
        raise InputError(where, "needs exactly one of metric, first, sum", 'add metric = "name"')
    aggregate = table.get("aggregate", "sum")
    if aggregate not in _AGGREGATES:
        raise InputError(
            f"{where}.aggregate", f"unknown aggregate {aggregate!r}", "sum, mean or max"
        )
    scale = table.get("scale", 1.0)
    if not isinstance(scale, int | float) or isinstance(scale, bool):
        raise InputError(f"{where}.scale", f"must be a number, got {scale!r}")
    derived = table.get("derived", False)
    if not isinstance(derived, bool):
        raise InputError(f"{where}.derived", f"must be true or false, got {derived!r}")
    return Source(
        metrics=tuple(_strings(table["metric"], f"{where}.metric")) if "metric" in table else (),
        labels=_labels(table.get("labels", {}), f"{where}.labels"),
        label=_string(table["label"], f"{where}.label") if "label" in table else None,
        aggregate=aggregate,
        scale=float(scale),
        first=_sources(table.get("first", []), f"{where}.first"),
        total=_sources(table.get("sum", []), f"{where}.sum"),
        derived=derived,
    )


def _sources(value: Any, where: str) -> tuple[Source, ...]:
    if not isinstance(value, list):
        raise InputError(where, "must be a list of sources")
    return tuple(_source(item, f"{where}[{i}]") for i, item in enumerate(value))


def _histogram_source(spec: Any, where: str) -> HistogramSource:
    table = _table({"metric": spec} if isinstance(spec, str) else spec, where)
    _check_keys(table, _HISTOGRAM_KEYS, where)
    if "metric" not in table:
        raise InputError(where, 'needs metric = "base_name"', "the name without _bucket")
    per = table.get("per")
    if per not in (None, "event", "token"):
        raise InputError(f"{where}.per", f"must be 'event' or 'token', got {per!r}")
    return HistogramSource(
        metrics=tuple(_strings(table["metric"], f"{where}.metric")),
        labels=_labels(table.get("labels", {}), f"{where}.labels"),
        per=per,
    )


def _pool(spec: Any, where: str, base: PoolSpec | None) -> PoolSpec:
    table = _table(spec, where)
    _check_keys(table, _POOL_KEYS, where)
    unit = table.get("unit", base.unit if base else "blocks")
    if unit not in ("blocks", "tokens"):
        raise InputError(f"{where}.unit", f"must be 'blocks' or 'tokens', got {unit!r}")
    reserved = table.get("reserved", base.reserved if base else 0)
    if not isinstance(reserved, int | float) or isinstance(reserved, bool) or reserved < 0:
        raise InputError(f"{where}.reserved", f"must be a number ≥ 0, got {reserved!r}")
    sources = dict(base.sources) if base else {}
    for bucket in (*POOL_BUCKETS, "total"):
        if bucket in table:
            sources[bucket] = _source(table[bucket], f"{where}.{bucket}")
    note = table.get("note", base.note if base else None)
    if note is not None:
        note = _string(note, f"{where}.note")
    return PoolSpec(unit=unit, reserved=float(reserved), sources=sources, note=note)
