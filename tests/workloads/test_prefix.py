"""The prefix model: the lesson's worked cases and vLLM's design-doc walk-through."""

from __future__ import annotations

import random

import pytest

from workloads.prefix import BlockPool, CacheScope, SequenceBlocks, block_hashes


def _tokens(n: int, seed: int = 0) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(1, 32000) for _ in range(n)]


def _serve(pool: BlockPool, tokens: list[int], scope: CacheScope | None = None) -> int:
    """Prefill a whole prompt through the pool and finish it; returns the cached tokens."""
    seq = SequenceBlocks(pool, scope)
    hit = seq.claim_prefix(tokens)
    assert seq.reserve(len(tokens))
    seq.commit(tokens, len(tokens))
    seq.release()
    return hit


def test_lesson_2500_prefix_then_3000_query_hits_2496() -> None:
    pool = BlockPool(num_blocks=1000, block_size=16)
    prefix = _tokens(2500)
    _serve(pool, prefix)
    query = prefix + _tokens(500, seed=1)
    assert _serve(pool, query) == 2496
    assert len(query) - 2496 == 504


def test_change_at_token_5_changes_every_later_hash() -> None:
    pool = BlockPool(num_blocks=1000, block_size=16)
    prefix = _tokens(2500)
    _serve(pool, prefix)
    altered = list(prefix) + _tokens(500, seed=1)
    altered[5] += 1
    assert _serve(pool, altered) == 0


def test_other_scope_never_hits() -> None:
    pool = BlockPool(num_blocks=1000, block_size=16)
    prefix = _tokens(2500)
    _serve(pool, prefix, CacheScope(model="m"))
    query = prefix + _tokens(500, seed=1)
    assert _serve(pool, query, CacheScope(model="m", cache_salt="tenant-b")) == 0
    assert _serve(pool, query, CacheScope(model="m", lora="adapter-1")) == 0
    assert _serve(pool, query, CacheScope(model="other")) == 0
    assert _serve(pool, query, CacheScope(model="m")) == 2496


def test_full_match_is_capped_at_num_tokens_minus_one() -> None:
    pool = BlockPool(num_blocks=100, block_size=16)
    prompt = _tokens(64)
    _serve(pool, prompt)
    # 64 tokens = 4 full blocks; the last token must be recomputed, so only 3 blocks hit.
    assert _serve(pool, prompt) == 48
    assert _serve(pool, [*prompt, 7]) == 64


def test_incremental_hashes_equal_whole_hashes() -> None:
    tokens = _tokens(200)
    scope = CacheScope(model="m", cache_salt="s")
    whole = block_hashes(tokens, 16, scope)
    part = block_hashes(tokens[:70], 16, scope)
    assert block_hashes(tokens, 16, scope, known=part) == whole
    assert len(whole) == 12


def _ids(text: str) -> list[int]:
    """Map letters of vLLM's example to token ids (A=1, B=2, ...)."""
    return [ord(c) - 64 for c in text]


def test_vllm_design_doc_example_block_by_block() -> None:
    """vLLM's prefix-caching design doc: block size 4, ten blocks, times 1 to 7."""
    pool = BlockPool(num_blocks=10, block_size=4)
    r0_prompt = _ids("ABCDEFGHIJKLMNO")  # 15 tokens
    r0 = SequenceBlocks(pool)
    assert r0.claim_prefix(r0_prompt) == 0
    assert r0.reserve(15)
    r0.commit(r0_prompt, 15)
    # Time 1: four blocks, three full and cached, the fourth holds 3 of 4 tokens.
    assert r0.blocks == [0, 1, 2, 3]
    assert [pool.block_hash(b) is not None for b in range(4)] == [True, True, True, False]
    # Time 3: two decoded tokens fill block 3 and ask for block 4.
    r0_tokens = [*r0_prompt, 16, 17]
    assert r0.reserve(17)
    r0.commit(r0_tokens, 17)
    assert r0.blocks == [0, 1, 2, 3, 4]
    assert pool.block_hash(3) is not None and pool.block_hash(4) is None
    # Time 4: request 1, 14 tokens, first 10 equal to request 0: only 2 blocks hit.
    r1_prompt = [*r0_prompt[:10], 30, 31, 32, 33]
    r1 = SequenceBlocks(pool)
    assert r1.claim_prefix(r1_prompt) == 8
    assert r1.reserve(14)
    r1.commit(r1_prompt, 14)
    assert r1.blocks == [0, 1, 5, 6]
    assert pool.ref_count(0) == 2 and pool.ref_count(1) == 2
    # Time 5: request 0 finishes: blocks 4, 3, 2 join the queue tail in reverse order.
    r0.release()
    assert pool.free_queue() == [7, 8, 9, 4, 3, 2]
    # Time 6: request 1 finishes.
    r1.release()
    assert pool.free_queue() == [7, 8, 9, 4, 3, 2, 6, 5, 1, 0]
    # Time 7: request 2, 29 tokens, first 12 equal to request 0: blocks 0, 1, 2 hit and are
    # pulled out of the queue; the 5 new blocks come from its head, evicting block 3.
    r2_prompt = [*r0_prompt[:12], *range(40, 57)]
    r2 = SequenceBlocks(pool)
    assert r2.claim_prefix(r2_prompt) == 12
    assert pool.free_queue() == [7, 8, 9, 4, 3, 6, 5]
    evictions_before = pool.evictions
    assert r2.reserve(29)
    assert r2.blocks == [0, 1, 2, 7, 8, 9, 4, 3]
    assert pool.evictions == evictions_before + 1
    assert pool.free_queue() == [6, 5]


def test_active_block_is_never_evicted_and_buckets_sum_to_pool() -> None:
    rng = random.Random(7)
    pool = BlockPool(num_blocks=64, block_size=16)
    prefixes = [_tokens(rng.randrange(16, 400), seed=s) for s in range(6)]
    live: list[tuple[SequenceBlocks, list[int]]] = []
    for _ in range(400):
        if live and rng.random() < 0.45:
            seq, _ = live.pop(rng.randrange(len(live)))
            seq.release()
        else:
            suffix = _tokens(rng.randrange(1, 80), seed=rng.randrange(10**9))
            tokens = prefixes[rng.randrange(len(prefixes))] + suffix
            seq = SequenceBlocks(pool)
            seq.claim_prefix(tokens)
            if seq.reserve(len(tokens)):
                seq.commit(tokens, len(tokens))
                live.append((seq, tokens))
            else:
                seq.release()
        counts = pool.counts()
        assert counts.total == pool.num_blocks
        pinned = {b for seq, _ in live for b in seq.blocks}
        assert all(pool.ref_count(b) > 0 for b in pinned)
        assert not pinned & set(pool.free_queue())
        assert counts.active == len(pinned)


def test_reset_turns_reclaimable_into_free_and_refuses_while_active() -> None:
    pool = BlockPool(num_blocks=50, block_size=16)
    prompt = _tokens(160)
    _serve(pool, prompt)
    assert pool.counts().reclaimable == 10
    busy = SequenceBlocks(pool)
    busy.claim_prefix(prompt)
    assert not pool.reset()
    busy.release()
    assert pool.reset()
    assert pool.counts() == type(pool.counts())(active=0, reclaimable=0, free=50)
    assert _serve(pool, prompt) == 0


def test_caching_disabled_never_hits() -> None:
    pool = BlockPool(num_blocks=100, block_size=16, enable_caching=False)
    prompt = _tokens(300)
    _serve(pool, prompt)
    assert _serve(pool, prompt) == 0
    assert pool.counts().reclaimable == 0


@pytest.mark.parametrize("bad", [0, -1])
def test_bad_sizes_are_rejected(bad: int) -> None:
    with pytest.raises(ValueError, match="block_size"):
        BlockPool(num_blocks=10, block_size=bad)
    with pytest.raises(ValueError, match="num_blocks"):
        BlockPool(num_blocks=bad, block_size=16)


def test_a_hit_stops_at_the_first_miss_even_with_later_blocks_cached() -> None:
    """``find_cached`` looks every block up at once, then cuts at the first miss: a block
    cached after a gap is no hit, and the hit a peek found is the one the claim pins."""
    pool = BlockPool(num_blocks=64, block_size=4)
    tokens = _tokens(40, seed=3)
    hashes = block_hashes(tokens, 4)
    for i, h in enumerate(hashes):
        if i != 3:  # block 3 never indexed: blocks 4.. are cached but unreachable
            pool.cache_block(i, h)
    assert pool.find_cached(hashes, len(tokens)) == [0, 1, 2]
    assert pool.find_cached(hashes[:3], len(tokens)) == [0, 1, 2]
    assert pool.find_cached(hashes, 9) == [0, 1]  # capped at num_tokens - 1
    peeked = SequenceBlocks(pool)
    claimed = SequenceBlocks(pool)
    assert peeked.peek(tokens, hashes) == 12
    assert peeked.fits(40) and not peeked.fits(4 * (64 - 3) + 13)
    assert pool.unpinned([0, 1, 2]) == 3
    assert peeked.claim_prefix(tokens, hashes=hashes, peeked=True) == 12
    assert pool.unpinned([0, 1, 2]) == 0  # pinned by the claim
    assert claimed.claim_prefix(tokens, hashes=hashes) == 12
    assert peeked.blocks == claimed.blocks == [0, 1, 2]
    assert [pool.ref_count(b) for b in range(4)] == [2, 2, 2, 0]
    claimed.release()
    peeked.release()
    assert pool.counts().active == 0 and pool.unpinned([0, 1, 2]) == 3
