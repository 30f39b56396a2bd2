"""The three cache models (``workloads.cache_model``): their spelling and their rules.

Each rule is checked on the pool itself, with prompts built so that exactly one reading
of the rule gives the asserted number: SGLang's radix tree (token-granular match, a
split inside a node, pages rounding a match down, LRU over unlocked leaves, a locked path
never evicted) and llama.cpp's slots (similarity above the threshold, else the least
recently used slot, the host prompt cache, ``--cache-reuse``, one token always left).
"""

from __future__ import annotations

import numpy as np
import pytest

from workloads.cache_model import CacheModel, parse_cache_model
from workloads.errors import InputError
from workloads.kv_pools import make_pool
from workloads.prefix import CacheScope
from workloads.radix import RadixCache
from workloads.slots import SlotCache, common_prefix


def _run(pool, tokens, output=()):  # one request, start to end, as the oracle drives it
    seq = pool.sequence(CacheScope())
    prompt = np.asarray(tokens, dtype=np.int64)
    hit = seq.claim_prefix(prompt)
    full = np.concatenate([prompt, np.asarray(output, dtype=np.int64)])
    assert seq.reserve(len(full))
    seq.commit(full, len(prompt))
    seq.commit(full, len(full))
    seq.release()
    return hit


@pytest.mark.parametrize(
    ("text", "model"),
    [
        ("blocks", CacheModel()),
        ("radix", CacheModel("radix")),
        ("RADIX:16", CacheModel("radix", page_size=16)),
        ("slots:4", CacheModel("slots", slots=4)),
        (
            "slots:2,similarity=0.5,cache_reuse=256,cache_ram=off",
            CacheModel("slots", slots=2, similarity=0.5, cache_reuse=256, cache_ram=False),
        ),
    ],
)
def test_cache_models_parse_and_print_back(text: str, model: CacheModel) -> None:
    assert parse_cache_model(text) == model
    assert parse_cache_model(str(model)) == model


@pytest.mark.parametrize(
    "text", ["", "lru", "blocks:16", "radix:0", "radix:x", "slots", "slots:0", "slots:2,x=1",
             "slots:2,similarity=1.5", "slots:2,cache_ram=maybe", "slots:2,cache_reuse=-1"],
)  # fmt: skip
def test_bad_cache_models_name_the_flag(text: str) -> None:
    with pytest.raises(InputError) as info:
        parse_cache_model(text, "--cache-model")
    assert info.value.field == "--cache-model"


def test_radix_matches_token_by_token_and_splits_a_node() -> None:
    tree = make_pool(parse_cache_model("radix"), 10_000, 16)
    assert _run(tree, range(100, 150)) == 0
    # 37 tokens agree, then one differs: a hit of 37 (a block pool would say 32).
    assert _run(tree, [*range(100, 137), 9, 9, 9]) == 37
    # The split left both branches cached: the first prompt hits all but its last token.
    assert _run(tree, range(100, 150)) == 49
    assert _run(tree, [*range(100, 137), 9, 9, 9, 5]) == 40


def test_radix_pages_round_a_match_down() -> None:
    tree = make_pool(parse_cache_model("radix:16"), 10_000, 16)
    _run(tree, range(100, 150))  # 49 computed tokens: 48 in the tree
    assert _run(tree, [*range(100, 137), 9, 9]) == 32


def test_radix_evicts_the_least_recently_used_unlocked_leaf() -> None:
    tree = RadixCache(125, 1)
    a, b, c = range(1000, 1040), range(2000, 2040), range(3000, 3040)
    for prompt in (a, b, c):
        _run(tree, prompt)  # 40 tokens each in the tree
    assert (tree.counts().reclaimable, tree.counts().free) == (120, 5)
    assert _run(tree, a) == 39  # touches a: b is now the least recently used
    assert _run(tree, range(4000, 4040)) == 0  # needs 40 pages, 5 free: evicts b whole
    assert tree.evictions == 40
    assert _run(tree, a) == 39 and _run(tree, c) == 39
    assert _run(tree, b) == 0


def test_a_locked_radix_path_is_never_evicted() -> None:
    tree = RadixCache(100, 1)
    _run(tree, range(500, 560))
    running = tree.sequence(CacheScope())
    assert running.claim_prefix(np.arange(500, 560)) == 59  # locks the 59 tokens
    other = tree.sequence(CacheScope())
    assert other.claim_prefix(np.arange(7000, 7060)) == 0
    assert not other.reserve(60)  # 41 free, the rest locked
    assert other.reserve(41)
    other.release()
    running.release()
    assert _run(tree, range(500, 560)) == 59


def test_radix_scopes_share_nothing() -> None:
    tree = RadixCache(None, 1)
    seq = tree.sequence(CacheScope(cache_salt="a"))
    seq.claim_prefix(np.arange(10, 60))
    seq.commit(np.arange(10, 60), 50)
    seq.release()
    other = tree.sequence(CacheScope(cache_salt="b"))
    assert other.claim_prefix(np.arange(10, 60)) == 0


def _slots(text: str) -> SlotCache:
    pool = make_pool(parse_cache_model(text), 40_000, 16)
    assert isinstance(pool, SlotCache)
    return pool


def _take(pool: SlotCache, tokens) -> tuple[int, int]:
    taken = pool.take(np.asarray(tokens, dtype=np.int64), 0)
    assert taken is not None
    slot, cached = taken
    return slot.id, cached


def test_a_slot_is_chosen_by_similarity_else_least_recently_used() -> None:
    pool = _slots("slots:3,cache_ram=off")
    # Every slot unused (last used -1): LRU picks the last one in id order.
    slot, cached = _take(pool, range(100, 200))
    assert (slot, cached) == (2, 0)
    pool.give_back(pool.slots[2], np.arange(100, 220))
    # 50 of 100 tokens shared (0.5 > 0.1): slot 2 again, its common prefix reused.
    assert _take(pool, [*range(100, 150), *range(900, 950)]) == (2, 50)
    pool.give_back(pool.slots[2], np.arange(100, 150))
    # 5 of 100 shared (0.05 < 0.1): the least recently used idle slot, 1, from scratch.
    assert _take(pool, [*range(100, 105), *range(5000, 5095)]) == (1, 0)
    # The whole prompt in a slot: one token is still computed.
    pool.give_back(pool.slots[1], np.arange(100, 105))
    assert _take(pool, range(100, 150))[1] == 49


def test_every_slot_busy_means_waiting() -> None:
    pool = _slots("slots:2")
    _take(pool, range(10))
    _take(pool, range(20, 30))
    assert pool.preview(np.arange(10), 0) is None
    assert pool.take(np.arange(10), 0) is None


def test_the_host_prompt_cache_gives_a_slot_an_earlier_sequence_back() -> None:
    system_a, system_b = list(range(1000, 1400)), list(range(2000, 2400))
    with_ram, without = _slots("slots:1"), _slots("slots:1,cache_ram=off")
    for pool in (with_ram, without):
        for prompt in (system_a, system_b):
            slot, _ = _take(pool, [*prompt, 7])
            pool.give_back(pool.slots[slot], np.asarray([*prompt, 7]))
        # The slot holds system_b; system_a was saved to host memory when b took the slot.
    assert _take(with_ram, [*system_a, 8])[1] == 400
    assert _take(without, [*system_a, 8])[1] == 0


def test_cache_reuse_shifts_a_long_enough_chunk_into_place() -> None:
    held = np.asarray([*range(10), *range(500, 520), *range(100, 400)])
    prompt = np.asarray([*range(10), *range(100, 400), 1])
    on, off = _slots("slots:1,cache_reuse=256"), _slots("slots:1,cache_reuse=301")
    assert on.reuse(0, held, 0, prompt) == 310  # 10 in place + a 300-token chunk
    assert off.reuse(0, held, 0, prompt) == 10  # the chunk is shorter than 301


def test_common_prefix() -> None:
    assert common_prefix([1, 2, 3], [1, 2, 4, 5]) == 2
    assert common_prefix([], [1]) == 0
    assert common_prefix(np.arange(5), np.arange(9)) == 5
