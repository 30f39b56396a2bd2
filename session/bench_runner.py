"""One bench run, callable from Python: ``await run_bench(BenchOptions(...))``.

What ``prefillscope bench`` does, and what ``diagnose ab`` repeats per arm:

1. resolve the workload (``workloads.spec.load_spec``) and, for a closed loop bounded
   only by ``--duration``, size the plan generously and let the clock end the run;
2. start the embedded engine on a free port (no endpoint given) or detect the target;
3. build the plan (text prompts through the target's tokenizer), add warm-up requests;
4. create the run directory and write ``run.json`` (``status: running``);
5. start the probes — ``/metrics`` scraping and GPU sampling, in a child process
   (``probes.probe_process``) so that their CPU never delays a send or a read — and
   wait for their first sample, so counters have a baseline before the first request
   (at most 1 s: a page that stalls is journaled ``late`` and the load starts);
6. run the prefix oracle's one pass (``session.bench_oracle.RunOracle``), with the block
   size and pool size the server's metrics report (infinite pool when unknown): over
   the plan before sending it, or over what was recorded once the run is over when
   prompts or the requests sent are only known then (later turns, a duration);
7. send the (frozen) plan (``loadgen.run.LoadRun``), feeding the live display;
8. stop the probes, close the run directory (journals → parquet), write
   ``summary.json`` (``probes.latency.summarize_frames`` + the ``server`` section) and the final
   ``run.json``; stop the embedded engine.

A server that dies mid-run leaves an ``interrupted`` run with every finished request
kept; a failed write (the disk full) stops the load as a signal does and leaves a
``failed`` run with its reason (``no space left on DIR``), every row journalled before it
readable, and the last documents written in the space ``RunDir.reserve`` kept (what did
not fit: ``BenchOutcome.unwritten``); a cancellation (Ctrl-C, SIGTERM, SIGHUP:
``runtime.signals``) likewise, the in-flight requests recorded ``cancelled`` and the
cancellation absorbed so the files are still written. Bad input is an ``InputError``
before anything is sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from loadgen.adapters import RequestParams
from loadgen.flavours import EMBEDDED
from loadgen.load_options import LoadOptions, LoadResult
from loadgen.run import LoadRun
from loadgen.smoke import smoke_test
from loadgen.target import Target
from probes.detect import detect_target
from probes.exposition import metrics_url
from probes.probe_process import ProbeProcess, absent_metrics_reason
from runfmt.codec import frozen_map
from runfmt.names import REQUESTS_TABLE, RUN_JSON, SUMMARY_JSON
from runfmt.run import Run
from runfmt.rundir import RunDir, RunWriteError
from runfmt.runinfo import RunInfo
from runtime import redact, signals
from runtime.clock import RunClock
from runtime.collector import frozen_heap
from session.bench_info import probe_settings, run_info
from session.bench_options import BenchOptions
from session.bench_oracle import (
    MetricsMapping,
    RunOracle,
    geometry,
    metrics_mapping,
)
from session.bench_plan import (
    added_requests_note,
    asked_rate,
    build_bench_plan,
    dataset_reuse_note,
    full_text_tokens,
    plan_tokenizer,
    resolve_workload,
    vocab_from_tokenizer,
)
from session.bench_summary import write_summary
from session.exit_status import BenchOutcome
from session.live_stats import Display, LiveStats
from session.ray_placement import check_cluster, check_flags
from session.ray_workers import RayPool
from session.shards import fewer_workers_note, split_plan
from session.workers import WorkerPool, worker_pool
from simengine.settings import EngineSettings
from workloads.errors import InputError
from workloads.plan import Plan
from workloads.tokenizer import HttpTokenizer

if TYPE_CHECKING:
    from probes.prometheus_source import PrometheusSource
    from simengine.engine_process import EngineProcess

#: Connections opened before the first request (at most; fewer for fewer users).
PRECONNECT = 32


# -- run directory ----------------------------------------------------------------------------
def _notice(note: str | None) -> None:
    """A line on stderr about how the run was shaped (none when ``note`` is None)."""
    if note is not None:
        print(f"prefillscope: {note}", file=sys.stderr, flush=True)


def default_out(workload: str, now: float | None = None) -> Path:
    """``runs/<UTC timestamp>-<workload>`` (a trace or spec file by its file name)."""
    when = time.time() if now is None else now
    stamp = datetime.fromtimestamp(when, UTC).strftime("%Y%m%dT%H%M%SZ")
    name = workload.removeprefix("trace:")
    if name != workload or Path(name).suffix:
        name = Path(name).stem
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-") or "run"
    return Path("runs") / f"{stamp}-{name}"


def make_run_dir(path: Path) -> RunDir:
    """A fresh run directory; a folder already holding a run is refused."""
    if (path / RUN_JSON).exists():
        raise InputError("--out", f"{path} already holds a run", "pick a new folder")
    try:
        run = RunDir(path, create=True)
    except OSError as exc:
        raise InputError("--out", f"cannot create {path}: {exc.strerror}") from None
    run.reserve()  # the last run.json and summary.json fit even on a disk filled mid-run
    return run


# -- target ---------------------------------------------------------------------------------
async def open_target(
    options: BenchOptions, stack: contextlib.AsyncExitStack
) -> tuple[Target, EngineProcess | None]:
    """The target to drive: the embedded engine started here, or the endpoint detected."""
    if options.endpoint is None:
        settings = options.engine or EngineSettings.default()
        # A child process, not a thread: sharing the client's interpreter lock would put
        # the engine's own work into the client's timestamps (see simengine.engine_process).
        # Started from this thread, which outlives it (the child dies with its parent).
        # Imported here: a run against an endpoint has no use for the engine's modules.
        from simengine.engine_process import EngineProcess

        engine = EngineProcess(
            settings.config, stream_interval=settings.stream_interval, disagg=settings.disagg
        )
        engine.start()
        stack.push_async_callback(asyncio.to_thread, engine.stop)
        target = await detect_target(
            engine.url,
            backend=EMBEDDED.name,
            api=options.api,
            model=settings.config.model_name,
            vocab_size=settings.config.vocab_size,
        )
        return target, engine
    if options.engine is not None:
        raise InputError(
            "--engine", "configures the embedded engine only", "drop --engine or --endpoint"
        )
    target = await detect_target(
        options.endpoint,
        backend=options.backend,
        api=options.api,
        model=options.model,
        api_key=options.api_key,
        vocab_size=options.vocab_size,
    )
    return target, None


# -- the run ----------------------------------------------------------------------------------
async def run_bench(options: BenchOptions, display: Display | None = None) -> BenchOutcome:
    """Run one benchmark end to end (see the module docstring). ``display`` shows
    progress while the load runs. Raises ``InputError`` for bad input, before sending."""
    # Secrets known from here on are replaced wherever they would be written or printed.
    redact.register(options.api_key)
    redact.register_urls(options.endpoint, options.prometheus)
    redact.register_argv(options.command)
    spec, deadline_s = resolve_workload(options.workload, options.overrides, options.api)
    check_flags(options.ray, options.ray_placement)
    prometheus = None
    if options.prometheus:  # its client library imports requests and more: only when asked
        from probes.prometheus_source import PrometheusSource

        prometheus = PrometheusSource(options.prometheus)
    async with contextlib.AsyncExitStack() as stack:
        target, engine = await open_target(options, stack)
        vocab_from_tokenizer(target, options.tokenizer)
        text_tokenizer = (
            plan_tokenizer(target, options.tokenizer, options.api_key)
            if spec.prompt_format == "text"
            else None
        )
        if isinstance(text_tokenizer, HttpTokenizer):
            stack.callback(text_tokenizer.close)
        plan = build_bench_plan(
            spec,
            target,
            warmup=options.warmup,
            text_tokenizer=text_tokenizer,
            allow_overlong=options.allow_overlong,
        )
        _notice(added_requests_note(plan))
        _notice(dataset_reuse_note(plan))
        if options.smoke_test:
            await smoke_test(
                target,
                token_ids=any(r.text is None for r in plan),
                params=RequestParams(logprobs=options.record_outputs),
                timeout_s=options.timeout_s,
            )
        if options.ray is not None:  # the cluster can hold the shards as placed
            shards = split_plan(plan, options.workers, options.max_concurrency)
            check_cluster(options.ray, options.ray_placement, len(shards))
        run = make_run_dir(options.out or default_out(spec.name))
        clock = RunClock()
        info = run_info(options, spec, plan, target, clock, deadline_s, engine)
        try:
            run.write_json(RUN_JSON, info.to_json())
        except RunWriteError as exc:
            raise InputError(
                "--out", exc.reason, "free some space or pick another folder"
            ) from None
        bench = _Bench(options, plan, target, engine, run, clock, info, deadline_s, prometheus)
        bench.text_tokens = full_text_tokens(target.api, text_tokenizer)
        del plan  # the bench holds it, and lets it go once annotated (~210 B a request)
        return await bench.measure(display)
    raise AssertionError("unreachable")  # pragma: no cover


@dataclass
class _Bench:
    """One run from the probes' start to the last file written."""

    options: BenchOptions
    plan: Plan
    target: Target
    engine: EngineProcess | None
    run: RunDir
    clock: RunClock
    info: RunInfo
    deadline_s: float | None
    prometheus: PrometheusSource | None
    #: The server's token ids of a composed text prompt (a later turn's history).
    text_tokens: Callable[[str], list[int]] | None = None
    #: The documents a failed write kept from being written at the end.
    unwritten: tuple[str, ...] = ()
    #: What ``--ray``'s pool reports for ``run.json``'s ``load.ray`` (``session.ray_workers``).
    ray_report: dict[str, Any] = field(default_factory=dict)

    async def measure(self, display: Display | None) -> BenchOutcome:
        """Probes, oracle, load, files — whichever way the load ends."""
        options, clock, run = self.options, self.clock, self.run
        scrape = metrics_url(self.target.url("/metrics")) if options.server_metrics else None
        probes = ProbeProcess(
            run,
            clock,
            metrics_url=scrape,
            gpu_mode=options.gpu,
            interval_s=options.metrics_interval_s,
            metrics_absent=absent_metrics_reason(scrape, self.target.metrics_status),
        )
        stats = LiveStats(
            clock,
            total=len(self.plan),
            duration_s=self.deadline_s,
            target_rate=asked_rate(self.plan)[0],
            target_unit=asked_rate(self.plan)[1],
            capped=options.max_concurrency is not None,
        )
        result = LoadResult(planned=len(self.plan))
        metrics = MetricsMapping(None)
        replay: RunOracle | None = None  # the oracle, when it runs once the run is over
        cancelled = False
        error: Exception | None = None
        shown: asyncio.Task[None] | None = None
        try:
            await probes.start()
            metrics = metrics_mapping(probes.first, self.target, options.mapping_file)
            shape = geometry(
                probes.first,
                metrics.mapping,
                self.engine,
                block_size=options.block_size,
                num_blocks=options.num_gpu_blocks,
                target=self.target,
                cache_model=options.cache_model,
            )
            self.info = replace(self.info, oracle=shape)
            oracle = RunOracle.for_target(shape, self.target)
            after_run = oracle.replays_after_run(self.plan, self.deadline_s)
            plan = self.plan if after_run else oracle.before_sending(self.plan)
            self.plan = plan  # the annotated copy is what is sent: the original is let go
            replay = oracle if after_run else None
            self.info = replace(
                self.info, probes=probe_settings(options, probes, metrics, self.prometheus)
            )
            cap = options.max_concurrency
            shards = split_plan(plan, options.workers, cap)
            _notice(fewer_workers_note(plan, options.workers, len(shards), cap))
            self.info = replace(self.info, load=replace(self.info.load, workers=len(shards)))
            with contextlib.suppress(RunWriteError):  # the load stops on it (RunDir.watch)
                run.write_json(RUN_JSON, self.info.to_json())
            load: LoadRun | WorkerPool
            if len(shards) == 1 and options.ray is None:
                load = LoadRun(plan, self.target, run, clock, self._load_options(), stats)
            else:
                tokenizer = (options.tokenizer, options.api_key) if self.text_tokens else None
                load = await worker_pool(
                    shards,
                    plan,
                    self.target,
                    (run, clock, stats),
                    self._load_options(),
                    tokenizer,
                    self._pool_class(),
                )
            result = load.result
            if display is not None:
                shown = asyncio.create_task(display.run(stats))
            with frozen_heap():
                await load.run()
        except asyncio.CancelledError:
            cancelled = True
            signals.absorb_cancellation()
            if result.status == "running" or (result.reason or "").startswith(
                signals.STOP_REASON_PREFIX
            ):  # the load generator does not know which signal it was
                result.status, result.reason = "interrupted", signals.stop_reason()
        except Exception as exc:  # recorded in the files, raised after them
            error = exc
            if result.status == "running":
                result.status, result.reason = "failed", f"{type(exc).__name__}: {exc}"
        finally:
            if shown is not None:
                shown.cancel()
                await asyncio.gather(shown, return_exceptions=True)
            if display is not None:
                display.close(stats)
            await probes.stop()
        self.info = replace(
            self.info, probes=probe_settings(options, probes, metrics, self.prometheus)
        )
        summary = await self._finish(result, replay, cancelled)
        if error is not None and run.write_failure is None:
            raise error
        return BenchOutcome(
            run.path,
            result.status,
            result.reason,
            summary,
            result,
            cancelled,
            options.max_error_rate,
            options.min_goodput,
            write_failure=run.write_failure,
            unwritten=[name for name in (RUN_JSON, SUMMARY_JSON) if name in self.unwritten],
        )

    def _pool_class(self) -> Callable[..., WorkerPool]:
        """Worker processes, or Ray actors with ``--ray``."""
        if self.options.ray is None:
            return WorkerPool
        return functools.partial(
            RayPool,
            address=self.options.ray,
            report=self.ray_report,
            placement=self.options.ray_placement,
        )

    def _load_options(self) -> LoadOptions:
        users = self.options.max_concurrency or self.plan.concurrency or PRECONNECT
        return LoadOptions(
            max_concurrency=self.options.max_concurrency,
            request_timeout_s=self.options.timeout_s,
            max_event_bytes=self.options.max_event_bytes,
            cache_protocol=self.options.cache_protocol,
            logprobs=self.options.record_outputs,
            keep_token_ids=self.options.record_outputs,
            keep_text=self.options.keep_text,
            duration_s=self.deadline_s,
            preconnect=min(users, PRECONNECT),
            text_tokens=self.text_tokens,
        )

    async def _finish(
        self, result: LoadResult, replay: RunOracle | None, cancelled: bool
    ) -> dict[str, Any]:
        """Close the tables (the probes' too, once their process has stopped), run the
        oracle over what was recorded when it could not run before sending, write the
        final ``run.json`` and ``summary.json``. A write that failed on the way (the
        disk full) makes the run ``failed`` with its reason, unless a signal stopped it;
        the documents are still written where they fit."""
        run, info = self.run, self.info
        ended = time.time()
        run.close()
        if replay is not None:
            recorded = Run.at(run).tables.requests
            columns = replay.after_run_columns(self.plan, recorded, result.composed_prompts)
            for column, values in columns.items():
                if values:
                    with contextlib.suppress(RunWriteError):  # the journal stays as it was
                        run.set_column(REQUESTS_TABLE, column, values)
        if run.write_failure is not None and not cancelled:  # it explains what failed after it
            result.status, result.reason = "failed", run.write_failure
        ray = self.ray_report.get("ray")
        info = replace(
            info,
            load=replace(info.load, ray=frozen_map(ray) if ray is not None else None),
            cache_protocol=result.cache_protocol,
            result=result.section(),
        )
        final = info.finished(result.status, result.reason, ended)
        try:
            run.write_json(RUN_JSON, final.to_json())
        except RunWriteError:
            self.unwritten += (RUN_JSON,)
        summary = await write_summary(run, final, result, self.options, self.prometheus, self.clock)
        run.release_reserve()
        if not run.has(SUMMARY_JSON):
            self.unwritten += (SUMMARY_JSON,)
        return summary
