"""long-prompt and interference plans, and plan statistics for the synthetic families."""

from __future__ import annotations

import pytest

from workloads.build import build_plan
from workloads.errors import InputError
from workloads.spec import load_spec
from workloads.stats import plan_stats


def test_long_prompts_span_2k_to_32k_and_share_nothing() -> None:
    plan = build_plan(load_spec("long-prompt", {"num_requests": 60, "seed": 3}))
    lengths = [len(r.prompt) for r in plan]
    assert min(lengths) >= 2048 and max(lengths) <= 32768
    assert max(lengths) > 28000 and min(lengths) < 6000
    stats = plan_stats(plan)
    assert stats["prefix"]["block_hit_rate"] == 0.0
    assert stats["prefix"]["expected_cached_tokens"] == 0


def test_long_prompts_beyond_32k() -> None:
    plan = build_plan(load_spec("long-prompt", {"num_requests": 3, "prompt_len": 65536}))
    assert [len(r.prompt) for r in plan] == [65536] * 3


def test_interference_mixes_closed_loop_decodes_and_open_loop_long_prompts() -> None:
    spec = load_spec(
        "interference",
        {"concurrency": 6, "rate": 0.25, "num_requests": 10, "stream_requests": 3},
    )
    plan = build_plan(spec)
    decode = [r for r in plan if r.kind == "decode"]
    long = [r for r in plan if r.kind == "long-prompt"]
    assert plan.concurrency == 6 and plan.arrival == "poisson"
    assert len(decode) == 18 and len(long) == 10
    assert all(r.intended_s is None and r.session is None for r in decode)
    assert all(len(r.prompt) == 64 and r.max_tokens == 1024 for r in decode)
    times = [r.intended_s for r in long]
    # the first one mean gap (1 / rate) after the streams start: amid decodes, not beside
    # the streams' own first prompts at t=0
    assert times[0] == 4.0 and times == sorted(times)
    assert all(len(r.prompt) == 8192 and r.max_tokens == 16 for r in long)
    stats = plan_stats(plan)
    assert stats["closed_loop_requests"] == 18 and stats["open_loop_requests"] == 10
    assert stats["prefix"]["expected_cached_tokens"] == 0


def test_interference_refuses_closed_loop_injection() -> None:
    with pytest.raises(InputError) as info:
        build_plan(load_spec("interference", {"arrival": "closed", "concurrency": 4}))
    assert info.value.field == "arrival"


def test_plan_stats_counts_and_percentiles() -> None:
    plan = build_plan(
        load_spec(
            "shared-prefix",
            {
                "groups": 2,
                "requests_per_group": 5,
                "prefix_len": 100,
                "suffix_len": 20,
                "output_len": "uniform:10-20",
                "warmup": True,
                "rate": 5,
            },
        )
    )
    stats = plan_stats(plan)
    assert stats["requests"] == 10 and stats["warmup_requests"] == 2
    assert stats["prompt_tokens"]["total"] == 1200
    assert stats["prompt_tokens"]["p50"] == 120
    assert 10 <= stats["output_tokens"]["min"] <= stats["output_tokens"]["max"] <= 20
    assert stats["offered_rate_per_s"] == pytest.approx(5, rel=0.8)
    # Warm-up left each group's 96 prefix tokens (6 blocks of 16) cached for everyone.
    assert stats["prefix"]["expected_cached_tokens"] == 10 * 96
