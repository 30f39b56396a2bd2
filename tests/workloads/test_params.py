"""``workloads.params``: typed workload knobs read from flags, files and presets."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from workloads.distributions import Distribution
from workloads.errors import InputError
from workloads.limits import MAX_PLAN_REQUESTS
from workloads.params import Names, choice, dist, make_params, names, number, option, params_dict


@dataclass(frozen=True)
class Knobs:
    prompt_len: Distribution = field(**dist(100, 1, "prompt tokens"))
    groups: int = field(**number(4, 1, "groups"))
    rate: float = field(**number(1.0, 0, "rate", above=True))
    tenants: Names = field(**names("tenant-", "tenants"))
    mode: str = field(**choice("fast", ("fast", "slow"), "mode"))
    stream: bool = field(**option(True, "stream"))


def _refused(values: dict) -> InputError:
    with pytest.raises(InputError) as err:
        make_params(Knobs, values, "workload 'knobs'")
    return err.value


def test_command_line_strings_are_read_as_the_field_types():
    p = make_params(
        Knobs,
        {"prompt_len": "uniform:10-20", "groups": " 7 ", "rate": "0.5", "stream": "off"},
        "x",
    )
    assert str(p.prompt_len) == "uniform:10-20"
    assert (p.groups, p.rate, p.stream) == (7, 0.5, False)


def test_a_count_of_names_expands_with_the_prefix_and_a_list_is_kept():
    assert make_params(Knobs, {"tenants": 3}, "x").tenants == ("tenant-0", "tenant-1", "tenant-2")
    assert make_params(Knobs, {"tenants": "a, b"}, "x").tenants == ("a", "b")
    assert "distinct" in _refused({"tenants": "a,a"}).problem
    assert "non-empty" in _refused({"tenants": "a,,b"}).problem


def test_a_misspelt_key_is_refused_listing_the_known_ones():
    err = _refused({"group": 3})
    assert err.field == "group"
    assert err.problem == "unknown key for workload 'knobs'"
    assert err.fix == "known: prompt_len, groups, rate, tenants, mode, stream"


def test_numbers_are_checked_against_their_floor_and_the_count_cap():
    assert _refused({"groups": 0}).problem == "must be >= 1, got 0"
    assert _refused({"rate": 0}).problem == "must be > 0, got 0"
    assert _refused({"groups": 2.5}).problem == "expected a whole number, got 2.5"
    assert _refused({"groups": True}).problem == "expected a number, got True"
    assert _refused({"rate": "nan"}).field == "rate"
    assert "above the cap" in _refused({"groups": MAX_PLAN_REQUESTS + 1}).problem


def test_choices_and_booleans_name_what_is_allowed():
    err = _refused({"mode": "medium"})
    assert (err.field, err.fix) == ("mode", "one of: fast, slow")
    assert _refused({"stream": "maybe"}).problem == "expected true or false, got 'maybe'"
    assert _refused({"prompt_len": 0}).field == "prompt_len"


def test_resolved_values_print_back_as_plain_json_values():
    out = params_dict(make_params(Knobs, {"tenants": 2, "prompt_len": "uniform:10-20"}, "x"))
    assert out == {
        "prompt_len": "uniform:10-20",
        "groups": 4,
        "rate": 1.0,
        "tenants": ["tenant-0", "tenant-1"],
        "mode": "fast",
        "stream": True,
    }


@pytest.mark.parametrize("value", ["2.5", 2.5, "uniform:2.5-10", "uniform:2-10.5",
                                   "normal:mean=50,std=5,min=2.5"])  # fmt: skip
def test_a_token_count_distribution_takes_whole_numbers_only(value) -> None:
    err = _refused({"prompt_len": value})
    assert err.field == "prompt_len" and "is not a whole number" in err.problem


def test_a_distribution_of_seconds_takes_fractions() -> None:
    @dataclass(frozen=True)
    class Timed:
        think: Distribution = field(**dist(0, 0, "seconds", whole=False))

    assert str(make_params(Timed, {"think": "uniform:0.5-2.5"}, "timed").think) == "uniform:0.5-2.5"
    assert str(make_params(Knobs, {"prompt_len": "normal:mean=50.5,std=5"}, "k").prompt_len)
