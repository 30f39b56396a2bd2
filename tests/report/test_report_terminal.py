"""The terminal report: fits 80 and 120 columns without wrapping numbers into noise."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console
from run_shapes import RunShape
from rundirs import report_run

from prefillscope.report.data import load_report_data
from prefillscope.report.terminal import render_terminal

RICH_HOSTILE = "[bold red]pwned[/] <script>alert(1)</script>"


def _render(run: Path, width: int) -> str:
    console = Console(
        file=io.StringIO(), record=True, width=width, force_terminal=True, color_system="truecolor"
    )
    render_terminal(load_report_data(run), console)
    return console.export_text()


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    shape = RunShape(model=RICH_HOSTILE, error_message=RICH_HOSTILE)
    return report_run(tmp_path_factory.mktemp("term") / "run", shape)


@pytest.mark.parametrize("width", [80, 120])
def test_fits_the_width_and_keeps_rows_on_one_line(run: Path, width: int) -> None:
    text = _render(run, width)
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= width
    # Each latency row is one line: label, the quantiles and the count together.
    for label in ("TTFT", "ITL", "TPOT", "E2E"):
        row = next(line for line in lines if line.strip().startswith(label + " "))
        assert row.rstrip().endswith(("126", "7,578")), row
        assert row.count(" ms") + row.count(" s ") + row.count(" s") >= 5, row
    header = next(line for line in lines if line.strip().startswith("metric"))
    assert ("p95" in header) == (width >= 100)
    # The ITL-by-kind and pool rows are single lines too.
    assert any(line.split()[:2] == ["decode", "7,560"] for line in lines if line.strip())
    assert any(line.split()[:2] == ["active", "measured"] for line in lines if line.strip())


def test_shows_strings_literally_never_as_console_markup(run: Path) -> None:
    text = _render(run, 120)
    assert "[bold red]pwned[/] <script>alert(1)</script>" in text  # the model name
    assert text.count("[bold red]pwned[/]") >= 1 + 3  # and each error message


def test_diagnosis_and_sparkline(run: Path) -> None:
    text = _render(run, 120)
    for status in ("supported", "not supported", "inconclusive", "weakened", "as expected"):
        assert f" {status} " in text
    assert "hard failure" in text and "next: prefillscope diagnose ab" in text
    spark = text.splitlines()[
        text.splitlines().index(
            next(line for line in text.splitlines() if line.startswith("ITL p99 over time"))
        )
        + 1
    ]
    assert set(spark.strip()) <= set("▁▂▃▄▅▆▇█ ") and "█" in spark and "▁" in spark
    assert text.count("^") - text.count("^ long-prompt arrival") == 6


def test_missing_pieces_are_named(tmp_path: Path) -> None:
    run = report_run(tmp_path / "r", RunShape(pool=None, diagnosis=False, status="interrupted"))
    text = _render(run, 80)
    assert "interrupted" in text and "This run was interrupted" in text
    assert "The diagnosis could not be run" in text and "prefillscope diagnose" in text
    assert "KV pool is unknown" in text
