"""The last sample of a periodic probe begins after the run ended, so the server-side
figures in ``summary.json`` have seen every response: a scrape that was already under
way when the run stopped does not count as the last one."""

from __future__ import annotations

import asyncio

from probes.sampling import every
from runtime.clock import RunClock


def test_a_sample_in_progress_at_the_stop_is_followed_by_one_begun_after_it() -> None:
    async def go() -> tuple[list[float], float]:
        clock = RunClock()
        stop = asyncio.Event()
        starts: list[float] = []
        stopped_at: list[float] = []

        async def tick() -> None:
            starts.append(clock.now())
            if len(starts) == 2:  # the run ends while this sample is being taken
                stop.set()
                stopped_at.append(clock.now())
            await asyncio.sleep(0.01)

        await every(clock, 0.02, stop, tick)
        return starts, stopped_at[0]

    starts, stopped = asyncio.run(go())
    assert len(starts) == 3  # the interrupted one, then exactly one more
    assert starts[-1] > stopped


def test_a_stop_between_samples_takes_exactly_one_more() -> None:
    async def go() -> list[float]:
        clock = RunClock()
        stop = asyncio.Event()
        starts: list[float] = []

        async def tick() -> None:
            starts.append(clock.now())

        task = asyncio.create_task(every(clock, 0.05, stop, tick))
        while len(starts) < 2:
            await asyncio.sleep(0.005)
        stop.set()
        await task
        return starts

    assert len(asyncio.run(go())) == 3
