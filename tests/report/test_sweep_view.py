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
    "saturation_cause": "no_gain",
    "points": [
        {"value": 1.0, "status": "complete", "achieved_rps": 1.0, "ttft_p50_s": 0.05},
        {"value": 2.0, "status": "complete", "achieved_rps": 1.98, "ttft_p50_s": 0.06},
        {"value": 4.0, "status": "complete", "achieved_rps": 2.0, "client_limited": True},
        {"value": 8.0, "status": "failed", "achieved_rps": 2.0, "ttft_p50_s": None},
    ],
}
SWEEP = SweepResult.from_json(DOC)


def test_the_table_marks_the_knee_saturation_client_limits_and_failures():
    header, rows = sweep_rows(SWEEP)
    assert header[0] == "offered/s" and "goodput/s" not in header and header[-1] == "note"
    assert [r[0] for r in rows] == ["1", "2", "4", "8"]
    assert [r[-1] for r in rows] == ["", "knee", "saturated, client-limited", "failed"]
    ttft = header.index("TTFT p50")
    assert (rows[0][ttft], rows[3][ttft]) == ("50 ms", "–")
    goodput = sweep_rows(SweepResult.from_json({**DOC, "figure": "goodput_rps"}))[0]
    assert "goodput/s" in goodput


def test_the_sentence_names_the_knee_where_it_saturated_and_the_client_limited_points():
    assert sweep_summary(SWEEP) == (
        "knee at 2 req/s; saturated at 4 req/s: throughput stopped rising; client-limited "
        "at 4 req/s: latencies there are partly the client's."
    )
    rising = {**DOC, "axis": "concurrency", "figure": "goodput_rps", "knee": 4.0,
              "saturated_at": None, "saturation_cause": None,
              "points": DOC["points"][:3]}  # fmt: skip
    assert sweep_summary(SweepResult.from_json(rising)).startswith(
        "knee at 4 users; goodput still rising at the last point: sweep higher;"
    )


def test_a_server_serving_less_than_offered_is_saturated_not_still_rising():
    """Issue 38: offered 80, served 36 req/s was called "the knee … still rising"."""
    doc = {"axis": "rate", "figure": "achieved_rps", "knee": 40.0, "saturated_at": 80.0,
           "saturation_cause": "served_below_offered", "points": [
               {"value": 40.0, "status": "complete", "achieved_rps": 30.0, "offered_rps": 33.0},
               {"value": 80.0, "status": "complete", "achieved_rps": 36.0, "offered_rps": 78.0},
           ]}  # fmt: skip
    assert sweep_summary(SweepResult.from_json(doc)) == (
        "knee at 40 req/s; saturated at 80 req/s: served 36.0 req/s of the 78.0 offered."
    )


def test_the_page_escapes_its_title_and_says_the_sentence():
    page = render_sweep_html(SWEEP, "<sweep & co>")
    assert "&lt;sweep &amp; co&gt;" in page and "<sweep & co>" not in page
    assert "knee at 2 req/s" in page
