"""When a request reached the server: the moment its first bytes were read off the socket.

vLLM stamps a request's arrival when its handler runs; so did this engine. Between the
bytes arriving and the handler running, aiohttp parses the request line and headers,
wakes the connection's task and goes through the middleware — a few hundred
microseconds, more when the loop is busy with an engine step. That time is part of the
client's TTFT but was missing from the engine's, so the two could never agree to within
a couple of percent. Here each connection's protocol is wrapped so that the first read
of every request stamps the loop time; the handler takes the stamp once it has read the
whole body (a large body arrives in several reads, and only the first one counts).

HTTP/1.1 connections carry one request at a time (aiohttp's client does not pipeline),
so "the first read after the previous request's body was read" is the next request.
"""

from __future__ import annotations

import asyncio
import weakref
from typing import Any

from aiohttp import web


class RequestArrivals:
    """Arrival stamps (loop time) of requests whose handler has not taken them yet."""

    def __init__(self) -> None:
        self._pending: weakref.WeakKeyDictionary[Any, float] = weakref.WeakKeyDictionary()

    def seen(self, transport: asyncio.BaseTransport, now: float) -> None:
        """Bytes arrived on ``transport``: the first after a take starts a request."""
        if transport not in self._pending:
            self._pending[transport] = now

    def take(self, transport: Any, default: float) -> float:
        """The arrival of the request just read on ``transport`` (``default`` if unknown)."""
        if transport is None:
            return default
        return min(self._pending.pop(transport, default), default)


class _StampingProtocol(asyncio.Protocol):
    """aiohttp's connection protocol, with every read stamped before it is handed on."""

    def __init__(
        self,
        inner: asyncio.Protocol,
        arrivals: RequestArrivals,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self._inner = inner
        self._arrivals = arrivals
        self._loop = loop
        self._transport: asyncio.BaseTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport
        self._inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if self._transport is not None:
            self._arrivals.seen(self._transport, self._loop.time())
        self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self._inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self._inner.pause_writing()

    def resume_writing(self) -> None:
        self._inner.resume_writing()


class StampingSite(web.BaseSite):
    """A TCP site (like ``web.TCPSite``) whose connections stamp request arrivals."""

    def __init__(
        self, runner: web.BaseRunner, host: str, port: int, arrivals: RequestArrivals
    ) -> None:
        super().__init__(runner)
        self.host = host
        self.port = port
        self.arrivals = arrivals

    @property
    def name(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def start(self) -> None:
        await super().start()
        loop = asyncio.get_running_loop()
        server = self._runner.server
        assert server is not None
        arrivals = self.arrivals
        self._server = await loop.create_server(
            lambda: _StampingProtocol(server(), arrivals, loop),
            self.host,
            self.port,
            reuse_address=True,
        )
