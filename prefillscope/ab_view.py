"""The terminal view of ``prefillscope diagnose ab``: arms, comparisons, conditions, verdict.

Rendered from the ``ab.json`` document (``AbOutcome.document``), so the table shows what
the file says. Imported by the command when it runs (rich and the statistics are not
needed to start the CLI).
"""

from __future__ import annotations

from math import nan
from typing import Any

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table

from diagnose.ab_verdict import change_text
from probes.units import fmt_seconds
from session.ab_runner import AbOutcome


def _ms(value: float | None) -> str:
    return "–" if value is None else fmt_seconds(value)


def _arms_table(doc: dict[str, Any]) -> Table:
    table = Table(title="arms (trials pooled)", box=box.SIMPLE_HEAD)
    columns = ("arm", "trials", "ITL p50", "ITL p95", "ITL p99", "ITL max", "TTFT p50", "TTFT p99")
    for name in (*columns, "tok/s"):
        table.add_column(name, justify="left" if name == "arm" else "right")
    reference = doc["reference"]["arm"]
    for arm in doc["arms"]:
        tokens = arm.get("output_tokens_per_s")
        table.add_row(
            escape(arm["label"] + (" (ref)" if arm["label"] == reference else "")),
            str(len(arm["trials"])),
            *(_ms(arm.get(k)) for k in ("itl_p50_s", "itl_p95_s", "itl_p99_s", "itl_max_s")),
            *(_ms(arm.get(k)) for k in ("ttft_p50_s", "ttft_p99_s")),
            "–" if tokens is None else f"{tokens:,.0f}",
        )
    return table


def _interval(value: float | None, bounds: list[float | None] | None) -> str:
    """``8.14 ms [7.82–8.36]``: the bounds in the value's unit."""
    if value is None or not bounds or None in bounds:
        return _ms(value)
    scale, unit = (1e3, "ms") if value < 1 else (1.0, "s")
    low, high = (f"{b * scale:.3g}" for b in (bounds[0], bounds[-1]))
    return f"{value * scale:.3g} {unit} [{low}–{high}]"


def _itl_table(doc: dict[str, Any], confidence: float) -> Table:
    """Each arm's ITL quantiles with their intervals, and its worst gap per trial."""
    table = Table(
        title=f"ITL per arm ({confidence:.0%} intervals; max: range of the trials' maxima)",
        box=box.SIMPLE_HEAD,
    )
    for name in ("arm", "p50", "p95", "p99", "max"):
        table.add_column(name, justify="left" if name == "arm" else "right")
    for arm in doc["arms"]:
        intervals = arm.get("intervals") or {}
        maxima = intervals.get("itl_max_per_trial_s") or []
        table.add_row(
            escape(arm["label"]),
            *(
                _interval(arm.get(k), intervals.get(k))
                for k in ("itl_p50_s", "itl_p95_s", "itl_p99_s")
            ),
            _interval(arm.get("itl_max_s"), [min(maxima), max(maxima)] if maxima else None),
        )
    return table


def _kinds_table(doc: dict[str, Any]) -> Table:
    """TTFT per request kind and arm (mixed traffic: a pooled TTFT hides both)."""
    table = Table(title="TTFT by request kind", box=box.SIMPLE_HEAD)
    for name in ("kind", "arm", "requests", "prompt p50", "TTFT p50", "TTFT p95", "TTFT p99"):
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
                *(_ms(row.get(k)) for k in ("ttft_p50_s", "ttft_p95_s", "ttft_p99_s")),
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
        p = "–" if row["p_value"] is None else f"{row['p_value']:.3g}"
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


def _tradeoff_table(doc: dict[str, Any]) -> Table:
    table = Table(title="trade-off by chunk size", box=box.SIMPLE_HEAD)
    kinds = doc.get("kinds") or []
    ttft = [f"TTFT p50 {kind}" for kind in kinds] or ["TTFT p50"]
    for name in ("chunk", "ITL p99", "ITL max", *ttft, "TTFT p99", "meets SLO"):
        table.add_column(name, justify="right")
    for row in doc["tradeoff"]:
        meets = {True: "yes", False: "no", None: "–"}[row["meets_slo"]]
        by_kind = row.get("ttft_p50_by_kind_s") or {}
        firsts = [by_kind.get(k) for k in kinds] if kinds else [row["ttft_p50_s"]]
        table.add_row(
            escape(row["arm"]),
            _ms(row["itl_p99_s"]),
            _ms(row.get("itl_max_s")),
            *(_ms(v) for v in firsts),
            _ms(row["ttft_p99_s"]),
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
    console.print(_arms_table(doc))
    if any(arm.get("intervals") for arm in doc["arms"]):
        console.print(_itl_table(doc, confidence))
    if doc.get("kinds"):
        console.print(_kinds_table(doc))
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
    console.print(f"[dim]files: {escape(str(outcome.out))}[/]")
