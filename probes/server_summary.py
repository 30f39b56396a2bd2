"""The ``server`` section of ``summary.json``: what the server said about the same run.

Next to the client's numbers (``probes.latency``) it puts the server's own: TTFT/ITL/E2E
quantiles from its histograms, the prefix hit rate its counters show over the run against
the oracle's expectation for the requests sent, preemptions, the waiting queue, KV usage
and the pool's buckets — every value with its provenance (``measured``, ``derived``,
``unknown``) and source, so a report never presents a guess as a reading.

Counters are taken over the whole scraped span (the scraper starts before the first
request and takes a last scrape after the last), so warm-up requests are in the server's
counts; the oracle's expectation is therefore over every request sent, warm-up included.
Anything else hitting the server during the run is in its counters too.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from probes.canonical import Provenance, Value
from probes.latency import prefix_hit_rates
from probes.normalise import POOL_COLUMNS, ServerSeries, histogram_summary

_WORST = {Provenance.MEASURED: 0, Provenance.DERIVED: 1, Provenance.UNKNOWN: 2}


def _ratio(numerator: Value, denominator: Value) -> Value:
    """A share of two values; unknown when either is, or when nothing was counted."""
    if numerator.value is None or denominator.value is None:
        return Value.unknown(numerator.source if numerator.value is None else denominator.source)
    if denominator.value <= 0:
        return Value.unknown(f"no {denominator.source} counted in the run")
    provenance = max(numerator.provenance, denominator.provenance, key=_WORST.get)
    return Value(
        numerator.value / denominator.value,
        provenance,
        f"Δ{numerator.source} / Δ{denominator.source}",
    )


def _histogram(series: ServerSeries, name: str) -> dict[str, Any]:
    hist = series.histogram_increase(name)
    out = histogram_summary(hist)
    out["source"] = series.sources.get(name)
    # Quantiles are interpolated inside buckets: an estimate; count and mean are exact.
    out["provenance"] = str(Provenance.DERIVED if hist is not None else Provenance.UNKNOWN)
    return out


def expected_hit_rate(requests: pd.DataFrame) -> Value:
    """The oracle's cached share of prompt tokens over every request sent."""
    rate = prefix_hit_rates(requests)["expected_hit_rate"] if not requests.empty else None
    if rate is None:
        return Value.unknown("no request carries both prompt_tokens and expected_cached_tokens")
    return Value(rate, Provenance.DERIVED, "Σ expected_cached_tokens / Σ prompt_tokens (oracle)")


def server_summary(
    series: ServerSeries | None,
    requests: pd.DataFrame,
    *,
    probe: dict[str, Any] | None = None,
    source: str = "scrape",
) -> dict[str, Any]:
    """The ``server`` section; with no series every value is unknown and ``probe`` says
    why (the probe's status dict)."""
    expected = expected_hit_rate(requests)
    out: dict[str, Any] = {"source": source, "probe": probe}
    if series is None or series.frame.empty:
        reason = (probe or {}).get("reason") or "no server metrics were recorded"
        return out | {
            "available": False,
            "reason": reason,
            "prefix": {
                "observed_hit_rate": Value.unknown(reason).to_dict(),
                "expected_hit_rate": expected.to_dict(),
            },
        }
    hits, queries = series.increase("prefix_hits"), series.increase("prefix_queries")
    observed = _ratio(hits, queries)
    out |= {
        "available": True,
        "flavour": series.flavour,
        "window": {
            "start_s": float(series.t_s.min()),
            "end_s": float(series.t_s.max()),
            "scrapes": len(series.frame),
        },
        "ttft_s": _histogram(series, "ttft"),
        "itl_s": _histogram(series, "itl") | {"per": series.itl_per},
        "e2e_s": _histogram(series, "e2e"),
        "prefix": {
            "queries": queries.to_dict(),
            "hits": hits.to_dict(),
            "observed_hit_rate": observed.to_dict(),
            "expected_hit_rate": expected.to_dict(),
            "observed_minus_expected": (
                observed.value - expected.value
                if observed.value is not None and expected.value is not None
                else None
            ),
        },
        "preemptions": series.increase("preemptions").to_dict(),
        "prompt_tokens": series.increase("prompt_tokens").to_dict(),
        "generation_tokens": series.increase("generation_tokens").to_dict(),
        "running": series.level("running"),
        "waiting": series.level("waiting"),
        "kv_usage": series.level("kv_usage"),
        "block_size": series.latest("block_size").to_dict(),
        "num_blocks": series.latest("num_blocks").to_dict(),
        "pool": {
            "unit": series.pool_unit,
            **{f"{name.removeprefix('pool_')}_blocks": series.level(name) for name in POOL_COLUMNS},
        },
    }
    return out
