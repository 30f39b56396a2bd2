"""Running a plan against a target: the load generator's public entry point.

``await run_load(plan, target, run_dir, clock, options, observer)`` (or, to keep the
partial result when the run is cancelled, ``LoadRun(...).run()`` and its ``result``).

What is sent when (the contract with ``workloads``):

1. The cache protocol (``options.cache_protocol``) is carried out first.
2. ``warmup`` requests go next, in plan order, and are waited for; they are written
   with ``warmup = true`` so the statistics exclude them.
3. The measured phase starts at ``schedule_t0_s``; every time below is relative to it.
   * *Open loop*: a request with ``intended_s`` is due at ``schedule_t0_s + intended_s``
     and is sent then, whatever is still in flight (see :mod:`runtime.timing`). With
     ``max_concurrency`` the excess waits in the client: ``intended_s`` stays the
     schedule time, so that wait counts in intended-time latency.
   * *Closed loop*: requests with ``intended_s = None`` that are not later turns of a
     session are served, in plan order, by ``Plan.concurrency`` users, each sending its
     next request when its previous one ends (intended = that moment).
   * *Sessions*: turn k >= 1 of a session is released ``think_time_s`` after turn k-1
     ended; its prompt is turn k-1's full prompt + the token ids turn k-1 returned +
     the turn's own (new) tokens.
   * *Duration*: with ``options.duration_s`` nothing is released later than that long
     after ``schedule_t0_s`` (closed-loop users stop taking requests, later turns are
     not sent: one due after the deadline is dropped at once, not after its think
     time); requests in flight then finish normally. This is how "8 users for
     60 s" runs: the plan is sized generously and the clock ends it.
4. Every request's record is appended to the run directory when it ends: a row of
   ``requests`` and its chunk arrival times in ``chunks``, written with those of the
   requests that ended in the same pass of the event loop (``loadgen.finished``).

A run ends ``complete``, or ``interrupted``: when the server stops answering (a
connection refused, confirmed by a fresh connection attempt) the run stops sending,
lets in-flight requests end with their own error class for a short grace time, cancels
the rest (``cancelled``) and returns; when the run itself is cancelled (Ctrl-C), in-flight
requests are recorded ``cancelled`` and the ``CancelledError`` propagates, with
``LoadRun.result`` holding the interrupted result. A write to the run directory that
fails (the disk full: ``RunDir.watch``) stops it as a signal would — nothing more is
sent, the requests in flight are cancelled at once and recorded ``cancelled`` where
anything can still be written — and it returns ``failed`` with the run directory's
reason (``no space left on DIR``). Any other exception (bad input found
on the way, such as a cache reset against an unreachable server) leaves it ``failed``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from dataclasses import replace

import aiohttp

from loadgen.adapters import EventStream, Outgoing, RequestParams, adapter_for
from loadgen.adapters.base import TokenIds
from loadgen.arrivals import ArrivalStamps
from loadgen.cache import CacheProtocol, apply_cache_protocol
from loadgen.connections import preconnect, unreachable
from loadgen.exchange import ChunkTimes, Exchanger, Prepared
from loadgen.failures import Failure, fail_record
from loadgen.finished import FinishedJournal
from loadgen.health import ClientMonitor
from loadgen.inflight import InflightTasks
from loadgen.load_options import LoadObserver, LoadOptions, LoadResult, new_record, observer_hook
from loadgen.plan_check import check_load, split_plan
from loadgen.records import ErrorKind, RequestRecord
from loadgen.sessions import SessionBook
from loadgen.target import Target
from runfmt.names import CHUNKS_TABLE, CLIENT_TABLE, REQUESTS_TABLE
from runfmt.rundir import RunDir
from runtime.clock import RunClock
from runtime.json_codec import dumps
from runtime.timing import Waker, sleep_until
from workloads.plan import PackedRequests, Plan, RequestSpec

#: How long before its send time an open-loop request is built (a 32k-token prompt
#: takes a few milliseconds to materialise and encode) and started, so that its
#: connection is taken or opened (milliseconds on a busy VM) ahead too: it then waits in
#: its body write until the send time (``exchange._StampedBody``).
PREPARE_AHEAD_S = 0.03


class LoadRun:
    """One execution of a plan; see the module docstring for what is sent when."""

    def __init__(
        self,
        plan: Plan,
        target: Target,
        run_dir: RunDir,
        clock: RunClock,
        options: LoadOptions | None = None,
        observer: LoadObserver | None = None,
    ) -> None:
        self.plan = plan
        self.target = target
        self.run_dir = run_dir
        self.clock = clock
        self.options = options or LoadOptions()
        self.adapter = adapter_for(
            target,
            RequestParams(
                ignore_eos=self.options.ignore_eos,
                temperature=self.options.temperature,
                logprobs=self.options.logprobs,
            ),
        )
        self.sessions = SessionBook(plan, self.options.text_tokens)
        self.result = LoadResult(planned=len(plan), composed_prompts=self.sessions.composed)
        self._on_send = observer_hook(observer, "on_send")
        self._on_finish = observer_hook(observer, "on_finish")
        self._observer = observer
        self._journal = FinishedJournal(run_dir.table(REQUESTS_TABLE), run_dir.table(CHUNKS_TABLE))
        #: In-flight requests are cancelled at once, not given ``drain_s`` (a write failed).
        self._abort = False
        self._cap = (
            asyncio.Semaphore(self.options.max_concurrency)
            if self.options.max_concurrency
            else None
        )
        self._cache = CacheProtocol("warm", "warm")
        self._tasks = InflightTasks(self._failed)
        self._stop = asyncio.Event()
        self._exchanger: Exchanger | None = None
        self._probing = False
        self._error: BaseException | None = None
        self._t0 = 0.0
        self._waker = Waker(self.clock.now, self.options.spin_s)
        run_dir.watch(self._write_failed)

    # -- entry point ----------------------------------------------------------------------
    async def run(self) -> LoadResult:
        """Send the plan; return how it went (``status`` complete or interrupted)."""
        warmups, open_loop, closed_loop = split_plan(self.plan)
        check_load(self.plan, closed_loop, self.options, self.target, self.adapter, self._users())
        self.result.started_s = self.clock.now()
        connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=None)
        async with aiohttp.ClientSession(
            connector=connector, timeout=aiohttp.ClientTimeout(total=None), auto_decompress=False
        ) as session:
            stamps = ArrivalStamps(asyncio.get_running_loop())
            self._exchanger = Exchanger(
                session,
                self.adapter,
                self.clock,
                timeout_s=self.options.request_timeout_s,
                stamps=stamps,
                on_send=self._on_send,
                on_first_token=observer_hook(self._observer, "on_first_token"),
                on_stream=observer_hook(self._observer, "on_stream"),
                waker=self._waker,
                max_event_bytes=self.options.max_event_bytes,
            )
            monitor = ClientMonitor(
                self.clock, self.run_dir.table(CLIENT_TABLE), self.options.health_interval_s
            )
            monitor_task = asyncio.create_task(monitor.run())
            try:
                self._cache = self.options.cache_preset or await apply_cache_protocol(
                    session, self.target, self.options.cache_protocol
                )
                self.result.cache_protocol = self._cache.describe()
                await preconnect(
                    session, self.target, self.options.preconnect, self._exchanger.answered
                )
                if warmups:
                    users = self.options.warmup_concurrency or self._users() or 8
                    await self._phase([], iter(warmups), users)
                if not self._stop.is_set():
                    start_at = self.options.start_at
                    t0 = self.clock.now() if start_at is None else await start_at()
                    await sleep_until(self.clock.now, t0, self.options.spin_s)
                    self._t0 = self.result.schedule_t0_s = t0
                    await self._phase(open_loop, iter(closed_loop), self._users())
            except asyncio.CancelledError:
                self._interrupt("cancelled (Ctrl-C)")
                await self._tasks.cancel_all()
                raise
            except Exception as exc:
                self._interrupt(f"{type(exc).__name__}: {exc}", status="failed")
                await self._tasks.cancel_all()
                raise
            finally:
                self._journal.flush()
                stamps.close()
                monitor_task.cancel()
                await asyncio.gather(monitor_task, return_exceptions=True)
                await monitor.sample()
                self._conclude(monitor)
        if self._error is not None:
            raise self._error
        return self.result

    # -- phases ---------------------------------------------------------------------------
    async def _phase(
        self, open_loop: Sequence[RequestSpec], closed: Iterator[RequestSpec], users: int | None
    ) -> None:
        """Run dispatchers until every request they release (and its later turns) ended.

        When the run is stopped, the open-loop timer is cancelled at once; closed-loop
        users and in-flight requests get ``drain_s`` to end on their own (a dead server
        fails them quickly, with their real error class) before the rest are cancelled.
        """
        if not open_loop and not users:
            return
        self._tasks.idle.clear()
        timer = self._tasks.spawn(self._open_loop(open_loop)) if open_loop else None
        for _ in range(users or 0):
            self._tasks.spawn(self._user(closed))
        stop = asyncio.create_task(self._stop.wait())
        idle = asyncio.create_task(self._tasks.idle.wait())
        try:
            await asyncio.wait([stop, idle], return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
            idle.cancel()
        if self._stop.is_set():
            if timer is not None:
                timer.cancel()
            if self._tasks.tasks and not self._abort:
                await asyncio.wait(set(self._tasks.tasks), timeout=self.options.drain_s)
            await self._tasks.cancel_all()

    async def _open_loop(self, specs: PackedRequests) -> None:
        """Start each request ``PREPARE_AHEAD_S`` before its intended time.

        Every request due within that window is built and started in one pass; each
        then holds its bytes until its own intended time, so a high rate never
        under-delivers and the client's set-up work is not counted as dispatch lag.
        A request is read from the plan (built) only when it is started.
        """
        i, n = 0, len(specs)
        while i < n:
            # the send itself waits on the Waker; being early here needs no precision
            prepare_at = self._t0 + specs.field(i, "intended_s") - PREPARE_AHEAD_S
            await sleep_until(self.clock.now, prepare_at, self.options.spin_s)
            horizon = self.clock.now() + PREPARE_AHEAD_S
            while i < n and self._t0 + specs.field(i, "intended_s") <= horizon:
                spec = specs[i]
                due = self._t0 + spec.intended_s
                prepared = replace(self._prepare(spec), not_before=due)
                self._tasks.spawn(self._request(spec, due, prepared))
                i += 1
            await asyncio.sleep(0)  # let them start before anything else is done

    async def _user(self, specs: Iterator[RequestSpec]) -> None:
        """A closed-loop user: the next request of the shared queue when the last one ends."""
        for spec in specs:
            if self._stop.is_set() or self._expired():
                return
            await self._request(spec, self.clock.now(), self._prepare(spec))

    async def _later_turn(self, spec: RequestSpec, previous: RequestRecord) -> None:
        due = (previous.end_s or self.clock.now()) + spec.think_time_s
        if self._past_deadline(due):
            return  # it would be released after the duration: no think time is waited out
        prepared = self._prepare(spec)
        tokens = await self.sessions.settle(spec)  # a text history's ids, in the think time
        if tokens is not None:
            prepared.prompt_tokens = tokens
        await self._waker.until(due)
        if not self._stop.is_set() and not self._expired():
            await self._request(spec, due, prepared)

    def _expired(self) -> bool:
        """Whether the measured phase has run for ``options.duration_s`` (never in warm-up)."""
        return self._past_deadline(self.clock.now())

    def _past_deadline(self, t_s: float) -> bool:
        """Whether run time ``t_s`` is ``options.duration_s`` or more into the measured phase."""
        limit = self.options.duration_s
        t0 = self.result.schedule_t0_s
        return limit is not None and t0 is not None and t_s >= t0 + limit

    # -- one request ----------------------------------------------------------------------
    def _prepare(self, spec: RequestSpec) -> Prepared:
        """The request's prompt and encoded body (sessions: the composed history)."""
        full = self.sessions.full_prompt(spec)
        prompt: TokenIds | str
        if isinstance(full, str):
            prompt = full
            prompt_tokens = None if spec.composes_history else spec.prompt_len
        else:  # the ids as numpy gives them: ``dumps`` writes the array, no list between
            prompt = full.token_ids(self.target.vocab_size or 0)
            prompt_tokens = len(prompt)
        more = self.sessions.has_next(spec)
        want_ids = self.options.keep_token_ids or more
        salt = self._cache.salt_for(spec.tenant)
        body = self.adapter.body(Outgoing(spec, prompt, salt, want_ids))
        want_text = (more and isinstance(full, str)) or self.options.keep_text
        return Prepared(dumps(body), prompt, prompt_tokens, want_ids, want_text)

    async def _request(self, spec: RequestSpec, intended_s: float, prepared: Prepared) -> None:
        record = new_record(spec, intended_s)
        chunks = ChunkTimes()
        self.result.released += 1
        try:
            if self._cap is None:
                stream = await self._send(spec, prepared, record, chunks)
            else:
                async with self._cap:  # a wait past the intended time is the server's pace
                    record.released_s = max(intended_s, self.clock.now())
                    stream = await self._send(spec, prepared, record, chunks)
        except asyncio.CancelledError:
            if record.error_kind is None:  # still waiting in the client: never sent
                fail_record(record, Failure(ErrorKind.CANCELLED, "cancelled before it was sent"))
                record.end_s = self.clock.now()
            self._write(record, chunks)
            raise
        finally:
            # sent: its bytes left (stamped), not merely handed to the exchanger; a request
            # still held for its send time, or refused a connection, was released, not sent
            if record.sent_s is not None:
                self.result.sent += 1
        text = "".join(stream.text) if stream.text is not None else None
        if self.options.keep_text:
            record.output_text = text
        self._write(record, chunks)
        self.sessions.ended(spec, record.output_token_ids, text)
        if record.error_kind in (ErrorKind.CONNECT, ErrorKind.DROPPED):
            self._check_server()
        following = self.sessions.next_turn(spec)
        if following is not None and not self._stop.is_set():
            self._tasks.spawn(self._later_turn(following, record))

    async def _send(
        self, spec: RequestSpec, prepared: Prepared, record: RequestRecord, chunks: ChunkTimes
    ) -> EventStream:
        if self._stop.is_set():
            raise asyncio.CancelledError
        assert self._exchanger is not None
        return await self._exchanger.send(prepared, record, chunks)

    def _write(self, record: RequestRecord, chunks: ChunkTimes) -> None:
        self._journal.add(record, chunks)  # written after this pass of the loop
        self.result.finished += 1
        if record.ok:
            self.result.ok += 1
        else:
            kind = str(record.error_kind)
            self.result.errors[kind] = self.result.errors.get(kind, 0) + 1
        if self._on_finish is not None:
            self._on_finish(record)

    def _failed(self, error: BaseException) -> None:
        """A task of the run raised: the run fails with it."""
        self._error = error
        self._interrupt(f"internal error: {error!r}", status="failed")

    # -- the server going away ------------------------------------------------------------
    def _check_server(self) -> None:
        """After a refused connection: is the server gone? Stop the run if so."""
        if self._probing or self._stop.is_set():
            return
        self._probing = True
        task = asyncio.create_task(self._probe_server())
        task.add_done_callback(lambda _: setattr(self, "_probing", False))

    async def _probe_server(self) -> None:
        why = await unreachable(self.target.base_url)
        if why is not None:
            self._interrupt(
                f"server at {self.target.base_url} stopped answering "
                f"({why}) at t={self.clock.now():.3f}s"
            )

    def _write_failed(self, reason: str) -> None:
        """A write to the run directory failed: stop now, cancel what is in flight."""
        self._abort = True
        self._interrupt(reason, status="failed")

    def stop(self, reason: str) -> None:
        """Stop sending (``interrupted`` for ``reason``): what is in flight may end."""
        self._interrupt(reason)

    def _interrupt(self, reason: str, status: str = "interrupted") -> None:
        """Stop sending; the first reason given is the one recorded."""
        if self.result.status == "running":
            self.result.status = status
            self.result.reason = reason
        self._stop.set()

    # -- set-up and wrap-up ---------------------------------------------------------------
    def _users(self) -> int | None:
        return self.options.concurrency or self.plan.concurrency

    def _conclude(self, monitor: ClientMonitor) -> None:
        if self.result.status == "running":
            self.result.status = "complete"
        self.result.ended_s = self.clock.now()
        self.result.client = monitor.summary(self._waker)


async def run_load(
    plan: Plan,
    target: Target,
    run_dir: RunDir,
    clock: RunClock,
    options: LoadOptions | None = None,
    observer: LoadObserver | None = None,
) -> LoadResult:
    """Send ``plan`` to ``target``, recording into ``run_dir`` on ``clock``'s time axis."""
    return await LoadRun(plan, target, run_dir, clock, options, observer).run()
