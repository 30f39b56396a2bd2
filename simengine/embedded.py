"""Running the embedded engine server: in a background thread, or as the process's main loop.

``EmbeddedServer`` is what ``prefillscope bench`` (without ``--endpoint``) and the tests
use: the engine and its HTTP server start on their own thread and event loop, on
127.0.0.1 and a free port, so the caller talks to it over real loopback HTTP exactly as
it would talk to a remote vLLM. ``serve`` is the same server as the foreground task of
``prefillscope serve``.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import Self

from aiohttp import web

from perfmodel.config import EngineConfig
from simengine.arrivals import StampingSite
from simengine.disagg_config import DisaggConfig
from simengine.server import DEFAULT_IDLE_TIMEOUT_S, EngineServer, ServerOptions

_STARTUP_TIMEOUT_S = 30.0
_SHUTDOWN_GRACE_S = 0.25
#: Allocations between young-generation collections while an engine serves (default 700).
_GC_GEN0_THRESHOLD = 20_000
_GC_OLDER_THRESHOLD = 20

_gc_lock = threading.Lock()
_gc_users = 0
_gc_saved: tuple[int, int, int] = (700, 10, 10)


@contextlib.contextmanager
def latency_gc() -> Iterator[None]:
    """Keep the cyclic garbage collector out of the step loop while an engine serves.

    With default settings a real-time engine stalls for tens of milliseconds at a time:
    every step allocates thousands of short-lived objects, so young collections run
    several times per step, promote whatever is alive at that instant, and soon trigger
    full collections that walk the whole KV pool and tokenizer. That shows up as step
    lateness and ITL spikes that are the tool's own, not the modelled engine's. While any
    engine serves in this process, everything that exists at start (pool, tokenizer,
    modules) is frozen out of collection and young collections run every 20,000
    allocations instead of 700. The previous settings return when the last engine stops.
    """
    global _gc_users, _gc_saved
    with _gc_lock:
        if _gc_users == 0:
            _gc_saved = gc.get_threshold()
            gc.freeze()
            gc.set_threshold(_GC_GEN0_THRESHOLD, _GC_OLDER_THRESHOLD, _GC_OLDER_THRESHOLD)
        _gc_users += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_users -= 1
            if _gc_users == 0:
                gc.set_threshold(*_gc_saved)
                gc.unfreeze()


async def start_server(
    config: EngineConfig, options: ServerOptions, host: str, port: int
) -> tuple[EngineServer, web.AppRunner, str]:
    """Build the engine server and listen; returns it, its runner and its base URL.

    Handler cancellation is on so that a client that disconnects cancels its handler,
    which aborts the request in the engine and frees its KV blocks. Stopping does not
    wait for streams in flight to finish (they may run for minutes): after a short grace
    period their handlers are cancelled and their requests aborted.
    """
    if options.disagg is not None:
        from simengine.disagg_server import DisaggEngineServer as server_class
    else:
        server_class = EngineServer
    server = server_class(config, options)
    runner = web.AppRunner(
        server.app,
        handler_cancellation=True,
        access_log=None,
        shutdown_timeout=_SHUTDOWN_GRACE_S,
    )
    await runner.setup()
    site = StampingSite(runner, host, port, server.arrivals, options.idle_timeout_s)
    await site.start()
    bound_host, bound_port = runner.addresses[0][:2]
    url_host = f"[{bound_host}]" if ":" in bound_host else bound_host
    return server, runner, f"http://{url_host}:{bound_port}"


async def serve(
    config: EngineConfig,
    options: ServerOptions,
    host: str,
    port: int,
    on_ready: Callable[[EngineServer, str], None] | None = None,
) -> None:
    """Serve until cancelled (Ctrl-C); ``on_ready(server, url)`` runs once listening."""
    server, runner, url = await start_server(config, options, host, port)
    try:
        with latency_gc():
            if on_ready is not None:
                on_ready(server, url)
            await asyncio.Event().wait()
    finally:
        await runner.cleanup()


class Running(ABC):
    """An engine server that is started and stopped (``with`` support): what it serves
    and where. ``url`` is its base URL once started."""

    def __init__(
        self,
        config: EngineConfig | None = None,
        *,
        stream_interval: int = 1,
        host: str = "127.0.0.1",
        port: int = 0,
        disagg: DisaggConfig | None = None,
        idle_timeout_s: float | None = DEFAULT_IDLE_TIMEOUT_S,
    ) -> None:
        self.config = config or EngineConfig()
        self.stream_interval = stream_interval
        self.disagg = disagg
        self.idle_timeout_s = idle_timeout_s
        self.host = host
        self.port = port
        self.url = ""

    @abstractmethod
    def start(self) -> Self:
        """Start, returning once ready."""

    @abstractmethod
    def stop(self) -> None:
        """Stop; safe to call twice."""

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


class EmbeddedServer(Running):
    """The engine server on a background thread with its own event loop.

    Use as a context manager, or call :meth:`start` and :meth:`stop`. ``url`` is the base
    URL (``http://127.0.0.1:PORT``); ``config`` the engine configuration; ``server`` the
    :class:`EngineServer` (its ``core`` may be inspected between requests from the
    caller's thread, reading only).
    """

    server: EngineServer | None = None
    _loop: asyncio.AbstractEventLoop | None = None
    _thread: threading.Thread | None = None
    _stopped: asyncio.Event | None = None
    _error: BaseException | None = None

    def start(self) -> EmbeddedServer:
        """Start the thread and return once the server listens (or raise why it could not)."""
        if self._thread is not None:
            raise RuntimeError("EmbeddedServer already started")
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="prefillscope-engine", daemon=True)
        self._thread.start()
        if not self._ready.wait(_STARTUP_TIMEOUT_S):
            raise RuntimeError("the embedded engine did not start listening in time")
        if self._error is not None:
            self._thread.join()
            raise self._error
        return self

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:  # reported to start() when startup itself failed
            if not self._ready.is_set():
                self._error = exc
                self._ready.set()
            else:
                raise

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stopped = asyncio.Event()
        self.server, runner, self.url = await start_server(
            self.config,
            ServerOptions(
                stream_interval=self.stream_interval,
                disagg=self.disagg,
                idle_timeout_s=self.idle_timeout_s,
            ),
            self.host,
            self.port,
        )
        try:
            with latency_gc():
                self._ready.set()
                await self._stopped.wait()
        finally:
            await runner.cleanup()

    def stop(self) -> None:
        """Stop serving and join the thread; safe to call twice."""
        if self._loop is None or self._thread is None or self._stopped is None:
            return
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stopped.set)
            self._thread.join()
