"""What every periodic probe shares: its status, and a tick loop on the run clock.

A probe that fails must not take the run with it: a scrape that times out, a GPU driver
that is absent, a Prometheus server that is down are recorded — state, reason, counts —
and the run goes on. The status object is what ``run.json`` and the summary report, and
each failure is journaled as it happens so a crash keeps it.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from runfmt.names import EVENTS_TABLE
from runfmt.run_sections import ProbeState
from runfmt.rundir import RunDir, RunWriteError, TableWriter
from runtime.clock import RunClock

#: How long ``stop()`` lets a sample still in flight at the run's end finish (a healthy
#: scrape takes milliseconds) before abandoning it, journaled as a failed attempt: a page
#: that stalls never holds the run's end for a whole scrape timeout.
END_GRACE_S = 1.0


@dataclass
class ProbeStatus:
    """``ok`` (every attempt worked), ``partial`` (some failed), ``failed`` (none worked),
    ``unavailable`` (cannot run here, e.g. no GPU driver), ``off`` (disabled by a flag),
    ``pending`` (not attempted yet). ``reason`` says why whenever it is not ``ok``."""

    probe: str
    state: str = "pending"
    reason: str | None = None
    ok: int = 0
    failed: int = 0
    journal: TableWriter | None = field(default=None, repr=False)

    @classmethod
    def for_run(cls, probe: str, run: RunDir | None) -> ProbeStatus:
        return cls(probe, journal=run.table(EVENTS_TABLE) if run is not None else None)

    def succeeded(self) -> None:
        self.ok += 1
        self.state = "ok" if self.failed == 0 else "partial"

    def fail(self, reason: str, t_s: float | None = None) -> None:
        """Count one failed attempt; the first reason is kept, the latest journaled."""
        self.failed += 1
        self.state = "partial" if self.ok else "failed"
        self.reason = self.reason or reason
        self._journal(t_s, "failed", reason)

    def lost(self, reason: str, t_s: float | None = None) -> None:
        """The probe itself died (its process crashed or hung): a failed attempt whose
        reason replaces any earlier one, since it explains every sample missing after it."""
        self.reason = None
        self.fail(reason, t_s)

    def late(self, reason: str, t_s: float | None = None) -> None:
        """The first sample was still in flight when the load began: journaled, not
        counted (it may yet succeed, as a baseline taken after the first send)."""
        self._journal(t_s, "late", reason)

    def unavailable(self, reason: str) -> None:
        self.state, self.reason = "unavailable", reason
        self._journal(None, "unavailable", reason)

    def _journal(self, t_s: float | None, event: str, reason: str) -> None:
        """One row of ``probe_events`` (a failed write is the run directory's to report)."""
        if self.journal is not None:
            with contextlib.suppress(RunWriteError):
                self.journal.append(
                    {"t_s": t_s, "probe": self.probe, "event": event, "reason": reason}
                )

    def off(self, reason: str) -> None:
        self.state, self.reason = "off", reason

    def recorded(self) -> ProbeState:
        """How it went so far, as ``run.json`` records it."""
        return ProbeState(self.state, self.reason, self.ok, self.failed)


async def every(
    clock: RunClock,
    interval_s: float,
    stop: asyncio.Event,
    tick: Callable[[], Awaitable[Any] | Any],
) -> None:
    """Call ``tick`` on a fixed grid of the run clock until ``stop`` is set, then once more
    so the last sample closes the run's window. A tick that overruns skips the grid
    points it missed instead of bursting to catch up.

    The last sample always *starts* after ``stop`` was set: a sample in progress when the
    run ended may have read the server before its last responses, so it does not count
    as the last (a server-side hit rate from it would miss the final requests)."""
    if interval_s <= 0:
        raise ValueError("interval must be positive")
    due = clock.now()
    while True:
        stopping = stop.is_set()
        result = tick()
        if inspect.isawaitable(result):
            await result
        if stopping:
            return
        if stop.is_set():
            continue  # stopped mid-sample: take one more, begun after the stop
        due += interval_s
        now = clock.now()
        if due < now:
            due += interval_s * ((now - due) // interval_s + 1)
        try:
            await asyncio.wait_for(stop.wait(), timeout=due - now)
        except TimeoutError:
            continue
        final = tick()
        if inspect.isawaitable(final):
            await final
        return


class PeriodicProbe:
    """A probe that samples on the run clock in the background: ``start()`` begins,
    ``stop()`` takes a last sample and ends. ``async with`` also waits for the first
    sample, so that counters have their baseline before the load starts (a request
    counted before the first scrape would be missing from the run's increase).
    Subclasses give ``tick`` (one sample), and may refuse to start in ``available``
    (status says why) and release resources in ``aclose``."""

    def __init__(self, status: ProbeStatus, clock: RunClock, interval_s: float) -> None:
        self.status = status
        self.clock = clock
        self.interval_s = interval_s
        self._stop = asyncio.Event()
        self._ticked = asyncio.Event()
        self._task: asyncio.Task | None = None
        #: When the sample in flight began (run clock); None between samples.
        self._tick_began: float | None = None

    def available(self) -> bool:
        return True

    def _stopping(self) -> bool:
        """Whether the run has ended (the sample being taken is the last one)."""
        return self._stop.is_set()

    async def tick(self) -> Any:
        raise NotImplementedError

    async def aclose(self) -> None:
        """Release what ``tick`` opened (a connection, a driver handle)."""

    def start(self) -> asyncio.Task | None:
        """Begin sampling (the first sample is taken at once); None when unavailable."""
        if self._task is None and self.available():
            self._task = asyncio.create_task(
                every(self.clock, self.interval_s, self._stop, self._tick), name=self.status.probe
            )
        return self._task

    async def _tick(self) -> Any:
        self._tick_began = self.clock.now()
        try:
            return await self.tick()
        finally:
            self._tick_began = None
            self._ticked.set()

    async def first_sample(self, timeout_s: float | None = None) -> bool:
        """Wait until the first sample was attempted (at once when not started), or at
        most ``timeout_s``; whether it was."""
        if self._task is None:
            return True
        waiter = asyncio.ensure_future(self._ticked.wait())
        await asyncio.wait(
            {waiter, self._task}, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED
        )
        waiter.cancel()
        return self._ticked.is_set() or self._task.done()

    async def stop(self, grace_s: float = END_GRACE_S) -> None:
        """Take one last sample and stop; an unexpected error is recorded, not raised. A
        sample in flight for ``grace_s`` once the run has ended is abandoned (a failed
        attempt): one that stalled long before the stop is abandoned at once."""
        self._stop.set()
        if self._task is not None:
            while not self._task.done():
                began = self._tick_began
                left = grace_s if began is None else began + grace_s - self.clock.now()
                await asyncio.wait({self._task}, timeout=max(left, 0.0))
                if not self._task.done() and began is not None and began is self._tick_began:
                    await self._abandon(self.clock.now() - began)
            if not self._task.cancelled() and self._task.exception() is not None:
                exc = self._task.exception()  # a probe must never fail the run
                self.status.fail(f"{self.status.probe} stopped: {type(exc).__name__}: {exc}")
        await self.aclose()

    async def _abandon(self, in_flight_s: float) -> None:
        """Cancel the sample in flight at the run's end and journal it as failed."""
        assert self._task is not None
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        self.status.fail(
            f"{self.status.probe} sample abandoned at the run's end: in flight for "
            f"{in_flight_s:.1f} s",
            self.clock.now(),
        )

    async def __aenter__(self) -> PeriodicProbe:
        self.start()
        await self.first_sample()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()
