"""``prefillscope report RUN_DIR [--html FILE] [--json]``: one run, for people.

The terminal view is printed unless ``--json`` asks for the machine-readable content;
``--html`` additionally writes the self-contained page (plots included) to FILE. Both open
with the answer — the primary finding and the decision — and when the run has no
``diagnosis.json`` the report runs the diagnosis first (``prefillscope diagnose``'s
checklist with its defaults) and saves it there (kept in memory when the folder cannot be
written).

The report's readers and renderers (pandas, numpy, rich) are imported when the command
runs, so the CLI starts without them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer


def report(
    run_dir: Annotated[
        Path, typer.Argument(help="A run directory written by `prefillscope bench`.")
    ],
    html: Annotated[
        Path | None, typer.Option("--html", help="Also write a self-contained HTML page here.")
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
) -> None:
    """Show one run: summary, ITL by kind, KV pool, diagnosis (plots in the HTML page); or an
    isolation folder's verdict."""
    from rich.console import Console

    from prefillscope.report.content import report_dict
    from prefillscope.report.data import load_report_data
    from prefillscope.report.html import render_html
    from prefillscope.report.isolation import is_isolation_dir
    from prefillscope.report.page_file import write_html
    from prefillscope.report.terminal import render_terminal

    if is_isolation_dir(run_dir):
        _isolation_report(run_dir, html, json_out)
        return
    data = with_diagnosis(load_report_data(run_dir))
    if html is not None:
        write_html(html, render_html(data))
    html_path = str(html) if html is not None else None
    if json_out:
        typer.echo(json.dumps(report_dict(data, html_path), indent=2, default=str))
    else:
        render_terminal(data, Console(), html_path)


def with_diagnosis(data):
    """``data`` with a diagnosis: the saved one, else the checklist run now (and saved in
    the run folder when it can be); unchanged when the run cannot be diagnosed."""
    from dataclasses import replace

    from prefillscope.run_diagnosis import diagnose_and_save
    from runfmt.names import DIAGNOSIS_JSON

    if data.diagnosis is not None or data.sections.requests.completed in (None, 0):
        return data
    made = diagnose_and_save(data.path)
    if made is None:
        return data
    diagnosis, saved = made
    if saved:
        said = f"the diagnosis was run for this report and saved as {DIAGNOSIS_JSON}"
    else:
        said = f"the diagnosis was run for this report ({DIAGNOSIS_JSON} could not be saved)"
    notes = [n for n in data.notes if not n.startswith(DIAGNOSIS_JSON)] + [said]
    return replace(data, diagnosis=diagnosis, notes=notes)


def _isolation_report(folder: Path, html: Path | None, json_out: bool) -> None:
    """The report of an isolation folder (``prefillscope isolation``'s)."""
    from rich.console import Console

    from prefillscope.report.html import render_isolation_html
    from prefillscope.report.isolation import isolation_content, isolation_dict, load_isolation
    from prefillscope.report.page_file import write_html
    from prefillscope.report.terminal import render_isolation

    result = isolation_content(load_isolation(folder), folder)
    if html is not None:
        write_html(html, render_isolation_html(result))
    if json_out:
        html_path = str(html) if html is not None else None
        typer.echo(json.dumps(isolation_dict(result, html_path), indent=2, default=str))
    else:
        render_isolation(result, Console())


def register(app: typer.Typer) -> None:
    app.command("report")(report)
