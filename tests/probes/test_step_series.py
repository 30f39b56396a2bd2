"""An engine step's time and tokens by what it carried are canonical series
(``step_time_decode`` …, ``probes.canonical.STEP_KINDS``): the embedded engine's mapping
reads them from its own labelled histograms, and a user's mapping can read another
engine's, so H1, H2 and the calibration see them without naming any engine's metric."""

from __future__ import annotations

from pathlib import Path

import pytest

from probes.canonical import HISTOGRAM_UNITS, STEP_KINDS
from probes.exposition import parse_exposition
from probes.mapping import builtin_mapping, load_mapping
from runtime import engine_metrics


def _histogram(name: str, kind: str, count: int, total: float) -> str:
    return (
        f'{name}_bucket{{kind="{kind}",le="0.01"}} {count}\n'
        f'{name}_bucket{{kind="{kind}",le="+Inf"}} {count}\n'
        f'{name}_count{{kind="{kind}"}} {count}\n'
        f'{name}_sum{{kind="{kind}"}} {total}\n'
    )


def test_the_embedded_engine_s_step_kinds_are_canonical_with_their_labels_as_source():
    text = "".join(
        _histogram(engine_metrics.STEP_SECONDS, kind, n, n * 0.005)
        + _histogram(engine_metrics.STEP_TOKENS, kind, n, n * 8)
        for kind, n in zip(STEP_KINDS, (100, 10, 1), strict=True)
    )
    snap = builtin_mapping("embedded").snapshot(parse_exposition(text))
    decode, mixed = snap.histograms["step_time_decode"], snap.histograms["step_time_mixed"]
    assert (decode.count, mixed.count) == (100, 10)
    assert decode.mean == pytest.approx(0.005) and snap.histograms["step_tokens_mixed"].mean == 8
    assert snap.histogram_sources["step_time_mixed"] == (
        f'{engine_metrics.STEP_SECONDS}{{kind="mixed"}}'
    )
    assert HISTOGRAM_UNITS["step_time_mixed"] == "s"
    assert HISTOGRAM_UNITS["step_tokens_mixed"] == "tokens"


def test_a_user_mapping_feeds_another_engine_s_steps_and_evictions(tmp_path: Path):
    path = tmp_path / "other.toml"
    path.write_text(
        'flavour = "other"\nextends = "vllm"\n\n'
        '[histograms.step_time_mixed]\nmetric = "other_step_seconds"\n'
        'labels = { batch = "mixed" }\n\n'
        '[series.prefix_evictions]\nmetric = "other_evicted_blocks_total"\n'
    )
    text = (
        'other_step_seconds_bucket{batch="mixed",le="+Inf"} 4\n'
        'other_step_seconds_count{batch="mixed"} 4\n'
        'other_step_seconds_sum{batch="mixed"} 0.2\n'
        "other_evicted_blocks_total 7\n"
    )
    snap = load_mapping(path).snapshot(parse_exposition(text))
    assert snap.histograms["step_time_mixed"].mean == pytest.approx(0.05)
    assert snap.histograms["step_time_decode"] is None  # not mapped: unknown, never 0
    assert snap.series["prefix_evictions"].value == 7
