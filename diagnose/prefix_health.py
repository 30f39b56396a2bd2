"""Prefix-cache health: the observed hit rate against what the workload allowed, and why.

Four figures, each a share of prompt tokens over the completed measured requests:

* **observed** — the server's ``cached_tokens`` per request (or, when it reports none,
  its prefix counters: Δhits / Δqueries);
* **expected** — the oracle's expectation for the pool the server has and the scopes
  the requests were sent with (``expected_cached_tokens``, written by bench);
* **unbounded** and **unscoped** — the same plan through an ideal pool, with and
  without the scopes (``diagnose.oracle_replay``).

The verdict, first match wins:

1. *caching off*: the server says prefix caching is disabled, or counted no prefix
   queries while prompts were processed;
2. *unknown*: no per-request ``cached_tokens`` and no prefix counters;
3. *identity mismatch*: the content allowed reuse the scopes forbade — a per-request
   salt (nearly every request its own tenant or adapter) with unscoped ≫ unbounded;
   or the server found far less than the oracle for its own pool with no evictions to
   explain it (the server's block identity differs from the client's: a timestamp in
   the prompt, another block size, an unexpected salt);
4. *thrashing*: far below the unbounded ideal, with evictions, and a pool smaller than
   the working set (shared blocks + blocks of the requests in flight);
5. *as expected*: otherwise, when observed is within ``TOLERANCE`` of expected (or
   above it: a warm cache from an earlier run).

**What it costs** is the reuse lost: (the best hit rate the workload allowed − the
observed) × the prompt tokens, recomputed (``diagnose.costs.recompute_cost``) — the
unit H4's preemptions are weighed in. **One root cause**: when the cache thrashes
because the pool is smaller than the working set, the same pool is the one running
requests ran out of (H4's preemptions) and the prefill H1 blames is its recomputation;
the finding then names the pool size as the cause (``pool_cause``), and its next step
changes that cause: a pool that holds the working set, or fewer or shorter prefixes
that fit the pool (never a lower rate: the prefixes' own blocks do not shrink with it).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from diagnose.context import Context
from diagnose.costs import recompute_cost
from diagnose.next_steps import bench_command, server_flavour
from diagnose.oracle_replay import Replay, replay_oracle
from diagnose.registry import Cost, Link, hypothesis
from diagnose.words import percent, prefix_cache_knob, reporting_flags
from runfmt.diagnosis import CacheHealth, Evidence, Finding, Status
from runfmt.series import Series

TITLE = "Prefix-cache health"
#: The canonical count of blocks the prefix cache evicted.
EVICTIONS = Series.PREFIX_EVICTIONS
#: Hit-rate difference (share of prompt tokens) that counts as a real shortfall.
TOLERANCE = 0.1
#: Share of prompt tokens a cache problem must lose to be a cause worth its own action.
LOST_SHARE = 2 * TOLERANCE
#: Share of requests with their own tenant/adapter that makes a scope per-request.
PER_REQUEST_SHARE = 0.5
CLIENT = "client: requests"


def _rate(cached: np.ndarray, prompt: np.ndarray) -> float | None:
    known = np.isfinite(cached) & np.isfinite(prompt)
    total = prompt[known].sum()
    return float(cached[known].sum() / total) if known.any() and total > 0 else None


def _distinct_share(ctx: Context, column: str) -> float | None:
    """Share of requests whose ``column`` value (tenant, lora) no other request has."""
    done = ctx.view.completed
    if column not in done.columns or done[column].isna().all():
        return None
    values = done[column].dropna().astype(str)
    counts = values.map(values.value_counts())
    return float((counts == 1).sum() / len(done))


def _server_rate(ctx: Context) -> tuple[float | None, Evidence | None]:
    """The server's own count over the scrape window (warm-up included): Δhits / Δqueries."""
    series = ctx.view.server
    if series is None:
        return None, None
    hits, queries = series.increase(Series.PREFIX_HITS), series.increase(Series.PREFIX_QUERIES)
    if hits.value is None or not queries.value:
        return None, None
    rate = hits.value / queries.value
    return rate, Evidence(
        "server-counted hit rate",
        100 * rate,
        "%",
        f"server: Δ{hits.source} / Δ{queries.source}",
        f"{queries.value:.0f} tokens queried; counters span the whole scrape window, "
        "warm-up included",
    )


def _observed(ctx: Context) -> tuple[float | None, list[Evidence]]:
    """The observed hit rate: per-request ``cached_tokens`` when the server reported
    them, else its prefix counters; the evidence for both when both exist."""
    done = ctx.view.completed
    rate = _rate(ctx.view.column("cached_tokens", done), ctx.view.column("prompt_tokens", done))
    server, counted = _server_rate(ctx)
    evidence = [] if counted is None else [counted]
    if rate is not None:
        source = f"{CLIENT} (Σ cached_tokens / Σ prompt_tokens, server-reported)"
        return rate, [Evidence("observed hit rate", 100 * rate, "%", source), *evidence]
    return server, evidence


def _caching_off(ctx: Context) -> str | None:
    engine = ctx.view.engine or {}
    if engine.get("enable_prefix_caching") is False:
        return "run.json: the embedded engine ran with enable_prefix_caching=false"
    series = ctx.view.server
    if series is None:
        return None
    flag = series.latest(Series.PREFIX_CACHING)
    if flag.known and flag.value == 0:
        return f"server: {flag.source} = False"
    queries, prompts = series.increase(Series.PREFIX_QUERIES), series.increase(Series.PROMPT_TOKENS)
    if queries.known and queries.value == 0 and prompts.value:
        return f"server: {queries.source} did not move while {prompts.value:.0f} prompt tokens ran"
    return None


def _working_set(ctx: Context, replay: Replay) -> float:
    """Shared blocks, plus what the requests in flight (on average) hold of their own:
    the prompt tokens no other request shares and their output."""
    view = ctx.view
    sent, end = view.column("sent_s"), view.column("end_s")
    ok = np.isfinite(sent) & np.isfinite(end)
    span = (end[ok].max() - sent[ok].min()) if ok.any() else 0.0
    in_flight = float((end[ok] - sent[ok]).sum() / span) if span > 0 else 0.0
    output = np.nanmean(view.column("output_tokens")) if ok.any() else 0.0
    own = replay.own_tokens_per_request + (output if np.isfinite(output) else 0.0)
    return replay.shared_blocks + in_flight * own / replay.block_size


def _pool_blocks(ctx: Context) -> tuple[float | None, str]:
    series = ctx.view.server
    if series is not None:
        for name in ("pool_total", Series.NUM_BLOCKS):
            value = series.latest(name)
            if value.known:
                return value.value, f"server: {value.source}"
    blocks = ctx.view.info.oracle.num_blocks
    return (float(blocks), "run.json oracle geometry") if blocks else (None, "unknown")


def _value(f: Finding, prefix: str) -> float | None:
    found = next((e.value for e in f.evidence if e.name.startswith(prefix)), None)
    return float(found) if isinstance(found, int | float) else None


def _observed_value(cache: Finding) -> float | None:
    observed = _value(cache, "observed hit rate")
    return observed if observed is not None else _value(cache, "server-counted hit rate")


def lost_reuse_overloads(findings: Mapping[str, Finding]) -> bool:
    """Whether the reuse the cache lost is what overloaded the server: with the hit rate
    the workload allowed, the prompt work offered would fit in what was served
    (offered × (1 − allowed) ≤ served × (1 − observed), prompt tokens per request
    taken as equal)."""
    cache, load = findings.get("PC"), findings.get("OL")
    if cache is None or load is None or cache.strength is None:
        return False
    observed = _observed_value(cache)
    offered, served = _value(load, "offered rate"), _value(load, "served rate")
    if observed is None or offered is None or not served:
        return False
    allowed = observed / 100 + cache.strength * LOST_SHARE
    return offered * (1 - min(allowed, 1.0)) <= served * (1 - observed / 100)


def _pool_short(cache: Finding) -> tuple[float, float] | None:
    """(pool, working set) in blocks when the cache thrashes on a pool smaller than the
    working set."""
    pool, working = _value(cache, "KV pool"), _value(cache, "prefix working set")
    if cache.status != CacheHealth.THRASHING or pool is None or working is None:
        return None
    return (pool, working) if pool < working else None


def pool_exhausts(findings: Mapping[str, Finding]) -> bool:
    """Whether the pool too small for the working set is also the one the running
    requests ran out of: the cache thrashes on it and H4 counted preemptions."""
    cache, memory = findings.get("PC"), findings.get("H4")
    if cache is None or memory is None or _pool_short(cache) is None:
        return False
    preempted = _value(memory, Series.PREEMPTIONS)
    return memory.status == Status.SUPPORTED and bool(preempted)


def pool_cause(cache: Finding) -> str | None:
    """The one cause a thrashing cache names: the pool's size against the working set."""
    short = _pool_short(cache)
    if short is None:
        return None
    pool, working = short
    return (
        f"the KV pool size ({pool:,.0f} blocks, {percent(pool / working)} of the "
        f"{working:,.0f}-block working set)"
    )


def _cost(ctx: Context, finding: Finding) -> Cost | None:
    """The reuse lost, recomputed: (allowed − observed) × the prompt tokens."""
    if finding.strength is None:
        return None
    done = ctx.view.completed
    prompt = float(np.nansum(ctx.view.column("prompt_tokens", done)))
    lost = finding.strength * LOST_SHARE
    if prompt <= 0 or lost <= 0:
        return None
    what = f"prompt tokens a cache should have served ({lost:.0%})"
    return recompute_cost(ctx, lost * prompt, what)


@hypothesis(
    id="PC",
    title=TITLE,
    role="root",
    order=8,
    precedence=3,
    prefix_cache=True,
    explains={
        "OL": Link(
            "with the reuse the workload allowed, the prompt work offered would fit in what "
            "was served",
            lost_reuse_overloads,
        ),
        "H4": Link(
            "the pool too small for the prefixes' working set is the pool the running "
            "requests ran out of",
            pool_exhausts,
        ),
        "H1": "prefixes that are not reused are computed again: more of the prefill H1 blames",
    },
    measure_first="Fix the prefix cache first, then measure again",
    cost=_cost,
    root_cause=pool_cause,
)
def assess(ctx: Context) -> Finding:
    evidence: list[Evidence] = []
    missing: list[str] = []
    done = ctx.view.completed
    prompt = ctx.view.column("prompt_tokens", done)
    expected = _rate(ctx.view.column("expected_cached_tokens", done), prompt)
    observed, found = _observed(ctx)
    evidence += found
    if expected is not None:
        evidence.append(
            Evidence(
                "expected hit rate (oracle, this pool)",
                100 * expected,
                "%",
                f"{CLIENT} (Σ expected_cached_tokens, prefix oracle)",
            )
        )
    else:
        missing.append("the oracle's expected_cached_tokens")
    replay, why = replay_oracle(ctx.view)
    if replay is not None:
        evidence += [
            Evidence(
                "unbounded-pool hit rate (oracle)",
                100 * replay.unbounded_rate,
                "%",
                "prefix oracle replay of the rebuilt plan, same scopes, no eviction",
            ),
            Evidence(
                "unscoped hit rate (oracle)",
                100 * replay.unscoped_rate,
                "%",
                "prefix oracle replay, salts and adapters ignored",
            ),
        ]
    else:
        missing.append(f"the unbounded and unscoped oracle replays: {why}")
    series = ctx.view.server
    evicted = series.increase(EVICTIONS) if series is not None else None
    evictions = evicted.value if evicted is not None else None
    if evicted is not None and evictions is not None:
        source = f"server: {evicted.source or EVICTIONS}"
        evidence.append(Evidence("prefix-cache evictions", evictions, "blocks", source))
    else:
        missing.append(f"evictions ({EVICTIONS} not exposed)")
    for column in ("tenant", "lora"):
        share = _distinct_share(ctx, column)
        if share is not None:
            evidence.append(
                Evidence(
                    f"requests with a {column} no other request has",
                    100 * share,
                    "%",
                    f"{CLIENT} ({column})",
                    "cache_salt / adapter scopes per request",
                )
            )
    status, summary, next_step = _verdict(ctx, observed, expected, replay, evictions, evidence)
    if status == CacheHealth.UNKNOWN and observed is None:
        missing.append(
            "the observed hit rate: no cached_tokens per request and no prefix counters "
            f"({reporting_flags(server_flavour(ctx.view))})"
        )
    return Finding(
        "PC",
        TITLE,
        status,
        summary,
        evidence,
        missing,
        next_step,
        strength=_lost_reuse(status, observed, expected, replay),
        basis="server",
    )


def _lost_reuse(
    status: CacheHealth, observed: float | None, expected: float | None, replay: Replay | None
) -> float | None:
    """How much reuse a cache problem lost, over ``LOST_SHARE`` (None when healthy)."""
    if status not in (
        CacheHealth.THRASHING,
        CacheHealth.IDENTITY_MISMATCH,
        CacheHealth.CACHING_OFF,
    ):
        return None
    allowed = [expected]
    if replay is not None:
        allowed.append(replay.unbounded_rate)
        if status == CacheHealth.IDENTITY_MISMATCH:
            allowed.append(replay.unscoped_rate)
    known = [a for a in allowed if a is not None]
    if not known:
        return None
    return (max(known) - (observed or 0.0)) / LOST_SHARE


def _fit_pool(ctx: Context, pool: float, working: float, replay: Replay) -> str:
    """The next step of a pool smaller than the working set: change the pool or the
    prefixes, never the rate (the shared blocks do not shrink with the load)."""
    view = ctx.view
    if view.engine is not None:
        blocks = int(2 * working)  # the command and the sentence name one pool
        bigger = bench_command(view, engine={"num_gpu_blocks": blocks})
        pool_words = f"a pool of {blocks} blocks, twice the working set ({working:.0f})"
    else:
        bigger = (
            f"a KV pool of at least {working:.0f} blocks (more GPU memory for the KV cache: "
            "a higher memory utilisation, more GPUs or a smaller model), then "
            + bench_command(view)
        )
        pool_words = f"a pool that holds the working set ({working:.0f} blocks)"
    steps = [f"Compare with {pool_words}: {bigger}"]
    params = view.spec.params if view.spec is not None else None
    own = working - replay.shared_blocks  # the requests in flight's own blocks
    room = (pool - own) / replay.shared_blocks if replay.shared_blocks else 0.0
    groups = getattr(params, "groups", None)
    if isinstance(groups, int) and groups > 1 and 0 < room < 1 and int(groups * room) >= 1:
        fewer = max(1, int(groups * room))
        steps.append(
            f"or keep the pool and send fewer distinct prefixes ({fewer} of {groups} fit): "
            + bench_command(view, sets={"groups": fewer})
        )
    return " — ".join(steps)  # each command ends where the next sentence begins


def _verdict(
    ctx: Context,
    observed: float | None,
    expected: float | None,
    replay: Replay | None,
    evictions: float | None,
    evidence: list[Evidence],
) -> tuple[CacheHealth, str, str]:
    view = ctx.view
    off = _caching_off(ctx)
    if off is not None:
        allowed = f" (the workload allowed {percent(replay.unbounded_rate)})" if replay else ""
        return (
            CacheHealth.CACHING_OFF,
            f"Prefix caching is off{allowed}: {off}.",
            f"Enable it ({prefix_cache_knob(server_flavour(view))}) and compare the runs: "
            + bench_command(view, engine={"enable_prefix_caching": True}),
        )
    if observed is None:
        return (
            CacheHealth.UNKNOWN,
            "The server reported no cached tokens and no prefix counters.",
            f"{reporting_flags(server_flavour(view))}, and rerun with server metrics on.",
        )
    salted = max(
        (_distinct_share(ctx, c) or 0.0 for c in ("tenant", "lora")),
        default=0.0,
    )
    if (
        replay is not None
        and salted >= PER_REQUEST_SHARE
        and replay.unscoped_rate - replay.unbounded_rate >= TOLERANCE
    ):
        return (
            CacheHealth.IDENTITY_MISMATCH,
            f"Per-request scopes: {percent(salted)} of requests carry a salt/adapter no other "
            f"request has, so content that would hit {percent(replay.unscoped_rate)} of "
            f"prompt tokens hits {percent(observed)} (the scopes allow "
            f"{percent(replay.unbounded_rate)}).",
            "Scope the salt per tenant, not per request, and compare: "
            + bench_command(view, sets={"tenant_per": "group"}),
        )
    pool, pool_source = _pool_blocks(ctx)
    if replay is not None:
        working = _working_set(ctx, replay)
        evidence.append(
            Evidence(
                "prefix working set",
                working,
                "blocks",
                "oracle replay (shared blocks) + client (blocks in flight)",
                f"{replay.shared_blocks} blocks shared by ≥ 2 requests",
            )
        )
        if pool is not None:
            evidence.append(Evidence("KV pool", pool, "blocks", pool_source))
        short = replay.unbounded_rate - observed >= TOLERANCE and (
            observed < 0.7 * replay.unbounded_rate
        )
        # Without an eviction counter, the oracle's own finite pool losing the same
        # reuse is the evidence that blocks were evicted before they were hit again.
        evicting = (
            evictions > 0
            if evictions is not None
            else expected is not None and replay.unbounded_rate - expected >= TOLERANCE
        )
        if short and evicting and pool is not None and pool < working:
            return (
                CacheHealth.THRASHING,
                f"Thrashing: the workload allows {percent(replay.unbounded_rate)} with an "
                f"unbounded pool, the server hit {percent(observed)}; the pool "
                f"({pool:.0f} blocks) is smaller than the working set ({working:.0f})"
                + (f" and {evictions:.0f} cached blocks were evicted." if evictions else "."),
                _fit_pool(ctx, pool, working, replay),
            )
    if expected is not None and expected - observed >= TOLERANCE and not evictions:
        return (
            CacheHealth.IDENTITY_MISMATCH,
            f"The server hit {percent(observed)} where the oracle expects "
            f"{percent(expected)} for this pool, with no evictions to explain it: the "
            "server's block identity differs from the client's (a changing token such as a "
            "timestamp, another block size, or an extra salt).",
            "Check the prompts for per-request content before the shared prefix, and the "
            "server's block size against run.json's oracle geometry.",
        )
    if expected is None:
        return (
            CacheHealth.UNKNOWN,
            f"Observed {percent(observed)}, but no oracle expectation to judge it by.",
            "Rerun with prefillscope bench (it annotates every request with the oracle).",
        )
    above = (
        " (above: a warm cache from earlier traffic)" if observed - expected >= TOLERANCE else ""
    )
    return (
        CacheHealth.AS_EXPECTED,
        f"Observed {percent(observed)} against the oracle's {percent(expected)} for this "
        f"pool{above}.",
        "Nothing to change; `prefillscope compare` keeps it that way in CI.",
    )
