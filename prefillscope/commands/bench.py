"""``prefillscope bench``: replay a workload against a server and measure it honestly.

Without ``--endpoint`` the embedded engine is started in-process on a free port (and
configured with ``--engine KEY=VALUE``); with one, the server's flavour is detected
unless ``--backend`` names it. The run goes to a run directory (``--out``, default
``runs/<UTC timestamp>-<workload>``); a live dashboard shows it on a terminal, plain
progress lines elsewhere; a summary table ends it. ``--json`` prints one JSON document
and nothing else on stdout (progress goes to stderr): the run's ``summary.json`` with
``run_dir`` (where the run directory is) and ``status`` in front, so a script needs nothing
else to find the run. ``--rate 1,2,4,8`` (or ``--concurrency 1,8,64``) runs ``prefillscope
sweep`` over those loads instead of one run. ``--dry-run`` builds the plan and prints its
statistics (``session.bench_dry_run``) — requests, token totals, the expected prefix hit
rate — without sending anything.

Exit status (``session.exit_status``): 0 complete; 4 no request succeeded, or more failed
than ``--max-error-rate`` (one line with the server's most common message); 5 a smaller
share of requests met ``--slo`` than ``--min-goodput`` (one line: the SLO, the share); 3
interrupted (the server went away; every finished request is kept); 130 Ctrl-C, 143
SIGTERM, 129 SIGHUP (likewise, in-flight requests ``cancelled``); 1 failed; 2 bad input,
one line, before anything is sent.

The runner, the planner, the dashboard and rich are imported when the command runs (a dry
run imports only the planner), so the CLI starts without them.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from prefillscope.bench_flags import BenchFlags, takes_bench_flags
from prefillscope.vllm_cli import VllmCompatibleCommand
from prefillscope.vllm_result import VllmResultFlags, check_result_dir, wait_ready
from workloads.errors import InputError
from workloads.limits import MAX_SECONDS, Bound

#: vLLM's ready check: 0 (no check) up to a week.
READY_CHECK = Bound(0, MAX_SECONDS, why="a wait is at most a week")

if TYPE_CHECKING:
    from collections.abc import Callable

    from rich.table import Table

    from session.bench_options import BenchOptions
    from session.exit_status import BenchOutcome


def dry_run(
    workload: str,
    overrides: dict[str, object],
    block_size: int | None,
    num_blocks: int | None,
    *,
    as_json: bool,
    workers: int | None = None,
    max_concurrency: int | None = None,
) -> None:
    """Print the plan's statistics (``session.bench_dry_run``); nothing is sent."""
    from rich.console import Console

    from session.bench_dry_run import dry_run_stats

    stats = dry_run_stats(
        workload, overrides, block_size, num_blocks, workers=workers,
        max_concurrency=max_concurrency,
    )  # fmt: skip
    if as_json:
        typer.echo(json.dumps(stats))
        return
    Console().print(_stats_table(stats))


def _stats_table(stats: dict[str, Any]) -> Table:
    from rich.table import Table

    table = Table(title=f"dry run — {stats['workload']} (seed {stats['seed']}), nothing sent")
    table.add_column("figure")
    table.add_column("value", justify="right")
    prefix = stats["prefix"]

    def share(value: float | None) -> str:
        return "unknown" if value is None else f"{value:.3f}"

    rows = [
        ("requests (measured)", f"{stats['requests']:,}"),
        ("warm-up requests", f"{stats['warmup_requests']:,}"),
        ("arrival", str(stats["arrival"])),
        ("schedule", f"{stats['schedule_s']:.1f} s"),
        ("prompt tokens (total)", f"{stats['prompt_tokens'].get('total', 0):,}"),
        ("prompt tokens (mean)", f"{stats['prompt_tokens'].get('mean', 0):,.0f}"),
        ("output tokens (total)", f"{stats['output_tokens'].get('total', 0):,}"),
        ("block size / pool", f"{prefix['block_size']} / {prefix['pool']}"),
        ("block hit rate (workload reuse)", share(prefix["block_hit_rate"])),
        ("expected hit rate (tokens, oracle)", share(prefix["expected_hit_rate"])),
    ]
    if stats.get("offered_rate_per_s"):
        rows.insert(4, ("offered rate", f"{stats['offered_rate_per_s']:.2f} req/s"))
    workers = stats["workers"]
    if workers["asked"] is None:
        why = f"for {workers['planned_tokens_per_s']:,.0f} planned tokens/s"
    else:
        why = f"asked {workers['asked']}"
        why += f": {workers['bound_by']}" if workers["bound_by"] else ""
    rows.append(("worker processes", f"{workers['run']} ({why})"))
    for name, value in rows:
        table.add_row(name, value)
    return table


def _title(options: BenchOptions) -> str:
    where = options.endpoint or "the embedded engine"
    return f"prefillscope bench · {options.workload} → {where}"


def _report(outcome: BenchOutcome, as_json: bool, diagnosis: bool = True) -> None:
    from rich.console import Console

    from prefillscope.summary_view import summary_renderable

    if as_json:
        document = {
            "run_dir": str(outcome.run_dir),
            "status": outcome.status,
        } | outcome.summary.to_json()
        typer.echo(json.dumps(document, default=str))
    else:
        console = Console()
        console.print(
            summary_renderable(
                outcome.summary, outcome.run_dir, outcome.status, outcome.reason, console.width
            )
        )
        if diagnosis and outcome.status == "complete":  # the answer last, when there is one
            from prefillscope.bench_ending import diagnosis_headline

            found = diagnosis_headline(outcome.run_dir)
            if found is not None:
                console.print(found, style="bold", markup=False, highlight=False)
    failing = outcome.requests_failure
    if failing is not None:
        print(f"prefillscope: requests failed: {failing}; {outcome.run_dir}", file=sys.stderr)
    breach = outcome.slo_breach
    if breach is not None:
        print(f"prefillscope: SLO breached: {breach}; {outcome.run_dir}", file=sys.stderr)
    if outcome.usage_warning is not None:
        print(f"prefillscope: warning: {outcome.usage_warning}", file=sys.stderr)
    if outcome.status != "complete":
        print(f"prefillscope: {outcome.ending()}", file=sys.stderr)


@takes_bench_flags
def bench(
    flags: BenchFlags,
    endpoint: Annotated[
        str | None, typer.Option(help="Server base URL (default: start the embedded engine).")
    ] = None,
    out: Annotated[
        Path | None, typer.Option(help="Run directory (default: runs/<time>-<workload>).")
    ] = None,
    dry_run_: Annotated[
        bool, typer.Option("--dry-run", help="Print the plan's statistics; send nothing.")
    ] = False,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json", help="Print summary.json with run_dir and status (or the dry run) only."
        ),
    ] = False,
    max_error_rate: Annotated[
        float | None,
        typer.Option(help="Exit 4 when a larger share of requests fails (0–1, e.g. 0.01)."),
    ] = None,
    min_goodput: Annotated[
        float | None,
        typer.Option(help="Exit 5 when a smaller share of requests meets --slo (0–1, e.g. 0.9)."),
    ] = None,
    save_result: Annotated[
        bool, typer.Option("--save-result", help="Also write vLLM's result JSON (as vLLM).")
    ] = False,
    save_detailed: Annotated[
        bool,
        typer.Option("--save-detailed", help="Keep the per-request lists in it (as vLLM)."),
    ] = False,
    append_result: Annotated[
        bool, typer.Option("--append-result", help="Append it as a line to the file (as vLLM).")
    ] = False,
    result_dir: Annotated[
        Path | None, typer.Option(help="Folder of vLLM's result JSON (as vLLM).")
    ] = None,
    result_filename: Annotated[
        str | None, typer.Option(help="Name of vLLM's result JSON (as vLLM).")
    ] = None,
    result_label: Annotated[
        str | None, typer.Option(help="Its label, vLLM's --label (which is read as this).")
    ] = None,
    metadata: Annotated[
        list[str] | None, typer.Option(help="KEY=VALUE into vLLM's result JSON (as vLLM).")
    ] = None,
    profile: Annotated[
        bool,
        typer.Option("--profile", help="Run the server's profiler over the run (as vLLM)."),
    ] = False,
    ready_check_timeout_sec: Annotated[
        float, typer.Option(help="Wait this long for the server to be up first (as vLLM).")
    ] = 0.0,
    no_diagnosis: Annotated[
        bool,
        typer.Option(
            "--no-diagnosis",
            help="End without diagnosing the run (saves ~1 CPU-s; diagnose RUN_DIR later).",
        ),
    ] = False,
) -> None:
    """Replay a workload against a server (default: the embedded engine); measure it."""
    from runtime.collector import paused

    # Imports, planning, the tables and the summary make next to no reference cycles:
    # no collection there (runtime.collector); the load itself collects.
    with paused():
        from session.exit_status import check_max_error_rate, check_min_goodput

        points = flags.sweep_points()  # --rate 1,2,4,8 or --concurrency 1,8,64
        flags.validate()
        READY_CHECK.check("--ready-check-timeout-sec", ready_check_timeout_sec)
        check_max_error_rate(max_error_rate)
        check_min_goodput(min_goodput, bool(flags.slo or flags.goodput))
        if points is not None:
            one_run_only = {"--dry-run": dry_run_ or None, "--max-error-rate": max_error_rate,
                            "--min-goodput": min_goodput}  # fmt: skip
            _sweep(flags, points, endpoint, out, as_json, one_run_only)
        if dry_run_:
            from prefillscope.bench_vocab import run_slo

            run_slo(flags)  # checked as a run would, though a dry run measures nothing
            overrides = flags.overrides()
            workload = flags.workload_name()
            dry_run(
                workload,
                overrides,
                flags.block_size,
                flags.num_gpu_blocks,
                as_json=as_json,
                workers=flags.workers,
                max_concurrency=flags.max_concurrency,
            )
            return
        vllm = VllmResultFlags(
            save_result, save_detailed, append_result, result_dir, result_filename,
            result_label, tuple(metadata or ()), profile,
        )  # fmt: skip
        vllm.check()
        command = ["prefillscope", *sys.argv[1:]]
        options = flags.options(endpoint=endpoint, out=out, command=command)
        options.max_error_rate = max_error_rate
        options.min_goodput = min_goodput
        options.keep_text = vllm.writes and vllm.detailed
        check_result_dir(vllm)
        wait_ready(options.endpoint, ready_check_timeout_sec, options.api_key)
        _run(options, as_json, _vllm_ends(flags, options, vllm), diagnosis=not no_diagnosis)


def _sweep(
    flags: BenchFlags,
    points: tuple[str, str],
    endpoint: str | None,
    out: Path | None,
    as_json: bool,
    one_run_only: dict[str, object],
) -> None:
    """``bench --rate 1,2,4,8``: ``prefillscope sweep --rates 1,2,4,8``'s run and screen.
    ``one_run_only``: the flags a sweep has not, by name; any given (0 included) is refused."""
    from prefillscope.sweep_cli import run_sweep_command

    axis, text = points
    given = [flag for flag, value in one_run_only.items() if value is not None]
    if given:
        raise InputError(
            f"--{axis}",
            f"{text} runs a sweep, which has no {' or '.join(given)}",
            "give one load, or drop " + ("that flag" if len(given) == 1 else "those flags"),
        )
    run_sweep_command(
        flags, axis, text, endpoint=endpoint, out=out, every_point=False, as_json=as_json
    )


def _vllm_ends(
    flags: BenchFlags, options: BenchOptions, vllm: VllmResultFlags
) -> Callable[[BenchOutcome | None], None]:
    """Start the server's profiler now (``--profile``); the returned call stops it and
    writes vLLM's result file (``--save-result``) once the run is over."""
    from prefillscope import vllm_result

    profiling = vllm.profile and vllm_result.profiler_call(
        options.endpoint, "start_profile", options.api_key
    )

    def end(outcome: BenchOutcome | None) -> None:
        if profiling:
            vllm_result.profiler_call(options.endpoint, "stop_profile", options.api_key)
        if outcome is None or not vllm.writes:
            return
        path = vllm_result.save(
            outcome.run_dir,
            vllm,
            backend=vllm_result.vllm_backend(flags.backend, flags.api),
            rate=flags.rate,  # type: ignore[arg-type]  # one load: a number or None
            max_concurrency=flags.max_concurrency,
            ramp=vllm_result.ramp_of(options.overrides),
            tokenizer=flags.tokenizer,
        )
        print(f"prefillscope: vLLM result file: {path}", file=sys.stderr)

    return end


def _run(
    options: BenchOptions,
    as_json: bool,
    ended: Callable[[BenchOutcome | None], None] | None = None,
    diagnosis: bool = True,
) -> None:
    """Send the workload, report the run and exit with its status; ``ended`` is called
    with the outcome (``None`` when there is none) before the exit."""
    from prefillscope.dashboard import make_display
    from runtime import signals
    from session.bench_runner import run_bench

    try:
        outcome = signals.run(run_bench(options, make_display(as_json, _title(options))))
    except KeyboardInterrupt:  # before the run directory existed, or a second stop signal
        name, status = signals.stop_name(), signals.stop_exit_code()
        if signals.stops() > 1:
            print(
                f"prefillscope: bench stopped by a second {name} while it was stopping; "
                "what it wrote is in its run directory",
                file=sys.stderr,
            )
        else:
            print(f"prefillscope: bench cancelled ({name}) before the run started", file=sys.stderr)
        if ended is not None:
            ended(None)
        raise typer.Exit(status) from None
    _report(outcome, as_json, diagnosis)
    if ended is not None:
        ended(outcome)
    raise typer.Exit(outcome.exit_code)


def register(app: typer.Typer) -> None:
    app.command("bench", cls=VllmCompatibleCommand)(bench)
