"""The radix-tree prefix cache: SGLang's ``RadixCache`` as a pool the engine and oracle share.

The rules follow SGLang's ``python/sglang/srt/mem_cache/radix_cache.py``:

* The tree holds token runs; a node's children are keyed by their first token (their
  first page when the page size ``P`` is above 1). A cache scope (model, LoRA adapter,
  ``cache_salt`` — SGLang's ``extra_key``) has a root of its own, so scopes never share.
* **Match**: walk from the root as far as the tokens agree, token by token (page by
  page: a match is rounded down to whole pages); a match ending inside a node splits it.
  A request matches its prompt but the last token (``max_prefix_len = input_len - 1``):
  the last position is always computed for its logits.
* **Lock**: a running request locks the path to its last matched node (``lock_ref``);
  locked nodes are never evicted.
* **Insert**: once a prompt is prefilled its tokens join the tree
  (``cache_unfinished_req``), and when the request ends its prompt and output but the
  last token (``cache_finished_req``); tokens already in the tree are duplicates whose
  memory is freed, the rest become a new leaf.
* **Evict**: when an allocation finds too few free slots, unlocked leaves go, least
  recently used first (a match or an insert touches every node on its path); a parent
  left childless and unlocked becomes a candidate in turn.

Memory is counted in pages of ``P`` tokens (``block_size``, as the scheduler calls the
unit): the tree's pages, each running request's private pages, and the free rest. The
logical clock is a counter, so replays are repeatable.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Sequence

import numpy as np

from workloads.prefix import CacheScope, PoolCounts
from workloads.slots import common_prefix

#: Pages of an unbounded tree (the oracle's pool when the server's size is not known).
UNBOUNDED_PAGES = 1 << 62


class _Node:
    __slots__ = ("children", "key", "last_access", "lock_ref", "order", "parent")

    def __init__(self, key: np.ndarray, parent: _Node | None, order: int, now: int) -> None:
        self.key = key
        self.parent = parent
        self.children: dict[bytes, _Node] = {}
        self.lock_ref = 0
        self.last_access = now
        self.order = order


class RadixCache:
    """The tree, its page accounting and SGLang's match/insert/lock/evict rules."""

    uses_hashes = False

    def __init__(
        self, num_pages: int | None, page_size: int = 1, *, enable_caching: bool = True
    ) -> None:
        if page_size <= 0:
            raise ValueError(f"page_size must be positive, got {page_size}")
        self.block_size = page_size
        self.num_blocks = num_pages if num_pages is not None else UNBOUNDED_PAGES
        self.enable_caching = enable_caching
        self._roots: dict[int, _Node] = {}
        self._order = itertools.count()
        self._clock = 0
        self._free = self.num_blocks
        self._evictable = 0  # pages in unlocked tree nodes
        self._leaves: set[_Node] = set()
        self.evictions = 0
        self.query_tokens = 0
        self.hit_tokens = 0

    # -- the pool surface the scheduler reads --------------------------------------------
    @property
    def capacity_tokens(self) -> int:
        return self.num_blocks * self.block_size

    @property
    def num_free_or_reclaimable(self) -> int:
        return self._free + self._evictable

    def counts(self) -> PoolCounts:
        return PoolCounts(
            active=self.num_blocks - self._free - self._evictable,
            reclaimable=self._evictable,
            free=self._free,
        )

    def sequence(self, scope: CacheScope) -> RadixSequence:
        return RadixSequence(self, scope)

    def reset(self) -> bool:
        """Drop the whole tree; refused while a request holds pages (as a flush is)."""
        if self._free + self._evictable != self.num_blocks:
            return False
        self._roots.clear()
        self._leaves.clear()
        self._free, self._evictable = self.num_blocks, 0
        return True

    # -- tree operations -----------------------------------------------------------------
    def root(self, scope: CacheScope) -> _Node:
        key = scope.root_hash()
        node = self._roots.get(key)
        if node is None:
            node = self._roots[key] = _Node(np.empty(0, np.int64), None, next(self._order), 0)
            node.lock_ref = 1  # a root is never evicted
        return node

    def tick(self) -> int:
        self._clock += 1
        return self._clock

    def _child_key(self, key: np.ndarray, at: int) -> bytes:
        return key[at : at + self.block_size].tobytes()

    def _match_len(self, a: np.ndarray, b: np.ndarray) -> int:
        n = common_prefix(a, b)
        return n - n % self.block_size

    def aligned(self, n: int) -> int:
        return n - n % self.block_size

    def peek(self, root: _Node, key: np.ndarray) -> tuple[int, int]:
        """(matched tokens, pages a lock on the match would take from the evictable ones),
        changing nothing."""
        node, matched, pinned = root, 0, 0
        while matched < len(key):
            child = node.children.get(self._child_key(key, matched))
            if child is None:
                break
            m = self._match_len(child.key, key[matched:])
            if child.lock_ref == 0:
                pinned += m
            matched += m
            if m < len(child.key):
                break
            node = child
        return matched, pinned // self.block_size

    def match(self, root: _Node, key: np.ndarray, now: int) -> tuple[int, _Node]:
        """The longest cached prefix of ``key``: its length and its last node (a node the
        match ends inside is split there); every node on the way is touched at ``now``."""
        node, matched = root, 0
        node.last_access = now
        while matched < len(key):
            child = node.children.get(self._child_key(key, matched))
            if child is None:
                break
            child.last_access = now
            m = self._match_len(child.key, key[matched:])
            matched += m
            if m < len(child.key):
                node = self._split(child, m) if m else node
                break
            node = child
        return matched, node

    def _split(self, child: _Node, at: int) -> _Node:
        parent = child.parent
        assert parent is not None
        head = _Node(child.key[:at], parent, next(self._order), child.last_access)
        head.lock_ref = child.lock_ref
        child.key = child.key[at:]
        child.parent = head
        head.children[self._child_key(child.key, 0)] = child
        parent.children[self._child_key(head.key, 0)] = head
        return head

    def insert(self, root: _Node, key: np.ndarray, now: int) -> int:
        """Put ``key`` (page-aligned) in the tree; returns how many tokens were there."""
        matched, node = self.match(root, key, now)
        if matched < len(key):
            leaf = _Node(key[matched:].copy(), node, next(self._order), now)
            node.children[self._child_key(leaf.key, 0)] = leaf
            self._evictable += len(leaf.key) // self.block_size
            self._free -= len(leaf.key) // self.block_size
            self._update_leaf(node)
            self._update_leaf(leaf)
        return matched

    def lock(self, node: _Node) -> None:
        while node.parent is not None:
            if node.lock_ref == 0:
                self._evictable -= len(node.key) // self.block_size
            node.lock_ref += 1
            self._update_leaf(node)
            node = node.parent

    def unlock(self, node: _Node) -> None:
        while node.parent is not None:
            node.lock_ref -= 1
            if node.lock_ref == 0:
                self._evictable += len(node.key) // self.block_size
            self._update_leaf(node)
            node = node.parent

    def _update_leaf(self, node: _Node) -> None:
        if node.parent is not None and node.lock_ref == 0 and not node.children:
            self._leaves.add(node)
        else:
            self._leaves.discard(node)

    # -- memory --------------------------------------------------------------------------
    def allocate(self, pages: int) -> bool:
        """Take ``pages`` free pages, evicting unlocked leaves LRU-first if short."""
        if pages > self._free:
            self._evict(pages - self._free)
        if pages > self._free:
            return False
        self._free -= pages
        return True

    def give_back(self, pages: int) -> None:
        self._free += pages

    def _evict(self, pages: int) -> None:
        heap = [(n.last_access, n.order, n) for n in self._leaves]
        heapq.heapify(heap)
        freed = 0
        while freed < pages and heap:
            _, _, node = heapq.heappop(heap)
            parent = node.parent
            assert parent is not None
            del parent.children[self._child_key(node.key, 0)]
            self._leaves.discard(node)
            size = len(node.key) // self.block_size
            self._evictable -= size
            self._free += size
            self.evictions += size
            freed += size
            self._update_leaf(parent)
            if parent in self._leaves:
                heapq.heappush(heap, (parent.last_access, parent.order, parent))


class RadixSequence:
    """One request's view of the tree: its locked prefix and its private pages.

    The same four moves as ``SequenceBlocks`` (``claim_prefix``, ``reserve``, ``commit``,
    ``release``); ``commit`` inserts only while the prompt is being prefilled (SGLang
    inserts the output when the request ends).
    """

    def __init__(self, cache: RadixCache, scope: CacheScope | None = None) -> None:
        self.cache = cache
        self.scope = scope or CacheScope()
        self._root = cache.root(self.scope)
        self._node = self._root
        self._held = 0  # tokens of the locked path
        self._private = 0  # pages of our own, not (yet) in the tree
        self._claim_len = 0
        self._tokens: Sequence[int] | np.ndarray = ()
        self._computed = 0
        self._peeked = (0, 0)

    @property
    def capacity_tokens(self) -> int:
        return self._held + self._private * self.cache.block_size

    def _key(self, tokens: Sequence[int] | np.ndarray) -> np.ndarray:
        arr = np.asarray(tokens, dtype=np.int64)
        return arr[: self.cache.aligned(max(0, len(arr) - 1))]

    def peek(self, tokens: Sequence[int] | np.ndarray, hashes: object = None) -> int | None:
        if not self.cache.enable_caching:
            self._peeked = (0, 0)
        else:
            self._peeked = self.cache.peek(self._root, self._key(tokens))
        return self._peeked[0]

    def fits(self, num_tokens: int) -> bool:
        cached, pinned = self._peeked
        page = self.cache.block_size
        need = -(-num_tokens // page) - cached // page
        return need <= self.cache.num_free_or_reclaimable - pinned

    def claim_prefix(
        self, tokens: Sequence[int] | np.ndarray, *, hashes: object = None, peeked: bool = False
    ) -> int:
        """``SequenceBlocks.claim_prefix``'s move (``peeked`` changes nothing here: the
        claim matches anew)."""
        cache = self.cache
        self._claim_len = len(tokens)
        cache.query_tokens += len(tokens)
        if not cache.enable_caching:
            return 0
        matched, node = cache.match(self._root, self._key(tokens), cache.tick())
        cache.lock(node)
        self._node, self._held = node, matched
        cache.hit_tokens += matched
        return matched

    def reserve(self, num_tokens: int) -> bool:
        page = self.cache.block_size
        need = -(-num_tokens // page) - self._held // page - self._private
        if need <= 0:
            return True
        if not self.cache.allocate(need):
            return False
        self._private += need
        return True

    def commit(self, tokens: Sequence[int] | np.ndarray, num_computed: int) -> None:
        self._tokens, self._computed = tokens, num_computed
        if num_computed <= self._claim_len:
            self._insert(num_computed)

    def _insert(self, num_computed: int) -> None:
        cache = self.cache
        aligned = cache.aligned(num_computed)
        if not cache.enable_caching or aligned <= self._held:
            return
        key = np.asarray(self._tokens[:aligned], dtype=np.int64)
        page = cache.block_size
        # Our pages for [held, aligned) leave us: the tree's copies of what it had are
        # kept (ours are duplicates, freed), the rest become the tree's new leaf.
        self._private -= (aligned - self._held) // page
        cache.give_back((aligned - self._held) // page)
        cache.insert(self._root, key, cache.tick())
        _, node = cache.match(self._root, key, cache._clock)
        cache.lock(node)
        cache.unlock(self._node)
        self._node, self._held = node, aligned

    def release(self) -> None:
        """Cache what was computed and return the rest (finish, abort or preemption)."""
        if self._computed > self._held:
            self._insert(self._computed)
        self.cache.unlock(self._node)
        self.cache.give_back(self._private)
        self._node, self._held, self._private = self._root, 0, 0
        self._computed, self._tokens = 0, ()
