"""The terminal views: ``prefillscope.summary_view`` (the end of a bench run) and
``prefillscope.diagnosis_view`` (a diagnosis), rendered into a console of known width."""

from __future__ import annotations

import io
from dataclasses import replace

from rich.console import Console
from run_shapes import planted_diagnosis, steady_streams
from rundirs import computed_summary, write_run

from prefillscope.diagnosis_view import render
from prefillscope.summary_view import (
    latency_table,
    latency_view,
    natural_width,
    summary_renderable,
)
from runfmt.summary import Summary
from runfmt.summary_server import ServerSection, SizeHistogram

#: Text whose brackets rich would read as markup if a view forgot to escape it.
MARKUP = "[bold red]not markup[/]"


def _console(width: int) -> Console:
    return Console(width=width, file=io.StringIO(), color_system=None)


def _text(renderable, width: int) -> str:
    console = _console(width)
    console.print(renderable)
    return console.file.getvalue()


def _summary(tmp_path) -> Summary:
    records, chunks = steady_streams(4, 20, 0.05)
    return computed_summary(write_run(tmp_path / "run", records, chunks))


def test_the_latency_table_takes_the_richest_form_that_fits_the_width(tmp_path):
    summary = _summary(tmp_path)
    wide, narrow = latency_table(summary, 200), latency_table(summary, 50)
    wide_columns = [c.header for c in wide.columns]
    narrow_columns = [c.header for c in narrow.columns]
    assert "p95" in wide_columns and "p95" not in narrow_columns
    assert len(narrow_columns) < len(wide_columns)
    for width in (60, 80, 120):
        assert natural_width(latency_table(summary, width)) <= width


def test_every_abbreviation_shown_has_a_legend_line_at_80_and_120_columns(tmp_path):
    """Issue 41: "TTFT (sent)", "*" and "≤ 20 ms" appeared with no legend."""
    summary = _summary(tmp_path)
    for width in (80, 120):  # every short label shown is explained, within the width
        text = _text(latency_view(summary, width), width)
        assert all(len(line) <= width for line in text.splitlines())
        if "TTFT (sent)" in text:
            assert "TTFT (sent) = from actual send" in text
        assert "ITL (per token)" in text or "ITL = per token" in text
    narrow = _text(latency_view(summary, 80), 80)
    assert "ITL = per token" in narrow and "TTFT = from intended send" in narrow
    wide = _text(latency_view(summary, 200), 200)
    assert "ITL (per token)" in wide and "ITL = per token" not in wide  # nothing abbreviated


def test_the_summary_says_why_server_metrics_are_unknown_in_full(tmp_path):
    summary = _summary(tmp_path)
    reason = "GET /metrics answered 404 " + "and kept answering it " * 6
    summary = replace(summary, server=ServerSection(available=False, reason=reason))
    out = _text(summary_renderable(summary, tmp_path / "run", "interrupted", "SIGINT", 60), 60)
    flat = " ".join(out.split())
    assert "bench interrupted — SIGINT" in flat
    assert " ".join(f"server metrics unknown: {reason}".split()) in flat
    assert "run directory:" in flat and " report " in flat
    assert all(len(line) <= 60 for line in out.splitlines())


def test_the_end_of_a_run_says_the_engine_ran_late_only_when_it_did(tmp_path):
    summary = _summary(tmp_path)  # steady 50 ms gaps: an ITL p99 of 50 ms

    def shown(lateness: SizeHistogram | None) -> str:
        server = ServerSection(available=True, flavour="embedded", step_lateness_s=lateness)
        view = summary_renderable(replace(summary, server=server), tmp_path, "complete", None, 100)
        return " ".join(_text(view, 100).split())

    late = SizeHistogram(count=100, mean=0.01, p50=0.008, p99=0.02, unit="s")
    assert (
        "⚠ The engine ran late: step lateness p99 20 ms (40% of the ITL p99 50 ms), beyond 20%: "
        "the latencies include the machine's stalls, not only the modelled engine's."
    ) in shown(late)
    assert "ran late" not in shown(replace(late, p99=0.009))  # 18 %: within its bound
    assert "ran late" not in shown(None)  # a server that publishes none (a real vLLM)
    assert "ran late" not in shown(SizeHistogram(count=0, unit="s"))  # no step timed


def test_a_diagnosis_shows_every_finding_the_decision_and_text_as_written(tmp_path):
    diagnosis = planted_diagnosis(tmp_path, MARKUP)
    console = _console(160)
    render(diagnosis, console)
    out = console.file.getvalue()
    for hid in ("H1", "H2", "H3", "H4", "PC"):
        assert hid in out
    assert MARKUP in out
    assert "HARD FAILURE — contain now" in out
    assert "18.2×" in out and "missing: step kinds" in out
