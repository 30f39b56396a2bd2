"""A run of pure-decode steps taken without scheduling each one (the virtual clock's fast path).

Once a step has decoded every running sequence and done nothing else — no prompt chunk,
no admission, no preemption, no sequence finished or aborted — and the waiting queue is
empty or cannot be admitted from until a sequence finishes (``max_num_seqs`` reached, or
the decodes take the whole token budget), every following step is the same step again
until something happens: each running sequence computes its last sampled token and samples
one more, the step's context grows by one token per sequence, and the only pool moves are
a block reserved when a sequence outgrows its blocks and a block indexed when one fills.
``DecodeRun`` takes such steps one call at a time, each costing Python work per step and
per block boundary, not per token: the tokens are drawn a stream block at a time and
appended when a block is indexed (its hash needs them) or when the run closes.

What it does, step by step, is what ``EngineCore.step`` would do:

* the step's duration is the cost model's for the same ``StepShape`` (decode tokens, decode
  context, running count), plus the offload tier's load time, so every float is the one the
  step-by-step path computes;
* within a step, the blocks are reserved in running order (the scheduler's decode pass),
  then filled blocks are indexed in running order (the core's decode pass), so the pool's
  LRU queue, evictions and hash index end as they would;
* a step is refused (``step`` returns None) when one of its sequences would finish (EOS or
  ``max_tokens``: the finishing step is the core's) or when the pool has fewer blocks than
  the step must reserve (the core's step then preempts).

Anything from outside — an arrival, an abort, a timeout — is the driver's to check before
each call; the core refuses a run (``EngineCore.decode_run`` returns None) after any
``add_request`` or ``abort_request`` until a step of its own qualifies again.

Only the virtual-time driver uses it: a run yields no per-token ``RequestUpdate`` (the
virtual clock needs only each request's token times), so the real-time driver, which
streams every token to a client, steps the core one step at a time. It applies to the
block pool (vLLM's paged KV); the radix and slot pools step one step at a time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from perfmodel.costmodel import StepShape

if TYPE_CHECKING:
    from simengine.core import EngineCore
    from simengine.scheduler import SequenceState


class DecodeRun:
    """Steps ``1, 2, …`` after a pure-decode step of ``seqs`` (running order), one per call."""

    def __init__(self, core: EngineCore, seqs: list[SequenceState], num_waiting: int) -> None:
        self._core = core
        self._seqs = seqs
        pool = core.pool
        self._pool = pool
        self.num_decodes = len(seqs)
        self.num_waiting = num_waiting
        bs = pool.block_size
        self._bs = bs
        self._caching = pool.enable_caching
        #: Tokens of each sequence when the run starts (the last one not yet computed).
        self._n0 = [len(seq.tokens) for seq in seqs]
        #: Steps before one of them finishes: step j computes output position
        #: ``out0 + j - 1``; the one at ``min(eos, max_tokens - 1)`` finishes.
        limit = None
        for seq, n0 in zip(seqs, self._n0, strict=True):
            last = seq.request.max_tokens - 1
            eos = seq.stream.eos_position
            if eos is not None and eos < last:
                last = eos
            room = last - (n0 - seq.prompt_len)
            limit = room if limit is None else min(limit, room)
        self._max_steps = limit or 0
        #: Step j reserves a block for each sequence of bucket ``j % bs`` whose first
        #: reservation is at step j or before (then one every ``bs`` steps), and indexes
        #: the block of each sequence of the commit bucket ``j % bs`` (its context reaches a
        #: multiple of ``bs``); both in running order.
        self._reserves: list[list[tuple[int, int]]] = [[] for _ in range(bs)]
        self._commits: list[list[int]] = [[] for _ in range(bs)]
        for i, (seq, n0) in enumerate(zip(seqs, self._n0, strict=True)):
            first = seq.blocks.capacity_tokens + 2 - n0  # the step whose n is capacity + 1
            self._reserves[first % bs].append((i, first))
            self._commits[(1 - n0) % bs].append(i)
        #: The decode context of step 1: every sequence's computed tokens.
        self._context = sum(self._n0) - len(seqs)
        #: Tokens each sequence holds so far (appended lazily, see ``_fill``).
        self._filled = list(self._n0)
        self.steps = 0
        #: The end of each step taken, on the driver's clock (the driver fills it in).
        self.ends: list[float] = []

    def step(self) -> float | None:
        """Take the next step; its modelled duration, or None when the core must take it."""
        j = self.steps + 1
        if j > self._max_steps:
            return None
        bucket = self._reserves[j % self._bs]
        due = [i for i, first in bucket if first <= j] if bucket else bucket
        if len(due) > self._pool.num_free_or_reclaimable:
            return None
        seqs, n0 = self._seqs, self._n0
        for i in due:
            if not seqs[i].blocks.reserve(n0[i] + j - 1):
                raise RuntimeError("a decode run's block reservation failed after its check")
        if self._caching:
            for i in self._commits[j % self._bs]:
                computed = n0[i] + j - 1
                self._fill(i, computed)
                seqs[i].blocks.commit(seqs[i].tokens, computed)
        core = self._core
        d = self.num_decodes
        shape = StepShape(
            decode_tokens=d, decode_context=self._context + d * (j - 1), num_running=d
        )
        duration = core.cost.step_time(shape) + core.count_step()
        self.steps = j
        return duration

    def _fill(self, i: int, length: int) -> None:
        """Append sequence ``i``'s sampled tokens until it holds ``length``."""
        have = self._filled[i]
        if have >= length:
            return
        seq = self._seqs[i]
        seq.tokens.extend(seq.stream.token_ids(have - seq.prompt_len, length - have))
        self._filled[i] = length

    def close(self) -> list[str]:
        """Finish the run: each sequence holds the tokens its steps sampled and has computed
        all but the last. Returns the request ids, each of which got one token per step."""
        k = self.steps
        core = self._core
        for i, seq in enumerate(self._seqs):
            self._fill(i, self._n0[i] + k)
            seq.num_computed = self._n0[i] + k - 1
        core.stats.generation_tokens += k * self.num_decodes
        core.stats.evictions = self._pool.evictions
        return [seq.request.request_id for seq in self._seqs]
