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
``zero_if = ["name", …]``
    a counter the server creates at its first increment (SGLang): absent while one of
    these metrics is on the page (a gauge of the same fact, or another label set of the
    same family), or while the page declares its family (``# TYPE``), it reads 0, not
    unknown;
``note = "…"``
    free text for the reader of the file.

Histograms name a base metric (``_bucket``/``_sum``/``_count`` are found from it) and may
say ``per = "event"|"token"`` (vLLM's ITL is per output event, SGLang's per token) and
``scale`` (bucket bounds and sum multiplied into the canonical unit: vLLM's seconds of a
KV transfer into ``kv_transfer_latency_ms``'s milliseconds). The
``[pool]`` table gives the unit of the pool buckets, blocks reserved by the engine, and
sources for ``active``/``reclaimable``/``free``/``total`` where the engine exposes them.
A mapping may ``extends = "vllm"`` another built-in. Unknown keys are errors that name
the key: a typo must not silently turn a series into "unknown".
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from loadgen.flavours import BY_NAME, MAPPED
from probes.canonical import HISTOGRAMS, POOL_BUCKETS, SERIES
from probes.mapping_model import AGGREGATES, HistogramSource, MetricMapping, PoolSpec, Source
from workloads.errors import InputError

if TYPE_CHECKING:  # annotations only: the CLI reads BUILTIN_FLAVOURS at start, without httpx
    from probes.exposition import Exposition

MAPPINGS_DIR = Path(__file__).with_name("mappings")
#: Flavours with a built-in mapping, in detection order (``loadgen.flavours.REGISTRY``:
#: the embedded engine also exposes vLLM's names, so it is recognised before vLLM).
BUILTIN_FLAVOURS: tuple[str, ...] = MAPPED

_SOURCE_KEYS = {
    "metric",
    "labels",
    "label",
    "aggregate",
    "scale",
    "first",
    "sum",
    "derived",
    "zero_if",
    "note",
}
_HISTOGRAM_KEYS = {"metric", "labels", "per", "scale", "note"}
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


# -- loading and validation --------------------------------------------------------------
def builtin_mapping(flavour: str) -> MetricMapping:
    """One of the mappings shipped in ``probes/mappings/``."""
    if flavour not in BUILTIN_FLAVOURS:
        raise InputError(
            "--flavour", f"unknown flavour {flavour!r}", f"one of {', '.join(BUILTIN_FLAVOURS)}"
        )
    return _load(_builtin_path(flavour), seen=())


def _builtin_path(flavour: str) -> Path:
    """The mapping file the flavour's registry entry names."""
    return MAPPINGS_DIR / f"{BY_NAME[flavour].mapping}.toml"


def detect_prefixes() -> list[str]:
    """The first ``detect`` prefix of every built-in mapping (``prefillscope_engine_``,
    ``vllm:`` …), in detection order: what an error names when none is found."""
    return [builtin_mapping(f).detect[0] for f in BUILTIN_FLAVOURS if builtin_mapping(f).detect]


def load_mapping(path: str | Path) -> MetricMapping:
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
) -> MetricMapping:
    """The mapping a probe should use: a user file, else a named flavour, else detection."""
    if mapping_file is not None:
        return load_mapping(mapping_file)
    if flavour not in (None, "auto"):
        return builtin_mapping(flavour)
    detected = detect_flavour(exposition) if exposition is not None else None
    if detected is None:
        raise InputError(
            "--flavour",
            f"no metrics with a known prefix ({', '.join(detect_prefixes())}) found",
            "name the flavour with --flavour or describe the metrics with --mapping FILE",
        )
    return builtin_mapping(detected)


def _load(path: Path, seen: tuple[str, ...]) -> MetricMapping:
    where = str(path)
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise InputError(where, f"not valid TOML: {exc}", "fix the file's syntax") from None
    _check_keys(doc, _TOP_KEYS, where)
    base: MetricMapping | None = None
    if "extends" in doc:
        parent = _string(doc["extends"], f"{where}: extends")
        if parent not in BUILTIN_FLAVOURS or parent in seen:
            raise InputError(
                f"{where}: extends", f"cannot extend {parent!r}", f"one of {BUILTIN_FLAVOURS}"
            )
        base = _load(_builtin_path(parent), seen=(*seen, parent))
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
    return MetricMapping(
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
    if aggregate not in AGGREGATES:
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
        zero_if=tuple(_strings(table["zero_if"], f"{where}.zero_if")) if "zero_if" in table else (),
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
    scale = table.get("scale", 1.0)
    if not isinstance(scale, int | float) or isinstance(scale, bool) or scale <= 0:
        raise InputError(f"{where}.scale", f"must be a positive number, got {scale!r}")
    return HistogramSource(
        metrics=tuple(_strings(table["metric"], f"{where}.metric")),
        labels=_labels(table.get("labels", {}), f"{where}.labels"),
        per=per,
        scale=float(scale),
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
