"""One duration rule for every duration flag: a bare number is milliseconds, a suffix names
its unit; ``--slo``, ``--find`` and ``--resolution`` all read it the same way."""

from __future__ import annotations

import pytest

from diagnose.isolation import Resolution
from diagnose.sla import parse_bounds
from probes.slo import parse_slo
from runtime.durations import parse_duration, split_unit
from workloads.errors import InputError


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("500", 0.5), ("500ms", 0.5), ("0.5s", 0.5), ("500000us", 0.5), ("500000µs", 0.5),
     (" 2E-1S ", 0.2), ("1e3", 1.0), ("1e3ms", 1.0)],
)  # fmt: skip
def test_units_and_the_bare_millisecond(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds, rel=1e-12)


@pytest.mark.parametrize("text", ["fast", "5 minutes", "10e", "ms", "3h"])
def test_what_is_not_a_duration_raises(text: str) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)


def test_split_keeps_an_exponent_in_the_number() -> None:
    assert split_unit("2e-3s") == ("2e-3", "s")


@pytest.mark.parametrize("text", ["250", "250ms", "0.25s", "250000us"])
def test_three_flags_read_one_duration_the_same(text: str) -> None:
    slo = parse_slo(f"ttft={text}")
    (bound,) = parse_bounds(f"ttft_p99<{text}")
    resolution = Resolution.parse(text)
    assert slo.ttft_s == bound.limit == resolution.value == pytest.approx(0.25)
    assert not resolution.relative


def test_each_flag_names_itself_when_the_unit_is_wrong() -> None:
    for parse, flag in (
        (lambda: parse_slo("ttft=5h"), "--slo"),
        (lambda: parse_bounds("ttft_p99<5h"), "--find"),
        (lambda: Resolution.parse("5h"), "--resolution"),
    ):
        with pytest.raises(InputError) as err:
            parse()
        assert flag in str(err.value)
