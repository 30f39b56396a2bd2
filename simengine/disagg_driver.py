"""Drivers for the disaggregated cluster: a virtual-time run and a real-time server loop.

Both move :class:`~simengine.disagg.DisaggCluster` the same way, from one event (a step
end, a transfer delivery, an arrival) to the next; the virtual one jumps the clock, the
real-time one sleeps until the event's wall time (``time_scale`` seconds per modelled
second) and wakes early when a request is submitted.
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterable
from dataclasses import dataclass, field

from perfmodel.config import EngineConfig
from runtime.timing import sleep_until
from simengine.core import EngineRequest, EngineStats, RequestRejected, RequestUpdate, StepResult
from simengine.disagg import DisaggCluster, KvJob, OnStep, OnTransfer, Worker
from simengine.disagg_config import DisaggConfig
from simengine.driver import (
    SPIN_S,
    ArrivalQueue,
    Release,
    RequestTiming,
    SimResult,
    StepRecord,
    UpdateSink,
    end_request,
)


@dataclass
class DisaggSimResult(SimResult):
    """A virtual-time P/D run: the request timings and steps, plus each request's KV job,
    which worker ran each step, and the link's totals."""

    step_workers: list[str] = field(default_factory=list)
    jobs: list[KvJob] = field(default_factory=list)
    link_bytes: int = 0
    link_busy_s: float = 0.0


def cluster_stats(cluster: DisaggCluster) -> EngineStats:
    """Prompt and prefix-cache counters from the prefill workers, the rest from decode."""
    out = EngineStats()
    for worker in cluster.workers:
        s = worker.core.stats
        if worker.role == "prefill":
            out.prompt_tokens += s.prompt_tokens
            out.prefix_query_tokens += s.prefix_query_tokens
            out.prefix_hit_tokens += s.prefix_hit_tokens
        else:
            out.generation_tokens += s.generation_tokens
            out.finished_requests += s.finished_requests
        out.preemptions += s.preemptions
        out.evictions += s.evictions
        out.steps += s.steps
        out.aborted_requests += s.aborted_requests
        out.rejected_requests += s.rejected_requests
    return out


def simulate_disagg(
    config: EngineConfig,
    disagg: DisaggConfig,
    arrivals: Iterable[tuple[float, EngineRequest]],
    *,
    record_steps: bool = True,
    release: Release | None = None,
) -> DisaggSimResult:
    """A what-if P/D run: fresh workers serving ``arrivals`` on a virtual clock; a request
    reaches the cluster ``host_overhead_per_request_s`` after its arrival (the frontend)."""
    front = config.host_overhead_per_request_s
    steps: list[StepRecord] = []
    step_workers: list[str] = []

    def on_step(worker: Worker, result: StepResult, start: float, _end: float) -> None:
        steps.append(StepRecord.of(result, start))
        step_workers.append(f"{worker.role}-{worker.index}")

    jobs: list[KvJob] = []
    cluster = DisaggCluster(
        config, disagg, on_step=on_step if record_steps else None, on_admit=jobs.append
    )
    pending = ArrivalQueue(arrivals)
    timings: dict[str, RequestTiming] = {}

    def record(updates: list[tuple[float, RequestUpdate]]) -> None:
        for t, update in updates:
            timing = timings[update.request_id]
            if update.new_tokens:
                timing.token_times.append(t)
            if update.finished:
                timing.num_cached_tokens = update.num_cached_tokens
                timing.finish_reason = update.finish_reason
                end_request(timing, t, release, pending)

    gc_was_enabled = gc.isenabled()
    gc.disable()
    now = 0.0
    try:
        while True:
            t_event = cluster.next_event_s()
            if pending and (t_event is None or pending.next_s() + front < t_event):
                now = max(now, pending.next_s() + front)
                record(cluster.advance(now))
                while pending and pending.next_s() + front <= now:
                    t, req = pending.pop()
                    timing = timings[req.request_id] = RequestTiming(req.request_id, t)
                    try:
                        cluster.submit(req, now)
                    except RequestRejected as exc:
                        timing.error = str(exc)
                        end_request(timing, now, release, pending)
                record(cluster.advance(now))
                continue
            if t_event is None:
                break
            now = t_event
            record(cluster.advance(now))
    finally:
        if gc_was_enabled:
            gc.enable()
    return DisaggSimResult(
        timings,
        steps,
        now,
        cluster_stats(cluster),
        step_workers=step_workers,
        jobs=jobs,
        link_bytes=cluster.link.bytes_sent,
        link_busy_s=cluster.link.busy_s,
    )


class RealTimeDisaggDriver:
    """Serves live clients from a cluster: the surface of ``RealTimeDriver`` for a server."""

    def __init__(
        self,
        cluster: DisaggCluster,
        time_scale: float = 1.0,
    ) -> None:
        self.cluster = cluster
        self.time_scale = time_scale
        self._queues: dict[str, UpdateSink] = {}
        self._wake = asyncio.Event()
        self._stopped = False
        self._anchor: float | None = None

    def _model_now(self) -> float:
        loop = asyncio.get_running_loop()
        if self._anchor is None:
            self._anchor = loop.time()
        return (loop.time() - self._anchor) / self.time_scale

    def loop_time(self, t: float) -> float:
        """The event loop's time of modelled time ``t``."""
        assert self._anchor is not None
        return self._anchor + t * self.time_scale

    def submit_to(self, req: EngineRequest, sink: UpdateSink) -> None:
        """Queue a request whose updates go to ``sink.put_nowait``. Raises RequestRejected."""
        self.cluster.submit(req, self._model_now())
        self._queues[req.request_id] = sink
        self._wake.set()

    def submit(self, req: EngineRequest) -> asyncio.Queue[RequestUpdate]:
        queue: asyncio.Queue[RequestUpdate] = asyncio.Queue()
        self.submit_to(req, queue)
        return queue

    def abort(self, request_id: str) -> None:
        self._queues.pop(request_id, None)
        self.cluster.abort(request_id)
        self._wake.set()

    def stop(self) -> None:
        self._stopped = True
        self._wake.set()

    async def run(self) -> None:
        """Sleep until each event's time, run it, deliver the decode workers' tokens."""
        loop = asyncio.get_running_loop()
        self._model_now()
        while not self._stopped:
            self._wake.clear()
            self._deliver(self.cluster.advance(self._model_now()))
            t_next = self.cluster.next_event_s()
            if t_next is None:
                await self._wake.wait()
                continue
            assert self._anchor is not None
            deadline = self._anchor + t_next * self.time_scale
            early = deadline - SPIN_S - loop.time()
            if early > 0:
                try:
                    await asyncio.wait_for(self._wake.wait(), early)
                    continue  # a submit or abort: look again
                except TimeoutError:
                    pass
            await sleep_until(loop.time, deadline, SPIN_S)
            self._deliver(self.cluster.advance(t_next))

    def _deliver(self, updates: list[tuple[float, RequestUpdate]]) -> None:
        queues = self._queues
        for _, update in updates:
            queue = queues.get(update.request_id)
            if queue is None:
                continue
            queue.put_nowait(update)
            if update.finished:
                del queues[update.request_id]


__all__ = ["DisaggConfig", "OnStep", "OnTransfer", "RealTimeDisaggDriver", "simulate_disagg"]
