"""``session.exit_status``: a run's summary (``runfmt.summary.Summary``, here read from the
JSON its file would hold) decides exit
4 and 5 and the one line that says why; a summary missing sections decides nothing. An
A/B trial's progress line reads the same summary."""

from __future__ import annotations

from pathlib import Path

from loadgen.load_options import LoadResult
from runfmt.summary import Summary
from session.exit_status import (
    EXIT_COMPLETE,
    EXIT_INTERRUPTED,
    EXIT_REQUESTS_FAILED,
    EXIT_SLO_BREACHED,
    BenchOutcome,
    exit_status,
    requests_failure,
    slo_breach,
    top_message,
)

MESSAGES = [{"message": "prompt   too\nlong", "kind": "http_400", "count": 7}]
FAILING = Summary.from_json({"requests": {"total": 10, "completed": 3}, "error_messages": MESSAGES})
GOODPUT = {"share": 0.5, "requests": 5, "requests_per_s": 1.0, "slo": {"ttft_s": 0.5}}


def test_failed_requests_exit_4_with_the_most_common_message() -> None:
    assert top_message(FAILING) == "7× http_400: prompt too long"
    line = requests_failure(FAILING, 0.5)
    assert line == "7 of 10 requests failed (70.0%), more than --max-error-rate 0.5; " + (
        "most common error: 7× http_400: prompt too long"
    )
    assert requests_failure(FAILING, 0.8) is None
    none_ok = Summary.from_json({"requests": {"total": 4, "completed": 0}})
    assert requests_failure(none_ok, None) == "no request succeeded (4 of 4 failed)"
    assert exit_status("complete", FAILING, 0.5) == EXIT_REQUESTS_FAILED
    assert exit_status("interrupted", FAILING, 0.5) == EXIT_INTERRUPTED


def test_a_share_below_min_goodput_exits_5_naming_the_slo() -> None:
    summary = Summary.from_json({"requests": {"total": 10, "completed": 10}, "goodput": GOODPUT})
    assert slo_breach(summary, 0.9) == (
        "5 of 10 requests (50.0%) met the SLO ttft=500ms, below --min-goodput 0.9"
    )
    assert slo_breach(summary, 0.4) is None and slo_breach(summary, None) is None
    assert exit_status("complete", summary, None, 0.9) == EXIT_SLO_BREACHED


def test_a_summary_missing_sections_decides_nothing() -> None:
    for doc in ({}, {"goodput": None, "error_messages": []}, {"requests": []}):
        summary = Summary.from_json(doc)
        assert requests_failure(summary, 0.0) is None
        assert slo_breach(summary, 0.9) is None and top_message(summary) == ""
        assert exit_status("complete", summary, 0.0, 0.9) == EXIT_COMPLETE
    counted = Summary.from_json({"requests": {"total": 3}})  # no completed count: none did
    assert requests_failure(counted, None) == "no request succeeded (3 of 3 failed)"


def test_the_outcome_warns_of_impossible_usage_and_counts_what_it_kept(tmp_path: Path) -> None:
    suspect = {"requests": 2, "of": 9, "kinds": {"cached_over_prompt": 2}}
    doc = {"requests": {"total": 9, "completed": 9, "warmup_excluded": 2}}
    summary = Summary.from_json(doc)
    outcome = BenchOutcome(
        tmp_path, "interrupted", "disk full", Summary.from_json(doc | {"usage_suspect": suspect}),
        LoadResult(finished=12), write_failure="no space left",
    )  # fmt: skip
    assert outcome.usage_warning is not None
    assert outcome.usage_warning.startswith("2 of 9 completed requests carry impossible usage")
    assert "(cached_over_prompt ×2)" in outcome.usage_warning
    assert "11 of 12 finished requests kept" in outcome.ending()
    assert BenchOutcome(tmp_path, "complete", None, summary, LoadResult()).usage_warning is None


def test_an_ab_trial_line_reads_its_counts_and_latencies_from_the_summary(tmp_path: Path) -> None:
    from diagnose.ab import Trial
    from session.ab_runner import _trial_line

    summary = Summary.from_json({"requests": {"total": 8, "completed": 7},
                                 "itl_s": {"p99": 0.0123}, "ttft_s": {"p50": 0.25}})  # fmt: skip
    trial = Trial(0, 1, tmp_path, "complete", seconds=3.04)
    outcome = BenchOutcome(tmp_path, "complete", None, summary, LoadResult())
    line = _trial_line("A 1/2", trial, outcome)
    assert line == "trial A 1/2: complete · 7/8 ok · ITL p99 12.3 ms · TTFT p50 250 ms · 3.0 s"
    empty = BenchOutcome(tmp_path, "failed", "x", Summary(), LoadResult())
    assert " · 0/0 ok · ITL p99 – · TTFT p50 – · " in _trial_line("B 1/2", trial, empty)
