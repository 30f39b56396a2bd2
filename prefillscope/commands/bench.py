"""``prefillscope bench``: replay a workload against a server and measure it honestly.

Without ``--endpoint`` the embedded engine is started in-process on a free port (and
configured with ``--engine KEY=VALUE``); with one, the server's flavour is detected
unless ``--backend`` names it. The run goes to a run directory (``--out``, default
``runs/<UTC timestamp>-<workload>``); a live dashboard shows it on a terminal, plain
progress lines elsewhere; a summary table ends it. ``--json`` prints ``summary.json``
and nothing else on stdout (progress goes to stderr). ``--dry-run`` builds the plan and
prints its statistics — requests, token totals, the expected prefix hit rate — without
sending anything.

Exit status: 0 complete; 3 interrupted (the server went away; every finished request is
kept); 130 Ctrl-C (likewise); 1 failed; 2 bad input, one line, before anything is sent.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from loadgen.target import api_key_from_env
from prefillscope.bench_plan import resolve_workload
from prefillscope.bench_runner import BenchOptions, BenchOutcome, run_bench
from prefillscope.dashboard import Display, LiveDashboard, PlainProgress
from prefillscope.engine_flags import parse_engine_flags
from prefillscope.summary_view import summary_renderable
from probes.latency import parse_slo
from workloads.build import build_plan
from workloads.errors import InputError
from workloads.registry import known_workloads
from workloads.spec import parse_assignments
from workloads.stats import plan_stats


def workload_overrides(
    sets: list[str],
    *,
    num_requests: int | None,
    duration: float | None,
    rate: float | None,
    arrival: str | None,
    burstiness: float | None,
    concurrency: int | None,
    seed: int | None,
) -> dict[str, object]:
    """``load_spec`` overrides from ``--set`` and the common flags (flags win).

    ``--burstiness`` is vLLM's gamma shape (1: Poisson, below 1: burstier); given alone it
    implies ``--arrival gamma``, as in ``vllm bench serve``.
    """
    if concurrency is not None and rate is not None:
        raise InputError(
            "--concurrency",
            "closed-loop users and an open-loop --rate exclude each other",
            "drop one; cap an open loop with --max-concurrency",
        )
    overrides: dict[str, object] = dict(parse_assignments(sets))
    flags = {
        "num_requests": num_requests,
        "duration": duration,
        "rate": rate,
        "arrival": arrival,
        "burstiness": burstiness,
        "concurrency": concurrency,
        "seed": seed,
    }
    overrides.update({k: v for k, v in flags.items() if v is not None})
    if burstiness is not None and arrival is None and "arrival" not in overrides:
        overrides["arrival"] = "gamma"
    return overrides


def dry_run(
    workload: str,
    overrides: dict[str, object],
    block_size: int | None,
    num_blocks: int | None,
    *,
    as_json: bool,
) -> None:
    """Build the plan and print its statistics; nothing is sent."""
    # Token prompts: the statistics are those of text prompts of the same token counts.
    spec, deadline_s = resolve_workload(workload, {**overrides, "prompt_format": "tokens"})
    stats = plan_stats(build_plan(spec), block_size, num_blocks)
    if deadline_s is not None:
        stats["closed_loop_duration_s"] = deadline_s  # the run sends a prefix of the plan
    if as_json:
        typer.echo(json.dumps(stats))
        return
    Console().print(_stats_table(stats))


def _stats_table(stats: dict[str, Any]) -> Table:
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
    for name, value in rows:
        table.add_row(name, value)
    return table


def make_display(as_json: bool, title: str) -> Display:
    """The live dashboard on a terminal; plain lines otherwise (stderr under ``--json``)."""
    if not as_json and sys.stdout.isatty():
        return LiveDashboard(Console(), title)
    return PlainProgress(sys.stderr if as_json else sys.stdout)


def _title(options: BenchOptions) -> str:
    where = options.endpoint or "the embedded engine"
    return f"prefillscope bench · {options.workload} → {where}"


def _report(outcome: BenchOutcome, as_json: bool) -> None:
    if as_json:
        typer.echo(json.dumps(outcome.summary, default=str))
    else:
        console = Console()
        console.print(
            summary_renderable(
                outcome.summary, outcome.run_dir, outcome.status, outcome.reason, console.width
            )
        )
    if outcome.status != "complete":
        finished = outcome.result.finished
        why = "cancelled (Ctrl-C)" if outcome.cancelled else outcome.reason
        print(
            f"prefillscope: run {outcome.status}: {why}; {finished} finished requests "
            f"kept in {outcome.run_dir}",
            file=sys.stderr,
        )


def bench(
    workload: Annotated[
        str, typer.Option(help=f"Workload: {known_workloads()}.", show_default=False)
    ],
    endpoint: Annotated[
        str | None, typer.Option(help="Server base URL (default: start the embedded engine).")
    ] = None,
    backend: Annotated[str, typer.Option(help="auto, vllm, sglang, llamacpp or openai.")] = "auto",
    api: Annotated[str | None, typer.Option(help="completions, chat, sglang or llamacpp.")] = None,
    model: Annotated[str | None, typer.Option(help="Model name (default: the server's).")] = None,
    api_key: Annotated[
        str | None,
        typer.Option(help="API key (default: $PREFILLSCOPE_API_KEY or $OPENAI_API_KEY)."),
    ] = None,
    set_: Annotated[
        list[str] | None, typer.Option("--set", help="Workload KEY=VALUE (repeatable).")
    ] = None,
    num_requests: Annotated[int | None, typer.Option(help="Requests to send.")] = None,
    duration: Annotated[float | None, typer.Option(help="Seconds to send for.")] = None,
    rate: Annotated[float | None, typer.Option(help="Open-loop request rate (req/s).")] = None,
    arrival: Annotated[
        str | None, typer.Option(help="poisson, gamma, constant, ramp or trace.")
    ] = None,
    burstiness: Annotated[
        float | None, typer.Option(help="Gamma shape as in vLLM (1: Poisson, <1: burstier).")
    ] = None,
    max_concurrency: Annotated[
        int | None, typer.Option(help="Open loop: at most N in flight (the rest wait).")
    ] = None,
    concurrency: Annotated[
        int | None, typer.Option(help="Closed loop: N users, each sending when answered.")
    ] = None,
    seed: Annotated[int | None, typer.Option(help="Workload seed.")] = None,
    out: Annotated[
        Path | None, typer.Option(help="Run directory (default: runs/<time>-<workload>).")
    ] = None,
    slo: Annotated[
        str | None, typer.Option(help="SLOs for goodput, e.g. ttft=0.5,itl=50ms.")
    ] = None,
    dry_run_: Annotated[
        bool, typer.Option("--dry-run", help="Print the plan's statistics; send nothing.")
    ] = False,
    block_size: Annotated[
        int | None, typer.Option(help="Oracle block size (default: the server's).")
    ] = None,
    num_gpu_blocks: Annotated[
        int | None, typer.Option(help="Oracle pool size in blocks (default: the server's).")
    ] = None,
    cache_protocol: Annotated[
        str, typer.Option(help="reset (flush the server's cache), salt (per-run salt), warm.")
    ] = "salt",
    timeout: Annotated[float, typer.Option(help="Per-request timeout (s).")] = 600.0,
    warmup: Annotated[int, typer.Option(help="Unmeasured warm-up requests first.")] = 0,
    metrics_interval: Annotated[float, typer.Option(help="Seconds between scrapes.")] = 0.5,
    no_server_metrics: Annotated[
        bool, typer.Option("--no-server-metrics", help="Do not scrape the server's /metrics.")
    ] = False,
    prometheus: Annotated[
        str | None, typer.Option(help="Read the server's series from this Prometheus too.")
    ] = None,
    gpu: Annotated[str, typer.Option(help="auto (NVML when present) or off.")] = "auto",
    engine: Annotated[
        list[str] | None,
        typer.Option(help="Embedded engine KEY=VALUE, e.g. max_num_batched_tokens=4096."),
    ] = None,
    vocab_size: Annotated[
        int | None, typer.Option(help="Target vocabulary size (token-id prompts).")
    ] = None,
    tokenizer: Annotated[
        str | None, typer.Option(help="tokenizer.json or server URL for text prompts.")
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print summary.json (or the dry run) only.")
    ] = False,
) -> None:
    """Replay a workload against a server (default: the embedded engine); measure it."""
    overrides = workload_overrides(
        set_ or [],
        num_requests=num_requests,
        duration=duration,
        rate=rate,
        arrival=arrival,
        burstiness=burstiness,
        concurrency=concurrency,
        seed=seed,
    )
    if dry_run_:
        dry_run(workload, overrides, block_size, num_gpu_blocks, as_json=as_json)
        return
    if gpu not in ("auto", "off"):
        raise InputError("--gpu", f"unknown mode {gpu!r}", "use auto or off")
    if metrics_interval <= 0:
        raise InputError("--metrics-interval", f"must be positive, got {metrics_interval:g}")
    if engine and endpoint:
        raise InputError("--engine", "configures the embedded engine only", "drop --endpoint")
    options = BenchOptions(
        workload=workload,
        overrides=overrides,
        endpoint=endpoint,
        backend=backend,
        api=api,
        model=model,
        api_key=api_key or api_key_from_env(),
        vocab_size=vocab_size,
        tokenizer=tokenizer,
        engine=parse_engine_flags(engine) if engine else None,
        out=out,
        slo=parse_slo(slo) if slo else None,
        max_concurrency=max_concurrency,
        timeout_s=timeout,
        cache_protocol=cache_protocol,
        warmup=warmup,
        metrics_interval_s=metrics_interval,
        server_metrics=not no_server_metrics,
        prometheus=prometheus,
        gpu=gpu,
        block_size=block_size,
        num_gpu_blocks=num_gpu_blocks,
        command=["prefillscope", *sys.argv[1:]],
    )
    try:
        outcome = asyncio.run(run_bench(options, make_display(as_json, _title(options))))
    except KeyboardInterrupt:
        print("prefillscope: bench cancelled (Ctrl-C) before the run started", file=sys.stderr)
        raise typer.Exit(130) from None
    _report(outcome, as_json)
    raise typer.Exit(outcome.exit_code)


def register(app: typer.Typer) -> None:
    app.command("bench")(bench)
