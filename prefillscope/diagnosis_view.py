"""The terminal view of a diagnosis: a row per finding, the primary finding, the decision.

Rendered from ``runfmt.diagnosis.Diagnosis`` (what ``diagnosis.json`` holds). Imported by
``prefillscope diagnose`` when it runs (rich is not needed to start the CLI).
"""

from __future__ import annotations

from rich import box
from rich.console import Console, Group
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table

from prefillscope.report.content import STATUS_TONES
from prefillscope.report.numbers import fmt_value
from runfmt.diagnosis import Diagnosis, Evidence, Finding, clean_number

TONE_STYLES = {"bad": "bold red", "mild": "yellow", "good": "green", "warn": "magenta"}


def _evidence_line(e: Evidence) -> str:
    unit = f" {e.unit}" if e.unit and e.unit != "x" else ("×" if e.unit == "x" else "")
    text = f"{e.name}: [bold]{escape(fmt_value(clean_number(e.value)))}{escape(unit)}[/]"
    text += f" [dim]— {escape(e.source)}[/]"
    if e.detail:
        text += f"\n    [dim]{escape(e.detail)}[/]"
    return text


def _finding_cell(f: Finding) -> Group:
    parts = [f"[bold]{escape(f.title)}[/] — {escape(f.summary)}"]
    parts += [f"• {_evidence_line(e)}" for e in f.evidence]
    parts += [f"[magenta]missing:[/] {escape(m)}" for m in f.missing]
    if f.next:
        parts.append(f"[cyan]next:[/] {escape(f.next)}")
    return Group(*parts)


def _primary_lines(diagnosis: Diagnosis) -> list[str]:
    primary = diagnosis.primary
    if primary is None:
        return []
    titles = {f.id: f.title for f in diagnosis.findings()}
    name = titles.get(primary.finding, "no cause found")
    lines = [
        f"[bold]Primary finding: {escape(primary.finding)}[/] ({escape(name)}) — "
        f"confidence [bold]{escape(primary.confidence)}[/]",
        f"[dim]{escape(primary.why)}[/]",
    ]
    if primary.secondary:
        lines.append(f"secondary: {escape(', '.join(primary.secondary))}")
    return [*lines, ""]


def render(diagnosis: Diagnosis, console: Console) -> None:
    """One row per hypothesis and the prefix cache, then the decision."""
    table = Table(
        title=escape(f"Diagnosis of {diagnosis.run}"),
        box=box.SIMPLE_HEAD,
        show_lines=True,
        expand=True,
    )
    table.add_column("", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("finding", ratio=1, overflow="fold")
    for f in diagnosis.findings():
        tone = TONE_STYLES.get(STATUS_TONES.get(str(f.status), "muted"), "dim")
        table.add_row(f.id, f"[{tone}]{escape(str(f.status))}[/]", _finding_cell(f))
    console.print(table)
    decision = diagnosis.decision
    style = "red" if decision.hard_failure else "green"
    title = "HARD FAILURE — contain now" if decision.hard_failure else "no hard failure"
    body = "\n".join(
        [
            *_primary_lines(diagnosis),
            *(f"• {escape(r)}" for r in decision.reasons),
            "",
            escape(decision.recommendation),
        ]
    )
    console.print(Panel(body, title=title, border_style=style, title_align="left"))
