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

from diagnose.ab_verdict import change_text, seconds
from session.ab_runner import AbOutcome


def _ms(value: float | None) -> str:
    return "–" if value is None else seconds(value)


def _arms_table(doc: dict[str, Any]) -> Table:
    table = Table(title="arms (trials pooled)", box=box.SIMPLE_HEAD)
    for name in ("arm", "trials", "ITL p50", "ITL p95", "ITL p99", "TTFT p50", "TTFT p99", "tok/s"):
        table.add_column(name, justify="left" if name == "arm" else "right")
    reference = doc["reference"]["arm"]
    for arm in doc["arms"]:
        tokens = arm.get("output_tokens_per_s")
        table.add_row(
            escape(arm["label"] + (" (ref)" if arm["label"] == reference else "")),
            str(len(arm["trials"])),
            *(_ms(arm.get(k)) for k in ("itl_p50_s", "itl_p95_s", "itl_p99_s")),
            *(_ms(arm.get(k)) for k in ("ttft_p50_s", "ttft_p99_s")),
            "–" if tokens is None else f"{tokens:,.0f}",
        )
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
        text = change_text(*bounds, row["significant"])
        style = "bold" if row["significant"] else "dim"
        p = "–" if row["p_value"] is None else f"{row['p_value']:.3g}"
        table.add_row(row["arm"], row["metric"], f"[{style}]{escape(text)}[/]", p, row["method"])
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
    for name in ("chunk", "ITL p99", "TTFT p50", "TTFT p99", "meets SLO"):
        table.add_column(name, justify="right")
    for row in doc["tradeoff"]:
        meets = {True: "yes", False: "no", None: "–"}[row["meets_slo"]]
        table.add_row(
            escape(row["arm"]),
            _ms(row["itl_p99_s"]),
            _ms(row["ttft_p50_s"]),
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
    """The arms, the comparisons, the conditions, the trade-off, the outputs, the verdict."""
    doc = outcome.document
    console.print(_arms_table(doc))
    if doc["comparisons"]:
        console.print(_comparisons_table(doc, doc["settings"]["confidence"]))
    console.print(_conditions_table(doc))
    if len(doc["arms"]) > 2:
        console.print(_tradeoff_table(doc))
    if doc["outputs"] is not None:
        console.print(_outputs_table(doc["outputs"]))
        console.print(escape(doc["outputs"]["sentence"]))
    verdict = doc["verdict"]
    style = (
        "red" if verdict["refused"] else ("green" if verdict["winner"] is not None else "yellow")
    )
    title = "verdict" if verdict["winner"] is not None else "no winner"
    console.print(Panel(escape(verdict["sentence"]), title=title, border_style=style))
    console.print(f"[dim]files: {escape(str(outcome.out))}[/]")
