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
  whose prompts hold the server's answers, or with sessions replaying the same recorded
  conversation (a dataset file reused: which copy's turn comes first is the run's
  timing): every recorded request is ``expect``-ed when it was sent; its prompt joins the
  cache at its first token (prefilled) and the tokens it returned when it ended; a later
  turn's prompt is what the load generator composed (``LoadResult.composed_prompts``).

Values found after the run are written into ``requests`` (``RunDir.set_column``) before
anything reads it. Nothing on the send path computes an expectation.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from loadgen.flavours import default_cache_model
from loadgen.target import Target
from probes.exposition import Exposition
from probes.mapping import BUILTIN_FLAVOURS, choose_mapping, load_mapping
from probes.mapping_model import MetricMapping
from runfmt.run_sections import Geometry
from runfmt.series import Series
from session.oracle_slots import (
    ORACLE_NOTE,
    kept_output,
    missing,
    recorded_prompts,
    slots_as_it_happened,
)
from workloads.cache_model import CACHE_MODEL_INFO, CacheModel, parse_cache_model
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


def server_cache_model(flavour_name: str, server_info: Mapping[str, Any] | None = None) -> str:
    """The cache a server of this flavour keeps (its registry entry's ``cache_model``:
    vLLM's and the embedded engine's blocks, SGLang's radix tree, llama.cpp's slots), with
    the slot count a slots cache needs from the server's ``/props`` ``total_slots``
    (llama-server's ``-np`` default of 1 when it does not say)."""
    model = default_cache_model(flavour_name)
    if model == "slots":
        slots = (server_info or {}).get("total_slots")
        return f"slots:{slots if isinstance(slots, int) and slots > 0 else 1}"
    return model


def _cache_model(
    first: Exposition | None,
    engine: EngineProcess | None,
    target: Target | None,
    flag: str | None,
) -> tuple[str, str]:
    """The oracle's cache model and its source: ``--cache-model``, else the embedded
    engine's configuration, else what the server's metrics name, else its flavour's."""
    if flag is not None:
        return str(parse_cache_model(flag)), "flags"
    if engine is not None:
        return str(parse_cache_model(engine.config.cache_model)), "engine config"
    named = first.get(CACHE_MODEL_INFO) if first is not None else []
    if named and "cache_model" in named[0].labels:
        try:
            return str(parse_cache_model(named[0].labels["cache_model"])), "server metrics"
        except InputError:
            pass
    if target is None:
        return "blocks", "default"
    return server_cache_model(target.flavour, target.server_info), f"{target.flavour} default"


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
    target: Target | None = None,
    cache_model: str | None = None,
) -> Geometry:
    """Block size and pool size for the oracle: ``--block-size``/``--num-gpu-blocks``,
    else the server's metrics, else the embedded engine's configuration, else vLLM's
    default block size and an unbounded pool (llama.cpp's slots: ``/props`` ``n_ctx``
    tokens each). ``first`` is the first scrape; the cache model as ``_cache_model``."""
    model, model_source = _cache_model(first, engine, target, cache_model)
    block: float | None = None
    blocks: float | None = None
    source = "assumed (vLLM's default block size, pool unknown: unbounded)"
    if mapping is not None and first is not None:
        snap = mapping.snapshot(first)
        block, blocks = snap.series[Series.BLOCK_SIZE].value, snap.series[Series.NUM_BLOCKS].value
        source = "server metrics"
    if block is None and engine is not None:
        block, blocks = engine.config.block_size, engine.num_gpu_blocks
        source = "engine config"
    slot_context = (target.server_info if target is not None else {}).get("n_ctx")
    parsed = parse_cache_model(model)
    if blocks is None and parsed.kind == "slots" and isinstance(slot_context, int):
        blocks = slot_context * parsed.slots // (block or DEFAULT_BLOCK_SIZE)
        source = "/props n_ctx per slot"
    if block_size is not None or num_blocks is not None:
        block = block_size or block
        blocks = num_blocks or blocks
        source = "flags"
    return Geometry(
        int(block or DEFAULT_BLOCK_SIZE),
        int(blocks) if blocks is not None else None,
        source,
        model,
        model_source,
        _offload_blocks(first, mapping),
    )


def _offload_blocks(first: Exposition | None, mapping: MetricMapping | None) -> int:
    """The host offload tier's blocks, the canonical ``host_pool_blocks`` read through
    the server's mapping (vLLM's ``cache_config_info`` ``num_cpu_blocks``; unknown there,
    or no scrape: no tier)."""
    if first is None or mapping is None:
        return 0
    blocks = mapping.snapshot(first).series[Series.HOST_POOL_BLOCKS].value
    return int(blocks) if blocks else 0


def has_later_turns(plan: Plan) -> bool:
    """Whether a request ``composes_history`` (read from the plan's columns)."""
    columns = (plan.requests.column(name) for name in ("session", "turn", "carries_history"))
    return any(s is not None and t and not c for s, t, c in zip(*columns, strict=True))


def sessions_share_turns(plan: Plan) -> bool:
    """Whether two sessions replay the same recorded conversation (a dataset file reused):
    which copy's later turn reaches the server first is the run's timing, so the pass
    waits for the run and replays it in the order it happened."""
    opening: set[Prompt] = set()
    columns = plan.requests.column("session"), plan.requests.column("carries_history")
    sessions_with_history = {s for s, carries in zip(*columns, strict=True) if carries}
    if not sessions_with_history:
        return False
    for r in plan:
        if r.session in sessions_with_history and r.turn == 0:
            if r.prompt in opening:
                return True
            opening.add(r.prompt)
    return False


def timing_decides(plan: Plan) -> bool:
    """Whether the order requests reach the server is only known from the run: later
    turns composed from the server's answers, or sessions that share their turns."""
    return has_later_turns(plan) or sessions_share_turns(plan)


def annotated_after_run(plan: Plan, deadline_s: float | None) -> bool:
    """Whether the oracle can only run once the run is over: a plan with later turns (their
    history is the server's answers), or a closed loop bounded by a duration (it sends a
    prefix of a generous plan, in plan order)."""
    bounded_closed_loop = deadline_s is not None and all(
        t is None for t in plan.requests.column("intended_s")
    )
    return bounded_closed_loop or timing_decides(plan)


#: The requests column with the part of ``expected_cached_tokens`` an offload tier holds.
EXPECTED_OFFLOAD = "expected_offload_tokens"


@dataclass(frozen=True)
class RunOracle:
    """The one oracle pass of a run, for a cache of ``shape`` on a model with ``vocab_size``."""

    shape: Geometry
    model: str = ""
    vocab_size: int = DEFAULT_VOCAB_SIZE

    #: Whether the server keeps requests of another ``cache_salt`` apart (its flavour's
    #: ``cache_salt`` capability; llama-server takes no salt: one scope for every request).
    salted: bool = True

    @classmethod
    def for_target(cls, shape: Geometry, target: Target) -> RunOracle:
        vocab = target.vocab_size or DEFAULT_VOCAB_SIZE
        return cls(shape, target.model, vocab, salted=target.capabilities.cache_salt)

    @property
    def cache_model(self) -> CacheModel:
        return parse_cache_model(self.shape.cache_model)

    def _args(self) -> tuple[int, int | None, int, str]:
        return self.shape.block_size, self.shape.num_blocks, self.vocab_size, self.model

    def oracle(self) -> PrefixOracle:
        block, blocks, vocab, model = self._args()
        return PrefixOracle(
            block,
            blocks,
            model,
            vocab_size=vocab,
            cache_model=self.cache_model,
            offload_blocks=self.shape.offload_blocks,
        )

    def replays_after_run(self, plan: Plan, deadline_s: float | None) -> bool:
        """Whether the pass waits for the run (``annotated_after_run``); llama.cpp's slots
        always do: which slot a request lands on depends on what was running when it was
        sent, which only the run's timeline says."""
        timeline = self.cache_model.kind == "slots" or self.shape.offload_blocks > 0
        return timeline or annotated_after_run(plan, deadline_s)

    def before_sending(self, plan: Plan) -> Plan:
        """A copy of ``plan`` carrying every request's expected cached tokens."""
        return annotate(plan, *self._args(), cache_model=self.cache_model)

    def after_run(
        self, plan: Plan, requests: pd.DataFrame, composed: Mapping[str, Prompt]
    ) -> dict[str, int | None]:
        """Expected cached tokens of the recorded ``requests`` (the run's table), by id."""
        return self.after_run_columns(plan, requests, composed)["expected_cached_tokens"]

    def after_run_columns(
        self, plan: Plan, requests: pd.DataFrame, composed: Mapping[str, Prompt]
    ) -> dict[str, dict[str, Any]]:
        """The ``requests`` columns the pass fills, by id: ``expected_cached_tokens``, and
        ``oracle_note`` where the oracle could not know (slots chosen by timing)."""
        if requests.empty:
            return {"expected_cached_tokens": {}, ORACLE_NOTE: {}}
        if self.cache_model.kind == "slots":
            replay = slots_as_it_happened(
                self.oracle(), plan, requests, composed, self.model, salted=self.salted
            )
            return {"expected_cached_tokens": replay.expected, ORACLE_NOTE: replay.notes}
        if timing_decides(plan):
            return {
                "expected_cached_tokens": self._as_it_happened(plan, requests, composed),
                ORACLE_NOTE: {},
            }
        recorded = set(requests["id"])
        last = max((i for i, r in enumerate(plan.requests) if r.id in recorded), default=-1)
        offloaded: list[int | None] = []
        expected = plan_order_expectations(
            plan,
            *self._args(),
            count=last + 1,
            cache_model=self.cache_model,
            offload_blocks=self.shape.offload_blocks,
            offloaded=offloaded,
        )
        by_id = {r.id: e for r, e in zip(plan.requests, expected, strict=False)}
        columns = {"expected_cached_tokens": by_id, ORACLE_NOTE: {}}
        if self.shape.offload_blocks:
            columns[EXPECTED_OFFLOAD] = {
                r.id: o for r, o in zip(plan.requests, offloaded, strict=False)
            }
        return columns

    def _as_it_happened(
        self, plan: Plan, requests: pd.DataFrame, composed: Mapping[str, Prompt]
    ) -> dict[str, int | None]:
        """Replay the recorded events in time order: a request is ``expect``-ed when it was
        sent; its prompt joins the cache at its first token (the server has prefilled it),
        its answer but the last token when it ended. At one instant, what joins the cache
        goes before what is sent."""
        oracle = self.oracle()
        events: list[tuple[float, int, RequestSpec, Prompt, dict[str, Any]]] = []
        for spec, prompt, row in recorded_prompts(plan, requests, composed):
            events.append((row["sent_s"], _SENT, spec, prompt, row))
            if not missing(row.get("first_token_s")):
                events.append((row["first_token_s"], _PREFILLED, spec, prompt, row))
                if not missing(row.get("end_s")):
                    events.append((row["end_s"], _ENDED, spec, prompt, row))
        expected: dict[str, int | None] = {}
        for _, event, spec, prompt, row in sorted(events, key=lambda e: e[:2]):
            scope = spec.scope(self.model)
            if event == _SENT:
                expected[spec.id] = oracle.expect(prompt, scope)
            elif event == _PREFILLED:
                oracle.record(prompt, scope)
            else:
                kept, unknown = kept_output(row)
                oracle.record(
                    prompt.extended(Segment(len(kept), tokens=tuple(kept))),
                    scope,
                    prompt_len=len(prompt),
                    extra_tokens=unknown,
                )
        return expected


#: Events of a request replayed after the run, in the order they go at one instant.
_PREFILLED, _ENDED, _SENT = 0, 1, 2
