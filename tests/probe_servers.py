"""Real HTTP servers on 127.0.0.1 for the probe tests.

``ReplayServer`` serves real captures from tests/fixtures in order, one per GET of
``/metrics`` (the last one repeats), on its own thread and event loop so that both sync
and async tests can talk to it over loopback. A response can be a capture, an altered
capture (a malformed line), or an HTTP status.
"""

from __future__ import annotations

import asyncio
import socket
import threading

from aiohttp import web


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ReplayServer:
    """Serve ``responses`` (text, or an int HTTP status) at ``path`` in order."""

    def __init__(self, responses: list[str | int], path: str = "/metrics") -> None:
        self.responses = responses
        self.path = path
        self.requests = 0
        self.url = ""
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopped: asyncio.Event | None = None
        self._thread: threading.Thread | None = None

    async def _handle(self, request: web.Request) -> web.Response:
        response = self.responses[min(self.requests, len(self.responses) - 1)]
        self.requests += 1
        if isinstance(response, int):
            return web.Response(status=response, text="nope")
        return web.Response(text=response, content_type="text/plain")

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stopped = asyncio.Event()
        app = web.Application()
        app.router.add_get(self.path, self._handle)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
        self._ready.set()
        try:
            await self._stopped.wait()
        finally:
            await runner.cleanup()

    def __enter__(self) -> ReplayServer:
        self._thread = threading.Thread(target=asyncio.run, args=(self._main(),), daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("replay server did not start")
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._loop is not None and self._stopped is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._stopped.set)
            self._thread.join(10)
