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
from runfmt.metrics import OUTPUT_TOKENS_PER_S, TTFT, json_name, stat_of, sweep_figures
from runfmt.sweep import (
    ACHIEVED_RPS,
    COMPLETE,
    GOODPUT_RPS,
    OFFERED_RPS,
    SERVED_RPS,
    SweepPoint,
    SweepResult,
)
from runfmt.sweep_search import (
    ALL_MET,
    INCONCLUSIVE,
    MISSES,
    RUNNING,
    STOPPED,
    CheckSection,
    ProbeSection,
    SearchSection,
)
from runfmt.units import fmt_seconds
from workloads.errors import InputError


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
        ("done/s", ACHIEVED_RPS, "rate"),
        ("tok/s", OUTPUT_TOKENS_PER_S.key, "rate"),
        ("goodput/s", GOODPUT_RPS, "rate"),
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
    shown = [c for c in columns() if c[1] != GOODPUT_RPS or sweep.figure == GOODPUT_RPS]
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
    what = "goodput" if sweep.figure == GOODPUT_RPS else "throughput"
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
        served = saturated.figure(SERVED_RPS) or saturated.figure(ACHIEVED_RPS)
        offered = saturated.figure(OFFERED_RPS)
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
    points = [p for p in sweep.points if p.figure(ACHIEVED_RPS) is not None]
    x = [p.figure(ACHIEVED_RPS) for p in points]
    for name, key, dash in curves():
        y = [p.figure(key) if p.figure(key) is not None else float("nan") for p in points]
        color = PALETTE[0] if key.startswith(TTFT.prefix) else PALETTE[1]
        chart.line(name, x, y, color=color, dash=dash)
    knee = next((p for p in points if p.value == sweep.knee), None)
    if knee is not None:
        chart.vlines(
            f"knee ({load_label(sweep.axis, knee.value)})",
            [knee.figure(ACHIEVED_RPS)],
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


def _is_latency(metric: str) -> bool:
    """Whether ``metric`` (``ttft_p99``, ``requests_per_s`` …) is a latency, by the
    registry; a name it does not know (a newer writer's) is shown as a latency."""
    from diagnose.metrics import metric_spec

    try:
        return metric_spec(metric, "sweep.json").is_latency
    except InputError:
        return True


def _check_text(check: CheckSection) -> str:
    """``TTFT p99 412 ms [380 ms, 455 ms]`` (a latency) or ``8.1 [7.9, 8.3]``."""
    seconds = _is_latency(check.metric)

    def show(value: float | None) -> str:
        if value is None:
            return "–"
        return fmt_duration(value) if seconds else f"{value:,.2f}"

    interval = f" [{show(check.low)}, {show(check.high)}]" if check.low is not None else ""
    return f"{check.metric} {show(check.value)}{interval}"


def _probe_note(probe: ProbeSection) -> str:
    checks = probe.checks or ()
    missed = [c.bound for c in checks if c.verdict == MISSES]
    undecided = [c.bound for c in checks if c.verdict == INCONCLUSIVE]
    if missed:
        return f"misses {', '.join(missed)}"
    if probe.verdict == INCONCLUSIVE and undecided:
        return f"undecided {', '.join(undecided)}"
    return probe.verdict


def search_rows(
    sweep: SweepResult, header: list[str], rows: list[list[str]]
) -> tuple[list[str], list[list[str]]]:
    """The sweep table of an SLA search: each load's verdict in front of its note."""
    probes = sweep.search.last_probes() if sweep.search is not None else {}
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
    search = sweep.search or SearchSection()
    axis = sweep.axis
    bounds = ", ".join(b.bound for b in search.bounds)
    probes = search.last_probes()
    answer = search.answer
    missed = search.bracket[1] if search.bracket and len(search.bracket) > 1 else None
    count = len(search.probes)
    took = f"{count} probes in {fmt_duration(search.elapsed_s or 0.0)}"
    what = "rate" if axis == "rate" else "concurrency"
    if search.state == RUNNING:
        return f"SLA search for {bounds}: still running ({count} probes so far)."
    if answer is None:
        first = probes.get(min(probes)) if probes else None
        if first is None:
            return f"SLA search for {bounds}: no probe finished. {took}."
        lowest = load_label(axis, first.value)
        stats = "; ".join(_check_text(c) for c in first.checks or ())
        if first.verdict == INCONCLUSIVE:
            needed = [c.needed_requests for c in first.checks or () if c.needed_requests]
            would = f"; {max(needed):,} requests per probe would decide" if needed else ""
            return (
                f"SLA search for {bounds}: undecided at the lowest load, {lowest} "
                f"({stats}){would}. {took}."
            )
        if search.ended == STOPPED:
            return f"SLA search for {bounds}: stopped at {lowest}. {took}."
        return (
            f"no load meets {bounds}: the lowest, {lowest}, {_probe_note(first)} ({stats}); "
            f"search lower. {took}."
        )
    at = probes.get(answer)
    stats = "; ".join(_check_text(c) for c in (at.checks or () if at is not None else ()))
    head = f"highest {what} meeting {bounds}: {load_label(axis, answer)}"
    if search.ended == ALL_MET:
        where = "every load given met them: the answer is at least that; search higher"
    elif search.ended == STOPPED:
        where = f"the search was stopped at {load_label(axis, float(missed or answer))}"
    else:
        where = f"the highest load known to meet them lies in [{answer:g}, {missed:g})"
    undecided = search.undecided_at
    if undecided is not None:
        probe = probes.get(undecided)
        near = "; ".join(_check_text(c) for c in (probe.checks or () if probe else ()))
        where += (
            f"; at {load_label(axis, undecided)} a bound lay within its interval even "
            f"with {probe.requests if probe else None} requests ({near}): the limit is near there"
        )
    return f"{head} ({where}). At the answer: {stats}. {took}."
