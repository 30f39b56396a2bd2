"""``simulate --html``: the grid's trade-off as one self-contained page.

One chart, TTFT p99 against ITL p99 (milliseconds), a point per configuration (the
Pareto front drawn as a line through its points), then the table of every figure. It
reuses the report's SVG charts and stylesheet, so it looks like ``report`` pages.
"""

from __future__ import annotations

from prefillscope.report.html import CSS
from prefillscope.report.markup import Markup, el, void
from prefillscope.report.scale import Axis
from prefillscope.report.svg import Chart
from runfmt.metrics import ITL, TTFT
from runfmt.simresult import SimConfiguration, SimulateResult

COLUMNS = ("configuration", "GPUs", "TTFT p50", "TTFT p99", "ITL p50", "ITL p99", "goodput",
           "output tok/s", "KV share of TTFT", "break-even Gb/s")  # fmt: skip


def _ms(value: float | None) -> str:
    return "–" if value is None else f"{value * 1e3:,.1f} ms"


def _cells(row: SimConfiguration) -> list[str]:
    be = row.break_even
    return [
        row.label + (" ★" if row.pareto else ""),
        str(row.gpus),
        _ms(row.statistic(TTFT.key, "p50")),
        _ms(row.statistic(TTFT.key, "p99")),
        _ms(row.statistic(ITL.key, "p50")),
        _ms(row.statistic(ITL.key, "p99")),
        "–" if row.goodput is None else f"{row.goodput:.1%}",
        "–" if row.output_tokens_per_s is None else f"{row.output_tokens_per_s:,.0f}",
        f"{row.kv_transfer_share_of_ttft:.1%}" if row.disaggregate else "–",
        "–" if be is None else (f"{be.gbps:,.2f}" if be.gbps else be.note),
    ]


def _p99s(row: SimConfiguration) -> tuple[float, float] | None:
    """The row's ITL p99 and TTFT p99 in milliseconds, when it has both."""
    itl, ttft = row.statistic(ITL.key, "p99"), row.statistic(TTFT.key, "p99")
    return None if itl is None or ttft is None else (itl * 1e3, ttft * 1e3)


def render_page(result: SimulateResult) -> str:
    """The page for one ``simulate_grid`` result."""
    rows = result.configurations
    chart = Chart(
        "sim-tradeoff",
        "TTFT p99 vs ITL p99 per configuration (lower-left is better)",
        Axis("ITL p99 (ms)"),
        Axis("TTFT p99 (ms)"),
    )
    for row in rows:
        point = _p99s(row)
        if point is not None:
            chart.points(row.label, [point[0]], [point[1]])
    front = sorted(p for r in rows if r.pareto and (p := _p99s(r)) is not None)
    if len(front) > 1:
        chart.line("Pareto front", [x for x, _ in front], [y for _, y in front], dash="4 3")
    header = el("tr", *(el("th", name) for name in COLUMNS))
    body = [el("tr", *(el("td", cell) for cell in _cells(row))) for row in rows]
    title = f"simulate: {result.requests:,} requests, {result.model} on {result.gpu}"
    note = (
        f"KV link {result.link['gbps']:g} Gb/s, transfer {result.kv_transfer}; "
        "★: on the Pareto front of TTFT p99 and ITL p99."
    )
    if not result.complete:
        note = (
            f"Incomplete: {result.reason} after {len(rows)} of "
            f"{result.planned_configurations} configurations. {note}"
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
