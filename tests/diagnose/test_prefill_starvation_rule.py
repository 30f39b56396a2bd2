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
