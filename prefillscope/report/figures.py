"""The report's plots, built from ``ReportData``: what each shows and how it is reduced.

Shared by the HTML page (as SVG). Each builder reduces its data to what can be seen —
quantiles for a CDF, windowed percentiles for a timeline, a capped sample that always
keeps the extremes for a cloud — before handing it to the chart, so a 10^5-request run
costs the same page as a small one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from prefillscope.report.data import PoolTimeline
from prefillscope.report.scale import Axis, fmt_plain
from prefillscope.report.svg import PALETTE, Chart
from probes.token_gaps import TokenGaps
from runfmt.columns import counted
from runfmt.metrics import TTFT
from runfmt.units import fmt_seconds
from runtime.quantiles import quantile, quantiles

if TYPE_CHECKING:
    import pandas as pd

MAX_KINDS = 5
CDF_POINTS = 1500
POOL_SAMPLES = 1500
CLOUD_SAMPLE = 50_000
TIMELINE_WINDOWS = 120

POOL_COLORS = {"active": "#0072B2", "reclaimable": "#009E73", "free": "#c8c8c8"}
ARRIVAL_COLOR = "#CC79A7"


def cdf_points(values: np.ndarray, max_points: int = CDF_POINTS) -> tuple[np.ndarray, np.ndarray]:
    """(value, cumulative fraction) at ranks that keep both the body and the far tail.

    Half the ranks are evenly spaced (the body), half geometric towards the top rank
    (the tail: p99, p99.9, the maximum), so the curve a reader sees ends exactly at the
    worst value however many samples there are.
    """
    data = np.sort(values[np.isfinite(values)])
    n = data.size
    if n == 0:
        return data, data
    if n > max_points:
        body = np.linspace(0, n - 1, max_points // 2)
        tail = n - np.geomspace(1, n, max_points // 2)
        ranks = np.unique(np.r_[body, tail, 0, n - 1].round().astype(np.int64).clip(0, n - 1))
    else:
        ranks = np.arange(n)
    return data[ranks], (ranks + 1) / n


def sample_keeping_extremes(
    values: np.ndarray, limit: int = CLOUD_SAMPLE, seed: int = 0
) -> np.ndarray:
    """Indices of at most ``limit`` samples: the top 1 % by value always, the rest at random."""
    n = values.size
    if n <= limit:
        return np.arange(n)
    top_k = max(limit // 100, 1)
    top = np.argpartition(values, n - top_k)[n - top_k :]
    rest = np.random.default_rng(seed).choice(n, limit - top_k, replace=False)
    return np.unique(np.r_[top, rest])


def thin_samples(layers: list[np.ndarray], limit: int = POOL_SAMPLES) -> np.ndarray:
    """Indices of at most ~``limit`` evenly spaced samples plus every layer's min and max."""
    n = layers[0].size if layers else 0
    if n <= limit:
        return np.arange(n)
    extremes = [f(np.nan_to_num(v)) for v in layers for f in (np.argmin, np.argmax)]
    return np.unique(np.r_[np.linspace(0, n - 1, limit).round().astype(np.int64), extremes])


def top_kinds(kinds: np.ndarray) -> list[str]:
    """The most common request kinds (the rest are grouped as "other")."""
    counts = counted([k for k in np.asarray(kinds).tolist() if k is not None and k == k])
    return [str(k) for k in list(counts)[:MAX_KINDS]]


def group_kinds(kinds: np.ndarray) -> np.ndarray:
    """Kinds beyond the most common ``MAX_KINDS`` relabelled "other", for legible legends."""
    keep = top_kinds(kinds)
    return np.where(np.isin(kinds, keep), kinds, "other").astype(object)


def itl_cdf_chart(gaps: TokenGaps, kinds: np.ndarray) -> Chart:
    """Distribution of per-token gaps, one curve per request kind (and all tokens).

    Gaps of exactly 0 (extra tokens that came in the first chunk with the first token)
    cannot sit on a log axis; the curves still count them, so each starts at their share.
    """
    zeros = int((gaps.gap_s <= 0).sum())
    title = f"ITL distribution (per token, {gaps.gap_s.size:,} gaps"
    title += f"; {zeros:,} zero gap{'s' if zeros > 1 else ''} off the log axis)" if zeros else ")"
    chart = Chart(
        "itl-cdf",
        title,
        Axis("inter-token latency", log=True, fmt=fmt_seconds),
        Axis("fraction of tokens", lo=0.0, hi=1.0),
        empty_message="no token gaps recorded",
    )
    grouped = group_kinds(kinds)
    names = top_kinds(grouped)
    if len(names) > 1:
        chart.line("all tokens", *cdf_points(gaps.gap_s), color="#000000")
    for i, name in enumerate(names):
        chart.line(name, *cdf_points(gaps.gap_s[grouped == name]), color=PALETTE[i])
    if gaps.gap_s.size:
        # The tail is a sliver at the top of a CDF: name where p99 and p99.9 fall.
        for q, dash in ((0.99, "6 3"), (0.999, "2 3")):
            value = quantile(gaps.gap_s, q)
            chart.vlines(f"p{q * 100:g} {fmt_seconds(value)}", [value], color="#555555", dash=dash)
    return chart


def windowed_percentiles(
    t: np.ndarray, values: np.ndarray, levels: tuple[float, ...], windows: int
) -> tuple[np.ndarray, np.ndarray]:
    """Quantiles of ``values`` in equal time windows: (window centres, one row per level).

    Every window with a sample counts, however few: a stall is exactly a window where
    few tokens arrived, and it must not be smoothed away. A window with none is NaN, so
    a line through them breaks instead of bridging the silence.
    """
    if t.size == 0:
        return np.array([]), np.empty((len(levels), 0))
    edges = np.linspace(t.min(), t.max() + 1e-9, windows + 1)
    window = np.digitize(t, edges) - 1
    stats = np.full((len(levels), windows), np.nan)
    order = np.argsort(window, kind="stable")
    present, starts = np.unique(window[order], return_index=True)
    for w, chunk in zip(present, np.split(values[order], starts[1:]), strict=True):
        if 0 <= w < windows:
            stats[:, w] = quantiles(chunk, levels)
    centres = (edges[:-1] + edges[1:]) / 2
    return centres, stats


def itl_timeline_chart(gaps: TokenGaps, arrivals: np.ndarray) -> Chart:
    """Per-token gaps over the run with windowed p50/p99, and long-prompt arrivals marked."""
    chart = Chart(
        "itl-time",
        "ITL over time (long-prompt arrivals marked)",
        Axis("run time", fmt=fmt_seconds, include_zero=True),
        Axis("inter-token latency", log=True, fmt=fmt_seconds),
        empty_message="no token gaps recorded",
    )
    idx = sample_keeping_extremes(gaps.gap_s)
    chart.points("per-token gap", gaps.t_s[idx], gaps.gap_s[idx], color="#9fb8cc")
    centres, (p50, p99) = windowed_percentiles(gaps.t_s, gaps.gap_s, (0.5, 0.99), TIMELINE_WINDOWS)
    chart.line("p50 per window", centres, p50, color="#0072B2")
    chart.line("p99 per window", centres, p99, color="#D55E00")
    if arrivals.size:
        chart.vlines(f"long-prompt arrivals ({arrivals.size})", arrivals, color=ARRIVAL_COLOR)
    return chart


def ttft_cached_chart(requests: pd.DataFrame) -> Chart:
    """TTFT against the prompt tokens served from cache, one colour per request kind.

    Uses the server's ``cached_tokens`` where it reported them; when it reported none,
    the oracle's expectation, and the axis says so.
    """
    reported = requests["cached_tokens"].notna().any() if len(requests) else False
    column = "cached_tokens" if reported else "expected_cached_tokens"
    label = (
        "cached prompt tokens (server-reported)"
        if reported
        else ("expected cached tokens (oracle; server did not report cached_tokens)")
    )
    chart = Chart(
        "ttft-cached",
        "TTFT vs cached prompt tokens",
        Axis(label, fmt=fmt_plain, include_zero=True),
        Axis("TTFT (from intended send)", fmt=fmt_seconds, include_zero=True),
        empty_message="no request has both a TTFT and a cached-token count",
    )
    rows = (
        requests[requests[TTFT.key].notna() & requests[column].notna()]
        if len(requests)
        else requests
    )
    if rows.empty:
        return chart
    if rows[column].max() == 0:
        chart.title += " — no prompt token came from the cache"
    kinds = group_kinds(rows["kind"].to_numpy(dtype=object))
    for i, name in enumerate(top_kinds(kinds)):
        sel = rows[kinds == name]
        idx = sample_keeping_extremes(sel[TTFT.key].to_numpy(dtype=float))
        chart.points(
            str(name),
            sel[column].to_numpy(dtype=float)[idx],
            sel[TTFT.key].to_numpy(dtype=float)[idx],
            color=PALETTE[i],
        )
    return chart


def pool_chart(pool: PoolTimeline | None) -> Chart:
    """The KV block pool's buckets stacked over time; a bucket known only as a remainder
    is hatched and named for what it is."""
    unit = pool.unit if pool else "blocks"
    chart = Chart(
        "kv-pool",
        "KV block pool over time",
        Axis("run time", fmt=fmt_seconds, include_zero=True),
        Axis(unit, fmt=fmt_plain, include_zero=True),
        empty_message="the server exposed no KV-pool metrics",
    )
    if pool is None:
        return chart
    layers = []
    for layer in pool.layers:
        hatched = layer.provenance == "unknown"  # a remainder whose split nobody exposes
        label = f"{layer.name} ({'split unknown' if hatched else layer.provenance})"
        layers.append((label, layer.values, POOL_COLORS.get(layer.name, "#888888"), hatched))
    idx = thin_samples([values for _, values, _, _ in layers])
    chart.stacked(pool.t_s[idx], [(n, v[idx], c, h) for n, v, c, h in layers])
    return chart
