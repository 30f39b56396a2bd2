"""The clock-free engine core: add requests, step, read what each step produced.

``EngineCore.step()`` runs one scheduler step — it decides what to compute, "computes" it
(advances each sequence, fills and indexes KV blocks, samples tokens) and returns the
step's modelled duration without waiting for it. A driver turns that into time: the
real-time driver sleeps it, the virtual-time driver adds it to a simulated clock. Keeping
time out of the core makes every behaviour (preemption, prefix hits, token streams)
testable and repeatable.

Requests that could never finish are refused at ``add_request`` (``RequestRejected``):
a prompt plus ``max_tokens`` beyond ``max_model_len`` or beyond the whole KV pool, or,
with chunked prefill off, a prompt beyond the token budget.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field

import numpy as np

from perfmodel.config import EngineConfig
from perfmodel.costmodel import CostModel
from simengine.decode_run import DecodeRun
from simengine.sampler import EOS_ID, Sampler
from simengine.scheduler import Scheduler, SequenceState
from workloads.cache_model import parse_cache_model
from workloads.kv_pools import make_pool
from workloads.prefix import BlockPool, CacheScope


class RequestRejected(Exception):
    """A request the engine can never serve; the message is meant for the client."""


@dataclass
class EngineRequest:
    """A request as the engine sees it: token ids and sampling settings."""

    request_id: str
    #: A list, or an int64 array (taken without a copy; a replay's repeated prompts).
    prompt_token_ids: list[int] | np.ndarray
    max_tokens: int
    scope: CacheScope = field(default_factory=CacheScope)
    ignore_eos: bool = False
    temperature: float = 1.0
    seed: int | None = None
    logprobs: int | None = None


@dataclass(slots=True)
class TokenOut:
    """One sampled token and its log-probability (plus the top alternatives when asked)."""

    token_id: int
    logprob: float
    top_logprobs: list[tuple[int, float]] | None = None


@dataclass(slots=True)
class RequestUpdate:
    """What one step produced for one request."""

    request_id: str
    new_tokens: list[TokenOut]
    num_cached_tokens: int
    finished: bool = False
    finish_reason: str | None = None
    error: str | None = None


@dataclass(slots=True)
class StepResult:
    """One step: what ran, how long it is modelled to take, and each request's new tokens."""

    index: int
    kind: str
    duration_s: float
    prefill_tokens: int
    decode_tokens: int
    num_running: int
    num_waiting: int
    updates: list[RequestUpdate]
    preempted: list[str]
    first_token_ids: list[str]
    #: ``(request id, prompt tokens computed so far)`` of each prompt chunk this step ran.
    prefill_progress: list[tuple[str, int]] = field(default_factory=list)


@dataclass
class EngineStats:
    """Cumulative counters (the source of the server's Prometheus metrics)."""

    prompt_tokens: int = 0
    generation_tokens: int = 0
    preemptions: int = 0
    prefix_query_tokens: int = 0
    prefix_hit_tokens: int = 0
    evictions: int = 0
    num_running: int = 0
    num_waiting: int = 0
    steps: int = 0
    finished_requests: int = 0
    aborted_requests: int = 0
    rejected_requests: int = 0


def step_kind(prefill_tokens: int, decode_tokens: int) -> str:
    """``prefill``, ``decode``, ``mixed`` or ``idle``: the label step metrics are split by."""
    if prefill_tokens and decode_tokens:
        return "mixed"
    if prefill_tokens:
        return "prefill"
    return "decode" if decode_tokens else "idle"


class EngineCore:
    """Block pool + prefix cache + chunked-prefill scheduler + sampler + cost model."""

    def __init__(self, config: EngineConfig) -> None:
        config.validate()
        self.config = config
        self.cost = CostModel.from_config(config)
        num_blocks = config.num_gpu_blocks or self.cost.kv_pool_blocks(config.block_size)
        self.cache_model = parse_cache_model(config.cache_model, "cache_model")
        kv_block_bytes = self.cost.kv_bytes_per_token * config.block_size
        #: The CPU offload tier's size in blocks (0: none) and a loaded block's seconds.
        self.offload_blocks = int(config.offload_gb * 1e9 // kv_block_bytes)
        self._load_s_per_block = kv_block_bytes / (config.offload_gbps * 1e9)
        self._loaded_blocks = 0
        self.pool = make_pool(
            self.cache_model,
            num_blocks * config.block_size,
            config.block_size,
            enable_caching=config.enable_prefix_caching,
            offload_blocks=self.offload_blocks,
        )
        #: The pool's offload tier (``_offload_load_s`` reads it every step).
        self._offload = getattr(self.pool, "offload", None)
        self.scheduler = Scheduler(
            self.pool,
            max_num_batched_tokens=config.max_num_batched_tokens,
            max_num_seqs=config.max_num_seqs,
            enable_chunked_prefill=config.enable_chunked_prefill,
        )
        self.sampler = Sampler(config.seed, config.vocab_size)
        self.stats = EngineStats()
        self._seqs: dict[str, SequenceState] = {}
        self._aborted: list[RequestUpdate] = []
        self._index = 0

    # -- requests ------------------------------------------------------------------------
    def add_request(self, req: EngineRequest) -> None:
        """Queue a request, or raise RequestRejected if it could never be served."""
        try:
            self.check_request(req)
        except RequestRejected:
            self.stats.rejected_requests += 1
            raise
        prompt = np.asarray(req.prompt_token_ids, dtype=np.int64)
        tokens = array("q", prompt.tobytes())
        stream = self.sampler.stream(
            prompt,
            temperature=req.temperature,
            seed=req.seed,
            ignore_eos=req.ignore_eos,
            max_tokens=req.max_tokens,
        )
        seq = SequenceState(req, tokens, self.pool, req.scope, stream)
        self._seqs[req.request_id] = seq
        self.scheduler.add(seq, prompt)
        self.stats.num_waiting = self.scheduler.num_waiting

    def check_request(self, req: EngineRequest) -> None:
        """Raise RequestRejected if this engine could never serve ``req``."""
        cfg = self.config
        n = len(req.prompt_token_ids)
        if req.request_id in self._seqs:
            raise RequestRejected(f"request id {req.request_id!r} is already in flight")
        if n == 0:
            raise RequestRejected("the prompt is empty")
        if req.max_tokens < 1:
            raise RequestRejected(f"max_tokens must be at least 1, got {req.max_tokens}")
        if n + req.max_tokens > cfg.max_model_len:
            raise RequestRejected(
                f"this model's maximum context length is {cfg.max_model_len} tokens; the "
                f"request asks for {n + req.max_tokens} ({n} prompt + {req.max_tokens} output)"
            )
        pool_tokens = self.pool.capacity_tokens
        if n + req.max_tokens - 1 > pool_tokens:
            where = "a slot" if self.cache_model.kind == "slots" else "the whole cache"
            raise RequestRejected(
                f"the request needs KV for {n + req.max_tokens - 1} tokens but {where} "
                f"holds {pool_tokens}; shorten the prompt or max_tokens"
            )
        if not cfg.enable_chunked_prefill and n > cfg.max_num_batched_tokens:
            raise RequestRejected(
                f"the prompt ({n} tokens) exceeds max_num_batched_tokens "
                f"({cfg.max_num_batched_tokens}) and chunked prefill is off"
            )

    def abort_request(self, request_id: str) -> None:
        """Drop a request (client gone); its blocks return to the pool at once."""
        seq = self._seqs.pop(request_id, None)
        if seq is None:
            return
        self.scheduler.finish(seq)
        self.stats.aborted_requests += 1
        self._aborted.append(RequestUpdate(request_id, [], seq.num_cached or 0, True, "abort"))

    @property
    def num_gpu_blocks(self) -> int:
        """The KV pool in blocks of ``block_size`` tokens, whatever unit the cache model
        counts in (what ``vllm:cache_config_info`` reports)."""
        return self.pool.num_blocks * self.pool.block_size // self.config.block_size

    def has_unfinished(self) -> bool:
        return bool(self._seqs) or bool(self._aborted)

    def reset_prefix_cache(self) -> bool:
        """Forget every cached block; False (nothing done) while any block is in use."""
        return self.pool.reset()

    # -- the step ------------------------------------------------------------------------
    def step(self) -> StepResult:
        """Schedule and run one step; the returned duration is modelled, not waited for."""
        sched = self.scheduler.schedule()
        updates, self._aborted = self._aborted, []
        num_aborted = len(updates)
        first: list[str] = []
        ready = self._decode(sched.decodes)
        ready.extend(seq for seq, chunk in sched.prefills if self._prefill(seq, chunk, first))
        self._emit(ready, updates)
        stats = self.stats
        stats.generation_tokens += len(updates) - num_aborted
        stats.preemptions = self.scheduler.num_preemptions
        stats.prefix_query_tokens = self.pool.query_tokens
        stats.prefix_hit_tokens = self.pool.hit_tokens
        stats.evictions = self.pool.evictions
        stats.num_running = self.scheduler.num_running
        stats.num_waiting = self.scheduler.num_waiting
        duration = 0.0
        if not sched.empty:
            stats.steps += 1
            self._index += 1
            duration = self.cost.step_time(sched.shape) + self._offload_load_s()
        return StepResult(
            index=self._index,
            kind=step_kind(sched.shape.prefill_tokens, len(sched.decodes)),
            duration_s=duration,
            prefill_tokens=sched.shape.prefill_tokens,
            decode_tokens=len(sched.decodes),
            num_running=stats.num_running,
            num_waiting=stats.num_waiting,
            updates=updates,
            preempted=[s.request.request_id for s in sched.preempted],
            first_token_ids=first,
            prefill_progress=[(s.request.request_id, s.num_computed) for s, _ in sched.prefills],
        )

    def _offload_load_s(self) -> float:
        """Seconds this step spends loading offloaded blocks back over the host link."""
        offload = self._offload
        if offload is None:
            return 0.0
        loaded = offload.loaded_blocks - self._loaded_blocks
        self._loaded_blocks = offload.loaded_blocks
        return loaded * self._load_s_per_block

    def _decode(self, seqs: list[SequenceState]) -> list[SequenceState]:
        """Compute each decode's last sampled token (indexing a block it fills)."""
        block_size = self.pool.block_size
        caching = self.pool.enable_caching
        for seq in seqs:
            tokens = seq.tokens
            computed = seq.num_computed = len(tokens)
            if caching and computed % block_size == 0:
                seq.blocks.commit(tokens, computed)
        return list(seqs)

    def _prefill(self, seq: SequenceState, n: int, first: list[str]) -> bool:
        """Mark a chunk computed and index the blocks it filled; True if that was the last
        chunk, so the sequence samples its next token this step."""
        before = seq.num_computed
        after = seq.num_computed = before + n
        block_size = self.pool.block_size
        if self.pool.enable_caching and after // block_size > before // block_size:
            seq.blocks.commit(seq.tokens, after)
        if after < len(seq.tokens):
            return False
        if len(seq.tokens) == seq.prompt_len:
            first.append(seq.request.request_id)
            self.stats.prompt_tokens += seq.prompt_len
        return True

    def _emit(self, seqs: list[SequenceState], updates: list[RequestUpdate]) -> None:
        """Sample the next token of each sequence whose inputs are all computed; finish those
        that drew EOS or their last allowed token. The engine's hottest loop."""
        append = updates.append
        finished: list[SequenceState] = []
        for seq in seqs:
            req = seq.request
            tokens = seq.tokens
            position = len(tokens) - seq.prompt_len
            token_id, logprob = seq.stream.token(position)
            tokens.append(token_id)
            out = TokenOut(token_id, logprob)
            if req.logprobs is not None:
                out.top_logprobs = seq.stream.top_logprobs(position, req.logprobs)
            if token_id != EOS_ID and position + 1 < req.max_tokens:
                append(RequestUpdate(req.request_id, [out], seq.num_cached))
                continue
            reason = "stop" if token_id == EOS_ID else "length"
            append(RequestUpdate(req.request_id, [out], seq.num_cached, True, reason))
            finished.append(seq)
        for seq in finished:
            self.scheduler.finish(seq)
            del self._seqs[seq.request.request_id]
        self.stats.finished_requests += len(finished)

    # -- the virtual clock's fast path -----------------------------------------------------
    def decode_run(self) -> DecodeRun | None:
        """The steps after this one as a ``DecodeRun`` (``simengine.decode_run``): the same
        steps, their decodes costing work per step and per event instead of per token;
        None where it does not apply (another cache model than the block pool, or an abort
        not yet reported by a step).

        Only for a driver that needs token times, not tokens (the virtual clock's): a run's
        decoding members emit no per-token ``RequestUpdate``.
        """
        if self._aborted or not isinstance(self.pool, BlockPool):
            return None
        return DecodeRun(self)

    def forget(self, request_id: str) -> None:
        """A ``DecodeRun`` finished ``request_id`` (as ``_emit`` finishes one)."""
        del self._seqs[request_id]
        self.stats.finished_requests += 1

    def count_step(self) -> float:
        """Count a step a ``DecodeRun`` took; the seconds it spends loading offloaded
        blocks back, as ``step`` adds them."""
        self.stats.steps += 1
        self._index += 1
        return self._offload_load_s()
