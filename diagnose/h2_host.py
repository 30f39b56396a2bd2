"""H2: host or scheduler overhead — decode steps take longer than the GPU's work explains.

A decode step's GPU time is set by the weights and KV it reads (``diagnose.roofline``).
Time on top of that — Python scheduling, detokenisation, lock contention, a CPU-starved
process — is what H2 looks for. Three readings, best first:

1. **The server's own step time.** The embedded engine's
   ``prefillscope_engine_step_seconds{kind="decode"}`` (mean pure-decode step, with the
   batch it carried from ``prefillscope_engine_step_tokens{kind="decode"}``), else the
   server's per-token latency histogram (vLLM's ``inter_token_latency_seconds``: one
   observation per step that produced a token; its median, so the few mixed steps do
   not count), against the roofline step at that batch. The server's clock is not
   disturbed by a busy client, so when it exists this reading decides.
2. **The client's ITL floor**: the *median* of the pure-decode gaps against the median
   roofline step costed at each gap's own batch size and context. On a busy client a
   late token makes the next gap short, so a low percentile understates the step; the
   median is where a late and an early read cancel. It decides only when the server
   shows no step time, and then not on a client-limited run (the client's own delays
   would pose as host overhead).
3. **The excess grows with concurrency**: per-sequence host work makes (gap − roofline)
   rise with the number of running requests, even where the GPU's step barely grows (a
   slope with a cluster-bootstrap interval, ``diagnose.trend``).

Supported from ``SERVER_RATIO`` (server reading) or ``FLOOR_RATIO`` (client floor: it
also carries the network and the client's reads) — a correlation with a model, which a
profile of the server (or a rerun with the suspected overhead removed) would confirm.

**The server's step, consistently above.** A host overhead of a fixed time per step is a
smaller share of a larger step: 2.5 ms on a 12 ms step (12 running, A100) is +21 %, under
``SERVER_RATIO``, yet it is on every step the server timed. So the engine's decode-step
histogram also supports H2 on its own when its *mean* step (exact: the histogram's sum
over its count) exceeds the roofline at the batch it carried by more than
``STEP_MARGIN`` across its whole interval, and at most ``BELOW_SHARE`` of the steps fall
in buckets wholly below the roofline (the excess is on the steps, not on a few slow
ones). The interval is the mean's normal interval over the steps, its spread bounded
from the buckets (midpoints, plus the most a value can stray within its bucket), so it
is wider than the truth, never narrower. Its strength is the interval's low end over
``STEP_MARGIN``; the finding states the margin and its interval (``diagnose.step_margin``).

**Below the margin, reported as measured.** A reading under its threshold is never
"explained by the GPU's work" when it lies above the roofline: the finding states what
was measured against the margin it is judged by. With the step histogram's interval:
wholly under ``STEP_MARGIN`` — not supported, "+8 % [+6, +10] over the roofline: under
the 10 % margin"; reaching past it — inconclusive, "+12 % [+9, +14] …: under the 10 %
margin at 637 steps; about 1,233 steps would decide" (the interval's half-width
shrinking as 1/√steps until it clears the margin: ``steps_to_decide``); past it but with
more than ``BELOW_SHARE`` of the steps below the roofline — weakened. Only a step at or
under the roofline (the interval reaching 0) is the GPU's work.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from diagnose.context import Context
from diagnose.costs import decode_share_cost
from diagnose.h1_prefill import DECODE_STEPS, step_source
from diagnose.next_steps import bench_command
from diagnose.registry import hypothesis
from diagnose.step_margin import (
    BELOW_SHARE,
    MARGIN_CONFIDENCE,
    STEP_MARGIN,
    StepMargin,
    step_margin,
)
from diagnose.trend import Trend, fit_trend
from runfmt.diagnosis import Evidence, Finding, Status
from runfmt.series import Hist, Series
from runtime.quantiles import quantiles

TITLE = "Host/scheduler overhead"
#: The canonical series of a pure-decode step's tokens (its batch).
DECODE_TOKENS = Hist.STEP_TOKENS_DECODE
#: Server decode step over the roofline step from which the host adds a real share.
SERVER_RATIO = 1.25
#: Client ITL floor (median pure-decode gap) over the roofline from which H2 holds.
FLOOR_RATIO = 1.5
#: Below this share of its threshold a reading is "not supported", between it is weakened.
PARTIAL_SHARE = 0.9
#: Fewest gaps a floor is read from.
MIN_FLOOR_GAPS = 50
#: Growth of the excess across the observed batch sizes, as a share of the roofline step,
#: from which it counts as rising with concurrency.
RISE_SHARE = 0.5
CLIENT = "client: chunks (pure-decode gaps)"


@dataclass(frozen=True)
class StepReading:
    """One reading of the decode step against the roofline at the batch it carried."""

    step_s: float
    expected_s: float
    source: str
    batch: int
    context: float
    #: The step histogram's margin over the roofline (the engine's step clock only).
    margin: StepMargin | None = None

    @property
    def ratio(self) -> float:
        return self.step_s / self.expected_s

    @property
    def consistently_above(self) -> bool:
        return self.margin is not None and self.margin.consistent


def _next(ctx: Context) -> str:
    load = ctx.view.spec.load if ctx.view.spec is not None else None
    users = load.concurrency if load is not None else None
    rerun = (
        bench_command(ctx.view, load={"concurrency": max(1, int(users) // 2)})
        if users and load is not None and not load.rate
        else bench_command(ctx.view)
    )
    where = "the server process" if ctx.view.engine is None else "the engine"
    return (
        f"Profile {where} during a rerun (e.g. py-spy top --pid PID): host overhead shows "
        f"as CPU time outside the GPU kernels; rerun at another concurrency to see whether "
        f"it is per step or per sequence: {rerun}"
    )


def server_step(ctx: Context, context_tokens: float) -> StepReading | None:
    """The server's decode step and the roofline at the batch it carried, if exposed."""
    roofline = ctx.roofline
    if roofline is None:
        return None
    series = ctx.view.server
    steps = series.histogram_increase(DECODE_STEPS) if series is not None else None
    if series is not None and steps is not None and steps.mean:
        tokens = series.histogram_increase(DECODE_TOKENS)
        batch = tokens.mean if tokens is not None and tokens.mean else None
        if batch is None:
            batch = float(np.median(ctx.clear.running)) if len(ctx.clear) else 1.0
        expected = float(roofline.decode_step_s(np.array([round(batch)]), [context_tokens])[0])
        batch_from = step_source(ctx, DECODE_TOKENS).removeprefix("server: ").partition("{")[0]
        source = f"{step_source(ctx, DECODE_STEPS)} (batch from {batch_from})"
        margin = step_margin(steps, expected)
        return StepReading(steps.mean, expected, source, round(batch), context_tokens, margin)
    itl = series.histogram_increase(Hist.ITL) if series is not None else None
    median = itl.bucket_quantile(0.5) if itl is not None and itl.count >= MIN_FLOOR_GAPS else None
    if not median or series is None:
        return None
    running = series.level(Series.RUNNING).p50
    if not running:
        return None
    expected = float(roofline.decode_step_s(np.array([round(running)]), [context_tokens])[0])
    source = f"server: {series.sources.get(Hist.ITL) or Hist.ITL} (p50)"
    return StepReading(median, expected, source, round(running), context_tokens)


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


def _server_evidence(reading: StepReading, label: str) -> list[Evidence]:
    evidence = [
        Evidence("server decode step", reading.step_s, "s", reading.source),
        Evidence(
            "roofline step at the server's batch", reading.expected_s, "s", label, "no host work"
        ),
        Evidence(
            "server decode step / roofline step", reading.ratio, "x", f"{reading.source} ÷ {label}"
        ),
    ]
    margin = reading.margin
    if margin is not None:
        evidence.append(
            Evidence(
                "server decode step over the roofline (mean)",
                margin.margin * 100,
                "%",
                f"{reading.source} ÷ {label}",
                f"{MARGIN_CONFIDENCE:.0%} CI [{margin.low:+.1%}, {margin.high:+.1%}] over "
                f"{margin.steps} steps; {margin.below:.0%} of the steps below the roofline; "
                f"H2 from +{STEP_MARGIN:.0%} across the interval",
            )
        )
    return evidence


def _inconclusive(ctx: Context, summary: str, evidence, missing) -> Finding:
    return Finding("H2", TITLE, Status.INCONCLUSIVE, summary, evidence, missing, _next(ctx))


@hypothesis(
    id="H2",
    title=TITLE,
    role="step",
    order=2,
    precedence=7,
    reads_latency=True,
    measure_first="Profile the server before changing its configuration",
    cost=decode_share_cost,
)
def assess(ctx: Context) -> Finding:
    gaps = ctx.clear
    evidence: list[Evidence] = []
    missing: list[str] = []
    if not ctx.clear_is_pure:
        missing.append("enough pure-decode gaps (every gap is used, prefills included)")
    if len(gaps) < MIN_FLOOR_GAPS:
        missing.append(f"at least {MIN_FLOOR_GAPS} decode gaps (have {len(gaps)})")
    if ctx.roofline is None:
        return ctx.lacks_roofline(("H2", TITLE, _next(ctx)), evidence, missing)
    label = ctx.roofline.label
    context = float(np.nanmedian(gaps.context)) if len(gaps) else 0.0
    reading = server_step(ctx, context)
    if reading is not None:
        evidence += _server_evidence(reading, label)
    else:
        missing.append(
            f"the server's own step time ({DECODE_STEPS} or a per-token latency histogram)"
        )
    floor_ratio = None
    trend = None
    if len(gaps) >= MIN_FLOOR_GAPS:
        floor = float(np.median(gaps.gap_s))
        expected = ctx.roofline.decode_step_s(gaps.running, gaps.context)
        floor_ratio = floor / float(np.median(expected))
        evidence += [
            Evidence("ITL floor (median pure-decode gap)", floor, "s", CLIENT),
            Evidence("median decode batch", float(np.median(gaps.running)), "requests", CLIENT),
            Evidence(
                "roofline decode step (median)",
                float(np.median(expected)),
                "s",
                label,
                "for each gap's batch size and mean context",
            ),
            Evidence("ITL floor / roofline step", floor_ratio, "x", f"{CLIENT} ÷ {label}"),
        ]
        trend = fit_trend(
            gaps.running,
            gaps.gap_s - expected,
            gaps.request,
            resamples=ctx.options.resamples,
            seed=ctx.options.seed,
        )
        evidence += _trend_evidence(trend, label)
        low, high = quantiles(gaps.running, (0.05, 0.95))
        spread = high - low
        if trend is not None and not (
            trend.rising and trend.slope * spread >= RISE_SHARE * float(np.median(expected))
        ):
            trend = None
    status, summary, strength, basis = _judge(ctx, reading, floor_ratio, trend)
    if status is None:
        return _inconclusive(ctx, summary, evidence, missing)
    # Share of a decode step the host adds: (step − roofline) / step.
    ratio = reading.ratio if reading is not None else floor_ratio
    impact = max(0.0, 1 - 1 / ratio) if ratio else None
    return Finding(
        "H2", TITLE, status, summary, evidence, missing, _next(ctx),
        strength=strength, basis=basis, impact=impact,
    )  # fmt: skip


def _judge(
    ctx: Context, reading: StepReading | None, floor_ratio: float | None, rising: Trend | None
) -> tuple[Status | None, str, float | None, str]:
    """Status (None: inconclusive), summary, strength (reading ÷ threshold) and basis."""
    growth = (
        f"; the excess grows by {rising.slope * 1e3:.2g} ms per running request"
        if rising is not None
        else ""
    )
    if reading is not None and reading.consistently_above:
        assert reading.margin is not None
        excess = (reading.step_s - reading.expected_s) * 1e3
        what = (
            f"the server's decode steps are consistently above the roofline at their batch "
            f"({reading.batch}): the mean step ({reading.step_s * 1e3:.3g} ms) is "
            f"{reading.margin.text()} — {excess:.2g} ms per step the GPU's work does not "
            f"explain, beyond the +{STEP_MARGIN:.0%} margin across its interval"
        )
        strength = max(reading.ratio / SERVER_RATIO, reading.margin.strength)
        summary = f"Correlation with a model, not proof: {what}{growth}."
        return Status.SUPPORTED, summary, strength, "server"
    if reading is not None and reading.margin is not None and reading.ratio < SERVER_RATIO:
        return below_margin(reading, reading.margin, growth)
    if reading is not None:
        ratio, threshold, basis = reading.ratio, SERVER_RATIO, "server"
        what = (
            f"the server's decode step ({reading.step_s * 1e3:.3g} ms) is {ratio:.2g}× the "
            f"roofline step at its batch ({reading.expected_s * 1e3:.3g} ms), "
            f"{(reading.step_s - reading.expected_s) * 1e3:.2g} ms per step the GPU's work "
            "does not explain"
        )
    elif floor_ratio is not None:
        if ctx.client.limited:
            return (
                None,
                f"The client's ITL floor is {floor_ratio:.2g}× the roofline, but the client "
                f"limited this run ({ctx.client.reason}) and the server shows no step time: "
                "the client's own delays cannot be told from host overhead.",
                None,
                "client",
            )
        ratio, threshold, basis = floor_ratio, FLOOR_RATIO, "client"
        what = f"the median pure-decode gap is {ratio:.2g}× the roofline decode step"
    else:
        return None, "Too few decode gaps and no server step time to read a step from.", None, ""
    strength = ratio / threshold
    if ratio >= threshold:
        return (
            Status.SUPPORTED,
            f"Correlation with a model, not proof: {what}{growth}.",
            strength,
            basis,
        )
    if rising is not None or ratio >= PARTIAL_SHARE * threshold:
        return (
            Status.WEAKENED,
            f"The decode step is {ratio:.2g}× the roofline (H2 needs {threshold:g}×)"
            + (growth or ": close, not clear")
            + ".",
            strength,
            basis,
        )
    return Status.NOT_SUPPORTED, _under(basis, ratio, threshold), strength, basis


def _under(basis: str, ratio: float, threshold: float) -> str:
    """A ratio under H2's threshold, as measured: the GPU's work only at or under 1×."""
    if ratio <= 1.0:
        return (
            f"The decode step ({basis}) is {ratio:.2g}× the roofline step: the GPU's work "
            "explains it."
        )
    return (
        f"The decode step ({basis}) is {ratio:.3g}× the roofline step ({100 * (ratio - 1):+.0f} "
        f"%): under the {threshold:g}× H2 is named from on this reading."
    )


def below_margin(
    reading: StepReading, margin: StepMargin, growth: str
) -> tuple[Status | None, str, float | None, str]:
    """The step histogram's margin under ``SERVER_RATIO`` and not consistently above
    ``STEP_MARGIN``: reported as measured (module docstring)."""
    strength = max(reading.ratio / SERVER_RATIO, margin.strength)
    step = f"the server's mean decode step ({reading.step_s * 1e3:.3g} ms at batch {reading.batch})"
    measured = f"{step} is {margin.measured()} ({margin.steps} steps)"
    limit = f"the {100 * STEP_MARGIN:.0f} % margin"
    if margin.low > STEP_MARGIN:  # past the margin, but not on the steps as a whole
        return (
            Status.WEAKENED,
            f"{measured[0].upper()}{measured[1:]}, past {limit}, but {100 * margin.below:.0f} % "
            f"of the steps lie wholly below the roofline (H2 allows {100 * BELOW_SHARE:.0f} %): "
            "the excess is "
            f"on some steps, not all{growth}.",
            strength,
            "server",
        )
    if margin.high > STEP_MARGIN:  # the interval reaches past the margin: undecided
        needed = margin.steps_to_decide()
        size = f"about {needed:,} steps would decide" if needed else "no run length would"
        return (
            Status.WEAKENED if growth else None,
            f"{measured[0].upper()}{measured[1:]}: under {limit} at this many steps, its "
            f"interval reaching past it; {size}{growth}.",
            strength,
            "server",
        )
    if margin.low <= 0:  # the roofline lies inside the interval: no host work to show
        return (
            Status.WEAKENED if growth else Status.NOT_SUPPORTED,
            f"{measured[0].upper()}{measured[1:]}: the GPU's work explains it{growth}.",
            strength,
            "server",
        )
    return (
        Status.WEAKENED if growth else Status.NOT_SUPPORTED,
        f"{measured[0].upper()}{measured[1:]}: under {limit} H2 names a cause from "
        f"({(reading.step_s - reading.expected_s) * 1e3:.2g} ms per step above the GPU's "
        f"work){growth}.",
        strength,
        "server",
    )
