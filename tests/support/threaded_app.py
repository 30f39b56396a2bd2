"""An aiohttp application on 127.0.0.1 on a thread and event loop of its own, so that sync
and async tests alike talk to it over loopback: ``ThreadedApp`` is the one owner of that
start-up (a free port, ``url`` once it listens) and of a clean stop.

A subclass gives its routes in ``routes(app)`` and may open what its handlers need in
``started()`` and close it in ``stopping()``, both on the app's own loop.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Self

from aiohttp import web


class ThreadedApp:
    """``with Subclass(...) as server: server.url`` serves ``routes`` until the block ends."""

    def __init__(self) -> None:
        self.url = ""
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread: threading.Thread | None = None

    def routes(self, app: web.Application) -> None:
        raise NotImplementedError

    async def started(self) -> None:
        """Called on the app's loop before it listens."""

    async def stopping(self) -> None:
        """Called on the app's loop after it stopped serving."""

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        await self.started()
        app = web.Application()
        self.routes(app)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        self.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
        self._ready.set()
        try:
            await self._stop.wait()
        finally:
            await runner.cleanup()
            await self.stopping()

    def __enter__(self) -> Self:
        self._thread = threading.Thread(target=asyncio.run, args=(self._main(),), daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError(f"{type(self).__name__} did not start")
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._loop is not None and self._stop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
            self._thread.join(10)
