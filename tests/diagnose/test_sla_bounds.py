"""``diagnose.sla``: bounds parsed from ``--find``'s text, and each judged on a real run by
its statistic's bootstrap interval (meets, misses, or inconclusive with the requests that
would decide)."""

from __future__ import annotations

from pathlib import Path

import pytest
from bench_support import bench

from diagnose.sla import (
    INCONCLUSIVE,
    MEETS,
    MISSES,
    check_bounds,
    parse_bounds,
    probe_verdict,
    requests_to_decide,
)
from workloads.errors import InputError


def test_bounds_read_units_and_refuse_bad_text_naming_the_flag() -> None:
    bounds = parse_bounds("ttft_p99<500ms, itl_p99<50, e2e_p50<=2s,tpot_p90<800us")
    assert [b.metric.name for b in bounds] == ["ttft_p99", "itl_p99", "e2e_p50", "tpot_p90"]
    assert [b.limit for b in bounds] == pytest.approx([0.5, 0.05, 2.0, 0.0008])
    assert parse_bounds("requests_per_s>4")[0].limit == 4.0
    for text, word in (("ttft_p99", "METRIC<VALUE"), ("ttft_p99>5ms", "below"),
                       ("requests_per_s<4", "above"), ("ttft_p99<5h", "unit"),
                       ("ttft_p99<0", "positive"), ("nope_p99<5", "unknown metric"),
                       ("ttft_p99<5,ttft_p99<6", "twice"), ("", "no bound")):  # fmt: skip
        with pytest.raises(InputError) as err:
            parse_bounds(text)
        assert err.value.field == "--find" and word in str(err.value)


def test_requests_to_decide_follow_the_quantile_and_the_gaps_a_request_has() -> None:
    assert requests_to_decide(parse_bounds("ttft_p99<1s")[0]) == 1000
    assert requests_to_decide(parse_bounds("ttft_p90<1s")[0]) == 100
    assert requests_to_decide(parse_bounds("itl_p99<1s")[0], gaps_per_request=15) == 67
    assert requests_to_decide(parse_bounds("requests_per_s>1")[0]) == 10


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("sla") / "run"
    overrides = {"num_requests": 60, "rate": 10.0, "output_len": 8}
    outcome = bench("system-prompt", out, engine=("fixed_step_s=0.02",), overrides=overrides)
    assert outcome.status == "complete"
    return out


def test_a_bound_far_above_the_statistic_is_met_far_below_missed(run_dir: Path) -> None:
    checks = check_bounds(run_dir, parse_bounds("ttft_p50<30s,itl_p50<1ms"))
    met, missed = checks
    assert met.verdict == MEETS and met.low <= met.value <= met.high < 30.0
    assert missed.verdict == MISSES and 0.001 < missed.low <= missed.value <= missed.high
    assert probe_verdict(checks) == MISSES and probe_verdict([met]) == MEETS


def test_a_bound_inside_the_interval_or_on_too_few_values_is_inconclusive(run_dir: Path) -> None:
    (first,) = check_bounds(run_dir, parse_bounds("ttft_p50<30s"))
    (at,) = check_bounds(run_dir, parse_bounds(f"ttft_p50<{first.value * 1000:.6f}ms"))
    assert at.verdict == INCONCLUSIVE and at.low <= at.bound.limit <= at.high
    assert at.reason == "the interval holds the bound"
    assert at.needed_requests is None or at.needed_requests > 60
    (tail,) = check_bounds(run_dir, parse_bounds("ttft_p99<30s"))
    assert tail.verdict == INCONCLUSIVE and "a p99 needs 1000" in tail.reason
    assert tail.needed_requests == 1000 and probe_verdict([first, tail]) == INCONCLUSIVE
