"""A sweep from the command line, shared by ``prefillscope sweep`` and ``bench --rate 1,2,4``
(``bench --concurrency 1,8,64``): run it (``session.sweep``), show it, exit with its status.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import typer

from prefillscope.bench_flags import BenchFlags
from runfmt.sweep import SweepResult
from runfmt.sweep_search import DONE
from workloads.errors import InputError

#: The sweep folder's page: latency against achieved throughput, the knee marked.
SWEEP_HTML = "sweep.html"


def run_sweep_command(
    flags: BenchFlags,
    axis: str,
    text: str,
    *,
    endpoint: str | None,
    out: Path | None,
    every_point: bool,
    as_json: bool,
    find: str | None = None,
    resolution: float = 0.1,
) -> None:
    """Run the sweep of ``text``'s loads on ``axis`` with ``flags`` (validated) as each
    point's bench flags; print its table (or ``sweep.json`` with ``out``, the folder);
    exit 3 when a point did not complete, else 0. ``sweep`` and ``bench --rate 1,2,4``."""
    from rich.console import Console

    from diagnose.sla import parse_bounds
    from prefillscope.bench_flags import FLAG_BOUNDS
    from prefillscope.dashboard import make_display
    from prefillscope.report.page_file import write_html
    from prefillscope.report.sweep_view import render_sweep_html
    from runtime import signals
    from session.bench_runner import default_out
    from session.sla_search import find_highest
    from session.sweep import parse_values, run_sweep

    values = parse_values(text, axis)
    for value in values:  # each point within the bounds of one run's flag
        FLAG_BOUNDS[axis].check(f"--{axis}", value)
    bounds = parse_bounds(find) if find is not None else None
    if bounds is not None and axis == "rate" and math.inf in values:
        raise InputError("--rates", "an SLA search bisects between finite rates", "drop inf")
    base = flags.options(endpoint=endpoint, out=None, command=["prefillscope", *sys.argv[1:]])
    if bounds is not None:
        check_probe_size(base, bounds)
    folder = out or default_out(("find-" if bounds else "sweep-") + base.workload)
    print_estimate(base, axis, values, bounds, resolution)

    def display(name: str):
        return make_display(True, f"sweep {name}") if not as_json else make_display(True, name)

    try:  # a stop signal ends the point in progress as a stopped bench; the sweep stops there
        if bounds is not None:
            job = find_highest(
                base, axis, values, bounds, folder, resolution=resolution, display=display
            )
        else:
            job = run_sweep(base, axis, values, folder, search=not every_point, display=display)
        result = signals.run(job)
    except KeyboardInterrupt:  # before a point's run directory existed, or a second signal
        print(
            f"prefillscope: sweep stopped ({signals.stop_name()}); "
            f"the points it finished are in {folder}",
            file=sys.stderr,
        )
        raise typer.Exit(signals.stop_exit_code()) from None
    write_html(
        folder / SWEEP_HTML, render_sweep_html(result, f"prefillscope sweep — {base.workload}")
    )
    if as_json:
        typer.echo(json.dumps({"out": str(folder)} | result.to_json()))
    else:
        print_sweep(result, folder, Console())
    if signals.received() is not None:
        print(
            f"prefillscope: sweep stopped ({signals.stop_name()}) at its point "
            f"{len(result.points)} of {len(values)}; what it measured is in {folder}",
            file=sys.stderr,
        )
        raise typer.Exit(signals.stop_exit_code())
    if result.search is not None:  # a probe that failed is a verdict (the load missed)
        raise typer.Exit(0 if result.search.state == DONE else 3)
    incomplete = [p for p in result.points if p.status != "complete"]
    if incomplete:
        print(_stopped_line(result, incomplete[0], folder), file=sys.stderr)
    raise typer.Exit(3 if incomplete else 0)


def _stopped_line(result: SweepResult, point, folder: Path) -> str:
    """The one line of a sweep that stopped at a point that did not complete: which, why
    (its ``run.json``'s reason), and what the curve kept. Before, the sweep exited 3 with
    the point's live line last on the screen and no word of why."""
    from runfmt.run import open_run

    try:
        info = open_run(folder / point.run_dir).info
        why = info.reason if info is not None and info.reason else point.status
    except InputError:
        why = point.status
    done = len(result.points) - 1
    points = f"{done} complete point{'s' if done != 1 else ''}"
    knee = "" if result.knee is None else f", the knee at {result.knee:g} from them"
    return (
        f"prefillscope: sweep stopped at point {point.run_dir} ({point.status}: {why}); "
        f"{points} before it{knee}, in {folder / 'sweep.json'}"
    )


def check_probe_size(base, bounds) -> None:
    """Refuse a search whose probes are too small for a bound's quantile ever to be
    decided (a p99 of 80 requests rests on under one value beyond it)."""
    from diagnose.sla import requests_to_decide
    from session.sla_search import planned_shape

    planned, outputs = planned_shape(base)
    if planned is None:
        return
    for bound in bounds:
        least = requests_to_decide(bound, (outputs or 2.0) - 1.0)
        if planned < least:
            raise InputError(
                "--num-requests",
                f"{bound.text} needs {least:,} requests per probe (10 beyond its quantile); "
                f"each probe sends {planned:,}",
                f"give --num-requests {least} or bound a lower quantile (e.g. p90)",
            )


def print_estimate(base, axis: str, values: list[float], bounds, resolution: float) -> None:
    """One line on stderr, before any point runs: how long the sweep (or search) takes."""
    from session.sla_search import estimate, search_steps

    if bounds is None:
        line = estimate(base, axis, values).sentence("sweep")
        line += " (less if it saturates early)"
    else:  # the bisection's probes lie between grid points: each as long as the lowest
        steps = search_steps(values, axis, resolution)
        worst = estimate(base, axis, values + [min(values)] * (steps - len(values)))
        line = worst.sentence("SLA search").replace(" points,", " probes at most,", 1)
        line += " at most (fewer when the bracket closes early; an undecided probe reruns larger)"
    print(f"prefillscope: {line}", file=sys.stderr, flush=True)


def print_sweep(doc: SweepResult, folder: Path, console) -> None:
    """The sweep's table, its sentence and where its folder and curve are."""
    from rich.table import Table
    from rich.text import Text

    from prefillscope.report.sweep_view import (
        search_rows,
        search_summary,
        sweep_rows,
        sweep_summary,
    )

    header, rows = sweep_rows(doc)
    if doc.search is not None:
        header, rows = search_rows(doc, header, rows)
    # no box: its column separators would cost nine columns an 80-column terminal lacks
    table = Table(box=None, pad_edge=False, padding=(0, 1, 0, 0), header_style="bold underline")
    for i, name in enumerate(header):  # the note wraps; numbers never do
        last = i == len(header) - 1
        table.add_column(name, justify="right" if i > 0 and not last else "left", no_wrap=not last)
    for row in rows:
        table.add_row(*(Text(c) for c in row))
    console.print(table)
    console.print(Text(search_summary(doc) if doc.search is not None else sweep_summary(doc)))
    console.print(Text(f"sweep folder: {folder} (curve: {folder / SWEEP_HTML})", style="dim"))
