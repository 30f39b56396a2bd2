"""The terminal view of ``prefillscope diagnose ab``: arms, comparisons, conditions, verdict.

Rendered from the ``ab.json`` document (``AbOutcome.document``), so the table shows what
the file says. Every metric is headed and written as the metric registry names it and
writes its unit (``heading``, ``Metric.format``). Imported by the command when it runs
(rich and the statistics are not needed to start the CLI).
"""

from __future__ import annotations

from math import nan
from typing import Any

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table

from diagnose.ab_events import EVENT_METRICS
from diagnose.ab_metrics import ITL_MAX, ITL_QUANTILES, KIND_TTFT, ab_metric_spec
from diagnose.ab_verdict import change_text
from loadgen.flavours import EMBEDDED_CHUNK_KEY
from probes.metric_registry import (
    AB_ARM_METRICS,
    AB_SLO_TTFT,
    AB_STALL_GAPS,
    AB_TTFT_WEIGHED,
    STAT_LABELS,
    json_name,
)
from probes.units import p_value_text
from session.ab_runner import AbOutcome
from session.launcher import LaunchTemplate

#: Each arm's figures in the arms table, by metric name (the registry's selection).
ARM_METRICS = AB_ARM_METRICS


def heading(name: str, kind: str | None = None) -> str:
    """A column heading as the registry names the metric: ``ITL p99``, ``ITL max``,
    ``TTFT p50 decode``, ``tok/s``."""
    spec = ab_metric_spec(name)
    text = spec.metric.named(spec.stat) if spec.is_latency else spec.metric.short
    return f"{text} {kind}" if kind else text


def figure(name: str, row: dict[str, Any]) -> str:
    """A metric's value from an ``ab.json`` row (``itl_p99_s``, ``output_tokens_per_s``),
    written in the registry entry's unit."""
    spec = ab_metric_spec(name)
    return spec.metric.format(row.get(json_name(name)))


def _arms_table(doc: dict[str, Any]) -> Table:
    table = Table(title="arms (trials pooled)", box=box.SIMPLE_HEAD)
    for name in ("arm", "trials", *(heading(m) for m in ARM_METRICS)):
        table.add_column(name, justify="left" if name == "arm" else "right")
    reference = doc["reference"]["arm"]
    for arm in doc["arms"]:
        table.add_row(
            escape(arm["label"] + (" (ref)" if arm["label"] == reference else "")),
            str(len(arm["trials"])),
            *(figure(m, arm) for m in ARM_METRICS),
        )
    return table


def _interval(value: float | None, bounds: list[float | None] | None) -> str:
    """``8.14 ms [7.82–8.36]``: the bounds in the value's unit."""
    if value is None or not bounds or None in bounds:
        return ab_metric_spec(ITL_MAX).metric.format(value)
    scale, unit = (1e3, "ms") if value < 1 else (1.0, "s")
    low, high = (f"{b * scale:.3g}" for b in (bounds[0], bounds[-1]))
    return f"{value * scale:.3g} {unit} [{low}–{high}]"


def _itl_table(doc: dict[str, Any], confidence: float) -> Table:
    """Each arm's ITL quantiles with their intervals, and its worst gap per trial."""
    itl = ab_metric_spec(ITL_MAX).metric.short
    table = Table(
        title=f"{itl} per arm ({confidence:.0%} intervals; max: range of the trials' maxima)",
        box=box.SIMPLE_HEAD,
    )
    stats = (STAT_LABELS[ab_metric_spec(m).stat] for m in (*ITL_QUANTILES, ITL_MAX))
    for name in ("arm", *stats):
        table.add_column(name, justify="left" if name == "arm" else "right")
    for arm in doc["arms"]:
        intervals = arm.get("intervals") or {}
        maxima = intervals.get(json_name(ITL_MAX, part="per_trial")) or []
        table.add_row(
            escape(arm["label"]),
            *(_interval(arm.get(json_name(m)), intervals.get(json_name(m))) for m in ITL_QUANTILES),
            _interval(arm.get(json_name(ITL_MAX)), [min(maxima), max(maxima)] if maxima else None),
        )
    return table


def _events_table(doc: dict[str, Any], confidence: float) -> Table:
    """Each arm's stall events (one per long prompt): the per-event means, intervals."""
    table = Table(title=f"per prefill event ({confidence:.0%} intervals)", box=box.SIMPLE_HEAD)
    for name in ("arm", "events", *EVENT_METRICS.values()):
        table.add_column(name, justify="left" if name == "arm" else "right")
    for arm in doc["arms"]:
        events = arm["events"]
        table.add_row(
            escape(arm["label"]),
            str(events["count"]),
            *(
                _interval(events[json_name(m, part="mean")], events[json_name(m, part="interval")])
                for m in EVENT_METRICS
            ),
        )
    return table


def _kinds_table(doc: dict[str, Any]) -> Table:
    """TTFT per request kind and arm (mixed traffic: a pooled TTFT hides both)."""
    table = Table(title="TTFT by request kind", box=box.SIMPLE_HEAD)
    for name in ("kind", "arm", "requests", "prompt p50", *(heading(m) for m in KIND_TTFT)):
        table.add_column(name, justify="left" if name in ("kind", "arm") else "right")
    for kind in doc["kinds"]:
        for arm in doc["arms"]:
            row = arm["by_kind"].get(kind, {})
            prompt = row.get("prompt_tokens_p50")
            table.add_row(
                escape(kind),
                escape(arm["label"]),
                str(row.get("requests", 0)),
                "–" if prompt is None else f"{prompt:,.0f}",
                *(figure(m, row) for m in KIND_TTFT),
            )
    return table


def _tradeoffs_table(verdict: dict[str, Any]) -> Table:
    table = Table(title=f"what {verdict['arm']} made significantly worse", box=box.SIMPLE_HEAD)
    for name in ("metric", "vs", "change [interval]", "method"):
        table.add_column(name)
    for t in verdict["tradeoffs"]:
        table.add_row(escape(t["metric"]), escape(t["against"]), escape(t["text"]), t["method"])
    return table


def _comparisons_table(doc: dict[str, Any], confidence: float) -> Table:
    table = Table(
        title=f"each arm vs {doc['reference']['arm']} ({confidence:.0%} intervals)",
        box=box.SIMPLE_HEAD,
    )
    for name in ("arm", "metric", "change [interval]", "p", "method"):
        table.add_column(name, justify="right" if name == "p" else "left")
    for row in doc["comparisons"]:
        bounds = [nan if row[k] is None else row[k] for k in ("ratio", "ci_low", "ci_high")]
        text = change_text(*bounds, row["significant"], row.get("inconclusive") is not None)
        style = "bold" if row["significant"] else "dim"
        p = p_value_text(row["p_value"], row.get("resamples"))
        table.add_row(
            escape(row["arm"]),
            escape(row["metric"]),
            f"[{style}]{escape(text)}[/]",
            p,
            row["method"],
        )
    return table


def _conditions_table(doc: dict[str, Any]) -> Table:
    table = Table(title="conditions", box=box.SIMPLE_HEAD)
    for name in ("check", "matched", "what was seen", "tolerance"):
        table.add_column(name, overflow="fold")
    marks = {True: "[green]yes[/]", False: "[bold red]NO[/]", None: "[dim]n/a[/]"}
    for check in doc["conditions"]["checks"]:
        table.add_row(
            check["name"], marks[check["matched"]], escape(check["detail"]), check["tolerance"]
        )
    return table


def chunk_knob(doc: dict[str, Any]) -> str | None:
    """What the A/B's chunk size set on its servers: the flags its ``--launch`` template
    gave ``{chunk}`` to (``--batch-size/--ubatch-size`` for llama.cpp), the embedded
    engine's ``max_num_batched_tokens``; None when the servers were given (``--a/--b``)."""
    if doc.get("launch"):
        flags = LaunchTemplate(tuple(doc["launch"])).chunk_flags()
        return "/".join(flags) or None
    return EMBEDDED_CHUNK_KEY if doc.get("mode") == "embedded" else None


def _tradeoff_table(doc: dict[str, Any]) -> Table:
    knob = chunk_knob(doc)
    title = f"trade-off by chunk size ({knob})" if knob else "trade-off by chunk size"
    table = Table(title=title, box=box.SIMPLE_HEAD)
    kinds = doc.get("kinds") or []
    ttft = [heading(AB_TTFT_WEIGHED, kind) for kind in kinds] or [heading(AB_TTFT_WEIGHED)]
    columns = (heading(AB_STALL_GAPS), heading(ITL_MAX), *ttft, heading(AB_SLO_TTFT))
    for name in ("chunk", *columns, "meets SLO"):
        table.add_column(name, justify="right")
    for row in doc["tradeoff"]:
        meets = {True: "yes", False: "no", None: "–"}[row["meets_slo"]]
        by_kind = row.get(json_name(AB_TTFT_WEIGHED, part="by_kind")) or {}
        firsts = [by_kind.get(k) for k in kinds] if kinds else [row[json_name(AB_TTFT_WEIGHED)]]
        table.add_row(
            escape(row["arm"]),
            figure(AB_STALL_GAPS, row),
            figure(ITL_MAX, row),
            *(ab_metric_spec(AB_TTFT_WEIGHED).metric.format(v) for v in firsts),
            figure(AB_SLO_TTFT, row),
            meets,
        )
    return table


def _outputs_table(outputs: dict[str, Any]) -> Table:
    table = Table(
        title=f"outputs vs {outputs['reference']} (|Δ logprob| tolerance {outputs['tolerance']:g})",
        box=box.SIMPLE_HEAD,
    )
    columns = ("arm", "status", "compared", "exact match", "diverged at p50", "|Δ logprob| p99/max")
    for name in columns:
        table.add_column(name, justify="left" if name == "arm" else "right")
    rows = [*outputs["arms"]]
    if outputs.get("baseline"):
        rows.append(outputs["baseline"] | {"arm": f"{outputs['reference']} vs itself"})
    for row in rows:
        rate = row["exact_match_rate"]
        diff = row["logprob_abs_diff"]
        first = row["first_divergence"]
        table.add_row(
            escape(row["arm"]),
            row["status"],
            str(row["compared"]),
            "–" if rate is None else f"{rate:.1%}",
            "–" if first["p50"] is None else f"token {first['p50']:.0f}",
            "unknown" if diff is None else f"{diff['p99']:.2g} / {diff['max']:.2g}",
        )
    return table


def render(outcome: AbOutcome, console: Console) -> None:
    """The arms, the comparisons, the conditions, the trade-off, the outputs, the verdict
    with the rule that made it."""
    doc = outcome.document
    confidence = doc["settings"]["confidence"]
    knob = chunk_knob(doc)
    if knob:
        console.print(f"[dim]each arm's chunk size set {escape(knob)}[/]")
    console.print(_arms_table(doc))
    if any(arm.get("intervals") for arm in doc["arms"]):
        console.print(_itl_table(doc, confidence))
    if doc.get("kinds"):
        console.print(_kinds_table(doc))
    if all(arm.get("events") for arm in doc["arms"]):
        console.print(_events_table(doc, confidence))
    if doc["comparisons"]:
        console.print(_comparisons_table(doc, confidence))
    console.print(_conditions_table(doc))
    if len(doc["arms"]) > 2:
        console.print(_tradeoff_table(doc))
    if doc["outputs"] is not None:
        console.print(_outputs_table(doc["outputs"]))
        console.print(escape(doc["outputs"]["sentence"]))
    verdict = doc["verdict"]
    if verdict.get("tradeoffs"):
        console.print(_tradeoffs_table(verdict))
    style = (
        "red" if verdict["refused"] else ("green" if verdict["winner"] is not None else "yellow")
    )
    title = "verdict" if verdict["winner"] is not None else "no winner"
    console.print(Panel(escape(verdict["sentence"]), title=title, border_style=style))
    console.print(f"[dim]rule: {escape(verdict['rule'])}[/]")
    if (verdict.get("needed") or {}).get("units"):
        needed = verdict["needed"]
        console.print(f"[dim]to decide: about {needed['units']} {needed['unit']} per arm[/]")
    console.print(f"[dim]files: {escape(str(outcome.out))}[/]")
