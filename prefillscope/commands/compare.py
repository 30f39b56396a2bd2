"""``prefillscope compare BASE_RUN NEW_RUN [--gate METRIC:+X%]…``: the CI gate.

Side by side, per metric: BASE, NEW, the change, its confidence interval, the rank
test's p-value and whether the difference is significant (``diagnose.compare``). Exit
status 1 when a gate fails, 0 otherwise; 2 for bad input (unknown metric, bad gate,
not a run directory, runs of different workloads without ``--force``). Output as a rich
table, markdown, JSON or JUnit XML; with ``$GITHUB_STEP_SUMMARY`` set, the markdown is
appended there too, whatever the format.

The comparison (scipy, pandas), its formatting and rich are imported when the command
runs; the flags' defaults and metric names come from ``diagnose.metrics``, which needs
none of them, so the CLI starts without them.
"""

from __future__ import annotations

import json
import os
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated
from xml.etree import ElementTree as ET

import typer

from diagnose.metrics import CONFIDENCE, DEFAULT_METRICS, METRIC_GRAMMAR, RESAMPLES
from workloads.errors import InputError

if TYPE_CHECKING:
    from diagnose.compare import CompareResult, MetricResult


class Format(StrEnum):
    TABLE = "table"
    MARKDOWN = "markdown"
    JSON = "json"
    JUNIT = "junit"


def _value(row: MetricResult, value: float) -> str:
    """A latency with its unit; a throughput per second (the metric's name says of what)."""
    from prefillscope.report.content import fmt_duration, fmt_rate

    return fmt_duration(value) if row.spec.is_latency else fmt_rate(value, "/s")


def _percent(ratio: float | None) -> str:
    return "n/a" if ratio is None else f"{(ratio - 1.0) * 100:+.1f}%"


def _cells(row: MetricResult) -> list[str]:
    """metric, base, new, change, interval, p, significant, gate — as display strings."""
    c = row.comparison.to_dict()
    low, high = c["ci_low"], c["ci_high"]
    interval = "n/a" if low is None else f"{(low - 1) * 100:+.1f}…{(high - 1) * 100:+.1f}"
    gate = ""
    if row.gate is not None:
        limit = f"{row.gate.max_worsening * 100:g}%"
        gate = f"FAIL >{limit}" if row.gate_failed else f"ok ≤{limit}"
    return [
        row.spec.name,
        _value(row, row.comparison.base),
        _value(row, row.comparison.new),
        _percent(c["ratio"]),
        interval,
        "n/a" if c["p_value"] is None else f"{c['p_value']:.2g}",
        "yes" if row.comparison.significant else "no",
        gate,
    ]


def _columns(result: CompareResult) -> list[str]:
    level = f"{result.confidence * 100:g}% CI, %"
    return ["metric", "base", "new", "change", level, "p", "sig.", "gate"]


def _verdict(result: CompareResult) -> str:
    gated = sum(row.gate is not None for row in result.rows)
    if not result.passed:
        names = ", ".join(
            f"{row.spec.name} {_percent(row.comparison.ratio)}" for row in result.failed_gates
        )
        return f"FAIL: significant regression beyond its gate: {names}"
    return f"PASS: {gated} gate(s) held" if gated else "no gates given"


def to_markdown(result: CompareResult) -> str:
    """A GitHub-flavoured markdown summary: verdict, runs, one table."""
    lines = [
        f"### prefillscope compare — {_verdict(result)}",
        "",
        f"BASE `{result.base}` → NEW `{result.new}`. Change = NEW/BASE − 1; significant = "
        "the interval excludes 0 and the Mann–Whitney p < "
        f"{1 - result.confidence:.2g}.",
    ]
    if result.differences:
        lines += ["", f"Compared with --force despite: {'; '.join(result.differences)}."]
    lines += ["", "| " + " | ".join(_columns(result)) + " |"]
    lines.append("|" + "|".join(["---", "---:", "---:", "---:", "---", "---:", "---", "---"]) + "|")
    lines += ["| " + " | ".join(_cells(row)) + " |" for row in result.rows]
    return "\n".join(lines) + "\n"


def to_junit(result: CompareResult) -> str:
    """JUnit XML: one test case per metric, a failure for each failed gate."""
    suite = ET.Element(
        "testsuite",
        name="prefillscope compare",
        tests=str(len(result.rows)),
        failures=str(len(result.failed_gates)),
        errors="0",
    )
    columns = _columns(result)
    for row in result.rows:
        case = ET.SubElement(
            suite, "testcase", classname="prefillscope.compare", name=row.spec.name
        )
        text = ", ".join(
            f"{k}: {v}" for k, v in zip(columns[1:], _cells(row)[1:], strict=True) if v
        )
        if row.gate_failed:
            failure = ET.SubElement(case, "failure", message=f"{row.spec.name} {_verdict(result)}")
            failure.text = text
        else:
            ET.SubElement(case, "system-out").text = text
    root = ET.Element("testsuites")
    root.append(suite)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def _print_table(result: CompareResult) -> None:
    from rich import box
    from rich.console import Console
    from rich.table import Table

    console = Console()
    table = Table(
        title=f"{result.base} → {result.new}",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        padding=(0, 1, 0, 0),
    )
    # On a narrow terminal the p-value goes (JSON and markdown keep it); nothing wraps.
    keep = [i for i in range(8) if not (i == 5 and console.width < 90)]
    columns = _columns(result)
    for i in keep:
        table.add_column(columns[i], justify="right" if 0 < i < 6 else "left", no_wrap=True)
    for row in result.rows:
        cells = _cells(row)
        if row.comparison.significant:
            tone = "red" if row.worsening > 0 else "green"
            cells[3] = f"[{tone}]{cells[3]}[/{tone}]"
        if row.gate_failed:
            cells[7] = f"[bold red]{cells[7]}[/bold red]"
        table.add_row(*(cells[i] for i in keep))
    console.print(table)
    for difference in result.differences:
        console.print(f"[yellow]compared with --force despite {difference}[/yellow]")
    console.print(("[bold red]" if not result.passed else "[bold]") + _verdict(result))


def compare(
    base_run: Annotated[Path, typer.Argument(help="The reference run directory.")],
    new_run: Annotated[Path, typer.Argument(help="The run to judge against it.")],
    gate: Annotated[
        list[str] | None,
        typer.Option(
            "--gate",
            help="METRIC:+X% — fail (exit 1) when NEW is significantly worse by more than X %. "
            "Repeatable.",
        ),
    ] = None,
    metric: Annotated[
        list[str] | None,
        typer.Option(
            "--metric",
            help=f"A metric to show (repeatable; default {', '.join(DEFAULT_METRICS)}). "
            f"Names: {METRIC_GRAMMAR}.",
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
    as_json: Annotated[bool, typer.Option("--json", help="Same as --format json.")] = False,
) -> None:
    """Compare two runs metric by metric; exit 1 when a gate fails."""
    from diagnose.compare import compare_runs, parse_gate

    if not 0.5 <= confidence < 1.0:
        raise InputError("--confidence", f"{confidence} is not in [0.5, 1)", "e.g. 0.95")
    if resamples < 100:
        raise InputError("--resamples", f"{resamples} is too few", "use 1000 or more")
    gates = [parse_gate(text) for text in gate or []]
    result = compare_runs(
        base_run,
        new_run,
        gates,
        metrics=metric or DEFAULT_METRICS,
        force=force,
        resamples=resamples,
        confidence=confidence,
        seed=seed,
    )
    chosen = Format.JSON if as_json else output_format
    if chosen is Format.JSON:
        typer.echo(json.dumps(result.to_dict()))
    elif chosen is Format.MARKDOWN:
        typer.echo(to_markdown(result), nl=False)
    elif chosen is Format.JUNIT:
        typer.echo(to_junit(result), nl=False)
    else:
        _print_table(result)
    step_summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if step_summary:
        with open(step_summary, "a", encoding="utf-8") as fh:
            fh.write(to_markdown(result) + "\n")
    if not result.passed:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("compare")(compare)
