"""The tasks of a load run: spawned, counted until they end, cancelled together."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any


class InflightTasks:
    """Every task a run started and that has not ended yet. ``idle`` is set whenever none
    is left; a task that fails is handed to ``on_error`` (a cancelled one is not)."""

    def __init__(self, on_error: Callable[[BaseException], None]) -> None:
        self.on_error = on_error
        self.tasks: set[asyncio.Task[None]] = set()
        self.idle = asyncio.Event()

    def spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self._ended)
        return task

    def _ended(self, task: asyncio.Task[None]) -> None:
        self.tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            self.on_error(task.exception())  # type: ignore[arg-type]
        if not self.tasks:
            self.idle.set()

    async def cancel_all(self) -> None:
        """Cancel every task and wait until each has ended."""
        tasks = list(self.tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
