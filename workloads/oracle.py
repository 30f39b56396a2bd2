"""The prefix-cache oracle: how many prompt tokens a server *should* find cached.

Replays requests, in the order they are sent, through the same prefix model the
embedded engine runs, for the server's cache model (``workloads.cache_model``: vLLM's
blocks, SGLang's radix tree, llama.cpp's slots; ``workloads.kv_pools`` builds the
pool). For blocks (``workloads.prefix``): the scope-rooted hash chain over full
blocks, the LRU block pool with tail-first release, the hit capped at
``num_tokens - 1``. With ``num_blocks=None`` the pool is unbounded and is kept as an
index of block hashes — the same chain, nothing ever evicted; with a pool size it is a
real ``BlockPool`` driven through ``SequenceBlocks``, so eviction under pressure is the
engine's own.

Hashing is the cost: a trace of 10^8 prompt tokens is mostly the same blocks over and
over. ``PromptHasher`` therefore memoises each link of the chain on what produced it —
(parent hash, keyed run, offset, length) — which is exact because a keyed run's tokens
are a pure function of key and position; only blocks never seen before are
materialised and hashed. The memo is kept in two generations of ``MEMO_GENERATION``
links each: when the young one is full it becomes the old one (the oldest dropped), and a
link found in the old one moves back to the young one. A plan's shared prefixes stay
memoised however long it is, while links no later prompt reaches again (each request's
own suffix: two of them per request) cost a bounded ~5 MiB, not ~500 B a request
(25 MiB at 50,000 requests, held while the plan was annotated). Dropping a link changes
no hash, only when it is computed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from workloads.cache_model import CacheModel
from workloads.kv_pools import make_pool
from workloads.multi_turn import assumed_output
from workloads.plan import Plan, Prompt, RequestSpec, Segment
from workloads.prefix import CacheScope, block_hashes, chain_hash

#: Vocabulary used to materialise keyed runs when the target's is not known. Hit counts
#: do not depend on it (only whether tokens are equal does).
DEFAULT_VOCAB_SIZE = 32000
#: Links in each of the memo's two generations (see the module docstring).
MEMO_GENERATION = 16_384

Tokens = Prompt | Sequence[int] | np.ndarray


class PromptHasher:
    """Block hash chains of prompts, memoised link by link."""

    def __init__(self, block_size: int, vocab_size: int = DEFAULT_VOCAB_SIZE) -> None:
        if block_size <= 0:
            raise ValueError(f"block_size must be positive, got {block_size}")
        self.block_size = block_size
        self.vocab_size = vocab_size
        self._memo: dict[tuple[int, int, int, int], int] = {}  # the young generation
        self._old: dict[tuple[int, int, int, int], int] = {}

    def chain(self, tokens: Tokens, scope: CacheScope) -> list[int]:
        """Hashes of every full block of ``tokens`` (``block_hashes``, memoised)."""
        return self.chain_and_tail(tokens, scope, None)[0]

    def chain_and_tail(
        self, tokens: Tokens, scope: CacheScope, tail_at: int | None
    ) -> tuple[list[int], int | None]:
        """Full-block hashes, and the identity of the partial block ending at ``tail_at``.

        The partial block is no cache block (engines share only full blocks); its
        identity lets workload statistics count a repeated short prompt ending as reuse,
        the way trace block ids do. ``None`` when ``tail_at`` is on a block boundary.
        """
        if not isinstance(tokens, Prompt):
            return self._raw_chain(np.asarray(tokens, dtype=np.int64), scope, tail_at)
        bs, n = self.block_size, len(tokens)
        parent = scope.root_hash()
        hashes: list[int] = []
        tail = None
        segments = tokens.segments
        seg, seg_start = 0, 0
        materialised: np.ndarray | None = None
        from_pos = 0
        cuts = [(b * bs, b * bs + bs) for b in range(n // bs)]
        if tail_at is not None and tail_at % bs:
            cuts.insert(tail_at // bs, (tail_at - tail_at % bs, tail_at))
        for start, end in cuts:
            while seg_start + segments[seg].length <= start:
                seg_start += segments[seg].length
                seg += 1
            run = segments[seg]
            link = None
            if run.key is not None and end <= seg_start + run.length:
                link = (parent, run.key, start - seg_start, end - start)
                known = self._memo.get(link)
                if known is None and link in self._old:
                    known = self._remember(link, self._old.pop(link))
            if link is None or known is None:
                if materialised is None:
                    from_pos = start
                    materialised = tokens.token_ids(self.vocab_size, start)
                known = chain_hash(parent, materialised[start - from_pos : end - from_pos])
                if link is not None:
                    self._remember(link, known)
            if end - start < bs:
                tail = known
            else:
                parent = known
                hashes.append(known)
        return hashes, tail

    def _remember(self, link: tuple[int, int, int, int], known: int) -> int:
        if len(self._memo) >= MEMO_GENERATION:
            self._old, self._memo = self._memo, {}
        self._memo[link] = known
        return known

    def _raw_chain(
        self, tokens: np.ndarray, scope: CacheScope, tail_at: int | None
    ) -> tuple[list[int], int | None]:
        hashes = block_hashes(tokens, self.block_size, scope)
        if tail_at is None or tail_at % self.block_size == 0:
            return hashes, None
        full = tail_at // self.block_size
        parent = hashes[full - 1] if full else scope.root_hash()
        return hashes, chain_hash(parent, tokens[full * self.block_size : tail_at])

    def materialise(self, tokens: Tokens) -> np.ndarray:
        if isinstance(tokens, Prompt):
            return tokens.token_ids(self.vocab_size)
        return np.asarray(tokens, dtype=np.int64)


@dataclass(frozen=True)
class HeldRequest:
    """A request admitted by ``PrefixOracle.hold``: its sequence and its cached tokens."""

    sequence: Any
    cached: int


class PrefixOracle:
    """Expected cached tokens for requests replayed in send order.

    ``expect(tokens, scope)`` says what a request sent now should find cached;
    ``record(tokens, scope)`` says it finished: its prompt (and, when known, its output
    but the last token, which never enters the KV cache) joins the cache and is released
    tail-first. ``tokens`` may be token ids or a ``Prompt`` (faster: memoised hashing).
    """

    def __init__(
        self,
        block_size: int,
        num_blocks: int | None = None,
        model: str = "",
        *,
        vocab_size: int = DEFAULT_VOCAB_SIZE,
        cache_model: CacheModel | None = None,
        offload_blocks: int = 0,
    ) -> None:
        self.block_size = block_size
        self.num_blocks = num_blocks
        self.model = model
        self.cache_model = cache_model or CacheModel()
        self.hasher = PromptHasher(block_size, vocab_size)
        blocks = self.cache_model.kind == "blocks"
        tokens = num_blocks * block_size if num_blocks is not None else None
        unbounded_index = blocks and tokens is None
        self.pool = (
            None
            if unbounded_index
            else make_pool(self.cache_model, tokens, block_size, offload_blocks=offload_blocks)
        )
        #: Of the last ``record``'s cached tokens, those an offload tier held.
        self.last_offloaded = 0
        self._index: set[int] = set()
        self._unknown = -1  # ids standing for output tokens not known (never a real token)

    def _scope(self, scope: CacheScope | None) -> CacheScope:
        return scope if scope is not None else CacheScope(model=self.model)

    def _indexed_hit(self, hashes: Sequence[int], num_tokens: int) -> int:
        """Leading hashes in the unbounded index, capped like ``BlockPool.find_cached``."""
        limit = min(len(hashes), max(0, num_tokens - 1) // self.block_size)
        hit = 0
        while hit < limit and hashes[hit] in self._index:
            hit += 1
        return hit * self.block_size

    def expect(self, tokens: Tokens, scope: CacheScope | None = None) -> int:
        """Tokens a request with prompt ``tokens`` should find cached if sent now."""
        return self.preview(tokens, scope) or 0

    def preview(self, tokens: Tokens, scope: CacheScope | None = None) -> int | None:
        """``expect``, or ``None`` when the request would have to wait (every slot busy)."""
        scope = self._scope(scope)
        if self.pool is not None and not self.pool.uses_hashes:
            return self.pool.sequence(scope).peek(self.hasher.materialise(tokens), ())
        hashes = self.hasher.chain(tokens, scope)
        if self.pool is None:
            return self._indexed_hit(hashes, len(tokens))
        return self.pool.sequence(scope).peek(tokens, hashes)

    def record(
        self,
        tokens: Tokens,
        scope: CacheScope | None = None,
        *,
        prompt_len: int | None = None,
        extra_tokens: int = 0,
        hashes: Sequence[int] | None = None,
    ) -> int:
        """A request finished: its blocks enter the cache. Returns the prompt's cached tokens.

        ``tokens`` is the prompt, optionally followed by the output but its last token;
        ``prompt_len`` says where the prompt ends (default: all of ``tokens``).
        ``extra_tokens`` are output tokens whose ids are unknown: they occupy blocks
        (and so press on a finite pool) but can never be hit. ``hashes``: the full-block
        chain of ``tokens`` if the caller already has it.
        """
        scope = self._scope(scope)
        n = len(tokens) if prompt_len is None else prompt_len
        pool = self.pool
        if pool is not None and not pool.uses_hashes:
            hashes = ()
        elif hashes is None:
            hashes = self.hasher.chain(tokens, scope)
        if pool is None:
            hit = self._indexed_hit(hashes[: n // self.block_size], n)
            self._index.update(hashes)
            return hit
        materialised = self.hasher.materialise(tokens)
        seq = pool.sequence(scope)
        # The claim is capped at the prompt (n - 1 tokens); the whole chain is passed so
        # that committing the output's blocks needs no rehashing.
        hit = seq.claim_prefix(materialised[:n], hashes=hashes)
        self.last_offloaded = getattr(seq, "offloaded_tokens", 0)
        self._finish(seq, materialised, extra_tokens)
        return hit

    def hold(self, prompt: Tokens, scope: CacheScope | None = None) -> HeldRequest | None:
        """Admit a request now and keep it running (with slots: it takes one) until
        ``finish``; ``None`` when it would have to wait. For pools matched by tokens."""
        assert self.pool is not None and not self.pool.uses_hashes
        seq = self.pool.sequence(self._scope(scope))
        materialised = self.hasher.materialise(prompt)
        if seq.peek(materialised, ()) is None:
            return None
        return HeldRequest(seq, seq.claim_prefix(materialised))

    def finish(self, held: HeldRequest, tokens: Tokens, *, extra_tokens: int = 0) -> None:
        """A held request ended: ``tokens`` (prompt and output but its last token, plus
        ``extra_tokens`` whose ids are unknown) stay in the cache as its model keeps them."""
        self._finish(held.sequence, self.hasher.materialise(tokens), extra_tokens)

    def _finish(self, seq: Any, materialised: np.ndarray, extra_tokens: int) -> None:
        pool = self.pool
        assert pool is not None
        if extra_tokens and not pool.uses_hashes:
            # Unknown output ids still fill a slot or a tree leaf; ids below zero match
            # nothing, and each stand-in is used once.
            unknown = np.arange(self._unknown, self._unknown - extra_tokens, -1, dtype=np.int64)
            self._unknown -= extra_tokens
            materialised, extra_tokens = np.concatenate([materialised, unknown]), 0
        total = len(materialised) + extra_tokens
        if not seq.reserve(total):
            room = seq.capacity_tokens + pool.num_free_or_reclaimable * pool.block_size
            total = min(total, room)
            seq.reserve(total)
        seq.commit(materialised, min(len(materialised), total))
        seq.release()


def replay_sequence(plan: Plan, request: RequestSpec, full_prompt: Prompt) -> Prompt:
    """What a request leaves in the cache: its full prompt and its answer but the last token.

    The answer is unknown before the run, so a stand-in of ``max_tokens`` tokens shared
    with no other request takes its place (later turns of a session carry the same
    stand-in in their history, see ``multi_turn.assumed_prompts``).
    """
    answer = assumed_output(request, plan.seed)
    return full_prompt.extended(Segment(max(0, answer.length - 1), key=answer.key))


def plan_order_expectations(
    plan: Plan,
    block_size: int,
    num_blocks: int | None,
    vocab_size: int,
    model: str = "",
    *,
    count: int | None = None,
    cache_model: CacheModel | None = None,
    offload_blocks: int = 0,
    offloaded: list[int | None] | None = None,
) -> list[int | None]:
    """The expected cached tokens of the plan's first ``count`` requests (all by default).

    Requests are replayed in plan order (warm-up requests first, as they are sent), each
    leaving its prompt and a stand-in for its answer in the cache; request k's value
    depends on requests 0..k-1 only, so a prefix of the plan costs only its own length.
    Later turns of a multi-turn session are ``None``: their history is what the server
    returns (``session.bench_oracle.RunOracle`` replays such runs from what was recorded). With an
    offload tier of ``offload_blocks``, ``offloaded`` (when given) receives, request by
    request, the part of each value the tier held.
    """
    oracle = PrefixOracle(
        block_size,
        num_blocks,
        model,
        vocab_size=vocab_size,
        cache_model=cache_model,
        offload_blocks=offload_blocks,
    )
    out: list[int | None] = []
    for r in plan.requests[:count]:
        if r.composes_history:
            out.append(None)
        else:
            recorded = replay_sequence(plan, r, r.prompt)
            out.append(oracle.record(recorded, r.scope(model), prompt_len=len(r.prompt)))
        if offloaded is not None:
            offloaded.append(None if out[-1] is None else oracle.last_offloaded)
    return out


def with_expected(plan: Plan, expected: Mapping[str, int | None]) -> Plan:
    """A copy of ``plan`` whose requests carry ``expected[id]`` (``None`` where absent)."""
    values = [expected.get(i) for i in plan.requests.column("id")]
    return replace(plan, requests=plan.requests.with_column("expected_cached_tokens", values))


def annotate(
    plan: Plan,
    block_size: int,
    num_blocks: int | None,
    vocab_size: int,
    model: str = "",
    *,
    cache_model: CacheModel | None = None,
) -> Plan:
    """A copy of ``plan`` with every request's ``expected_cached_tokens`` (one oracle pass
    in plan order, ``plan_order_expectations``); the plan itself is frozen."""
    expected = plan_order_expectations(
        plan, block_size, num_blocks, vocab_size, model, cache_model=cache_model
    )
    return replace(plan, requests=plan.requests.with_column("expected_cached_tokens", expected))
