"""The virtual clock's decode fast path (``simengine.decode_run``) predicts what stepping does.

Each scenario runs twice on a fresh engine, once through ``VirtualDriver``'s fast path and
once step by step (``fast_forward=False``), and every per-token timestamp, step record,
finish, cached count, counter and the KV pool's final state must be identical — exactly
equal floats, not approximately: the fast path does the same arithmetic in the same order.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from engine_util import prompt

from perfmodel.config import EngineConfig
from simengine.core import EngineCore, EngineRequest
from simengine.driver import SimResult, VirtualDriver


def _open_loop(
    n: int, rate: float, seed: int, *, shared: int = 4, prompt_len: tuple[int, int] = (40, 400)
) -> list:
    """Poisson arrivals; prompts drawn from ``shared`` templates (so blocks repeat and
    prefix hits, duplicate blocks and evictions happen), EOS left on for some."""
    rng = np.random.default_rng(seed)
    times = np.cumsum(rng.exponential(1 / rate, n))
    out = []
    for i, t in enumerate(times):
        base = prompt(int(rng.integers(*prompt_len)), int(rng.integers(shared)))
        out.append(
            (
                float(t),
                EngineRequest(
                    f"r{i}",
                    base,
                    int(rng.integers(5, 300)),
                    ignore_eos=bool(i % 3),
                    temperature=0.0 if i % 5 == 0 else 1.0,
                ),
            )
        )
    return out


def _both(config: EngineConfig, arrivals: list, **kwargs: object) -> tuple[SimResult, ...]:
    out = []
    for fast in (True, False):
        core = EngineCore(config)
        result = VirtualDriver(core, fast_forward=fast).run(arrivals, **kwargs)
        out.append((result, core))
    (fast_result, fast_core), (slow_result, slow_core) = out
    return fast_result, fast_core, slow_result, slow_core


def _assert_same(config: EngineConfig, arrivals: list, **kwargs: object) -> SimResult:
    fast, fast_core, slow, slow_core = _both(config, arrivals, **kwargs)
    assert fast.requests.keys() == slow.requests.keys()
    for rid, timing in slow.requests.items():
        other = fast.requests[rid]
        assert other.token_times == timing.token_times, rid  # exact float equality
        assert (other.finish_reason, other.error, other.num_cached_tokens) == (
            timing.finish_reason,
            timing.error,
            timing.num_cached_tokens,
        ), rid
    assert fast.steps == slow.steps
    assert fast.end_s == slow.end_s
    assert dataclasses.asdict(fast.stats) == dataclasses.asdict(slow.stats)
    assert fast_core.pool.free_queue() == slow_core.pool.free_queue()
    assert fast_core.pool._cached == slow_core.pool._cached
    return slow


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_open_loop_with_prefix_hits_and_tight_blocks(async_scheduling: bool) -> None:
    config = EngineConfig(
        num_gpu_blocks=400,  # tight: decodes preempt, reserve from reclaimable blocks
        max_num_batched_tokens=512,
        async_scheduling=async_scheduling,
    )
    slow = _assert_same(config, _open_loop(120, 40.0, 1))
    assert slow.stats.preemptions > 0 and slow.stats.evictions > 0
    assert slow.stats.prefix_hit_tokens > 0


@pytest.mark.parametrize(
    ("blocks", "budget", "rate"), [(120, 64, 20.0), (200, 64, 8.0), (160, 128, 8.0)]
)
def test_long_prompts_chunked_under_preemption(blocks: int, budget: int, rate: float) -> None:
    """Long prompts chunked at a small budget in a tight pool: decodes preempt, preempted
    sequences are recomputed in chunks, and a recompute left one token short becomes a
    decode by its state (the case (200, 64, 8.0) once diverged on)."""
    config = EngineConfig(num_gpu_blocks=blocks, max_num_batched_tokens=budget, max_num_seqs=32)
    slow = _assert_same(config, _open_loop(40, rate, 5, shared=40, prompt_len=(300, 1200)))
    assert slow.stats.preemptions > 0


def test_waiting_queue_blocked_by_max_num_seqs_and_timeouts() -> None:
    config = EngineConfig(max_num_seqs=6, async_scheduling=True)
    slow = _assert_same(config, _open_loop(80, 30.0, 2), timeout_s=1.5)
    assert any(t.error == "timeout" for t in slow.requests.values())
    assert any(s.num_waiting > 0 and s.kind == "decode" for s in slow.steps)


def test_timeouts_mid_prompt_and_mid_decode() -> None:
    """A short client timeout catches long prompts while they are chunked (64 tokens a
    step) and short requests while they decode or wait behind them."""
    config = EngineConfig(max_num_batched_tokens=64, max_num_seqs=16)
    arrivals = [
        (0.02 * i, EngineRequest(f"s{i}", prompt(40, 1000 + i), 20 + i % 40, ignore_eos=True))
        for i in range(60)
    ]
    arrivals += [
        (0.1 + 0.3 * i, EngineRequest(f"l{i}", prompt(3000, 2000 + i), 50)) for i in range(3)
    ]
    arrivals.sort(key=lambda a: a[0])
    slow = _assert_same(config, arrivals, timeout_s=0.4)
    cut = [t for t in slow.requests.values() if t.error == "timeout"]
    assert any(t.token_times for t in cut)
    assert any(not t.token_times for rid, t in slow.requests.items() if rid.startswith("l"))


def test_decodes_taking_the_whole_budget_and_until() -> None:
    config = EngineConfig(max_num_batched_tokens=16, max_num_seqs=16, block_size=8)
    _assert_same(config, _open_loop(40, 50.0, 3), until_s=1.0)


def test_offload_tier_and_tensor_parallel_step_costs() -> None:
    config = EngineConfig(
        model="llama-3.1-70b",
        tensor_parallel_size=4,
        num_gpu_blocks=300,
        offload_gb=1.0,
        host_overhead_per_seq_s=2e-5,
    )
    _assert_same(config, _open_loop(60, 20.0, 4, shared=2))


def test_the_fast_path_runs_and_cuts_the_scheduled_steps() -> None:
    """Long decodes after a burst of arrivals: most steps are taken as decode runs."""
    arrivals = [
        (0.001 * i, EngineRequest(f"d{i}", prompt(200, i), 400, ignore_eos=True)) for i in range(32)
    ]
    core = EngineCore(EngineConfig())
    scheduled = 0
    step = core.step

    def counting_step():
        nonlocal scheduled
        scheduled += 1
        return step()

    core.step = counting_step
    result = VirtualDriver(core).run(arrivals)
    assert result.stats.steps >= 400
    assert scheduled < result.stats.steps / 10
    _assert_same(EngineConfig(), arrivals)


def test_aborting_a_prompt_mid_chunks_inside_a_run() -> None:
    """``DecodeRun.abort`` of a sequence still prefilling while others decode: the run's
    next steps are the core's after ``abort_request``."""
    config = EngineConfig(max_num_batched_tokens=128, max_num_seqs=32)
    cores = [EngineCore(config) for _ in range(2)]
    for core in cores:
        for i in range(4):
            core.add_request(EngineRequest(f"d{i}", prompt(40, i), 200, ignore_eos=True))
        for _ in range(3):
            core.step()
        core.add_request(EngineRequest("long", prompt(8000, 9), 10))
    fast, slow = cores
    run = fast.decode_run()
    durations = ([], [])
    for j in range(30):
        if j == 10:
            assert run.abort("long") is None  # not a member: no token times
            slow.abort_request("long")
        durations[0].append(run.step())
        durations[1].append(slow.step().duration_s)
    assert run.prefill_tokens == 0 and run.decode_tokens == 4
    run.close()
    assert durations[0] == durations[1]
    for i in range(4):
        assert fast._seqs[f"d{i}"].tokens == slow._seqs[f"d{i}"].tokens
    assert fast.pool.free_queue() == slow.pool.free_queue()
