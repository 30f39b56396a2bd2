"""One plan, split across worker processes: which requests each sends, with how many users.

A request goes where its *unit* goes: every turn of a session together (a later turn is
built from the earlier turns' answers), every request of a prefix group together (so a
group's prefix is filled and hit in the order the oracle replayed it), any other request
on its own. Units are dealt, in plan order, to the shard with the fewest requests so far,
so the split is deterministic for a plan and the union of the shards is the plan, each
request once, with its own ``intended_s``: an open-loop schedule is the plan's exactly.

Closed-loop users (``concurrency``) and an open loop's ``--max-concurrency`` are split
exactly: the shards' shares sum to the number asked, in proportion to the requests each
shard holds (largest remainder), and a shard with requests gets at least one user.

How many workers a run *needs* (``workers_needed``): the tokens per second it plans to
stream against what one core sustains (``TOKENS_PER_CORE_S``, measured with
``benchmarks/loadgen_overhead.py``) at half load, so a worker keeps headroom for bursts.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, replace

from workloads.plan import PackedRequests, Plan, RequestSpec

#: Streamed tokens per second one worker core sustains before it is client-limited
#: (46-49 µs of CPU per token measured against an SSE mock, about 20k/s).
TOKENS_PER_CORE_S = 20_000.0
#: Share of that a worker is planned to use (the rest is headroom for bursts).
CORE_LOAD_SHARE = 0.5
#: Tokens per second one closed-loop stream is assumed to receive (a fast decode).
STREAM_TOKENS_PER_S = 100.0
#: Fewer measured requests than this always run in one process (start-up would dominate).
SMALL_RUN = 64


@dataclass
class Shard:
    """The requests one worker sends, in plan order, and the users it runs them with."""

    index: int
    requests: Sequence[RequestSpec]  # a view on the plan's (``PackedRequests.select``)
    concurrency: int | None
    max_concurrency: int | None

    def plan(self, whole: Plan) -> Plan:
        """This shard's requests as a plan of their own (the whole plan's other fields),
        packed anew: a worker is sent its own requests, not the whole plan's store."""
        return replace(
            whole, requests=PackedRequests.pack(self.requests), concurrency=self.concurrency
        )


def unit_of(spec: RequestSpec) -> tuple[str, object]:
    """What must stay in one worker with ``spec``: its session, else its group, else itself."""
    if spec.session is not None:
        return ("session", spec.session)
    if spec.group is not None and not spec.warmup:
        return ("group", spec.group)
    return ("request", spec.id)


def split_exactly(total: int, weights: list[int]) -> list[int]:
    """``total`` split in proportion to ``weights`` (largest remainder), summing to
    ``total``; every positive weight gets at least 1 when ``total`` allows it."""
    positive = [i for i, w in enumerate(weights) if w > 0]
    shares = [0] * len(weights)
    if not positive or total <= 0:
        return shares
    floor = 1 if total >= len(positive) else 0
    for i in positive:
        shares[i] = floor
    rest = total - floor * len(positive)
    weight = sum(weights[i] for i in positive)
    exact = {i: rest * weights[i] / weight for i in positive}
    for i in positive:
        shares[i] += math.floor(exact[i])
    left = total - sum(shares)
    for i in sorted(positive, key=lambda i: (math.floor(exact[i]) - exact[i], i))[:left]:
        shares[i] += 1
    return shares


def split_plan(plan: Plan, workers: int | None, max_concurrency: int | None = None) -> list[Shard]:
    """``plan`` as ``workers`` shards (fewer when it has fewer units or users than that;
    None: as many as its token rate needs, ``workers_needed``)."""
    workers = workers or workers_needed(plan, max_concurrency=max_concurrency)
    units: dict[tuple[str, object], list[int]] = {}  # a unit's requests by plan index
    closed_loop: list[bool] = []
    for i, spec in enumerate(plan):
        units.setdefault(unit_of(spec), []).append(i)
        closed_loop.append(spec.intended_s is None and not spec.warmup)
    n = max(1, min(workers, *_worker_limits(plan, len(units), max_concurrency).values()))
    buckets: list[list[int]] = [[] for _ in range(n)]
    for members in units.values():
        min(buckets, key=len).extend(members)
    for bucket in buckets:  # plan order within each shard
        bucket.sort()
    closed = [sum(closed_loop[i] for i in b) for b in buckets]
    users = split_exactly(plan.concurrency, closed) if plan.concurrency else [None] * n
    sizes = [len(b) for b in buckets]
    caps = split_exactly(max_concurrency, sizes) if max_concurrency else [None] * n
    return [
        Shard(i, plan.requests.select(buckets[i]), users[i] or None, caps[i] or None)
        for i in range(n)
        if buckets[i]
    ]


def _worker_limits(plan: Plan, units: int, max_concurrency: int | None) -> dict[str, int]:
    """What bounds the number of shards, each with its count: the units to deal out, the
    closed-loop users, the ``--max-concurrency`` slots (every shard needs one of each)."""
    limits = {"sessions, prefix groups or lone requests": units}
    if plan.concurrency:
        limits["closed-loop users"] = plan.concurrency
    if max_concurrency:
        limits["--max-concurrency slots"] = max_concurrency
    return limits


def fewer_workers_reason(
    plan: Plan, asked: int | None, max_concurrency: int | None = None
) -> str | None:
    """What keeps a run given ``--workers asked`` to fewer processes (``only 2 closed-loop
    users``: the limits of ``split_plan`` below ``asked``), or None when it runs as many."""
    if asked is None:
        return None
    units = len({unit_of(spec) for spec in plan})
    limits = _worker_limits(plan, units, max_concurrency)
    why = " and ".join(f"{count} {what}" for what, count in limits.items() if count < asked)
    return f"only {why}" if why else None


def fewer_workers_note(
    plan: Plan, asked: int | None, shards: int, max_concurrency: int | None = None
) -> str | None:
    """Why a run given ``--workers asked`` runs in fewer processes (``shards``), or None."""
    reason = fewer_workers_reason(plan, asked, max_concurrency)
    return f"--workers {asked}: {shards} run this plan, which has {reason}" if reason else None


def planned_tokens_per_s(plan: Plan, max_concurrency: int | None = None) -> float:
    """Tokens per second the plan streams: an open loop's rate times its mean output
    (requests all due at once: each a stream), a closed loop's users, each stream at
    ``STREAM_TOKENS_PER_S``; no more streams than ``max_concurrency``."""
    measured = plan.measured
    if not measured:
        return 0.0
    times = sorted(r.intended_s for r in measured if r.intended_s is not None)
    tokens = (plan.concurrency or 0) * STREAM_TOKENS_PER_S
    if len(times) > 1 and times[-1] > times[0]:
        mean_out = sum(r.max_tokens for r in measured) / len(measured)
        tokens += (len(times) - 1) / (times[-1] - times[0]) * mean_out
    else:
        tokens += len(times) * STREAM_TOKENS_PER_S
    if max_concurrency is not None:
        tokens = min(tokens, max_concurrency * STREAM_TOKENS_PER_S)
    return tokens


def available_cores() -> int:
    """CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def workers_needed(plan: Plan, cores: int | None = None, max_concurrency: int | None = None) -> int:
    """The default ``--workers``: as many as the planned token rate needs at
    ``CORE_LOAD_SHARE`` of ``TOKENS_PER_CORE_S`` each, up to the cores; 1 for a small run."""
    if len(plan.measured) < SMALL_RUN:
        return 1
    per_worker = TOKENS_PER_CORE_S * CORE_LOAD_SHARE
    needed = math.ceil(planned_tokens_per_s(plan, max_concurrency) / per_worker)
    return max(1, min(needed, cores or available_cores()))
