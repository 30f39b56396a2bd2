"""The table a bench run ends with: latencies, outcome, errors, the server's view.

The figures and their labels come from ``prefillscope.report.content`` — the same rows
``prefillscope report`` shows — so the end of a run and its report never disagree. This
module only lays them out for a terminal: nothing is cut and no label wraps. Each table
has variants from the richest (full labels, every column) to the leanest (short labels,
secondary columns left out); the first whose natural width fits the terminal is shown.
Two tables go side by side only when both fit whole.
"""

from __future__ import annotations

import io
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

from rich import box
from rich.console import Console, Group, RenderableType
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from prefillscope.report import content, numbers
from runfmt.summary import Summary

#: Columns between two tables set side by side.
SIDE_GAP = 4
STATUS_STYLES = {"complete": "bold green", "interrupted": "bold yellow", "failed": "bold red"}


def _table(columns: list[str], rows: list[list[str]], *, title: str | None = None) -> Table:
    """Left-aligned first column, right-aligned numbers after it; no cell wraps (the
    variant chosen by ``_fitting`` has room for every cell whole)."""
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, title=title, title_justify="left")
    for i, name in enumerate(columns):
        table.add_column(name, justify="left" if i == 0 else "right", no_wrap=True)
    for row in rows:
        table.add_row(*(Text(cell) for cell in row))
    return table


def natural_width(renderable: RenderableType) -> int:
    """Columns ``renderable`` takes when nothing is wrapped or cut."""
    console = Console(width=100_000, file=io.StringIO())
    return Measurement.get(console, console.options, renderable).maximum


def _fitting(variants: list[Callable[[], Table]], width: int) -> Table:
    """The first variant whose natural width fits ``width`` (else the leanest)."""
    for make in variants:
        table = make()
        if natural_width(table) <= width:
            return table
    return table


#: Latency columns left out, in order, when a table does not fit.
_DROPPED = (
    (),
    ("p95",),
    ("p95", "p99.9"),
    ("p95", "p99.9", "mean"),
    ("p95", "p99.9", "mean", "p90"),
)


def latency_view(summary: Summary, width: int) -> RenderableType:
    """``latency_table`` with legend lines for the abbreviations it shows (short labels,
    ``≤`` bounds, ``*``), packed to ``width``."""
    table, short = _latency_form(summary, width)
    legend = content.latency_legend(content.latency_table(summary, short=short))
    if not legend:
        return table
    return Group(table, *(Text(line, style="dim") for line in legend_lines(legend, width)))


def latency_table(summary: Summary, width: int) -> Table:
    """The latency table in the richest form that fits ``width`` (labels never wrap)."""
    return _latency_form(summary, width)[0]


def _latency_form(summary: Summary, width: int) -> tuple[Table, bool]:
    """The richest table that fits ``width``, and whether its labels are the short ones."""
    columns = content.latency_columns()

    def make(short: bool, dropped: tuple[str, ...]) -> Table:
        keep = [i for i, name in enumerate(columns) if name not in dropped]
        rows = content.latency_table(summary, short=short)
        return _table([columns[i] for i in keep], [[row[i] for i in keep] for row in rows])

    forms = [(False, ())] + [(True, d) for d in _DROPPED]
    for short, dropped in forms:
        table = make(short, dropped)
        if natural_width(table) <= width:
            break
    return table, short


def legend_lines(items: list[str], width: int) -> list[str]:
    """``items`` packed into lines of at most ``width`` columns, ``·`` between them, each
    line indented (an item is never split)."""
    lines: list[str] = []
    for item in items:
        if lines and len(lines[-1]) + 3 + len(item) <= width:
            lines[-1] += f" · {item}"
        else:
            lines.append(f"  {item}")
    return lines


def _outcome(sections: Summary) -> Table:
    rows = [list(pair) for pair in content.headline(sections)]
    by_kind = sections.requests.by_kind
    if len(by_kind) > 1:
        rows += [[f"requests: {kind}", f"{n:,}"] for kind, n in by_kind.items()]
    rows.append(["multi-token chunks", numbers.fmt_share(sections.chunks.multi_token_share)])
    errors = content.error_counts(sections)
    rows += [[f"errors: {kind}", n] for kind, n in errors]
    return _table(["figure", "value"], rows)


def _error_messages(sections: Summary) -> Text | None:
    """The server's own words for the failures, most frequent first, each in full (wrapped,
    never cut: the message is what the user acts on)."""
    rows = content.error_message_rows(sections)
    if not rows:
        return None
    text = Text("top error messages", style="bold")
    for message, kind, count in rows:
        text.append(f"\n  {count}× {kind}: ", style="dim")
        text.append(message)
    return text


def _server(sections: Summary, width: int) -> RenderableType | None:
    """The server's figures; when there are none, why (in full, at any width: the reason
    is what the user has to act on)."""
    server = sections.server
    if server is not None and server.available is False:
        reason = server.reason or "no reason recorded"
        return Text(f"server metrics unknown: {reason}", style="yellow")
    rows = content.server_section(sections)
    if not rows:
        return None
    columns = ["server figure", "value", "provenance", "source"]

    def variant(keep: int) -> Callable[[], Table]:
        return lambda: _table(columns[:keep], [row[:keep] for row in rows])

    return _fitting([variant(4), variant(3), variant(2)], width)


def _picked(sections: Summary) -> Table | None:
    """The percentiles asked for with ``--metric-percentiles``/``--percentile-metrics``."""
    picked = sections.percentiles
    if not picked:
        return None
    labels = list(next(iter(picked.values())))
    rows = [
        [content.picked_label(metric), *(numbers.fmt_duration(v) for v in values.values())]
        for metric, values in picked.items()
    ]
    return _table(["percentiles asked for", *labels], rows)


def command_name() -> str:
    """How to run prefillscope again from here: ``prefillscope`` when that is on PATH, else
    the script as it was started (``.venv/bin/prefillscope``), else ``python -m``."""
    started = sys.argv[0] if sys.argv else ""
    found = shutil.which("prefillscope")
    if found and (not started or Path(found).resolve() == Path(started).resolve()):
        return "prefillscope"
    if Path(started).name == "prefillscope" and Path(started).exists():
        return started
    return f"{sys.executable} -m prefillscope"


def summary_renderable(
    doc: Summary, run_dir: Path, status: str, reason: str | None, width: int
) -> RenderableType:
    """The end-of-run view of ``summary.json``."""
    sections = doc
    title = Text("bench ", style="bold") + Text(status, style=STATUS_STYLES.get(status, "bold"))
    if reason:
        title += Text(f" — {reason}", style="dim")
    parts: list[RenderableType] = [title, latency_view(sections, width)]
    stalls = content.stall_rows(sections)
    if stalls:
        parts.append(_table(content.STALL_COLUMNS, stalls))
        parts.append(Text(content.stall_note(sections) or "", style="dim"))
    parts += [
        Text("⚠ " + warning, style="bold yellow") for warning in content.run_warnings(sections)
    ]
    outcome = _outcome(sections)
    server = _server(sections, width)
    beside = _server(sections, width - natural_width(outcome) - SIDE_GAP)
    if (
        isinstance(beside, Table)
        and natural_width(outcome) + SIDE_GAP + natural_width(beside) <= width
    ):
        side = Table.grid(padding=(0, SIDE_GAP, 0, 0))
        side.add_row(outcome, beside)
        parts.append(side)
    else:
        parts += [outcome] + ([server] if server is not None else [])
    picked = _picked(sections)
    if picked is not None:
        parts.append(picked)
    messages = _error_messages(sections)
    if messages is not None:
        parts.append(messages)
    parts.append(Text(f"run directory: {run_dir}", style="dim"))
    parts.append(Text(f"next: {command_name()} report {run_dir}", style="dim"))
    return Group(*parts)
