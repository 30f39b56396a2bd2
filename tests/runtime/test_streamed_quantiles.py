"""runtime.quantiles.Selection: the statistics of values read in parts, in several passes
and bounded memory, are ``describe``'s over the whole column, to the last bit."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

import runtime.quantiles as rq
from runtime.quantiles import QUANTILES, describe, exact_sum, mean, select_passes


def _samples(kind: int, n: int, rng: np.random.Generator) -> np.ndarray:
    if kind == 0:  # heavy tail: most values in a few buckets of the first histogram
        return rng.lognormal(-5, 2, n)
    if kind == 1:  # a handful of distinct values, each repeated
        return rng.integers(0, 5, n).astype(float) * 0.001
    if kind == 2:  # unknowns among them (not samples)
        return np.r_[rng.normal(0, 1, n), [np.nan, np.inf, -np.inf]]
    # two adjacent floats: an interval no histogram can split
    return np.full(n, 0.1) + rng.integers(0, 2, n) * (np.nextafter(0.1, 1) - 0.1)


@pytest.mark.parametrize("kind", range(4))
def test_parts_and_passes_give_describes_figures_bit_for_bit(
    kind: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = np.random.default_rng(kind)
    passes_seen = []
    for trial in range(60):
        n = int(rng.integers(1, 40)) if trial % 3 == 0 else int(rng.integers(40, 4000))
        values = _samples(kind, n, rng)
        parts = np.split(values, np.sort(rng.integers(0, len(values), int(rng.integers(0, 6)))))
        # a small cap makes the histogram passes run (the default keeps 8192 values)
        monkeypatch.setattr(rq, "SELECT_CAP", int(rng.integers(1, 50)))
        calls = []

        def parts_of(pass_number: int, parts: list = parts, calls: list = calls) -> object:
            calls.append(pass_number)
            return ({"v": part} for part in parts)

        got = select_passes(parts_of)["v"].describe()
        finite = values[np.isfinite(values)]
        want = describe(values) | {"max": float(finite.max())}
        assert got == want, (kind, trial, n)
        levels = [QUANTILES[name] for name in ("p50", "p90", "p95", "p99", "p999")]
        assert [got[k] for k in ("p50", "p90", "p95", "p99", "p999")] == [
            float(v) for v in np.percentile(finite, levels)
        ]
        passes_seen.append(len(calls))
    # the count pass, a histogram pass, the last selection (two adjacent floats: the
    # histogram alone tells them apart)
    assert max(passes_seen) >= (2 if kind == 3 else 3)


def test_memory_is_a_parts_and_the_cap_not_the_values(monkeypatch: pytest.MonkeyPatch) -> None:
    """Never more than SELECT_CAP values kept per wanted rank, however many are read."""
    monkeypatch.setattr(rq, "SELECT_CAP", 64)
    kept = []
    original = rq._Rank.end

    def watching(rank: rq._Rank) -> None:
        kept.append(sum(k.shape[1] for k in rank.kept))
        original(rank)

    monkeypatch.setattr(rq._Rank, "end", watching)
    rng = np.random.default_rng(7)
    parts = [rng.lognormal(size=10_000) for _ in range(20)]
    got = select_passes(lambda _: ({"v": p} for p in parts))["v"].describe()
    assert got == describe(np.concatenate(parts)) | {"max": float(max(p.max() for p in parts))}
    assert 0 < max(kept) <= 64


def test_the_mean_is_exactly_rounded_whatever_the_order() -> None:
    rng = np.random.default_rng(0)
    values = rng.normal(0, 1e3, 200) * 10.0 ** rng.integers(-300, 300, 200)
    values = np.r_[values, [5e-324, -5e-324, 1e308, -1e308]]
    exact = sum(Fraction(v) for v in values.tolist())
    assert Fraction(exact_sum(values), 2**-rq._BASE) == exact
    assert mean(values) == float(exact / len(values))
    assert mean(values[::-1]) == mean(values) == describe(values)["mean"]
    # the pairwise sum numpy's mean takes is not: order moves its last bits
    tiny = np.array([1.0, 1e-16, 1e-16, 1e-16, 1e-16])
    assert mean(tiny) == float(sum(Fraction(v) for v in tiny.tolist()) / 5)
