"""``diagnose ab`` decides a chunk-size A/B on its stall events, not on a pooled gap quantile.

The A/B of issue 30: six decode streams, four 12k-token prompts per trial, budgets 256
and 8192 on an A100 (embedded engine, 3 trials per arm: 12 long prompts per arm). At
8192 every prefill stalls the decodes for about a second; at 256 never for more than a
few steps. The pooled p99 of gaps sits on a cliff (stalls are ~1 % of the gaps), and
once said "no significant difference"; per event, the difference is plain and decides.
Six real trials over loopback (~90 s). On a starved machine the conditions say the engine
ran late and the verdict is refused with that reason instead.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from ab_support import (
    TIMING_TOLERANCES,
    ab_json,
    assert_refused_for_lateness,
    comparison,
    engine_ran_late,
)

pytestmark = pytest.mark.slow

ISSUE_30 = [
    "--chunks", "256,8192", "--workload", "interference", "--num-requests", "4",
    "--rate", "0.5", "--seed", "101", "--set", "concurrency=6", "--set", "stream_requests=1",
    "--set", "stream_output_len=800", "--set", "long_prompt_len=12000",
    "--engine", "gpu=a100-80gb", "--gpu-telemetry", "off", "--resamples", "1000",
    *TIMING_TOLERANCES,
]  # fmt: skip


def test_each_prefill_is_an_event_and_the_events_decide(tmp_path: Path):
    code, doc = ab_json(*ISSUE_30, "--out", tmp_path / "ab")
    if engine_ran_late(doc):  # a starved machine: the refusal naming it, never a winner
        assert_refused_for_lateness(code, doc)
        return
    verdict = doc.verdict
    assert code == 0 and verdict is not None, verdict
    assert verdict.unit == "events" and "12 or more per arm" in verdict.unit_reason
    assert (verdict.winner, verdict.decided_by) == (256, ("event_stall",))
    stall = comparison(doc, "event_stall")
    # each trial's mean over its 4 events, the 3 trials per arm the units; read at 97.5 %
    # (one of two chances to name a winner: the stall, the long prompts' TTFT)
    assert stall.significant and stall.ci_high < 0.5 and stall.units == (3, 3)
    assert stall.method.startswith("trials as units (each trial's mean over its events)")
    assert "97.5 % interval (Bonferroni" in stall.method
    for arm in doc.arms:
        assert arm.events is not None
        assert arm.events.count == 12 and arm.events.alone == 0
        low, high = arm.events.figures["event_stall_interval_s"]
        assert low <= arm.events.figures["event_stall_mean_s"] <= high
    small, large = (arm.events.figures["event_stall_mean_s"] for arm in doc.arms if arm.events)
    assert large > 0.5 and large > 4 * small  # ~1 s stalls at 8192, every time
    sentence = verdict.sentence
    assert sentence.startswith("256 vs 8192: worst decode gap per prefill \u2212")
    assert "(gaps pooled: p99 ITL " in sentence  # the gap-quantile view, beside
    assert "no significant difference" not in sentence
    assert "no SLO given, worst decode gap per prefill first: choose 256" in sentence
