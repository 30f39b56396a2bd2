"""The KV block pool's three buckets — active, reclaimable, free — each with provenance.

"GPU memory at 98 %" says nothing about the pool (engines preallocate it); what matters is
how the pool splits into blocks pinned by running requests (*active*), cached blocks no
request holds that can be re-hit or evicted (*reclaimable*) and blocks with no valid data
(*free*). Engines expose different parts of that split:

* the embedded engine exposes all three: ``measured``;
* vLLM exposes only ``kv_cache_usage_perc`` (active / usable blocks) and the pool size in
  ``cache_config_info``: active is ``derived``; its free queue holds reclaimable *and* free
  blocks, so the two are ``unknown`` individually — we never report ``free + reclaimable``
  as free. They are *bounded* instead: together they are the unused blocks, and cached
  blocks cannot outnumber the full blocks of KV ever computed,
  ``(prefix_queries − prefix_hits + generation_tokens) / block_size`` (valid only without
  preemptions, which recompute). When the bounds meet (a fresh server) the value is
  pinned (``derived``). A server with prefix caching disabled has no reclaimable blocks;
* SGLang exposes used / evictable / available tokens in recent releases (``measured``, in
  tokens), older ones only used tokens and ``token_usage``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from probes.canonical import Provenance, Value
from probes.mapping_model import Snapshot
from runfmt.probe_report import PoolBucket, PoolReport
from runfmt.series import Series


@dataclass(frozen=True)
class Bucket:
    """One pool bucket: its value (None when unknown) and, when unknown, proven bounds."""

    value: Value
    bounds: tuple[float, float] | None = None

    def recorded(self, unit: str) -> PoolBucket:
        """This bucket in ``unit``, as ``probe --json`` writes it."""
        return _bucket(self.value, unit, self.bounds)


@dataclass(frozen=True)
class PoolBreakdown:
    unit: str
    total: Value
    active: Bucket
    reclaimable: Bucket
    free: Bucket

    def recorded(self) -> PoolReport:
        """The ``pool`` object of ``probe --json``."""
        return PoolReport(
            active_blocks=self.active.recorded(self.unit),
            reclaimable_blocks=self.reclaimable.recorded(self.unit),
            free_blocks=self.free.recorded(self.unit),
            total_blocks=_bucket(self.total, self.unit),
        )


def _bucket(value: Value, unit: str, bounds: tuple[float, float] | None = None) -> PoolBucket:
    return PoolBucket(value.value, str(value.provenance), value.source, unit, bounds)


def _num(value: Value) -> float | None:
    return value.value


def _tidy(x: float) -> float:
    """Block counts are integers; usage fractions reproduce them up to float error."""
    return round(x, 6)


def pool_total(snapshot: Snapshot) -> Value:
    """Usable pool size: exposed directly, else the configured blocks minus the engine's
    reserved ones, else used / usage."""
    raw = snapshot.pool_raw.get("total")
    if raw is not None and raw.known:
        return raw
    blocks = snapshot.series[Series.NUM_BLOCKS]
    if snapshot.pool_unit == "blocks" and blocks.known and blocks.value is not None:
        if snapshot.pool_reserved:
            reserved = f" minus {snapshot.pool_reserved:g} reserved"
            return Value(
                blocks.value - snapshot.pool_reserved,
                Provenance.DERIVED,
                f"{blocks.source}{reserved}",
            )
        return blocks
    active = snapshot.pool_raw.get("active")
    usage = snapshot.series[Series.KV_USAGE]
    if active is not None and active.value is not None and usage.value:
        return Value(
            _tidy(active.value / usage.value),
            Provenance.DERIVED,
            f"{active.source} / {usage.source}",
        )
    return Value.unknown("pool size not exposed")


def _active(snapshot: Snapshot, total: Value) -> Value:
    raw = snapshot.pool_raw.get("active")
    if raw is not None and raw.known:
        return raw
    usage = snapshot.series[Series.KV_USAGE]
    if usage.value is not None and total.value is not None:
        return Value(
            _tidy(usage.value * total.value),
            Provenance.DERIVED,
            f"{usage.source} × {total.source}",
        )
    return Value.unknown("neither active blocks nor KV usage and pool size exposed")


def _cached_upper_bound(snapshot: Snapshot) -> float | None:
    """Most full blocks of KV the server can hold in cache, from its token counters."""
    series = snapshot.series
    size = _num(series[Series.BLOCK_SIZE])
    if snapshot.pool_unit == "tokens":
        size = 1.0
    needed = (
        _num(series[Series.PREFIX_QUERIES]),
        _num(series[Series.PREFIX_HITS]),
        _num(series[Series.GENERATION_TOKENS]),
    )
    if size is None or size <= 0 or series[Series.PREEMPTIONS].value != 0 or None in needed:
        return None
    queries, hits, generated = needed  # type: ignore[misc]
    return math.floor((queries - hits + generated) / size)


def pool_breakdown(snapshot: Snapshot) -> PoolBreakdown:
    """Active / reclaimable / free for one scrape, measured where exposed, derived or
    bounded where the evidence allows, unknown otherwise."""
    total = pool_total(snapshot)
    active = _active(snapshot, total)
    raw_recl = snapshot.pool_raw.get("reclaimable")
    raw_free = snapshot.pool_raw.get("free")
    unused = (
        _tidy(total.value - active.value)
        if total.value is not None and active.value is not None
        else None
    )
    if raw_recl is not None and raw_recl.known:
        reclaimable = Bucket(raw_recl)
    elif snapshot.series[Series.PREFIX_CACHING].value == 0:
        reclaimable = Bucket(Value(0.0, Provenance.DERIVED, "prefix caching disabled"))
    else:
        reclaimable = _bounded(snapshot, _reclaimable_bounds(snapshot, unused))
    if raw_free is not None and raw_free.known:
        free = Bucket(raw_free)
    elif unused is not None and reclaimable.value.value is not None:
        free = Bucket(
            Value(
                _tidy(unused - reclaimable.value.value),
                Provenance.DERIVED,
                "total − active − reclaimable",
            )
        )
    else:
        bounds = reclaimable.bounds
        free = _bounded(
            snapshot,
            (max(0.0, unused - bounds[1]), unused) if bounds and unused is not None else None,
        )
    return PoolBreakdown(snapshot.pool_unit, total, Bucket(active), reclaimable, free)


def _bounded(snapshot: Snapshot, bounds: tuple[float, float] | None) -> Bucket:
    """Unknown within bounds — unless the bounds meet (nothing computed yet, or a full
    pool), which pins the value."""
    if bounds is not None and bounds[0] == bounds[1]:
        return Bucket(Value(bounds[0], Provenance.DERIVED, "bounded by the token counters"))
    return Bucket(Value.unknown(snapshot.pool_note), bounds)


def _reclaimable_bounds(snapshot: Snapshot, unused: float | None) -> tuple[float, float] | None:
    if unused is None:
        return None
    upper = _cached_upper_bound(snapshot)
    return (0.0, unused if upper is None else float(min(unused, upper)))
