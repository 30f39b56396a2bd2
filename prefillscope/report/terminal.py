"""The report in a terminal, with rich: the same content as the HTML page, minus the plots.

Every string from a run file goes into a ``rich.text.Text`` (never into console markup),
so a model name like ``[bold]x`` or an error body prints as written. Tables keep numbers
on one line and drop secondary columns on narrow terminals instead of wrapping them.
"""

from __future__ import annotations

import numpy as np
from rich import box
from rich.console import Console, Group, RenderableType
from rich.padding import Padding
from rich.panel import Panel
from rich.rule import Rule
from rich.table import Table
from rich.text import Text

from prefillscope.report import content, findings, isolation, numbers
from prefillscope.report.data import ReportData, long_prompt_arrivals
from prefillscope.report.figures import windowed_percentiles

TONE_STYLES = {
    "good": "bold green",
    "bad": "bold red",
    "warn": "bold yellow",
    "mild": "yellow",
    "muted": "dim",
}
SPARK = "▁▂▃▄▅▆▇█"
NARROW = 100  # below this width, the p95 column is left out


def render_terminal(data: ReportData, console: Console, html_path: str | None = None) -> None:
    """Print the whole report to ``console``."""
    for part in report_renderables(data, console.width, html_path):
        console.print(part)


def report_renderables(
    data: ReportData, width: int, html_path: str | None = None
) -> list[RenderableType]:
    parts: list[RenderableType | None] = [
        Rule(f"{content.header(data).title}: the answer", style="dim"),
        _answer(data),
        _header(data),
        _client_warning(data),
        _notes(data.notes),
        Rule("Summary", style="dim"),
        _latency(data, width),
        _stalls(data),
        _pairs_side_by_side(data, width),
        _itl_by_kind(data),
        _itl_sparkline(data, width),
        _pool(data),
        Rule("Diagnosis: every finding", style="dim") if data.diagnosis is not None else None,
        _findings(data),
        _errors(data),
        Text(
            f"HTML report with plots: {html_path}"
            if html_path
            else f"Plots: prefillscope report {data.path} --html report.html",
            style="dim",
        ),
    ]
    return [p for p in parts if p is not None]


def _tone(tone: str) -> str:
    return TONE_STYLES.get(tone, "dim")


def _header(data: ReportData) -> Panel:
    hdr = content.header(data)
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="dim", no_wrap=True)
    grid.add_column(overflow="fold")
    for name, value in hdr.fields:
        grid.add_row(name, Text(value))
    body: list[RenderableType] = [grid]
    if hdr.status_note:
        body.insert(0, Text(hdr.status_note, style=_tone(hdr.status_tone)))
    title = (
        Text(hdr.title)
        + Text("  ")
        + Text(f" {hdr.status} ", style=f"reverse {_tone(hdr.status_tone)}")
    )
    return Panel(Group(*body), title=title, title_align="left", box=box.ROUNDED)


def _client_warning(data: ReportData) -> RenderableType | None:
    """What shaped the run besides the server: the client, other clients' traffic."""
    found = content.run_warnings(data.sections)
    return Group(*(Text(w, style=TONE_STYLES["warn"]) for w in found)) if found else None


def _notes(notes: list[str]) -> RenderableType | None:
    if not notes:
        return None
    return Group(*(Text(f"• {n}", style="dim") for n in notes))


def _table(
    columns: list[str], rows: list[list[str]], numeric_from: int = 1, title: str = ""
) -> Table:
    table = Table(box=box.SIMPLE_HEAD, title=title or None, title_justify="left", pad_edge=False)
    for i, name in enumerate(columns):
        numeric = i >= numeric_from
        table.add_column(
            name, justify="right" if numeric else "left", no_wrap=numeric, overflow="fold"
        )
    for row in rows:
        table.add_row(*(Text(v) for v in row))
    return table


def _latency(data: ReportData, width: int) -> RenderableType:
    from prefillscope.summary_view import latency_view

    if not content.latency_table(data.sections):
        return Text("No latency summary (summary.json absent).", style="dim")
    return latency_view(data.sections, width)


def _pairs_side_by_side(data: ReportData, width: int) -> RenderableType:
    outcome = _table(["figure", "value"], [list(p) for p in content.headline(data.sections)])
    errors = content.error_counts(data.sections)
    err_table = (
        _table(["error class", "requests"], [list(p) for p in errors])
        if errors
        else Padding(Text("No errors recorded.", style="dim"), (1, 0, 0, 0))
    )
    grid = Table.grid(padding=(0, 4))
    grid.add_row(outcome, err_table)
    server = content.server_section(data.sections)
    if not server:
        return grid
    columns = ["server figure", "value", "provenance", "source"]
    keep = len(columns) if width >= NARROW else len(columns) - 1  # sources are long prose
    server_table = _table(columns[:keep], [row[:keep] for row in server], numeric_from=len(columns))
    return Group(grid, server_table)


def _stalls(data: ReportData) -> RenderableType | None:
    rows = content.stall_rows(data.sections)
    if not rows:
        return None
    table = _table(content.STALL_COLUMNS, rows, title="Stalls: each long prefill")
    return Group(table, Text(content.stall_note(data.sections) or "", style="dim"))


def _itl_by_kind(data: ReportData) -> RenderableType | None:
    rows = content.itl_by_kind(data)
    if not rows:
        return None
    return _table(["kind", "gaps", "p50", "p99", "max"], rows, title="ITL by request kind")


def _itl_sparkline(data: ReportData, width: int) -> RenderableType | None:
    """p99 ITL per time window as one line of block characters (log-scaled; blank where
    no token arrived), with the windows that saw a long-prompt arrival marked underneath."""
    gaps = data.gaps
    positive = gaps.gap_s > 0
    t, values = gaps.t_s[positive], gaps.gap_s[positive]
    if values.size < 2 or t.max() <= t.min():
        return None
    windows = max(width - 2, 10)
    _, (p99,) = windowed_percentiles(t, values, (0.99,), windows)
    seen = np.isfinite(p99)
    logs = np.log10(p99[seen])
    span = max(logs.max() - logs.min(), 1e-9)
    line = np.full(windows, " ", dtype=object)
    line[seen] = [
        SPARK[i] for i in np.round((logs - logs.min()) / span * (len(SPARK) - 1)).astype(int)
    ]
    marks = np.full(windows, " ", dtype=object)
    arrivals = long_prompt_arrivals(data.requests)
    inside = arrivals[(arrivals >= t.min()) & (arrivals <= t.max())]
    cells = ((inside - t.min()) / (t.max() - t.min()) * windows).astype(int)
    marks[np.minimum(cells, windows - 1)] = "^"  # the same windows as the p99 line
    text = Text()
    text.append("ITL p99 over time ", style="bold")
    low, high = numbers.fmt_duration(p99[seen].min()), numbers.fmt_duration(p99[seen].max())
    text.append(f"({low} … {high}, log)\n", style="dim")
    text.append("".join(line), style="cyan")
    if inside.size:
        text.append("\n" + "".join(marks), style="magenta")
        text.append("\n^ long-prompt arrival", style="dim")
    return Padding(text, (1, 0))


def _pool(data: ReportData) -> RenderableType | None:
    rows = content.pool_rows(data)
    if not rows or data.pool is None:
        return None
    table = _table(
        ["bucket", "provenance", "min", "max", "last"],
        rows,
        numeric_from=2,
        title=f"KV pool ({data.pool.unit})",
    )
    return Group(
        table, *(Text(f"source of {line}", style="dim") for line in content.pool_sources(data))
    )


def _answer(data: ReportData) -> RenderableType:
    """The primary finding and the decision, before any table."""
    if data.diagnosis is None:
        return Text.assemble(
            ("The diagnosis could not be run here. Run ", "yellow"),
            (content.diagnose_hint(data), "bold"),
            (" and re-run the report.", "yellow"),
        )
    hard, reasons, recommendation = findings.decision(data.diagnosis)
    verdict = {True: ("hard failure", "bad"), False: ("no hard failure", "good")}.get(
        hard, (numbers.UNKNOWN, "muted")
    )
    primary = findings.primary_headline(data.diagnosis)
    blocks: list[RenderableType] = []
    if primary is not None:
        blocks.append(Text(f" {primary[0]} ", style=f"bold reverse {_tone(primary[1])}"))
    blocks += [
        Text.assemble(
            ("Decision: ", "bold"),
            (f" {verdict[0]} ", f"reverse {_tone(verdict[1])}"),
            " ",
            recommendation,
        )
    ]
    blocks += [Text(f"  • {r}") for r in reasons]
    return Group(*blocks)


def _findings(data: ReportData) -> RenderableType | None:
    """Every finding of the diagnosis with its evidence (the answer came first)."""
    if data.diagnosis is None:
        return None
    blocks: list[RenderableType] = []
    for finding in findings.findings(data.diagnosis):
        blocks.append(Text())
        blocks.append(
            Text.assemble(
                (f"{finding.id} ", "bold"),
                finding.title,
                "  ",
                (f" {finding.status} ", f"reverse {_tone(findings.tone(finding.status))}"),
            )
        )
        if finding.summary:
            blocks.append(Text(f"  {finding.summary}"))
        blocks += [
            Text(f"  + {findings.evidence_line(e)}", style="green") for e in finding.evidence
        ]
        blocks += [Text(f"  ? {m}", style="yellow") for m in finding.missing]
        if finding.next:
            blocks.append(Text.assemble(("  next: ", "dim"), finding.next))
    return Group(*blocks)


def _errors(data: ReportData) -> RenderableType | None:
    examples = content.error_examples(data)
    if not examples:
        return None
    return _table(
        ["class", "message (as received)"],
        [list(e) for e in examples],
        numeric_from=9,
        title="Error messages",
    )


# -- an isolation folder (prefillscope.report.isolation) ----------------------------------
def render_isolation(result: isolation.IsolationContent, console: Console) -> None:
    """Print an isolation result: the verdict, what was tested, the table, the power check."""
    hdr = Table.grid(padding=(0, 2))
    hdr.add_column(style="dim", no_wrap=True)
    hdr.add_column(overflow="fold")
    for name, value in result.fields:
        hdr.add_row(name, Text(value))
    style = _tone(result.tone)
    verdict = (
        Text(f" {result.verdict} ", style=f"reverse {style}")
        + Text("  ")
        + Text(result.sentence, style=style)
    )
    title = Text(result.title) + Text(f"  {result.status}", style="dim")
    console.print(Panel(Group(verdict, hdr), title=title, title_align="left", box=box.ROUNDED))
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, padding=(0, 1, 0, 0))
    for i, name in enumerate(isolation.COLUMNS):
        table.add_column(name, justify="right" if 2 <= i < 6 else "left", no_wrap=True)
    for row in result.rows:
        table.add_row(*(Text(v) for v in row))
    console.print(table)
    for line in ([result.power] if result.power else []) + [f"• {n}" for n in result.notes]:
        console.print(Text(line, style="dim"))
    console.print(
        Text(
            f"{result.path}  (prefillscope report {result.path} --html isolation.html)", style="dim"
        )
    )
