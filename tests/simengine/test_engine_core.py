"""EngineCore: deterministic outputs, prefix hits against the prefix model, abort, reset."""

from __future__ import annotations

import statistics

import pytest
from engine_util import drain, prompt, run_all

from perfmodel.config import EngineConfig
from simengine.core import EngineCore, EngineRequest, RequestRejected
from simengine.sampler import EOS_ID, FIRST_WORD_ID
from workloads.prefix import BlockPool, CacheScope, SequenceBlocks


def _mixed_requests(temperature: float = 0.0, ignore_eos: bool = False) -> list[EngineRequest]:
    lengths = [5, 300, 700, 1500, 2600, 40, 900, 3000]
    return [
        EngineRequest(f"r{i}", prompt(n, i), 200, ignore_eos=ignore_eos, temperature=temperature)
        for i, n in enumerate(lengths)
    ]


def test_greedy_outputs_do_not_depend_on_budget_chunking_or_batching() -> None:
    small = run_all(EngineCore(EngineConfig(max_num_batched_tokens=512)), _mixed_requests())
    large = run_all(EngineCore(EngineConfig(max_num_batched_tokens=4096)), _mixed_requests())
    whole = run_all(
        EngineCore(EngineConfig(max_num_batched_tokens=4096, enable_chunked_prefill=False)),
        _mixed_requests(),
    )
    alone = EngineCore(EngineConfig(seed=123))
    solo = {r.request_id: run_all(alone, [r]).tokens[r.request_id] for r in _mixed_requests()}
    assert small.tokens == large.tokens == whole.tokens == solo
    # The step structure did differ: the small budget really chunked.
    assert (
        max(s.prefill_tokens for s in small.steps)
        <= 512
        < max(s.prefill_tokens for s in large.steps)
    )


def test_sampled_outputs_are_deterministic_for_engine_seed_request_seed_and_prompt() -> None:
    def sample(engine_seed: int, request_seed: int | None) -> dict[str, list[int]]:
        reqs = _mixed_requests(temperature=0.8, ignore_eos=True)
        for r in reqs:
            r.seed = request_seed
        return dict(run_all(EngineCore(EngineConfig(seed=engine_seed)), reqs).tokens)

    assert sample(0, None) == sample(0, None)
    assert sample(0, None) != sample(1, None)
    assert sample(0, 7) == sample(1, 7)  # a request seed overrides the engine's
    assert sample(0, 7) != sample(0, 8)
    greedy = dict(run_all(EngineCore(EngineConfig()), _mixed_requests(ignore_eos=True)).tokens)
    agree = sum(a == b for r in greedy for a, b in zip(greedy[r], sample(0, 7)[r], strict=True))
    assert 0.3 < agree / sum(map(len, greedy.values())) < 0.95  # mostly the top token


def test_only_word_tokens_or_eos_with_negative_logprobs_and_top_alternatives() -> None:
    core = EngineCore(EngineConfig(vocab_size=1000))
    reqs = [
        EngineRequest(f"r{i}", prompt(50, i), 300, temperature=t, logprobs=5)
        for i, t in enumerate([0.0, 0.7, 1.0, 1.5])
    ]
    for r in reqs:
        core.add_request(r)
    outs = []
    while core.has_unfinished():
        outs += [t for u in core.step().updates for t in u.new_tokens]
    assert outs
    for out in outs:
        assert out.token_id == EOS_ID or FIRST_WORD_ID <= out.token_id < 1000
        assert out.logprob < 0
        assert len(out.top_logprobs) == 5
        ids = [tid for tid, _ in out.top_logprobs]
        lps = [lp for _, lp in out.top_logprobs]
        assert len(set(ids)) == 5
        assert lps == sorted(lps, reverse=True)
        assert sum(2.718281828**lp for lp in lps) <= 1.0
        assert all(tid == EOS_ID or tid >= FIRST_WORD_ID for tid in ids)
    top_chosen = [out for out in outs if out.top_logprobs[0][0] == out.token_id]
    assert len(top_chosen) > len(outs) / 2


def test_eos_gives_a_plausible_length_distribution_unless_ignored() -> None:
    reqs = [EngineRequest(f"r{i}", prompt(20, 1000 + i), 4000) for i in range(300)]
    config = EngineConfig(max_num_seqs=512, max_num_batched_tokens=8192)
    run = run_all(EngineCore(config), reqs)
    lengths = [len(run.tokens[r.request_id]) for r in reqs]
    assert all(run.finish[r.request_id] == "stop" for r in reqs if len(run.tokens[r.request_id]))
    assert all(run.tokens[r.request_id][-1] == EOS_ID for r in reqs)
    assert 100 < statistics.median(lengths) < 400
    assert min(lengths) < 60 and max(lengths) > 800
    capped = run_all(EngineCore(config), [
        EngineRequest(f"r{i}", prompt(20, 1000 + i), 50, ignore_eos=True) for i in range(50)
    ])  # fmt: skip
    assert all(len(t) == 50 and EOS_ID not in t for t in capped.tokens.values())
    assert set(capped.finish.values()) == {"length"}


def _oracle_hits(requests: list[EngineRequest], outputs: dict[str, list[int]], pool_blocks: int):
    """What the prefix model says each request hits when served one after another."""
    pool = BlockPool(pool_blocks, 16)
    hits = {}
    for req in requests:
        seq = SequenceBlocks(pool, req.scope)
        hits[req.request_id] = seq.claim_prefix(req.prompt_token_ids)
        tokens = list(req.prompt_token_ids) + outputs[req.request_id]
        assert seq.reserve(len(tokens) - 1)
        seq.commit(tokens, len(tokens) - 1)  # the last sampled token never gets KV
        seq.release()
    return hits


def test_prefix_hits_equal_the_prefix_model_including_evictions() -> None:
    system = prompt(2500, 1)
    requests = [EngineRequest("base", system, 10, ignore_eos=True)]
    requests.append(EngineRequest("lesson", system + prompt(500, 2), 10, ignore_eos=True))
    for i in range(14):  # shared prefixes of varied lengths, some salted, in a small pool
        scope = CacheScope(cache_salt="tenant-b") if i % 5 == 4 else CacheScope()
        body = system[: 300 * (i + 1)] + prompt(200 + 37 * i, 100 + i)
        requests.append(EngineRequest(f"q{i}", body, 40, scope=scope, ignore_eos=True))
    core = EngineCore(EngineConfig(num_gpu_blocks=400))
    run = drain(core)
    for req in requests:  # one at a time, as the oracle replays them
        core.add_request(req)
        drain(core, run)
    assert run.cached["lesson"] == 2496
    assert core.pool.evictions > 0
    assert run.cached == _oracle_hits(requests, run.tokens, 400)
    assert core.stats.prefix_hit_tokens == sum(run.cached.values())
    assert core.stats.prefix_query_tokens == sum(len(r.prompt_token_ids) for r in requests)


def test_prefix_caching_off_never_hits() -> None:
    system = prompt(2000, 3)
    core = EngineCore(EngineConfig(enable_prefix_caching=False))
    run = run_all(core, [EngineRequest("a", system, 5)])
    core.add_request(EngineRequest("b", system, 5))
    drain(core, run)
    assert run.cached == {"a": 0, "b": 0}
    assert core.stats.prefix_query_tokens == 0
    assert core.pool.counts().reclaimable == 0


def test_abort_frees_blocks_and_reports_abort() -> None:
    core = EngineCore(EngineConfig())
    core.add_request(EngineRequest("a", prompt(1000, 4), 500, ignore_eos=True))
    core.add_request(EngineRequest("w", prompt(10, 5), 5))
    for _ in range(3):
        core.step()
    assert core.pool.counts().active > 0
    core.abort_request("a")
    core.abort_request("a")  # twice is harmless
    core.abort_request("unknown")
    assert core.pool.counts().active <= 1  # only w's single block is left in use
    run = drain(core)
    assert run.finish["a"] == "abort"
    assert core.stats.aborted_requests == 1
    assert core.pool.counts().active == 0
    assert not core.has_unfinished()


def test_reset_prefix_cache_turns_reclaimable_free_only_when_idle() -> None:
    core = EngineCore(EngineConfig())
    text = prompt(2500, 6)
    core.add_request(EngineRequest("a", text, 400, ignore_eos=True))
    core.step()
    assert core.reset_prefix_cache() is False  # blocks are in use
    drain(core)
    assert core.pool.counts().reclaimable > 0
    assert core.reset_prefix_cache() is True
    counts = core.pool.counts()
    assert counts.reclaimable == 0 and counts.free == counts.total
    assert run_all(core, [EngineRequest("b", text, 3)]).cached["b"] == 0


def test_stats_count_prompt_generation_and_steps() -> None:
    core = EngineCore(EngineConfig())
    reqs = _mixed_requests(ignore_eos=True)
    run = run_all(core, reqs)
    assert core.stats.prompt_tokens == sum(len(r.prompt_token_ids) for r in reqs)
    assert core.stats.generation_tokens == sum(map(len, run.tokens.values())) == 200 * len(reqs)
    assert core.stats.steps == len([s for s in run.steps if s.kind != "idle"])
    assert core.stats.finished_requests == len(reqs)
    assert (core.stats.num_running, core.stats.num_waiting) == (0, 0)
    kinds = {s.kind for s in run.steps}
    assert {"prefill", "mixed", "decode"} <= kinds


def test_duplicate_request_id_is_rejected() -> None:
    core = EngineCore(EngineConfig())
    core.add_request(EngineRequest("dup", prompt(5, 0), 5))
    with pytest.raises(RequestRejected, match="already in flight"):
        core.add_request(EngineRequest("dup", prompt(5, 0), 5))
