"""The prefix oracle: hand-computed expectations, pool pressure, and the engine's own hits."""

from __future__ import annotations

import numpy as np
import pytest
from engine_util import run_all

from perfmodel.config import EngineConfig
from simengine.core import EngineCore, EngineRequest
from workloads.build import build_plan
from workloads.oracle import PrefixOracle, PromptHasher, annotate
from workloads.plan import Plan, Prompt, Segment
from workloads.prefix import CacheScope, block_hashes
from workloads.spec import load_spec
from workloads.stats import plan_stats

VOCAB = 32000


def _shared(**overrides: object) -> Plan:
    base = {"groups": 3, "requests_per_group": 4, "prefix_len": 100, "suffix_len": 20}
    return build_plan(load_spec("shared-prefix", {**base, **overrides}))


def test_shared_prefix_plan_matches_hand_computed_hits() -> None:
    plan = annotate(_shared(), block_size=16, num_blocks=None, vocab_size=VOCAB)
    seen: set[int] = set()
    for r in plan:
        # First of its group: nothing cached. Later: the prefix's 6 full blocks (96 tokens);
        # the 7th block mixes prefix and suffix tokens, so it never matches.
        assert r.expected_cached_tokens == (96 if r.group in seen else 0)
        seen.add(r.group)
    stats = plan_stats(plan, block_size=16)
    assert stats["prefix"]["expected_cached_tokens"] == 96 * (12 - 3)
    assert stats["prefix"]["expected_hit_rate"] == pytest.approx(96 * 9 / (120 * 12))


def test_block_size_changes_the_arithmetic() -> None:
    plan = annotate(_shared(), block_size=32, num_blocks=None, vocab_size=VOCAB)
    assert sorted({r.expected_cached_tokens for r in plan}) == [0, 96]
    plan = annotate(_shared(), block_size=64, num_blocks=None, vocab_size=VOCAB)
    assert sorted({r.expected_cached_tokens for r in plan}) == [0, 64]


def test_tenants_do_not_share_a_prefix() -> None:
    plan = _shared(groups=1, requests_per_group=30, tenants=3, tenant_per="request")
    plan = annotate(plan, block_size=16, num_blocks=None, vocab_size=VOCAB)
    first_of_tenant = {}
    for r in plan:
        expected = 0 if r.tenant not in first_of_tenant else 96
        first_of_tenant.setdefault(r.tenant, r.id)
        assert r.expected_cached_tokens == expected


def test_whole_prompt_match_recomputes_the_last_token() -> None:
    oracle = PrefixOracle(16)
    prompt = Prompt((Segment(64, key=3),))
    oracle.record(prompt)
    assert oracle.expect(prompt) == 48
    assert oracle.expect(prompt.extended(Segment(1, key=4))) == 64


def test_finite_pool_expects_less_than_an_unbounded_one() -> None:
    # 8 prefixes of 512 tokens = 256 blocks of working set; the pool holds 100.
    plan = _shared(groups=8, requests_per_group=10, prefix_len=512, suffix_len=32, output_len=16)
    unbounded = plan_stats(plan, block_size=16)["prefix"]
    finite = plan_stats(plan, block_size=16, num_blocks=100)["prefix"]
    roomy = plan_stats(plan, block_size=16, num_blocks=5000)["prefix"]
    assert finite["expected_hit_rate"] < 0.5 * unbounded["expected_hit_rate"]
    assert roomy["expected_cached_tokens"] == unbounded["expected_cached_tokens"]
    # The workload's own reuse does not depend on the pool.
    assert finite["block_hit_rate"] == unbounded["block_hit_rate"]


@pytest.mark.parametrize(("extra", "expected"), [(0, 160), (160, 160), (340, 0)])
def test_unknown_output_tokens_press_on_a_finite_pool(extra: int, expected: int) -> None:
    prefix = Prompt((Segment(160, key=1),))
    oracle = PrefixOracle(16, num_blocks=40)
    oracle.record(prefix.extended(Segment(8, key=2)), extra_tokens=extra)
    oracle.record(Prompt((Segment(300, key=9),)), extra_tokens=extra)
    # 160 extra tokens per request still fit beside the prefix: output blocks are released
    # first, so they are evicted first. 340 make the second request take the whole pool.
    assert oracle.expect(prefix.extended(Segment(8, key=3))) == expected


def test_memoised_prompt_hashes_equal_plain_block_hashes() -> None:
    rng = np.random.default_rng(0)
    hasher = PromptHasher(16, VOCAB)
    scope = CacheScope(model="m", cache_salt="s")
    keys = [11, 12, 13]
    for _ in range(60):
        segments = []
        for _ in range(rng.integers(1, 6)):
            n = int(rng.integers(0, 70))
            if rng.random() < 0.3:
                segments.append(Segment(n, tokens=tuple(int(t) for t in rng.integers(300, 900, n))))
            else:
                segments.append(Segment(n, key=keys[int(rng.integers(len(keys)))]))
        prompt = Prompt(tuple(segments))
        tokens = prompt.token_ids(VOCAB)
        assert hasher.chain(prompt, scope) == block_hashes(tokens, 16, scope)
        cut = int(rng.integers(0, len(prompt) + 1))
        assert hasher.chain_and_tail(prompt, scope, cut) == hasher.chain_and_tail(
            tokens, scope, cut
        )


def test_prompts_and_token_ids_are_interchangeable() -> None:
    a, b = PrefixOracle(16, 50), PrefixOracle(16, 50)
    prompt = Prompt((Segment(200, key=5), Segment(30, key=6)))
    a.record(prompt)
    b.record(prompt.token_ids(VOCAB))
    probe = Prompt((Segment(200, key=5), Segment(50, key=7)))
    assert a.expect(probe) == b.expect(probe.token_ids(VOCAB)) == 192


def _engine_hits(plan: Plan, num_blocks: int, block_size: int = 16) -> list[int]:
    """Send the plan one request at a time to the embedded engine core; its cached tokens."""
    config = EngineConfig(block_size=block_size, num_gpu_blocks=num_blocks, vocab_size=VOCAB)
    core = EngineCore(config)
    hits = []
    for r in plan:
        request = EngineRequest(
            request_id=r.id,
            prompt_token_ids=r.prompt.token_ids(VOCAB).tolist(),
            max_tokens=r.max_tokens,
            scope=r.scope(config.model_name),
            ignore_eos=True,
        )
        hits.append(run_all(core, [request]).cached[r.id])
    return hits


def test_oracle_equals_the_engine_request_by_request_with_a_large_pool() -> None:
    plan = _shared(
        groups=4,
        requests_per_group=6,
        prefix_len="uniform:60-300",
        suffix_len="uniform:1-40",
        output_len=8,
        zipf=1.0,
        tenants=2,
        warmup=True,
    )
    plan = annotate(plan, block_size=16, num_blocks=None, vocab_size=VOCAB, model="llama-3.1-8b")
    expected = [r.expected_cached_tokens for r in plan]
    assert _engine_hits(plan, num_blocks=4000) == expected
    assert sum(expected) > 0


@pytest.mark.parametrize("num_blocks", [40, 60, 100])
def test_oracle_follows_the_engine_into_eviction_with_a_small_pool(num_blocks: int) -> None:
    # Six 256-token prefixes (96 blocks of working set) against pools smaller than that.
    shape = {
        "groups": 6,
        "requests_per_group": 5,
        "prefix_len": 256,
        "suffix_len": 16,
        "output_len": 16,
    }
    plan = annotate(
        _shared(**shape),
        block_size=16,
        num_blocks=num_blocks,
        vocab_size=VOCAB,
        model="llama-3.1-8b",
    )
    expected = [r.expected_cached_tokens for r in plan]
    assert _engine_hits(plan, num_blocks=num_blocks) == expected
    roomy = annotate(_shared(**shape), block_size=16, num_blocks=None, vocab_size=VOCAB)
    assert sum(expected) < sum(r.expected_cached_tokens for r in roomy)
