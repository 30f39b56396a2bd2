"""How a command stops: Ctrl-C (SIGINT), SIGTERM (a CI cancel, ``kill``) and SIGHUP (the
terminal closed) all end it the same way.

A long command runs its coroutine with ``run`` instead of ``asyncio.run``: the first stop
signal cancels the main task once, so the command absorbs the cancellation, records what
was in flight, writes its files and returns; a second one raises ``Stopped`` at once (the
escape hatch when clean-up hangs). ``received`` says which signal it was, so the command
can name it in its reason and exit with ``128 + signum``: 130 for Ctrl-C, 143 for
SIGTERM, 129 for SIGHUP. ``install`` makes SIGTERM and SIGHUP raise ``Stopped`` in the
short, synchronous commands, as SIGINT raises ``KeyboardInterrupt``.

A signal the process was started with ignored stays ignored: ``nohup`` sets SIGHUP to
``SIG_IGN`` and a background job of a shell without job control gets SIGINT ignored,
and those are the user's choices.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading
from collections.abc import Awaitable, Coroutine, Iterator
from typing import Any, TypeVar

from runtime import event_loop

T = TypeVar("T")

#: The signals that stop a command like Ctrl-C does.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

_received: list[signal.Signals] = []


class Stopped(KeyboardInterrupt):
    """A stop signal (a ``KeyboardInterrupt``, so that code handling Ctrl-C handles it)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signal.Signals(signum)

    @property
    def exit_code(self) -> int:
        return exit_code(self.signum)

    @property
    def name(self) -> str:
        return describe(self.signum)


def describe(signum: int) -> str:
    """``Ctrl-C`` for SIGINT, else the signal's name (``SIGTERM``)."""
    sig = signal.Signals(signum)
    return "Ctrl-C" if sig == signal.SIGINT else sig.name


def exit_code(signum: int) -> int:
    """The shell's convention for a command ended by a signal: 128 + its number."""
    return 128 + int(signum)


def received() -> signal.Signals | None:
    """The first stop signal this process got, if any."""
    return _received[0] if _received else None


def stops() -> int:
    """How many stop signals this process got (a second one ends a run unfinished)."""
    return len(_received)


def stop_name() -> str:
    """What stopped the command (``Ctrl-C`` when it was cancelled without a signal)."""
    sig = received()
    return describe(sig) if sig is not None else "Ctrl-C"


#: How a run's ``reason`` starts when a stop signal (not the server) ended it.
STOP_REASON_PREFIX = "cancelled ("


def stop_reason() -> str:
    """``cancelled (SIGTERM)``: the reason a run stopped by a signal records."""
    return f"{STOP_REASON_PREFIX}{stop_name()})"


def stop_exit_code() -> int:
    """The exit status for a command that was stopped (130 when no signal was seen)."""
    sig = received()
    return exit_code(sig) if sig is not None else exit_code(signal.SIGINT)


def absorb_cancellation() -> None:
    """Called in ``except CancelledError`` of the task a stop signal cancelled: the task
    goes on (to write its files, stop its servers) instead of ending cancelled."""
    task = asyncio.current_task()
    if task is not None:
        task.uncancel()


async def finish(awaitable: Awaitable[T]) -> T:
    """Await ``awaitable`` to its end even when this task is cancelled meanwhile, then
    raise that cancellation: for a clean-up that bounds its own time (join the processes
    started, kill what outlives a grace period) and must not be cut in half by the second
    stop signal, or by the cancellation of every task that follows it."""
    future = asyncio.ensure_future(awaitable)
    cancelled = False
    while True:
        try:
            result = await asyncio.shield(future)
        except asyncio.CancelledError:
            if future.cancelled():
                raise
            cancelled = True
            continue
        if cancelled:
            raise asyncio.CancelledError
        return result


def _record(signum: int) -> signal.Signals:
    sig = signal.Signals(signum)
    _received.append(sig)
    return sig


def _raise_stopped(signum: int, frame: Any) -> None:
    del frame
    raise Stopped(_record(signum))


def _ignored(sig: signal.Signals) -> bool:
    return signal.getsignal(sig) is signal.SIG_IGN


def install() -> None:
    """Make SIGTERM and SIGHUP raise ``Stopped`` in this (main) thread, unless ignored."""
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in (signal.SIGTERM, signal.SIGHUP):
        if not _ignored(sig):
            signal.signal(sig, _raise_stopped)


@contextlib.contextmanager
def _cancel_on_stop(task: asyncio.Task[Any]) -> Iterator[list[signal.Signals]]:
    """While inside, each stop signal cancels ``task`` once; a second raises ``Stopped``."""
    loop = task.get_loop()
    hits: list[signal.Signals] = []

    def on_signal(sig: signal.Signals) -> None:
        _record(sig)
        hits.append(sig)
        if len(hits) > 1:
            raise Stopped(sig)
        task.cancel()

    previous = {s: signal.getsignal(s) for s in STOP_SIGNALS if not _ignored(s)}
    for sig in previous:
        loop.add_signal_handler(sig, on_signal, sig)
    try:
        yield hits
    finally:
        for sig, handler in previous.items():
            loop.remove_signal_handler(sig)
            signal.signal(sig, handler)


def run(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(main)`` (on ``runtime.event_loop``'s loop) with every stop signal
    cancelling ``main`` once.

    ``main`` is expected to absorb the cancellation and return (having written its
    files); if it ends cancelled instead, ``Stopped`` is raised for the signal.
    """
    if threading.current_thread() is not threading.main_thread():
        return event_loop.run(main)
    _received.clear()  # what stopped an earlier command of this process is not news

    async def guarded() -> tuple[T | None, signal.Signals | None]:
        task = asyncio.current_task()
        assert task is not None
        with _cancel_on_stop(task) as hits:
            try:
                return await main, None
            except asyncio.CancelledError:
                if not hits:
                    raise
                task.uncancel()
                return None, hits[0]

    result, stopped_by = event_loop.run(guarded())
    if stopped_by is not None:
        raise Stopped(stopped_by)
    return result  # type: ignore[return-value]
