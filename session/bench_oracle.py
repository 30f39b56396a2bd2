"""The prefix oracle of a bench run: the KV cache shape it replays with, and when.

The expected cached tokens of every request come from replaying the plan through the
shared prefix model (``workloads.oracle``) with the server's block size and pool size,
read from its metrics (vLLM's ``cache_config_info``); the embedded engine's own
configuration when it is not scraped; ``--block-size``/``--num-gpu-blocks`` over both.
A closed loop bounded by a duration sends only a prefix of its generous plan, so it is
annotated just ahead of the sends instead of all at once.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from loadgen.load_options import LoadObserver
from loadgen.records import RequestRecord
from loadgen.target import Target
from probes.exposition import Exposition
from probes.mapping import BUILTIN_FLAVOURS, choose_mapping, load_mapping
from probes.mapping_model import MetricMapping
from session.live_stats import LiveStats
from workloads.errors import InputError
from workloads.oracle import DEFAULT_VOCAB_SIZE, annotate, annotating
from workloads.plan import Plan, RequestSpec
from workloads.stats import DEFAULT_BLOCK_SIZE

if TYPE_CHECKING:
    from simengine.engine_process import EngineProcess

#: How far the lazy annotation runs ahead of the sends.
ANNOTATE_AHEAD = 256


@dataclass(frozen=True)
class Geometry:
    """The KV cache shape the oracle replays with, and where it came from."""

    block_size: int
    num_blocks: int | None
    source: str

    def to_dict(self) -> dict[str, Any]:
        return {"block_size": self.block_size, "num_blocks": self.num_blocks, "source": self.source}


@dataclass(frozen=True)
class MetricsMapping:
    """The mapping that reads the server's metrics, and the user's file when one was given.

    ``error`` says why a user's file could not be used: the server-metrics probe is then
    failed with that reason, but the run goes on and the raw samples are kept, to be read
    again once the file is fixed.
    """

    mapping: MetricMapping | None
    file: Path | None = None
    error: str | None = None


def metrics_mapping(
    first: Exposition | None, target: Target, mapping_file: Path | None = None
) -> MetricsMapping:
    """The user's mapping file; else the server's flavour's mapping, else the one detected
    from the first scrape; no mapping when nothing was scraped or nothing is recognised."""
    if mapping_file is not None:
        try:
            return MetricsMapping(load_mapping(mapping_file), file=mapping_file.resolve())
        except InputError as exc:
            return MetricsMapping(None, error=f"mapping file not used: {exc}")
    if first is None:
        return MetricsMapping(None)
    flavour = target.flavour if target.flavour in BUILTIN_FLAVOURS else None
    try:
        return MetricsMapping(choose_mapping(first, flavour=flavour))
    except InputError:
        return MetricsMapping(None)


def geometry(
    first: Exposition | None,
    mapping: MetricMapping | None,
    engine: EngineProcess | None,
    *,
    block_size: int | None = None,
    num_blocks: int | None = None,
) -> Geometry:
    """Block size and pool size for the oracle: ``--block-size``/``--num-gpu-blocks``,
    else the server's metrics, else the embedded engine's configuration, else vLLM's
    default block size and an unbounded pool. ``first`` is the first scrape."""
    block: float | None = None
    blocks: float | None = None
    source = "assumed (vLLM's default block size, pool unknown: unbounded)"
    if mapping is not None and first is not None:
        snap = mapping.snapshot(first)
        block, blocks = snap.series["block_size"].value, snap.series["num_blocks"].value
        source = "server metrics"
    if block is None and engine is not None:
        block, blocks = engine.config.block_size, engine.num_gpu_blocks
        source = "engine config"
    if block_size is not None or num_blocks is not None:
        block = block_size or block
        blocks = num_blocks or blocks
        source = "flags"
    return Geometry(
        int(block or DEFAULT_BLOCK_SIZE), int(blocks) if blocks is not None else None, source
    )


def needs_lazy_annotation(deadline_s: float | None, plan: Plan) -> bool:
    """A duration-bounded closed loop sends a prefix of a generous plan, in plan order."""
    return deadline_s is not None and all(r.intended_s is None for r in plan)


class _AnnotateAhead(LoadObserver):
    """The live statistics, plus the oracle kept ``ANNOTATE_AHEAD`` requests ahead of the
    sends (one more request annotated per send)."""

    def __init__(self, stats: LiveStats, ahead: Iterator[RequestSpec]) -> None:
        self.stats = stats
        self.ahead = ahead

    def on_send(self, record: RequestRecord) -> None:
        next(self.ahead, None)
        self.stats.on_send(record)

    def on_first_token(self, record: RequestRecord) -> None:
        self.stats.on_first_token(record)

    def on_chunk(self, record: RequestRecord, t_s: float, n_tokens: int) -> None:
        self.stats.on_chunk(record, t_s, n_tokens)

    def on_finish(self, record: RequestRecord) -> None:
        self.stats.on_finish(record)


def annotate_plan(
    plan: Plan, target: Target, shape: Geometry, stats: LiveStats, deadline_s: float | None
) -> LoadObserver:
    """Set every request's expected cached tokens (all at once, or just ahead of the
    sends for a generous closed loop); the observer the run goes with."""
    args = (
        plan,
        shape.block_size,
        shape.num_blocks,
        target.vocab_size or DEFAULT_VOCAB_SIZE,
        target.model,
    )
    if not needs_lazy_annotation(deadline_s, plan):
        annotate(*args)
        return stats
    ahead = annotating(*args)
    for _ in range(ANNOTATE_AHEAD):
        next(ahead, None)
    return _AnnotateAhead(stats, ahead)
