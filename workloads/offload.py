"""A second KV tier behind the GPU block pool: a CPU offload cache of block hashes.

Modelled on vLLM's CPU offloading and LMCache as far as hits go: a full block evicted
from the GPU pool is kept in host memory (its hash, least recently used first out when
the tier is full); a request whose prefix chain continues there past its GPU hit has
those blocks loaded back into fresh GPU blocks before it computes, and counts them as
cached. What a load costs (bytes over a PCIe-like link) is the engine's to time; the
tier only counts.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence


class OffloadTier:
    """An LRU set of ``num_blocks`` block hashes, with store/load/eviction counters."""

    def __init__(self, num_blocks: int) -> None:
        if num_blocks <= 0:
            raise ValueError(f"an offload tier needs blocks, got {num_blocks}")
        self.num_blocks = num_blocks
        self._lru: OrderedDict[int, None] = OrderedDict()
        self.stored_blocks = 0
        self.loaded_blocks = 0
        self.evictions = 0
        self.hit_tokens = 0

    def __len__(self) -> int:
        return len(self._lru)

    def store(self, block_hash: int) -> None:
        """A block left the GPU pool: keep it (the newest), dropping the oldest if full."""
        if block_hash in self._lru:
            self._lru.move_to_end(block_hash)
            return
        self._lru[block_hash] = None
        self.stored_blocks += 1
        if len(self._lru) > self.num_blocks:
            self._lru.popitem(last=False)
            self.evictions += 1

    def run(self, hashes: Sequence[int], start: int, limit: int) -> int:
        """How many of ``hashes[start:limit]``, in a row from ``start``, the tier holds."""
        n = 0
        while start + n < limit and hashes[start + n] in self._lru:
            n += 1
        return n

    def load(self, hashes: Sequence[int], block_size: int) -> None:
        """``hashes`` are loaded back to the GPU (and stay here, the most recently used)."""
        for h in hashes:
            self._lru.move_to_end(h)
        self.loaded_blocks += len(hashes)
        self.hit_tokens += len(hashes) * block_size

    def reset(self) -> None:
        self._lru.clear()
