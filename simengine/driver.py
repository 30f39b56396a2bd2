"""Drivers turn the clock-free core into time: a real-time one and a virtual-time one.

``RealTimeDriver`` serves live clients: it steps the core on an asyncio loop, sleeps each
step's modelled duration (times ``time_scale``) against an absolute schedule — so a late
wake-up shortens the next sleep instead of pushing every later step back — and hands each
request's updates to its own asyncio queue. With nothing to do it waits on an event that
``submit`` sets, using no CPU.

``VirtualDriver`` runs the same core against a simulated clock: requests arrive at given
times, each step advances the clock by its modelled duration, and the result holds every
request's token times (TTFT, ITL, E2E) and every step. With ``async_scheduling`` (vLLM
V1's default scheduler: step k+1 is scheduled while step k runs), a request arriving
during a step can join the step after next, not the next one: a busy engine's TTFT
carries one more step (an idle engine schedules at once). Replaying one arrival list against
two configurations is a what-if experiment with identical arrivals by construction. A
request reaches the scheduler ``host_overhead_per_request_s`` after its arrival (an
OpenAI server's frontend); its timings still count from the arrival.

The virtual driver steps the core through its decode cohort (``EngineCore.decode_run``,
``simengine.decode_run``): the decoding sequences cost work per step and per event (a
block reserved or filled, a sequence joining, finishing, preempted or timed out), not per
token; each step's end is kept once and stamped on each member's token times when it
leaves the cohort, with the same clock arithmetic as step by step, so every token time,
step record and counter is the step-by-step path's (``VirtualDriver(core,
fast_forward=False)`` is that path; ``tests/simengine/test_decode_run.py`` compares the
two). A run ends when its cohort empties, at ``until_s``, or at the end; the core's own
step then takes over until the next one qualifies. The real-time driver never takes it:
it streams each token as its step ends.
"""

from __future__ import annotations

import asyncio
import gc
import heapq
import itertools
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from perfmodel.config import EngineConfig
from runtime.quantiles import quantiles
from runtime.timing import sleep_until
from simengine.core import (
    EngineCore,
    EngineRequest,
    EngineStats,
    RequestRejected,
    RequestUpdate,
    StepResult,
)
from simengine.decode_run import DecodeRun

#: Lateness beyond which the schedule is re-anchored to now instead of catching up with
#: back-to-back steps (a long GC pause or a saturated CPU).
MAX_CATCH_UP_S = 0.05

#: The spin window of the step timer (``runtime.timing.sleep_until``): the event loop's
#: timers wake up to 1 ms late (epoll's millisecond timeout is rounded up), so the last
#: stretch of a sleep yields in a loop instead: other tasks still run. Fixed, not widened
#: to the machine's wake-ups as the client's is: a busy engine's late wake-ups are its own
#: loop's work, and spinning through them took a core and made steps later (512 streams:
#: lateness p99 4.7 → 8.8 ms, CPU 50 → 100 %).
SPIN_S = 0.0012

OnStep = Callable[[StepResult, float, float], None]
#: Called with each step's lateness in seconds (its end past its scheduled end, ≥ 0).
OnLate = Callable[[float], None]


class UpdateSink(Protocol):
    """Where a request's updates are delivered: an asyncio.Queue or anything like it."""

    def put_nowait(self, update: RequestUpdate, /) -> None: ...


class RealTimeDriver:
    """Runs EngineCore on an asyncio loop: step, sleep ``duration × time_scale``, deliver."""

    def __init__(
        self,
        core: EngineCore,
        *,
        on_step: OnStep | None = None,
        on_late: OnLate | None = None,
        lateness_window: int = 100_000,
    ) -> None:
        self.core = core
        self.on_step = on_step
        #: Told each timed step's lateness (the server's ``/metrics`` histogram).
        self.on_late = on_late
        self.time_scale = core.config.time_scale
        #: Seconds each step ended after its scheduled end (the most recent steps).
        self.lateness: deque[float] = deque(maxlen=lateness_window)
        self._queues: dict[str, UpdateSink] = {}
        self._wake = asyncio.Event()
        self._stopped = False

    def submit(self, req: EngineRequest) -> asyncio.Queue[RequestUpdate]:
        """Queue a request; its updates arrive on the returned queue. Raises RequestRejected."""
        queue: asyncio.Queue[RequestUpdate] = asyncio.Queue()
        self.submit_to(req, queue)
        return queue

    def submit_to(self, req: EngineRequest, sink: UpdateSink) -> None:
        """Queue a request whose updates go to ``sink.put_nowait`` as each step ends.

        The server's streaming path passes a sink that writes the SSE event at once, so a
        token costs no queue hand-off and no task wake-up. Raises RequestRejected.
        """
        self.core.add_request(req)
        self._queues[req.request_id] = sink
        self._wake.set()

    def abort(self, request_id: str) -> None:
        """The client went away: stop computing for it and free its blocks."""
        self._queues.pop(request_id, None)
        self.core.abort_request(request_id)

    def stop(self) -> None:
        self._stopped = True
        self._wake.set()

    async def run(self) -> None:
        """Step until ``stop()``; between bursts of work, sleep on the submit event."""
        loop = asyncio.get_running_loop()
        self._stopped = False
        scheduled: float | None = None
        while not self._stopped:
            if not self.core.has_unfinished():
                await self._idle()
                scheduled = None  # a burst of work starts a fresh schedule
                continue
            now = loop.time()
            if scheduled is None or now - scheduled > MAX_CATCH_UP_S:
                scheduled = now
            result = self.core.step()
            end = scheduled + result.duration_s * self.time_scale
            await sleep_until(loop.time, end, SPIN_S)
            if result.duration_s > 0:
                late = max(0.0, loop.time() - end)
                self.lateness.append(late)
                if self.on_late is not None:
                    self.on_late(late)
            self._deliver(result)
            if self.on_step is not None:
                self.on_step(result, scheduled, end)
            scheduled = end
            if result.kind == "idle" and self.core.has_unfinished():
                await self._idle()
                scheduled = None

    async def _idle(self) -> None:
        """Sleep until a submit (or stop)."""
        self._wake.clear()
        await self._wake.wait()

    def _deliver(self, result: StepResult) -> None:
        queues = self._queues
        for update in result.updates:
            queue = queues.get(update.request_id)
            if queue is None:
                continue
            queue.put_nowait(update)
            if update.finished:
                del queues[update.request_id]

    def lateness_summary(self) -> dict[str, float]:
        """Count, p50, p99 and max of step lateness in seconds (0 for all if no steps yet)."""
        if not self.lateness:
            return {"count": 0, "p50": 0.0, "p99": 0.0, "max": 0.0}
        values = np.fromiter(self.lateness, dtype=float)
        p50, p99 = quantiles(values, (0.5, 0.99))
        return {
            "count": len(values),
            "p50": float(p50),
            "p99": float(p99),
            "max": float(values.max()),
        }


@dataclass
class RequestTiming:
    """One request's life on the virtual clock (seconds from the simulation's t=0)."""

    request_id: str
    arrival_s: float
    token_times: list[float] = field(default_factory=list)
    num_cached_tokens: int = 0
    finish_reason: str | None = None
    error: str | None = None

    @property
    def ttft_s(self) -> float | None:
        return self.token_times[0] - self.arrival_s if self.token_times else None

    @property
    def e2e_s(self) -> float | None:
        return self.token_times[-1] - self.arrival_s if self.finish_reason else None

    @property
    def itls_s(self) -> list[float]:
        t = self.token_times
        return [b - a for a, b in itertools.pairwise(t)]


@dataclass(frozen=True, slots=True)
class StepRecord:
    """One step on the virtual clock."""

    start_s: float
    duration_s: float
    kind: str
    prefill_tokens: int
    decode_tokens: int
    num_running: int
    num_waiting: int
    num_preempted: int

    @classmethod
    def of(cls, result: StepResult, start_s: float) -> StepRecord:
        return cls(
            start_s,
            result.duration_s,
            result.kind,
            result.prefill_tokens,
            result.decode_tokens,
            result.num_running,
            result.num_waiting,
            len(result.preempted),
        )


@dataclass
class SimResult:
    """Everything a virtual-time run produced."""

    requests: dict[str, RequestTiming]
    steps: list[StepRecord]
    end_s: float
    stats: EngineStats

    @property
    def output_tokens(self) -> int:
        return sum(len(r.token_times) for r in self.requests.values())


#: Called with a request's id and the time it ended (finished or was refused); returns
#: the arrivals that ending releases (a closed-loop user's next request, a next turn).
Release = Callable[[str, float], Iterable[tuple[float, "EngineRequest"]]]


class ArrivalQueue:
    """Arrivals by time (ties in the order given), open to arrivals released later."""

    def __init__(self, arrivals: Iterable[tuple[float, EngineRequest]] = ()) -> None:
        self._heap = [(t, i, req) for i, (t, req) in enumerate(arrivals)]
        heapq.heapify(self._heap)
        self._count = len(self._heap)

    def __bool__(self) -> bool:
        return bool(self._heap)

    @property
    def heap(self) -> list[tuple[float, int, EngineRequest]]:
        """The queue itself, soonest first (``heapq`` order; read, never reorder)."""
        return self._heap

    def next_s(self) -> float:
        return self._heap[0][0]

    def pop(self) -> tuple[float, EngineRequest]:
        t, _, req = heapq.heappop(self._heap)
        return t, req

    def push(self, t: float, req: EngineRequest) -> None:
        heapq.heappush(self._heap, (t, self._count, req))
        self._count += 1


def end_request(
    timing: RequestTiming, now: float, release: Release | None, pending: ArrivalQueue
) -> None:
    """A request ended at ``now``: queue what that releases."""
    if release is not None:
        for t, req in release(timing.request_id, now):
            pending.push(t, req)


class VirtualDriver:
    """Runs EngineCore against a simulated clock; arrivals come with their times, or are
    released by earlier requests ending (``release``: closed-loop users, sessions)."""

    #: Whether a driver built without ``fast_forward`` takes decode runs (the speed
    #: benchmark, ``benchmarks/sim_speed.py``, turns it off to time the step-by-step path).
    fast_forward_default = True

    def __init__(self, core: EngineCore, *, fast_forward: bool | None = None) -> None:
        self.core = core
        self.now = 0.0
        #: Take decode runs through ``EngineCore.decode_run`` (the module docstring);
        #: False steps the core one step at a time.
        self.fast_forward = self.fast_forward_default if fast_forward is None else fast_forward

    def run(
        self,
        arrivals: Iterable[tuple[float, EngineRequest]],
        *,
        until_s: float | None = None,
        record_steps: bool = True,
        release: Release | None = None,
        timeout_s: float | None = None,
    ) -> SimResult:
        """Admit each request at its arrival time and step until all finish (or ``until_s``).

        With ``timeout_s``, a request still unfinished that long after its arrival is
        aborted at the first step boundary past it (a client's total timeout: the server
        stops computing it) and ends with ``error = "timeout"``.

        The cyclic garbage collector is paused meanwhile: a simulation allocates a few small
        objects per token and creates no reference cycles, and gen-0 collections over them
        otherwise cost about a quarter of the run.
        """
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            return self._run(ArrivalQueue(arrivals), until_s, record_steps, release, timeout_s)
        finally:
            if gc_was_enabled:
                gc.enable()

    def _run(
        self,
        pending: ArrivalQueue,
        until_s: float | None,
        record_steps: bool,
        release: Release | None,
        timeout_s: float | None = None,
    ) -> SimResult:
        timings: dict[str, RequestTiming] = {}
        steps: list[StepRecord] = []
        deadlines: deque[tuple[float, RequestTiming]] = deque()
        core = self.core
        lag = core.config.async_scheduling
        #: A request reaches the scheduler this long after its send (the frontend's time).
        front = core.config.host_overhead_per_request_s
        #: Arrivals up to here reach the step about to run: now, or under async scheduling
        #: the start of the step that just ran (this one was scheduled then).
        horizon = self.now
        run: DecodeRun | None = None
        heap = pending.heap  # the queue's own list: the checks below, without method calls
        while heap or core.has_unfinished():
            while heap and heap[0][0] + front <= horizon:
                timing = self._arrive(*pending.pop(), timings)
                if timing.error is not None:
                    end_request(timing, self.now, release, pending)
                elif timeout_s is not None:
                    deadlines.append((timing.arrival_s + timeout_s, timing))
            while deadlines and deadlines[0][0] <= self.now:
                _, timing = deadlines.popleft()
                if timing.finish_reason is None:
                    stamp = None if run is None else run.abort(timing.request_id)
                    if stamp is not None:
                        timing.token_times.extend(run.ends[stamp[0] - 1 : stamp[1]])
                    elif run is None:
                        core.abort_request(timing.request_id)
                    timing.error = "timeout"
                    end_request(timing, self.now, release, pending)
            if until_s is not None and self.now >= until_s:
                break
            if run is not None:
                duration = run.step()
                if duration is not None:
                    end = self.now + duration
                    if record_steps:
                        steps.append(
                            StepRecord(
                                self.now, duration, run.kind, run.prefill_tokens,
                                run.decode_tokens, run.num_running, run.num_waiting,
                                run.num_preempted,
                            )
                        )  # fmt: skip
                    run.ends.append(end)
                    for request_id, join, last in run.stamps:  # members it preempted
                        timings[request_id].token_times.extend(run.ends[join - 1 : last])
                    if run.updates:
                        self._deliver(run.updates, end, timings, release, pending, run)
                    horizon = self.now if lag else end
                    self.now = end
                    continue
                run = self._close(run, timings)
            result = core.step() if core.has_unfinished() else None
            if result is None or result.kind == "idle":
                if not pending:
                    break
                reach = pending.next_s() + front
                wake = reach if until_s is None else min(reach, until_s)
                self.now = horizon = max(self.now, wake)
                continue
            end = self.now + result.duration_s
            if record_steps:
                steps.append(StepRecord.of(result, self.now))
            self._deliver(result.updates, end, timings, release, pending)
            horizon = self.now if lag else end
            self.now = end
            if self.fast_forward:
                run = core.decode_run()
        self._close(run, timings)
        return SimResult(timings, steps, self.now, core.stats)

    @staticmethod
    def _deliver(
        updates: list[RequestUpdate],
        end: float,
        timings: dict[str, RequestTiming],
        release: Release | None,
        pending: ArrivalQueue,
        run: DecodeRun | None = None,
    ) -> None:
        """A step's updates, at its end: token times, finishes and what they release. A
        decode run's member that finished gets its token times from the run's step ends."""
        for update in updates:
            timing = timings[update.request_id]
            if timing.error is not None:  # aborted: the core's last word on it
                continue
            join = None if run is None else run.leavers.get(update.request_id)
            if join is not None:
                timing.token_times.extend(run.ends[join - 1 :])
            elif update.new_tokens:  # the core emits one token per request per step
                timing.token_times.append(end)
            if update.finished:
                timing.num_cached_tokens = update.num_cached_tokens
                timing.finish_reason = update.finish_reason
                end_request(timing, end, release, pending)

    @staticmethod
    def _close(run: DecodeRun | None, timings: dict[str, RequestTiming]) -> None:
        """End a decode run: each member still decoding gets its token times. Returns None
        (no run any more)."""
        if run is not None:
            for request_id, join in run.close():
                timings[request_id].token_times.extend(run.ends[join - 1 :])

    def _arrive(
        self, t: float, req: EngineRequest, timings: dict[str, RequestTiming]
    ) -> RequestTiming:
        timing = RequestTiming(req.request_id, t)
        timings[req.request_id] = timing
        try:
            self.core.add_request(req)
        except RequestRejected as exc:
            timing.error = str(exc)
        return timing


def simulate(
    config: EngineConfig, arrivals: Iterable[tuple[float, EngineRequest]], **kwargs: object
) -> SimResult:
    """A what-if run: a fresh engine with ``config`` serving ``arrivals`` on a virtual clock."""
    return VirtualDriver(EngineCore(config)).run(arrivals, **kwargs)
