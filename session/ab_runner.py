"""Running a chunk-size A/B: a target per arm, the trials in ABAB order, ``ab.json``.

Each trial is one ``run_bench`` with the A/B's bench options, so every trial sends the
same plan with the same cache protocol (``salt``: a fresh salt per trial; ``reset``: the
server's cache flushed before each): cache warmth is matched by construction. What
serves each arm:

* **embedded** (no target flags): every trial starts the embedded engine afresh with
  ``max_num_batched_tokens`` = the arm's chunk size and the other ``--engine`` settings;
* **endpoints** (``--a URL --b URL``): two servers the user runs, one per chunk size;
* **launch** (``--launch TEMPLATE``): one server per arm launched here
  (``session.launcher``). Starting a real server takes a minute or more, so every arm's
  server is started at once, on its own port, kept across the arm's trials and stopped
  at the end; ``--restart-per-trial`` starts a fresh one for each trial instead.

Trials go to ``OUT/trials/NN-ARM-rR`` and server logs to ``OUT/servers``; ``ab.json``
holds the settings, every trial, the analysis (``diagnose.ab``) and the verdict. A
server that dies mid-A/B fails that arm's remaining trials (recorded, not lost), and the
verdict is refused. A stop signal (Ctrl-C, SIGTERM, SIGHUP) ends the running trial as it
ends a bench run; every launched server is stopped (its whole process group: SIGTERM, then
SIGKILL after ``--stop-grace``) whichever way the A/B ends, and ``ab.json`` is written with
``status: interrupted`` (``failed`` after an unexpected error) and the trials done.
``ab.json`` exists from the start: once the flags and the plan are validated it is
written ``status: running`` (again after each trial), so that every stop leaves one,
even a SIGKILL while the servers launch (left ``running``, with the trials done).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from diagnose.ab import (
    AbAnalysis,
    AbSettings,
    Arm,
    Trial,
    alternating,
    analyse_ab,
    make_arms,
    unanalysed_arm,
)
from runfmt import metrics as registry
from runfmt.abresult import ABResult, AbWorkload
from runfmt.codec import frozen_map
from runfmt.names import AB_JSON, RUN_JSON
from runtime import atomic, redact, signals
from runtime.atomic import WriteFailed
from runtime.version import package_version
from session.ab_prediction import Predicted, confront, predict_arms
from session.ab_servers import ArmServers
from session.bench_options import BenchOptions
from session.bench_plan import resolve_workload
from session.bench_runner import default_out, run_bench
from session.exit_status import BenchOutcome
from session.launcher import LaunchTemplate
from simengine.settings import EngineSettings
from workloads.build import build_plan
from workloads.errors import InputError

#: Exit statuses: a verdict (or no significant difference), a refused verdict; a stopped
#: A/B exits with ``runtime.signals.stop_exit_code()`` (130 Ctrl-C, 143 SIGTERM).
EXIT_VERDICT, EXIT_REFUSED = 0, 1

Progress = Callable[[str], None]


@dataclass
class AbOptions:
    """Everything one A/B needs; ``diagnose ab``'s flags map onto these fields."""

    bench: BenchOptions
    chunks: list[int]
    settings: AbSettings
    launch: LaunchTemplate | None = None
    endpoints: list[str] | None = None
    out: Path | None = None
    restart_per_trial: bool = False
    #: Unmeasured trials per arm before the measured ones (per server start with
    #: ``restart_per_trial``): a fresh server's first requests pay one-time costs.
    warmup_trials: int = 0
    startup_timeout_s: float = 600.0
    stop_grace_s: float = 15.0
    command: list[str] = field(default_factory=list)
    #: Simulate each arm first and put predicted vs measured in ab.json (``ab_prediction``).
    predict: bool = False

    @property
    def mode(self) -> str:
        if self.launch is not None:
            return "launch"
        return "endpoints" if self.endpoints else "embedded"


@dataclass
class AbOutcome:
    out: Path
    status: str
    analysis: AbAnalysis
    #: ``ab.json`` as written.
    result: ABResult

    @property
    def document(self) -> dict[str, Any]:
        """``ab.json``'s JSON (what ``--json`` prints)."""
        return redact.document(self.result.to_json())

    @property
    def exit_code(self) -> int:
        if self.status != "complete":
            return signals.stop_exit_code()
        return EXIT_REFUSED if self.analysis.verdict.refused else EXIT_VERDICT


def open_loop_ids(bench: BenchOptions) -> frozenset[str]:
    """Ids of the plan's scheduled (open-loop) requests, whose send rate is a condition.

    Building the plan also refuses a bad workload before any server is started.
    """
    overrides = {**bench.overrides, "prompt_format": "tokens"}  # ids only: no tokenizer
    spec, _ = resolve_workload(bench.workload, overrides, bench.api)
    return frozenset(s.id for s in build_plan(spec) if s.intended_s is not None and not s.warmup)


def arm_engine(base: EngineSettings | None, chunk: int) -> EngineSettings:
    """The embedded engine's settings for one arm: ``--engine`` with the arm's budget."""
    settings = base or EngineSettings.default()
    config = dataclasses.replace(settings.config, max_num_batched_tokens=chunk)
    try:
        config.validate()
    except InputError as exc:
        fix = f" ({exc.fix})" if exc.fix else ""
        raise InputError("--chunks", f"{chunk}: {exc.field} {exc.problem}{fix}") from None
    return dataclasses.replace(settings, config=config)


#: The figures each trial's progress line shows, named and written as the registry does.
TRIAL_LINE_FIGURES = ((registry.ITL, "p99"), (registry.TTFT, "p50"))


def _trial_line(where: str, trial: Trial, outcome: BenchOutcome) -> str:
    sections = outcome.summary
    counts = sections.requests
    figures = " · ".join(
        f"{metric.named(stat)} {metric.format(sections.statistic(metric.key, stat))}"
        for metric, stat in TRIAL_LINE_FIGURES
    )
    ok = f"{counts.completed or 0}/{counts.total or 0} ok"
    return f"trial {where}: {trial.status} · {ok} · {figures} · {trial.seconds:.1f} s"


class _AbRun:
    """One A/B from the first server started to ``ab.json``."""

    def __init__(self, options: AbOptions, progress: Progress) -> None:
        self.options = options
        self.progress = progress
        redact.register_argv(options.launch.words if options.launch is not None else [])
        redact.register_urls(*(options.endpoints or []))
        self.out = options.out or default_out("ab")
        targets = self._targets()
        self.arms = make_arms(options.chunks, targets)
        self.servers = (
            ArmServers(options.launch, self.arms, self.out / "servers", options.stop_grace_s)
            if options.launch is not None
            else None
        )
        # The embedded engine's settings per arm, validated before anything runs.
        self.engines = (
            [arm_engine(options.bench.engine, arm.chunk) for arm in self.arms]
            if options.mode == "embedded"
            else []
        )
        self.trials: list[Trial] = []
        self.status = "complete"
        self.reason: str | None = None
        self.position = 0
        trials, warmups = options.settings.trials, options.warmup_trials
        restarts = options.restart_per_trial and self.servers is not None
        self.total = len(self.arms) * (trials * (1 + warmups) if restarts else trials + warmups)

    def _targets(self) -> list[str]:
        options = self.options
        if options.endpoints:
            return list(options.endpoints)
        if options.launch is not None:
            command = redact.argv(options.launch.words, [options.bench.api_key])
            return [" ".join(command)] * len(options.chunks)
        return ["embedded engine"] * len(options.chunks)

    def _bench_options(self, arm: Arm, run_dir: Path, url: str | None) -> BenchOptions:
        base = self.options.bench
        return dataclasses.replace(
            base,
            endpoint=url,
            engine=self.engines[arm.index] if url is None else None,
            out=run_dir,
            record_outputs=self.options.settings.logprob_tolerance is not None,
            command=self.options.command,
        )

    def _url(self, arm: Arm) -> str | None:
        if self.options.endpoints:
            return self.options.endpoints[arm.index]
        return self.servers.url(arm.index) if self.servers is not None else None

    async def _trial(self, arm: Arm, rnd: int, warmup: bool) -> tuple[Trial, BenchOutcome | None]:
        self.position += 1
        kind = "w" if warmup else "r"
        name = f"{self.position:02d}-{arm.label.replace('/', '-')}-{kind}{rnd}"
        run_dir = self.out / "trials" / name
        gone = self.servers.gone(arm.index) if self.servers is not None else None
        if gone is not None:
            return Trial(arm.index, rnd, run_dir, "failed", gone, warmup=warmup), None
        began = time.monotonic()
        try:
            outcome = await run_bench(self._bench_options(arm, run_dir, self._url(arm)))
        except InputError as exc:
            if self.options.endpoints and exc.field == "--endpoint":
                raise InputError("--a" if arm.index == 0 else "--b", exc.problem, exc.fix) from None
            raise
        seconds = time.monotonic() - began
        trial = Trial(
            arm.index, rnd, outcome.run_dir, outcome.status, outcome.reason, seconds, warmup
        )
        return trial, outcome

    async def _step(self, index: int, rnd: int, warmup: bool = False) -> bool:
        """Run one trial and report it; ``False`` when the A/B was cancelled (Ctrl-C)."""
        arm = self.arms[index]
        what = f"warm-up {rnd}" if warmup else f"round {rnd}"
        where = f"{self.position + 1}/{self.total} · arm {arm.label} {what}"
        self.progress(f"trial {where} …")
        trial, outcome = await self._trial(arm, rnd, warmup)
        self.trials.append(trial)
        self._write(replace(self._unanalysed(), status="running"))  # what a SIGKILL leaves
        if outcome is None:
            self.progress(f"trial {where}: {trial.reason}")
            return True
        self.progress(_trial_line(where, trial, outcome))
        if outcome.write_failure is not None:  # the disk the trials write to is full
            raise WriteFailed(None, outcome.write_failure, f"the trial is in {outcome.run_dir}")
        if outcome.cancelled:
            self.status, self.reason = "interrupted", signals.stop_reason()
        return not outcome.cancelled

    async def _run_trials(self) -> None:
        """Warm-up trials, then the measured ones, ABAB…; with ``--restart-per-trial`` a
        fresh server for every measured trial, warmed by its own warm-up trials."""
        options, arms = self.options, len(self.arms)
        measured = alternating(arms, options.settings.trials)
        warmups = options.warmup_trials
        if self.servers is not None and options.restart_per_trial:
            for index, rnd in measured:
                await self.servers.start([index], options.startup_timeout_s, f"-r{rnd}")
                steps = [(index, w, True) for w in range(1, warmups + 1)] + [(index, rnd, False)]
                cancelled = False
                for step in steps:
                    if not await self._step(*step):
                        cancelled = True
                        break
                await self.servers.stop([index])
                if cancelled:
                    return
            return
        steps = [(i, w, True) for i, w in alternating(arms, warmups)]
        for step in [*steps, *((i, r, False) for i, r in measured)]:
            if not await self._step(*step):
                return

    async def run(self) -> AbOutcome:
        """Validate, write ``ab.json`` as ``running``, run, write it again as it ended
        (a SIGKILL leaves the ``running`` one, with the trials done)."""
        options = self.options
        ids = open_loop_ids(options.bench)
        if (self.out / AB_JSON).exists() or (self.out / RUN_JSON).exists():
            raise InputError("--out", f"{self.out} already holds a run", "pick a new folder")
        atomic.make_folder(self.out)
        self.status = "running"
        self._write(self._unanalysed())
        return await self._run(ids)

    async def _run(self, ids: frozenset[str]) -> AbOutcome:
        options = self.options
        error: Exception | None = None
        prediction = self._predict()
        self.status = "complete"
        try:
            await self._serve_trials()
        except asyncio.CancelledError:  # a stop signal outside a trial's load
            signals.absorb_cancellation()
            self.status, self.reason = "interrupted", signals.stop_reason()
        except InputError as exc:  # a server that would not start: one line, exit 2
            await self._stop_servers()
            self.status, self.reason = "failed", f"{exc.field}: {exc.problem}"
            self._write(self._unanalysed())
            raise
        except WriteFailed as exc:  # the A/B stops at its first failed write (exit 6)
            self.status, self.reason = "failed", exc.reason
            error = exc
        except Exception as exc:  # recorded in ab.json, raised after it
            self.status, self.reason = "failed", f"{type(exc).__name__}: {exc}"
            error = exc
        await self._stop_servers()
        measured = [t for t in self.trials if not t.warmup]
        analysis = analyse_ab(self.arms, measured, options.settings, ids)
        result = self._how(analysis.result())
        if prediction is not None:
            reference = analysis.arms[options.settings.reference].chunk
            confronted = confront(prediction, result.arms, reference)
            result = replace(result, prediction=confronted)
        if isinstance(error, WriteFailed):
            raise self._kept(error, result)
        self._write(result)
        if error is not None:
            raise error
        return AbOutcome(self.out, self.status, analysis, result)

    def _write(self, result: ABResult) -> None:
        """``ab.json``, replaced whole (``runtime.atomic``): a stop or a full disk
        mid-write leaves the previous one."""
        text = json.dumps(redact.document(result.to_json()), indent=2, ensure_ascii=False)
        atomic.write_text(self.out / AB_JSON, text)

    def _kept(self, error: WriteFailed, document: ABResult) -> WriteFailed:
        """``error`` saying what the A/B kept: ``ab.json`` written ``failed`` with the
        trials done, or, when even that does not fit, the last one written."""
        done = sum(1 for t in self.trials if t.status == "complete")
        try:
            self._write(document)
            state = "failed"
        except WriteFailed:
            state = "as last written"
        return error.keeping(
            f"{done} of {len(self.trials)} trials done complete; ab.json ({state}) in {self.out}"
        )

    def _unanalysed(self) -> ABResult:
        """``ab.json`` before (or without) the analysis: how the A/B runs, its arms and
        the trials done so far."""
        settings = self.options.settings
        result = ABResult(
            arms=tuple(unanalysed_arm(arm, self.trials) for arm in self.arms),
            reference=settings.reference_of(self.arms),
            settings=settings.recorded(),
        )
        return self._how(result).unanalysed()

    async def _serve_trials(self) -> None:
        """Start the servers (unless one per trial), then run every trial."""
        options = self.options
        if self.servers is not None and not options.restart_per_trial:
            assert options.launch is not None
            self.progress(f"starting {len(self.arms)} servers: {self._targets()[0]}")
            await self.servers.start(range(len(self.arms)), options.startup_timeout_s)
            ready = ", ".join(
                f"{s.name} on :{s.port} in {s.ready_s:.0f} s" for s in self.servers.live.values()
            )
            self.progress(f"ready: {ready}")
        await self._run_trials()

    async def _stop_servers(self) -> None:
        """Stop every launched server still running, even if a stop signal interrupts."""
        while self.servers is not None and self.servers.live:
            try:
                await self.servers.stop(list(self.servers.live))
            except asyncio.CancelledError:
                signals.absorb_cancellation()
                self.status, self.reason = "interrupted", signals.stop_reason()

    def _predict(self) -> Predicted | None:
        options = self.options
        if not options.predict:
            return None
        self.progress("predicting each arm on the virtual clock")
        engine = (options.bench.engine or EngineSettings.default()).config
        return predict_arms(options.bench.workload, options.bench.overrides, engine, options.chunks)

    def _how(self, result: ABResult) -> ABResult:
        """``result`` with how the A/B ran: its status, target, workload and command."""
        options = self.options
        secrets = [options.bench.api_key]
        launch = options.launch
        workload = AbWorkload(options.bench.workload, frozen_map(options.bench.overrides))
        return replace(
            result,
            status=self.status,
            reason=self.reason,
            out=str(self.out),
            mode=options.mode,
            chunks=tuple(options.chunks),
            launch=tuple(redact.argv(launch.words, secrets)) if launch is not None else None,
            restart_per_trial=options.restart_per_trial,
            warmup_trials=tuple(t.recorded() for t in self.trials if t.warmup),
            servers=tuple(
                replace(record, command=tuple(redact.argv(record.command, secrets)))
                for record in (self.servers.records if self.servers is not None else [])
            ),
            workload=workload,
            cache_protocol=options.bench.cache_protocol,
            command=tuple(redact.argv(options.command, secrets)),
            tool_version=package_version(),
        )


async def run_ab(options: AbOptions, progress: Progress) -> AbOutcome:
    """Run the A/B end to end (see the module docstring); ``progress`` gets one line per step."""
    return await _AbRun(options, progress).run()
