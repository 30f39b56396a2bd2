"""The terminal view of ``prefillscope diagnose ab``: arms, comparisons, conditions, verdict.

Rendered from ``ab.json`` as written (``AbOutcome.result``, ``runfmt.abresult``'s
types), so the table shows what the file says. Every metric is headed and written as the
metric registry names it and writes its unit (``heading``, ``Metric.format``). Imported by
the command when it runs (rich and the statistics are not needed to start the CLI).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
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
from runfmt.abresult import ABResult, KindBlock, OutputCheck, Outputs, Verdict
from runfmt.metrics import (
    AB_ARM_METRICS,
    AB_SLO_TTFT,
    AB_STALL_GAPS,
    AB_TTFT_WEIGHED,
    STAT_LABELS,
    json_name,
)
from runfmt.units import p_value_text
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


def figure(name: str, figures: Mapping[str, Any]) -> str:
    """A metric's value from an ``ab.json`` row's figures (``itl_p99_s``,
    ``output_tokens_per_s``), written in the registry entry's unit."""
    spec = ab_metric_spec(name)
    return spec.metric.format(figures.get(json_name(name)))


def _arms_table(doc: ABResult) -> Table:
    table = Table(title="arms (trials pooled)", box=box.SIMPLE_HEAD)
    for name in ("arm", "trials", *(heading(m) for m in ARM_METRICS)):
        table.add_column(name, justify="left" if name == "arm" else "right")
    reference = doc.reference.arm
    for arm in doc.arms:
        table.add_row(
            escape(arm.label + (" (ref)" if arm.label == reference else "")),
            str(len(arm.trials)),
            *(figure(m, arm.figures) for m in ARM_METRICS),
        )
    return table


def _interval(value: float | None, bounds: Sequence[float | None] | None) -> str:
    """``8.14 ms [7.82–8.36]``: the bounds in the value's unit."""
    if value is None or not bounds or None in bounds:
        return ab_metric_spec(ITL_MAX).metric.format(value)
    scale, unit = (1e3, "ms") if value < 1 else (1.0, "s")
    low, high = (f"{b * scale:.3g}" for b in (bounds[0], bounds[-1]))
    return f"{value * scale:.3g} {unit} [{low}–{high}]"


def _itl_table(doc: ABResult, confidence: float) -> Table:
    """Each arm's ITL quantiles with their intervals, and its worst gap per trial."""
    itl = ab_metric_spec(ITL_MAX).metric.short
    table = Table(
        title=f"{itl} per arm ({confidence:.0%} intervals; max: range of the trials' maxima)",
        box=box.SIMPLE_HEAD,
    )
    stats = (STAT_LABELS[ab_metric_spec(m).stat] for m in (*ITL_QUANTILES, ITL_MAX))
    for name in ("arm", *stats):
        table.add_column(name, justify="left" if name == "arm" else "right")
    for arm in doc.arms:
        intervals = arm.intervals
        maxima = [
            v for v in intervals.get(json_name(ITL_MAX, part="per_trial"), ()) if v is not None
        ]
        table.add_row(
            escape(arm.label),
            *(
                _interval(arm.figure(json_name(m)), intervals.get(json_name(m)))
                for m in ITL_QUANTILES
            ),
            _interval(
                arm.figure(json_name(ITL_MAX)), [min(maxima), max(maxima)] if maxima else None
            ),
        )
    return table


def _events_table(doc: ABResult, confidence: float) -> Table:
    """Each arm's stall events (one per long prompt): the per-event means, intervals."""
    table = Table(title=f"per prefill event ({confidence:.0%} intervals)", box=box.SIMPLE_HEAD)
    for name in ("arm", "events", *EVENT_METRICS.values()):
        table.add_column(name, justify="left" if name == "arm" else "right")
    for arm in doc.arms:
        if arm.events is None:
            continue
        events = arm.events.figures
        table.add_row(
            escape(arm.label),
            str(arm.events.count),
            *(
                _interval(
                    events.get(json_name(m, part="mean")), events.get(json_name(m, part="interval"))
                )
                for m in EVENT_METRICS
            ),
        )
    return table


def _kinds_table(doc: ABResult) -> Table:
    """TTFT per request kind and arm (mixed traffic: a pooled TTFT hides both)."""
    table = Table(title="TTFT by request kind", box=box.SIMPLE_HEAD)
    for name in ("kind", "arm", "requests", "prompt p50", *(heading(m) for m in KIND_TTFT)):
        table.add_column(name, justify="left" if name in ("kind", "arm") else "right")
    for kind in doc.kinds:
        for arm in doc.arms:
            row = arm.by_kind.get(kind) or KindBlock()
            prompt = row.prompt_tokens_p50
            table.add_row(
                escape(kind),
                escape(arm.label),
                str(row.requests),
                "–" if prompt is None else f"{prompt:,.0f}",
                *(figure(m, row.figures) for m in KIND_TTFT),
            )
    return table


def _tradeoffs_table(verdict: Verdict) -> Table:
    table = Table(title=f"what {verdict.arm} made significantly worse", box=box.SIMPLE_HEAD)
    for name in ("metric", "vs", "change [interval]", "method"):
        table.add_column(name)
    for t in verdict.tradeoffs:
        table.add_row(escape(t.metric), escape(t.against), escape(t.text), t.method)
    return table


def _comparisons_table(doc: ABResult, confidence: float) -> Table:
    table = Table(
        title=f"each arm vs {doc.reference.arm} ({confidence:.0%} intervals)",
        box=box.SIMPLE_HEAD,
    )
    for name in ("arm", "metric", "change [interval]", "p", "method"):
        table.add_column(name, justify="right" if name == "p" else "left")
    for row in doc.comparisons:
        text = change_text(
            row.ratio, row.ci_low, row.ci_high, row.significant, row.inconclusive is not None
        )
        style = "bold" if row.significant else "dim"
        p = p_value_text(row.p_value, row.resamples)
        table.add_row(
            escape(row.arm),
            escape(row.metric),
            f"[{style}]{escape(text)}[/]",
            p,
            row.method,
        )
    return table


def _conditions_table(doc: ABResult) -> Table:
    table = Table(title="conditions", box=box.SIMPLE_HEAD)
    for name in ("check", "matched", "what was seen", "tolerance"):
        table.add_column(name, overflow="fold")
    marks = {True: "[green]yes[/]", False: "[bold red]NO[/]", None: "[dim]n/a[/]"}
    checks = doc.conditions.checks if doc.conditions is not None else ()
    for check in checks:
        table.add_row(check.name, marks[check.matched], escape(check.detail), check.tolerance)
    return table


def chunk_knob(doc: ABResult) -> str | None:
    """What the A/B's chunk size set on its servers: the flags its ``--launch`` template
    gave ``{chunk}`` to (``--batch-size/--ubatch-size`` for llama.cpp), the embedded
    engine's ``max_num_batched_tokens``; None when the servers were given (``--a/--b``)."""
    if doc.launch:
        flags = LaunchTemplate(tuple(doc.launch)).chunk_flags()
        return "/".join(flags) or None
    return EMBEDDED_CHUNK_KEY if doc.mode == "embedded" else None


def _tradeoff_table(doc: ABResult) -> Table:
    knob = chunk_knob(doc)
    title = f"trade-off by chunk size ({knob})" if knob else "trade-off by chunk size"
    table = Table(title=title, box=box.SIMPLE_HEAD)
    kinds = doc.kinds
    ttft = [heading(AB_TTFT_WEIGHED, kind) for kind in kinds] or [heading(AB_TTFT_WEIGHED)]
    columns = (heading(AB_STALL_GAPS), heading(ITL_MAX), *ttft, heading(AB_SLO_TTFT))
    for name in ("chunk", *columns, "meets SLO"):
        table.add_column(name, justify="right")
    for row in doc.tradeoff:
        meets = {True: "yes", False: "no", None: "–"}[row.meets_slo]
        figures = row.figures
        by_kind = figures.get(json_name(AB_TTFT_WEIGHED, part="by_kind")) or {}
        weighed = figures.get(json_name(AB_TTFT_WEIGHED))
        firsts = [by_kind.get(k) for k in kinds] if kinds else [weighed]
        table.add_row(
            escape(row.arm),
            figure(AB_STALL_GAPS, figures),
            figure(ITL_MAX, figures),
            *(ab_metric_spec(AB_TTFT_WEIGHED).metric.format(v) for v in firsts),
            figure(AB_SLO_TTFT, figures),
            meets,
        )
    return table


def _outputs_table(outputs: Outputs) -> Table:
    table = Table(
        title=f"outputs vs {outputs.reference} (|Δ logprob| tolerance {outputs.tolerance:g})",
        box=box.SIMPLE_HEAD,
    )
    columns = ("arm", "status", "compared", "exact match", "diverged at p50", "|Δ logprob| p99/max")
    for name in columns:
        table.add_column(name, justify="left" if name == "arm" else "right")
    rows: list[tuple[str, OutputCheck]] = [(a.arm, a) for a in outputs.arms]
    if outputs.baseline is not None:
        rows.append((f"{outputs.reference} vs itself", outputs.baseline))
    for name, row in rows:
        rate = row.exact_match_rate
        diff = row.logprob_abs_diff
        first = row.first_divergence.get("p50")
        table.add_row(
            escape(name),
            row.status,
            str(row.compared),
            "–" if rate is None else f"{rate:.1%}",
            "–" if first is None else f"token {first:.0f}",
            "unknown" if diff is None else f"{diff['p99']:.2g} / {diff['max']:.2g}",
        )
    return table


def render(outcome: AbOutcome, console: Console) -> None:
    """The arms, the comparisons, the conditions, the trade-off, the outputs, the verdict
    with the rule that made it."""
    doc = outcome.result
    confidence = doc.settings.confidence
    knob = chunk_knob(doc)
    if knob:
        console.print(f"[dim]each arm's chunk size set {escape(knob)}[/]")
    console.print(_arms_table(doc))
    if any(arm.intervals for arm in doc.arms):
        console.print(_itl_table(doc, confidence))
    if doc.kinds:
        console.print(_kinds_table(doc))
    if doc.arms and all(arm.events for arm in doc.arms):
        console.print(_events_table(doc, confidence))
    if doc.comparisons:
        console.print(_comparisons_table(doc, confidence))
    console.print(_conditions_table(doc))
    if len(doc.arms) > 2:
        console.print(_tradeoff_table(doc))
    if doc.outputs is not None:
        console.print(_outputs_table(doc.outputs))
        console.print(escape(doc.outputs.sentence))
    verdict = doc.verdict or Verdict()
    if verdict.tradeoffs:
        console.print(_tradeoffs_table(verdict))
    style = "red" if verdict.refused else ("green" if verdict.winner is not None else "yellow")
    title = "verdict" if verdict.winner is not None else "no winner"
    console.print(Panel(escape(verdict.sentence), title=title, border_style=style))
    console.print(f"[dim]rule: {escape(verdict.rule)}[/]")
    if verdict.needed is not None and verdict.needed.units:
        needed = verdict.needed
        console.print(f"[dim]to decide: about {needed.units} {needed.unit} per arm[/]")
    console.print(f"[dim]files: {escape(str(outcome.out))}[/]")
