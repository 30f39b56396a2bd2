"""The table a bench run ends with: latencies, outcome, errors, the server's view.

The figures and their labels come from ``prefillscope.report.content`` — the same rows
``prefillscope report`` shows — so the end of a run and its report never disagree. This
module only lays them out for a terminal: numbers never wrap, and on a narrow terminal
secondary columns (p95, sources) are left out rather than squeezed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from prefillscope.report import content

#: Below this width the p95 column and the server's sources are left out.
NARROW = 100
STATUS_STYLES = {"complete": "bold green", "interrupted": "bold yellow", "failed": "bold red"}


def _table(columns: list[str], rows: list[list[str]], *, title: str | None = None) -> Table:
    """Left-aligned first column, right-aligned unwrapped numbers after it."""
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, title=title, title_justify="left")
    for i, name in enumerate(columns):
        table.add_column(
            name, justify="left" if i == 0 else "right", no_wrap=i > 0, overflow="ellipsis"
        )
    for row in rows:
        table.add_row(*(Text(cell) for cell in row))
    return table


def _latencies(summary: dict[str, Any], width: int) -> Table:
    columns = content.latency_columns()
    keep = [i for i, name in enumerate(columns) if width >= NARROW or name != "p95"]
    rows = content.latency_table(summary, short=width < NARROW + 20)
    return _table([columns[i] for i in keep], [[row[i] for i in keep] for row in rows])


def _outcome(summary: dict[str, Any]) -> Table:
    rows = [list(pair) for pair in content.headline(summary)]
    by_kind = (summary.get("requests") or {}).get("by_kind") or {}
    if len(by_kind) > 1:
        rows += [[f"requests: {kind}", f"{n:,}"] for kind, n in by_kind.items()]
    chunks = summary.get("chunks") or {}
    rows.append(["multi-token chunks", content.fmt_share(chunks.get("multi_token_share"))])
    goodput = summary.get("goodput")
    if isinstance(goodput, dict):
        rows.append(["goodput (meets every SLO)", content.fmt_share(goodput.get("share"))])
    errors = content.error_counts(summary)
    rows += [[f"errors: {kind}", n] for kind, n in errors]
    return _table(["figure", "value"], rows)


def _error_messages(summary: dict[str, Any]) -> Table | None:
    """The server's own words for the failures, most frequent first."""
    rows = content.error_message_rows(summary)
    if not rows:
        return None
    table = _table(["top error messages", "class", "count"], [])
    table.columns[0].overflow = "fold"  # the message is what the user acts on: all of it
    for message, kind, count in rows:
        table.add_row(Text(message), Text(kind), Text(count))
    return table


def _server(summary: dict[str, Any], width: int) -> RenderableType | None:
    """The server's figures; when there are none, why (in full, at any width: the reason
    is what the user has to act on)."""
    server = content.lookup(summary, "server")
    if isinstance(server, dict) and server.get("available") is False:
        reason = server.get("reason") or "no reason recorded"
        return Text(f"server metrics unknown: {reason}", style="yellow")
    rows = content.server_section(summary)
    if not rows:
        return None
    columns = ["server figure", "value", "provenance", "source"]
    keep = 4 if width >= NARROW + 20 else 3
    return _table(columns[:keep], [row[:keep] for row in rows])


def _picked(summary: dict[str, Any]) -> Table | None:
    """The percentiles asked for with ``--metric-percentiles``/``--percentile-metrics``."""
    picked = summary.get("percentiles")
    if not isinstance(picked, dict) or not picked:
        return None
    labels = list(next(iter(picked.values())))
    names = {key: label for key, label, _ in content.LATENCY_METRICS}
    rows = [
        [names.get(metric, metric), *(content.fmt_duration(v) for v in values.values())]
        for metric, values in picked.items()
    ]
    return _table(["percentiles asked for", *labels], rows)


def summary_renderable(
    summary: dict[str, Any], run_dir: Path, status: str, reason: str | None, width: int
) -> RenderableType:
    """The end-of-run view of ``summary.json``."""
    title = Text("bench ", style="bold") + Text(status, style=STATUS_STYLES.get(status, "bold"))
    if reason:
        title += Text(f" — {reason}", style="dim")
    parts: list[RenderableType] = [title, _latencies(summary, width)]
    warning = content.client_warning(summary)
    if warning:
        parts.append(Text("⚠ " + warning, style="bold yellow"))
    side = Table.grid(padding=(0, 4))
    outcome = _outcome(summary)
    server = _server(summary, width)
    if server is not None and width >= NARROW + 20:
        side.add_row(outcome, server)
        parts.append(side)
    else:
        parts += [outcome] + ([server] if server is not None else [])
    picked = _picked(summary)
    if picked is not None:
        parts.append(picked)
    messages = _error_messages(summary)
    if messages is not None:
        parts.append(messages)
    parts.append(Text(f"run directory: {run_dir}", style="dim"))
    parts.append(Text(f"next: prefillscope report {run_dir}", style="dim"))
    return Group(*parts)
