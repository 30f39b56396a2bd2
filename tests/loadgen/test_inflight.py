"""A load run's tasks (``loadgen.inflight.InflightTasks``): idle when none is left, a
failing task handed back, all cancelled together."""

from __future__ import annotations

import asyncio

from loadgen.inflight import InflightTasks


def test_idle_once_every_task_ended_and_a_failure_is_handed_back() -> None:
    errors: list[BaseException] = []

    async def ok() -> None:
        await asyncio.sleep(0.01)

    async def bad() -> None:
        raise ValueError("boom")

    async def go() -> None:
        tasks = InflightTasks(errors.append)
        tasks.spawn(ok())
        tasks.spawn(bad())
        assert not tasks.idle.is_set()
        await asyncio.wait_for(tasks.idle.wait(), 5)
        assert not tasks.tasks

    asyncio.run(go())
    assert [type(e) for e in errors] == [ValueError]


def test_cancel_all_ends_every_task_and_reports_no_error() -> None:
    errors: list[BaseException] = []

    async def go() -> list[asyncio.Task[None]]:
        tasks = InflightTasks(errors.append)
        started = [tasks.spawn(asyncio.sleep(60)) for _ in range(3)]
        await asyncio.sleep(0)
        await asyncio.wait_for(tasks.cancel_all(), 5)
        assert tasks.idle.is_set() and not tasks.tasks
        return started

    assert all(task.cancelled() for task in asyncio.run(go()))
    assert errors == []
