"""The fast reader of plain pages (``probes.plain_exposition``) against prometheus_client.

Every real page under ``tests/fixtures`` (vLLM, SGLang, llama.cpp, the embedded engine)
must be read by the fast reader (not handed back) and flatten to
exactly prometheus_client's samples and family types. Constructed pages probe the
grouping rules (counters without ``_total``, samples no family claims, families cut off
by a stranger) and the lines that must go the slow way (escapes, exemplars, bad values),
where ``parse_exposition`` still answers what prometheus_client answers.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from probes.exposition import parse_exposition
from probes.plain_exposition import read_plain
from workloads.errors import InputError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
PAGES = sorted(
    p
    for p in FIXTURES.rglob("*")
    if p.suffix == ".prom" or (p.suffix == ".txt" and p.name.startswith("metrics"))
)


def _reference(text: str) -> tuple[list, dict[str, str]]:
    samples, types = [], {}
    for family in text_string_to_metric_families(text):
        samples.extend((s.name, dict(s.labels), float(s.value)) for s in family.samples)
        types[family.name] = family.type
    return samples, types


def _same(got: tuple[list, dict[str, str]], want: tuple[list, dict[str, str]]) -> None:
    (samples, types), (want_samples, want_types) = got, want
    assert types == want_types
    assert len(samples) == len(want_samples)
    for (name, labels, value), (want_name, want_labels, want_value) in zip(
        samples, want_samples, strict=True
    ):
        assert (name, labels) == (want_name, want_labels)
        assert value == want_value or (math.isnan(value) and math.isnan(want_value))


def test_the_fixture_pages_are_plain_and_read_as_prometheus_client_reads_them() -> None:
    assert len(PAGES) >= 9  # vLLM, SGLang, llama.cpp and the embedded engine's pages
    for page in PAGES:
        text = page.read_text()
        got = read_plain(text)
        assert got is not None, f"{page.name} went the slow way"
        _same(got, _reference(text))


GROUPING = """# HELP a_total requests
# TYPE a_total counter
a_total{x="1"} 3
a_created{x="1"} 17
# TYPE c counter
c 4
c{k="v"} 5
loose 1 1700000000000
# TYPE h histogram
h_bucket{le="1"} 1
h_bucket{le="+Inf",} 2
stranger 9
h_sum 3
h_count 2
# TYPE s summary
s{quantile="0.5"} NaN
s_sum -Inf
s_count 7
# HELP only_help some text
only_help 2
# a comment that is not HELP or TYPE
# TYPE g gauge
g { a = "1" , b="" } 1e3
g{a="2"}   0x0p0
"""


def test_grouping_follows_prometheus_client() -> None:
    text = GROUPING.replace("   0x0p0", "   +0.5")  # a value every parser takes
    got = read_plain(text)
    assert got is not None
    _same(got, _reference(text))
    names = [name for name, _, _ in got[0]]
    assert "c_total" in names and "a_created" in names and "stranger" in names
    assert got[1]["c"] == "counter" and got[1]["loose"] == "unknown"


@pytest.mark.parametrize(
    "line",
    [
        'e{q="a\\"b"} 1',  # an escaped quote
        'e{q="a\\\\b"} 1',  # an escaped backslash
        'e{q="x"} 1 # {trace_id="1"} 2',  # an exemplar
        "e 1_000",  # prometheus_client refuses "_" in a value
        'e{q="x",q="y"} 1',  # a label given twice
        '{__name__="e"} 1',  # the name as a label
        "e 1 2 3",  # more than a value and a timestamp
    ],
)
def test_lines_outside_the_plain_subset_go_to_prometheus_client(line: str) -> None:
    text = f"# TYPE e gauge\n{line}\n"
    assert read_plain(text) is None
    try:
        want = _reference(text)
    except ValueError:
        with pytest.raises(InputError):
            parse_exposition(text)
        return
    exposition = parse_exposition(text)
    _same(([(s.name, s.labels, s.value) for s in exposition.samples], exposition.types), want)


@pytest.mark.parametrize("text", ["# TYPE x wobbly\nx 1\n", "x{a=1} 2\n", "x one\n", "# TYPE\n"])
def test_a_page_prometheus_client_refuses_is_still_refused(text: str) -> None:
    assert read_plain(text) is None
    with pytest.raises(InputError):
        parse_exposition(text)
