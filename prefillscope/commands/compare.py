"""``prefillscope compare BASE_RUN NEW_RUN [--gate METRIC:+X%]…``: the CI gate.

Side by side, per metric: BASE, NEW, the change, its bootstrap interval, the p-value read
from the same replicates, and its status — significant, not significant, inconclusive
(the data cannot decide; the row says why and the run size that would) or missing (a
run lacks the metric) — and each gate's verdict: pass, fail or inconclusive
(``diagnose.compare``). Exit status 0 when the gates pass, 1 when one fails or is
inconclusive (``--inconclusive pass`` lets an undecided gate through), 2 for unusable
input (unknown metric, bad gate, not a run directory, a BASE without a completed
request, runs of different workloads without ``--force``). Output as a rich table,
markdown, JSON or JUnit XML; with ``$GITHUB_STEP_SUMMARY`` set, the markdown is
appended there too, whatever the format.

The comparison (scipy, pandas), its formatting and rich are imported when the command
runs; the flags' defaults and metric names come from ``diagnose.metrics``, which needs
none of them, so the CLI starts without them.
"""

from __future__ import annotations

import json
import math
import os
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated
from xml.etree import ElementTree as ET

import typer

from diagnose.metrics import CONFIDENCE, DEFAULT_METRICS, METRIC_GRAMMAR, RESAMPLES
from probes.units import p_value_text
from workloads.errors import InputError

if TYPE_CHECKING:
    from diagnose.gate import CompareResult, MetricResult


class Format(StrEnum):
    TABLE = "table"
    MARKDOWN = "markdown"
    JSON = "json"
    JUNIT = "junit"


class Undecided(StrEnum):
    FAIL = "fail"
    PASS = "pass"


def _value(row: MetricResult, value: float) -> str:
    """A latency with its unit; a throughput per second (the metric's name says of what)."""
    from prefillscope.report.numbers import fmt_duration, fmt_rate

    return fmt_duration(value) if row.spec.is_latency else fmt_rate(value, "/s")


def _percent(ratio: float | None) -> str:
    """NEW/BASE − 1 in percent; ``+∞%`` when BASE was zero, ``n/a`` when unknown."""
    if ratio is None or math.isnan(ratio):
        return "n/a"
    return "+∞%" if math.isinf(ratio) else f"{(ratio - 1.0) * 100:+.1f}%"


_STATUS = {"significant": "yes", "not significant": "no"}
#: The table's status column at its narrowest: a note under the table says why.
_SHORT_STATUS = {"inconclusive": "?", "missing": "—"}


def _cells(row: MetricResult) -> list[str]:
    """metric, base, new, change, interval, p, status, gate — as display strings."""
    c = row.comparison.to_dict()
    low, high = row.comparison.ci_low, row.comparison.ci_high
    interval = "n/a" if math.isnan(low) or math.isnan(high) else f"{_percent(low)}…{_percent(high)}"
    gate = ""
    if row.gate is not None:
        limit = f"{row.gate.max_worsening * 100:g}%"
        verdict = row.gate_verdict
        gate = {"fail": f"FAIL >{limit}", "pass": f"ok ≤{limit}"}.get(verdict, f"? {limit}")
    return [
        row.spec.name,
        _value(row, row.comparison.base),
        _value(row, row.comparison.new),
        _percent(row.comparison.ratio),
        interval.replace("%", ""),
        p_value_text(c["p_value"], c["resamples"]),
        _STATUS.get(row.status, row.status),
        gate,
    ]


def _columns(result: CompareResult) -> list[str]:
    level = f"{result.confidence * 100:g}% CI, %"
    return ["metric", "base", "new", "change", level, "p", "sig.", "gate"]


def _verdict(result: CompareResult) -> str:
    gated = sum(row.gate is not None for row in result.rows)
    if result.failed_gates:
        names = ", ".join(
            f"{row.spec.name} {_percent(row.comparison.ratio)}" for row in result.failed_gates
        )
        return f"FAIL: regression beyond its gate (the whole interval): {names}"
    if result.undecided_gates:
        names = ", ".join(row.spec.name for row in result.undecided_gates)
        counts = "a failure" if not result.passed else "a pass (--inconclusive pass)"
        return f"INCONCLUSIVE, counted as {counts}: the data cannot decide {names}"
    return f"PASS: {gated} gate(s) held" if gated else "no gates given"


def _notes(result: CompareResult) -> list[str]:
    """One line per row that does not decide: why, and the run size that would."""
    return [
        f"{row.spec.name}: {'gate ' if row.gate_verdict else ''}"
        f"{row.gate_verdict or row.status}: {row.reason}"
        for row in result.rows
        if row.reason
    ]


def to_markdown(result: CompareResult) -> str:
    """A GitHub-flavoured markdown summary: verdict, runs, one table, the undecided rows."""
    lines = [
        f"### prefillscope compare — {_verdict(result)}",
        "",
        f"BASE `{result.base}` → NEW `{result.new}`. Change = NEW/BASE − 1, with its "
        "bootstrap interval; significant = the interval excludes 0; a gate fails when the "
        "whole interval is beyond its limit, passes when it is all within, else is "
        "inconclusive.",
    ]
    if result.differences:
        lines += ["", f"Compared with --force despite: {'; '.join(result.differences)}."]
    lines += ["", "| " + " | ".join(_columns(result)) + " |"]
    lines.append("|" + "|".join(["---", "---:", "---:", "---:", "---", "---:", "---", "---"]) + "|")
    lines += ["| " + " | ".join(_cells(row)) + " |" for row in result.rows]
    notes = _notes(result)
    if notes:
        lines += ["", *(f"- {note}" for note in notes)]
    return "\n".join(lines) + "\n"


def to_junit(result: CompareResult) -> str:
    """JUnit XML: one test case per metric; a failure for each gate that does not pass
    (an inconclusive one too, unless ``--inconclusive pass``, which makes it skipped)."""
    failing = [row for row in result.rows if _junit_fails(result, row)]
    suite = ET.Element(
        "testsuite",
        name="prefillscope compare",
        tests=str(len(result.rows)),
        failures=str(len(failing)),
        errors="0",
    )
    columns = _columns(result)
    for row in result.rows:
        case = ET.SubElement(
            suite, "testcase", classname="prefillscope.compare", name=row.spec.name
        )
        cells = zip(columns[1:], _cells(row)[1:], strict=True)
        text = ", ".join(f"{k}: {v}" for k, v in cells if v)
        if row.reason:
            text += f"; {row.status}: {row.reason}"
        if row in failing:
            message = (
                f"{row.spec.name}: gate {row.gate_verdict} ({row.gate.text if row.gate else ''})"
            )
            ET.SubElement(case, "failure", message=message).text = text
        elif row.gate_verdict == "inconclusive":
            ET.SubElement(case, "skipped", message=f"{row.spec.name}: inconclusive").text = text
        else:
            ET.SubElement(case, "system-out").text = text
    root = ET.Element("testsuites")
    root.append(suite)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def _junit_fails(result: CompareResult, row: MetricResult) -> bool:
    return row.gate_failed or (row.gate_verdict == "inconclusive" and not result.passed)


def _print_table(result: CompareResult) -> None:
    from rich import box
    from rich.console import Console
    from rich.markup import escape
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
    rows = [_cells(row) for row in result.rows]
    for i in keep:
        # The metric, its change, its status and its gate never shrink; the rest may.
        widest = max([len(columns[i]), *(len(cells[i]) for cells in rows)]) if i != 6 else 4
        table.add_column(
            columns[i],
            justify="right" if 0 < i < 6 else "left",
            no_wrap=True,
            min_width=widest if i in (0, 3, 7) else None,
        )
    for row, plain in zip(result.rows, rows, strict=True):
        cells = [escape(cell) for cell in plain]
        cells[6] = _SHORT_STATUS.get(row.status, cells[6])  # the notes below spell it out
        if row.comparison.significant:
            tone = "red" if row.worsening > 0 else "green"
            cells[3] = f"[{tone}]{cells[3]}[/{tone}]"
        if row.gate_verdict in ("fail", "inconclusive"):
            cells[7] = f"[bold red]{cells[7]}[/bold red]"
        table.add_row(*(cells[i] for i in keep))
    console.print(table)
    for note in _notes(result):
        console.print(escape(note), soft_wrap=True)
    for difference in result.differences:
        console.print(f"[yellow]compared with --force despite {escape(difference)}[/yellow]")
    console.print(("[bold red]" if not result.passed else "[bold]") + escape(_verdict(result)))


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

    if not 0.5 <= confidence < 1.0:
        raise InputError("--confidence", f"{confidence} is not in [0.5, 1)", "e.g. 0.95")
    if resamples < 100:
        raise InputError("--resamples", f"{resamples} is too few", "use 1000 or more")
    gates = [parse_gate(text) for text in gate or []]

    def one(base: Path, new: Path):
        return compare_runs(
            base,
            new,
            gates,
            metrics=metric or DEFAULT_METRICS,
            force=force,
            resamples=resamples,
            confidence=confidence,
            seed=seed,
            inconclusive=undecided.value,
        )

    chosen = Format.JSON if as_json else output_format
    if _compared_sweeps(base_run, new_run, one, chosen):
        return
    result = one(base_run, new_run)
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


def _compared_sweeps(base: Path, new: Path, one, chosen: Format) -> bool:
    """Two sweep folders: each shared load compared (``prefillscope.sweep_compare``);
    exit 1 when any point's gate fails. False when these are runs, not sweeps."""
    from prefillscope.sweep_compare import compare_sweeps, knee_sentence

    compared = compare_sweeps(base, new, one)
    if compared is None:
        return False
    knees, results = compared
    if chosen is Format.JSON:
        points = {name: result.to_dict() for name, result in results}
        typer.echo(json.dumps({"sweep": knees, "points": points}))
    else:
        for name, result in results:
            typer.echo(f"— {name}")
            _print_table(result)
        typer.echo(knee_sentence(knees))
    if not all(result.passed for _, result in results):
        raise typer.Exit(1)
    return True


def register(app: typer.Typer) -> None:
    app.command("compare")(compare)
