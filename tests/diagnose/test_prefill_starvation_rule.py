"""``diagnose.h1_prefill``'s rule: the server's step clock decides when it shows step kinds,
the client's gap comparison otherwise; the verdict for each combination. (H1 on whole
runs: ``test_diagnose_checklist.py``, ``test_diagnose_attribution.py``.)"""

from __future__ import annotations

import math

from diagnose.attribution import MIN_GAPS, Attribution
from diagnose.h1_prefill import STARVE_RATIO, _status, ratio_text
from diagnose.stats import Comparison
from runfmt.diagnosis import Status


def _client(ratio: float, significant: bool, low: float = math.nan, high: float = math.nan,
            inconclusive: str | None = None) -> Attribution:  # fmt: skip
    mean = Comparison("itl", ratio, low, high, 0.01, significant, 1.0, ratio, "bootstrap",
                      inconclusive)  # fmt: skip
    return Attribution(windows=3, overlapping=MIN_GAPS, clear=MIN_GAPS, mean=mean, p99=None)


NO_CLIENT = Attribution(windows=0, overlapping=0, clear=0, mean=None, p99=None)


def test_the_ratio_is_written_with_its_interval_when_there_is_one():
    assert ratio_text(_client(24.12, True, 18.0, 30.2).mean) == "24.1× [95 % CI 18–30.2]"
    assert ratio_text(_client(24.12, True).mean) == "24.1×"


def test_a_ratio_too_small_to_decide_is_written_with_why_never_with_an_interval():
    # diagnosis_accuracy --seed 5's stall run: 9 decode streams shared 3 stalls, and the
    # cluster bootstrap over those 9 requests gave "19.1× [95 % CI 19.1–19.1]"
    few = _client(
        19.08, False, 19.06, 19.09, inconclusive="overlapping: 9 requests (fewer than 10)"
    )
    text = ratio_text(few.mean)
    assert text == "19.1× (too few to decide — overlapping: 9 requests (fewer than 10))"
    both = "both: 44 gaps: a p99 needs 1000 for 10 beyond it"
    assert ratio_text(_client(3.4, False, 3.1, 3.8, inconclusive=both).mean) == (
        "3.4× (too few to decide — both: 44 gaps: a p99 needs 1000 for 10 beyond it)"
    )
    # beside the server's step ratio it stays a remark, not a reason to weaken it
    status, summary = _status(41.0, few)
    assert status == Status.SUPPORTED and "CI" not in summary and text in summary


def test_without_step_kinds_a_comparison_too_small_to_decide_decides_nothing():
    short = "overlapping: 6 requests (fewer than 10)"
    for ratio in (1.2, 3.5, 6.0):  # below and above the starvation ratio alike
        status, summary = _status(None, _client(ratio, False, inconclusive=short))
        assert status == Status.INCONCLUSIVE
        assert "too few to decide (overlapping: 6 requests (fewer than 10))" in summary
        assert "not significant" not in summary and "below the" not in summary


def test_the_servers_step_ratio_decides_at_the_starvation_ratio():
    assert _status(STARVE_RATIO - 0.1, NO_CLIENT)[0] == Status.NOT_SUPPORTED
    assert _status(STARVE_RATIO, NO_CLIENT)[0] == Status.SUPPORTED


def test_the_client_weakens_the_server_only_when_its_gaps_were_not_longer_at_all():
    assert _status(6.0, _client(1.0, False))[0] == Status.WEAKENED
    status, summary = _status(6.0, _client(1.5, True, 1.2, 1.8))  # diluted but longer
    assert status == Status.SUPPORTED and "1.5× [95 % CI 1.2–1.8]" in summary
    undecided = _client(1.0, False, inconclusive="too few units")
    assert _status(6.0, undecided)[0] == Status.SUPPORTED


def test_without_step_kinds_the_clients_comparison_decides():
    assert _status(None, _client(STARVE_RATIO, True))[0] == Status.SUPPORTED
    assert _status(None, _client(2.0, True))[0] == Status.NOT_SUPPORTED
    assert _status(None, _client(6.0, False))[0] == Status.INCONCLUSIVE


def test_without_either_reading_it_is_not_applicable_or_inconclusive():
    assert _status(None, NO_CLIENT)[0] == Status.NOT_APPLICABLE
    few = Attribution(windows=2, overlapping=MIN_GAPS - 1, clear=100, mean=None, p99=None)
    status, summary = _status(None, few)
    assert status == Status.INCONCLUSIVE and f"({MIN_GAPS - 1})" in summary
