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
        "poisson:mean=300",
        "skewnormal:loc=500,scale=100,shape=4,min=1,max=2000",
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


def test_poisson_and_skew_normal_draw_their_moments() -> None:
    rng = np.random.default_rng(3)
    poisson = parse_distribution("poisson:mean=40", "x")
    draws = poisson.sample_int(rng, 200_000)
    assert draws.mean() == pytest.approx(40, rel=0.01)
    assert draws.var() == pytest.approx(40, rel=0.03)  # a Poisson's variance is its mean
    # Azzalini's skew normal: mean loc + scale·δ·√(2/π), variance scale²(1 − 2δ²/π)
    skew = parse_distribution("skewnormal:loc=500,scale=100,shape=4", "x")
    delta = 4 / np.sqrt(17)
    draws = skew.sample(rng, 400_000)
    assert skew.mean == pytest.approx(500 + 100 * delta * np.sqrt(2 / np.pi))
    assert draws.mean() == pytest.approx(skew.mean, rel=0.002)
    assert draws.std() == pytest.approx(100 * np.sqrt(1 - 2 * delta**2 / np.pi), rel=0.01)
    assert np.mean(draws > skew.mean) < 0.5  # the long tail is on the right
    # shape 0 is the normal
    flat = parse_distribution("skewnormal:loc=0,scale=1,shape=0", "x").sample(rng, 200_000)
    assert abs(flat.mean()) < 0.01 and flat.std() == pytest.approx(1, rel=0.01)
    for bad in ("poisson:mean=0", "skewnormal:loc=1,scale=0,shape=1", "skewnormal:loc=1"):
        with pytest.raises(InputError):
            parse_distribution(bad, "x")


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
