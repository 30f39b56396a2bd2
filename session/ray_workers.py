"""A plan's shards sent by Ray actors (``bench --ray auto|ADDRESS``), on any host of a cluster.

The same shards and the same worker code as ``session.workers``: each actor runs the
worker's event loop in a thread, with a queue pair in place of the pipe. What differs
across hosts:

* **the clock**: an actor's ``perf_counter`` has its own origin on another host. Before
  it starts, the driver reads the actor's clock ``ALIGN_SAMPLES`` times and keeps the
  reading with the shortest round trip: the offset is the actor's reading minus the
  round trip's midpoint, and half that round trip bounds its error (``run.json`` →
  ``load.ray.clocks``). The actor's run clock is the driver's shifted by that offset.
* **the rows**: an actor journals in a folder of its own host; every ``POLL_S`` the driver
  takes the lines written since and appends them to the run directory's ``shards/<k>``,
  so an actor that dies leaves every row it had written by its last poll.

A dead actor (``ray.kill``, a node lost) is a failed shard, as a dead worker process is.
``ray`` is an optional dependency (``pip install 'prefillscope[ray]'``).
"""

from __future__ import annotations

import queue
import secrets
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from runfmt.names import journal_file
from runfmt.rundir import RunDir
from runtime import event_loop
from runtime.clock import RunClock
from session.live_stats import LiveStats
from session.ray_placement import connect, in_bundle, release, require_ray, reserve
from session.workers import TABLES, ShardJob, WorkerPool, _work, _Worker, post

#: Clock readings taken per actor; the one with the shortest round trip is kept.
ALIGN_SAMPLES = 8
#: How often the driver collects an actor's messages and rows.
POLL_S = 0.25


class ShardActor:
    """One shard's worker inside a Ray actor (made remote by ``RayPool``)."""

    def __init__(self) -> None:
        self._inbox: queue.Queue[tuple[Any, ...]] = queue.Queue()
        self._outbox: list[tuple[Any, ...]] = []
        self._lock = threading.Lock()
        self._offsets: dict[str, int] = {}
        self._folder: Path | None = None
        self._thread: threading.Thread | None = None

    def perf_counter(self) -> float:
        return time.perf_counter()

    def where(self) -> dict[str, str]:
        """The node this actor runs on: Ray's id of it and its address."""
        import ray

        return {
            "node": ray.get_runtime_context().get_node_id(),
            "host": ray.util.get_node_ip_address(),
        }

    def start(self, job: ShardJob) -> None:
        self._folder = Path(tempfile.mkdtemp(prefix="prefillscope-shard-"))
        local = replace(job, folder=self._folder)
        thread = threading.Thread(target=event_loop.run, args=(_work(local, self),))
        thread.start()  # then seen by poll (a concurrent call): never as "not alive yet"
        self._thread = thread

    # the worker's side of the "pipe"
    def send(self, message: tuple[Any, ...]) -> None:
        with self._lock:
            self._outbox.append(message)

    def recv(self) -> tuple[Any, ...]:
        return self._inbox.get()

    # the driver's side
    def tell(self, message: tuple[Any, ...]) -> None:
        self._inbox.put(message)

    def poll(self) -> tuple[dict[str, bytes], list[tuple[Any, ...]], bool]:
        """New journal lines by table, the messages since the last poll, and whether
        the shard has ended (nothing more will come)."""
        ended = self._thread is not None and not self._thread.is_alive()
        rows = {}
        for name in TABLES:
            path = (self._folder or Path()) / journal_file(name)
            if self._folder is None or not path.exists():
                continue
            with path.open("rb") as fh:
                fh.seek(self._offsets.get(name, 0))
                data = fh.read()
            complete = data[: data.rfind(b"\n") + 1]
            self._offsets[name] = self._offsets.get(name, 0) + len(complete)
            if complete:
                rows[name] = complete
        with self._lock:
            messages, self._outbox = self._outbox, []
        return rows, messages, ended


class RayPool(WorkerPool):
    """``WorkerPool`` with Ray actors for processes (``address``: ``auto``, a cluster's
    address, or ``local`` for a cluster of this host started here)."""

    def __init__(
        self,
        jobs: list[ShardJob],
        run: RunDir,
        clock: RunClock,
        stats: LiveStats,
        *,
        address: str,
        report: dict[str, Any],
        placement: str | None = None,
    ) -> None:
        super().__init__(jobs, run, clock, stats)
        self.address = address
        self.report = report
        self.placement = placement
        self._group: Any = None

    def _start(self) -> None:
        ray = connect(self.address)
        self._group = reserve(ray, self.placement, len(self.jobs))
        remote = ray.remote(num_cpus=1, max_concurrency=4)(ShardActor)
        assert self._loop is not None
        call = self._loop.call_soon_threadsafe
        clocks = []
        run_token = secrets.token_hex(4)
        for bundle, job in enumerate(self.jobs):
            actor = remote.options(
                name=f"prefillscope-{run_token}-shard-{job.index}",
                scheduling_strategy=in_bundle(self._group, bundle),
            ).remote()
            offset, error = self._align(ray, actor)
            where = ray.get(actor.where.remote())
            clocks.append({"shard": job.index, **where, "offset_s": offset, "error_s": error})
            shifted = RunClock(t0=job.clock.t0 + offset, wall_t0=job.clock.wall_t0)
            actor.start.remote(replace(job, clock=shifted))
            worker = _Worker(job, actor, None)
            self._workers.append(worker)
            threading.Thread(target=self._listen, args=(worker, call), daemon=True).start()
        errors = [c["error_s"] for c in clocks]
        self.report["ray"] = {
            "address": self.address,
            "placement": self.placement or "cpu",
            "actors": len(clocks),
            "nodes": len({c["node"] for c in clocks}),
            "clock_alignment_error_max_s": max(errors),
            "clocks": clocks,
        }

    @staticmethod
    def _align(ray: Any, actor: Any) -> tuple[float, float]:
        """(offset, error bound) of the actor's ``perf_counter`` against this process's."""
        best: tuple[float, float] | None = None
        for _ in range(ALIGN_SAMPLES):
            before = time.perf_counter()
            theirs = ray.get(actor.perf_counter.remote())
            after = time.perf_counter()
            if best is None or after - before < best[1]:
                best = (theirs - (before + after) / 2, after - before)
        assert best is not None
        return best[0], best[1] / 2

    def _listen(self, worker: _Worker, call: Any) -> None:
        ray = require_ray()
        folder = worker.job.folder
        folder.mkdir(parents=True, exist_ok=True)
        while True:
            try:
                rows, messages, ended = ray.get(worker.process.poll.remote())
            except Exception:  # RayActorError and kin: the actor is gone
                post(call, self._on_gone, worker)
                return
            try:
                for name, data in rows.items():
                    with (folder / journal_file(name)).open("ab") as fh:
                        fh.write(data)
            except FileNotFoundError:  # merged and removed: the run has ended
                return
            for message in messages:
                if not post(call, self._on_message, worker, message):
                    return
            if ended:
                post(call, self._on_gone, worker)
                return
            time.sleep(POLL_S)

    def _tell(self, worker: _Worker, message: tuple[Any, ...]) -> None:
        worker.process.tell.remote(message)

    def _reap(self) -> None:
        ray = require_ray()
        for worker in self._workers:
            ray.kill(worker.process)
        if self._group is not None:
            release(self._group)

    def _death(self, worker: _Worker) -> str:
        return "its Ray actor is gone"
