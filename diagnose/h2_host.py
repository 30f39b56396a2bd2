"""H2: host or scheduler overhead — decode steps take longer than the GPU's work explains.

A decode step's GPU time is set by the weights and KV it reads (``diagnose.roofline``).
Time on top of that — Python scheduling, detokenisation, lock contention, a CPU-starved
process — shows up in two ways the client can see:

* **the ITL floor** sits above the roofline: the low end of the pure-decode gaps (p25:
  client jitter makes the very lowest gaps short) against the same quantile of the
  roofline step costed at each gap's own batch size and context;
* **the excess grows with concurrency**: per-sequence host work makes (gap − roofline)
  rise with the number of running requests, even at short contexts where the GPU's step
  barely grows (a slope with a cluster-bootstrap interval, ``diagnose.trend``).

When the server exposes its own step time (the embedded engine's
``prefillscope_engine_step_seconds{kind="decode"}``), its mean decode step against the
roofline is the host-side reading of the same thing. A floor ``FLOOR_RATIO`` above the
roofline supports H2 — as a correlation with a model, which a profile of the server
(or an A/B with the suspected overhead removed) would confirm.
"""

from __future__ import annotations

import numpy as np

from diagnose.context import Context
from diagnose.evidence import Evidence, Finding, Status
from diagnose.h1_prefill import STEP_METRIC
from diagnose.trend import Trend, fit_trend

TITLE = "Host/scheduler overhead"
#: Observed ITL floor over the roofline floor from which the host adds a step's worth.
FLOOR_RATIO = 1.5
#: Quantile of the gaps taken as the floor: p25, not p5, because a token that arrives
#: late makes the next gap short, so the very lowest gaps understate the step.
FLOOR_PERCENTILE = 25.0
#: Fewest gaps a floor is read from.
MIN_FLOOR_GAPS = 50
#: Growth of the excess across the observed batch sizes, as a share of the roofline step,
#: from which it counts as rising with concurrency.
RISE_SHARE = 0.5
CLIENT = "client: chunks (pure-decode gaps)"


def _next(ctx: Context) -> str:
    where = "the server process" if ctx.view.engine is None else "the engine"
    return (
        f"Profile {where} during a rerun (e.g. py-spy top --pid PID) at two concurrencies "
        "with short prompts: host overhead shows as CPU time outside the GPU kernels and an "
        "ITL that rises with concurrency while the roofline step does not."
    )


def _server_step(ctx: Context, expected_median: float) -> list[Evidence]:
    hist = ctx.view.raw.histogram_increase(STEP_METRIC, {"kind": "decode"})
    if hist is None or not hist.mean:
        return []
    source = f'server: {STEP_METRIC}{{kind="decode"}}'
    return [
        Evidence("server mean decode step", hist.mean, "s", source),
        Evidence(
            "server decode step / roofline step",
            hist.mean / expected_median,
            "x",
            source,
            "the roofline at the median batch and context of the client's decode gaps",
        ),
    ]


def _trend_evidence(trend: Trend | None, roofline_label: str) -> list[Evidence]:
    if trend is None:
        return []
    return [
        Evidence(
            "ITL excess over roofline per running request",
            trend.slope,
            "s/request",
            f"{CLIENT} − {roofline_label}",
            f"95 % CI [{trend.ci_low:.3g}, {trend.ci_high:.3g}], cluster bootstrap over "
            f"{trend.units} requests",
        )
    ]


def assess(ctx: Context) -> Finding:
    gaps = ctx.clear
    evidence: list[Evidence] = []
    missing: list[str] = []
    if not ctx.clear_is_pure:
        missing.append("enough pure-decode gaps (every gap is used, prefills included)")
    if len(gaps) < MIN_FLOOR_GAPS:
        missing.append(f"at least {MIN_FLOOR_GAPS} decode gaps (have {len(gaps)})")
        return Finding(
            "H2",
            TITLE,
            Status.INCONCLUSIVE,
            "Too few decode gaps to read a floor.",
            evidence,
            missing,
            _next(ctx),
        )
    floor = float(np.percentile(gaps.gap_s, FLOOR_PERCENTILE))
    evidence.append(Evidence(f"ITL floor (p{FLOOR_PERCENTILE:g})", floor, "s", CLIENT))
    evidence.append(
        Evidence("median decode batch", float(np.median(gaps.running)), "requests", CLIENT)
    )
    if ctx.roofline is None:
        return ctx.lacks_roofline(("H2", TITLE, _next(ctx)), evidence, missing)
    label = ctx.roofline.label
    expected = ctx.roofline.decode_step_s(gaps.running, gaps.context)
    expected_floor = float(np.percentile(expected, FLOOR_PERCENTILE))
    ratio = floor / expected_floor
    evidence += [
        Evidence(
            f"roofline decode step (p{FLOOR_PERCENTILE:g})",
            expected_floor,
            "s",
            label,
            "for each gap's batch size and mean context",
        ),
        Evidence("ITL floor / roofline floor", ratio, "x", f"{CLIENT} ÷ {label}"),
    ]
    evidence += _server_step(ctx, float(np.median(expected)))
    trend = fit_trend(
        gaps.running,
        gaps.gap_s - expected,
        gaps.request,
        resamples=ctx.options.resamples,
        seed=ctx.options.seed,
    )
    evidence += _trend_evidence(trend, label)
    if trend is None:
        missing.append("a range of batch sizes (the number of running requests did not vary)")
    spread = float(np.percentile(gaps.running, 95) - np.percentile(gaps.running, 5))
    rises = (
        trend is not None
        and trend.rising
        and trend.slope * spread >= RISE_SHARE * float(np.median(expected))
    )
    excess_ms = (floor - expected_floor) * 1e3
    if ratio >= FLOOR_RATIO:
        growth = (
            f"; the excess grows by {trend.slope * 1e3:.2g} ms per running request"
            if rises and trend is not None
            else ""
        )
        status, summary = (
            Status.SUPPORTED,
            (
                f"Correlation with a model, not proof: the ITL floor ({floor * 1e3:.3g} ms) is "
                f"{ratio:.2g}× the roofline decode step ({expected_floor * 1e3:.3g} ms), "
                f"{excess_ms:.2g} ms per step the GPU's work does not explain{growth}."
            ),
        )
    elif rises and trend is not None:
        status, summary = (
            Status.WEAKENED,
            (
                f"The ITL floor matches the roofline ({ratio:.2g}×), but the excess rises by "
                f"{trend.slope * 1e3:.2g} ms per running request: per-sequence host work is "
                "possible at higher concurrency."
            ),
        )
    else:
        status, summary = (
            Status.NOT_SUPPORTED,
            (
                f"The ITL floor ({floor * 1e3:.3g} ms) is {ratio:.2g}× the roofline decode step: "
                "the GPU's work explains it."
            ),
        )
    return Finding("H2", TITLE, status, summary, evidence, missing, _next(ctx))
