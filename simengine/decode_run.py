"""Steps whose decodes cost Python work per step, not per token (the virtual clock's fast path).

A decoding sequence does the same thing every step: it computes its last sampled token and
samples one more; its context grows by one; a block is reserved when it outgrows its
blocks and indexed when one fills; it finishes at a position known in advance (EOS or
``max_tokens``). ``DecodeRun`` takes steps with the decoding sequences held as a *cohort*:
each member's state is a formula of the step index, the step's decode context a running
sum, and only the events — a block reserved, a block indexed, a member finishing, a
sequence joining after its prompt — cost work. Prompt chunks and admissions go through the
scheduler's own passes (``Scheduler.schedule_prefills``), the chunks through the core's
``_prefill`` and the first tokens through its ``_emit``, so each step is the one
``EngineCore.step`` would take:

* its duration is the cost model's for the same ``StepShape``, plus the offload tier's
  load time: every float is the step-by-step path's;
* the pool sees the same moves in the same order: the members' reservations in running
  order (the scheduler's decode pass), then the prompt chunks' and admissions', then the
  members' filled blocks indexed in running order (the core's decode pass), then the
  chunks'; then the finished members released in running order, then the sequences that
  finished on their first token;
* the updates come in the core's order (aborts, decodes in running order, then first
  tokens);
* when a member finds no block, the newest running sequence is preempted, as pass 1 does
  (``Scheduler.preempt_newest``; a preempted member leaves with its token times,
  ``stamps``), and a step that preempted admits nothing;
* a sequence is a decode by its state, as the scheduler tells one (all but its last
  token computed, past its prompt), so a recompute whose last chunk left one token joins.

A step is refused (``step`` returns None, nothing changed) only when the cohort is empty;
the driver then closes the run and steps the core. An abort goes through the run
(``abort``), which takes the request out of the cohort or the prefilling list first.

A member's tokens are drawn a stream block at a time and appended when a block is indexed
(its hash needs them), when it finishes or when the run closes. Members get no per-token
``RequestUpdate``: ``close``, ``leavers`` and ``stamps`` say in which steps each one decoded, so a
driver stamps its token times from ``ends``. Hence only the virtual-time driver uses it;
the real-time driver, which streams every token as its step ends, steps the core one step
at a time. It applies to the block pool (vLLM's paged KV); the radix and slot pools step
one step at a time.
"""

from __future__ import annotations

from bisect import insort
from typing import TYPE_CHECKING

from perfmodel.costmodel import StepShape
from simengine.sampler import EOS_ID
from simengine.scheduler import Schedule

if TYPE_CHECKING:
    from simengine.core import EngineCore, RequestUpdate
    from simengine.scheduler import SequenceState


class _Member:
    """A decoding sequence of the cohort: at step ``j ≥ join`` it holds ``n_join + j - join``
    tokens before sampling (all but the last computed)."""

    __slots__ = (
        "commit_at", "filled", "gone", "join", "n_join", "order", "reserve_at", "seq",
    )  # fmt: skip

    def __init__(self, seq: SequenceState, order: int, join: int) -> None:
        self.seq = seq
        self.order = order
        self.join = join
        self.n_join = self.filled = len(seq.tokens)
        #: Finished or preempted: no longer in the cohort (nor in its buckets).
        self.gone = False
        #: Its reservation and commit buckets in ``DecodeRun`` (indices: an entry of its
        #: own here would be a reference cycle, which the paused collector never frees).
        self.reserve_at = self.commit_at = 0


class DecodeRun:
    """Steps ``1, 2, …`` after the core's last step, one per ``step`` call (module docstring)."""

    def __init__(self, core: EngineCore) -> None:
        from simengine.core import RequestUpdate, TokenOut, step_kind  # the core imports us

        self._update, self._token_out, self._step_kind = RequestUpdate, TokenOut, step_kind
        self._core = core
        sched = self._sched = core.scheduler
        sched.prune_finished()
        pool = self._pool = core.pool
        bs = self._bs = pool.block_size
        self._caching = pool.enable_caching
        #: Members by the step index modulo ``bs`` of their reservations and block fills,
        #: each list in running order: ``(order, first step, member)``, ``(order, member)``.
        self._reserves: list[list[tuple[int, int, _Member]]] = [[] for _ in range(bs)]
        self._commits: list[list[tuple[int, _Member]]] = [[] for _ in range(bs)]
        self._finishes: dict[int, list[tuple[int, _Member]]] = {}
        #: The cohort: each decoding sequence's member, by request id.
        self._by_seq: dict[str, _Member] = {}
        #: Running sequences still computing their prompt, in running order, and each
        #: running sequence's place in that order.
        self._prefilling: list[SequenceState] = []
        self._order: dict[str, int] = {}
        self._next_order = 0
        #: Decode context and size of the next step's cohort.
        self._context = 0
        self.num_decodes = 0
        self.steps = 0
        #: The end of each step taken, on the driver's clock (the driver appends them).
        self.ends: list[float] = []
        #: Of the last step: its updates, the members among them (request id → the step
        #: they joined at) and what a step record holds.
        self.updates: list[RequestUpdate] = []
        self.leavers: dict[str, int] = {}
        #: Members preempted by the last step: ``(request id, step joined, last step)``.
        self.stamps: list[tuple[str, int, int]] = []
        self.num_preempted = 0
        self.kind = "idle"
        self.prefill_tokens = self.decode_tokens = self.num_running = self.num_waiting = 0
        for seq in sched.running:
            self._place(seq)
            n = len(seq.tokens)
            if n - seq.num_computed == 1 and n != seq.prompt_len:
                self._join(seq, 1)
            else:
                self._prefilling.append(seq)

    def _place(self, seq: SequenceState) -> int:
        order = self._order[seq.request.request_id] = self._next_order
        self._next_order += 1
        return order

    def _join(self, seq: SequenceState, j: int) -> None:
        """``seq`` decodes from step ``j`` on."""
        member = _Member(seq, self._order[seq.request.request_id], j)
        n, bs = member.n_join, self._bs
        self._by_seq[seq.request.request_id] = member
        first = j + seq.blocks.capacity_tokens + 1 - n  # the step at which n = capacity + 1
        member.reserve_at, member.commit_at = first % bs, (j - n) % bs
        insort(self._reserves[member.reserve_at], (member.order, first, member))
        insort(self._commits[member.commit_at], (member.order, member))
        last = seq.request.max_tokens - 1
        eos = seq.stream.eos_position
        if eos is not None and eos < last:
            last = eos
        done = j + last - (n - seq.prompt_len)  # the step that samples position ``last``
        self._finishes.setdefault(done, []).append((member.order, member))
        self._context += n - 1
        self.num_decodes += 1

    def _fill(self, member: _Member, length: int) -> None:
        """Append the member's sampled tokens until it holds ``length``."""
        have = member.filled
        if have < length:
            seq = member.seq
            seq.stream.append_ids(seq.tokens, have - seq.prompt_len, length - have)
            member.filled = length

    def step(self) -> float | None:
        """Take the next step; its modelled duration, or None (nothing changed) when the
        cohort is empty and the core must take it."""
        j = self.steps + 1
        if not self.num_decodes:
            return None
        core, sched, bs = self._core, self._sched, self._bs
        out: Schedule | None = None  # built when something schedules or preempts
        if self.stamps:
            self.stamps = []
        # Pass 1: the members that outgrow their blocks reserve one, in running order;
        # when the pool is out, the newest running sequence is preempted (maybe the
        # member itself, which then ends the pass).
        bucket = self._reserves[j % bs]
        if bucket:
            # A member preempted here is the newest running sequence: at or after ``m`` in
            # the bucket (running order), so leaving it skips nothing still to be visited.
            for _, first, m in bucket:
                if first > j or m.gone:
                    continue
                blocks = m.seq.blocks
                n = m.n_join + j - m.join
                if not blocks.reserve(n):
                    if out is None:
                        out = Schedule()
                    sched.prune_finished()
                    while not blocks.reserve(n):
                        victim = sched.preempt_newest(out)
                        self._evict(victim, j)
                        if victim is m.seq:
                            break
                    if m.gone:
                        break
        d = self.num_decodes
        # Passes 2 and 3 over what the decodes left.
        preempted = out is not None and out.preempted
        if sched.waiting or preempted:
            sched.prune_finished()
        prefilling = self._prefilling
        if preempted:
            prefilling = [seq for seq in prefilling if seq.admitted]
        if prefilling or sched.waiting or preempted:  # else they schedule nothing
            if out is None:
                out = Schedule()
            sched.schedule_prefills(out, prefilling, d)
        num_running = sched.num_running
        if out is None:  # decodes only
            shape = StepShape(0, 0, 0, d, self._context, num_running)
        else:
            shape = out.shape
            shape.decode_tokens = d
            shape.decode_context = self._context
            shape.num_running = num_running
            if d == 0 and not out.prefills:  # every sequence preempted, none admitted
                raise RuntimeError("a decode run's step scheduled nothing")
        # The core's decode pass: index the blocks the members filled.
        if self._caching:
            for _, m in self._commits[j % bs]:
                computed = m.n_join + j - m.join
                seq = m.seq
                have = m.filled
                if have < computed:  # _fill
                    seq.stream.append_ids(seq.tokens, have - seq.prompt_len, computed - have)
                    m.filled = computed
                seq.blocks.commit(seq.tokens, computed)
        first: list[str] = []
        ready = (
            [seq for seq, chunk in out.prefills if core._prefill(seq, chunk, first)]
            if out is not None
            else None
        )
        # The core's emit: the aborts since the last step, the members finishing here
        # (running order), then first tokens.
        updates: list[RequestUpdate] = []
        if core._aborted:
            updates, core._aborted = core._aborted, []
        num_aborted = len(updates)
        if self.leavers:
            self.leavers = {}
        self._context += d
        finishing = self._finishes.pop(j, None)
        finished = 0
        if finishing:
            finishing.sort()
            for _, m in finishing:
                if not m.gone:
                    self._finish(m, j, updates)
                    finished += 1
        if ready:
            core._emit(ready, updates)
        stats = core.stats
        stats.generation_tokens += d + len(updates) - finished - num_aborted
        # Sequences whose prompt this step finished decode from the next step on, and so
        # does a recomputed one left one token short (the scheduler tells a decode by its
        # state: all but the last token computed, past its prompt); the rest, and those
        # newly admitted, stay prefilling, in running order.
        if out is not None and (out.prefills or out.preempted):
            self._sort_prefilling(prefilling, out, j)
            num_running = sched.num_running
        elif finishing:
            num_running = sched.num_running
        pool = self._pool
        stats.preemptions = sched.num_preemptions
        stats.prefix_query_tokens = pool.query_tokens
        stats.prefix_hit_tokens = pool.hit_tokens
        stats.evictions = pool.evictions
        stats.num_running = self.num_running = num_running
        stats.num_waiting = self.num_waiting = len(sched.waiting)
        duration = core.cost.step_time(shape) + core.count_step()
        self.steps = j
        self.updates = updates
        self.kind = self._step_kind(shape.prefill_tokens, d)
        self.prefill_tokens, self.decode_tokens = shape.prefill_tokens, d
        self.num_preempted = 0 if out is None else len(out.preempted)
        return duration

    def _sort_prefilling(self, prefilling: list[SequenceState], out: Schedule, j: int) -> None:
        """After step ``j``: sequences whose prompt it finished decode from the next step on,
        and so does a recomputed one left one token short (the scheduler tells a decode by
        its state: all but the last token computed, past its prompt); the rest, and those
        newly admitted, stay prefilling, in running order."""
        admitted = [seq for seq, _ in out.prefills[out.partial :]]
        for seq in admitted:
            self._place(seq)
        still: list[SequenceState] = []
        for seq in (*prefilling, *admitted):
            if not seq.admitted or seq.done:
                continue
            n = len(seq.tokens)
            if n - seq.num_computed == 1 and n != seq.prompt_len:
                self._join(seq, j + 1)
            else:
                still.append(seq)
        self._prefilling = still

    def _evict(self, seq: SequenceState, j: int) -> None:
        """``seq`` was preempted at step ``j``: a member leaves the cohort with the tokens
        it sampled up to step ``j - 1`` (``stamps``); a prefilling one leaves that list."""
        m = self._by_seq.pop(seq.request.request_id, None)
        if m is not None:
            self._leave(m)
            n = m.n_join + j - m.join
            self._fill(m, n)
            self._context -= n - 1
            self.num_decodes -= 1
            self.stamps.append((seq.request.request_id, m.join, j - 1))

    def _leave(self, m: _Member) -> None:
        """``m`` leaves the cohort: out of its buckets."""
        m.gone = True
        for bucket in (self._reserves[m.reserve_at], self._commits[m.commit_at]):
            for i, entry in enumerate(bucket):
                if entry[-1] is m:
                    del bucket[i]
                    break

    def _finish(self, m: _Member, j: int, updates: list[RequestUpdate]) -> None:
        """The member samples its last token at step ``j`` and leaves (``_emit``'s finish)."""
        seq = m.seq
        n = m.n_join + j - m.join
        position = n - seq.prompt_len
        token_id, logprob = seq.stream.token(position)
        self._fill(m, n + 1)
        seq.num_computed = n
        reason = "stop" if token_id == EOS_ID else "length"
        rid = seq.request.request_id
        out = self._token_out(token_id, logprob)
        updates.append(self._update(rid, [out], seq.num_cached, True, reason))
        self.leavers[rid] = m.join
        self._leave(m)
        del self._by_seq[rid]
        self._sched.finish(seq)
        self._core.forget(rid)
        self._context -= n
        self.num_decodes -= 1

    def abort(self, request_id: str) -> tuple[int, int] | None:
        """Abort a request between steps (``EngineCore.abort_request``); for a member, the
        steps it decoded in, ``(first, last)`` (``ends[first - 1 : last]``), else None."""
        m = self._by_seq.pop(request_id, None)
        stamp = None
        if m is not None:
            self._leave(m)
            k = self.steps
            n = m.n_join + max(0, k - m.join + 1)
            self._fill(m, n)
            m.seq.num_computed = n - 1
            self._context -= n - 1
            self.num_decodes -= 1
            stamp = (m.join, k)
        else:
            self._prefilling = [s for s in self._prefilling if s.request.request_id != request_id]
        self._core.abort_request(request_id)
        return stamp

    def close(self) -> list[tuple[str, int]]:
        """End the run: each member holds the tokens its steps sampled and has computed all
        but the last. Returns ``(request id, step it joined at)`` of each member still
        decoding: it got one token at each step from that one on."""
        k = self.steps
        out = []
        for m in self._by_seq.values():
            seq = m.seq
            length = m.n_join + max(0, k - m.join + 1)
            self._fill(m, length)
            seq.num_computed = length - 1
            out.append((seq.request.request_id, m.join))
        self._by_seq = {}
        return out
