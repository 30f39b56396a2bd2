"""``diagnose.ab_tradeoffs``: metric labels and the sentence that lists what the A/B's
winner gave up, from trade-offs written by hand."""

from __future__ import annotations

from diagnose.ab_metrics import ITL_MAX
from diagnose.ab_tradeoffs import metric_label, tradeoff_sentence
from runfmt.abresult import Tradeoff
from runfmt.codec import encode


def _tradeoff(metric: str, against: str, ratio: float, interval, text: str) -> Tradeoff:
    return Tradeoff(metric, None, against, ratio, ratio - 1, interval, True, "bootstrap", text)


def test_metric_labels_name_the_registry_metric_and_the_request_kind():
    assert metric_label("ttft_p50[decode]") == "TTFT p50 (decode)"
    assert metric_label("itl_p99") == "ITL p99"
    assert metric_label(ITL_MAX) == "worst ITL gap"


def test_no_tradeoff_no_sentence():
    assert tradeoff_sentence("256", []) is None


def test_worse_metrics_are_joined_per_arm_and_the_worst_stall_said_apart():
    found = [
        _tradeoff("itl_p50", "8192", 1.57, (0.40, 0.75), "ITL p50 +57 % [+40, +75]"),
        _tradeoff("itl_p95", "8192", 2.53, (1.2, 1.9), "ITL p95 +153 % [+120, +190]"),
        _tradeoff(ITL_MAX, "8192", 3.2, (1.1, 3.8), "unused"),
        _tradeoff("itl_p50", "1024", 1.2, (0.1, 0.3), "ITL p50 +20 % [+10, +30]"),
    ]
    assert tradeoff_sentence("256", found) == (
        "trade-off: 256 made ITL p50 +57 % [+40, +75] and ITL p95 +153 % [+120, +190] "
        "worse than 8192; 256's worst stall (ITL max) is 3.2\u00d7 8192's [2.1\u00d7, 4.8\u00d7]; "
        "256 made ITL p50 +20 % [+10, +30] worse than 1024"
    )
    assert encode(found[0])["interval"] == [0.40, 0.75]
