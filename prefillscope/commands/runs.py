"""``prefillscope runs [DIR]``: the runs under a folder (``runs/`` by default), one row
each with its labels, workload, target, status and headline numbers
(``prefillscope.run_list``); ``--label KEY=VALUE`` keeps the runs carrying it; ``--json``
prints the rows as a JSON list."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer


def runs(
    folder: Annotated[
        Path, typer.Argument(metavar="DIR", help="Folder the runs are in (default: runs).")
    ] = Path("runs"),
    label: Annotated[
        list[str] | None,
        typer.Option(help="Only runs carrying this KEY=VALUE label (repeatable)."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the rows as JSON.")] = False,
) -> None:
    """List runs with their labels, workload, target, status and headline numbers."""
    from prefillscope.run_list import list_runs
    from runfmt.runinfo import parse_labels

    rows = list_runs(folder, parse_labels(label or []))
    if as_json:
        typer.echo(json.dumps(rows, indent=1))
        return
    if not rows:
        typer.echo(f"no runs under {folder}")
        return
    import shutil

    from prefillscope.run_list import render

    width = shutil.get_terminal_size((100, 24)).columns
    for line in render(rows, width):
        typer.echo(line)


def register(app: typer.Typer) -> None:
    app.command("runs")(runs)
