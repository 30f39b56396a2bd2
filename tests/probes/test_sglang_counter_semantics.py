"""SGLang's counters created at their first increment: 0 where the page shows SGLang
counts them, unknown where nothing does, and one source per series for a whole run.

The pages are lines of real SGLang 0.5.23 pages (the CPU target, ``targets/sglang-cpu.sh``):
a healthy server carries the gauge ``sglang:num_retracted_reqs 0.0`` and, before the first
prefix hit, ``sglang:realtime_tokens_total`` with ``mode="prefill_compute"`` only; the
counters ``num_retracted_requests_total`` and ``realtime_tokens_total{mode="prefill_cache"}``
are not on the page until they count something.
"""

from __future__ import annotations

import json

import numpy as np

from probes.canonical import Provenance
from probes.exposition import parse_exposition
from probes.mapping import builtin_mapping
from probes.normalise import ServerSeries
from runfmt.columns import Columns

LABELS = 'engine_type="unified",model_name="tiny-llama",moe_ep_rank="0",pp_rank="0",tp_rank="0"'
RETRACTED_GAUGE = (
    "# HELP sglang:num_retracted_reqs The number of retracted requests.\n"
    "# TYPE sglang:num_retracted_reqs gauge\n"
    f'sglang:num_retracted_reqs{{{LABELS},pid="20451"}} 0.0\n'
)
REALTIME_HEAD = (
    "# HELP sglang:realtime_tokens_total Total number of tokens processed.\n"
    "# TYPE sglang:realtime_tokens_total counter\n"
)
RUNNING = f"sglang:num_running_reqs{{{LABELS}}} 0.0\n"


def realtime(mode: str, value: float) -> str:
    return f'sglang:realtime_tokens_total{{{LABELS},mode="{mode}"}} {value}\n'


def snap(text: str):
    return builtin_mapping("sglang").snapshot(parse_exposition(text))


def test_preemptions_are_zero_beside_the_retraction_gauge_and_unknown_without_it() -> None:
    healthy = snap(RUNNING + RETRACTED_GAUGE).series["preemptions"]
    assert healthy.value == 0.0 and healthy.provenance is Provenance.MEASURED
    assert healthy.source == "sglang:num_retracted_requests_total"
    bare = snap(RUNNING).series["preemptions"]
    assert bare.value is None and bare.provenance is Provenance.UNKNOWN
    counted = snap(
        RUNNING + RETRACTED_GAUGE + f"sglang:num_retracted_requests_total{{{LABELS}}} 3.0\n"
    )
    assert counted.series["preemptions"].value == 3.0


def test_prefix_hits_are_zero_before_the_first_hit_and_queries_count_the_computed() -> None:
    series = snap(RUNNING + REALTIME_HEAD + realtime("prefill_compute", 5.0)).series
    assert series["prefix_hits"].value == 0.0
    assert series["prefix_hits"].provenance is Provenance.MEASURED
    assert series["prefix_queries"].value == 5.0
    assert "realtime_tokens_total" in str(series["prefix_queries"].source)


def test_a_declared_family_without_samples_reads_zero_on_a_live_page() -> None:
    series = snap(RUNNING + REALTIME_HEAD).series
    assert series["prefix_hits"].value == 0.0
    assert series["prefix_queries"].value == 0.0


def test_a_counter_no_page_evidence_vouches_for_stays_unknown() -> None:
    # cached_tokens_total alone (no realtime family): the older source, no zero rule
    series = snap(RUNNING).series
    assert series["prefix_hits"].value is None
    assert series["prefix_hits"].provenance is Provenance.UNKNOWN


def _samples(scrapes: list[tuple[float, str]]) -> Columns:
    rows: list[tuple[float, str, str, float]] = []
    for t_s, text in scrapes:
        for sample in parse_exposition(text).samples:
            rows.append((t_s, sample.name, json.dumps(sample.labels, sort_keys=True), sample.value))
    return Columns(
        {
            "t_s": np.array([r[0] for r in rows], dtype=float),
            "metric": np.array([r[1] for r in rows], dtype=object),
            "labels": np.array([r[2] for r in rows], dtype=object),
            "value": np.array([r[3] for r in rows], dtype=float),
        }
    )


def test_prefix_queries_keep_one_source_for_the_whole_run() -> None:
    prompt = f"sglang:prompt_tokens_total{{{LABELS}}} 40.0\n"
    # The first scrape has no realtime family yet (an older page section): only the
    # prompt-token stand-in; later scrapes carry the realtime counters.
    scrapes = [
        (0.0, RUNNING + prompt),
        (1.0, RUNNING + prompt + realtime("prefill_compute", 100.0)),
        (
            2.0,
            RUNNING + prompt + realtime("prefill_compute", 150.0) + realtime("prefill_cache", 30),
        ),
    ]
    series = ServerSeries.from_samples(_samples(scrapes), builtin_mapping("sglang"))
    assert series.sources["prefix_queries"] == (
        'sglang:realtime_tokens_total{mode="prefill_cache"} + '
        'sglang:realtime_tokens_total{mode="prefill_compute"}'
    )
    values = series.frame["prefix_queries"]
    assert np.isnan(values[0])  # the stand-in's 40 is not spliced onto the realtime total
    assert values[1:].tolist() == [100.0, 180.0]
    # a counter that appears mid-run was created then: it counts from 0 (probes.normalise)
    assert series.increase("prefix_queries").value == 180.0
    assert series.increase("prefix_hits").value == 30.0
