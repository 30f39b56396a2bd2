"""``prefillscope diagnose ab --chunks 512,2048[,…]``: a controlled A/B of the token budget.

Takes every workload flag ``bench`` takes (``prefillscope.bench_flags``) and runs the same
plan against one configuration per chunk size — the embedded engine (no target flags),
two endpoints (``--a URL --b URL``), or a server launched per arm (``--launch "CMD …
{chunk} … {port}"``) — alternating trials ABAB…, then checks the conditions matched and
states the verdict with its uncertainty (``session.ab_runner``, ``diagnose.ab``).
Registered on the ``diagnose`` group as its ``ab`` sub-command.

Exit status: 0 a verdict, no significant difference (every interval within
``--min-effect``) or inconclusive (with how much data would decide); 1 the verdict was
refused (the conditions did not match); 2 bad input; 130 Ctrl-C, 143 SIGTERM, 129 SIGHUP
(the launched servers stopped, ``ab.json`` written ``interrupted``). ``ab.json`` is
written ``running`` once the flags are validated, so every stop leaves one. ``--json``
prints ``ab.json``.

The runner, the statistics and the view (``prefillscope.ab_view``) are imported when the
command runs, so the CLI starts without them.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from diagnose.ab_effect import MIN_EFFECT
from diagnose.metrics import CONFIDENCE, RESAMPLES
from prefillscope.bench_flags import BenchFlags, takes_bench_flags
from prefillscope.diagnose_group import diagnose_app
from workloads.errors import InputError
from workloads.limits import MAX_SECONDS, Bound

MIN_TRIALS = 3


def parse_chunks(text: str) -> list[int]:
    """``512,2048`` → ``[512, 2048]``: at least two positive sizes."""
    try:
        chunks = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise InputError(
            "--chunks", f"{text!r} is not a list of integers", "e.g. 512,2048"
        ) from None
    if len(chunks) < 2 or any(c <= 0 for c in chunks):
        raise InputError("--chunks", f"{text!r}: give two or more positive sizes", "e.g. 512,2048")
    return chunks


def _reference(chunks: list[int], reference: int | None) -> int:
    if reference is None:
        return len(chunks) - 1
    if reference not in chunks:
        raise InputError("--reference", f"{reference} is not one of --chunks", "name one of them")
    return chunks.index(reference)


def _validate_targets(
    flags: BenchFlags, chunks: list[int], launch: str | None, a: str | None, b: str | None
) -> list[str] | None:
    """The endpoints (``--a``/``--b``) if given; refuse conflicting target flags."""
    if (a is None) != (b is None):
        raise InputError("--a" if a is None else "--b", "is missing", "give both --a and --b")
    endpoints = [a, b] if a is not None and b is not None else None
    if endpoints and launch:
        raise InputError(
            "--launch", "excludes --a/--b", "launch the servers or name them, not both"
        )
    if endpoints and len(chunks) != 2:
        raise InputError(
            "--chunks", "--a/--b take exactly two chunk sizes", "e.g. --chunks 512,2048"
        )
    if flags.cache_protocol == "warm":
        raise InputError(
            "--cache-protocol",
            "warm leaves each trial the cache its predecessors filled: warmth would not match",
            "use salt (a fresh salt per trial) or reset",
        )
    if flags.engine and (endpoints or launch):
        raise InputError("--engine", "configures the embedded engine only", "drop --engine")
    for item in flags.engine or []:
        if item.partition("=")[0].strip().replace("-", "_") == "max_num_batched_tokens":
            raise InputError("--engine", "max_num_batched_tokens is what --chunks sets", "drop it")
    return endpoints


@takes_bench_flags
def ab(
    flags: BenchFlags,
    chunks: Annotated[
        str, typer.Option(help="Chunk sizes (max_num_batched_tokens), e.g. 512,2048.")
    ],
    launch: Annotated[
        str | None,
        typer.Option(help='Server command per arm, with {chunk} and {port}: "vllm serve M …".'),
    ] = None,
    a: Annotated[
        str | None, typer.Option("--a", help="Endpoint running the first chunk size.")
    ] = None,
    b: Annotated[
        str | None, typer.Option("--b", help="Endpoint running the second chunk size.")
    ] = None,
    trials: Annotated[int, typer.Option(help="Trials per arm (at least 3), run ABAB….")] = 3,
    reference: Annotated[
        int | None, typer.Option(help="Chunk size the others are compared with (default: last).")
    ] = None,
    warmup_trials: Annotated[
        int | None,
        typer.Option(
            help="Unmeasured trials per arm first (default: 1 per launched server, else 0)."
        ),
    ] = None,
    restart_per_trial: Annotated[
        bool, typer.Option("--restart-per-trial", help="Launch a fresh server for every trial.")
    ] = False,
    startup_timeout: Annotated[
        float, typer.Option(help="Seconds a launched server may take to become healthy.")
    ] = 600.0,
    stop_grace: Annotated[
        float, typer.Option(help="Seconds between SIGTERM and SIGKILL for a launched server.")
    ] = 15.0,
    check_outputs: Annotated[
        bool,
        typer.Option("--check-outputs", help="Record greedy outputs + logprobs; compare arms."),
    ] = False,
    logprob_tolerance: Annotated[
        float, typer.Option(help="Largest |Δ logprob| of a chosen token that counts as equal.")
    ] = 0.05,
    tolerance: Annotated[
        list[str] | None,
        typer.Option(
            help="Condition tolerance KEY=VALUE: tokens, rate, hit_rate, errors, client, loop_lag, "
            "engine_lateness."
        ),
    ] = None,
    resamples: Annotated[int, typer.Option(help="Bootstrap resamples.")] = RESAMPLES,
    confidence: Annotated[float, typer.Option(help="Confidence level of intervals.")] = CONFIDENCE,
    min_effect: Annotated[
        float,
        typer.Option(
            help="Smallest change worth telling from none, in %: 'no significant difference' "
            "only when every interval lies within it, else inconclusive."
        ),
    ] = MIN_EFFECT * 100,
    out: Annotated[Path | None, typer.Option(help="A/B folder (default: runs/<time>-ab).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print ab.json only.")] = False,
    predict: Annotated[
        bool,
        typer.Option(
            "--predict", help="Simulate each arm first; predicted vs measured in ab.json."
        ),
    ] = False,
) -> None:
    """A/B of max_num_batched_tokens under matched load: a verdict with its uncertainty."""
    from rich.console import Console

    from diagnose.ab import AbSettings
    from diagnose.ab_conditions import parse_tolerances
    from prefillscope.ab_view import render
    from runtime import signals
    from session.ab_runner import AbOptions, run_ab
    from session.launcher import LaunchTemplate

    sizes = parse_chunks(chunks)
    endpoints = _validate_targets(flags, sizes, launch, a, b)
    if trials < MIN_TRIALS:
        raise InputError("--trials", f"{trials} is too few", f"use at least {MIN_TRIALS} per arm")
    if warmup_trials is not None and warmup_trials < 0:
        raise InputError("--warmup-trials", f"must be >= 0, got {warmup_trials}")
    if resamples < 100:
        raise InputError("--resamples", f"{resamples} is too few", "use at least 100")
    if not 0.5 <= confidence < 1:
        raise InputError("--confidence", f"{confidence:g} is not in [0.5, 1)", "e.g. 0.95")
    for flag, value, bound in (
        ("--trials", trials, Bound(MIN_TRIALS, 1000, why="an A/B is run trial by trial")),
        ("--warmup-trials", warmup_trials, Bound(0, 100)),
        ("--resamples", resamples, Bound(100, 10**6, why="each resample is a pass over the data")),
        ("--logprob-tolerance", logprob_tolerance, Bound(0, 1e6)),
        ("--startup-timeout", startup_timeout, Bound(0, MAX_SECONDS, above=True)),
        ("--stop-grace", stop_grace, Bound(0, 3600)),
        ("--min-effect", min_effect, Bound(0, 100, above=True, why="a change in %")),
    ):
        bound.check(flag, value)
    command = ["prefillscope", *sys.argv[1:]]
    bench = flags.options(endpoint=None, out=None, command=command)
    settings = AbSettings(
        trials=trials,
        reference=_reference(sizes, reference),
        slo=bench.slo,
        tolerances=parse_tolerances(tolerance or []),
        resamples=resamples,
        confidence=confidence,
        logprob_tolerance=logprob_tolerance if check_outputs else None,
        min_effect=min_effect / 100,
    )
    options = AbOptions(
        bench=bench,
        chunks=sizes,
        settings=settings,
        launch=LaunchTemplate.parse(launch) if launch else None,
        endpoints=endpoints,
        out=out,
        restart_per_trial=restart_per_trial,
        warmup_trials=(1 if launch else 0) if warmup_trials is None else warmup_trials,
        startup_timeout_s=startup_timeout,
        stop_grace_s=stop_grace,
        command=command,
        predict=predict,
    )
    stream = sys.stderr if as_json else sys.stdout

    def progress(line: str) -> None:
        print(line, file=stream, flush=True)

    try:
        outcome = signals.run(run_ab(options, progress))
    except KeyboardInterrupt:  # a second stop signal: no ab.json
        print(f"prefillscope: diagnose ab stopped ({signals.stop_name()})", file=sys.stderr)
        raise typer.Exit(signals.stop_exit_code()) from None
    if outcome.status != "complete":
        done = len(outcome.analysis.trials)
        print(
            f"prefillscope: diagnose ab {outcome.status}: {outcome.result.reason}; "
            f"{done} measured trials kept, every launched server stopped; {outcome.out}",
            file=sys.stderr,
        )
    if as_json:
        typer.echo(json.dumps(outcome.document, ensure_ascii=False))
    else:
        render(outcome, Console())
    raise typer.Exit(outcome.exit_code)


def register(app: typer.Typer) -> None:
    """``ab`` goes on the ``diagnose`` group (registered by ``commands.diagnose``), once:
    the group is this process's, the app may be built more than once."""
    del app
    if not any(info.callback is ab for info in diagnose_app.registered_commands):
        diagnose_app.command("ab")(ab)
