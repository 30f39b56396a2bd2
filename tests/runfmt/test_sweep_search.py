"""``sweep.json``'s ``search`` read typed and written back as it was: a finished search as
the writer before the types wrote it (every answer key, ``null`` where none), a running one
without the answer keys, and the sentences the sweep views build from the types."""

from __future__ import annotations

import copy
import json

from prefillscope.report.sweep_view import search_rows, search_summary
from runfmt.sweep import SweepResult
from runfmt.sweep_search import DONE, INCONCLUSIVE, MEETS, MISSES, NARROWED, RUNNING

CHECK = {"bound": "ttft_p50<150ms", "metric": "ttft_p50", "limit": 0.15}


def _check(value: float, low: float, high: float, verdict: str, needed=None) -> dict:
    return CHECK | {
        "value": value, "low": low, "high": high, "verdict": verdict,
        "reason": None if verdict != INCONCLUSIVE else "the interval holds the bound",
        "needed_requests": needed,
    }  # fmt: skip


def _probe(value: float, verdict: str, check: dict | None, **more) -> dict:
    probe = {"value": value, "run_dir": f"rate-{value:g}", "status": "complete",
             "requests": 30, "client_limited": False, "verdict": verdict} | more  # fmt: skip
    return probe | ({"checks": [check]} if check is not None else {})


def _point(value: float) -> dict:
    return {"value": value, "run_dir": f"rate-{value:g}", "status": "complete",
            "achieved_rps": value * 0.9, "ttft_p50_s": 0.1}  # fmt: skip


DONE_DOC = {
    "format_version": 2,
    "axis": "rate",
    "figure": "achieved_rps",
    "saturated_at": None,
    "knee": None,
    "stopped_early": False,
    "saturation_cause": None,
    "points": [_point(4.0), _point(8.0), _point(16.0)],
    "search": {
        "bounds": [CHECK],
        "probes": [
            _probe(4.0, MEETS, _check(0.05, 0.04, 0.06, MEETS)),
            _probe(16.0, MISSES, _check(0.4, 0.3, 0.5, MISSES)),
            _probe(8.0, INCONCLUSIVE, _check(0.14, 0.12, 0.17, INCONCLUSIVE, 120)),
            _probe(
                8.0, INCONCLUSIVE, _check(0.145, 0.13, 0.16, INCONCLUSIVE, 240), requests=120
            ),  # a rerun with more requests replaces the first
        ],
        "state": DONE,
        "answer": 4.0,
        "bracket": [4.0, 8.0],
        "undecided_at": 8.0,
        "ended": NARROWED,
        "resolution": 0.25,
        "elapsed_s": 31.5,
    },
}


def test_a_finished_search_reads_typed_and_writes_back_the_same() -> None:
    doc = copy.deepcopy(DONE_DOC)
    sweep = SweepResult.from_json(doc)
    search = sweep.search
    assert search is not None and search.state == DONE and search.answer == 4.0
    assert search.bracket == (4.0, 8.0) and search.bounds[0].limit == 0.15
    last = search.last_probes()
    assert last[8.0].requests == 120 and last[8.0].checks[0].needed_requests == 240
    assert last[16.0].checks[0].low == 0.3 and last[4.0].reason is None
    assert json.loads(json.dumps(sweep.to_json())) == DONE_DOC


def test_a_running_search_keeps_its_answer_keys_absent() -> None:
    doc = copy.deepcopy(DONE_DOC)
    search = doc["search"]
    for name in ("answer", "bracket", "undecided_at", "ended", "resolution", "elapsed_s"):
        del search[name]
    search["state"] = RUNNING
    search["probes"] = search["probes"][:1]
    sweep = SweepResult.from_json(doc)
    assert sweep.search.answer is None and sweep.search.state == RUNNING
    assert json.loads(json.dumps(sweep.to_json())) == doc
    assert search_summary(sweep) == (
        "SLA search for ttft_p50<150ms: still running (1 probes so far)."
    )


def test_a_failed_probe_has_its_reason_and_no_checks() -> None:
    doc = copy.deepcopy(DONE_DOC)
    doc["search"]["probes"][1] = _probe(16.0, MISSES, None, status="failed",
                                        reason="the run failed")  # fmt: skip
    sweep = SweepResult.from_json(doc)
    failed = sweep.search.last_probes()[16.0]
    assert failed.checks is None and failed.reason == "the run failed"
    assert json.loads(json.dumps(sweep.to_json())) == doc


def test_the_views_read_the_answer_the_bracket_and_the_undecided_load() -> None:
    sweep = SweepResult.from_json(copy.deepcopy(DONE_DOC))
    text = search_summary(sweep)
    assert text.startswith("highest rate meeting ttft_p50<150ms: 4 req/s"), text
    assert "lies in [4, 8)" in text and "at 8 req/s a bound lay within its interval" in text
    assert "with 120 requests" in text  # the rerun's, not the first probe's
    assert "At the answer: ttft_p50 50 ms [40 ms, 60 ms]." in text
    assert text.endswith("4 probes in 31.5 s.")
    _, rows = search_rows(sweep, ["rate", "note"], [["4", ""], ["8", ""], ["16", "x"]])
    assert [r[-1] for r in rows] == [
        MEETS, "undecided ttft_p50<150ms", "misses ttft_p50<150ms, x"
    ]  # fmt: skip
