"""RealTimeDriver: steps paced by the modelled duration on an asyncio loop."""

from __future__ import annotations

import asyncio
import time

import pytest
from engine_util import prompt

from perfmodel.config import EngineConfig
from simengine.core import EngineCore, EngineRequest, RequestRejected, RequestUpdate
from simengine.driver import RealTimeDriver


async def _collect(queue: asyncio.Queue[RequestUpdate]) -> list[RequestUpdate]:
    updates = []
    while not updates or not updates[-1].finished:
        updates.append(await queue.get())
    return updates


async def _serve(config: EngineConfig, requests: list[EngineRequest], on_step=None):
    driver = RealTimeDriver(EngineCore(config), on_step=on_step)
    task = asyncio.create_task(driver.run())
    start = time.perf_counter()
    queues = [driver.submit(r) for r in requests]
    results = await asyncio.gather(*(_collect(q) for q in queues))
    elapsed = time.perf_counter() - start
    driver.stop()
    await task
    return driver, results, elapsed


@pytest.mark.timing
def test_steps_take_their_modelled_time_scaled() -> None:
    steps: list[tuple[float, float, float]] = []
    config = EngineConfig(fixed_step_s=0.01, time_scale=2.0)
    reqs = [EngineRequest(f"r{i}", prompt(20, i), 10, ignore_eos=True) for i in range(8)]

    def on_step(result, t_start: float, t_end: float) -> None:
        steps.append((result.duration_s, t_start, t_end))

    driver, results, elapsed = asyncio.run(_serve(config, reqs, on_step))
    assert len(steps) == 10  # one prefill step for all eight, then nine decode steps
    assert all(t_end - t_start == pytest.approx(0.02) for _, t_start, t_end in steps)
    assert 0.2 <= elapsed < 0.2 + 0.15
    for updates in results:
        assert sum(len(u.new_tokens) for u in updates) == 10
        assert updates[-1].finish_reason == "length"
    summary = driver.lateness_summary()
    assert summary["count"] == 10
    assert summary["p50"] < 0.01


@pytest.mark.timing
def test_time_scale_below_one_runs_faster_than_modelled() -> None:
    reqs = [EngineRequest("a", prompt(20, 1), 20, ignore_eos=True)]
    _, _, slow = asyncio.run(_serve(EngineConfig(fixed_step_s=0.01, time_scale=1.0), reqs))
    _, _, fast = asyncio.run(_serve(EngineConfig(fixed_step_s=0.01, time_scale=0.25), reqs))
    assert slow >= 0.2
    assert fast < slow / 2


@pytest.mark.timing
def test_idle_driver_uses_no_cpu_and_wakes_on_submit() -> None:
    async def scenario() -> tuple[float, float, list[RequestUpdate]]:
        driver = RealTimeDriver(EngineCore(EngineConfig(fixed_step_s=0.005)))
        task = asyncio.create_task(driver.run())
        cpu0 = time.process_time()
        await asyncio.sleep(0.5)
        idle_cpu = time.process_time() - cpu0
        t0 = time.perf_counter()
        updates = await _collect(driver.submit(EngineRequest("a", prompt(5, 2), 3)))
        latency = time.perf_counter() - t0
        driver.stop()
        await task
        return idle_cpu, latency, updates

    idle_cpu, latency, updates = asyncio.run(scenario())
    assert idle_cpu < 0.1
    assert latency < 0.2
    assert [u.new_tokens[0].token_id for u in updates] and updates[-1].finished


def test_rejected_submit_raises_and_abort_frees_the_request() -> None:
    async def scenario() -> tuple[EngineCore, list[RequestUpdate]]:
        core = EngineCore(EngineConfig(fixed_step_s=0.002, max_model_len=1000))
        driver = RealTimeDriver(core)
        task = asyncio.create_task(driver.run())
        with pytest.raises(RequestRejected):
            driver.submit(EngineRequest("big", prompt(999, 1), 10))
        queue = driver.submit(EngineRequest("a", prompt(100, 2), 500, ignore_eos=True))
        got = [await queue.get() for _ in range(3)]
        driver.abort("a")
        await asyncio.sleep(0.02)
        driver.stop()
        await task
        return core, got

    core, got = asyncio.run(scenario())
    assert len(got) == 3
    assert core.pool.counts().active == 0
    assert not core.has_unfinished()
    assert core.stats.aborted_requests == 1
