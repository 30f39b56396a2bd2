"""``runtime.signals.finish``: a clean-up awaited to its end through a cancellation."""

from __future__ import annotations

import asyncio
import time

import pytest

from runtime import signals


def test_a_cancelled_clean_up_runs_to_its_end_and_then_the_cancellation_is_raised() -> None:
    done: list[str] = []

    def reap() -> str:
        time.sleep(0.2)  # joining processes, in a thread
        done.append("reaped")
        return "reaped"

    async def main() -> None:
        try:
            await signals.finish(asyncio.to_thread(reap))
        finally:
            done.append("merged")

    async def scenario() -> None:
        task = asyncio.create_task(main())
        await asyncio.sleep(0.05)
        task.cancel()  # the second stop signal, mid-reap
        await asyncio.sleep(0.01)
        task.cancel()  # and the cancellation of every task after it
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(scenario())
    assert done == ["reaped", "merged"]  # not "merged" before the reap ended


def test_an_uncancelled_clean_up_returns_its_result_and_raises_its_error() -> None:
    async def value() -> int:
        await asyncio.sleep(0)
        return 7

    async def broken() -> None:
        raise OSError("join failed")

    assert asyncio.run(signals.finish(value())) == 7
    with pytest.raises(OSError, match="join failed"):
        asyncio.run(signals.finish(broken()))
