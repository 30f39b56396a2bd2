"""``prefillscope sweep``: bench runs at increasing load into one folder, until
throughput (or goodput, with ``--slo``) stops rising; a table, ``sweep.json`` and an
HTML latency–throughput curve with the knee marked (``session.sweep`` runs it).

Every bench flag applies to each point; ``--rates 1,2,4,8`` (open loop) or
``--concurrencies 1,8,64`` (closed loop) say the points. ``bench --rate 1,2,4,8`` (or
``--concurrency 1,8,64``) runs the same sweep. ``--find "ttft_p99<500ms,itl_p99<50ms"``
searches instead for the highest load meeting every bound (``session.sla_search``). Before
any point runs, one line says how long the sweep will take. ``--json`` prints ``sweep.json`` with
``out``, the sweep folder, in front.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from prefillscope.bench_flags import BenchFlags, takes_bench_flags
from workloads.errors import InputError


@takes_bench_flags
def sweep(
    flags: BenchFlags,
    rates: Annotated[
        str | None, typer.Option(help="Open-loop request rates to run, e.g. 1,2,4,8,16.")
    ] = None,
    concurrencies: Annotated[
        str | None, typer.Option(help="Closed-loop user counts to run, e.g. 1,8,64.")
    ] = None,
    endpoint: Annotated[
        str | None, typer.Option(help="Server base URL (default: the embedded engine).")
    ] = None,
    out: Annotated[
        Path | None, typer.Option(help="Sweep folder (default: runs/<time>-sweep-<workload>).")
    ] = None,
    every_point: Annotated[
        bool,
        typer.Option("--every-point", help="Run every point, even past saturation."),
    ] = False,
    find: Annotated[
        str | None,
        typer.Option(
            "--find",
            help='Search for the highest load meeting every bound, e.g. "ttft_p99<500ms,'
            'itl_p99<50ms": the loads given are probed in order, then bisected.',
        ),
    ] = None,
    resolution: Annotated[
        float,
        typer.Option(
            min=0.01, max=1.0, help="--find stops when the bracket is this share of its low end."
        ),
    ] = 0.1,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print sweep.json with out (the folder) only.")
    ] = False,
) -> None:
    """Run a workload at increasing load; find where throughput stops rising (the knee),
    or with --find the highest load meeting an SLA."""
    flags.validate()
    if (rates is None) == (concurrencies is None):
        raise InputError(
            "--rates", "give the sweep's points", "--rates 1,2,4 or --concurrencies 1,8"
        )
    from prefillscope.sweep_cli import run_sweep_command

    axis, text = ("rate", rates) if rates is not None else ("concurrency", concurrencies)
    run_sweep_command(
        flags, axis, str(text), endpoint=endpoint, out=out, every_point=every_point,
        as_json=as_json, find=find, resolution=resolution,
    )  # fmt: skip


def register(app: typer.Typer) -> None:
    app.command("sweep")(sweep)
