"""``prefillscope export RUN_DIR --format csv|vllm-json [--out FILE]``: a run's
per-request results for other tools (``prefillscope.report.export`` says what each
format holds). Written to FILE, or printed."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from workloads.errors import InputError


def export(
    run_dir: Annotated[Path, typer.Argument(help="A run directory written by bench.")],
    format_: Annotated[
        str, typer.Option("--format", help="csv (one row per request) or vllm-json.")
    ] = "csv",
    out: Annotated[Path | None, typer.Option(help="Write here (default: print).")] = None,
) -> None:
    """Export a run's per-request results as CSV or as vLLM's benchmark result JSON."""
    from prefillscope.report.export import FORMATS, to_csv, to_vllm_json
    from prefillscope.report.page_file import check_destination
    from runfmt.run import open_run
    from runtime import atomic

    if format_ not in FORMATS:
        raise InputError("--format", f"unknown format {format_!r}", "use csv or vllm-json")
    if out is not None:
        check_destination(out, "--out")
    run = open_run(run_dir)  # refuses what is not a run, or a newer format, in one line
    text = to_csv(run.tables.requests) if format_ == "csv" else to_vllm_json(run)
    if out is None:
        typer.echo(text, nl=not text.endswith("\n"))
        return
    atomic.write_text(out, text)  # whole or not at all: a failed write is exit 6


def register(app: typer.Typer) -> None:
    app.command("export")(export)
