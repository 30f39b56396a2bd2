"""``ServerSeries.from_parts``: the server's samples read a part at a time (a run's row
groups) give the series ``from_samples`` gives of the whole table, and are resolved a
scrape at a time as the parts come, never gathered first (issue 43: a long run's end).

The scrapes are lines of real SGLang pages (``test_sglang_counter_semantics``' shapes): a
series that resolves through one source in the first scrape and another later, so the
series is resolved a second time with the source held, and a flavour detected from the
first scrape when no mapping is given.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from probes.exposition import parse_exposition
from probes.mapping import builtin_mapping
from probes.mapping_model import MetricMapping
from probes.normalise import ServerSeries
from runfmt.columns import Columns

LABELS = 'model_name="tiny-llama",tp_rank="0"'
PROMPT = f"sglang:prompt_tokens_total{{{LABELS}}} 40.0\n"


def running(value: int) -> str:
    return f"sglang:num_running_reqs{{{LABELS}}} {value}\n"


def realtime(mode: str, value: float) -> str:
    return f'sglang:realtime_tokens_total{{{LABELS},mode="{mode}"}} {value}\n'


SCRAPES = [
    (0.0, running(0) + PROMPT),
    (0.5, running(3) + PROMPT + realtime("prefill_compute", 100.0)),
    (
        1.0,
        running(2) + PROMPT + realtime("prefill_compute", 150.0) + realtime("prefill_cache", 30),
    ),
    (1.5, running(1) + PROMPT + realtime("prefill_compute", 170.0)),
]


def samples() -> Columns:
    rows = [
        (t_s, s.name, json.dumps(s.labels, sort_keys=True), s.value)
        for t_s, text in SCRAPES
        for s in parse_exposition(text).samples
    ]
    return Columns(
        {
            "t_s": np.array([r[0] for r in rows], dtype=float),
            "metric": np.array([r[1] for r in rows], dtype=object),
            "labels": np.array([r[2] for r in rows], dtype=object),
            "value": np.array([r[3] for r in rows], dtype=float),
        },
        len(rows),
    )


def split(table: Columns, size: int) -> list[Columns]:
    return [table[np.arange(lo, min(lo + size, len(table)))] for lo in range(0, len(table), size)]


def assert_same(got: ServerSeries, want: ServerSeries) -> None:
    assert (got.flavour, got.itl_per, got.pool_unit) == (want.flavour, want.itl_per, want.pool_unit)
    assert got.frame.columns == want.frame.columns
    for name in want.frame.columns:
        assert np.array_equal(got.frame[name], want.frame[name], equal_nan=True), name
    assert got.provenance == want.provenance and got.sources == want.sources
    assert got.histograms == want.histograms


@pytest.mark.parametrize("mapping", [None, "sglang"])
@pytest.mark.parametrize("size", [1, 2, 3, 5, 100])
def test_parts_of_any_size_give_the_whole_tables_series(size: int, mapping: str | None) -> None:
    chosen = builtin_mapping(mapping) if mapping else None
    whole = ServerSeries.from_samples(samples(), chosen)
    # what is being checked: one source held over the run (a second resolution)
    assert np.isnan(whole.frame["prefix_queries"][0]) and len(whole.frame) == len(SCRAPES)
    assert whole.frame["prefix_queries"][1:].tolist() == [100.0, 180.0, 170.0]
    parts = split(samples(), size)
    assert_same(ServerSeries.from_parts(lambda: iter(parts), chosen), whole)


def test_parts_whose_times_go_back_are_read_whole_and_sorted() -> None:
    whole = ServerSeries.from_samples(samples(), builtin_mapping("sglang"))
    backwards = split(samples(), 4)[::-1]
    assert_same(ServerSeries.from_parts(lambda: iter(backwards), builtin_mapping("sglang")), whole)


def test_each_scrape_is_resolved_before_the_next_parts_are_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    events: list[str] = []
    snapshot = MetricMapping.snapshot

    def logged(self: MetricMapping, exposition):
        events.append("resolved")
        return snapshot(self, exposition)

    monkeypatch.setattr(MetricMapping, "snapshot", logged)
    parts = split(samples(), 1)

    def read():
        for part in parts:
            events.append("read")
            yield part

    ServerSeries.from_parts(read, builtin_mapping("sglang"))
    first_pass = events[: events.index("resolved") + 1]
    # the first scrape is resolved once the first row of the second has been read
    assert first_pass.count("read") == len(parse_exposition(SCRAPES[0][1]).samples) + 1
    assert events.count("resolved") == 2 * len(SCRAPES)  # the second, held-source pass
