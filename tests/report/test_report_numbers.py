"""``prefillscope.report.numbers``: every figure a view cannot know is ``unknown``, never 0."""

from __future__ import annotations

import math

import pytest

from prefillscope.report.numbers import (
    UNKNOWN,
    fmt_count,
    fmt_duration,
    fmt_rate,
    fmt_share,
    fmt_value,
    known_number,
    plain_number,
)


@pytest.mark.parametrize("absent", [None, math.nan, math.inf, True, "12", [1]])
def test_anything_but_a_finite_number_is_unknown(absent):
    assert known_number(absent) is None
    for fmt in (fmt_duration, fmt_share, fmt_count):
        assert fmt(absent) == UNKNOWN
    assert fmt_rate(absent, "tok/s") == UNKNOWN


def test_zero_is_a_known_zero_not_unknown():
    assert (fmt_duration(0), fmt_share(0.0), fmt_count(0)) == ("0", "0.0 %", "0")


def test_durations_rates_shares_and_counts_as_a_reader_wants_them():
    assert [fmt_duration(v) for v in (0.00085, 0.0123, 1.52, 150)] == [
        "850 µs", "12.3 ms", "1.52 s", "2.5 min",
    ]  # fmt: skip
    assert (fmt_rate(12.34, "tok/s"), fmt_rate(14390.4, "tok/s")) == ("12.3 tok/s",
                                                                    "14,390 tok/s")  # fmt: skip
    assert (fmt_share(0.42), fmt_count(1234567.4)) == ("42.0 %", "1,234,567")


def test_plain_numbers_keep_four_significant_digits_and_never_use_an_exponent():
    assert [plain_number(v) for v in (14390.2, 3.14159, 0.0001234, 0.5, -2.0, 0.0)] == [
        "14,390", "3.142", "0.0001234", "0.5", "-2", "0",
    ]  # fmt: skip


def test_any_scalar_from_a_run_file():
    assert [fmt_value(v) for v in (None, True, False, 1234, 0.25, math.nan, "vllm")] == [
        UNKNOWN, "yes", "no", "1,234", "0.25", UNKNOWN, "vllm",
    ]  # fmt: skip
