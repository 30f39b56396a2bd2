"""What ``prefillscope compare`` shows: a comparison of two runs, or of two sweeps load by
load, as a rich table, GitHub-flavoured markdown, JSON or JUnit XML.

What passes and fails is decided in ``diagnose.gate`` (each gate's verdict, the whole
comparison's, how an undecided gate counts) and ``session.sweep_compare`` (a sweep passes
when every load does); this module only words and lays out those decisions, read from
the document ``--json`` writes (``runfmt.compareresult``), so every format shows the same
figures. A sweep's markdown is one section per load, its JUnit one test suite per load.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from xml.etree import ElementTree as ET

from runfmt.codec import encode
from runfmt.compareresult import (
    FAIL,
    INCONCLUSIVE,
    NOT_APPLICABLE,
    PASS,
    CompareDocument,
    CompareRow,
    SweepCompareDocument,
    SweepKnees,
)
from runfmt.units import p_value_text

Compared = CompareDocument | SweepCompareDocument

#: The heading of a comparison's markdown and the name of its JUnit suite.
TITLE = "prefillscope compare"


def _value(row: CompareRow, value: float) -> str:
    """A latency with its unit; a throughput per second (the metric's name says of what)."""
    from prefillscope.report.numbers import fmt_duration, fmt_rate

    return fmt_duration(value) if row.is_latency else fmt_rate(value, "/s")


def _percent(ratio: float | None) -> str:
    """NEW/BASE − 1 in percent; ``+∞%`` when BASE was zero, ``n/a`` when unknown."""
    if ratio is None or math.isnan(ratio):
        return "n/a"
    return "+∞%" if math.isinf(ratio) else f"{(ratio - 1.0) * 100:+.1f}%"


_STATUS = {"significant": "yes", "not significant": "no"}
#: The table's status column at its narrowest: a note under the table says why.
_SHORT_STATUS = {"inconclusive": "?", "missing": "—", NOT_APPLICABLE: "n/a"}


def _cells(row: CompareRow) -> list[str]:
    """metric, base, new, change, interval, p, status, gate — as display strings."""
    low, high = row.ci_low, row.ci_high
    interval = "n/a" if math.isnan(low) or math.isnan(high) else f"{_percent(low)}…{_percent(high)}"
    gate = ""
    if row.gate is not None:
        limit = f"{row.gate.max_worse_by * 100:g}%"
        verdict = row.gate.verdict
        gate = {"fail": f"FAIL >{limit}", "pass": f"ok ≤{limit}", NOT_APPLICABLE: "n/a"}.get(
            verdict, f"? {limit}"
        )
    return [
        row.metric,
        _value(row, row.base),
        _value(row, row.new),
        _percent(row.ratio),
        interval.replace("%", ""),
        p_value_text(row.p_value, row.resamples),
        _STATUS.get(row.status, row.status),
        gate,
    ]


def _columns(result: CompareDocument) -> list[str]:
    level = f"{result.confidence * 100:g}% CI, %"
    return ["metric", "base", "new", "change", level, "p", "sig.", "gate"]


def _verdict(result: CompareDocument) -> str:
    """The comparison's verdict (``diagnose.gate.CompareResult.verdict``) in one sentence."""
    verdict = result.verdict
    if verdict == FAIL:
        names = ", ".join(
            f"{row.metric} {_percent(row.ratio)}"
            + (" (a trade-off of stalls: see its note)" if row.note else "")
            for row in result.gated(FAIL)
        )
        return f"FAIL: regression beyond its gate (the whole interval): {names}"
    if verdict == INCONCLUSIVE:
        names = ", ".join(row.metric for row in result.gated(INCONCLUSIVE))
        counts = "a failure" if not result.passed else "a pass (--inconclusive pass)"
        return f"INCONCLUSIVE, counted as {counts}: the data cannot decide {names}"
    if verdict == PASS:
        held = len(result.gated(PASS))
        moot = len(result.gated(NOT_APPLICABLE))
        return f"PASS: {held} gate(s) held" + (f", {moot} not applicable" if moot else "")
    return "no gates given"


def _notes(result: CompareDocument) -> list[str]:
    """One line per row that does not decide (why, and the run size that would) or that
    carries a note (a trade-off of stalls)."""
    lines = [
        f"{row.metric}: {'gate ' if row.gate_verdict else ''}"
        f"{row.gate_verdict or row.status}: {text}"
        for row in result.comparisons
        for text in (row.reason, row.note)
        if text
    ]
    return lines


def _named(path: str, labels: Mapping[str, str]) -> str:
    """A run as a reader knows it: its folder, then its labels (``runs/x [gpu=h100]``)."""
    from runfmt.runinfo import label_text

    return f"{path} [{label_text(labels)}]" if labels else path


def to_markdown(result: CompareDocument, title: str = TITLE) -> str:
    """A GitHub-flavoured markdown summary: verdict, runs, one table, the undecided rows."""
    lines = [
        f"### {title} — {_verdict(result)}",
        "",
        f"BASE `{_named(result.base, result.labels.base)}` → "
        f"NEW `{_named(result.new, result.labels.new)}`. Change = NEW/BASE − 1, with its "
        "bootstrap interval; significant = the interval excludes 0; a gate fails when the "
        "whole interval is beyond its limit, passes when it is all within, else is "
        "inconclusive.",
    ]
    if result.workload_differences:
        lines += [
            "",
            f"Compared with --force despite: {'; '.join(result.workload_differences)}.",
        ]
    if result.draws:
        lines += ["", f"Different draws: {result.draws}."]
    lines += ["", "| " + " | ".join(_columns(result)) + " |"]
    lines.append("|" + "|".join(["---", "---:", "---:", "---:", "---", "---:", "---", "---"]) + "|")
    lines += ["| " + " | ".join(_cells(row)) + " |" for row in result.comparisons]
    notes = _notes(result)
    if notes:
        lines += ["", *(f"- {note}" for note in notes)]
    return "\n".join(lines) + "\n"


def _junit_suite(result: CompareDocument, name: str = TITLE) -> ET.Element:
    """One test suite: a test case per metric; a failure for each gate that counts as one
    (``CompareDocument.counts_as_failure``); an undecided gate counted as a pass is
    skipped."""
    rows = result.comparisons
    failing = [row for row in rows if result.counts_as_failure(row)]
    suite = ET.Element(
        "testsuite", name=name, tests=str(len(rows)), failures=str(len(failing)), errors="0",
    )  # fmt: skip
    columns = _columns(result)
    for row in rows:
        case = ET.SubElement(suite, "testcase", classname="prefillscope.compare", name=row.metric)
        cells = zip(columns[1:], _cells(row)[1:], strict=True)
        text = ", ".join(f"{k}: {v}" for k, v in cells if v)
        if row.reason:
            text += f"; {row.status}: {row.reason}"
        if row in failing:
            message = f"{row.metric}: gate {row.gate_verdict} ({row.gate.text if row.gate else ''})"
            ET.SubElement(case, "failure", message=message).text = text
        elif row.gate_verdict in (INCONCLUSIVE, NOT_APPLICABLE):
            message = f"{row.metric}: {row.gate_verdict}"
            ET.SubElement(case, "skipped", message=message).text = text
        else:
            ET.SubElement(case, "system-out").text = text
    return suite


def to_junit(compared: Compared) -> str:
    """JUnit XML: a run comparison is one test suite, a sweep's one per load."""
    root = ET.Element("testsuites")
    for name, result in _parts(compared):
        root.append(_junit_suite(result, TITLE if name is None else f"{TITLE} {name}"))
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def _parts(compared: Compared) -> list[tuple[str | None, CompareDocument]]:
    """(load name, comparison) of a sweep's loads; ``[(None, it)]`` for two runs."""
    if isinstance(compared, CompareDocument):
        return [(None, compared)]
    return list(compared.points.items())


def knee_sentence(knees: SweepKnees) -> str:
    unit = "req/s" if knees.axis == "rate" else "users"

    def say(value: float | None) -> str:
        return "none" if value is None else f"{value:g} {unit}"

    return f"knee: base {say(knees.base)}, new {say(knees.new)}"


def sweep_markdown(sweep: SweepCompareDocument) -> str:
    """A sweep comparison: its verdict and knees, then each load's summary."""
    failed = sweep.failed_points
    verdict = f"FAIL at {', '.join(failed)}" if failed else f"PASS at all {len(sweep.points)}"
    lines = [
        f"## {TITLE} — sweeps over {sweep.sweep.axis}: {verdict} compared loads",
        "",
        knee_sentence(sweep.sweep) + ".",
        "",
    ]
    parts = [to_markdown(result, f"{name}: {TITLE}") for name, result in sweep.points.items()]
    return "\n".join(lines) + "\n".join(parts)


def markdown(compared: Compared) -> str:
    """The markdown of a run comparison or of a sweep comparison."""
    if isinstance(compared, CompareDocument):
        return to_markdown(compared)
    return sweep_markdown(compared)


def show(compared: Compared, output_format: str, step_summary: str | None) -> None:
    """Print ``compared`` as ``table``, ``markdown``, ``json`` or ``junit``; with a
    ``$GITHUB_STEP_SUMMARY`` path, append its markdown there too, whatever the format."""
    import typer

    if output_format == "json":
        typer.echo(json.dumps(encode(compared)))
    elif output_format == "markdown":
        typer.echo(markdown(compared), nl=False)
    elif output_format == "junit":
        typer.echo(to_junit(compared), nl=False)
    elif isinstance(compared, CompareDocument):
        _print_table(compared)
    else:
        for name, result in compared.points.items():
            typer.echo(f"— {name}")
            _print_table(result)
        typer.echo(knee_sentence(compared.sweep))
    if step_summary:
        _append_step_summary(step_summary, markdown(compared) + "\n")


def _append_step_summary(path: str, text: str) -> None:
    """Append to ``$GITHUB_STEP_SUMMARY``; a write that fails is a warning on stderr, never
    the gate's verdict (the exit status stays the comparison's)."""
    import sys

    from runtime.atomic import failure_reason

    try:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(text)
    except OSError as exc:
        where = os.path.dirname(path) or "."
        print(
            f"prefillscope: warning: $GITHUB_STEP_SUMMARY ({path}) not written: "
            f"{failure_reason(where, exc)}; the verdict stands",
            file=sys.stderr,
        )


def _print_table(result: CompareDocument) -> None:
    from rich import box
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = Console()
    table = Table(
        title=escape(
            f"{_named(result.base, result.labels.base)} → {_named(result.new, result.labels.new)}"
        ),
        box=box.SIMPLE_HEAD,
        show_edge=False,
        padding=(0, 1, 0, 0),
    )
    # On a narrow terminal the p-value goes (JSON and markdown keep it); nothing wraps.
    keep = [i for i in range(8) if not (i == 5 and console.width < 90)]
    columns = _columns(result)
    rows = [_cells(row) for row in result.comparisons]
    for i in keep:
        # The metric, its change, its status and its gate never shrink; the rest may.
        widest = max([len(columns[i]), *(len(cells[i]) for cells in rows)]) if i != 6 else 4
        table.add_column(
            columns[i],
            justify="right" if 0 < i < 6 else "left",
            no_wrap=True,
            min_width=widest if i in (0, 3, 7) else None,
        )
    for row, plain in zip(result.comparisons, rows, strict=True):
        cells = [escape(cell) for cell in plain]
        cells[6] = _SHORT_STATUS.get(row.status, cells[6])  # the notes below spell it out
        if row.significant:
            tone = "red" if row.worse else "green"
            cells[3] = f"[{tone}]{cells[3]}[/{tone}]"
        if row.gate_verdict in ("fail", "inconclusive"):
            cells[7] = f"[bold red]{cells[7]}[/bold red]"
        table.add_row(*(cells[i] for i in keep))
    console.print(table)
    for note in _notes(result):
        console.print(escape(note), soft_wrap=True)
    for difference in result.workload_differences:
        console.print(f"[yellow]compared with --force despite {escape(difference)}[/yellow]")
    if result.draws:
        console.print(f"different draws: {escape(result.draws)}", soft_wrap=True)
    console.print(("[bold red]" if not result.passed else "[bold]") + escape(_verdict(result)))
