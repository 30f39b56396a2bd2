"""The continuous-batching scheduler: which sequences compute how many tokens this step.

Each step has a token budget, ``max_num_batched_tokens``. It is spent in three passes:

1. **Decodes first.** Every running sequence whose inputs are all computed but the last
   sampled token takes one token. If its KV needs a new block and the pool has none, the
   most recently admitted running sequence is preempted (recompute): its blocks go back to
   the pool and it returns to the head of the waiting queue, to be prefilled again later.
2. **Partial prefills**, first come first served, share what the decodes left
   (``prefill_allowance``); a chunk shrinks to the blocks that are free, and waits when
   none are.
3. **New admissions** from the waiting queue, while the budget, ``max_num_seqs`` and the
   pool allow; at admission the cached prefix is claimed from the pool, so only the fresh
   suffix is computed. The queue is FCFS: a head that does not fit blocks the rest. A step
   that had to preempt admits nothing.

With chunked prefill off, a prompt is scheduled whole or not at all. A sequence is never
admitted unless it can eventually fit (the engine rejects the rest at add time), and a
step in which nothing can move preempts the newest sequence, so the scheduler cannot
livelock. When decodes take the whole budget, prefill simply waits for a later step.
``budget_bound_steps`` counts the steps that spent the whole budget: the only steps in
which a different budget could have scheduled differently (0 of them, and the budget
changes nothing but the KV pool).

Per-step work is proportional to the number of running sequences, never to their
lengths: block hashing happens only when a block fills or a sequence is admitted.
"""

from __future__ import annotations

from array import array
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from perfmodel.chunking import prefill_allowance
from perfmodel.costmodel import StepShape, attended_pairs
from simengine.sampler import TokenStream
from workloads.kv_pools import KvPool
from workloads.prefix import CacheScope, block_hashes, extend_hashes

if TYPE_CHECKING:
    from simengine.core import EngineRequest


#: Prompt bytes a scheduler keeps block hash chains for (the oldest prompt goes first).
PROMPT_CHAIN_BYTES = 32 << 20


class SequenceState:
    """One request inside the engine: its tokens, its KV blocks and its progress.

    ``tokens`` holds the prompt and every token sampled so far, as a compact int64
    ``array`` (a fifth of a list's memory, invisible to the garbage collector, and hashed
    without copying); ``num_computed`` counts those whose KV exists. A decoding sequence
    always has exactly one uncomputed token (the last one sampled), which the next step
    computes while sampling the next.
    """

    __slots__ = (
        "admitted",
        "blocks",
        "done",
        "hashes",
        "num_cached",
        "num_computed",
        "prompt_len",
        "request",
        "stream",
        "tokens",
    )

    def __init__(
        self,
        request: EngineRequest,
        tokens: array[int],
        pool: KvPool,
        scope: CacheScope,
        stream: TokenStream,
    ) -> None:
        self.request = request
        self.tokens = tokens
        self.prompt_len = len(tokens)
        self.num_computed = 0
        #: Prefix-cache hit at first admission (tokens); None until admitted.
        self.num_cached: int | None = None
        self.blocks = pool.sequence(scope)
        self.hashes: list[int] = []
        self.stream = stream
        self.admitted = False
        self.done = False

    @property
    def num_output(self) -> int:
        return len(self.tokens) - self.prompt_len


@dataclass(slots=True)
class Schedule:
    """What one step computes: decodes (one token each) and prompt chunks, plus preemptions,
    and the step's shape (the aggregates the cost model prices it with)."""

    decodes: list[SequenceState] = field(default_factory=list)
    prefills: list[tuple[SequenceState, int]] = field(default_factory=list)
    preempted: list[SequenceState] = field(default_factory=list)
    shape: StepShape = field(default_factory=StepShape)
    #: Of ``prefills``, how many continue a running prompt (the rest are admissions).
    partial: int = 0

    @property
    def empty(self) -> bool:
        return not self.decodes and not self.prefills

    def add_prefill(self, seq: SequenceState, chunk: int, context: int) -> None:
        """Schedule ``chunk`` prompt tokens of ``seq`` after ``context`` computed ones."""
        self.prefills.append((seq, chunk))
        shape = self.shape
        shape.prefill_tokens += chunk
        shape.prefill_pairs += attended_pairs(chunk, context)
        shape.prefill_context += context


class Scheduler:
    """Waiting queue, running set and the three-pass budget split described above."""

    def __init__(
        self,
        pool: KvPool,
        *,
        max_num_batched_tokens: int,
        max_num_seqs: int,
        enable_chunked_prefill: bool,
    ) -> None:
        self.pool = pool
        self.block_size = pool.block_size
        self.budget = max_num_batched_tokens
        self.max_num_seqs = max_num_seqs
        self.chunked = enable_chunked_prefill
        self.caching = pool.enable_caching
        #: Whether sequences look their prefix up by block hash (the block pool does).
        self.hashing = pool.enable_caching and pool.uses_hashes
        #: Block hash chains of recent prompts by scope and bytes (see ``add``).
        self._chains: dict[tuple[CacheScope, bytes], tuple[int, ...]] = {}
        self._chain_bytes = 0
        self.waiting: deque[SequenceState] = deque()
        #: Running sequences in admission order; the last one is the preemption victim.
        self.running: list[SequenceState] = []
        self._done_in_running = 0
        self.num_preemptions = 0
        #: Steps that spent the whole token budget (where the budget set the schedule).
        self.budget_bound_steps = 0

    @property
    def num_running(self) -> int:
        return len(self.running) - self._done_in_running

    @property
    def num_waiting(self) -> int:
        return len(self.waiting)

    def add(self, seq: SequenceState, prompt: np.ndarray) -> None:
        """Queue a new sequence; its prompt's block hashes are computed now, from the array
        form, so admission only hashes what decoding appended since. A prompt seen lately
        in the same scope (replays and benchmarks repeat theirs) reuses its chain: the
        chain is a function of scope and tokens alone."""
        if self.hashing:
            key = (seq.blocks.scope, prompt.tobytes())
            chain = self._chains.get(key)
            if chain is None:
                chain = tuple(block_hashes(prompt, self.block_size, seq.blocks.scope))
                self._chains[key] = chain
                self._chain_bytes += len(key[1])
                while self._chain_bytes > PROMPT_CHAIN_BYTES:
                    oldest = next(iter(self._chains))
                    self._chain_bytes -= len(oldest[1])
                    del self._chains[oldest]
            seq.hashes = list(chain)
        self.waiting.append(seq)

    def finish(self, seq: SequenceState) -> None:
        """Release a finished or aborted sequence's blocks (tail first) and retire it."""
        if seq.done:
            return
        seq.done = True
        if seq.admitted:
            seq.blocks.release()
            self._done_in_running += 1
        else:
            self.waiting.remove(seq)

    # -- the step ------------------------------------------------------------------------
    def schedule(self) -> Schedule:
        """Decide the next step. Every sequence scheduled is guaranteed its KV blocks."""
        self.prune_finished()
        out = Schedule()
        prefilling = self._schedule_decodes(out)
        self.schedule_prefills(out, prefilling, len(out.decodes))
        out.shape.decode_tokens = len(out.decodes)
        out.shape.num_running = len(self.running)
        return out

    def schedule_prefills(
        self, out: Schedule, prefilling: list[SequenceState], num_decodes: int
    ) -> None:
        """Passes 2 and 3 after pass 1 scheduled ``num_decodes`` decodes (in ``out.decodes``,
        or elsewhere: ``simengine.decode_run``'s cohort, which reserves and preempts for its
        decodes as pass 1 does); a step in which nothing can move preempts the newest
        sequence and schedules again. The first ``out.partial`` prefills continue running
        prompts, the rest are admissions."""
        while True:
            left = prefill_allowance(self.budget, num_decodes)
            left = self._schedule_partial_prefills(out, prefilling, left)
            out.partial = len(out.prefills)
            if not out.preempted or not (num_decodes or out.prefills):
                # After preempting for decodes, admitting now would only take the blocks
                # back and preempt again next step; wait a step (as vLLM does).
                self._admit(out, left)
            if num_decodes or out.prefills or not self.running:
                if num_decodes + out.shape.prefill_tokens >= self.budget:
                    self.budget_bound_steps += 1
                return
            # Every running sequence is a prefill stuck for blocks: free the newest.
            self._preempt(self.running.pop(), out)
            prefilling = self._schedule_decodes(out)
            num_decodes = len(out.decodes)

    def prune_finished(self) -> None:
        """Drop finished and aborted sequences from ``running``."""
        if self._done_in_running:
            self.running = [s for s in self.running if not s.done]
            self._done_in_running = 0

    def preempt_newest(self, out: Schedule) -> SequenceState:
        """Pass 1's move when a decode finds no block: preempt the newest running sequence
        (for ``simengine.decode_run``, whose cohort runs pass 1 itself)."""
        victim = self.running.pop()
        self._preempt(victim, out)
        return victim

    def _schedule_decodes(self, out: Schedule) -> list[SequenceState]:
        """Pass 1: one token per decoding sequence, preempting the newest when blocks run out.

        Victims come from the tail of ``running`` (admitted after the sequence at hand),
        so a sequence already scheduled this step is never preempted. Returns the running
        sequences still prefilling, in admission order.
        """
        prefilling: list[SequenceState] = []
        running = self.running
        decodes = out.decodes
        context = 0
        i = 0
        while i < len(running):
            seq = running[i]
            i += 1
            n = len(seq.tokens)
            if n - seq.num_computed != 1 or n == seq.prompt_len:
                prefilling.append(seq)
                continue
            if n > seq.blocks.capacity_tokens:
                while not seq.blocks.reserve(n):
                    victim = running.pop()
                    self._preempt(victim, out)
                    if victim is seq:
                        break
                if not seq.admitted:
                    break
            decodes.append(seq)
            context += seq.num_computed
        out.shape.decode_context = context
        return prefilling

    def _schedule_partial_prefills(
        self, out: Schedule, prefilling: list[SequenceState], left: int
    ) -> int:
        """Pass 2: running sequences still prefilling, FCFS, each as far as budget and blocks
        go. Returns the budget left."""
        for seq in prefilling:
            if left == 0:
                break
            remaining = len(seq.tokens) - seq.num_computed
            room = (
                seq.blocks.capacity_tokens
                + self.pool.num_free_or_reclaimable * self.block_size
                - seq.num_computed
            )
            chunk = min(remaining, left, room)
            if chunk == 0 or (self._whole_only(remaining) and chunk < remaining):
                continue
            seq.blocks.reserve(seq.num_computed + chunk)
            out.add_prefill(seq, chunk, seq.num_computed)
            left -= chunk
        return left

    def _whole_only(self, remaining: int) -> bool:
        """Without chunked prefill a prompt runs whole; a longer-than-budget recompute of a
        preempted sequence is still chunked, or it could never run again."""
        return not self.chunked and remaining <= self.budget

    def _admit(self, out: Schedule, left: int) -> None:
        """Pass 3: admit waiting sequences FCFS while budget, max_num_seqs and blocks allow."""
        block_size = self.block_size
        while self.waiting and left > 0 and len(self.running) < self.max_num_seqs:
            seq = self.waiting[0]
            tokens = seq.tokens
            if self.hashing:
                full = len(tokens) // block_size
                extend_hashes(seq.hashes, tokens, block_size, seq.blocks.scope, full)
            cached = seq.blocks.peek(tokens, seq.hashes)
            if cached is None:  # no slot free (llama.cpp's slots)
                break
            remaining = len(tokens) - cached
            chunk = min(remaining, left)
            if self._whole_only(remaining) and chunk < remaining:
                break
            if not seq.blocks.fits(cached + chunk):
                break
            self.waiting.popleft()
            seq.blocks.claim_prefix(tokens, hashes=seq.hashes, peeked=True)
            seq.blocks.reserve(cached + chunk)
            seq.num_computed = cached
            if seq.num_cached is None:
                seq.num_cached = cached
            seq.admitted = True
            self.running.append(seq)
            out.add_prefill(seq, chunk, cached)
            left -= chunk

    def _preempt(self, seq: SequenceState, out: Schedule) -> None:
        """Recompute-preemption: drop the sequence's KV and put it back at the queue head."""
        seq.blocks.release()
        seq.num_computed = 0
        seq.admitted = False
        self.waiting.appendleft(seq)
        out.preempted.append(seq)
        self.num_preemptions += 1
