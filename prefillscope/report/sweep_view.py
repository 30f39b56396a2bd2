"""A sweep for people: its table (terminal) and its page (HTML, the latency–throughput
curve with the knee marked).

The curve puts p50 and p99 TTFT and ITL (one time unit for the whole axis) against the
achieved request rate of each point, so the knee — where more offered load stops buying
throughput and buys only latency — is where the lines turn up; it is marked, and the
point where the sweep saw saturation is named in the caption.
"""

from __future__ import annotations

from typing import Any

from prefillscope.report.html import CSS
from prefillscope.report.markup import Markup, el, join, void
from prefillscope.report.numbers import fmt_duration
from prefillscope.report.scale import Axis, fmt_plain
from prefillscope.report.svg import PALETTE, Chart
from probes.metric_registry import json_name, stat_of, sweep_figures
from probes.units import fmt_seconds
from runfmt.sweep import COMPLETE, SweepPoint, SweepResult


def _latencies() -> list[tuple[str, str, str]]:
    """The sweep's latencies (the registry's ``sweep_figures``): (header, figure key,
    statistic), the header as a reader names the statistic (``TTFT p50``)."""
    return [
        (metric.named(stat), json_name(name), stat)
        for name in sweep_figures()
        for metric, stat in (stat_of(name),)
    ]


def columns() -> list[tuple[str, str, str]]:
    """Table columns: (header, figure key, formatter kind)."""
    return [
        ("done/s", "achieved_rps", "rate"),
        ("tok/s", "output_tokens_per_s", "rate"),
        ("goodput/s", "goodput_rps", "rate"),
        *((header, key, "time") for header, key, _ in _latencies()),
    ]


def curves() -> list[tuple[str, str, str | None]]:
    """Curves: (label, figure key, dash pattern): the p99s dashed."""
    return [(header, key, "6 4" if stat == "p99" else None) for header, key, stat in _latencies()]


def _cell(value: Any, kind: str) -> str:
    if not isinstance(value, int | float):
        return "–"
    if kind == "time":
        return fmt_duration(value)
    return f"{value:,.1f}" if value < 1000 else f"{value:,.0f}"


def load_label(axis: str, value: float) -> str:
    return f"{value:g} req/s" if axis == "rate" else f"{value:g} users"


def mark(sweep: SweepResult, point: SweepPoint) -> str:
    notes = []
    if point.status == COMPLETE and point.value == sweep.knee:
        notes.append("knee")
    if point.status == COMPLETE and point.value == sweep.saturated_at:
        notes.append("saturated")
    if point.figure("client_limited"):
        notes.append("client-limited")
    return ", ".join(notes)


def sweep_rows(sweep: SweepResult) -> tuple[list[str], list[list[str]]]:
    """The sweep table: offered load, the curve's figures, knee and saturation marks.

    The goodput column is left out when no SLO was given (it would be all dashes)."""
    shown = [c for c in columns() if c[1] != "goodput_rps" or sweep.figure == "goodput_rps"]
    load = "offered/s" if sweep.axis == "rate" else "users"
    header = [load, *(name for name, _, _ in shown), "note"]
    rows = []
    for p in sweep.points:
        status = "" if p.status == COMPLETE else p.status
        note = ", ".join(x for x in (mark(sweep, p), status) if x)
        cells = [_cell(p.figure(key), kind) for _, key, kind in shown]
        rows.append([f"{p.value:g}", *cells, note])
    return header, rows


def sweep_summary(sweep: SweepResult) -> str:
    """One sentence: the knee, where the figure stopped rising (or the server stopped
    serving what it was offered), and which points the client limited."""
    what = "goodput" if sweep.figure == "goodput_rps" else "throughput"
    axis = sweep.axis
    knee = sweep.knee
    done = [p for p in sweep.points if p.status == COMPLETE]
    saturated = next((p for p in done if p.value == sweep.saturated_at), None)
    if knee is not None:
        parts = [f"knee at {load_label(axis, knee)}"]
    elif saturated is not None:
        parts = [
            f"saturated from the first point: sweep lower than {load_label(axis, saturated.value)}"
        ]
    else:
        parts = ["no knee found (no point completed)"]
    if saturated is not None:
        served = saturated.figure("served_rps") or saturated.figure("achieved_rps")
        offered = saturated.figure("offered_rps")
        if sweep.saturation_cause == "served_below_offered" and served and offered:
            parts.append(
                f"saturated at {load_label(axis, saturated.value)}: served {served:.1f} req/s "
                f"of the {offered:.1f} offered"
            )
        else:
            parts.append(f"saturated at {load_label(axis, saturated.value)}: {what} stopped rising")
    elif done and done[-1] is sweep.points[-1]:
        parts.append(f"{what} still rising at the last point: sweep higher")
    elif done:
        stopped = sweep.points[len(done)] if len(done) < len(sweep.points) else sweep.points[-1]
        parts.append(
            f"the sweep ended at {load_label(axis, stopped.value)} ({stopped.status}) "
            "before saturation"
        )
    limited = [p for p in sweep.points if p.figure("client_limited")]
    if limited:
        everywhere = len(limited) == len(sweep.points) and len(limited) > 1
        loads = (
            "every point" if everywhere else ", ".join(load_label(axis, p.value) for p in limited)
        )
        parts.append(f"client-limited at {loads}: latencies there are partly the client's")
    return "; ".join(parts) + "."


def curve_chart(sweep: SweepResult) -> Chart:
    """p50/p99 TTFT and ITL against the achieved request rate, the knee marked."""
    chart = Chart(
        "sweep-curve",
        "Latency vs achieved throughput",
        Axis("achieved throughput (requests/s)", fmt=fmt_plain, include_zero=True),
        Axis("latency", fmt=fmt_seconds, include_zero=True),
        empty_message="no point completed",
    )
    points = [p for p in sweep.points if p.figure("achieved_rps") is not None]
    x = [p.figure("achieved_rps") for p in points]
    for name, key, dash in curves():
        y = [p.figure(key) if p.figure(key) is not None else float("nan") for p in points]
        color = PALETTE[0] if key.startswith("ttft") else PALETTE[1]
        chart.line(name, x, y, color=color, dash=dash)
    knee = next((p for p in points if p.value == sweep.knee), None)
    if knee is not None:
        chart.vlines(
            f"knee ({load_label(sweep.axis, knee.value)})",
            [knee.figure("achieved_rps")],
            color=PALETTE[2],
        )
    return chart


def render_sweep_html(sweep: SweepResult, title: str) -> str:
    """The sweep as one self-contained page: sentence, curve, table."""
    header, rows = sweep_rows(sweep)
    head = el("tr", *(el("th", h, class_="num" if i else None) for i, h in enumerate(header)))
    last = len(header) - 1
    body = join(
        el("tr", *(el("td", c, class_="num" if 0 < i < last else None) for i, c in enumerate(row)))
        for row in rows
    )
    caption = (
        "p50 (solid) and p99 (dashed) time to first token and inter-token latency of each "
        "point against the request rate it achieved; the green line marks the knee. "
        + sweep_summary(sweep)
    )
    page = el(
        "html",
        el(
            "head",
            void("meta", charset="utf-8"),
            el("title", title),
            el("style", Markup(CSS)),
        ),
        el(
            "body",
            el("h1", title),
            el("p", sweep_summary(sweep)),
            el("figure", curve_chart(sweep).render(), el("figcaption", caption)),
            el("table", el("thead", head), el("tbody", body)),
        ),
        lang="en",
    )
    return "<!DOCTYPE html>\n" + page + "\n"


def _probes_by_value(sweep: SweepResult) -> dict[float, dict[str, Any]]:
    """The last probe of an SLA search at each load (a rerun replaces the first)."""
    probes = (sweep.search or {}).get("probes") or []
    return {float(p["value"]): p for p in probes if isinstance(p, dict) and "value" in p}


def _check_text(check: dict[str, Any]) -> str:
    """``TTFT p99 412 ms [380 ms, 455 ms]`` (a latency) or ``8.1 [7.9, 8.3]``."""
    seconds = str(check.get("metric", "")).split("_")[0] not in ("requests", "output")

    def show(value: Any) -> str:
        if not isinstance(value, int | float):
            return "–"
        return fmt_duration(value) if seconds else f"{value:,.2f}"

    interval = ""
    if isinstance(check.get("low"), int | float):
        interval = f" [{show(check['low'])}, {show(check['high'])}]"
    return f"{check.get('metric')} {show(check.get('value'))}{interval}"


def _probe_note(probe: dict[str, Any]) -> str:
    verdict = str(probe.get("verdict", ""))
    missed = [c["bound"] for c in probe.get("checks") or [] if c.get("verdict") == "misses"]
    undecided = [
        c["bound"] for c in probe.get("checks") or [] if c.get("verdict") == "inconclusive"
    ]
    if missed:
        return f"misses {', '.join(missed)}"
    if verdict == "inconclusive" and undecided:
        return f"undecided {', '.join(undecided)}"
    return verdict


def search_rows(
    sweep: SweepResult, header: list[str], rows: list[list[str]]
) -> tuple[list[str], list[list[str]]]:
    """The sweep table of an SLA search: each load's verdict in front of its note."""
    probes = _probes_by_value(sweep)
    out = []
    for point, row in zip(sweep.points, rows, strict=True):
        probe = probes.get(point.value)
        verdict = _probe_note(probe) if probe is not None else ""
        note = ", ".join(x for x in (verdict, row[-1]) if x)
        out.append([*row[:-1], note])
    return header, out


def search_summary(sweep: SweepResult) -> str:
    """What an SLA search found: the answer, the bracket it lies in, the statistics with
    their intervals at the answer, and the probes it took."""
    search = sweep.search or {}
    axis = sweep.axis
    bounds = ", ".join(b["bound"] for b in search.get("bounds") or [])
    probes = _probes_by_value(sweep)
    answer, bracket = search.get("answer"), search.get("bracket") or [None, None]
    missed = bracket[1] if len(bracket) > 1 else None
    ended = search.get("ended")
    count = len(search.get("probes") or [])
    took = f"{count} probes in {fmt_duration(float(search.get('elapsed_s') or 0.0))}"
    what = "rate" if axis == "rate" else "concurrency"
    if search.get("state") == "running":
        return f"SLA search for {bounds}: still running ({count} probes so far)."
    if answer is None:
        first = probes.get(min(probes)) if probes else None
        if first is None:
            return f"SLA search for {bounds}: no probe finished. {took}."
        lowest = load_label(axis, float(first["value"]))
        stats = "; ".join(_check_text(c) for c in first.get("checks") or [])
        if first.get("verdict") == "inconclusive":
            needed = [c.get("needed_requests") for c in first.get("checks") or []]
            more = max((n for n in needed if isinstance(n, int)), default=None)
            would = f"; {more:,} requests per probe would decide" if more else ""
            return (
                f"SLA search for {bounds}: undecided at the lowest load, {lowest} "
                f"({stats}){would}. {took}."
            )
        if ended == "stopped":
            return f"SLA search for {bounds}: stopped at {lowest}. {took}."
        return (
            f"no load meets {bounds}: the lowest, {lowest}, {_probe_note(first)} ({stats}); "
            f"search lower. {took}."
        )
    at = probes.get(float(answer))
    stats = "; ".join(_check_text(c) for c in (at or {}).get("checks") or [])
    head = f"highest {what} meeting {bounds}: {load_label(axis, float(answer))}"
    if ended == "all_met":
        where = "every load given met them: the answer is at least that; search higher"
    elif ended == "stopped":
        where = f"the search was stopped at {load_label(axis, float(missed))}"
    else:
        where = f"the highest load known to meet them lies in [{answer:g}, {missed:g})"
    undecided = search.get("undecided_at")
    if isinstance(undecided, int | float):
        probe = probes.get(float(undecided)) or {}
        near = "; ".join(_check_text(c) for c in probe.get("checks") or [])
        where += (
            f"; at {load_label(axis, float(undecided))} a bound lay within its interval even "
            f"with {probe.get('requests')} requests ({near}): the limit is near there"
        )
    return f"{head} ({where}). At the answer: {stats}. {took}."
