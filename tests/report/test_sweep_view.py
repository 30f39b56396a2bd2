"""``prefillscope.report.sweep_view``: a sweep's table and sentence from a ``sweep.json``
written by hand, read as every sweep is (``runfmt.sweep``)."""

from __future__ import annotations

from prefillscope.report.sweep_view import render_sweep_html, sweep_rows, sweep_summary
from runfmt.sweep import SweepResult

DOC = {
    "axis": "rate",
    "figure": "achieved_rps",
    "knee": 2.0,
    "saturated_at": 4.0,
    "points": [
        {"value": 1.0, "status": "complete", "achieved_rps": 1.0, "ttft_p50_s": 0.05},
        {"value": 2.0, "status": "complete", "achieved_rps": 1.98, "ttft_p50_s": 0.06},
        {"value": 4.0, "status": "failed", "achieved_rps": 2.0, "ttft_p50_s": None},
    ],
}
SWEEP = SweepResult.from_json(DOC)


def test_the_table_marks_the_knee_saturation_and_failures_and_leaves_out_goodput():
    header, rows = sweep_rows(SWEEP)
    assert header[0] == "offered/s" and "goodput/s" not in header and header[-1] == "note"
    assert [r[0] for r in rows] == ["1", "2", "4"]
    assert [r[-1] for r in rows] == ["", "knee", "saturated, failed"]
    ttft = header.index("TTFT p50")
    assert (rows[0][ttft], rows[2][ttft]) == ("50 ms", "–")
    goodput = sweep_rows(SweepResult.from_json({**DOC, "figure": "goodput_rps"}))[0]
    assert "goodput/s" in goodput


def test_the_sentence_names_the_knee_and_where_the_figure_stopped_rising():
    assert sweep_summary(SWEEP) == ("knee at 2 req/s; throughput stopped rising at 4 req/s.")
    rising = {**DOC, "axis": "concurrency", "figure": "goodput_rps", "knee": None,
              "saturated_at": None}  # fmt: skip
    assert sweep_summary(SweepResult.from_json(rising)) == (
        "no knee found; goodput still rising at the last point: sweep higher."
    )


def test_the_page_escapes_its_title_and_says_the_sentence():
    page = render_sweep_html(SWEEP, "<sweep & co>")
    assert "&lt;sweep &amp; co&gt;" in page and "<sweep & co>" not in page
    assert "knee at 2 req/s" in page
