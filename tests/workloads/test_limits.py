"""``workloads.limits``: the caps on user-given numbers and the messages naming the field."""

from __future__ import annotations

import math

import pytest

from workloads.errors import InputError
from workloads.limits import MAX_PLAN_REQUESTS, Bound, check_plan_size


def _problem(bound: Bound, value) -> InputError:
    with pytest.raises(InputError) as err:
        bound.check("--rate", value)
    assert err.value.field == "--rate"
    return err.value


def test_unset_passes_and_an_allowed_value_comes_back_unchanged():
    bound = Bound(low=0, above=True, high=100)
    assert bound.check("--rate", None) is None
    assert bound.check("--rate", 2.5) == 2.5
    assert bound.check("--rate", 100) == 100


def test_an_exclusive_low_refuses_the_boundary_and_an_inclusive_one_accepts_it():
    assert "too small" in _problem(Bound(low=0, above=True), 0).problem
    assert Bound(low=0).check("--rate", 0) == 0
    assert _problem(Bound(low=0, above=True), 0).fix == "must be > 0"


def test_above_the_cap_says_the_cap_and_the_reason():
    err = _problem(Bound(high=1000, why="each is a connection"), 1001)
    assert err.problem == "1,001 is above the cap of 1,000: each is a connection"


def test_nan_is_never_allowed_and_infinity_only_where_it_means_something():
    assert _problem(Bound(low=0, inf=True), math.nan).problem == "NaN is not allowed"
    assert Bound(low=0, inf=True).check("--rate", math.inf) == math.inf
    assert _problem(Bound(low=0), math.inf).problem == "inf is not allowed"
    assert _problem(Bound(low=0, inf=True), -math.inf).problem == "-inf is not allowed"
    assert Bound(low=0, inf=True).expects() == "must be >= 0, or inf"


def test_a_whole_bound_refuses_fractions_and_booleans_and_text_are_not_numbers():
    assert "whole number" in _problem(Bound(whole=True), 2.5).problem
    assert Bound(whole=True).check("--rate", 3.0) == 3.0
    assert _problem(Bound(), True).problem == "expected a number, got True"
    assert _problem(Bound(), "3").problem == "expected a number, got '3'"


def test_plan_size_cap_names_the_field_and_refuses_nan_and_unbounded():
    check_plan_size(MAX_PLAN_REQUESTS, "--duration")
    with pytest.raises(InputError, match="num_requests: --duration asks for about 10,000,001"):
        check_plan_size(MAX_PLAN_REQUESTS + 0.5, "--duration")
    with pytest.raises(InputError, match="unbounded"):
        check_plan_size(math.inf, "--rate inf", field="rate")
    with pytest.raises(InputError, match="NaN"):
        check_plan_size(math.nan, "--duration x --rate")
