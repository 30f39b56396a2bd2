"""The pool of a cache model: what the engine schedules with and the oracle replays through.

Every pool has the surface the scheduler reads — ``block_size`` (tokens per unit),
``num_blocks``, ``num_free_or_reclaimable``, ``capacity_tokens`` (the most one sequence
can hold), ``counts()``, ``reset()``, the ``query_tokens``/``hit_tokens``/``evictions``
counters, ``uses_hashes`` and ``sequence(scope)`` — and every sequence the same moves:
``peek`` (cached tokens if admitted now; ``None``: it must wait), ``fits``,
``claim_prefix``, ``reserve``, ``commit``, ``release`` and ``capacity_tokens``.
"""

from __future__ import annotations

from typing import TypeAlias

from workloads.cache_model import CacheModel
from workloads.offload import OffloadTier
from workloads.prefix import BlockPool
from workloads.radix import RadixCache
from workloads.slots import SlotCache

KvPool: TypeAlias = BlockPool | RadixCache | SlotCache


def make_pool(
    model: CacheModel,
    capacity_tokens: int | None,
    block_size: int,
    *,
    enable_caching: bool = True,
    offload_blocks: int = 0,
) -> KvPool:
    """The pool of ``model`` over ``capacity_tokens`` of KV (``None``: unbounded, the
    oracle's when the server's size is unknown; a block pool is then an index), with an
    offload tier of ``offload_blocks`` behind a block pool."""
    if model.kind == "radix":
        pages = None if capacity_tokens is None else capacity_tokens // model.page_size
        return RadixCache(pages, model.page_size, enable_caching=enable_caching)
    if model.kind == "slots":
        context = None if capacity_tokens is None else capacity_tokens // model.slots
        return SlotCache(model, context, enable_caching=enable_caching)
    if capacity_tokens is None:
        raise ValueError("an unbounded block pool is the oracle's index, not a pool")
    offload = OffloadTier(offload_blocks) if offload_blocks > 0 else None
    return BlockPool(
        capacity_tokens // block_size, block_size, enable_caching=enable_caching, offload=offload
    )
