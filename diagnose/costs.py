"""What each cause costs: the latency a finding explains, in one unit, so causes compare.

The unit is the **request-second**: a second of latency added to one request, summed
over the measured requests. Every cause is brought to it the same way:

* **server time spent on work that should not have been done** (prefill tokens a
  cache should have served, tokens a preemption threw away and recomputed) delays every
  request in flight while it runs: its seconds × the mean number of requests in flight
  (``in_flight``). The seconds are the tokens × the prefill cost per token
  (``prefill_s_per_token``: the roofline's, at the chunk the runs' prompts fill, else
  the server's prefill phase time over the fresh tokens it computed);
* **a share of each decode step** (the mixed steps' stretch, host work, KV reads) costs
  that share of every request's decode time: the share × the sum of the decode gaps
  the client saw (``decode_seconds``, request-seconds by construction);
* **queueing** is request-seconds already: the server's queue-time histogram's sum,
  else each request's TTFT beyond the first third's median (``overload``).

The figures are estimates of the same kind as ``Finding.impact`` — a ranking needs to
know which cause costs more, not the exact seconds — and each says how it was reckoned
(``Cost.how``). A cause whose cost cannot be reckoned has none, and the ranking falls
back to its declared order (``diagnose.ranking``).
"""

from __future__ import annotations

import numpy as np

from diagnose.context import Context
from diagnose.registry import Cost
from perfmodel.costmodel import StepShape, attended_pairs
from runfmt.diagnosis import Finding
from runfmt.series import Hist
from runtime.quantiles import finite

#: The canonical histogram of each request's prefill time (``probes.canonical``).
PREFILL_TIME = Hist.PREFILL_TIME


def in_flight(ctx: Context) -> float:
    """Mean measured requests in flight (sent, not yet ended) over the run's span."""
    sent, end = ctx.view.column("sent_s"), ctx.view.column("end_s")
    ok = np.isfinite(sent) & np.isfinite(end)
    if not ok.any():
        return 0.0
    span = float(end[ok].max() - sent[ok].min())
    return float((end[ok] - sent[ok]).sum() / span) if span > 0 else 0.0


def decode_seconds(ctx: Context) -> float:
    """Request-seconds of decoding: the sum of every decode gap the client saw."""
    gaps = np.asarray(ctx.gaps.gap_s, dtype=float)
    return float(gaps[np.isfinite(gaps)].sum())


def prefill_s_per_token(ctx: Context) -> tuple[float | None, str]:
    """Seconds of prefill per prompt token, and where the figure came from."""
    fresh = finite(ctx.view.fresh_tokens())
    if ctx.roofline is not None and fresh.size:
        budget, _ = ctx.budget
        chunk = int(max(1, min(budget or np.inf, float(np.median(fresh)))))
        shape = StepShape(
            prefill_tokens=chunk, prefill_pairs=attended_pairs(chunk, 0), num_running=1
        )
        seconds = ctx.roofline.cost.step_time(shape) * ctx.roofline.time_scale / chunk
        return seconds, f"{ctx.roofline.label}, a {chunk}-token chunk"
    series = ctx.view.server
    prefill = series.histogram_increase(PREFILL_TIME) if series is not None else None
    if series is not None and prefill is not None and prefill.count and fresh.sum() > 0:
        source = f"{PREFILL_TIME} ({series.sources.get(PREFILL_TIME)})"
        return prefill.sum / float(fresh.sum()), f"server: {source} ÷ fresh tokens"
    return None, "no roofline and no prefill time from the server"


def recompute_cost(ctx: Context, tokens: float, what: str) -> Cost | None:
    """The request-seconds of ``tokens`` prompt tokens computed again (module docstring)."""
    per_token, source = prefill_s_per_token(ctx)
    flight = in_flight(ctx)
    if per_token is None or not np.isfinite(tokens) or flight <= 0:
        return None
    seconds = tokens * per_token
    return Cost(
        seconds * flight,
        f"{tokens:,.0f} {what} × {per_token * 1e6:.3g} µs/token ({source}) = {seconds:.3g} s "
        f"of server time, × {flight:.2g} requests in flight",
    )


def decode_share_cost(ctx: Context, finding: Finding) -> Cost | None:
    """A step-level finding's share of each decode step × the run's decode time."""
    if finding.impact is None:
        return None
    total = decode_seconds(ctx)
    if total <= 0:
        return None
    return Cost(
        finding.impact * total,
        f"{finding.impact:.1%} of each decode step × {total:.3g} request-s of decode gaps",
    )
