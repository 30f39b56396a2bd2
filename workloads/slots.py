"""llama.cpp's slots as a pool the engine and oracle share.

The rules follow llama-server (``tools/server/server-context.cpp`` and
``server-task.cpp`` of the llama.cpp vendored by llama-cpp-python 0.3.36):

* ``-np N`` slots, each with its own ``n_ctx / N`` tokens of KV, each keeping ONE
  sequence: the last request's prompt and output but the last sampled token.
* **Slot selection** (``get_available_slot``): among idle slots holding tokens, the one
  whose longest common prefix with the prompt is the largest share of the prompt, if
  that share is above ``--slot-prompt-similarity`` (0.1; strictly better wins, so the
  lowest id among equals); else the least recently released idle slot (ties: the last
  in id order). A busy server queues the request until a slot is released.
* **Host prompt cache** (``--cache-ram``, on by default): a slot picked by LRU, or by
  similarity keeping under half of its tokens, first saves its sequence to host memory
  (unless a saved one already starts with it; saved ones it contains are dropped), then
  loads the saved sequence that keeps the larger share of both itself (at least a
  quarter) and the prompt, if one beats what the slot holds. Once a request has its
  slot, every idle slot's sequence is saved too (``--cache-idle-slots``, on by default;
  without ``--kv-unified`` the slots keep theirs).
* **Reuse**: the cached tokens are the common prefix of the slot's sequence and the
  prompt (``cache_prompt``, true by default), then with ``--cache-reuse K`` any later
  run of at least ``K`` equal tokens shifted into place; at least one token is always
  computed. The slot keeps that prefix and computes the rest.

Memory is one token per unit; a slot never lends its memory, so nothing is evicted
between slots (only the host cache forgets, and here it is unbounded, as 8 GiB is for
the small models this is checked with).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from workloads.cache_model import CacheModel
from workloads.prefix import CacheScope, PoolCounts

#: A slot's context when the server's size is not known (the oracle's default).
UNBOUNDED_CONTEXT = 1 << 40


def common_prefix(a: Sequence[int] | np.ndarray, b: Sequence[int] | np.ndarray) -> int:
    """How many leading tokens ``a`` and ``b`` share (llama.cpp's ``get_common_prefix``)."""
    x, y = np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64)
    n = min(len(x), len(y))
    if n == 0:
        return 0
    differ = np.flatnonzero(x[:n] != y[:n])
    return int(differ[0]) if differ.size else n


class Slot:
    __slots__ = ("busy", "id", "last_used", "scope", "tokens")

    def __init__(self, slot_id: int) -> None:
        self.id = slot_id
        self.tokens = np.empty(0, np.int64)
        self.scope = 0  # the root hash of the scope its tokens were computed in
        self.busy = False
        self.last_used = -1


@dataclass(frozen=True, eq=False)
class Saved:
    """One sequence in the host prompt cache."""

    scope: int
    tokens: np.ndarray


def _shared(scope_a: int, a: np.ndarray, scope_b: int, b: np.ndarray) -> int:
    """The common prefix of two sequences, none across scopes (another model, adapter or
    ``cache_salt``; a real llama-server sees no salt, and its oracle passes one scope)."""
    return common_prefix(a, b) if scope_a == scope_b else 0


def _share(n: int, of: int) -> float:
    return n / of if of else 0.0


class SlotCache:
    """The slots, the host prompt cache and the selection and reuse rules above."""

    uses_hashes = False
    block_size = 1

    def __init__(
        self,
        model: CacheModel,
        slot_context: int | None,
        *,
        enable_caching: bool = True,
    ) -> None:
        if model.slots <= 0:
            raise ValueError(f"a slot cache needs slots, got {model.slots}")
        self.model = model
        self.slot_context = slot_context if slot_context is not None else UNBOUNDED_CONTEXT
        self.num_blocks = self.slot_context * model.slots
        self.enable_caching = enable_caching
        self.slots = [Slot(i) for i in range(model.slots)]
        self.saved: list[Saved] = []  # the host prompt cache, oldest first
        self._clock = 0
        self.evictions = 0
        self.query_tokens = 0
        self.hit_tokens = 0

    # -- the pool surface the scheduler reads --------------------------------------------
    @property
    def capacity_tokens(self) -> int:
        return self.slot_context

    #: Slots never lend memory: a sequence's room is its own slot.
    num_free_or_reclaimable = 0

    def counts(self) -> PoolCounts:
        active = sum(self.slot_context for s in self.slots if s.busy)
        kept = sum(len(s.tokens) for s in self.slots if not s.busy)
        return PoolCounts(active=active, reclaimable=kept, free=self.num_blocks - active - kept)

    def sequence(self, scope: CacheScope) -> SlotSequence:
        return SlotSequence(self, scope)

    def reset(self) -> bool:
        """Erase every idle slot and the host cache; refused while a slot is busy."""
        if any(s.busy for s in self.slots):
            return False
        for slot in self.slots:
            slot.tokens = np.empty(0, np.int64)
        self.saved.clear()
        return True

    # -- selection -----------------------------------------------------------------------
    def choose(self, prompt: np.ndarray, scope: int) -> tuple[Slot, bool] | None:
        """The idle slot a request with ``prompt`` (in ``scope``) lands on, and whether
        the host cache is consulted; ``None`` when every slot is busy."""
        idle = [s for s in self.slots if not s.busy]
        if not idle:
            return None
        threshold = self.model.similarity
        if threshold != 0:
            best, chosen = 0.0, None
            for slot in idle:
                if not len(slot.tokens):
                    continue
                sim = _share(_shared(slot.scope, slot.tokens, scope, prompt), len(prompt))
                if sim > best and sim > threshold:
                    best, chosen = sim, slot
            if chosen is not None:
                lcp = _shared(chosen.scope, chosen.tokens, scope, prompt)
                keep = _share(lcp, len(chosen.tokens))
                return chosen, keep < 0.5
        chosen = idle[0]
        for slot in idle:
            if slot.last_used <= chosen.last_used:
                chosen = slot
        return chosen, True

    def loaded(self, slot: Slot, prompt: np.ndarray, scope: int) -> Saved | None:
        """The saved sequence ``slot`` loads once the host cache was consulted: one that
        keeps more of both itself and the prompt than the slot's own (``prompt_load``)."""
        own = _shared(slot.scope, slot.tokens, scope, prompt)
        keep_best = _share(own, len(slot.tokens)) if len(slot.tokens) else -1.0
        sim_best = _share(own, len(prompt))
        best: Saved | None = None
        for saved in self.saved:
            lcp = _shared(saved.scope, saved.tokens, scope, prompt)
            keep, sim = _share(lcp, len(saved.tokens)), _share(lcp, len(prompt))
            if keep < 0.25:
                continue
            if keep_best < keep and sim_best < sim:
                keep_best, sim_best, best = keep, sim, saved
        return best

    def _save(self, slot: Slot) -> None:
        """``prompt_save``: keep the slot's sequence in the host cache (as
        ``server_prompt_cache::alloc``: not when a saved one starts with it; the saved
        ones it starts with are dropped)."""
        tokens, scope = slot.tokens, slot.scope
        if not len(tokens):
            return
        if any(_shared(s.scope, s.tokens, scope, tokens) == len(tokens) for s in self.saved):
            return
        self.saved = [
            s for s in self.saved if _shared(s.scope, s.tokens, scope, tokens) != len(s.tokens)
        ]
        self.saved.append(Saved(scope, tokens.copy()))

    def reuse(self, held_scope: int, held: np.ndarray, scope: int, prompt: np.ndarray) -> int:
        """Cached prompt tokens given what the slot holds: the common prefix, then chunks
        of at least ``cache_reuse`` tokens shifted into place, at least one token left."""
        n_past = _shared(held_scope, held, scope, prompt)
        k = self.model.cache_reuse
        if k > 0 and held_scope == scope:
            head_c = head_p = n_past
            while head_c < len(held) and head_p < len(prompt):
                n = common_prefix(held[head_c:], prompt[head_p:])
                if n >= k:
                    n_past += n
                    head_c += n
                    head_p += n
                else:
                    head_c += 1
        if n_past == len(prompt) and n_past > 0:
            n_past -= 1
        return n_past

    def preview(self, prompt: np.ndarray, scope: int) -> int | None:
        """Cached tokens a request sent now would get; ``None`` when it would wait."""
        if not self.enable_caching:
            return 0 if any(not s.busy for s in self.slots) else None
        choice = self.choose(prompt, scope)
        if choice is None:
            return None
        slot, consult = choice
        held = self.loaded(slot, prompt, scope) if consult and self.model.cache_ram else None
        if held is None:
            return self.reuse(slot.scope, slot.tokens, scope, prompt)
        return self.reuse(held.scope, held.tokens, scope, prompt)

    def take(self, prompt: np.ndarray, scope: int) -> tuple[Slot, int] | None:
        """Select a slot for ``prompt`` (consulting the host cache), mark it busy; returns
        the slot and the cached tokens, or ``None`` when every slot is busy."""
        choice = self.choose(prompt, scope)
        if choice is None:
            return None
        slot, consult = choice
        if consult and self.model.cache_ram and self.enable_caching:
            self._save(slot)
            held = self.loaded(slot, prompt, scope)
            if held is not None:
                self.saved = [s for s in self.saved if s is not held]
                slot.scope, slot.tokens = held.scope, held.tokens
        cached = self.reuse(slot.scope, slot.tokens, scope, prompt) if self.enable_caching else 0
        slot.tokens = prompt[:cached].copy()
        slot.scope = scope
        slot.busy = True
        if self.model.cache_ram and self.enable_caching:  # --cache-idle-slots (default on)
            for idle in self.slots:
                if not idle.busy:
                    self._save(idle)
        self.query_tokens += len(prompt)
        self.hit_tokens += cached
        return slot, cached

    def give_back(self, slot: Slot, tokens: np.ndarray) -> None:
        self._clock += 1
        slot.tokens = tokens
        slot.busy = False
        slot.last_used = self._clock


class SlotSequence:
    """One request in its slot: the same four moves as ``SequenceBlocks``."""

    def __init__(self, cache: SlotCache, scope: CacheScope | None = None) -> None:
        self.cache = cache
        self.scope = scope or CacheScope()
        self._scope_key = self.scope.root_hash()
        self.slot: Slot | None = None
        self._tokens: Sequence[int] | np.ndarray = ()
        self._computed = 0

    @property
    def capacity_tokens(self) -> int:
        return self.cache.slot_context if self.slot is not None else 0

    def peek(self, tokens: Sequence[int] | np.ndarray, hashes: object = None) -> int | None:
        return self.cache.preview(np.asarray(tokens, dtype=np.int64), self._scope_key)

    def fits(self, num_tokens: int) -> bool:
        return num_tokens <= self.cache.slot_context

    def claim_prefix(
        self, tokens: Sequence[int] | np.ndarray, *, hashes: object = None, peeked: bool = False
    ) -> int:
        """``SequenceBlocks.claim_prefix``'s move (``peeked`` changes nothing here: the
        claim matches anew)."""
        taken = self.cache.take(np.asarray(tokens, dtype=np.int64), self._scope_key)
        if taken is None:
            raise RuntimeError("claim_prefix needs an idle slot (peek first)")
        self.slot, cached = taken
        return cached

    def reserve(self, num_tokens: int) -> bool:
        return num_tokens <= self.capacity_tokens

    def commit(self, tokens: Sequence[int] | np.ndarray, num_computed: int) -> None:
        self._tokens, self._computed = tokens, num_computed

    def release(self) -> None:
        """The slot keeps what was computed: prompt and output but the last sampled token."""
        if self.slot is None:
            return
        kept = np.asarray(self._tokens[: self._computed], dtype=np.int64).copy()
        self.cache.give_back(self.slot, kept)
        self.slot, self._tokens, self._computed = None, (), 0
