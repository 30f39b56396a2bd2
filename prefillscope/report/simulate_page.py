"""``simulate --html``: the grid's trade-off as one self-contained page.

One chart, TTFT p99 against ITL p99 (milliseconds), a point per configuration (the
Pareto front drawn as a line through its points), then the table of every figure. It
reuses the report's SVG charts and stylesheet, so it looks like ``report`` pages.
"""

from __future__ import annotations

from typing import Any

from prefillscope.report.html import CSS
from prefillscope.report.markup import Markup, el, void
from prefillscope.report.scale import Axis
from prefillscope.report.svg import Chart

COLUMNS = ("configuration", "GPUs", "TTFT p50", "TTFT p99", "ITL p50", "ITL p99", "goodput",
           "output tok/s", "KV share of TTFT", "break-even Gb/s")  # fmt: skip


def _ms(value: float | None) -> str:
    return "–" if value is None else f"{value * 1e3:,.1f} ms"


def _cells(row: dict[str, Any]) -> list[str]:
    be = row["break_even"]
    return [
        row["label"] + (" ★" if row["pareto"] else ""),
        str(row["gpus"]),
        _ms(row["ttft_s"]["p50"]),
        _ms(row["ttft_s"]["p99"]),
        _ms(row["itl_s"]["p50"]),
        _ms(row["itl_s"]["p99"]),
        "–" if row["goodput"] is None else f"{row['goodput']:.1%}",
        "–" if row["output_tokens_per_s"] is None else f"{row['output_tokens_per_s']:,.0f}",
        f"{row['kv_transfer_share_of_ttft']:.1%}" if row["disaggregate"] else "–",
        "–" if be is None else (f"{be['gbps']:,.2f}" if be["gbps"] else be["note"]),
    ]


def render_page(result: dict[str, Any]) -> str:
    """The page for one ``simulate_grid`` result."""
    rows = result["configurations"]
    chart = Chart(
        "sim-tradeoff",
        "TTFT p99 vs ITL p99 per configuration (lower-left is better)",
        Axis("ITL p99 (ms)"),
        Axis("TTFT p99 (ms)"),
    )
    for row in rows:
        itl, ttft = row["itl_s"]["p99"], row["ttft_s"]["p99"]
        if itl is not None and ttft is not None:
            chart.points(row["label"], [itl * 1e3], [ttft * 1e3])
    front = sorted(
        (r["itl_s"]["p99"] * 1e3, r["ttft_s"]["p99"] * 1e3)
        for r in rows
        if r["pareto"] and r["itl_s"]["p99"] is not None and r["ttft_s"]["p99"] is not None
    )
    if len(front) > 1:
        chart.line("Pareto front", [x for x, _ in front], [y for _, y in front], dash="4 3")
    header = el("tr", *(el("th", name) for name in COLUMNS))
    body = [el("tr", *(el("td", cell) for cell in _cells(row))) for row in rows]
    title = f"simulate: {result['requests']:,} requests, {result['model']} on {result['gpu']}"
    note = (
        f"KV link {result['link']['gbps']:g} Gb/s, transfer {result['kv_transfer']}; "
        "★: on the Pareto front of TTFT p99 and ITL p99."
    )
    if result.get("status", "complete") != "complete":
        note = (
            f"Incomplete: {result['reason']} after {len(rows)} of "
            f"{result['planned_configurations']} configurations. {note}"
        )
    page = el(
        "html",
        el("head", void("meta", charset="utf-8"), el("title", title), el("style", Markup(CSS))),
        el(
            "body",
            el("h1", title),
            el("p", note),
            chart.render(),
            el("table", header, *body),
        ),
        lang="en",
    )
    return "<!DOCTYPE html>\n" + page + "\n"
