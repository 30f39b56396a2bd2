"""The prefix model: hash-chained KV blocks in a paged pool with LRU reuse.

One implementation serves two masters. The embedded engine (`simengine`) uses it as
its real KV block manager, and the client-side oracle (`workloads.oracle`) replays a
plan through it to say, before anything is sent, how many tokens a server with prefix
caching *should* find cached. Keeping them the same code is what makes the oracle's
expectation and the engine's behaviour comparable block by block.

The model follows the hash-based design used by vLLM:

* A full block's identity is ``hash(parent_hash, block_tokens)``, and the chain's root
  is a hash of the *scope* (model, LoRA adapter, ``cache_salt``, other identity keys), so
  a different scope or a change at any earlier token changes every later hash. Only full
  blocks have an identity; a partial tail block is never shared.
* The pool has three disjoint buckets: *active* (refcount > 0), *reclaimable*
  (refcount 0, still holds a hashed block that can be hit again) and *free* (refcount 0,
  no valid data). Reclaimable and free blocks sit together in one LRU queue; allocation
  pops its head, evicting the block's hash if it had one.
* A finished request returns its blocks tail-first, so the blocks that hash the most
  tokens (the least likely to be shared) are evicted first.
* A lookup never reports the whole prompt as cached: the last token is always
  recomputed to produce logits, so a hit is capped at ``num_tokens - 1`` tokens.
"""

from __future__ import annotations

import hashlib
from array import array
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from workloads.offload import OffloadTier

_HASH_BYTES = 8


@dataclass(frozen=True)
class CacheScope:
    """Everything besides the tokens that decides whether two KV blocks are the same.

    Two requests with equal tokens but different scope must never share blocks: another
    model or LoRA adapter computes other keys and values, and ``cache_salt`` exists so
    that tenants cannot probe each other's cache.
    """

    model: str = ""
    lora: str | None = None
    cache_salt: str | None = None
    extra: tuple[str, ...] = ()

    def root_hash(self) -> int:
        """The parent hash of a request's first block."""
        key = "\x1f".join(
            [self.model, self.lora or "", self.cache_salt or "", *self.extra]
        ).encode()
        return int.from_bytes(hashlib.blake2b(key, digest_size=_HASH_BYTES).digest(), "little")


def _token_bytes(tokens: Sequence[int] | np.ndarray) -> bytes:
    """The tokens as native int64 bytes (an int64 ``array`` already is: no copy via numpy)."""
    if isinstance(tokens, array) and tokens.typecode == "q":
        return tokens.tobytes()
    return np.asarray(tokens, dtype=np.int64).tobytes()


def _chain(parent: int, raw: bytes) -> int:
    h = hashlib.blake2b(parent.to_bytes(_HASH_BYTES, "little"), digest_size=_HASH_BYTES)
    h.update(raw)
    return int.from_bytes(h.digest(), "little")


def chain_hash(parent: int, tokens: Sequence[int] | np.ndarray) -> int:
    """The identity of one block of ``tokens`` whose predecessor's identity is ``parent``.

    ``block_hashes`` is this applied block by block from the scope's root; it is public
    so that callers holding a memo of earlier links (the oracle, which sees the same
    shared blocks thousands of times) can extend a chain one block at a time.
    """
    return _chain(parent, _token_bytes(tokens))


def block_hashes(
    tokens: Sequence[int] | np.ndarray,
    block_size: int,
    scope: CacheScope | None = None,
    *,
    known: Sequence[int] = (),
    num_tokens: int | None = None,
) -> list[int]:
    """Hash chain of every *full* block of ``tokens`` (of its first ``num_tokens`` if given).

    ``known`` holds hashes already computed for a prefix of the same token sequence
    (a running request whose output keeps growing); only the blocks after them are
    hashed, so extending a sequence costs time proportional to what is new.
    """
    if block_size <= 0:
        raise ValueError(f"block_size must be positive, got {block_size}")
    hashes = list(known)
    n_full = (len(tokens) if num_tokens is None else num_tokens) // block_size
    if n_full <= len(hashes):
        return hashes[:n_full]
    extend_hashes(hashes, tokens, block_size, scope, n_full)
    return hashes


def extend_hashes(
    hashes: list[int],
    tokens: Sequence[int] | np.ndarray,
    block_size: int,
    scope: CacheScope | None,
    n_full: int,
) -> None:
    """Append to ``hashes`` (the chain of a prefix of ``tokens``) the hashes of its blocks
    up to block ``n_full``, in place: ``block_hashes`` without copying what is known.

    Each link is ``_chain``'s, with the parent kept as its digest bytes (the same eight
    little-endian bytes ``_chain`` rebuilds from the integer), so one block costs one
    blake2b call over ``parent + tokens``.
    """
    start = len(hashes)
    if n_full <= start:
        return
    part = tokens[start * block_size : n_full * block_size]
    raw = part.tobytes() if type(part) is array and part.typecode == "q" else _token_bytes(part)
    parent = hashes[-1] if hashes else (scope or CacheScope()).root_hash()
    digest = parent.to_bytes(_HASH_BYTES, "little")
    if n_full == start + 1:  # one block (a decode's): no loop
        digest = hashlib.blake2b(digest + raw, digest_size=_HASH_BYTES).digest()
        hashes.append(int.from_bytes(digest, "little"))
        return
    step = block_size * 8
    blake2b, from_bytes, append = hashlib.blake2b, int.from_bytes, hashes.append
    for offset in range(0, len(raw), step):
        digest = blake2b(digest + raw[offset : offset + step], digest_size=_HASH_BYTES).digest()
        append(from_bytes(digest, "little"))


@dataclass(frozen=True)
class PoolCounts:
    """A snapshot of the three buckets; they always sum to the pool size."""

    active: int
    reclaimable: int
    free: int

    @property
    def total(self) -> int:
        return self.active + self.reclaimable + self.free


class BlockPool:
    """A fixed pool of KV blocks with refcounts, a hash index and an LRU free queue.

    Block ids are ``0 .. num_blocks - 1``; the free queue starts in id order, as a freshly
    allocated cache would. The pool only manages identities and counts: it never stores
    token data, which is why it is cheap enough to replay whole traces through.
    """

    def __init__(
        self,
        num_blocks: int,
        block_size: int,
        *,
        enable_caching: bool = True,
        offload: OffloadTier | None = None,
    ) -> None:
        if num_blocks <= 0:
            raise ValueError(f"num_blocks must be positive, got {num_blocks}")
        if block_size <= 0:
            raise ValueError(f"block_size must be positive, got {block_size}")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.enable_caching = enable_caching
        self._ref = [0] * num_blocks
        self._hash: list[int | None] = [None] * num_blocks
        self._cached: dict[int, int] = {}
        self._queue: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))
        self._reclaimable = 0
        self.evictions = 0
        self.query_tokens = 0
        self.hit_tokens = 0
        #: The second tier evicted blocks go to (``workloads.offload``); None: one tier.
        self.offload = offload

    #: Sequences of this pool look their prefix up by block hash.
    uses_hashes = True

    @property
    def capacity_tokens(self) -> int:
        """The most one sequence can hold: the whole pool."""
        return self.num_blocks * self.block_size

    def sequence(self, scope: CacheScope) -> SequenceBlocks:
        return SequenceBlocks(self, scope)

    # -- bucket accounting -------------------------------------------------------------
    def counts(self) -> PoolCounts:
        queued = len(self._queue)
        return PoolCounts(
            active=self.num_blocks - queued,
            reclaimable=self._reclaimable,
            free=queued - self._reclaimable,
        )

    @property
    def num_free_or_reclaimable(self) -> int:
        """Blocks an allocation can take right now (free first in LRU order, then evicting)."""
        return len(self._queue)

    def ref_count(self, block: int) -> int:
        return self._ref[block]

    def block_hash(self, block: int) -> int | None:
        return self._hash[block]

    def free_queue(self) -> list[int]:
        """The eviction order, head first (for inspection and tests)."""
        return list(self._queue)

    # -- lookups -----------------------------------------------------------------------
    def find_cached(self, hashes: Sequence[int], num_tokens: int) -> list[int]:
        """Blocks holding the longest cached prefix of ``hashes``, without pinning them.

        The hit is capped so that at least one token of the ``num_tokens`` prompt is left
        to compute: an engine needs the last position's logits even on a full match.
        """
        if not self.enable_caching or num_tokens <= 0:
            return []
        limit = min(len(hashes), (num_tokens - 1) // self.block_size)
        # Every lookup in C, then cut at the first miss: the same blocks as a loop that
        # stops there (a miss costs the lookups after it, a hit no Python loop).
        blocks: list[int | None] = list(map(self._cached.get, hashes[:limit]))
        if None in blocks:
            del blocks[blocks.index(None) :]
        return blocks  # type: ignore[return-value]

    def record_query(self, num_tokens: int, hit_blocks: int) -> None:
        """Count one prefix-cache query the way vLLM's counters do (tokens, not blocks)."""
        self.query_tokens += num_tokens
        self.hit_tokens += hit_blocks * self.block_size

    # -- pinning and allocation --------------------------------------------------------
    def touch(self, blocks: Sequence[int]) -> None:
        """Pin hit blocks for a request so they cannot be evicted while it runs."""
        ref, queue, hashes = self._ref, self._queue, self._hash
        for block in blocks:
            if ref[block] == 0:
                del queue[block]
                if hashes[block] is not None:
                    self._reclaimable -= 1
            ref[block] += 1

    def unpinned(self, blocks: Sequence[int]) -> int:
        """How many of ``blocks`` nobody pins (reclaimable: pinning takes them off the queue)."""
        ref = self._ref
        return [ref[b] for b in blocks].count(0)

    def allocate(self, n: int) -> list[int] | None:
        """Take ``n`` blocks from the head of the LRU queue, or ``None`` if there are fewer.

        Taking a reclaimable block evicts its hash: from then on no request can hit it.
        """
        if n > len(self._queue):
            return None
        out: list[int] = []
        popitem, hashes, ref, cached = self._queue.popitem, self._hash, self._ref, self._cached
        for _ in range(n):
            block, _ = popitem(last=False)
            h = hashes[block]
            if h is not None:
                hashes[block] = None
                self._reclaimable -= 1
                if cached.get(h) == block:
                    del cached[h]
                    if self.offload is not None:
                        self.offload.store(h)
                self.evictions += 1
            ref[block] = 1
            out.append(block)
        return out

    def cache_block(self, block: int, block_hash: int) -> None:
        """Give a block that just became full its identity so later requests can hit it.

        If an identical block is already indexed the first one stays the canonical copy
        (block tables are append-only, so the duplicate simply dies when released).
        """
        if not self.enable_caching or self._hash[block] is not None:
            return
        if block_hash in self._cached:
            return
        self._hash[block] = block_hash
        self._cached[block_hash] = block

    def release(self, blocks: Sequence[int]) -> None:
        """Unpin a request's blocks, tail first, so its last blocks are evicted first."""
        ref, queue, hashes = self._ref, self._queue, self._hash
        reclaimed = 0
        for block in reversed(blocks):
            left = ref[block] = ref[block] - 1
            if left == 0:
                queue[block] = None
                if hashes[block] is not None:
                    reclaimed += 1
            elif left < 0:
                self._reclaimable += reclaimed
                raise RuntimeError(f"block {block} released more often than it was taken")
        self._reclaimable += reclaimed

    def reset(self) -> bool:
        """Forget every cached identity (reclaimable → free); refused while any block is active.

        Matches the semantics of vLLM's ``/reset_prefix_cache``, which fails while
        requests are running rather than pull blocks out from under them.
        """
        if len(self._queue) != self.num_blocks:
            return False
        for block in self._cached.values():
            self._hash[block] = None
        self._cached.clear()
        if self.offload is not None:
            self.offload.reset()
        self._reclaimable = 0
        return True


class SequenceBlocks:
    """The block table of one sequence (a request's prompt plus its output so far).

    Engine and oracle drive a sequence through the same four moves: ``claim_prefix``
    (look up and pin the cached prefix), ``reserve`` (allocate blocks for tokens about to
    be computed), ``commit`` (index the blocks that computing filled) and ``release``.
    """

    def __init__(self, pool: BlockPool, scope: CacheScope | None = None) -> None:
        self.pool = pool
        self.scope = scope or CacheScope()
        self.blocks: list[int] = []
        self.hashes: list[int] = []
        self._committed_blocks = 0
        self._peeked: list[int] = []
        self.offloaded_tokens = 0

    @property
    def capacity_tokens(self) -> int:
        return len(self.blocks) * self.pool.block_size

    def claim_prefix(
        self,
        tokens: Sequence[int] | np.ndarray,
        *,
        hashes: Sequence[int] | None = None,
        peeked: bool = False,
    ) -> int:
        """Pin the longest cached prefix of ``tokens``; returns the cached token count.

        ``hashes``, when given, are the full-block hashes of ``tokens`` already computed
        by the caller (the oracle memoises them), and are used instead of rehashing.
        ``peeked``: the caller's ``peek`` of the same tokens and hashes came just before,
        with no block indexed or evicted since, so its hit is taken as found.
        """
        if self.blocks:
            raise RuntimeError("claim_prefix must come before any allocation")
        if hashes is None:
            hashes = block_hashes(tokens, self.pool.block_size, self.scope)
        self.hashes = list(hashes)
        pool = self.pool
        if not peeked:
            self._peeked = pool.find_cached(self.hashes, len(tokens))
        hit = self._peeked
        pool.touch(hit)
        self.blocks = list(hit)
        loaded = self._offloaded(self.hashes, len(tokens))
        if loaded and pool.offload is not None:
            wanted = self.hashes[len(hit) : len(hit) + loaded]
            pool.offload.load(wanted, pool.block_size)  # newest there: not evicted below
            new = pool.allocate(loaded) or []
            for block, block_hash in zip(new, wanted, strict=False):
                pool.cache_block(block, block_hash)
            self.blocks.extend(new)
        #: Of the cached tokens, those loaded back from the offload tier.
        self.offloaded_tokens = (len(self.blocks) - len(hit)) * pool.block_size
        if pool.enable_caching:
            pool.record_query(len(tokens), len(self.blocks))
        self._committed_blocks = len(self.blocks)
        return len(self.blocks) * pool.block_size

    def peek(self, tokens: Sequence[int] | np.ndarray, hashes: Sequence[int]) -> int:
        """Cached tokens if admitted now (``hashes``: the prompt's chain), changing nothing;
        ``fits`` then says whether the pool has room for it."""
        self._peeked = self.pool.find_cached(hashes, len(tokens))
        return (len(self._peeked) + self._offloaded(hashes, len(tokens))) * self.pool.block_size

    def _offloaded(self, hashes: Sequence[int], num_tokens: int) -> int:
        """Blocks the offload tier holds right after the GPU hit (capped like the hit)."""
        pool = self.pool
        if pool.offload is None or not pool.enable_caching:
            return 0
        limit = min(len(hashes), (num_tokens - 1) // pool.block_size)
        return pool.offload.run(hashes, len(self._peeked), limit)

    def fits(self, num_tokens: int) -> bool:
        """Whether claiming the peeked prefix and reserving ``num_tokens`` in all can succeed
        (a hit block nobody pins leaves the reclaimable ones when pinned)."""
        hit, pool = self._peeked, self.pool
        need = -(-num_tokens // pool.block_size) - len(hit)
        return need <= pool.num_free_or_reclaimable - pool.unpinned(hit)

    def blocks_needed(self, num_tokens: int) -> int:
        """How many more blocks holding ``num_tokens`` tokens in all would take."""
        return max(0, -(-num_tokens // self.pool.block_size) - len(self.blocks))

    def reserve(self, num_tokens: int) -> bool:
        """Make room for ``num_tokens`` tokens in all; False, taking nothing, if short."""
        need = -(-num_tokens // self.pool.block_size) - len(self.blocks)  # blocks_needed
        if need <= 0:
            return True
        new = self.pool.allocate(need)
        if new is None:
            return False
        self.blocks.extend(new)
        return True

    def commit(self, tokens: Sequence[int] | np.ndarray, num_computed: int) -> None:
        """Index every block that the first ``num_computed`` tokens have filled."""
        pool, blocks, hashes, done = self.pool, self.blocks, self.hashes, self._committed_blocks
        full = min(num_computed // pool.block_size, len(blocks))
        if full <= done:
            return
        extend_hashes(hashes, tokens, pool.block_size, self.scope, full)
        cache_block = pool.cache_block
        for i in range(done, full):
            cache_block(blocks[i], hashes[i])
        self._committed_blocks = full

    def release(self) -> None:
        """Return every block to the pool (finish, abort or preemption)."""
        self.pool.release(self.blocks)
        self.blocks = []
        self._committed_blocks = 0
