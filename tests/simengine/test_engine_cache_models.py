"""The embedded engine with each cache model (``--cache-model``), against the oracle.

The oracle replays the same requests through the same pool code (``workloads.kv_pools``),
so for requests run one after another the engine's ``num_cached_tokens`` must equal the
oracle's expectation request by request — with a pool small enough to evict (blocks,
radix) and with fewer slots than system prompts (slots). Then what only the engine
shows: slots cap how many requests run at once, a request longer than a slot is
refused, the radix tree shares a prompt with a request that arrives while it decodes,
and /metrics names the cache model.
"""

from __future__ import annotations

import numpy as np
import pytest
from engine_util import drain, prompt, run_all
from server_support import fast_config, served

from perfmodel.config import EngineConfig
from simengine.core import EngineCore, EngineRequest, RequestRejected
from workloads.cache_model import CACHE_MODEL_INFO, parse_cache_model
from workloads.oracle import PrefixOracle
from workloads.prefix import CacheScope

SCOPE = CacheScope(model="llama-3.1-8b")


def _requests(count: int = 36) -> list[list[int]]:
    """Requests on six 200-token system prompts, each with its own 5..59-token question."""
    rng = np.random.default_rng(0)
    systems = [prompt(200, 100 + i) for i in range(6)]
    return [
        systems[int(rng.integers(0, 6))] + prompt(int(rng.integers(5, 60)), 1000 + i)
        for i in range(count)
    ]


@pytest.mark.parametrize(
    ("cache_model", "num_blocks"),
    [("blocks", 60), ("radix", 60), ("radix:16", 60), ("slots:2", 200), ("slots:3", 200),
     ("slots:4,cache_ram=off", 200), ("slots:2,cache_reuse=16", 200)],
)  # fmt: skip
def test_the_engine_caches_what_the_oracle_expects_request_by_request(
    cache_model: str, num_blocks: int
) -> None:
    config = EngineConfig(cache_model=cache_model, num_gpu_blocks=num_blocks, fixed_step_s=0.001)
    core = EngineCore(config)
    oracle = PrefixOracle(16, num_blocks, SCOPE.model, cache_model=parse_cache_model(cache_model))
    expected, seen = [], []
    for i, tokens in enumerate(_requests()):
        expected.append(oracle.expect(tokens, SCOPE))
        run = run_all(core, [EngineRequest(f"r{i}", tokens, 4, scope=SCOPE, ignore_eos=True)])
        seen.append(run.cached[f"r{i}"])
        output = run.tokens[f"r{i}"]
        oracle.record(tokens + output[:-1], SCOPE, prompt_len=len(tokens))
    assert seen == expected
    assert sum(seen) > 0  # a hit rate to agree on
    if not cache_model.startswith("slots"):
        assert core.pool.evictions > 0  # and a pool that was full


def test_a_radix_block_model_difference_is_token_granular() -> None:
    tokens = _requests(2)
    shared = tokens[0][:237] + prompt(30, 7)  # 237 tokens in common: not a block multiple
    hits = {}
    for name in ("blocks", "radix"):
        core = EngineCore(EngineConfig(cache_model=name, fixed_step_s=0.001))
        run_all(core, [EngineRequest("a", tokens[0], 2, scope=SCOPE, ignore_eos=True)])
        hits[name] = run_all(core, [EngineRequest("b", shared, 2, scope=SCOPE)]).cached["b"]
    assert hits == {"blocks": 224, "radix": 237}


def test_slots_cap_the_running_requests_and_refuse_what_a_slot_cannot_hold() -> None:
    core = EngineCore(EngineConfig(cache_model="slots:2", num_gpu_blocks=100, fixed_step_s=0.001))
    for i in range(4):
        core.add_request(EngineRequest(f"r{i}", prompt(50, i), 20, scope=SCOPE, ignore_eos=True))
    running = []
    for _ in range(200):
        if not core.has_unfinished():
            break
        running.append(core.step().num_running)
    assert max(running) == 2 and core.stats.finished_requests == 4
    with pytest.raises(RequestRejected, match="a slot holds 800"):
        core.add_request(EngineRequest("long", prompt(790, 9), 20, scope=SCOPE))


def test_radix_shares_a_prompt_with_a_request_sent_while_it_decodes() -> None:
    core = EngineCore(EngineConfig(cache_model="radix", fixed_step_s=0.001))
    tokens = prompt(300, 3)
    core.add_request(EngineRequest("first", tokens, 50, scope=SCOPE, ignore_eos=True))
    for _ in range(5):  # prefilled, decoding
        core.step()
    core.add_request(EngineRequest("second", [*tokens[:250], 1, 2, 3], 2, scope=SCOPE))
    assert drain(core).cached["second"] == 250


@pytest.mark.parametrize("cache_model", ["radix", "slots:4"])
def test_metrics_name_the_cache_model(cache_model: str) -> None:
    with served(fast_config(cache_model=cache_model)) as client:
        text = client.get("/metrics").text
    assert f'{CACHE_MODEL_INFO}{{cache_model="{cache_model}"' in text
    assert 'num_gpu_blocks="400"' in text  # the pool in blocks, whatever the model counts in


def test_an_offload_tier_serves_what_the_gpu_pool_evicted_and_the_oracle_splits_it() -> None:
    # Four 320-token prefixes (20 blocks each) in a 50-block pool: the GPU keeps two.
    base = {"num_gpu_blocks": 50, "fixed_step_s": 0.001}
    prefixes = [prompt(320, 50 + i) for i in range(4)]
    tokens = [prefixes[i % 4] + prompt(20, 600 + i) for i in range(16)]
    hits = {}
    for gb in (0.0, 1.0):
        core = EngineCore(EngineConfig(**base, offload_gb=gb))
        oracle = PrefixOracle(16, 50, SCOPE.model, offload_blocks=core.offload_blocks)
        seen, expected, offloaded = [], [], []
        for i, t in enumerate(tokens):
            run = run_all(core, [EngineRequest(f"r{i}", t, 2, scope=SCOPE, ignore_eos=True)])
            seen.append(run.cached[f"r{i}"])
            expected.append(oracle.record(t + run.tokens[f"r{i}"][:-1], SCOPE, prompt_len=len(t)))
            offloaded.append(oracle.last_offloaded)
        assert seen == expected
        offload = core.pool.offload
        hits[gb] = (sum(seen), sum(offloaded), offload.hit_tokens if offload else 0)
    assert hits[0.0] == (0, 0, 0)  # round-robin over four prefixes: LRU keeps none
    total, cpu, engine_cpu = hits[1.0]
    assert total == 12 * 320 and cpu == engine_cpu == total  # all from the CPU tier
