"""Keyed token runs and named seeds: the properties the plans and the oracle rely on."""

from __future__ import annotations

import numpy as np

from workloads.plan import Prompt, Segment
from workloads.prefix import CacheScope, block_hashes, chain_hash
from workloads.seeding import derive_key, rng
from workloads.tokens import keyed_tokens, lowest_token


def test_runs_are_prefix_consistent() -> None:
    short = Segment(100, key=5).token_ids(32000)
    full = Segment(512, key=5).token_ids(32000)
    assert np.array_equal(short, full[:100])
    assert not np.array_equal(full, Segment(512, key=6).token_ids(32000))


def test_tokens_stay_inside_the_vocabulary_above_the_special_ids() -> None:
    for vocab in (300, 8192, 128256):
        tokens = Segment(20000, key=11).token_ids(vocab)
        assert tokens.min() >= lowest_token(vocab)
        assert tokens.max() < vocab
        # Spread over the whole range rather than clustered.
        assert len(np.unique(tokens)) > min(vocab - lowest_token(vocab), 20000) * 0.5


def test_prompt_materialises_mixed_segments_in_order() -> None:
    a, b = Segment(7, key=1), Segment(3, tokens=(9, 8, 7))
    prompt = Prompt((a, b, a))
    tokens = prompt.token_ids(1000)
    assert len(tokens) == len(prompt) == 17
    assert np.array_equal(tokens[:7], a.token_ids(1000))
    assert list(tokens[7:10]) == [9, 8, 7]
    assert np.array_equal(tokens[10:], tokens[:7])


def test_offsets_continue_a_run() -> None:
    whole = keyed_tokens(np.array([3]), np.array([0]), np.array([64]), 5000)
    tail = keyed_tokens(np.array([3]), np.array([40]), np.array([24]), 5000)
    assert np.array_equal(whole[40:], tail)


def test_chain_hash_extends_block_hashes_one_block_at_a_time() -> None:
    tokens = Segment(64, key=2).token_ids(32000)
    scope = CacheScope(model="m", cache_salt="t")
    chain = block_hashes(tokens, 16, scope)
    parent = scope.root_hash()
    for i, expected in enumerate(chain):
        parent = chain_hash(parent, tokens[i * 16 : (i + 1) * 16])
        assert parent == expected


def test_named_streams_are_stable_and_independent() -> None:
    assert derive_key(1, "prefix", 3) == derive_key(1, "prefix", 3)
    assert derive_key(1, "prefix", 3) != derive_key(2, "prefix", 3)
    assert derive_key(1, "prefix", 3) != derive_key(1, "prefix", 4)
    draws = [rng(7, name).integers(0, 1 << 30, 4).tolist() for name in ("a", "a", "b")]
    assert draws[0] == draws[1] != draws[2]
