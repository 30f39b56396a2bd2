"""``prefillscope compare BASE_RUN NEW_RUN [--gate METRIC:+X%]…``: the CI gate.

Side by side, per metric: BASE, NEW, the change, its bootstrap interval, the p-value read
from the same replicates, and its status — significant, not significant, inconclusive
(the data cannot decide; the row says why and the run size that would) or missing (a
run lacks the metric) — and each gate's verdict: pass, fail or inconclusive
(``diagnose.compare``). Exit status 0 when the gates pass, 1 when one fails or is
inconclusive (``--inconclusive pass`` lets an undecided gate through), 2 for unusable
input (unknown metric, bad gate, not a run directory, a BASE without a completed
request, runs of different workloads without ``--force``). Output as a rich table,
markdown, JSON or JUnit XML (``prefillscope.compare_view``); with
``$GITHUB_STEP_SUMMARY`` set, the markdown is appended there too, whatever the format.
Two sweep folders are compared load by load (``session.sweep_compare``), in the same
formats: a section, or a JUnit suite, per load.

The comparison (scipy, pandas), its formatting and rich are imported when the command
runs; the flags' defaults and metric names come from ``diagnose.metrics``, which needs
none of them, so the CLI starts without them.
"""

from __future__ import annotations

import os
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from diagnose.metrics import (
    CONFIDENCE,
    DEFAULT_METRICS,
    RESAMPLES,
    STALL_METRICS,
    metric_grammar,
)
from workloads.limits import RESAMPLES_BOUND, SEED_BOUND, check_confidence


class Format(StrEnum):
    TABLE = "table"
    MARKDOWN = "markdown"
    JSON = "json"
    JUNIT = "junit"


class Undecided(StrEnum):
    FAIL = "fail"
    PASS = "pass"


def compare(
    base_run: Annotated[Path, typer.Argument(help="The reference run directory.")],
    new_run: Annotated[Path, typer.Argument(help="The run to judge against it.")],
    gate: Annotated[
        list[str] | None,
        typer.Option(
            "--gate",
            help="METRIC:+X% — fail (exit 1) when the whole interval is worse than X %; "
            "pass when it is all within. Repeatable.",
        ),
    ] = None,
    metric: Annotated[
        list[str] | None,
        typer.Option(
            "--metric",
            help=f"A metric to show (repeatable; default {', '.join(DEFAULT_METRICS)}, and "
            f"{', '.join(STALL_METRICS)} when a run has stall events). "
            f"Names: {metric_grammar()}.",
        ),
    ] = None,
    output_format: Annotated[
        Format, typer.Option("--format", help="table, markdown, json or junit.")
    ] = Format.TABLE,
    force: Annotated[
        bool, typer.Option("--force", help="Compare runs even of different workloads.")
    ] = False,
    confidence: Annotated[float, typer.Option(help="Confidence level of intervals.")] = CONFIDENCE,
    resamples: Annotated[int, typer.Option(help="Bootstrap resamples.")] = RESAMPLES,
    seed: Annotated[int, typer.Option(help="Seed of the bootstrap.")] = 0,
    undecided: Annotated[
        Undecided,
        typer.Option(
            "--inconclusive",
            help="What a gate the data cannot decide counts as: fail (default: a gate that "
            "cannot see must not pass) or pass.",
        ),
    ] = Undecided.FAIL,
    as_json: Annotated[bool, typer.Option("--json", help="Same as --format json.")] = False,
) -> None:
    """Compare two runs metric by metric; exit 1 when a gate fails or cannot decide."""
    from diagnose.compare import compare_runs
    from diagnose.gate import parse_gate
    from prefillscope.compare_view import show
    from session.sweep_compare import compare_sweeps

    check_confidence("--confidence", confidence)  # workloads.limits: one bound per flag kind
    RESAMPLES_BOUND.check("--resamples", resamples)
    SEED_BOUND.check("--seed", seed)
    gates = [parse_gate(text) for text in gate or []]

    def one(base: Path, new: Path):
        return compare_runs(
            base,
            new,
            gates,
            metrics=metric or None,
            force=force,
            resamples=resamples,
            confidence=confidence,
            seed=seed,
            inconclusive=undecided.value,
        )

    chosen = Format.JSON if as_json else output_format
    compared = (compare_sweeps(base_run, new_run, one) or one(base_run, new_run)).document()
    show(compared, chosen.value, os.environ.get("GITHUB_STEP_SUMMARY"))
    if not compared.passed:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("compare")(compare)
