"""Length and time distributions: the strings people type, what they draw, what is refused."""

from __future__ import annotations

import numpy as np
import pytest

from workloads.distributions import (
    Constant,
    LogNormal,
    Normal,
    Uniform,
    at_least,
    parse_distribution,
)
from workloads.errors import InputError


@pytest.mark.parametrize(
    "text",
    [
        "512",
        "uniform:100-200",
        "normal:mean=1000,std=200",
        "normal:mean=1000,std=200,min=1,max=4000",
        "exponential:mean=2",
        "lognormal:median=1600,sigma=0.5,max=9000",
    ],
)
def test_canonical_text_round_trips(text: str) -> None:
    dist = parse_distribution(text, "x")
    assert str(dist) == text
    assert parse_distribution(str(dist), "x") == dist


def test_spellings_of_the_same_distribution() -> None:
    assert parse_distribution(512, "x") == parse_distribution("constant:512", "x") == Constant(512)
    assert parse_distribution("uniform:min=3,max=9", "x") == Uniform(3, 9)
    assert parse_distribution(" uniform: 3 - 9 ", "x") == Uniform(3, 9)


def test_uniform_integers_cover_both_ends_evenly() -> None:
    draws = Uniform(100, 103).sample_int(np.random.default_rng(0), 40_000)
    counts = np.bincount(draws - 100)
    assert len(counts) == 4
    assert counts.min() > 0.9 * 10_000


def test_lognormal_from_moments_has_those_moments() -> None:
    dist = parse_distribution("lognormal:mean=2000,std=1500", "x")
    assert isinstance(dist, LogNormal)
    draws = dist.sample(np.random.default_rng(1), 400_000)
    assert draws.mean() == pytest.approx(2000, rel=0.02)
    assert draws.std() == pytest.approx(1500, rel=0.04)
    assert dist.mean == pytest.approx(2000)


def test_lengths_are_clipped_at_their_floor() -> None:
    dist = at_least(parse_distribution("normal:mean=5,std=20", "suffix_len"), 1, "suffix_len")
    assert isinstance(dist, Normal)
    draws = dist.sample_int(np.random.default_rng(2), 10_000)
    assert draws.min() == 1
    assert (draws == 1).mean() > 0.3  # the clipped mass, not a resampled tail


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("-5", "goes below 0"),
        ("uniform:200-100", "above its maximum"),
        ("uniform:-5-10", "goes below 0"),
        ("normal:mean=10,std=-1", "std must be positive"),
        ("normal:mean=-10,std=1", "below 0"),
        ("normal:mean=10", "needs std"),
        ("normal:mean=10,std=1,min=9,max=3", "above max"),
        ("lognormal:mean=0,std=1", "must be positive"),
        ("exponential:mean=0", "must be positive"),
        ("zipf:1.1", "unknown distribution 'zipf'"),
        ("uniform:a-b", "not a number"),
        ("normal:mean=1,sd=2", "normal takes"),
        ("nan", "must be finite"),
    ],
)
def test_impossible_parameters_are_one_line_input_errors(text: str, needle: str) -> None:
    with pytest.raises(InputError) as info:
        at_least(parse_distribution(text, "prefix_len"), 0, "prefix_len")
    message = str(info.value)
    assert message.startswith("prefix_len: ")
    assert needle in message
    assert "\n" not in message
