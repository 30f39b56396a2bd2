"""A plan's shards sent by worker processes, one event loop per core, on one run clock.

Each worker (a ``forkserver`` process, ``spawn`` where the platform has no forkserver: no
fork of a running event loop; see ``worker_context``) gets its shard
(``session.shards``) and the run clock's origin: ``time.perf_counter`` is the system's
monotonic clock on Linux, the same in every process, so each worker's timestamps are on
the parent's time axis as they are. A worker runs ``loadgen.run.LoadRun`` on its shard,
journals its rows in its own folder (``shards/<k>`` of the run directory) and feeds the
parent's live statistics a few times a second. The measured phase starts at one
instant for all: each worker, once its warm-up is done, says ``ready`` and waits for the
parent's ``start`` time, so an open-loop request keeps its planned send time and the
union of the shards' schedules is the plan's.

The parent merges the workers' journals into the run directory's (the same tables, the
same format as a one-process run) and their results into one ``LoadResult``, with a
``shards`` list saying how each went. A worker that dies is a failed shard: its
journaled rows are kept, the run is ``interrupted``. A stop (Ctrl-C, SIGTERM) is passed
on: the workers record their in-flight requests ``cancelled`` and end.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import multiprocessing
import shutil
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import aiohttp

from loadgen.cache import apply_cache_protocol
from loadgen.load_options import LoadOptions, LoadResult
from loadgen.run import LoadRun
from loadgen.target import Target
from runfmt.codec import decode, encode
from runfmt.names import (
    CHUNKS_TABLE,
    CLIENT_TABLE,
    REQUESTS_TABLE,
    SHARDS_DIR,
    WORKER_COLUMN,
)
from runfmt.run_result import RunResult
from runfmt.rundir import RunDir, RunWriteError
from runtime import event_loop, signals
from runtime.child import become_child
from runtime.clock import RunClock
from session.bench_plan import full_text_tokens, plan_tokenizer
from session.live_stats import LiveStats
from session.shard_results import merge_results
from session.shards import Shard
from workloads.plan import Plan

#: How often a worker sends its live statistics.
FEED_INTERVAL_S = 0.25
#: Lead time of the common start: every worker must have read it before it is due.
START_MARGIN_S = 0.1
#: How long stopped workers get to record their in-flight requests and say ``done``.
STOP_GRACE_S = 10.0
TABLES = (REQUESTS_TABLE, CHUNKS_TABLE, CLIENT_TABLE)


@dataclass
class ShardJob:
    """Everything a worker needs, picklable: its plan (annotated by the parent's oracle
    when that runs before sending), the target, the clock, the options (without
    callables), and the ``--tokenizer`` (and key) that gives later turns' text histories
    their server token ids, when there are any."""

    index: int
    plan: Plan
    target: Target
    clock: RunClock
    folder: Path
    options: LoadOptions
    tokenizer: tuple[str | None, str | None] | None = None


# -- the worker's side ----------------------------------------------------------------------
def worker_main(job: ShardJob, conn: Any) -> None:
    """A worker process: send the shard, journal it, report; the parent decides the end."""
    become_child()
    event_loop.run(_work(job, conn))


def _text_tokens(job: ShardJob) -> Callable[[str], list[int]] | None:
    """The text-history tokenizer of later turns, rebuilt in this process."""
    if job.tokenizer is None:
        return None
    source, key = job.tokenizer
    return full_text_tokens(job.target.api, plan_tokenizer(job.target, source, key))


async def _work(job: ShardJob, conn: Any) -> None:
    loop = asyncio.get_running_loop()
    started: asyncio.Future[float] = loop.create_future()
    send_lock = threading.Lock()

    def send(message: tuple[Any, ...]) -> None:
        with send_lock, contextlib.suppress(OSError):
            conn.send(message)

    async def start_at() -> float:
        send(("ready", job.index))
        return await started

    feed = LiveStats(job.clock, total=len(job.plan))
    run_dir = RunDir(job.folder, create=True)
    options = replace(job.options, start_at=start_at, text_tokens=_text_tokens(job))
    load = LoadRun(job.plan, job.target, run_dir, job.clock, options, feed)
    task = asyncio.create_task(load.run())

    def on_message(message: tuple[Any, ...]) -> None:
        if message[0] == "start" and not started.done():
            started.set_result(message[1])
        elif message[0] == "stop":
            load.stop(message[1])  # the reason recorded; in-flight requests: cancelled
            task.cancel()

    def listen() -> None:
        while True:
            try:
                message = conn.recv()
            except (EOFError, OSError):
                message = ("stop", "the parent process is gone")
            loop.call_soon_threadsafe(on_message, message)
            if message[0] == "stop":
                return

    threading.Thread(target=listen, daemon=True).start()
    # SIGTERM to the whole process group (a CI's cancel): this shard stops as the run does
    terminated = ("stop", f"{signals.STOP_REASON_PREFIX}{signals.describe(signal.SIGTERM)})")
    if threading.current_thread() is threading.main_thread():  # a Ray actor runs it in a thread
        loop.add_signal_handler(signal.SIGTERM, on_message, terminated)

    async def pump() -> None:
        while True:
            await asyncio.sleep(FEED_INTERVAL_S)
            send(("live", job.index, feed.take_pending()))

    pumping = asyncio.create_task(pump())
    error: str | None = None
    gc.freeze()  # the shard's plan stays out of every collection (see runtime.collector)
    try:
        await task
    except asyncio.CancelledError:
        pass
    except Exception as exc:  # recorded in the result; the parent fails the shard
        error = f"{type(exc).__name__}: {exc}"
    finally:
        pumping.cancel()
        run_dir.close(compact=False)
    result = load.result.section()
    if error is not None and result.status != "failed":
        result = replace(result, status="failed", reason=error)
    send(("live", job.index, feed.take_pending()))
    # the codec's JSON across the pipe (a section's read-only mappings do not pickle)
    send(("done", job.index, encode(result), load.result.composed_prompts))


# -- the parent's side ----------------------------------------------------------------------
def worker_context() -> Any:
    """How worker processes start: from a fork server that imported this module once.

    A ``spawn`` worker is a fresh interpreter that imports this module, aiohttp, numpy and
    the load generator again: ~0.35 CPU-s each, measured on a 2-core machine. The fork
    server (started by the first worker of a run, in the command's process group) imports
    them once and forks every worker from that state, which has no event loop and no
    thread but its own; a fork costs milliseconds. Where the platform has no fork server,
    ``spawn``. The fork server is stopped with the run (``stop_fork_server``): the next
    run's starts afresh, from the environment and working directory of its own time.
    """
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([__name__])
    return context


def join_all(processes: list[Any], grace_s: float) -> None:
    """Join the processes within one grace period in all, not one each, then kill the rest."""
    deadline = time.monotonic() + grace_s
    for process in processes:
        process.join(max(0.0, deadline - time.monotonic()))
    for process in processes:
        if process.is_alive():
            process.kill()
            process.join()


def stop_fork_server() -> None:
    """Stop the fork server the run's workers came from, if one is running. The standard
    library stops it only when the command's process exits (it reads the end of a pipe);
    a run in a longer-lived process (an A/B, a sweep, a test) stops it here."""
    from multiprocessing import forkserver

    stop = getattr(forkserver._forkserver, "_stop", None)  # private; kept by 3.11 to 3.14
    if stop is not None:
        with contextlib.suppress(OSError):  # already gone (a SIGHUP to the process group)
            stop()


def post(call: Callable[..., Any], *args: Any) -> bool:
    """Hand a worker's news to the parent's loop (``call``: its ``call_soon_threadsafe``);
    False once that loop is closed: the run is over and a listener has nothing to do."""
    try:
        call(*args)
    except RuntimeError:  # "Event loop is closed"
        return False
    return True


@dataclass
class _Worker:
    job: ShardJob
    process: Any
    conn: Any
    ready: bool = False
    result: RunResult | None = None
    composed: dict[str, Any] = field(default_factory=dict)
    gone: bool = False


class WorkerPool:
    """Runs ``jobs`` in worker processes, feeding ``stats``; ``run()`` returns the merged
    result once every worker is done (or gone). Cancelling ``run()`` stops the workers."""

    def __init__(self, jobs: list[ShardJob], run: RunDir, clock: RunClock, stats: LiveStats):
        self.jobs = jobs
        self.run_dir = run
        self.clock = clock
        self.stats = stats
        self.result = LoadResult(planned=sum(len(job.plan) for job in jobs))
        self._workers: list[_Worker] = []
        self._changed = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None

    async def run(self) -> LoadResult:
        self._loop = asyncio.get_running_loop()
        starting = asyncio.ensure_future(asyncio.to_thread(self._start))
        try:
            await asyncio.shield(starting)
            await self._until(lambda w: w.ready or w.gone)
            t0 = self.clock.now() + START_MARGIN_S
            for worker in self._workers:
                self._tell(worker, ("start", t0))
            await self._until(lambda w: w.gone)
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):  # every worker started is one to stop
                await asyncio.shield(starting)
            self._stop_all(signals.stop_reason())
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(STOP_GRACE_S):
                    await asyncio.shield(self._until(lambda w: w.gone))
            raise
        finally:  # merged once every worker has ended, even after a second stop signal cut
            # the wait short (the reap is bounded: a grace period, then a kill)
            try:
                await signals.finish(asyncio.to_thread(self._reap))
            finally:
                self._conclude()
        return self.result

    def _start(self) -> None:
        context = worker_context()
        assert self._loop is not None
        loop_call = self._loop.call_soon_threadsafe
        for job in self.jobs:
            ours, theirs = context.Pipe()
            process = context.Process(
                target=worker_main, args=(job, theirs), name=f"prefillscope-worker-{job.index}"
            )
            process.daemon = True
            process.start()
            theirs.close()
            worker = _Worker(job, process, ours)
            self._workers.append(worker)
            threading.Thread(target=self._listen, args=(worker, loop_call), daemon=True).start()

    def _listen(self, worker: _Worker, call: Any) -> None:
        while True:
            try:
                message = worker.conn.recv()
            except (EOFError, OSError):
                post(call, self._on_gone, worker)
                return
            if not post(call, self._on_message, worker, message):
                return

    def _on_message(self, worker: _Worker, message: tuple[Any, ...]) -> None:
        kind = message[0]
        if kind == "live":
            self.stats.absorb(message[1], message[2])
        elif kind == "ready":
            worker.ready = True
        elif kind == "done":
            worker.result, worker.composed = decode(RunResult, message[2]), message[3]
        self._changed.set()

    def _on_gone(self, worker: _Worker) -> None:
        worker.gone = True
        self._changed.set()

    async def _until(self, condition: Any) -> None:
        while not all(condition(w) for w in self._workers):
            self._changed.clear()
            dead = [w.job.index for w in self._workers if w.gone and w.result is None]
            if dead:  # a dead shard ends the run, as a dead server does
                self._stop_all(f"stopped: worker {dead[0]} died")
            await self._changed.wait()

    def _tell(self, worker: _Worker, message: tuple[Any, ...]) -> None:
        with contextlib.suppress(OSError, ValueError):
            worker.conn.send(message)

    def _stop_all(self, reason: str) -> None:
        for worker in self._workers:
            if not worker.gone:
                self._tell(worker, ("stop", reason))

    def _reap(self) -> None:
        join_all([worker.process for worker in self._workers], STOP_GRACE_S)
        for worker in self._workers:
            worker.conn.close()
        stop_fork_server()

    def _death(self, worker: _Worker) -> str:
        """How a worker that said nothing more ended."""
        return f"exit code {worker.process.exitcode}"

    def _conclude(self) -> None:
        """Merge the journals and the results (a worker without one failed its shard)."""
        shards, kept_apart = [], False
        for worker in self._workers:
            folder = worker.job.folder
            tags = {CLIENT_TABLE: {WORKER_COLUMN: worker.job.index}}  # each loop's own CPU
            try:
                rows = self.run_dir.absorb_journals(folder, TABLES, tags)
                shutil.rmtree(folder, ignore_errors=True)  # merged: no reader counts it twice
            except RunWriteError:  # the disk full: its rows stay in its folder, read there
                rows, kept_apart = {}, True
            result = worker.result
            if result is None:
                result = LoadResult(
                    status="failed",
                    reason=f"worker {worker.job.index} died ({self._death(worker)})",
                    planned=len(worker.job.plan),
                    finished=rows.get(REQUESTS_TABLE, 0),
                ).section()
            shards.append((worker.job.index, result))
            self.result.composed_prompts.update(worker.composed)
        if not kept_apart:
            shutil.rmtree(self.run_dir.path / SHARDS_DIR, ignore_errors=True)
        merge_results(self.result, shards)


async def worker_pool(
    shards: list[Shard],
    plan: Plan,
    target: Target,
    where: tuple[RunDir, RunClock, LiveStats],
    options: LoadOptions,
    tokenizer: tuple[str | None, str | None] | None = None,
    pool: Callable[..., WorkerPool] = WorkerPool,
) -> WorkerPool:
    """The pool that sends ``shards`` of ``plan`` into the run directory on its clock,
    feeding the live statistics (``where``), with ``options`` split per shard and the
    text-history ``tokenizer`` (source, key) rebuilt in each worker. The cache protocol
    is carried out here, once: every shard sends with the same salt."""
    run, clock, stats = where
    async with aiohttp.ClientSession() as session:
        cache = await apply_cache_protocol(session, target, options.cache_protocol)
    jobs = [
        ShardJob(
            index=shard.index,
            plan=shard.plan(plan),
            target=target,
            clock=clock,
            folder=(run.path / SHARDS_DIR / str(shard.index)).absolute(),
            options=replace(
                options,
                concurrency=shard.concurrency,
                max_concurrency=shard.max_concurrency,
                preconnect=min(
                    options.preconnect,
                    shard.concurrency or shard.max_concurrency or options.preconnect,
                ),
                cache_preset=cache,
                text_tokens=None,
            ),
            tokenizer=tokenizer,
        )
        for shard in shards
    ]
    return pool(jobs, run, clock, stats)
