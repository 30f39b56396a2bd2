"""The ``server`` section of ``summary.json``: what the server said about the same run.

Next to the client's numbers (``probes.latency``) it puts the server's own: TTFT/ITL/E2E
quantiles from its histograms, the prefix hit rate its counters show over the run against
the oracle's expectation for the requests sent, preemptions, the waiting queue, KV usage
and the pool's buckets, and the step lateness of an engine that publishes it (the
embedded engine: ``step_lateness_s``) — every value with its provenance (``measured``, ``derived``,
``unknown``) and source, so a report never presents a guess as a reading.

**Quantiles from buckets.** A histogram knows only how many observations fell in each
bucket; a quantile inside a bucket is a linear interpolation (PromQL's
``histogram_quantile``), which can land anywhere in a wide bucket — e.g. 7.3 s in a
5–10 s bucket when the client's slowest request took 5.8 s. So each quantile keeps its
numeric value for old readers and says how it was made, in ``quantiles.<q>``:
``method`` (``interpolated``; ``floor`` past the last finite bucket; ``clamped`` when the
interpolation exceeded the client's maximum), the ``bucket`` it lies in and the
``bounds`` the true value lies within. The client's maximum of the same span
(``client_max_s``) bounds the server's: the server sees a request between its arrival and
its last byte, inside the client's send → receive (TTFT and E2E from the actual send; ITL
as the longest gap between two chunks of one request). One rule makes the three agree:
the client's maximum caps the value *and* both bounds — ``bounds`` is the bucket with
each end cut at the client's maximum, and ``value`` the interpolation clamped into
``bounds`` (``clamped`` when that moved it) — so ``bounds[0] ≤ value ≤ bounds[1] ≤
client_max_s`` always holds. The server's clock may run a few ms past the client's, so
a whole bucket can lie above the client's maximum (a 0.1–0.25 s bucket beside a 0.0966 s
client maximum): then both bounds are the client's maximum, ``bucket`` keeps what the
server counted and ``note`` says the two disagree.

Counters are taken over the whole scraped span (the scraper starts before the first
request and takes a last scrape after the last), so warm-up requests are in the server's
counts; the oracle's expectation is therefore over every request sent, warm-up included.
Anything else hitting the server during the run is in its counters too. A first scrape
taken after the first request was sent (a page that stalled when the load began, which
does not wait for it) is no baseline: every counter's increase is then unknown, saying
so, rather than short of the first requests; gauges' levels stand.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import numpy as np

from probes.canonical import HISTOGRAM_UNITS, HIT_TIERS, Histogram, Provenance, Value
from probes.latency import (
    Parts,
    PrefixSums,
    completed_mask,
    latency_columns,
    parts_of,
    window_bounds,
)
from probes.normalise import POOL_COLUMNS, ServerSeries, histogram_summary
from probes.token_gaps import token_chunk_parts
from runfmt.codec import absent, frozen_map
from runfmt.columns import Table, factorize, numbers
from runfmt.metrics import E2E, E2E_SENT, ITL, TTFT, TTFT_SENT
from runfmt.run_sections import ProbeState
from runfmt.series import Hist, Series, hit_tier
from runfmt.summary_server import Histogram as LatencyHistogram
from runfmt.summary_server import (
    HitsBySource,
    Level,
    Offload,
    PoolLevels,
    QuantileBounds,
    ServerPrefix,
    ServerSection,
    ServerWindow,
    SizeHistogram,
    TierHits,
)
from runtime.quantiles import QUANTILES

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


def _finite_max(values: Any, since: float | None = None) -> float | None:
    """The largest finite value, or ``since`` when larger (``None``: none of either)."""
    arr = np.asarray(values, dtype=float)
    arr = arr[np.isfinite(arr)]
    found = float(arr.max()) if arr.size else None
    if since is None or found is None:
        return found if since is None else since
    return max(found, since)


def client_maxima(requests: Table | Parts, chunks: Table | Parts | None) -> dict[str, float | None]:
    """The client's longest TTFT, E2E (both from the actual send) and chunk gap over every
    request it sent (warm-up included, as the server's counters are): what a server
    histogram of the same span cannot exceed. ``None`` where not measured. The tables
    whole or a part at a time (``probes.latency.Parts``)."""
    out: dict[str, float | None] = {TTFT.key: None, E2E.key: None, ITL.key: None}
    for part in parts_of(requests)():
        latencies = latency_columns(part)[completed_mask(part)]
        out[TTFT.key] = _finite_max(latencies[TTFT_SENT.key], out[TTFT.key])
        out[E2E.key] = _finite_max(latencies[E2E_SENT.key], out[E2E.key])
    if chunks is not None:
        for tokens, _ in token_chunk_parts(parts_of(chunks)()):
            codes, _ = factorize(tokens["request_id"])
            t = tokens["t_s"].astype(float)
            order = np.lexsort((t, codes))  # each request's chunks in time order
            codes, t = codes[order], t[order]
            same = codes[1:] == codes[:-1]
            out[ITL.key] = _finite_max((t[1:] - t[:-1])[same], out[ITL.key])
    return out


def _quantile_detail(
    hist: Histogram, q: float, value: float, client_max: float | None
) -> QuantileBounds:
    """How one quantile was made (see the module docstring)."""
    lower, upper = hist.bucket(q) or (math.nan, math.nan)
    method = "floor" if math.isinf(upper) else "interpolated"
    low, high, note = lower, upper, None
    if client_max is not None:  # the one rule: the client's maximum caps value and bounds
        low, high = min(lower, client_max), min(upper, client_max)
        if client_max < lower:
            note = (
                "the bucket lies above the client's maximum: the server counted more "
                "(its clock ran past the client's); the client's maximum is the bound"
            )
        if value > high:
            value, method = high, "clamped"
    return QuantileBounds(
        value=value,
        method=method,
        bucket=(lower, None if math.isinf(upper) else upper),
        bounds=(low, None if math.isinf(high) else high),
        note=note,
    )


def _histogram(series: ServerSeries, name: str, client_max: float | None) -> LatencyHistogram:
    """A latency's histogram over the run (without ``per``, which only ITL's says)."""
    hist = series.histogram_increase(name)
    found = LatencyHistogram(
        **histogram_summary(hist),
        source=series.sources.get(name),
        # Quantiles are interpolated inside buckets: an estimate; count and mean are exact.
        provenance=str(Provenance.DERIVED if hist is not None else Provenance.UNKNOWN),
        client_max_s=client_max,
        extra=absent("per"),
    )
    if hist is None:
        return found
    details = {
        q: _quantile_detail(hist, pct / 100.0, found.get(q), client_max)
        for q, pct in QUANTILES.items()
        if found.get(q) is not None
    }
    return replace(
        found,
        **{q: d.value for q, d in details.items()},
        quantile_method="interpolated inside histogram buckets (histogram_quantile)",
        quantiles=frozen_map(details),
    )


#: Where the server says its prompt tokens came from (``prompt_tokens_by_source``), by key.
PROMPT_SOURCES = {
    "computed": Series.PROMPT_TOKENS_COMPUTED,
    "local_cache": Series.HITS_LOCAL,
    "external": Series.HITS_EXTERNAL,
    "cached": Series.PROMPT_TOKENS_CACHED,
}
#: What a KV offload tier or connector says it moved (counters), and its transfer sizes.
OFFLOAD_COUNTERS = (
    Series.OFFLOAD_LOAD_BYTES,
    Series.OFFLOAD_STORE_BYTES,
    Series.OFFLOAD_LOAD_SECONDS,
    Series.OFFLOAD_STORE_SECONDS,
    Series.EXTERNAL_PREFIX_QUERIES,
    Series.EXTERNAL_PREFIX_HITS,
    Series.LMCACHE_REQUESTED_TOKENS,
    Series.LMCACHE_HIT_TOKENS,
)
OFFLOAD_HISTOGRAMS = (Hist.OFFLOAD_LOAD_SIZE, Hist.OFFLOAD_STORE_SIZE)
#: vLLM's sampled KV block residency histograms (``--kv-cache-metrics``).
RESIDENCY = (Hist.KV_BLOCK_LIFETIME, Hist.KV_BLOCK_IDLE_BEFORE_EVICT, Hist.KV_BLOCK_REUSE_GAP)


def hits_by_source(series: ServerSeries) -> HitsBySource:
    """The ``hits_by_source`` section: the server's own account of where cached prompt
    tokens came from over the run — by tier (``device`` memory, ``host`` memory it
    offloaded to, ``storage``, another instance ``p2p``, an ``external`` connector that
    does not say; vLLM's ``prompt_tokens_cached_by_source``), each with its share of the
    tiers' total, and by source (computed / local cache / external; vLLM's
    ``prompt_tokens_by_source``, llama.cpp's computed and cached counters). ``reported``
    says whether the server splits its hits by tier at all; only the tiers it reports
    are listed. What an offload tier or connector moved (bytes, seconds, transfer sizes,
    LMCache's tokens) is under ``offload``. Every value keeps its provenance: an
    increase is ``measured`` when its counter was read; a share keeps the worse of its
    two parts."""
    tiers = {tier: series.increase(hit_tier(tier)) for tier in HIT_TIERS}
    known = {tier: value for tier, value in tiers.items() if value.known}
    total = Value(
        math.fsum(v.value or 0.0 for v in known.values()),
        Provenance.MEASURED,
        "Σ tiers",
    )
    return HitsBySource(
        reported=bool(known),
        tiers=frozen_map(
            {
                tier: TierHits(value.reading(), _ratio(value, total).reading())
                for tier, value in known.items()
            }
        ),
        sources=frozen_map(
            {key: series.increase(name).reading() for key, name in PROMPT_SOURCES.items()}
        ),
        offload=Offload(
            counters=frozen_map(
                {name: series.increase(name).reading() for name in OFFLOAD_COUNTERS}
            ),
            sizes=frozen_map({name: _plain_histogram(series, name) for name in OFFLOAD_HISTOGRAMS}),
        ),
    )


def _plain_histogram(series: ServerSeries, name: str) -> SizeHistogram:
    """A non-latency histogram over the run: its count, mean and quantiles in its unit."""
    hist = series.histogram_increase(name)
    return SizeHistogram(
        **histogram_summary(hist),
        unit=HISTOGRAM_UNITS[name],
        source=series.sources.get(name),
        provenance=str(Provenance.DERIVED if hist is not None else Provenance.UNKNOWN),
    )


def expected_hit_rate(requests: Table | Parts) -> Value:
    """The oracle's cached share of prompt tokens over every request sent."""
    sums, rows = PrefixSums(), 0
    for part in parts_of(requests)():
        sums.add(part)
        rows += len(part)
    rates = sums.rates() if rows else None
    rate = rates.expected_hit_rate if rates is not None else None
    if rates is None or rate is None:
        why = rates.expected_reason if rates is not None else None
        return Value.unknown(why or "the run has no requests")
    return Value(rate, Provenance.DERIVED, "Σ expected_cached_tokens / Σ prompt_tokens (oracle)")


def _last_response_s(requests: Table | Parts) -> float:
    """When the run's last response ended (run clock); -inf when none did."""
    return max((window_bounds(part)[1] for part in parts_of(requests)()), default=-math.inf)


def _first_send_s(requests: Table | Parts) -> float:
    """When the run's first request was sent (run clock); inf when none was."""
    sent = (numbers(part, "sent_s") for part in parts_of(requests)())
    return min((float(np.nanmin(s)) for s in sent if np.isfinite(s).any()), default=math.inf)


def _without_late_baseline(series: ServerSeries, requests: Table | Parts) -> ServerSeries:
    """``series``, its counters marked baseline-less when its first scrape is later than
    the first send (their increases would miss the first requests)."""
    first_scrape, first_send = float(series.t_s.min()), _first_send_s(requests)
    if first_scrape <= first_send:
        return series
    return replace(
        series,
        no_baseline=(
            f"no baseline: the first scrape (t={first_scrape:.2f} s) came after the first "
            f"request was sent (t={first_send:.2f} s), so the counters miss the first requests"
        ),
    )


def server_summary(
    series: ServerSeries | None,
    requests: Table | Parts,
    *,
    probe: ProbeState | None = None,
    source: str = "scrape",
    chunks: Table | Parts | None = None,
) -> ServerSection:
    """The ``server`` section; with no series every value is unknown and ``probe`` says
    why (the probe's status as ``run.json`` records it). ``chunks`` (the run's chunk
    events) give the client's longest gap, which bounds the server's ITL quantiles."""
    expected = expected_hit_rate(requests)
    if series is None or series.frame.empty:
        reason = (probe.reason if probe is not None else None) or "no server metrics were recorded"
        prefix = ServerPrefix(
            observed_hit_rate=Value.unknown(reason).reading(),
            expected_hit_rate=expected.reading(),
            extra=absent("observed_minus_expected"),  # nothing observed to compare
        )
        return ServerSection(source, probe, False, reason=reason, prefix=prefix)
    if source == "scrape":  # a Prometheus range starts at the load's start, by construction
        series = _without_late_baseline(series, requests)
    hits, queries = series.increase(Series.PREFIX_HITS), series.increase(Series.PREFIX_QUERIES)
    observed = _ratio(hits, queries)
    client = client_maxima(requests, chunks)
    itl = _histogram(series, Hist.ITL, client[ITL.key])

    def level(name: str) -> Level:
        return series.level(name)

    return ServerSection(
        source=source,
        probe=probe,
        available=True,
        flavour=series.flavour,
        window=ServerWindow(
            start_s=float(series.t_s.min()),
            end_s=float(series.t_s.max()),
            scrapes=len(series.frame),
            # The last scrape predates the last response: the server's figures miss the
            # final requests (the last scrape failed, or the run was cut short).
            stale=bool(float(series.t_s.max()) < _last_response_s(requests)),
        ),
        ttft_s=_histogram(series, Hist.TTFT, client[TTFT.key]),
        itl_s=replace(itl, per=series.itl_per, extra=frozen_map()),
        e2e_s=_histogram(series, Hist.E2E, client[E2E.key]),
        prefix=ServerPrefix(
            queries=queries.reading(),
            hits=hits.reading(),
            observed_hit_rate=observed.reading(),
            expected_hit_rate=expected.reading(),
            observed_minus_expected=(
                observed.value - expected.value
                if observed.value is not None and expected.value is not None
                else None
            ),
        ),
        hits_by_source=hits_by_source(series),
        kv_block_residency_s=frozen_map({n: _plain_histogram(series, n) for n in RESIDENCY}),
        max_sequence_tokens=level(Series.MAX_SEQUENCE_TOKENS),
        kv_tokens=level(Series.KV_TOKENS),
        preemptions=series.increase(Series.PREEMPTIONS).reading(),
        prompt_tokens=series.increase(Series.PROMPT_TOKENS).reading(),
        generation_tokens=series.increase(Series.GENERATION_TOKENS).reading(),
        running=level(Series.RUNNING),
        waiting=level(Series.WAITING),
        kv_usage=level(Series.KV_USAGE),
        block_size=series.latest(Series.BLOCK_SIZE).reading(),
        num_blocks=series.latest(Series.NUM_BLOCKS).reading(),
        pool=PoolLevels(
            unit=series.pool_unit,
            buckets=frozen_map(
                {f"{name.removeprefix('pool_')}_blocks": level(name) for name in POOL_COLUMNS}
            ),
        ),
        step_lateness_s=_published(series, Hist.STEP_LATENESS),
    )


def _published(series: ServerSeries, name: str) -> SizeHistogram | None:
    """A histogram the server may not publish at all (``None`` then: no key is written,
    unlike a figure every server could have and this one did not)."""
    if series.histogram_increase(name) is None:
        return None
    return _plain_histogram(series, name)
