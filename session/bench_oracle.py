"""The prefix oracle of a bench run: the KV cache shape it replays with, and its one pass.

The expected cached tokens of every request come from one replay of the run through the
shared prefix model (``workloads.oracle``) with the server's block size and pool size,
read from its metrics (vLLM's ``cache_config_info``); the embedded engine's own
configuration when it is not scraped; ``--block-size``/``--num-gpu-blocks`` over both.

``RunOracle`` is that one pass; when it runs depends on what is known before sending:

* **before sending**, when every prompt is in the plan and the whole plan is sent: in
  plan order, each request leaving its prompt and a stand-in for its answer; the values
  travel on a (frozen) copy of the plan and the load generator copies them into records;
* **after the run, in plan order**, for a closed loop bounded by a duration, which sends a
  prefix of a generous plan: the pass covers the plan up to the last request recorded,
  the values a pass before sending would give them without a start-up pause for the
  whole plan;
* **after the run, in the order it happened**, for a plan with later turns of sessions,
  whose prompts hold the server's answers: every recorded request is ``expect``-ed when
  it was sent; its prompt joins the cache at its first token (prefilled) and the tokens
  it returned when it ended; a later turn's prompt is what the load generator composed
  (``LoadResult.composed_prompts``).

Values found after the run are written into ``requests`` (``RunDir.set_column``) before
anything reads it. Nothing on the send path computes an expectation.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from loadgen.target import Target
from probes.exposition import Exposition
from probes.mapping import BUILTIN_FLAVOURS, choose_mapping, load_mapping
from probes.mapping_model import MetricMapping
from workloads.errors import InputError
from workloads.oracle import (
    DEFAULT_VOCAB_SIZE,
    PrefixOracle,
    annotate,
    plan_order_expectations,
)
from workloads.plan import Plan, Prompt, RequestSpec, Segment
from workloads.stats import DEFAULT_BLOCK_SIZE

if TYPE_CHECKING:
    import pandas as pd

    from simengine.engine_process import EngineProcess


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


def has_later_turns(plan: Plan) -> bool:
    return any(r.session is not None and (r.turn or 0) >= 1 for r in plan)


def annotated_after_run(plan: Plan, deadline_s: float | None) -> bool:
    """Whether the oracle can only run once the run is over: a plan with later turns (their
    history is the server's answers), or a closed loop bounded by a duration (it sends a
    prefix of a generous plan, in plan order)."""
    bounded_closed_loop = deadline_s is not None and all(r.intended_s is None for r in plan)
    return bounded_closed_loop or has_later_turns(plan)


@dataclass(frozen=True)
class RunOracle:
    """The one oracle pass of a run, for a cache of ``shape`` on a model with ``vocab_size``."""

    shape: Geometry
    model: str = ""
    vocab_size: int = DEFAULT_VOCAB_SIZE

    @classmethod
    def for_target(cls, shape: Geometry, target: Target) -> RunOracle:
        return cls(shape, target.model, target.vocab_size or DEFAULT_VOCAB_SIZE)

    def _args(self) -> tuple[int, int | None, int, str]:
        return self.shape.block_size, self.shape.num_blocks, self.vocab_size, self.model

    def before_sending(self, plan: Plan) -> Plan:
        """A copy of ``plan`` carrying every request's expected cached tokens."""
        return annotate(plan, *self._args())

    def after_run(
        self, plan: Plan, requests: pd.DataFrame, composed: Mapping[str, Prompt]
    ) -> dict[str, int | None]:
        """Expected cached tokens of the recorded ``requests`` (the run's table), by id."""
        if requests.empty:
            return {}
        if has_later_turns(plan):
            return self._as_it_happened(plan, requests, composed)
        recorded = set(requests["id"])
        last = max((i for i, r in enumerate(plan.requests) if r.id in recorded), default=-1)
        expected = plan_order_expectations(plan, *self._args(), count=last + 1)
        return {r.id: e for r, e in zip(plan.requests, expected, strict=False)}

    def _as_it_happened(
        self, plan: Plan, requests: pd.DataFrame, composed: Mapping[str, Prompt]
    ) -> dict[str, int | None]:
        """Replay the recorded events in time order: a request is ``expect``-ed when it was
        sent; its prompt joins the cache at its first token (the server has prefilled it),
        its answer but the last token when it ended. At one instant, what joins the cache
        goes before what is sent."""
        specs = {r.id: r for r in plan.requests}
        oracle = PrefixOracle(*self._args()[:2], self.model, vocab_size=self.vocab_size)
        events: list[tuple[float, int, RequestSpec, Prompt, dict[str, Any]]] = []
        for row in requests.to_dict("records"):
            spec = specs.get(row["id"])
            if spec is None or _missing(row.get("sent_s")):
                continue
            later = spec.session is not None and (spec.turn or 0) >= 1
            prompt = composed.get(spec.id) if later else spec.prompt
            if prompt is None:  # a text history the server's tokenizer gave no ids for
                continue
            events.append((row["sent_s"], _SENT, spec, prompt, row))
            if not _missing(row.get("first_token_s")):
                events.append((row["first_token_s"], _PREFILLED, spec, prompt, row))
                if not _missing(row.get("end_s")):
                    events.append((row["end_s"], _ENDED, spec, prompt, row))
        expected: dict[str, int | None] = {}
        for _, event, spec, prompt, row in sorted(events, key=lambda e: e[:2]):
            scope = spec.scope(self.model)
            if event == _SENT:
                expected[spec.id] = oracle.expect(prompt, scope)
            elif event == _PREFILLED:
                oracle.record(prompt, scope)
            else:
                returned = row.get("output_token_ids")
                ids = [] if _missing(returned) else [int(t) for t in returned]
                kept = ids[:-1]  # the last output token never enters the KV cache
                unknown = 0 if ids else max(0, int(_number(row.get("output_tokens"))) - 1)
                oracle.record(
                    prompt.extended(Segment(len(kept), tokens=tuple(kept))),
                    scope,
                    prompt_len=len(prompt),
                    extra_tokens=unknown,
                )
        return expected


#: Events of a request replayed after the run, in the order they go at one instant.
_PREFILLED, _ENDED, _SENT = 0, 1, 2


def _missing(value: Any) -> bool:
    """A null of the requests table: ``None``, or NaN as pandas reads one."""
    return value is None or (isinstance(value, float) and math.isnan(value))


def _number(value: Any) -> float:
    return 0.0 if _missing(value) else float(value)
