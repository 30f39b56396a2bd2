"""``prefillscope simulate``: what-if runs of the embedded engine on a virtual clock.

The command parses flags, calls :func:`session.simulate.simulate_grid` once and renders
its result: a table per configuration (TTFT and ITL p50/p99/max, goodput, throughput,
KV-transfer share of TTFT, the Pareto front and the break-even link speed), ``--json``
(the same result as one object) and ``--html FILE`` (a TTFT p99 vs ITL p99 plot).
``--against DIR`` replays a measured inference-perf run instead (``session.against``)
and prints, per load stage, each latency's predicted and measured mean, p90 and p99.
Each configuration done is one line on stderr. A stop signal (Ctrl-C, SIGTERM, SIGHUP)
ends the grid there: the configurations done are printed and written as usual, marked
``interrupted``, one line says so, and the exit status is 128 + the signal's number.
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from prefillscope import kv_link_flags
from prefillscope.kv_link_flags import (
    KvLinkEfficiency,
    KvLinkGbps,
    KvLinkLatencyUs,
    KvLinkSharing,
    KvTransfer,
    KvTransferOverheadUs,
    disagg_config,
)
from runfmt.codec import encode
from runfmt.metrics import ITL, SIM_CALIBRATION_SHOWN, SIM_HOLDOUT_SHOWN, TTFT
from workloads.errors import InputError
from workloads.limits import MAX_TOKENS, Bound

if TYPE_CHECKING:
    from runfmt.calibration import Calibration, FitFigures, Holdout
    from runfmt.simresult import SimConfiguration, SimulateResult

#: Columns the grid table needs before rich starts wrapping its cells.
TABLE_WIDTH = 150


def _ints(text: str, flag: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise InputError(flag, f"{text!r} is not a comma-separated list of integers") from None
    if not values or min(values) <= 0:
        raise InputError(flag, f"{text!r} needs positive integers", "e.g. 256,512,1024")
    if max(values) > MAX_TOKENS:  # told before the first configuration runs, by its flag
        raise InputError(flag, f"{max(values):,} is above the cap of {MAX_TOKENS:,} tokens")
    return values


def simulate(
    workload: Annotated[
        str | None,
        typer.Option(help="A workload, trace:FILE, spec file, or a bench run directory."),
    ] = None,
    calibrate: Annotated[
        Path | None,
        typer.Option(help="Fit the cost model to this bench run first (and replay it)."),
    ] = None,
    against: Annotated[
        Path | None,
        typer.Option(
            help="Replay an inference-perf run (results/*_lifecycle_metrics.json, "
            "results/config.yaml, exp-config.yaml) and score the prediction against it "
            "(--engine settings win over the run's: model=CONFIG.json for a model no "
            "preset knows)."
        ),
    ] = None,
    draws: Annotated[
        int,
        typer.Option(
            help="With --against: replay the run this many times, each another draw of "
            "the client's random arrivals, prompt order and token ids (seeds --seed, "
            "--seed+1, …), and show how far each predicted figure moves between them."
        ),
    ] = 3,
    holdout: Annotated[
        Path | None,
        typer.Option(
            help="With --calibrate: predict this other run with the fitted figures and "
            "print the error per metric (a held-out check)."
        ),
    ] = None,
    holdout_engine: Annotated[
        list[str] | None,
        typer.Option(
            help="Engine KEY=VALUE where the --holdout run's server differed "
            "(e.g. max_num_batched_tokens=128; repeatable)."
        ),
    ] = None,
    set_: Annotated[
        list[str] | None, typer.Option("--set", help="Workload KEY=VALUE (repeatable).")
    ] = None,
    num_requests: Annotated[int | None, typer.Option(help="Requests to simulate.")] = None,
    rate: Annotated[float | None, typer.Option(help="Open-loop request rate (req/s).")] = None,
    concurrency: Annotated[int | None, typer.Option(help="Closed-loop users.")] = None,
    seed: Annotated[int | None, typer.Option(help="Workload seed.")] = None,
    engine: Annotated[
        list[str] | None,
        typer.Option(help="Engine KEY=VALUE (model=…, gpu=…, tensor_parallel_size=…)."),
    ] = None,
    chunks: Annotated[
        str | None, typer.Option(help="Chunk budgets to compare, e.g. 256,512,1024.")
    ] = None,
    disaggregate: Annotated[
        str | None, typer.Option(help="P:D splits to compare, e.g. 1:1,2:1.")
    ] = None,
    gpus: Annotated[
        int | None, typer.Option(help="Give every configuration this many GPUs.")
    ] = None,
    no_monolithic: Annotated[
        bool, typer.Option("--no-monolithic", help="Only the P/D configurations.")
    ] = False,
    kv_link_gbps: KvLinkGbps = kv_link_flags.DEFAULT_GBPS,
    kv_link_latency_us: KvLinkLatencyUs = kv_link_flags.DEFAULT_LATENCY_US,
    kv_transfer_overhead_us: KvTransferOverheadUs = kv_link_flags.DEFAULT_OVERHEAD_US,
    kv_link_efficiency: KvLinkEfficiency = kv_link_flags.DEFAULT_EFFICIENCY,
    kv_link_sharing: KvLinkSharing = kv_link_flags.DEFAULT_SHARING,
    kv_transfer: KvTransfer = kv_link_flags.DEFAULT_TRANSFER,
    slo: Annotated[
        str | None, typer.Option(help="SLOs for goodput, e.g. ttft=1s,itl=50ms.")
    ] = None,
    no_break_even: Annotated[
        bool, typer.Option("--no-break-even", help="Skip the break-even link search.")
    ] = False,
    html: Annotated[Path | None, typer.Option(help="Write a plot of the grid here.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Predict TTFT, ITL and goodput per configuration without launching a server."""
    from prefillscope.bench_flags import FLAG_BOUNDS  # bench's bounds, named as flags
    from prefillscope.engine_flags import parse_engine_flags
    from probes.slo import parse_slo
    from runfmt.slo import Slo
    from session.sim_workload import load_workload
    from session.simulate import SimulateSpec, simulate_grid
    from simengine.disagg_config import parse_ratio

    for name, value in (("num_requests", num_requests), ("rate", rate),
                        ("concurrency", concurrency), ("seed", seed)):  # fmt: skip
        FLAG_BOUNDS[name].check("--" + name.replace("_", "-"), value)
    DRAWS_BOUND.check("--draws", draws)
    base = parse_engine_flags(engine or []).config
    if against is not None:
        from prefillscope.engine_flags import given_keys

        _against(against, base, given_keys(engine or []), as_json, seed or 0, draws)
        return
    link = disagg_config(
        "1:1",
        kv_link_gbps,
        kv_link_latency_us,
        kv_transfer_overhead_us,
        kv_link_efficiency,
        kv_link_sharing,
        kv_transfer,
    )
    ratios = [parse_ratio(r) for r in disaggregate.split(",")] if disaggregate else []
    if no_monolithic and not ratios:
        raise InputError("--no-monolithic", "leaves nothing to simulate", "add --disaggregate")
    spec = SimulateSpec(
        base=base,
        chunks=_ints(chunks, "--chunks") if chunks else [base.max_num_batched_tokens],
        ratios=ratios,
        gpus=gpus,
        monolithic=not no_monolithic,
        link=link.link,
        transfer=link.transfer,
        slo=parse_slo(slo) if slo else Slo(),
        break_even=not no_break_even,
    )
    spec.points()  # an uneven or oversized --gpus is refused before anything runs
    if html is not None:
        from prefillscope.report.page_file import check_destination

        check_destination(html)
    if workload is None and calibrate is None:
        raise InputError("--workload", "missing", "give --workload (or --calibrate RUN_DIR)")
    if holdout is not None and (calibrate is None or not holdout.is_dir()):
        raise InputError("--holdout", f"{holdout} needs --calibrate and a run directory")
    holdout_base = parse_engine_flags([*(engine or []), *(holdout_engine or [])]).config
    calibration = None
    calibrated = None
    if calibrate is not None:
        from perfmodel.config import EngineConfig
        from prefillscope.engine_flags import given_keys
        from runfmt.run import open_run
        from session.calibrate import calibrate as fit
        from session.calibrate import holdout as predict_holdout
        from session.calibrate_reading import table_first

        if not calibrate.is_dir():
            raise InputError("--calibrate", f"{calibrate} is not a run directory")
        # opened once: fitted, then simulated; its request table read first
        calibrated = table_first(open_run(calibrate, "--calibrate"))
        given_a = given_keys(engine or [])
        # the held-out run's own budget: recorded, or given by --holdout-engine
        given_b = (given_a - {"max_num_batched_tokens"}) | given_keys(holdout_engine or [])
        if holdout is not None:  # refused before the fit when its engine is unknown
            from session.calibrate_target import target_config

            held = table_first(open_run(holdout, "--holdout"))
            target_config(held, holdout_base, given_b, "--holdout-engine")
        calibration = fit(calibrated, base, given_a)
        spec.base = EngineConfig(**calibration.config)  # the run's engine, fitted
        if chunks is None:
            spec.chunks = [spec.base.max_num_batched_tokens]
        if holdout is not None:
            check = predict_holdout(holdout, holdout_base, given_b, calibration)
            calibration = replace(calibration, holdout=check)
        for warning in calibration.all_warnings:
            print(f"prefillscope: warning: {warning}", file=sys.stderr)
    given = {"num_requests": num_requests, "rate": rate, "concurrency": concurrency, "seed": seed}
    overrides = {k: v for k, v in given.items() if v is not None}
    load = load_workload(workload or calibrated, set_ or [], overrides, spec.base)
    result = replace(simulate_grid(spec, load, _progress), calibration=calibration)
    if html is not None:
        from prefillscope.report.page_file import write_html
        from prefillscope.report.simulate_page import render_page

        write_html(html, render_page(result))
    if as_json:
        typer.echo(json.dumps(encode(result)))
    else:
        if calibration is not None:
            _print_calibration(calibration)
            if calibration.holdout is not None:
                _print_holdout(calibration.holdout)
        _print(result)
    if not result.complete:
        from runtime import signals

        print(
            f"prefillscope: simulate stopped ({signals.stop_name()}) after "
            f"{len(result.configurations)} of {result.planned_configurations} "
            "configurations; those are shown",
            file=sys.stderr,
        )
        raise typer.Exit(signals.stop_exit_code())


#: ``--draws``: how many replays of the run (each a whole replay).
DRAWS_BOUND = Bound(1, 20, whole=True, why="each draw is a whole replay of the run")


def _against(
    folder: Path, base: Any, given: set[str], as_json: bool, seed: int = 0, draws: int = 1
) -> None:
    """``--against``: replay the run in ``folder`` (``draws`` times, from ``seed``) and
    print predicted vs measured; the ``--engine`` fields in ``given`` win over the run's
    (a model no preset knows, by its ``config.json``)."""
    from session.against import score_run
    from session.lifecycle import read_lifecycle

    if not folder.is_dir():
        raise InputError("--against", f"{folder} is not a folder", "give an inference-perf run")
    from perfmodel.models import resolve_model

    run = read_lifecycle(folder)
    if "model" not in given:
        try:
            resolve_model(run.model)
        except InputError:
            raise InputError(
                "--engine model",
                f"{folder / 'exp-config.yaml'} names {run.model!r}, which no preset is",
                "give the model's config.json (or its folder): --engine model=PATH",
            ) from None
    result = score_run(run, base, seed, given=given, draws=draws)
    if as_json:
        typer.echo(json.dumps(encode(result)))
        return
    typer.echo(
        f"{run.name}: {result.requests:,} requests replayed · {result.model} "
        f"tp {result.tensor_parallel_size} on {result.gpu} · budget "
        f"{result.max_num_batched_tokens} · {run.arrivals} arrivals · "
        f"{result.timed_out} timed out (measured failures {result.measured_failures})"
    )
    typer.echo(
        f"scheduling {'asynchronous' if result.async_scheduling else 'synchronous'} · "
        f"frontend {result.host_overhead_per_request_s * 1e3:.2f} ms a request"
    )
    spread = f"  {'over ' + str(result.draws) + ' draws':>21}" if result.draws > 1 else ""
    typer.echo(
        f"{'stage':>5}  {'figure':<10} {'predicted ms':>13} {'actual ms':>13} {'error':>7}" + spread
    )
    for row in result.scores:
        stage = "all" if row.stage < 0 else str(row.stage)
        err = "–" if row.error is None else f"{row.error:+.1%}"
        span = ""
        if result.draws > 1 and row.low is not None and row.high is not None:
            span = f"  {_ms(row.low):>9} – {_ms(row.high):<9}"
        typer.echo(
            f"{stage:>5}  {row.metric[:-2] + ' ' + row.stat:<10} "
            f"{_ms(row.predicted):>13} {_ms(row.actual):>13} {err:>7}" + span
        )
    if result.draws > 1:
        typer.echo(
            f"predicted: seed {result.seed}'s replay; the range: {result.draws} draws of the "
            "client's random arrivals (a figure whose range is wide is chance as much as model)"
        )


def _progress(done: int, planned: int, row: SimConfiguration) -> None:
    print(
        f"prefillscope simulate: {done}/{planned} {row.label} ({row.wall_s:.1f} s)",
        file=sys.stderr,
    )


def _print_calibration(cal: Calibration) -> None:
    fitted = ", ".join(f"{k} = {v:.4g}" for k, v in cal.fitted.settings().items())
    typer.echo(f"calibrated on {cal.run} ({cal.requests} requests): {fitted}")
    typer.echo(f"  target: {cal.target}")
    typer.echo(f"  prompts: {cal.prompts}")
    dec = cal.decode_fit
    typer.echo(
        f"  decode fit: {dec.gaps} pure-decode gaps ({dec.mixed_gaps} beside a prefill "
        f"left out), median |error| {dec.median_abs_error:.1%}, mean step "
        f"{dec.step_mean_fitted_s * 1e3:.2f} ms vs {dec.step_mean_measured_s * 1e3:.2f} ms"
        + (f" (at bound {dec.at_bound})" if dec.at_bound else "")
    )
    for key in (*SIM_CALIBRATION_SHOWN, "decode_step_mean", "chunk_step_mean", "chunk_token_s"):
        err = cal.relative_error.get(key)
        if err is None:
            continue
        role = "fitted" if key in cal.fit_targets else "check"
        typer.echo(
            f"  {key:<9} measured {_ms_of(cal.measured, key)}   replayed "
            f"{_ms_of(cal.predicted, key)}   error {err:+.1%} ({role})"
        )


def _print_holdout(check: Holdout) -> None:
    typer.echo(
        f"held-out check on {check.run} ({check.requests} requests, "
        f"max_num_batched_tokens={check.max_num_batched_tokens}):"
    )
    for key in SIM_HOLDOUT_SHOWN:
        err = check.relative_error.get(key)
        if err is None:
            continue
        verdict = check.within_goal.get(key)
        mark = "" if verdict is None else ("  within" if verdict else "  OUTSIDE")
        goal = check.goals.get(key, check.goal)
        typer.echo(
            f"  {key:<9} measured {_ms_of(check.measured, key)}   predicted "
            f"{_ms_of(check.predicted, key)}   error {err:+.1%}"
            + (f"{mark} ±{goal:.0%}" if mark else "")
        )


def _ms_of(figures: FitFigures, name: str) -> str:
    """A figure in milliseconds, right-aligned in 12 characters (``–``: unknown)."""
    value = figures.figure(name)
    return f"{'–':>12}" if value is None else f"{value * 1e3:9.2f} ms"


def _ms(value: float | None) -> str:
    return "–" if value is None else f"{value * 1e3:,.1f}"


def _print(result: SimulateResult) -> None:
    from rich.console import Console
    from rich.table import Table

    title = f"{result.requests:,} requests · {result.model} on {result.gpu}"
    if not result.complete:
        done, planned = len(result.configurations), result.planned_configurations
        title += f" — interrupted, {done} of {planned} configurations"
    table = Table(title=title)
    for name in ("configuration", "GPUs", "TTFT ms p50/p99/max", "ITL ms p50/p99/max"):
        table.add_column(name, justify="left" if name == "configuration" else "right")
    for name in ("goodput", "tok/s", "KV/TTFT", "front", "break-even link"):
        table.add_column(name, justify="right")
    for row in result.configurations:
        be = row.break_even
        table.add_row(
            row.label,
            str(row.gpus),
            "/".join(_ms(row.statistic(TTFT.key, k)) for k in ("p50", "p99", "max")),
            "/".join(_ms(row.statistic(ITL.key, k)) for k in ("p50", "p99", "max")),
            "–" if row.goodput is None else f"{row.goodput:.1%}",
            "–" if row.output_tokens_per_s is None else f"{row.output_tokens_per_s:,.0f}",
            f"{row.kv_transfer_share_of_ttft:.1%}" if row.disaggregate else "–",
            "★" if row.pareto else "",
            "–" if be is None else (f"{be.gbps:,.1f} Gb/s" if be.bracket_gbps else be.note),
        )
    console = Console()
    console.width = max(console.width, TABLE_WIDTH)
    console.print(table)
    speed = result.speed
    typer.echo(
        f"simulated {result.requests:,} requests × {len(result.configurations)} "
        f"configurations in {speed.grid_wall_s:.1f} s "
        f"({speed.requests_per_s:,.0f} requests/s, {speed.output_tokens_per_s:,.0f} "
        "output tokens/s of virtual clock). front: no other configuration has both a lower "
        "TTFT p99 and a lower ITL p99; break-even: the slowest link at which P/D does as "
        "well as monolithic at the same chunk budget (goodput under --slo, else TTFT p99)."
    )


def register(app: typer.Typer) -> None:
    app.command("simulate")(simulate)
