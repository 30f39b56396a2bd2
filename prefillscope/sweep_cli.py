"""A sweep from the command line, shared by ``prefillscope sweep`` and ``bench --rate 1,2,4``
(``bench --concurrency 1,8,64``): run it (``session.sweep``), show it, exit with its status.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer

from prefillscope.bench_flags import BenchFlags
from runfmt.sweep import SweepResult


def run_sweep_command(
    flags: BenchFlags,
    axis: str,
    text: str,
    *,
    endpoint: str | None,
    out: Path | None,
    every_point: bool,
    as_json: bool,
) -> None:
    """Run the sweep of ``text``'s loads on ``axis`` with ``flags`` (validated) as each
    point's bench flags; print its table (or ``sweep.json`` with ``out``, the folder);
    exit 3 when a point did not complete, else 0. ``sweep`` and ``bench --rate 1,2,4``."""
    from rich.console import Console

    from prefillscope.bench_flags import FLAG_BOUNDS
    from prefillscope.dashboard import make_display
    from prefillscope.report.page_file import write_html
    from prefillscope.report.sweep_view import render_sweep_html
    from runtime import signals
    from session.bench_runner import default_out
    from session.sweep import parse_values, run_sweep

    values = parse_values(text, axis)
    for value in values:  # each point within the bounds of one run's flag
        FLAG_BOUNDS[axis].check(f"--{axis}", value)
    base = flags.options(endpoint=endpoint, out=None, command=["prefillscope", *sys.argv[1:]])
    folder = out or default_out("sweep-" + base.workload)

    def display(name: str):
        return make_display(True, f"sweep {name}") if not as_json else make_display(True, name)

    try:  # a stop signal ends the point in progress as a stopped bench; the sweep stops there
        result = signals.run(
            run_sweep(base, axis, values, folder, search=not every_point, display=display)
        )
    except KeyboardInterrupt:  # before a point's run directory existed, or a second signal
        print(
            f"prefillscope: sweep stopped ({signals.stop_name()}); "
            f"the points it finished are in {folder}",
            file=sys.stderr,
        )
        raise typer.Exit(signals.stop_exit_code()) from None
    write_html(
        folder / "sweep.html", render_sweep_html(result, f"prefillscope sweep — {base.workload}")
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
    incomplete = [p for p in result.points if p.status != "complete"]
    raise typer.Exit(3 if incomplete else 0)


def print_sweep(doc: SweepResult, folder: Path, console) -> None:
    """The sweep's table, its sentence and where its folder and curve are."""
    from rich.table import Table
    from rich.text import Text

    from prefillscope.report.sweep_view import sweep_rows, sweep_summary

    header, rows = sweep_rows(doc)
    # no box: its column separators would cost nine columns an 80-column terminal lacks
    table = Table(box=None, pad_edge=False, padding=(0, 1, 0, 0), header_style="bold underline")
    for i, name in enumerate(header):
        table.add_column(name, justify="right" if 0 < i < len(header) - 1 else "left", no_wrap=True)
    for row in rows:
        table.add_row(*(Text(c) for c in row))
    console.print(table)
    console.print(Text(sweep_summary(doc)))
    console.print(Text(f"sweep folder: {folder} (curve: {folder / 'sweep.html'})", style="dim"))
