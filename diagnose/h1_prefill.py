"""H1: prefill chunks starve decodes — steps that carry prompt chunks are much longer.

Each scheduler step spends its token budget on the running decodes first and the rest on
prompt chunks; a decode that shares a step with a large chunk waits for the whole step.
Evidence, best first:

1. **Step kinds** (``prefillscope_engine_step_seconds{kind}``, the embedded engine):
   the mean mixed step over the mean pure-decode step, from the histogram increases over
   the run — a server-side measurement.
2. **Client attribution** (any server, ``diagnose.attribution``): gaps that overlapped a
   long prefill over gaps that overlapped none, with cluster-bootstrap intervals.
3. **Stall events** (any server, ``probes.stall_events``, the events ``summary.json``
   carries): per long prompt of the prefill-heavy kind, the worst decode gap beside its
   prefill and the decode time it cost, with intervals over events, and the stall gaps'
   share of all gaps (under 1 %, the pooled ITL p99 cannot see them). Without step kinds
   and without an attribution that decides (enough gaps, from enough requests: the gaps
   beside one stall share it, so few streams give an interval far narrower than the
   data), the worst gap per prefill over the normal gap decides, when its whole interval
   lies on one side of ``STARVE_RATIO``; an attribution too small to decide is printed
   with why (``9 requests (fewer than 10)``), never with its interval.
4. **Budget vs prompts**: the token budget (``run.json``'s engine config or
   ``--max-num-batched-tokens``) against the longest fresh prompt — the largest chunk a
   step can carry — and, with a roofline, what such a step costs next to a decode step.

The rule: supported when the stretch is at least ``STARVE_RATIO`` (a decode that rides
with a chunk waits four of its own steps or more); the small budgets engines ship with
(512 tokens on an H100-class GPU: about 3×) stay below it. When the server's steps say
so but the client saw no measurable lengthening at all beside long prefills, the
hypothesis is only weakened (a diluted ratio still agrees: a long prefill's window holds
one stretched gap among ordinary ones). Either way it is a correlation; the
chunk-size A/B confirms it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from diagnose.attribution import LONG_PREFILL_TOKENS, MIN_GAPS, Attribution, attribute
from diagnose.context import Context
from diagnose.costs import decode_share_cost
from diagnose.next_steps import BUDGET_FLAG, ab_command, chunk_pair, server_flavour
from diagnose.registry import hypothesis
from diagnose.stats import MIN_UNITS, Comparison
from diagnose.words import chunk_flags_named
from perfmodel.costmodel import StepShape, attended_pairs
from probes.canonical import Histogram
from probes.latency import latency_columns
from probes.stall_events import (
    STALL_FACTOR,
    SUMMARY_CONFIDENCE,
    RunStalls,
    mean_interval,
    run_stalls,
)
from probes.token_gaps import token_gaps
from runfmt.diagnosis import Evidence, Finding, Status
from runfmt.metrics import STALL_LOST, STALL_WORST, TTFT
from runfmt.series import Hist
from runfmt.units import p_text
from runtime.quantiles import finite

TITLE = "Prefill chunks starving decodes"
#: The canonical series of a mixed and a pure-decode step's time (``probes.canonical``).
MIXED_STEPS, DECODE_STEPS = Hist.STEP_TIME_MIXED, Hist.STEP_TIME_DECODE
#: Mixed-step stretch (× a pure-decode step) from which decodes count as starved.
STARVE_RATIO = 4.0


def ratio_text(c: Comparison) -> str:
    """``24.1× [95 % CI 18.0–30.2]`` (the interval omitted when it could not be computed);
    for a comparison too small to decide, the ratio and why, never an interval that reads
    as a result (``19.1× (too few to decide — overlapping: 9 requests (fewer than 10))``:
    the gaps beside one stall share it, and came from few requests)."""
    if c.inconclusive is not None:
        return f"{c.ratio:.3g}× (too few to decide — {c.inconclusive})"
    if np.isfinite(c.ci_low) and np.isfinite(c.ci_high):
        return f"{c.ratio:.3g}× [95 % CI {c.ci_low:.3g}–{c.ci_high:.3g}]"
    return f"{c.ratio:.3g}×"


def step_histograms(ctx: Context) -> tuple[Histogram | None, Histogram | None]:
    """The run's mixed and pure-decode steps, where the server's mapping gives them."""
    series = ctx.view.server
    if series is None:
        return None, None
    return series.histogram_increase(MIXED_STEPS), series.histogram_increase(DECODE_STEPS)


def step_source(ctx: Context, name: str) -> str:
    """``server: `` and the server metric (with its labels) a step series was read from."""
    series = ctx.view.server
    return f"server: {(series.sources.get(name) if series is not None else None) or name}"


def _step_evidence(
    mixed: Histogram, decode: Histogram, sources: tuple[str, str]
) -> tuple[list[Evidence], float | None]:
    mixed_source, decode_source = sources
    out = [
        Evidence("mixed steps", mixed.count, "steps", mixed_source),
        Evidence("mean mixed step", mixed.mean, "s", mixed_source),
        Evidence("pure-decode steps", decode.count, "steps", decode_source),
        Evidence("mean pure-decode step", decode.mean, "s", decode_source),
    ]
    # both kinds of one metric (``…step_seconds{kind=…}``): the ratio's source is the metric
    base, other = (text.partition("{")[0] for text in sources)
    source = base if base == other else f"{mixed_source} / {decode_source}"
    if not (mixed.mean and decode.mean):
        return out, None
    ratio = mixed.mean / decode.mean
    p90 = mixed.bucket_quantile(0.9)
    out.append(
        Evidence(
            "mixed/decode step time ratio",
            ratio,
            "x",
            source,
            f"mean over mean; mixed p90 {p90:.3g} s (bucket estimate)" if p90 else None,
        )
    )
    return out, ratio


def _attribution_evidence(a: Attribution) -> list[Evidence]:
    source = "client: chunks + requests (sent → first token windows)"
    detail = (
        f"{a.overlapping} gaps overlapping {a.windows} long prefill windows "
        f"(≥ {LONG_PREFILL_TOKENS} fresh prompt tokens) vs {a.clear} gaps overlapping none"
    )
    out = [Evidence("long prefill windows", a.windows, "windows", source)]
    for name, c in (("mean", a.mean), ("p99", a.p99)):
        if c is not None:
            out.append(
                Evidence(
                    f"ITL {name} ratio, overlapping / clear gaps",
                    c.ratio,
                    "x",
                    source,
                    f"{ratio_text(c)}; {c.method}"
                    + ("" if c.inconclusive else f", {p_text(c.p_value, c.resamples)}")
                    + f"; {detail}",
                )
            )
    return out


@dataclass(frozen=True)
class StallFigures:
    """The run's stall events and what H1 reads of them: the worst decode gap per prefill
    over the normal gap (its mean and interval), ``None`` without events."""

    stalls: RunStalls
    stretch: tuple[float, float, float] | None

    @property
    def decides(self) -> bool:
        return self.stretch is not None and len(self.stalls.events) >= MIN_UNITS


def stall_figures(ctx: Context) -> StallFigures:
    """The stall events of the run's completed requests (``probes.stall_events``)."""
    done = ctx.view.completed
    gaps = token_gaps(ctx.view.chunks, done.get("id"))
    stalls = run_stalls(done, latency_columns(done)[TTFT.key], gaps)
    worst = stalls.values(STALL_WORST.key)
    normal = stalls.events.normal_s
    interval = mean_interval(worst, SUMMARY_CONFIDENCE, ctx.options.resamples, ctx.options.seed)
    if interval is None or not normal > 0:
        return StallFigures(stalls, None)
    low, high = interval
    return StallFigures(stalls, (float(np.mean(worst)) / normal, low / normal, high / normal))


def _stall_evidence(figures: StallFigures) -> list[Evidence]:
    stalls = figures.stalls
    if stalls.kind is None:
        return []
    source = "client: requests + chunks (a stall event per long prefill, probes.stall_events)"
    events = stalls.events
    out = [Evidence(f"{stalls.kind} prefills beside decode streams", len(events), "events", source)]
    if figures.stretch is None:
        return out
    for metric in (STALL_WORST, STALL_LOST):
        values = stalls.values(metric.key)
        worst = metric.format(float(np.max(values)))
        detail = f"mean over events; worst {worst}"
        out.append(Evidence(metric.label, float(np.mean(values)), "s", source, detail))
    mean, low, high = figures.stretch
    out.append(
        Evidence(
            "worst decode gap per prefill / normal gap",
            mean,
            "x",
            source,
            f"[95 % CI {low:.3g}–{high:.3g}]; normal gap {events.normal_s * 1e3:.3g} ms "
            "(the median decode gap)",
        )
    )
    seen = "sees them" if stalls.seen_by(0.99) else "cannot see them (under 1 %)"
    out.append(
        Evidence(
            "stall gaps, share of all ITL gaps",
            stalls.share,
            "share",
            source,
            f"{events.stalled_gaps} decode gaps over {STALL_FACTOR:g}× the normal gap beside "
            f"a long prefill; the pooled ITL p99 {seen}",
        )
    )
    return out


def _stall_sentence(figures: StallFigures) -> str:
    """One sentence of what the stall events say, or empty."""
    if figures.stretch is None:
        return ""
    stalls = figures.stalls
    mean, low, high = figures.stretch
    worst = STALL_WORST.format(float(np.mean(stalls.values(STALL_WORST.key))))
    blind = "" if stalls.seen_by(0.99) else ", too few for the pooled ITL p99 to see"
    return (
        f" Per {stalls.kind} prefill ({len(stalls.events)} events) the decode streams' worst "
        f"gap was {worst}, {mean:.3g}× the normal gap [{low:.3g}–{high:.3g}]; stall gaps "
        f"are {stalls.share:.1%} of all gaps{blind}."
    )


def _budget_evidence(ctx: Context) -> tuple[list[Evidence], list[str]]:
    budget, where = ctx.budget
    fresh = finite(ctx.view.fresh_tokens())
    longest = float(fresh.max()) if fresh.size else None
    out = []
    missing = []
    if longest is not None:
        out.append(
            Evidence(
                "longest fresh prompt", longest, "tokens", "client: requests (prompt − cached)"
            )
        )
    if budget is None:
        knob = chunk_flags_named(server_flavour(ctx.view))
        missing.append(f"the token budget per step ({knob}): give diagnose {BUDGET_FLAG} N")
        return out, missing
    out.append(Evidence("token budget per step", budget, "tokens", where))
    if longest is None or ctx.roofline is None:
        return out, missing
    chunk = int(min(budget, longest))
    running = int(np.median(ctx.clear.running)) if len(ctx.clear) else 1
    context = float(np.nanmedian(ctx.clear.context)) if len(ctx.clear) else 0.0
    cost = ctx.roofline.cost
    shape = StepShape(
        prefill_tokens=chunk,
        prefill_pairs=attended_pairs(chunk, 0),
        decode_tokens=running,
        decode_context=round(running * context),
        num_running=running + 1,
    )
    modelled = cost.step_time(shape) / cost.decode_step_time(running, context)
    out.append(
        Evidence(
            "modelled largest-chunk step / decode step",
            modelled,
            "x",
            ctx.roofline.label,
            f"a {chunk}-token chunk beside {running} decodes at context {context:.0f}",
        )
    )
    return out, missing


def _status(
    step_ratio: float | None, a: Attribution, figures: StallFigures | None = None
) -> tuple[Status, str]:
    """H1's verdict and sentence; ``figures`` the run's stall events (none: no events)."""
    figures = figures or StallFigures(RunStalls.none(), None)
    status, summary = _status_of(step_ratio, a, figures)
    return status, summary + _stall_sentence(figures)


def _status_of(
    step_ratio: float | None, a: Attribution, figures: StallFigures
) -> tuple[Status, str]:
    by_client = a.mean if a.enough else None
    client_says = (
        None if by_client is None else by_client.ratio >= STARVE_RATIO and by_client.significant
    )
    if step_ratio is not None:
        if step_ratio < STARVE_RATIO:
            return Status.NOT_SUPPORTED, (
                f"Steps carrying prompt chunks took {step_ratio:.2g}× a pure-decode step "
                f"(below the {STARVE_RATIO:g}× that starves decodes)."
            )
        # The server's step clock decides; the client contradicts it only when the gaps
        # beside long prefills were not measurably longer at all (a long prefill window
        # holds one stretched gap among ordinary ones, so a diluted ratio still agrees).
        decided = by_client is not None and by_client.inconclusive is None
        if decided and not (by_client.significant and by_client.ratio > 1):
            return Status.WEAKENED, (
                f"Mixed steps took {step_ratio:.2g}× a pure-decode step, but decode gaps "
                "overlapping long prefills were not measurably that much longer on the client."
            )
        extra = (
            f"; gaps overlapping long prefills were {ratio_text(by_client)}" if by_client else ""
        )
        return Status.SUPPORTED, (
            f"Correlation, not proof: steps carrying prompt chunks took {step_ratio:.2g}× "
            f"a pure-decode step{extra}. A chunk-size A/B would confirm it."
        )
    # A comparison too small to decide (few requests beside the stalls) says nothing
    # either way: the stall events may, else it stays open, saying why.
    short = by_client.inconclusive if by_client is not None else None
    if by_client is not None and short is None:
        if client_says:
            return Status.SUPPORTED, (
                f"Correlation, not proof: decode gaps overlapping a long prefill were "
                f"{ratio_text(by_client)} the others (client timestamps; the server shows no "
                "step kinds). A chunk-size A/B would confirm it."
            )
        if by_client.ratio < STARVE_RATIO:
            return Status.NOT_SUPPORTED, (
                f"Decode gaps overlapping a long prefill were {ratio_text(by_client)} the "
                f"others: below the {STARVE_RATIO:g}× that starves decodes."
            )
        return Status.INCONCLUSIVE, (
            f"Gaps overlapping long prefills look {by_client.ratio:.2g}× longer, but the "
            "difference is not significant."
        )
    if figures.decides and figures.stretch is not None:
        _, low, high = figures.stretch
        if low >= STARVE_RATIO:
            return Status.SUPPORTED, (
                "Correlation, not proof: the worst decode gap beside each long prefill was "
                f"{low:.3g}× the normal gap or more (client timestamps; the server shows no "
                "step kinds). A chunk-size A/B would confirm it."
            )
        if high < STARVE_RATIO:
            return Status.NOT_SUPPORTED, (
                f"The worst decode gap beside each long prefill was under {high:.3g}× the "
                f"normal gap: below the {STARVE_RATIO:g}× that starves decodes."
            )
    if a.windows == 0:
        return Status.NOT_APPLICABLE, (
            f"No long prefill (≥ {LONG_PREFILL_TOKENS} fresh tokens) ran while decodes did, "
            "and the server shows no step kinds."
        )
    if by_client is not None:
        return Status.INCONCLUSIVE, (
            f"Decode gaps overlapping long prefills were {by_client.ratio:.2g}× the others, "
            f"too few to decide ({short}), and the server shows no step kinds."
        )
    return Status.INCONCLUSIVE, (
        f"Too few decode gaps overlapped a long prefill ({a.overlapping}) to compare."
    )


def _advice(ctx: Context, finding: Finding) -> str:
    budget, _ = ctx.budget
    return (
        "A/B the chunk size before changing cache policy: "
        f"{ab_command(ctx.view, chunk_pair(budget))}"
    )


@hypothesis(
    id="H1",
    title=TITLE,
    role="step",
    order=1,
    precedence=5,
    reads_latency=True,
    contain="chunk",
    advice=_advice,
    cost=decode_share_cost,
)
def assess(ctx: Context) -> Finding:
    evidence: list[Evidence] = []
    missing: list[str] = []
    mixed, decode = step_histograms(ctx)
    step_ratio = None
    if mixed is not None and decode is not None:
        sources = (step_source(ctx, MIXED_STEPS), step_source(ctx, DECODE_STEPS))
        found, step_ratio = _step_evidence(mixed, decode, sources)
        evidence += found
        if not mixed.count:
            missing.append("a step that mixed prompt chunks with decodes (none ran)")
    else:
        missing.append(
            f"step kinds ({MIXED_STEPS}, {DECODE_STEPS}): the server does not expose step "
            "timing by kind, so H1 rests on client-side attribution"
        )
    a = attribute(ctx.view, ctx.gaps, resamples=ctx.options.resamples, seed=ctx.options.seed)
    evidence += _attribution_evidence(a)
    if not a.enough:
        missing.append(
            f"enough decode gaps on both sides of a long prefill (have {a.overlapping} "
            f"overlapping and {a.clear} clear; need {MIN_GAPS} each)"
        )
    figures = stall_figures(ctx)
    evidence += _stall_evidence(figures)
    found, lacking = _budget_evidence(ctx)
    evidence += found
    missing += lacking
    if ctx.roofline is None:
        missing += ctx.roofline_missing
    status, summary = _status(step_ratio, a, figures)
    budget, _ = ctx.budget
    next_step = (
        f"{ab_command(ctx.view, chunk_pair(budget))}  — the same arrivals and lengths at "
        f"both chunk sizes; only this A/B confirms or refutes H1"
    )
    by_client = a.mean.ratio if a.enough and a.mean is not None else None
    deciding = step_ratio if step_ratio is not None else by_client
    impact = None
    if mixed is not None and decode is not None and decode.mean and mixed.count:
        # The mixed steps' time beyond a decode step, as a share of all decode-bearing time.
        total = mixed.sum + decode.sum
        impact = max(0.0, mixed.count * (mixed.mean - decode.mean) / total) if total else None
    return Finding(
        "H1",
        TITLE,
        status,
        summary,
        evidence,
        missing,
        next_step,
        strength=None if deciding is None else deciding / STARVE_RATIO,
        basis="server" if step_ratio is not None else "client",
        impact=impact,
    )
