"""When a request reached the server: the moment its first bytes were read off the socket.

vLLM stamps a request's arrival when its handler runs; so did this engine. Between the
bytes arriving and the handler running, aiohttp parses the request line and headers,
wakes the connection's task and goes through the middleware — a few hundred
microseconds, more when the loop is busy with an engine step. That time is part of the
client's TTFT but was missing from the engine's, so the two could never agree to within
a couple of percent. Here each connection's protocol is wrapped so that the first read
after the previous request stamps the loop time, and a middleware hands that stamp to
every request (``request[ARRIVAL]``) as its handler starts and clears what the request's
own later reads (the rest of a large body) left, once its handler is done.

HTTP/1.1 connections carry one request at a time (aiohttp's client does not pipeline),
so "the first read after the previous request" is the next request's first bytes. A
stamp that cannot be trusted (none, or bytes of the next request arriving while a
stream's last write drains) falls back to the handler's start.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

#: The key of a request's arrival time (loop clock) in the ``web.Request`` mapping
#: (a typed key where aiohttp has them, 3.12 and later).
ARRIVAL: Any = (
    web.RequestKey("prefillscope_arrival", float)
    if hasattr(web, "RequestKey")
    else "prefillscope_arrival"
)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class RequestArrivals:
    """Arrival stamps (loop time) of requests whose handler has not taken them yet."""

    def __init__(self) -> None:
        self._pending: weakref.WeakKeyDictionary[Any, float] = weakref.WeakKeyDictionary()
        #: Requests being handled, by connection (an idle timeout never cuts one).
        self._busy: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
        #: When each connection's last answer ended (loop time): its idle time starts there.
        self._answered: weakref.WeakKeyDictionary[Any, float] = weakref.WeakKeyDictionary()

    def busy(self, transport: Any) -> bool:
        """Whether a request on this connection is being handled (its answer not done)."""
        return self._busy.get(transport, 0) > 0

    def answered_at(self, transport: Any) -> float | None:
        """When the last answer on this connection ended (None: none has yet)."""
        return self._answered.get(transport)

    def seen(self, transport: asyncio.BaseTransport, now: float) -> None:
        """Bytes arrived on ``transport``: the first after a take starts a request."""
        if transport not in self._pending:
            self._pending[transport] = now

    def take(self, transport: Any, default: float) -> float:
        """The arrival of the request starting on ``transport`` (``default`` if unknown)."""
        if transport is None:
            return default
        return min(self._pending.pop(transport, default), default)

    def middleware(self) -> Any:
        """An aiohttp middleware giving each request its arrival as ``request[ARRIVAL]``."""

        @web.middleware
        async def stamp_arrival(request: web.Request, handler: Handler) -> web.StreamResponse:
            transport = request.transport
            request[ARRIVAL] = self.take(transport, asyncio.get_running_loop().time())
            if transport is not None:
                self._busy[transport] = self._busy.get(transport, 0) + 1
            try:
                return await handler(request)
            finally:
                if transport is not None:
                    self._pending.pop(transport, None)
                    self._busy[transport] = self._busy.get(transport, 1) - 1
                    self._answered[transport] = asyncio.get_running_loop().time()

        return stamp_arrival


class _StampingProtocol(asyncio.Protocol):
    """aiohttp's connection protocol, with every read stamped before it is handed on."""

    def __init__(
        self,
        inner: asyncio.Protocol,
        arrivals: RequestArrivals,
        loop: asyncio.AbstractEventLoop,
        idle_timeout_s: float | None = None,
    ) -> None:
        self._inner = inner
        self._arrivals = arrivals
        self._loop = loop
        self._transport: asyncio.BaseTransport | None = None
        self._idle_timeout_s = idle_timeout_s
        self._last_read = loop.time()
        self._idle_check: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport
        self._inner.connection_made(transport)
        self._watch_idle()

    def _watch_idle(self) -> None:
        """Close the connection once it has sent nothing for ``idle_timeout_s`` while no
        request of it is being answered: an idle keep-alive, a client that never sent a
        request, or one that stopped half-way through sending it. A keep-alive's idle time
        starts when its last answer ended (as uvicorn's), not at its last read: an answer
        longer than the timeout must not leave a connection that is closed as the client
        reuses it (a request then reset unanswered)."""
        if self._idle_timeout_s is None or self._transport is None:
            return
        answered = self._arrivals.answered_at(self._transport)
        since = self._last_read if answered is None else max(self._last_read, answered)
        idle = self._loop.time() - since
        if idle >= self._idle_timeout_s and not self._arrivals.busy(self._transport):
            self._transport.close()
            return
        wait = max(self._idle_timeout_s - idle, 0.0) or self._idle_timeout_s
        self._idle_check = self._loop.call_later(wait, self._watch_idle)

    def data_received(self, data: bytes) -> None:
        self._last_read = self._loop.time()
        if self._transport is not None:
            self._arrivals.seen(self._transport, self._last_read)
        self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._idle_check is not None:
            self._idle_check.cancel()
        self._inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self._inner.pause_writing()

    def resume_writing(self) -> None:
        self._inner.resume_writing()


class StampingSite(web.BaseSite):
    """A TCP site (like ``web.TCPSite``) whose connections stamp request arrivals."""

    def __init__(
        self,
        runner: web.BaseRunner,
        host: str,
        port: int,
        arrivals: RequestArrivals,
        idle_timeout_s: float | None = None,
    ) -> None:
        super().__init__(runner)
        self.host = host
        self.port = port
        self.arrivals = arrivals
        self.idle_timeout_s = idle_timeout_s

    @property
    def name(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def start(self) -> None:
        await super().start()
        loop = asyncio.get_running_loop()
        server = self._runner.server
        assert server is not None
        arrivals, idle = self.arrivals, self.idle_timeout_s
        self._server = await loop.create_server(
            lambda: _StampingProtocol(server(), arrivals, loop, idle),
            self.host,
            self.port,
            reuse_address=True,
        )
