"""Overload: the server was offered more than it served, and the difference queued.

An open-loop load (``--rate``) keeps sending whatever the server does; when the arrival
rate exceeds what the server completes, requests wait, the queue grows for as long as
the load lasts and TTFT becomes mostly waiting. No chunk size or cache policy removes
that: the load, or the capacity, has to change. Three readings:

* **offered vs served**: the planned arrival rate (``run.json``) against the rate at
  which requests completed while arrivals continued (from the first completion to the
  last send), so a run's start-up and its tail do not count as slowness — or, when the
  arrivals were over before enough completed, over the whole run;
* **a growing queue**: the server's waiting requests (else the client's requests in
  flight) over the last third of the sending against the first third;
* **TTFT dominated by queueing**: the server's queue time (the canonical ``queue_time``:
  vLLM's ``request_queue_time_seconds``, SGLang's ``queue_time_seconds``) over its
  TTFT; without it, the TTFT of the last third of arrivals over the first third's
  (waiting grows with every arrival).

Supported when served falls below ``SERVED_SHARE`` of offered and either the queue grows
or queueing dominates TTFT; weakened when only one of the readings points there. A
closed loop (``--concurrency``) sends only when answered, so it cannot be overloaded in
this sense: not applicable.

**Strength** grows with both readings: the served/offered gap (offered ÷ served ×
``SERVED_SHARE``, 1 at the threshold) times the square root of the queue's depth in
units of ``QUEUE_GROWTH`` (the server's peak waiting requests, else the growth of the
queue over the sending; 1 below it) — 1.5× capacity with 200 requests queued is far past
any threshold, not near it. **What it costs** is the seconds requests spent queued
(request-seconds: the server's queue-time histogram's sum, else each request's TTFT
beyond the first third's median), ``diagnose.costs``' unit. **What it explains**: the
queue H4 sees waiting — only when H4 stands on that queue, not on preemptions (a pool
that evicted running sequences ran out of blocks for what it ran; seen beside a thrashing
pool, where "explained by OL: the queue … is what H4 sees waiting" was said of 18
preemptions).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from diagnose.context import Context
from diagnose.next_steps import bench_command
from diagnose.registry import Cost, Link, hypothesis
from runfmt.diagnosis import Evidence, Finding, Status
from runfmt.series import Hist, Series

TITLE = "Overload (offered above served)"
#: Served rate below this share of the offered rate counts as falling behind.
SERVED_SHARE = 0.9
#: Queue growth (requests, last third minus first third of the sending) that counts.
QUEUE_GROWTH = 2.0
#: Share of TTFT spent queued from which queueing dominates it.
QUEUE_SHARE = 0.5
#: Growth of TTFT over the sending (last third ÷ first third) that marks queueing.
TTFT_GROWTH = 2.0
#: Fewest requests a rate is measured from.
MIN_ARRIVALS = 10
#: Fewest completions during the sending to read a served rate from.
MIN_COMPLETIONS = 5
#: The canonical histograms of the queue-time share (``probes.canonical``).
QUEUE_SERIES, TTFT_SERIES = Hist.QUEUE_TIME, Hist.TTFT
CLIENT = "client: requests"


@dataclass(frozen=True)
class Rates:
    offered: float
    served: float | None

    @property
    def shortfall(self) -> float | None:
        """Offered ÷ served (> 1: falling behind)."""
        return self.offered / self.served if self.served else None


def offered_rate(ctx: Context) -> float | None:
    """The configured arrival rate (the plan's realised rate when none was configured:
    a few Poisson arrivals can land close together, so it is the second choice)."""
    spec = ctx.view.spec
    rate = (spec.load.rate if spec is not None else None) or ctx.view.info.plan.offered_rate_per_s
    return float(rate) if rate else None


def open_loop_only(ctx: Context) -> bool:
    """Whether every measured request arrived open-loop (no closed-loop streams beside
    the arrivals, whose completions would pose as served arrivals)."""
    spec = ctx.view.spec
    return not (spec is not None and spec.load.concurrency)


def _served_rate(ctx: Context) -> tuple[float | None, str]:
    """Completions per second from the first completion to the last send; when arrivals
    ended before enough completions, over the whole run (first send to last end)."""
    view = ctx.view
    intended, end = view.column("intended_s"), view.column("end_s")
    ends = np.sort(end[np.isfinite(end)])
    sends = intended[np.isfinite(intended)]
    if not ends.size or not sends.size:
        return None, ""
    start, stop = ends[0], float(sends.max())
    done = int(((ends > start) & (ends <= stop)).sum())
    if stop > start and done >= MIN_COMPLETIONS:
        return done / (stop - start), "completions from the first completion to the last send"
    span = float(ends[-1] - sends.min())
    if ends.size < MIN_COMPLETIONS or span <= 0:
        return None, ""
    return ends.size / span, "arrivals ended before the first completions: over the whole run"


def _thirds(ctx: Context) -> tuple[float, float] | None:
    """The first and last third of the sending."""
    sends = ctx.view.column("intended_s")
    sends = sends[np.isfinite(sends)]
    if sends.size < 3:
        return None
    lo, hi = float(sends.min()), float(sends.max())
    return lo + (hi - lo) / 3, hi - (hi - lo) / 3


def _queue_growth(ctx: Context) -> tuple[float | None, str]:
    """Mean queue over the last third of the sending minus the first third's."""
    thirds = _thirds(ctx)
    if thirds is None:
        return None, ""
    first, last = thirds
    sends = ctx.view.column("intended_s")
    lo, hi = float(np.nanmin(sends)), float(np.nanmax(sends))
    series = ctx.view.server
    if series is not None:
        early, late = (
            series.level(Series.WAITING, lo, first),
            series.level(Series.WAITING, last, hi),
        )
        if early.mean is not None and late.mean is not None:
            return late.mean - early.mean, f"server: {early.source}"
    sent, end = ctx.view.column("sent_s"), ctx.view.column("end_s")
    end = np.where(np.isfinite(end), end, np.inf)

    def in_flight(t: float) -> float:
        return float(((sent <= t) & (end > t)).sum())

    early_t, late_t = np.linspace(lo, first, 8), np.linspace(last, hi, 8)
    growth = np.mean([in_flight(t) for t in late_t]) - np.mean([in_flight(t) for t in early_t])
    return float(growth), f"{CLIENT} (requests in flight)"


def _queue_share(ctx: Context) -> tuple[float | None, str]:
    series = ctx.view.server
    if series is None:
        return None, ""
    queue, ttft = series.histogram_increase(QUEUE_SERIES), series.histogram_increase(TTFT_SERIES)
    known = queue is not None and ttft is not None and min(queue.count, ttft.count) >= 5
    if known and queue.mean is not None and ttft.mean:
        names = [f"{n} ({series.sources.get(n)})" for n in (QUEUE_SERIES, TTFT_SERIES)]
        return queue.mean / ttft.mean, f"server: {names[0]} ÷ {names[1]} (means)"
    return None, ""


def _arrival_ttfts(ctx: Context) -> tuple[tuple[float, float], np.ndarray, np.ndarray] | None:
    """The sending's thirds, and each completed request's intended send and TTFT."""
    thirds = _thirds(ctx)
    done = ctx.view.completed
    if thirds is None or len(done) < 6:
        return None
    intended = ctx.view.column("intended_s", done)
    return thirds, intended, ctx.view.column("first_token_s", done) - intended


def _ttft_growth(ctx: Context) -> float | None:
    found = _arrival_ttfts(ctx)
    if found is None:
        return None
    thirds, intended, ttft = found
    early = ttft[intended <= thirds[0]]
    late = ttft[intended >= thirds[1]]
    early, late = early[np.isfinite(early)], late[np.isfinite(late)]
    if not early.size or not late.size or np.median(early) <= 0:
        return None
    return float(np.median(late) / np.median(early))


def _next(ctx: Context, rates: Rates | None) -> str:
    if rates is None or not rates.served:
        return "Rerun with a lower --rate and compare: the queue must stay flat."
    rate = round(SERVED_SHARE * rates.served, 2)
    rerun = bench_command(ctx.view, load={"rate": rate})
    return (
        f"Measure the capacity: rerun at {rate:g} req/s (below the {rates.served:.3g} served) "
        f"and check that the waiting queue stays flat: {rerun}"
    )


def _queued_seconds(ctx: Context, finding: Finding) -> Cost | None:
    """Request-seconds spent waiting (module docstring)."""
    series = ctx.view.server
    queue = series.histogram_increase(QUEUE_SERIES) if series is not None else None
    if series is not None and queue is not None and queue.count and queue.sum is not None:
        source = f"{QUEUE_SERIES} ({series.sources.get(QUEUE_SERIES)})"
        how = f"server: {source} (sum over {queue.count:.0f} requests)"
        return Cost(float(queue.sum), how)
    found = _arrival_ttfts(ctx)
    if found is None:
        return None
    thirds, intended, ttft = found
    early = ttft[(intended <= thirds[0]) & np.isfinite(ttft)]
    if not early.size:
        return None
    excess = np.clip(ttft[np.isfinite(ttft)] - float(np.median(early)), 0.0, None)
    return Cost(
        float(excess.sum()),
        f"{CLIENT}: TTFT beyond the first third's median, summed over {excess.size} requests",
    )


def _depth(ctx: Context, growth: float | None) -> float | None:
    """The queue's depth: the server's peak waiting requests, else the queue's growth."""
    series = ctx.view.server
    if series is not None:
        peak = series.level(Series.WAITING).max
        if peak is not None:
            return float(peak)
    return growth


def overload_strength(shortfall: float | None, depth: float | None) -> float | None:
    """The module docstring's strength: the gap past its threshold × √(depth in units of
    ``QUEUE_GROWTH``, at least 1)."""
    if not shortfall:
        return None
    return shortfall * SERVED_SHARE * max(1.0, (depth or 0.0) / QUEUE_GROWTH) ** 0.5


def queue_is_h4s(findings: Mapping[str, Finding]) -> bool:
    """Whether H4 stands on the waiting queue the overload builds (a full pool, requests
    waiting), not on preemptions: a pool that evicted running sequences ran out of blocks
    for the requests it ran, which a queue in front of it does not explain."""
    memory = findings.get("H4")
    if memory is None:
        return False
    preempted = memory.figure(Series.PREEMPTIONS)
    return not (preempted is not None and preempted > 0)


@hypothesis(
    id="OL",
    title=TITLE,
    role="root",
    order=5,
    precedence=1,
    explains={"H4": Link("the queue the overload builds is what H4 sees waiting", queue_is_h4s)},
    reads_latency=True,
    measure_first="Measure the capacity before tuning the server",
    contain="shed",
    cost=_queued_seconds,
)
def assess(ctx: Context) -> Finding:
    offered = offered_rate(ctx)
    if offered is None:
        return Finding(
            "OL",
            TITLE,
            Status.NOT_APPLICABLE,
            "A closed loop sends only when answered: it cannot offer more than is served.",
            next=_next(ctx, None),
        )
    arrivals = len(ctx.view.requests)
    if arrivals < MIN_ARRIVALS:
        return Finding(
            "OL",
            TITLE,
            Status.INCONCLUSIVE,
            f"Too few arrivals ({arrivals}) to measure a rate against the offer.",
            [Evidence("offered rate", offered, "req/s", "run.json (workload)")],
            [f"at least {MIN_ARRIVALS} requests"],
            _next(ctx, None),
        )
    mixed = not open_loop_only(ctx)
    served, how = (None, "") if mixed else _served_rate(ctx)
    rates = Rates(offered, served)
    evidence = [Evidence("offered rate", offered, "req/s", "run.json (workload)")]
    missing: list[str] = []
    if mixed:
        missing.append(
            "a served rate: closed-loop streams ran beside the arrivals, so completions "
            "do not count arrivals served (the server's queue still shows overload)"
        )
    if rates.served is not None:
        evidence.append(
            Evidence(
                "served rate while arrivals continued",
                rates.served,
                "req/s",
                CLIENT,
                how,
            )
        )
    else:
        missing.append(f"{MIN_COMPLETIONS} completions while arrivals continued")
    growth, growth_source = _queue_growth(ctx)
    if growth is not None:
        evidence.append(
            Evidence(
                "queue growth over the sending",
                growth,
                "requests",
                growth_source,
                "mean of the last third minus the first third",
            )
        )
    share, share_source = _queue_share(ctx)
    if share is not None:
        evidence.append(Evidence("share of TTFT spent queued", 100 * share, "%", share_source))
    ttft_growth = _ttft_growth(ctx)
    if ttft_growth is not None:
        evidence.append(
            Evidence(
                "TTFT growth over the sending",
                ttft_growth,
                "x",
                CLIENT,
                "median TTFT of the last third of arrivals ÷ the first third's",
            )
        )
    behind = rates.shortfall is not None and rates.shortfall >= 1 / SERVED_SHARE
    grows = growth is not None and growth >= QUEUE_GROWTH
    queued = (share is not None and share >= QUEUE_SHARE) or (
        share is None and ttft_growth is not None and ttft_growth >= TTFT_GROWTH
    )
    strength = overload_strength(rates.shortfall, _depth(ctx, growth))
    basis = "server" if growth_source.startswith("server") or share is not None else "client"
    signs = [
        text
        for text, present in (
            (f"served {rates.served or 0:.3g} of {offered:.3g} req/s", behind),
            (f"the queue grew by {growth or 0:.0f} requests", grows),
            ("TTFT was mostly waiting", queued),
        )
        if present
    ]
    if behind and (grows or queued):
        status = Status.SUPPORTED
        summary = (
            f"Overloaded: {', '.join(signs)}. Every latency figure includes this queueing; "
            "no chunk size or cache policy removes it."
        )
    elif signs:
        status = Status.WEAKENED
        summary = f"Signs of queueing ({', '.join(signs)}), but not all readings agree."
    elif rates.served is None and growth is None:
        status, summary = Status.INCONCLUSIVE, "Too few completions to compare with the offer."
    else:
        status = Status.NOT_SUPPORTED
        summary = f"The server kept up with the {offered:.3g} req/s offered; no growing queue."
    return Finding(
        "OL",
        TITLE,
        status,
        summary,
        evidence,
        missing,
        _next(ctx, rates),
        strength=strength,
        basis=basis,
    )
