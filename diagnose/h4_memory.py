"""H4: KV pool exhaustion — or only its reservation.

Engines preallocate the KV pool at start, so "GPU memory at 98 %" is what a healthy
server looks like. Exhaustion is something else, with its own evidence:

* **preemptions** (``vllm:num_preemptions_total`` and equivalents): a running sequence
  was evicted for lack of blocks and will be recomputed;
* a **waiting queue** while the **active** share of the pool (blocks pinned by running
  requests — vLLM's ``kv_cache_usage_perc``) is near 100 %.

Against it: no preemptions, an empty or budget-bound queue, and a pool whose blocks are
mostly reclaimable (cached prefixes, re-hittable or evictable at will) or free — the
pool breakdown with its provenance (``probes.pool``: measured, derived or unknown). Then
the finding says so in words: reservation, not exhaustion. Exhaustion seen in the
counters is still a correlation with the latency; a rerun at a lower concurrency, or
with a larger pool, confirms it.

**What it costs.** A preemption throws a sequence's KV away; it is computed again. The
tokens recomputed are estimated as preemptions × the mean sequence at preemption (its
prompt and half its output), and their cost is ``diagnose.costs.recompute_cost`` — the
same unit as the prefix cache's lost reuse, so a pool that thrashes and preempts is
weighed on what each did. Any preemption is exhaustion (strength 1, at the threshold);
how far past it is that recomputed share of the prompt work over ``RECOMPUTE_SHARE``, so
one preemption among hundreds of requests is a weak primary, not a strong one.

**What it explains.** Recomputed sequences are prefills: more of the mixed steps H1
blames. But a step's stretch is set by its chunk, not by why the chunk is there, so H4
explains H1 only when the recompute is most of the prefill computed (the recomputed
tokens at least ``EXPLAINS_PREFILL`` of them and the fresh prompt tokens together):
with fewer, the admissions alone stretch the steps as much, and a larger pool would
leave H1 standing (seen: an A100 at budget 512, 8 preemptions recomputing 38 % of the
prefill; the same run on a pool that never preempted: H1 at 1.2× its threshold).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from diagnose.context import Context
from diagnose.costs import recompute_cost
from diagnose.next_steps import bench_command, report_command, server_flavour
from diagnose.registry import Cost, Link, hypothesis
from diagnose.words import concurrency_knob, percent
from probes.normalise import ServerSeries
from runfmt.diagnosis import Evidence, Finding, Status
from runfmt.series import Series
from runfmt.summary_server import Level

TITLE = "KV pool exhaustion (vs reservation)"
#: Active share of the pool from which a waiting queue counts as memory-bound.
FULL_SHARE = 0.95
#: Waiting requests that make a queue (one is a request caught between arrival and step).
QUEUE = 2
#: Share of the prompt work recomputed by preemptions that counts as past the threshold.
RECOMPUTE_SHARE = 0.05
#: Share of the prefill computed (fresh prompt tokens plus the recompute) the recompute
#: must reach for H4 to explain H1: most stretched steps are then recomputes.
EXPLAINS_PREFILL = 0.5
#: The evidence that carries that share (percent).
RECOMPUTED_SHARE = "recomputed share of the prefill"


def _source(level: Level) -> str:
    return f"server: {level.source or 'unknown'} ({level.provenance})"


def _gpu_memory(ctx: Context) -> Evidence | None:
    gpu = ctx.view.gpu
    if gpu.empty or not {"memory_used_bytes", "memory_total_bytes"} <= set(gpu.columns):
        return None
    used = gpu["memory_used_bytes"].to_numpy(dtype=float)
    total = gpu["memory_total_bytes"].to_numpy(dtype=float)
    ok = np.isfinite(used) & np.isfinite(total) & (total > 0)
    if not ok.any():
        return None
    peak = float(np.max(used[ok] / total[ok]))
    return Evidence(
        "GPU memory used (peak)",
        100 * peak,
        "%",
        "gpu: NVML memory used / total",
        "a preallocated KV pool makes this high by design",
    )


def _pool_evidence(series: ServerSeries) -> tuple[list[Evidence], dict[str, float | None]]:
    """Pool buckets as shares of the pool: active at its peak, the others on average."""
    total = series.latest("pool_total").value
    shares: dict[str, float | None] = {}
    out: list[Evidence] = []
    for bucket, stat in (("active", "max"), ("reclaimable", "mean"), ("free", "mean")):
        level = series.level(f"pool_{bucket}")
        value = getattr(level, stat)
        share = value / total if value is not None and total else None
        shares[bucket] = share
        if share is not None:
            known = (
                f"; known in {level.samples} of {level.scrapes} scrapes"
                if (level.samples or 0) < (level.scrapes or 0)
                else ""
            )
            out.append(
                Evidence(
                    f"{bucket} blocks ({'peak' if stat == 'max' else 'mean'})",
                    100 * share,
                    "% of pool",
                    _source(level),
                    f"{value:.0f} of {total:.0f} blocks{known}",
                )
            )
    return out, shares


def recomputed_tokens(ctx: Context, preemptions: float) -> float:
    """Tokens the preemptions recomputed: each the mean sequence at preemption (its prompt
    and half its output, over the completed requests)."""
    done = ctx.view.completed
    prompt = ctx.view.column("prompt_tokens", done)
    output = ctx.view.column("output_tokens", done)
    ok = np.isfinite(prompt)
    if not ok.any():
        return float("nan")
    half = np.where(np.isfinite(output), output / 2.0, 0.0)
    return float(preemptions * np.mean((prompt + half)[ok]))


def recomputed_share(ctx: Context, preemptions: float) -> float | None:
    """The preemptions' recomputed tokens over the prefill computed: the fresh prompt
    tokens of the completed requests and the recompute together."""
    recomputed = recomputed_tokens(ctx, preemptions)
    fresh = float(np.nansum(ctx.view.fresh_tokens(ctx.view.completed)))
    if not np.isfinite(recomputed) or fresh + recomputed <= 0:
        return None
    return recomputed / (fresh + recomputed)


def recompute_makes_the_prefill(findings: Mapping[str, Finding]) -> bool:
    """Whether H4's recompute is most of the prefill H1 blames (``EXPLAINS_PREFILL``)."""
    memory = findings.get("H4")
    share = memory.figure(RECOMPUTED_SHARE) if memory is not None else None
    return share is not None and share >= 100 * EXPLAINS_PREFILL


def _cost(ctx: Context, finding: Finding) -> Cost | None:
    """The preemptions' recomputed tokens (``recompute_cost``); a queue alone costs
    nothing here: overload's queueing is counted by OL."""
    count = finding.figure(Series.PREEMPTIONS) or 0.0
    if not count:
        return None
    return recompute_cost(
        ctx, recomputed_tokens(ctx, count), f"tokens recomputed by {count:.0f} preemptions"
    )


def _strength(ctx: Context, preemptions: float) -> float:
    """1 at any preemption; past it, the recomputed share of prompt work over
    ``RECOMPUTE_SHARE``."""
    prompt = ctx.view.column("prompt_tokens", ctx.view.completed)
    total = float(np.nansum(prompt))
    recomputed = recomputed_tokens(ctx, preemptions)
    if total <= 0 or not np.isfinite(recomputed):
        return 1.0
    return max(1.0, recomputed / total / RECOMPUTE_SHARE)


@hypothesis(
    id="H4",
    title=TITLE,
    role="root",
    order=4,
    precedence=2,
    explains={
        "H1": Link(
            "preempted sequences are recomputed as prefills, most of the prefill computed",
            recompute_makes_the_prefill,
        )
    },
    measure_first="Measure at a lower load before changing cache policy",
    cost=_cost,
)
def assess(ctx: Context) -> Finding:
    series = ctx.view.server
    evidence: list[Evidence] = []
    missing: list[str] = []
    gpu = _gpu_memory(ctx)
    if gpu is not None:
        evidence.append(gpu)
    next_step = (
        f"`{report_command(ctx.view)}` shows the pool stacked over time; to test exhaustion, "
        f"rerun at a lower concurrency and compare: {_lower_load(ctx)}"
    )
    if series is None:
        missing.append("server metrics (none were scraped or understood)")
        return Finding(
            "H4",
            TITLE,
            Status.INCONCLUSIVE,
            "No server metrics: preemptions, the waiting queue and the pool are unknown.",
            evidence,
            missing,
            next_step,
        )
    preempt = series.increase(Series.PREEMPTIONS)
    waiting = series.level(Series.WAITING)
    usage = series.level(Series.KV_USAGE)
    if preempt.known:
        evidence.append(
            Evidence(Series.PREEMPTIONS, preempt.value, "", f"server: {preempt.source} (increase)")
        )
        share = recomputed_share(ctx, preempt.value) if preempt.value else None
        if share is not None:
            evidence.append(
                Evidence(
                    RECOMPUTED_SHARE,
                    100 * share,
                    "%",
                    f"server: {preempt.source} × client: requests",
                    "preemptions × the mean sequence (prompt and half its output) over those "
                    "tokens and the fresh prompt tokens",
                )
            )
    else:
        missing.append(f"preemptions ({preempt.source})")
    if waiting.max is not None:
        evidence.append(Evidence("waiting requests (max)", waiting.max, "", _source(waiting)))
    else:
        missing.append("the waiting queue (not exposed)")
    if usage.max is not None:
        evidence.append(
            Evidence("active share of pool (peak)", 100 * usage.max, "%", _source(usage))
        )
    pool, shares = _pool_evidence(series)
    evidence += pool
    if shares.get("reclaimable") is None and usage.max is not None:
        missing.append("reclaimable vs free blocks (the server counts them together)")
    active_peak = usage.max if usage.max is not None else shares.get("active")
    full = active_peak is not None and active_peak >= FULL_SHARE
    queued = (waiting.max or 0) >= QUEUE
    if preempt.value:
        status, summary = (
            Status.SUPPORTED,
            (
                f"Correlation, not proof: the pool ran out — {preempt.value:.0f} preemptions "
                "(sequences evicted and recomputed)."
            ),
        )
    elif queued and full:
        status, summary = (
            Status.SUPPORTED,
            (
                f"Correlation, not proof: requests waited (up to {waiting.max:.0f}) while "
                f"{percent(active_peak)} of the pool was pinned by running requests."
            ),
        )
    elif not preempt.known and active_peak is None:
        status, summary = Status.INCONCLUSIVE, "Neither preemptions nor pool usage are exposed."
    else:
        limit = concurrency_knob(server_flavour(ctx.view))
        status, summary = Status.NOT_SUPPORTED, _reservation(shares, active_peak, waiting, limit)
    # Any preemption is exhaustion, read on the server; past it, what it recomputed.
    strength = (
        _strength(ctx, preempt.value)
        if preempt.value
        else (active_peak / FULL_SHARE if active_peak is not None else None)
    )
    return Finding(
        "H4",
        TITLE,
        status,
        summary,
        evidence,
        missing,
        next_step,
        strength=strength,
        basis="server",
    )


def _reservation(
    shares: dict[str, float | None],
    active_peak: float | None,
    waiting: Level,
    limit: str,
) -> str:
    """Why requests waited with the pool not full; ``limit`` names the server's own cap on
    requests at once (``concurrency_knob``)."""
    parts = ["no preemptions"]
    if active_peak is not None:
        parts.append(f"at most {percent(active_peak)} of blocks active")
    if shares.get("reclaimable") is not None and shares.get("free") is not None:
        parts.append(
            f"on average {percent(shares['reclaimable'])} reclaimable and "
            f"{percent(shares['free'])} free"
        )
    queue = (
        f"; requests waited (up to {waiting.max:.0f}) with the pool not full: the token "
        f"budget or {limit}, not memory, held them"
        if (waiting.max or 0) >= QUEUE
        else "; no waiting queue"
    )
    return f"Reservation, not exhaustion: {', '.join(parts)}{queue}."


def _lower_load(ctx: Context) -> str:
    load = ctx.view.spec.load if ctx.view.spec is not None else None
    if load is not None and load.concurrency:
        return bench_command(ctx.view, load={"concurrency": max(1, load.concurrency // 2)})
    if load is not None and load.rate:
        return bench_command(ctx.view, load={"rate": float(load.rate) / 2})
    return bench_command(ctx.view) + " --max-concurrency N"
