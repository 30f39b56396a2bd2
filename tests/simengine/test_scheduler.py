"""The chunked-prefill scheduler: budget split, limits, preemption, rejection."""

from __future__ import annotations

import random

import pytest
from engine_util import Run, drain, prompt, run_all

from perfmodel.chunking import PrefillBlocked, chunk_schedule
from perfmodel.config import EngineConfig
from simengine.core import EngineCore, EngineRequest, RequestRejected
from simengine.driver import VirtualDriver


def _req(rid: str, n: int, max_tokens: int, seed: int | None = None, **kw: object) -> EngineRequest:
    return EngineRequest(rid, prompt(n, hash(rid) % 10_000 if seed is None else seed), max_tokens,
                         ignore_eos=True, temperature=0.0, **kw)  # fmt: skip


def _decoding(core: EngineCore, count: int, max_tokens: int = 10_000) -> None:
    """Start ``count`` one-token prompts and step until every one of them is decoding."""
    started: set[str] = set()
    for i in range(count):
        core.add_request(_req(f"d{i}", 1, max_tokens))
    while len(started) < count:
        started.update(core.step().first_token_ids)


def test_engine_slices_a_prompt_like_calc_chunks() -> None:
    core = EngineCore(EngineConfig(max_num_batched_tokens=512, max_num_seqs=64))
    _decoding(core, 4)
    core.add_request(_req("long", 2048, 4))
    chunks = []
    while True:
        result = core.step()
        assert result.decode_tokens == 4
        chunks.append(result.prefill_tokens)
        if "long" in result.first_token_ids:
            break
    assert chunks == chunk_schedule(2048, 512, 4) == [508, 508, 508, 508, 16]


def test_chunk_schedule_refuses_when_decodes_take_the_budget() -> None:
    with pytest.raises(PrefillBlocked):
        chunk_schedule(100, 64, 64)


def _late_among_decodes(decoding: int, decode_tokens: int, prompt_len: int, max_tokens: int):
    """Budget = max_num_seqs = 8: ``decoding`` requests decode, then one more arrives."""
    core = EngineCore(EngineConfig(max_num_batched_tokens=8, max_num_seqs=8))
    _decoding(core, decoding, max_tokens=decode_tokens)
    core.add_request(_req("late", prompt_len, max_tokens))
    run = drain(core)
    assert len(run.tokens["late"]) == max_tokens
    assert all(s.prefill_tokens + s.decode_tokens <= 8 for s in run.steps)
    return run


def test_prefill_waits_while_decodes_take_the_whole_budget_then_completes() -> None:
    run = _late_among_decodes(7, 40, prompt_len=100, max_tokens=3)
    # With 7 decodes the prompt gets one token a step; it still finishes.
    assert any(s.prefill_tokens == 1 and s.decode_tokens == 7 for s in run.steps)


def test_full_batch_defers_admission_without_starving() -> None:
    run = _late_among_decodes(8, 20, prompt_len=50, max_tokens=5)
    full = [s for s in run.steps if s.decode_tokens == 8]
    assert len(full) > 5
    assert all(s.prefill_tokens == 0 and s.num_waiting == 1 for s in full)


def test_max_num_seqs_is_respected() -> None:
    core = EngineCore(EngineConfig(max_num_seqs=4, max_num_batched_tokens=2048))
    run = run_all(core, [_req(f"r{i}", 64, 20) for i in range(12)])
    assert max(s.num_running for s in run.steps) == 4
    assert max(s.decode_tokens for s in run.steps) <= 4
    assert all(len(run.tokens[f"r{i}"]) == 20 for i in range(12))


def test_chunked_prefill_off_schedules_whole_prompts_only() -> None:
    config = EngineConfig(max_num_batched_tokens=2048, enable_chunked_prefill=False)
    core = EngineCore(config)
    run = run_all(core, [_req(f"r{i}", 1500, 30) for i in range(6)])
    assert {s.prefill_tokens for s in run.steps} == {0, 1500}
    on = run_all(EngineCore(EngineConfig()), [_req(f"r{i}", 1500, 30) for i in range(6)])
    assert {s.prefill_tokens for s in on.steps} - {0, 1500}, "chunking on splits prompts"
    with pytest.raises(RequestRejected, match="chunked prefill is off"):
        core.add_request(_req("big", 3000, 1))


def test_undersized_pool_preempts_counts_and_still_completes_everything() -> None:
    requests = [_req(f"r{i}", 100, 300) for i in range(8)]
    small = EngineCore(EngineConfig(num_gpu_blocks=64))  # 1024 tokens; demand ~3200
    run = run_all(small, requests)
    preempted = sum(len(s.preempted) for s in run.steps)
    assert preempted > 0
    assert small.stats.preemptions == preempted
    assert all(len(run.tokens[r.request_id]) == 300 for r in requests)
    assert all(run.finish[r.request_id] == "length" for r in requests)
    # Recompute never changes what a request says.
    roomy = run_all(EngineCore(EngineConfig()), requests)
    assert run.tokens == roomy.tokens
    counts = small.pool.counts()
    assert counts.active == 0 and counts.total == 64


def test_preemption_victim_is_the_most_recently_admitted() -> None:
    core = EngineCore(EngineConfig(num_gpu_blocks=20, max_num_batched_tokens=256))
    for i in range(4):
        core.add_request(_req(f"r{i}", 40, 120))
    run = drain(core)
    victims = [rid for s in run.steps for rid in s.preempted]
    assert victims and victims[0] == "r3"


def test_requests_that_can_never_fit_are_rejected_not_livelocked() -> None:
    core = EngineCore(EngineConfig(num_gpu_blocks=10, max_model_len=4096))
    with pytest.raises(RequestRejected, match="whole cache"):
        core.add_request(_req("pool", 150, 20))  # 169 tokens of KV > 160
    with pytest.raises(RequestRejected, match="maximum context length"):
        core.add_request(_req("len", 4000, 200))
    with pytest.raises(RequestRejected, match="empty"):
        core.add_request(EngineRequest("empty", [], 5))
    assert core.stats.rejected_requests == 3
    assert not core.has_unfinished()
    core.add_request(_req("fits", 140, 21))  # exactly 160 tokens of KV
    assert len(drain(core).tokens["fits"]) == 21


def _prompt_among_decodes(budget: int) -> tuple[float, float, float]:
    """(pure-decode step, longest step, TTFT) for a 4096-token prompt landing among 32 decodes
    of llama-3.1-8b on an H100."""
    config = EngineConfig(model="llama-3.1-8b", gpu="h100-sxm", max_num_batched_tokens=budget)
    arrivals = [(0.0, _req(f"d{i}", 512, 300, seed=i)) for i in range(32)]
    arrivals.append((1.0, _req("long", 4096, 8, seed=99)))
    result = VirtualDriver(EngineCore(config)).run(arrivals)
    during = [s for s in result.steps if s.start_s >= 1.0 and s.decode_tokens == 32]
    pure = min(s.duration_s for s in during if s.kind == "decode")
    return pure, max(s.duration_s for s in during), result.requests["long"].ttft_s


def test_big_chunks_stretch_decode_steps_small_chunks_delay_the_prompt() -> None:
    pure_2048, longest_2048, ttft_2048 = _prompt_among_decodes(2048)
    pure_512, longest_512, ttft_512 = _prompt_among_decodes(512)
    assert pure_2048 == pytest.approx(pure_512, rel=0.05)
    assert longest_2048 > 5 * pure_2048  # several times a pure-decode step
    assert longest_512 < 0.4 * longest_2048  # much shorter
    assert ttft_512 > ttft_2048  # but the prompt waits longer


@pytest.mark.parametrize("seed", range(6))
def test_random_workloads_keep_every_invariant(seed: int) -> None:
    """Small pools, tight budgets, both modes, shared prefixes and aborts: every request still
    finishes with the tokens a roomy engine gives it, and no step breaks a limit."""
    rng = random.Random(seed)
    config = EngineConfig(
        num_gpu_blocks=rng.choice([24, 40, 80]),
        block_size=rng.choice([4, 16]),
        max_num_batched_tokens=rng.choice([64, 128, 512]),
        max_num_seqs=rng.choice([2, 8, 64]),
        enable_chunked_prefill=rng.random() < 0.7,
        enable_prefix_caching=rng.random() < 0.7,
    )
    budget, pool_tokens = config.max_num_batched_tokens, config.num_gpu_blocks * config.block_size
    shared = prompt(300, seed)
    requests = []
    for i in range(30):
        n = rng.randint(1, min(budget, pool_tokens // 2))
        body = shared[: rng.randint(0, n)]
        body += prompt(n - len(body), 1000 * seed + i)
        max_tokens = rng.randint(1, pool_tokens // 2 - n + 1)
        eos = rng.random() < 0.5
        requests.append(EngineRequest(f"r{i}", body, max_tokens, ignore_eos=eos, temperature=0))
    core = EngineCore(config)
    run = Run()
    aborted = set()
    pending = list(requests)
    while pending or core.has_unfinished():
        for _ in range(rng.randint(0, 3)):
            if pending:
                core.add_request(pending.pop(0))
        live = [s.request.request_id for s in core.scheduler.running if not s.done]
        if live and rng.random() < 0.03:
            aborted.add(live[0])
            core.abort_request(live[0])
        result = core.step()
        run.steps.append(result)
        for u in result.updates:
            run.tokens[u.request_id].extend(t.token_id for t in u.new_tokens)
            if u.finished:
                run.finish[u.request_id] = u.finish_reason
        assert result.prefill_tokens + result.decode_tokens <= budget
        assert result.num_running <= config.max_num_seqs
        assert core.pool.counts().total == config.num_gpu_blocks
        assert len(run.steps) < 50_000, "livelock"
    assert core.pool.counts().active == 0
    reference = run_all(EngineCore(EngineConfig()), requests)
    for req in requests:
        rid = req.request_id
        if rid in aborted:
            assert run.finish[rid] == "abort"
            assert run.tokens[rid] == reference.tokens[rid][: len(run.tokens[rid])]
        else:
            assert run.tokens[rid] == reference.tokens[rid]
            assert run.finish[rid] == reference.finish[rid]
